package breaker

import (
	"cmp"
	"fmt"
	"slices"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
)

// Signal is what a trip rests on.
type Signal string

const (
	// Unobserved: objects that appeared while kgc watched (created or
	// restored) naming too many distinct owners kgc never observed alive:
	// the restore signature.
	Unobserved Signal = "unobserved-owners"
	// Vanished: a complete list found none of a resource's objects (an
	// empty LIST, or 404) while kgc saw none of their deletions coming: an
	// API answering wrongly. One trip per resource.
	Vanished Signal = "vanished-resource"
	// Rollback: an object observed in a state its own history cannot
	// reach (its resourceVersion went back, its deletionTimestamp went
	// away, it came back after a watch saw it deleted): the API's storage
	// was rolled back under kgc.
	Rollback Signal = "rollback"
	// Dangling: too many distinct owners found gone, as a fraction of the
	// graph, whose deletion kgc did not observe. Off by default: volume is
	// no evidence of a fault.
	Dangling Signal = "dangling-fraction"
)

// Signals lists every signal (metrics label values, status order).
var Signals = []Signal{Unobserved, Vanished, Rollback, Dangling}

// Defaults: see Config, and docs/operator/breaker.md for the argument.
const (
	DefaultWindow          = 10 * time.Minute
	DefaultUnobservedLimit = 200
	DefaultVanishedMinimum = 10
	DefaultDanglingMinimum = 1000
	DefaultMaxHeld         = 100000
)

// Config sets the breaker's window and thresholds.
type Config struct {
	// Window over which Unobserved and Dangling count. Default
	// DefaultWindow.
	Window time.Duration
	// UnobservedLimit is how many distinct owners never observed alive
	// the deletions of objects that arrived while kgc watched may rest on
	// in one window; a deletion resting on one more trips Unobserved.
	// Owners, not deletions: a Background cascade that a new leader takes
	// over midway rests on one owner it never saw, however many
	// dependents it has. Objects that were there when kgc started (a
	// backlog of dependents whose owners went while no collector ran) are
	// never counted, only held once it tripped. 0 turns the signal off.
	UnobservedLimit int
	// VanishedMinimum is how many objects of one resource a list must
	// find gone, unexplained (see VanishFacts), to trip Vanished for that
	// resource. 0 turns the signal off.
	VanishedMinimum int
	// Rollback turns the rollback signal on.
	Rollback bool
	// DanglingFraction and DanglingMinimum: Dangling trips when the owners
	// found dangling in one window (distinct owners whose deletion kgc did
	// not observe, each with a dependent to delete) would exceed both
	// DanglingFraction × the graph's size and DanglingMinimum.
	// DanglingFraction 0 (the default) turns the signal off.
	DanglingFraction float64
	DanglingMinimum  int
	// MaxHeld bounds how many held objects are remembered to be queued
	// again on resume. Default DefaultMaxHeld. Objects held beyond it are
	// held all the same; the caller re-checks its whole graph on resume
	// when Overflowed says so.
	MaxHeld int
	// Clock; nil is the real clock.
	Clock clock.PassiveClock
}

// DefaultConfig is the configuration `kgc run` starts with.
func DefaultConfig() Config {
	return Config{Window: DefaultWindow, UnobservedLimit: DefaultUnobservedLimit, VanishedMinimum: DefaultVanishedMinimum,
		Rollback: true, DanglingMinimum: DefaultDanglingMinimum, MaxHeld: DefaultMaxHeld}
}

// Validate returns every problem with c.
func (c Config) Validate() []error {
	var errs []error
	if c.Window < 0 {
		errs = append(errs, fmt.Errorf("the breaker window must not be negative, got %s", c.Window))
	}
	if c.UnobservedLimit < 0 {
		errs = append(errs, fmt.Errorf("the unobserved-owner limit must not be negative, got %d", c.UnobservedLimit))
	}
	if c.VanishedMinimum < 0 {
		errs = append(errs, fmt.Errorf("the vanished-resource minimum must not be negative, got %d", c.VanishedMinimum))
	}
	if c.DanglingFraction < 0 || c.DanglingFraction > 1 || c.DanglingFraction != c.DanglingFraction {
		errs = append(errs, fmt.Errorf("the dangling fraction must be between 0 and 1, got %v", c.DanglingFraction))
	}
	if c.DanglingMinimum < 0 {
		errs = append(errs, fmt.Errorf("the dangling minimum must not be negative, got %d", c.DanglingMinimum))
	}
	if c.MaxHeld < 0 {
		errs = append(errs, fmt.Errorf("the held-object bound must not be negative, got %d", c.MaxHeld))
	}
	return errs
}

// Trip is one signal crossing its threshold, or one piece of evidence of
// a fault (Vanished, Rollback).
type Trip struct {
	Signal Signal    `json:"signal"`
	At     time.Time `json:"at"`
	// Resource is the resource a Vanished trip is about, as "Kind.group"
	// ("ConfigMap" for the core group); it holds deletions resting on
	// owners of that group and kind only.
	Resource string `json:"resource,omitempty"`
	// Count is what the signal had counted in the window, the deletion
	// that tripped it included (Vanished: the objects gone unexplained);
	// Limit the most it allowed then (Vanished: the minimum).
	Count int `json:"count,omitempty"`
	Limit int `json:"limit,omitempty"`
	// GraphSize is the graph's size when it tripped (Dangling).
	GraphSize int `json:"graphSize,omitempty"`
	// Window is the window it was counted over (Unobserved, Dangling).
	Window Duration `json:"window,omitempty"`
	// Object is the deletion that tripped it, or the object the evidence
	// is about ("kind namespace/name").
	Object string `json:"object,omitempty"`
	// Evidence says what was observed (Vanished, Rollback).
	Evidence string `json:"evidence,omitempty"`
}

// key identifies a trip: one per signal, and per resource for Vanished.
func (t Trip) key() tripKey { return tripKey{t.Signal, t.Resource} }

type tripKey struct {
	signal   Signal
	resource string
}

// Because says why the signal tripped, in plain words.
func (t Trip) Because() string {
	switch t.Signal {
	case Unobserved:
		return fmt.Sprintf("objects that appeared while kgc watched (created or restored) named %d owners kgc never observed alive (a quorum read found nothing, or another object, at a UID the graph never held) within %s, each with dependents to delete, more than the limit of %d: the restore signature",
			t.Count, time.Duration(t.Window), t.Limit)
	case Vanished:
		return fmt.Sprintf("a complete list of %s found none of its objects (%s): %d of them gone without kgc seeing their deletion coming (no DELETED event, no deletionTimestamp, no terminating namespace, no CRD being deleted), at least the minimum of %d: an API answering wrongly",
			t.Resource, t.Evidence, t.Count, t.Limit)
	case Rollback:
		return fmt.Sprintf("%s was observed in a state its own history cannot reach (%s): the API's storage was rolled back (an etcd restore), and facts kgc holds as final (owners observed deleted) may be false",
			t.Object, t.Evidence)
	case Dangling:
		return fmt.Sprintf("%d owners whose deletion kgc did not observe were found gone within %s, each with dependents to delete, more than %d (the larger of the dangling fraction of the graph's %d objects and the minimum)",
			t.Count, time.Duration(t.Window), t.Limit, t.GraphSize)
	}
	return string(t.Signal)
}

// Owner is one dangling owner a deletion rests on.
type Owner struct {
	UID types.UID
	// Group and Kind are the reference's.
	Group, Kind string
	// NeverObserved: kgc never observed it alive (its dangling fact comes
	// from a quorum GET or LIST of a UID the graph never held).
	NeverObserved bool
	// HistoryGap: kgc's history of the owner's kind has a gap now or
	// lately (its watch interrupted, or a relist after lost history
	// within the window), in which the owner could have lived and gone
	// unseen; such an owner is not counted as never observed.
	HistoryGap bool
	// DeletionObserved: kgc saw it go — a watch's DELETED event — or
	// deleted it itself.
	DeletionObserved bool
}

// Resource names the owner's group and kind as Trip.Resource does.
func (o Owner) Resource() string { return ResourceName(o.Group, o.Kind) }

// ResourceName names a group and kind as Trip.Resource does.
func ResourceName(group, kind string) string {
	if group == "" {
		return kind
	}
	return kind + "." + group
}

// Deletion is one deletion kgc is about to make because an owner of the
// object is dangling.
type Deletion struct {
	UID types.UID
	// Object names it for people ("kind namespace/name").
	Object string
	// Arrived: the object appeared while kgc watched its resource
	// (rules.Item.Arrived).
	Arrived bool
	// Owners are the dangling owners it rests on.
	Owners []Owner
	// GraphSize is the graph's size now.
	GraphSize int
}

// Verdict is the breaker's answer about one deletion.
type Verdict struct {
	// Held: the deletion must not be made; Trip is the trip that holds it.
	Held bool
	Trip Trip
	// Tripped: this deletion tripped Trip (report it once).
	Tripped bool
}

// Hold is one held object.
type Hold struct {
	UID    types.UID `json:"uid"`
	Object string    `json:"object"`
	Signal Signal    `json:"signal"`
	// Resource is the trip's (Vanished).
	Resource string    `json:"resource,omitempty"`
	Since    time.Time `json:"since"`
}

// Breaker counts deletions and holds them once a signal has tripped.
type Breaker struct {
	cfg Config
	clk clock.PassiveClock

	mu sync.Mutex
	// window: what was counted, oldest first: owners toward Unobserved,
	// owners toward Dangling; inWindow says what each signal holds now
	// (one owner counts once per window however often it is decided).
	window   []entry
	inWindow map[Signal]map[types.UID]struct{}
	counts   map[Signal]int
	trips    map[tripKey]Trip
	// version counts the trips made or restored; Recorded reports the
	// version last made durable.
	version, recorded uint64
	// lastResume is the latest resume applied.
	lastResume time.Time
	held       map[types.UID]Hold
	overflowed bool
	// released: objects held when an operator resumed: they go without
	// being counted again (else a resumed restore re-trips at once).
	released map[types.UID]struct{}
}

type entry struct {
	at     time.Time
	signal Signal
	uid    types.UID
}

// New returns a breaker with cfg (zero Window and MaxHeld take their
// defaults).
func New(cfg Config) *Breaker {
	if cfg.Window == 0 {
		cfg.Window = DefaultWindow
	}
	if cfg.MaxHeld == 0 {
		cfg.MaxHeld = DefaultMaxHeld
	}
	clk := cfg.Clock
	if clk == nil {
		clk = clock.RealClock{}
	}
	return &Breaker{cfg: cfg, clk: clk, inWindow: newInWindow(), counts: map[Signal]int{},
		trips: map[tripKey]Trip{}, held: map[types.UID]Hold{}, released: map[types.UID]struct{}{}}
}

// Config returns the breaker's configuration.
func (b *Breaker) Config() Config { return b.cfg }

// Admit decides whether d may be made now. A deletion that may go is
// counted; one that is held is remembered (Held) until Resume.
func (b *Breaker) Admit(d Deletion) Verdict {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.clk.Now()
	if t, ok := b.holding(d); ok {
		b.hold(d, t, now)
		return Verdict{Held: true, Trip: t}
	}
	if _, ok := b.released[d.UID]; ok {
		delete(b.released, d.UID)
		return Verdict{}
	}
	b.expire(now)
	var unobserved []types.UID
	if d.Arrived && b.cfg.UnobservedLimit > 0 {
		for _, o := range d.Owners {
			if o.NeverObserved && !o.HistoryGap && !b.has(Unobserved, o.UID) && !slices.Contains(unobserved, o.UID) {
				unobserved = append(unobserved, o.UID)
			}
		}
		if n := b.counts[Unobserved] + len(unobserved); len(unobserved) > 0 && n > b.cfg.UnobservedLimit {
			return b.trip(d, Trip{Signal: Unobserved, Count: n, Limit: b.cfg.UnobservedLimit, Window: Duration(b.cfg.Window)}, now)
		}
	}
	var owners []types.UID
	if b.cfg.DanglingFraction > 0 {
		for _, o := range d.Owners {
			if !o.DeletionObserved && !b.has(Dangling, o.UID) && !slices.Contains(owners, o.UID) {
				owners = append(owners, o.UID)
			}
		}
		if limit := b.danglingLimit(d.GraphSize); len(owners) > 0 && b.counts[Dangling]+len(owners) > limit {
			return b.trip(d, Trip{Signal: Dangling, Count: b.counts[Dangling] + len(owners), Limit: limit,
				Window: Duration(b.cfg.Window), GraphSize: d.GraphSize}, now)
		}
	}
	for _, o := range unobserved {
		b.count(Unobserved, o, now)
	}
	for _, o := range owners {
		b.count(Dangling, o, now)
	}
	return Verdict{}
}

// VanishFacts is what kgc observed of a complete list that found none of
// the objects of its resource it held (graph.Vanish).
type VanishFacts struct {
	// Resource names the resource as Trip.Resource does.
	Resource string
	// ResourceVersion is the list's; NotServed: the LIST answered 404.
	ResourceVersion string
	NotServed       bool
	// Gone counts the objects the list removed; Unexplained those whose
	// deletion kgc did not see coming (not deleting when last observed,
	// not in a namespace being deleted or gone).
	Gone, Unexplained int
	// ResourceRemoved: the resource itself is being removed — its CRD is
	// being deleted or is gone — which explains every object's going.
	ResourceRemoved bool
}

// Vanish judges f, and trips Vanished for its resource when it is
// evidence of an API answering wrongly: at least VanishedMinimum objects
// gone unexplained, and the resource not being removed. It returns the
// trip and whether it is new (a resource already tripped is not tripped
// again).
func (b *Breaker) Vanish(f VanishFacts) (Trip, bool) {
	if !b.WouldVanish(f) {
		return Trip{}, false
	}
	ev := "an empty list at resourceVersion " + f.ResourceVersion
	if f.NotServed {
		ev = "its LIST answered 404 while discovery serves it"
	}
	return b.tripOn(Trip{Signal: Vanished, Resource: f.Resource, Count: f.Unexplained, Limit: b.cfg.VanishedMinimum, Evidence: ev})
}

// WouldVanish reports whether Vanish would trip on f (for a resource not
// tripped yet): the caller may then look for an explanation the facts
// lack before it asks.
func (b *Breaker) WouldVanish(f VanishFacts) bool {
	return b.cfg.VanishedMinimum > 0 && !f.ResourceRemoved && f.Unexplained >= b.cfg.VanishedMinimum
}

// RolledBack trips Rollback (when on) on the evidence that object was
// observed in a state its own history cannot reach. It returns the trip
// and whether it is new.
func (b *Breaker) RolledBack(object, evidence string) (Trip, bool) {
	if !b.cfg.Rollback {
		return Trip{}, false
	}
	return b.tripOn(Trip{Signal: Rollback, Object: object, Evidence: evidence})
}

func (b *Breaker) tripOn(t Trip) (Trip, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if cur, ok := b.trips[t.key()]; ok {
		return cur, false
	}
	t.At = b.clk.Now()
	b.trips[t.key()] = t
	b.version++
	return t, true
}

func newInWindow() map[Signal]map[types.UID]struct{} {
	return map[Signal]map[types.UID]struct{}{Unobserved: {}, Dangling: {}}
}

func (b *Breaker) has(s Signal, uid types.UID) bool {
	_, ok := b.inWindow[s][uid]
	return ok
}

func (b *Breaker) count(s Signal, uid types.UID, now time.Time) {
	b.window = append(b.window, entry{at: now, signal: s, uid: uid})
	b.inWindow[s][uid] = struct{}{}
	b.counts[s]++
}

// danglingLimit is the most owners Dangling allows in a window for a
// graph of size objects.
func (b *Breaker) danglingLimit(size int) int {
	return max(b.cfg.DanglingMinimum, int(b.cfg.DanglingFraction*float64(size)))
}

// holding returns the trip that holds d, if one does: a rollback or a
// dangling fraction holds every deletion resting on a dangling owner,
// Unobserved those resting on an owner never observed alive, Vanished
// those resting on an owner of its resource.
func (b *Breaker) holding(d Deletion) (Trip, bool) {
	if len(b.trips) == 0 || len(d.Owners) == 0 {
		return Trip{}, false
	}
	if t, ok := b.trips[tripKey{signal: Rollback}]; ok {
		return t, true
	}
	if t, ok := b.trips[tripKey{signal: Dangling}]; ok {
		return t, true
	}
	if t, ok := b.trips[tripKey{signal: Unobserved}]; ok && slices.ContainsFunc(d.Owners, func(o Owner) bool { return o.NeverObserved }) {
		return t, true
	}
	for _, o := range d.Owners {
		if t, ok := b.trips[tripKey{Vanished, o.Resource()}]; ok {
			return t, true
		}
	}
	return Trip{}, false
}

func (b *Breaker) trip(d Deletion, t Trip, now time.Time) Verdict {
	t.At, t.Object = now, d.Object
	b.trips[t.key()] = t
	b.version++
	b.hold(d, t, now)
	return Verdict{Held: true, Trip: t, Tripped: true}
}

func (b *Breaker) hold(d Deletion, t Trip, now time.Time) {
	if _, ok := b.held[d.UID]; ok {
		return
	}
	if len(b.held) >= b.cfg.MaxHeld {
		b.overflowed = true
		return
	}
	b.held[d.UID] = Hold{UID: d.UID, Object: d.Object, Signal: t.Signal, Resource: t.Resource, Since: now}
}

// expire drops the deletions older than the window.
func (b *Breaker) expire(now time.Time) {
	cut := now.Add(-b.cfg.Window)
	i := 0
	for ; i < len(b.window) && !b.window[i].at.After(cut); i++ {
		e := b.window[i]
		delete(b.inWindow[e.signal], e.uid)
		b.counts[e.signal]--
	}
	if i > 0 {
		b.window = slices.Delete(b.window, 0, i)
	}
}

// Restore applies trips recorded elsewhere (kgc's Lease, by an earlier
// process), unless resumed at or after they happened. It returns the
// trips it applied. Restored trips count as recorded.
func (b *Breaker) Restore(trips []Trip, resumed time.Time) []Trip {
	b.mu.Lock()
	defer b.mu.Unlock()
	if resumed.After(b.lastResume) {
		b.lastResume = resumed
	}
	var out []Trip
	for _, t := range trips {
		if t.At.After(b.lastResume) {
			if cur, ok := b.trips[t.key()]; !ok || cur.At.Before(t.At) {
				b.trips[t.key()] = t
				out = append(out, t)
			}
		}
	}
	return out
}

// Unrecorded returns the trips in force and a version to pass to
// Recorded once they are durable, when some trip was made since the last
// Recorded (ok false: nothing new to record).
func (b *Breaker) Unrecorded() (trips []Trip, version uint64, ok bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.version == b.recorded {
		return nil, 0, false
	}
	return b.sortedTrips(), b.version, true
}

// Recorded says that the trips of version (Unrecorded) are durable.
func (b *Breaker) Recorded(version uint64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if version > b.recorded {
		b.recorded = version
	}
}

// Durable reports whether every trip made so far has been recorded.
func (b *Breaker) Durable() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.version == b.recorded
}

func (b *Breaker) sortedTrips() []Trip {
	out := make([]Trip, 0, len(b.trips))
	for _, t := range b.trips {
		out = append(out, t)
	}
	slices.SortFunc(out, func(x, y Trip) int {
		if c := x.At.Compare(y.At); c != 0 {
			return c
		}
		return cmp.Compare(x.Resource, y.Resource)
	})
	return out
}

// Resume clears the trips that happened at or before at and returns the
// objects they held, to be decided again (they go without being counted
// again, once each). overflowed reports that more objects were held than
// remembered: the caller re-checks everything unfinished. A trip after at
// stays (the operator resumed before it).
func (b *Breaker) Resume(at time.Time) (release []types.UID, resumed []Trip, overflowed bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !at.After(b.lastResume) {
		return nil, nil, false
	}
	b.lastResume = at
	for k, t := range b.trips {
		if !t.At.After(at) {
			resumed = append(resumed, t)
			delete(b.trips, k)
		}
	}
	if len(resumed) == 0 {
		return nil, nil, false
	}
	_, rollback := b.trips[tripKey{signal: Rollback}]
	_, dangling := b.trips[tripKey{signal: Dangling}]
	for uid, h := range b.held {
		if _, still := b.trips[tripKey{h.Signal, h.Resource}]; still || rollback || dangling {
			continue
		}
		release = append(release, uid)
		b.released[uid] = struct{}{}
		delete(b.held, uid)
	}
	overflowed, b.overflowed = b.overflowed, false
	// Start counting afresh: what was counted led to the trips just
	// resumed.
	b.window, b.inWindow = nil, newInWindow()
	b.counts = map[Signal]int{}
	slices.SortFunc(resumed, func(x, y Trip) int { return x.At.Compare(y.At) })
	return release, resumed, overflowed
}

// Forget drops uid from the held objects (it went, or no longer rests on
// a dangling owner).
func (b *Breaker) Forget(uid types.UID) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.held, uid)
	delete(b.released, uid)
}

// Held returns the hold on uid, if it is held.
func (b *Breaker) Held(uid types.UID) (Hold, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	h, ok := b.held[uid]
	return h, ok
}

// Status is the breaker's state.
type Status struct {
	// Trips: the trips in force, by the time they tripped.
	Trips []Trip `json:"trips"`
	// Unrecorded: some trip is not recorded on the Lease yet (a restart
	// now would forget it).
	Unrecorded bool `json:"unrecorded,omitempty"`
	// Counts: what each counting signal counted in the current window
	// (distinct owners), and the limit of each signal (0: off;
	// Dangling's for GraphSize; Vanished's is its minimum; Rollback's is
	// 1 when on: one piece of evidence trips it).
	Counts map[Signal]int `json:"counts"`
	Limits map[Signal]int `json:"limits"`
	// Held: the held objects, oldest first, at most limit of them;
	// HeldTotal how many are held (remembered) in all.
	Held      []Hold `json:"held,omitempty"`
	HeldTotal int    `json:"heldTotal"`
	// Overflowed: more objects were held than remembered.
	Overflowed bool `json:"overflowed,omitempty"`
	// LastResume is the latest resume applied (zero: none).
	LastResume time.Time `json:"lastResume,omitzero"`
	Window     Duration  `json:"window"`
}

// Status returns the breaker's state with at most limit held objects
// (negative: all) for a graph of graphSize objects.
func (b *Breaker) Status(graphSize, limit int) Status {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.expire(b.clk.Now())
	st := Status{Counts: map[Signal]int{}, Limits: map[Signal]int{}, HeldTotal: len(b.held), Unrecorded: b.version != b.recorded,
		Overflowed: b.overflowed, LastResume: b.lastResume, Window: Duration(b.cfg.Window)}
	for _, s := range Signals {
		st.Counts[s] = b.counts[s]
	}
	st.Limits[Unobserved] = b.cfg.UnobservedLimit
	st.Limits[Vanished] = b.cfg.VanishedMinimum
	if b.cfg.Rollback {
		st.Limits[Rollback] = 1
	}
	if b.cfg.DanglingFraction > 0 {
		st.Limits[Dangling] = b.danglingLimit(graphSize)
	}
	st.Trips = b.sortedTrips()
	if limit != 0 {
		for _, h := range b.held {
			st.Held = append(st.Held, h)
		}
		slices.SortFunc(st.Held, func(x, y Hold) int {
			if c := x.Since.Compare(y.Since); c != 0 {
				return c
			}
			return cmp.Compare(x.UID, y.UID)
		})
		if limit > 0 && len(st.Held) > limit {
			st.Held = st.Held[:limit]
		}
	}
	return st
}

// HeldBySignal counts the held objects by the signal that holds them.
func (b *Breaker) HeldBySignal() map[Signal]int {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make(map[Signal]int, len(Signals))
	for _, h := range b.held {
		out[h.Signal]++
	}
	return out
}

// Tripped reports whether signal s is tripped now (for any resource).
func (b *Breaker) Tripped(s Signal) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	for k := range b.trips {
		if k.signal == s {
			return true
		}
	}
	return false
}

// Duration is a time.Duration that marshals as its string ("10m0s").
type Duration time.Duration

func (d Duration) String() string { return time.Duration(d).String() }

// MarshalText implements encoding.TextMarshaler.
func (d Duration) MarshalText() ([]byte, error) { return []byte(time.Duration(d).String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler.
func (d *Duration) UnmarshalText(b []byte) error {
	v, err := time.ParseDuration(string(b))
	*d = Duration(v)
	return err
}
