package shadow

import (
	"context"
	"slices"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/kgc-dev/kgc/internal/history"
	"github.com/kgc-dev/kgc/internal/metrics"
)

// Path is where a running kgc in shadow mode serves its comparison.
const Path = "/debug/controllers/garbage-collector-controller/shadow"

// DefaultWindow is how long a decision waits for its effect, and a change
// for its decision, by default (--shadow-window).
const DefaultWindow = 3 * time.Minute

// DefaultKeep is how many disagreements a Tracker keeps by default.
const DefaultKeep = 1000

// class is what a key is about.
type class uint8

const (
	classDelete    class = iota // the object deleted (deletionTimestamp or gone)
	classRef                    // its reference to an owner removed
	classUnblock                // its reference to an owner no longer blocks
	classFinalizer              // a finalizer removed
)

// key is one effect: a decision expects it, a change shows it.
type key struct {
	uid    types.UID
	class  class
	detail string // owner UID (classRef, classUnblock) or finalizer
}

// Judge asks kgc's workers whether, from the graph as it is now (before
// the change just observed is applied), they decide the write that
// change's effect op (an operation: history.OpDelete,
// history.OpRemoveReferences with the owner's UID, history.OpRemoveFinalizer
// with the finalizer) stands for; if they do, they make it in shadow, which
// reaches Decided before Judge returns. It covers a decision kgc had
// queued but not made when the other collector's change arrived.
type Judge func(uid types.UID, op, detail string)

// Config configures a Tracker.
type Config struct {
	// Window: how long a decision waits for its effect, and a change for
	// a matching decision; default DefaultWindow.
	Window time.Duration
	// Keep: how many disagreements are kept; default DefaultKeep.
	Keep int
	// Metrics is optional.
	Metrics *metrics.Metrics
	// Judge is optional.
	Judge Judge
	// Clock: nil is the real clock.
	Clock clock.WithTicker
}

// Disagreement is one comparison that did not agree.
type Disagreement struct {
	// Outcome: kgc_only or other_only (metrics.Shadow*).
	Outcome string         `json:"outcome"`
	Object  history.Object `json:"object"`
	// Operation: the write kgc decided (kgc_only), or the one the change
	// stands for (other_only).
	Operation string `json:"operation"`
	// Owner or Finalizer the operation is about, if any.
	Owner     types.UID `json:"owner,omitempty"`
	Finalizer string    `json:"finalizer,omitempty"`
	// Decision is kgc's decision, with its reason (kgc_only).
	Decision *history.Record `json:"decision,omitempty"`
	// Observed says what the cluster showed.
	Observed string `json:"observed"`
	// Since: when the decision was made (kgc_only) or the change observed
	// (other_only); At: when the window closed on it.
	Since time.Time `json:"since"`
	At    time.Time `json:"at"`
}

// Counts are the comparisons' outcomes so far.
type Counts struct {
	Agree     uint64 `json:"agree"`
	KGCOnly   uint64 `json:"kgcOnly"`
	OtherOnly uint64 `json:"otherOnly"`
}

// Page is what Path serves.
type Page struct {
	// Window is --shadow-window.
	Window string `json:"window"`
	Counts Counts `json:"counts"`
	// Pending: decisions waiting for their effect; Unmatched: changes
	// waiting for a decision.
	Pending   int `json:"pending"`
	Unmatched int `json:"unmatched"`
	// Disagreements, oldest first (the last Keep).
	Disagreements []Disagreement `json:"disagreements"`
	// Dropped counts the disagreements no longer kept.
	Dropped uint64 `json:"dropped"`
}

type decision struct {
	rec       history.Record
	remaining []key
	deadline  time.Time
}

type unmatched struct {
	op       string
	observed string
	since    time.Time
	deadline time.Time
	obj      history.Object
}

// Tracker matches shadow decisions with observed changes. Create it with
// New.
type Tracker struct {
	cfg Config
	clk clock.WithTicker

	mu       sync.Mutex
	pending  map[types.UID][]*decision
	npending int
	// unmatched: changes waiting for a decision, by object.
	unmatched  map[types.UID]map[key]*unmatched
	nunmatched int
	counts     Counts
	ring       []Disagreement
	next       uint64 // disagreements added so far
}

// New returns a Tracker.
func New(cfg Config) *Tracker {
	if cfg.Window <= 0 {
		cfg.Window = DefaultWindow
	}
	if cfg.Keep <= 0 {
		cfg.Keep = DefaultKeep
	}
	clk := cfg.Clock
	if clk == nil {
		clk = clock.RealClock{}
	}
	return &Tracker{cfg: cfg, clk: clk, pending: map[types.UID][]*decision{}, unmatched: map[types.UID]map[key]*unmatched{}, ring: make([]Disagreement, cfg.Keep)}
}

// Window is the comparison window.
func (t *Tracker) Window() time.Duration { return t.cfg.Window }

// keysOf returns the effects rec's write would have.
func keysOf(rec *history.Record) []key {
	uid := rec.Object.UID
	switch rec.Operation {
	case history.OpDelete:
		return []key{{uid, classDelete, ""}}
	case history.OpRemoveFinalizer:
		return []key{{uid, classFinalizer, rec.Finalizer}}
	case history.OpRemoveReferences, history.OpOrphan, history.OpUnblock:
		c := classRef
		if rec.Operation == history.OpUnblock {
			c = classUnblock
		}
		var out []key
		for _, o := range rec.Owners {
			if o.Removed {
				out = append(out, key{uid, c, string(o.UID)})
			}
		}
		return out
	}
	return nil
}

// Decided takes one write kgc decided and did not make (its record). A
// change already observed that shows its effects agrees at once;
// otherwise it waits for them until the window closes. A decision the
// same as one still waiting (decided again from a newer version of the
// object) is not counted twice.
func (t *Tracker) Decided(rec history.Record) {
	keys := keysOf(&rec)
	if len(keys) == 0 {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, d := range t.pending[rec.Object.UID] {
		if d.rec.Operation == rec.Operation && slices.Equal(keysOf(&d.rec), keys) {
			return
		}
	}
	if rec.Operation == history.OpDelete {
		t.supersedeLocked(rec.Object.UID)
	}
	remaining := keys[:0:0]
	for _, k := range keys {
		if t.takeUnmatchedLocked(k) {
			continue
		}
		remaining = append(remaining, k)
	}
	if len(remaining) == 0 {
		t.agreeLocked()
		return
	}
	t.pending[rec.Object.UID] = append(t.pending[rec.Object.UID], &decision{rec: rec, remaining: remaining, deadline: t.clk.Now().Add(t.cfg.Window)})
	t.npending++
}

// supersedeLocked forgets, once kgc decided to delete the object uid,
// what it decided, and what it saw the other collector do, about the
// object's references: the deletion is kgc's latest word on the object.
// Both collectors see owners go one event at a time, and one may remove
// the reference to the first owner gone (another still keeps the object)
// while the other, which already saw the second owner gone too, deletes
// the object; neither is a disagreement about the outcome, which the
// deletion decides.
func (t *Tracker) supersedeLocked(uid types.UID) {
	ds := t.pending[uid]
	kept := ds[:0]
	for _, d := range ds {
		if d.rec.Operation == history.OpDelete {
			kept = append(kept, d)
			continue
		}
		if d.remaining[0].class == classRef || d.remaining[0].class == classUnblock {
			t.npending--
			continue
		}
		kept = append(kept, d)
	}
	t.setPendingLocked(uid, kept)
	for k := range t.unmatched[uid] {
		if k.class == classRef || k.class == classUnblock {
			t.takeUnmatchedLocked(k)
		}
	}
}

// takeUnmatchedLocked forgets the change waiting for k, if any, and
// reports whether there was one.
func (t *Tracker) takeUnmatchedLocked(k key) bool {
	m := t.unmatched[k.uid]
	if _, ok := m[k]; !ok {
		return false
	}
	delete(m, k)
	if len(m) == 0 {
		delete(t.unmatched, k.uid)
	}
	t.nunmatched--
	return true
}

func (t *Tracker) agreeLocked() {
	t.counts.Agree++
	t.cfg.Metrics.ShadowAgreement(metrics.ShadowAgree)
}

// shown is one effect a change shows, and whether a garbage collector
// would have made it (it then waits for a matching decision).
type shown struct {
	k        key
	gc       bool
	op       string
	observed string
}

// effects lists what c shows.
func effects(c *Change) []shown {
	uid := c.Object.UID
	var out []shown
	if c.Deleted {
		what := "deleted (deletionTimestamp set)"
		if c.Gone {
			what = "deleted (gone)"
		}
		if c.Owners != "" {
			what += "; its owners in kgc's graph just before: " + c.Owners
		}
		out = append(out, shown{key{uid, classDelete, ""}, c.DeletedGC, history.OpDelete, what})
	}
	for _, l := range c.LostRefs {
		op := history.OpRemoveReferences
		if l.State == OwnerOrphaning {
			op = history.OpOrphan
		}
		what := "its reference to owner " + string(l.Owner) + " (" + l.State + " in kgc's graph) was removed"
		out = append(out,
			shown{key{uid, classRef, string(l.Owner)}, l.GC(), op, what},
			shown{k: key{uid, classUnblock, string(l.Owner)}})
	}
	for _, o := range c.Unblocked {
		out = append(out, shown{k: key{uid, classUnblock, string(o)}})
	}
	for _, f := range c.LostFinalizers {
		what := "its " + f + " finalizer was removed"
		if c.Gone {
			what += " (it is gone)"
		}
		out = append(out, shown{key{uid, classFinalizer, f}, c.FinalizerGC, history.OpRemoveFinalizer, what})
	}
	return out
}

// Observe takes one change, before the graph applies it. Decisions it
// completes agree; decisions about an object that is gone and can no
// longer show their effect are kgc_only at once; effects a garbage
// collector would have made and no decision expected wait for one (and
// the Judge is asked, outside the lock, whether kgc decides it now).
func (t *Tracker) Observe(c Change) {
	var judge []shown
	t.observe(&c, &judge)
	if t.cfg.Judge == nil {
		return
	}
	for _, s := range judge {
		t.cfg.Judge(s.k.uid, s.op, s.k.detail)
	}
}

func (t *Tracker) observe(c *Change, judge *[]shown) {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.clk.Now()
	uid := c.Object.UID
	ds := t.pending[uid]
	deleting := slices.ContainsFunc(ds, func(d *decision) bool { return d.rec.Operation == history.OpDelete })
	for _, s := range effects(c) {
		matched := false
		for _, d := range ds {
			if i := slices.Index(d.remaining, s.k); i >= 0 {
				d.remaining = slices.Delete(d.remaining, i, i+1)
				matched = true
			}
		}
		// kgc decided to delete the object: a reference removal by the
		// other collector is superseded (see supersedeLocked).
		superseded := deleting && (s.k.class == classRef || s.k.class == classUnblock)
		if !matched && s.gc && !superseded {
			m := t.unmatched[uid]
			if _, ok := m[s.k]; !ok {
				if m == nil {
					m = map[key]*unmatched{}
					t.unmatched[uid] = m
				}
				m[s.k] = &unmatched{op: s.op, observed: s.observed, since: now, deadline: now.Add(t.cfg.Window), obj: c.Object}
				t.nunmatched++
				*judge = append(*judge, s)
			}
		}
	}
	// A gone object shows its deletion, and every finalizer it held
	// removed (it could not have gone with one).
	if c.Gone {
		for _, d := range ds {
			d.remaining = slices.DeleteFunc(d.remaining, func(k key) bool { return k.class == classFinalizer || k.class == classDelete })
		}
	}
	kept := ds[:0]
	for _, d := range ds {
		switch {
		case len(d.remaining) == 0:
			t.agreeLocked()
		case c.Gone:
			t.disagreeLocked(d, "the object is gone without that", now)
		default:
			kept = append(kept, d)
			continue
		}
		t.npending--
	}
	t.setPendingLocked(uid, kept)
}

func (t *Tracker) setPendingLocked(uid types.UID, ds []*decision) {
	if len(ds) == 0 {
		delete(t.pending, uid)
		return
	}
	t.pending[uid] = ds
}

// Gone takes an object a relist found deleted (no event said so, and the
// graph's old state is not at hand): its pending decisions to delete it
// or remove its finalizers agree, the others are kgc_only. Nothing it
// shows counts as the other collector's.
func (t *Tracker) Gone(obj history.Object) {
	t.Observe(Change{Object: obj, Gone: true})
}

// disagreeLocked records d as kgc_only.
func (t *Tracker) disagreeLocked(d *decision, observed string, now time.Time) {
	t.counts.KGCOnly++
	t.cfg.Metrics.ShadowAgreement(metrics.ShadowKGCOnly)
	rec := d.rec
	dis := Disagreement{Outcome: metrics.ShadowKGCOnly, Object: rec.Object, Operation: rec.Operation, Decision: &rec,
		Observed: observed, Since: rec.Time, At: now, Finalizer: rec.Finalizer}
	if len(d.remaining) > 0 && (d.remaining[0].class == classRef || d.remaining[0].class == classUnblock) {
		dis.Owner = types.UID(d.remaining[0].detail)
	}
	t.addLocked(dis)
}

func (t *Tracker) addLocked(d Disagreement) {
	t.ring[t.next%uint64(len(t.ring))] = d
	t.next++
}

// Expire closes the window on what waited past it: decisions become
// kgc_only, changes other_only. Run calls it every second.
func (t *Tracker) Expire() {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.clk.Now()
	for uid, ds := range t.pending {
		kept := ds[:0]
		for _, d := range ds {
			if now.Before(d.deadline) {
				kept = append(kept, d)
				continue
			}
			t.disagreeLocked(d, "nothing of the kind happened within "+t.cfg.Window.String(), now)
			t.npending--
		}
		t.setPendingLocked(uid, kept)
	}
	for _, m := range t.unmatched {
		for k, u := range m {
			if now.Before(u.deadline) {
				continue
			}
			t.takeUnmatchedLocked(k)
			t.otherOnlyLocked(k, u, now)
		}
	}
}

// otherOnlyLocked records the change u, about k, as other_only.
func (t *Tracker) otherOnlyLocked(k key, u *unmatched, now time.Time) {
	t.counts.OtherOnly++
	t.cfg.Metrics.ShadowAgreement(metrics.ShadowOtherOnly)
	d := Disagreement{Outcome: metrics.ShadowOtherOnly, Object: u.obj, Operation: u.op,
		Observed: u.observed + "; kgc decided no such write within " + t.cfg.Window.String(), Since: u.since, At: now}
	switch k.class {
	case classRef:
		d.Owner = types.UID(k.detail)
	case classFinalizer:
		d.Finalizer = k.detail
	}
	t.addLocked(d)
}

// Run calls Expire every second until ctx is done.
func (t *Tracker) Run(ctx context.Context) {
	tick := t.clk.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C():
			t.Expire()
		}
	}
}

// Snapshot returns the counts, what still waits, and the disagreements
// f selects (by the object's uid, namespace and name), oldest first.
func (t *Tracker) Snapshot(f history.Filter) Page {
	t.mu.Lock()
	defer t.mu.Unlock()
	p := Page{Window: t.cfg.Window.String(), Counts: t.counts, Pending: t.npending, Unmatched: t.nunmatched, Disagreements: []Disagreement{}}
	n := uint64(len(t.ring))
	first := uint64(0)
	if t.next > n {
		first = t.next - n
		p.Dropped = first
	}
	for s := first; s < t.next; s++ {
		d := t.ring[s%n]
		if (f.UID != "" && d.Object.UID != f.UID) || (f.Namespace != "" && d.Object.Namespace != f.Namespace) || (f.Name != "" && d.Object.Name != f.Name) {
			continue
		}
		if d.Decision != nil {
			r := d.Decision.Summarized()
			d.Decision = &r
		}
		p.Disagreements = append(p.Disagreements, d)
	}
	return p
}

// Counts returns the comparisons' outcomes so far.
func (t *Tracker) Counts() Counts {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.counts
}

// LogSummary logs the counts at V(0) (at shutdown).
func (t *Tracker) LogSummary(ctx context.Context) {
	c := t.Counts()
	klog.FromContext(ctx).Info("Shadow mode comparison", "agree", c.Agree, "kgcOnly", c.KGCOnly, "otherOnly", c.OtherOnly, "window", t.cfg.Window.String())
}
