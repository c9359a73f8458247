package model

import (
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/go-logr/logr"

	"github.com/kgc-dev/kgc/pkg/kgc"
)

// The reference model and the judge are test code that could be wrong in
// the lenient direction; these checks pin their rules on small cases.

func TestSimulateRules(t *testing.T) {
	obj := func(uid string, idx int, refs ...simRef) *simObj {
		return &simObj{uid: types.UID(uid), idx: idx, refs: refs}
	}
	r := func(uid string, block bool) simRef { return simRef{uid: types.UID(uid), block: block} }
	cases := []struct {
		name  string
		objs  []*simObj
		setup func(m map[types.UID]*simObj)
		want  map[string]string // survivor → its references
	}{
		{
			name: "background: sole dependent collected, co-owned one keeps its live owner",
			objs: []*simObj{obj("a", 0), obj("d", 1), obj("b", 2, r("a", false)), obj("c", 3, r("a", true), r("d", false))},
			setup: func(m map[types.UID]*simObj) {
				m["a"].gone = true
			},
			want: map[string]string{"d": "", "c": "d:false"},
		},
		{
			name: "orphan: dependents keep living without the reference",
			objs: []*simObj{obj("a", 0), obj("b", 1, r("a", true)), obj("c", 2, r("b", false))},
			setup: func(m map[types.UID]*simObj) {
				m["a"].deleting, m["a"].finalizers = true, []string{finalizerOrphan}
			},
			want: map[string]string{"b": "", "c": "b:false"},
		},
		{
			name: "foreground: the whole chain goes, a dependent with another owner stays",
			objs: []*simObj{obj("a", 0), obj("x", 1), obj("b", 2, r("a", true)), obj("c", 3, r("b", true)), obj("e", 4, r("b", true), r("x", true))},
			setup: func(m map[types.UID]*simObj) {
				m["a"].deleting, m["a"].finalizers = true, []string{finalizerForeground}
			},
			want: map[string]string{"x": "", "e": "x:true"},
		},
		{
			name: "a held dependent is being deleted, not gone; its foreground owner waits",
			objs: []*simObj{obj("a", 0), obj("b", 1, r("a", true))},
			setup: func(m map[types.UID]*simObj) {
				m["a"].deleting, m["a"].finalizers = true, []string{finalizerForeground}
				m["b"].finalizers = []string{holdFinalizer}
			},
			want: map[string]string{"a": "", "b": "a:true"},
		},
		{
			name: "an object without references is never garbage",
			objs: []*simObj{obj("a", 0)},
			want: map[string]string{"a": ""},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m := map[types.UID]*simObj{}
			for _, o := range c.objs {
				m[o.uid] = o
			}
			if c.setup != nil {
				c.setup(m)
			}
			simulate(m)
			got := map[string]string{}
			for uid, o := range m {
				if !o.gone {
					got[string(uid)] = refsKey(o.refs)
				}
			}
			if len(got) != len(c.want) {
				t.Fatalf("survivors %v, want %v", got, c.want)
			}
			for k, v := range c.want {
				if g, ok := got[k]; !ok || g != v {
					t.Fatalf("survivors %v, want %v", got, c.want)
				}
			}
		})
	}
}

func TestJudgeRules(t *testing.T) {
	block, noBlock := true, false
	refTo := func(uids ...string) []metav1.OwnerReference {
		var out []metav1.OwnerReference
		for _, uid := range uids {
			b := &block
			if strings.HasPrefix(uid, "~") { // "~x": a non-blocking reference to x
				uid, b = uid[1:], &noBlock
			}
			out = append(out, metav1.OwnerReference{Kind: "ConfigMap", Name: uid, UID: types.UID(uid), BlockOwnerDeletion: b})
		}
		return out
	}
	hist := func(uid string, states ...objState) *history {
		return &history{id: ident{kind: configMapKind, namespace: "ns", name: uid, uid: types.UID(uid)}, run: "r", states: states}
	}
	fg, orphan, hold := []string{finalizerForeground}, []string{finalizerOrphan}, []string{holdFinalizer}
	w := &safetyWatcher{objects: map[types.UID]*history{
		// S1. Owner o lives throughout; d is deleted at rv 5: a violation.
		"o": hist("o", objState{rv: 1}),
		"d": hist("d", objState{rv: 2, refs: refTo("o")}, objState{rv: 5, gone: true, refs: refTo("o")}),
		// Owner p is in Foreground deletion from rv 6, e's deletion starts
		// at rv 7: fine; e is gone at rv 9, p's finalizer removed at rv 10:
		// fine.
		"p": hist("p", objState{rv: 3}, objState{rv: 6, deleting: true, finalizers: fg}, objState{rv: 10, deleting: true}),
		"e": hist("e", objState{rv: 4, refs: refTo("p")}, objState{rv: 7, deleting: true, refs: refTo("p")}, objState{rv: 9, gone: true, refs: refTo("p")}),
		// Owner q is gone at rv 10; f goes at rv 11: fine. g goes at rv 8,
		// before q started deleting: a violation.
		"q": hist("q", objState{rv: 3}, objState{rv: 10, gone: true}),
		"f": hist("f", objState{rv: 4, refs: refTo("q")}, objState{rv: 11, gone: true, refs: refTo("q")}),
		"g": hist("g", objState{rv: 4, refs: refTo("q")}, objState{rv: 8, gone: true, refs: refTo("q")}),
		// h is deleted by the test: not judged as a deletion.
		"h": hist("h", objState{rv: 4, refs: refTo("o")}, objState{rv: 12, gone: true, refs: refTo("o")}),
		// S1, an owner deleting with another finalizer still holds: k is
		// being deleted (Background, held) from rv 21, l goes at rv 22: a
		// violation.
		"k": hist("k", objState{rv: 20, finalizers: hold}, objState{rv: 21, deleting: true, finalizers: hold}),
		"l": hist("l", objState{rv: 20, refs: refTo("k")}, objState{rv: 22, gone: true, refs: refTo("k")}),

		// S2. Owner m is deleted with Orphan at rv 31 and goes at rv 35.
		// n's reference is removed at rv 33: fine. n2 still refers to m
		// at rv 35: a violation (a). n3 is deleted at rv 34 still
		// referring to m: a violation (b). n4 has owners m and q2; its
		// reference to m is removed at rv 32, and it goes at rv 36 after q2
		// went at rv 34: fine.
		"m":  hist("m", objState{rv: 30}, objState{rv: 31, deleting: true, finalizers: orphan}, objState{rv: 35, gone: true}),
		"q2": hist("q2", objState{rv: 30}, objState{rv: 34, gone: true}),
		"n":  hist("n", objState{rv: 30, refs: refTo("m")}, objState{rv: 33}),
		"n2": hist("n2", objState{rv: 30, refs: refTo("m")}),
		"n3": hist("n3", objState{rv: 30, refs: refTo("m")}, objState{rv: 34, gone: true, refs: refTo("m")}),
		"n4": hist("n4", objState{rv: 30, refs: refTo("m", "q2")}, objState{rv: 32, refs: refTo("q2")}, objState{rv: 36, gone: true, refs: refTo("q2")}),
		// n5 still refers to m when m goes (a), and is then deleted on
		// account of it at rv 37 (b): the orphan is lost.
		"n5": hist("n5", objState{rv: 30, refs: refTo("m")}, objState{rv: 37, gone: true, refs: refTo("m")}),

		// S3. Owner u is in Foreground deletion from rv 41, its finalizer
		// removed at rv 45. v (blocking) is gone at rv 44: fine. v2 has a
		// non-blocking reference and lives on: fine. v3 (blocking) is being
		// deleted but not gone at rv 45: a violation.
		"u":  hist("u", objState{rv: 40}, objState{rv: 41, deleting: true, finalizers: fg}, objState{rv: 45, gone: true}),
		"v":  hist("v", objState{rv: 40, refs: refTo("u")}, objState{rv: 42, deleting: true, refs: refTo("u")}, objState{rv: 44, gone: true, refs: refTo("u")}),
		"v2": hist("v2", objState{rv: 40, refs: refTo("~u")}),
		"v3": hist("v3", objState{rv: 40, refs: refTo("u"), finalizers: hold}, objState{rv: 43, deleting: true, refs: refTo("u"), finalizers: hold}),
	}, unknowns: map[string]int{}}
	j := w.judge("r", map[types.UID]bool{"h": true, "o": true, "p": true, "q": true, "k": true, "m": true, "q2": true, "u": true}, nil)
	// d, e (start and removal), f, g, l, n3, n4, n5, v (start and removal), v3
	if j.judged != 12 {
		t.Errorf("judged %d deletion events, want 12", j.judged)
	}
	if j.orphans != 1 || j.foregrounds != 2 {
		t.Errorf("judged %d orphan and %d foreground owners, want 1 and 2", j.orphans, j.foregrounds)
	}
	want := []string{"S1: ConfigMap ns/d ", "S1: ConfigMap ns/g ", "S1: ConfigMap ns/l ", "S2: ConfigMap ns/m ", "S2: ConfigMap ns/m ", "S2: ConfigMap ns/n3 ", "S2: ConfigMap ns/n5 ", "S3: ConfigMap ns/u "}
	var got []string
	for _, v := range j.violations {
		got = append(got, v[:strings.Index(v, "(uid")])
	}
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Errorf("violations:\n%s\nwant exactly those starting %q", strings.Join(j.violations, "\n"), want)
	}
	for _, v := range j.violations {
		if strings.HasPrefix(v, "S2: ConfigMap ns/m ") && !strings.Contains(v, "ns/n2") && !strings.Contains(v, "ns/n5") {
			t.Errorf("the S2 violation names the wrong dependent: %s", v)
		}
		if strings.HasPrefix(v, "S3: ") && !strings.Contains(v, "ns/v3") {
			t.Errorf("the S3 violation names the wrong dependent: %s", v)
		}
	}
}

// fakeLimits excuses watch lag for references given since a revision, and
// restart memory when told to; it records what the judge asked.
type fakeLimits struct {
	lagSince uint64
	memory   bool
	asked    map[string]uint64 // dependent name → the since it was asked with
	// journaled: what the last question said of the finalizer.
	journaled bool
}

func (f *fakeLimits) watchLag(owner ident, end objState, dep ident, since uint64, journaled bool) (string, bool) {
	f.asked[dep.name] = since
	f.journaled = journaled
	return "lag", since >= f.lagSince
}

func (f *fakeLimits) restartMemory(released, deleted time.Time) (string, bool) {
	return "forgot", f.memory
}

// TestJudgeLimits pins what the judge asks the known limits and what it
// still reports: only S2 (a) and S3 findings are asked about watch lag, with
// the revision that gave the dependent its (blocking) reference, and a
// dependent's deletion is asked about restart memory only if its owner's
// release was excused as watch lag.
func TestJudgeLimits(t *testing.T) {
	block := true
	ref := func(uid string) []metav1.OwnerReference {
		return []metav1.OwnerReference{{Kind: "ConfigMap", Name: uid, UID: types.UID(uid), BlockOwnerDeletion: &block}}
	}
	hist := func(uid string, states ...objState) *history {
		return &history{id: ident{kind: configMapKind, namespace: "ns", name: uid, uid: types.UID(uid)}, run: "r", states: states}
	}
	orphan := []string{finalizerOrphan}
	newWatcher := func() *safetyWatcher {
		return &safetyWatcher{objects: map[types.UID]*history{
			// Owner o is deleted with Orphan at rv 10 and its finalizer
			// goes with it at rv 15.
			"o": hist("o", objState{rv: 1}, objState{rv: 10, deleting: true, finalizers: orphan}, objState{rv: 15, gone: true}),
			// a has referred to o since rv 2: not a lag.
			"a": hist("a", objState{rv: 2, refs: ref("o")}),
			// b got its reference at rv 8 (lost and got back), kept it at
			// rv 9, and is deleted at rv 20 while still referring to o.
			"b": hist("b", objState{rv: 3, refs: ref("o")}, objState{rv: 4}, objState{rv: 8, refs: ref("o")}, objState{rv: 9, refs: ref("o")}, objState{rv: 20, gone: true, refs: ref("o")}),
		}, unknowns: map[string]int{}}
	}
	for _, memory := range []bool{false, true} {
		f := &fakeLimits{lagSince: 8, memory: memory, asked: map[string]uint64{}}
		j := newWatcher().judge("r", map[types.UID]bool{"o": true}, f)
		if !f.journaled {
			t.Errorf("an orphan finalizer's removal asked about watch lag as not journaled")
		}
		if f.asked["a"] != 2 || f.asked["b"] != 8 {
			t.Errorf("asked watch lag with since a=%d b=%d, want 2 and 8", f.asked["a"], f.asked["b"])
		}
		wantViolations, wantMemory := 2, 0 // a's S2 (a), b's S2 (b)
		if memory {
			wantViolations, wantMemory = 1, 1
		}
		if len(j.violations) != wantViolations || j.limited[limitWatchLag] != 1 || j.limited[limitRestartMemory] != wantMemory {
			t.Errorf("memory %v: %d violations, limits %v; want %d, 1 watch lag and %d restart memory:\n%s",
				memory, len(j.violations), j.limited, wantViolations, wantMemory, strings.Join(j.violations, "\n"))
		}
		for _, v := range j.violations {
			if !strings.Contains(v, "ns/a ") && !strings.HasPrefix(v, "S2: ConfigMap ns/b ") {
				t.Errorf("memory %v: unexpected violation %s", memory, v)
			}
		}
	}
}

// TestPlanChaos pins the chaos plans: drawn from the seed alone, restarts
// in order and not overlapping, and none when KGC_MODEL_CHAOS says none.
func TestPlanChaos(t *testing.T) {
	all := map[string]bool{"delay": true, "restart": true, "fail": true}
	for seed := range int64(200) {
		p := planChaos(seed, 150, all, 3)
		if q := planChaos(seed, 150, all, 3); p.String() != q.String() {
			t.Fatalf("seed %d: two plans %q and %q", seed, p, q)
		}
		if len(p.delayed) == 0 || len(p.restarts) == 0 || len(p.restarts) > 3 {
			t.Errorf("seed %d: plan %s lacks a kind", seed, p)
		}
		last := 0
		for _, r := range p.restarts {
			if r.stopAt < 1 || r.stopAt < last || r.startAt < r.stopAt {
				t.Errorf("seed %d: restarts out of order or overlapping: %s", seed, p)
			}
			last = r.startAt
		}
		if p.fail != nil && p.fail.atStart > len(p.restarts) {
			t.Errorf("seed %d: a failure at start %d of %d", seed, p.fail.atStart, len(p.restarts)+1)
		}
		if s := planChaos(seed, 150, map[string]bool{}, 3).String(); s != "none" {
			t.Errorf("seed %d: no chaos kinds gave plan %s", seed, s)
		}
	}
}

// TestWatchLagJudgedAtTheJournalWrite pins when the watch-lag limit is
// judged: an orphan finalizer's removal at the instant of the journal
// write that preceded it (the decision came before that write), a
// foregroundDeletion finalizer's at kgc's announcement of it, any other
// removal at the instant it was sent. The dependent's reference (rv 30)
// reaches the collector between the journal write and the removal: an
// orphan removal is still the limit, a foregroundDeletion removal sent
// then is not.
func TestWatchLagJudgedAtTheJournalWrite(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	c := &chaos{
		plan:    chaosPlan{delayed: []kindInfo{secretKind}},
		journal: &kgc.OrphanJournalOptions{LeaseNamespace: "ns", LeaseName: "kgc-orphans"},
	}
	d := newDelivery(0, c.plan.delayed)
	c.deliveries = []*delivery{d}
	owner := ident{kind: configMapKind, namespace: "ns", name: "o", uid: "o"}
	dep := ident{kind: secretKind, namespace: "ns", name: "d", uid: "d"}
	d.streams[secretKind.gvr] = []*span{{open: at(0)}}
	d.raiseAt(secretKind.gvr, 20, at(1))
	d.leasePuts[c.journalPath()] = []time.Time{at(10)}
	removal := write{method: http.MethodPatch, path: objectPath(owner), sent: at(30), rv: 41}
	d.writes[removal.rv] = removal
	d.byPath[removal.path] = append(d.byPath[removal.path], removal)
	d.raiseAt(secretKind.gvr, 30, at(20)) // the reference, after the journal write
	end := objState{rv: 41}
	if why, ok := c.watchLag(owner, end, dep, 30, true); !ok {
		t.Errorf("orphan removal decided before its journal write at rv 20 known: not excused: %s", why)
	}
	if why, ok := c.watchLag(owner, end, dep, 30, false); ok {
		t.Errorf("removal sent when rv 30 had been delivered: excused: %s", why)
	}
	// A foregroundDeletion removal announced (decided) before rv 30 came
	// is the limit; announced after it, it is not.
	log := d.logger(logr.Discard())
	d.announced = nil
	log.V(2).Info(announceForeground, "object", "ConfigMap.v1 ns/o (uid o)")
	d.announced[0].at = at(15)
	if why, ok := c.watchLag(owner, end, dep, 30, false); !ok {
		t.Errorf("foreground removal announced before rv 30 came: not excused: %s", why)
	}
	d.announced[0].at = at(25)
	if why, ok := c.watchLag(owner, end, dep, 30, false); ok {
		t.Errorf("foreground removal announced after rv 30 came: excused: %s", why)
	}
	d.announced[0].object = "ConfigMap.v1 ns/p (uid p)"
	d.announced[0].at = at(15)
	if why, ok := c.watchLag(owner, end, dep, 30, false); ok {
		t.Errorf("another owner's announcement dated this removal: excused: %s", why)
	}
	if why, ok := c.watchLag(owner, end, dep, 10, true); ok {
		t.Errorf("reference at rv 10 delivered before the decision: excused: %s", why)
	}
}
