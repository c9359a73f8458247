package shadow

import (
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"github.com/kgc-dev/kgc/internal/graph"
	"github.com/kgc-dev/kgc/internal/history"
	"github.com/kgc-dev/kgc/internal/metrics"
	"github.com/kgc-dev/kgc/internal/rules"
)

const window = time.Minute

func newTracker(t *testing.T) (*Tracker, *clocktesting.FakeClock, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg, metrics.Sources{Graph: func() metrics.GraphCounts { return metrics.GraphCounts{} }, Monitors: func() []metrics.MonitorState { return nil }})
	if err != nil {
		t.Fatal(err)
	}
	clk := clocktesting.NewFakeClock(time.Date(2026, 11, 26, 4, 0, 0, 0, time.UTC))
	return New(Config{Window: window, Keep: 3, Metrics: m, Clock: clk}), clk, reg
}

func obj(uid string) history.Object {
	return history.Object{APIVersion: "v1", Kind: "ConfigMap", Namespace: "a", Name: "n-" + uid, UID: types.UID(uid)}
}

func deleteRec(uid string) history.Record {
	return history.Record{Operation: history.OpDelete, Object: obj(uid), Reason: "no owner keeps it", Outcome: history.OutcomeShadow}
}

func refsRec(uid string, owners ...string) history.Record {
	r := history.Record{Operation: history.OpRemoveReferences, Object: obj(uid), Reason: "a solid owner keeps it", Outcome: history.OutcomeShadow}
	for _, o := range owners {
		r.Owners = append(r.Owners, history.Owner{UID: types.UID(o), State: "dangling", Removed: true})
	}
	r.Owners = append(r.Owners, history.Owner{UID: "solid", State: "solid"})
	return r
}

func finRec(uid, f string) history.Record {
	return history.Record{Operation: history.OpRemoveFinalizer, Object: obj(uid), Finalizer: f, Outcome: history.OutcomeShadow}
}

func wantCounts(t *testing.T, tr *Tracker, reg *prometheus.Registry, agree, kgcOnly, otherOnly uint64) {
	t.Helper()
	if got := tr.Counts(); got != (Counts{agree, kgcOnly, otherOnly}) {
		t.Fatalf("counts %+v, want agree %d kgcOnly %d otherOnly %d", got, agree, kgcOnly, otherOnly)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]uint64{}
	for _, mf := range mfs {
		if mf.GetName() != "kgc_shadow_agreement_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			got[m.GetLabel()[0].GetValue()] = uint64(m.GetCounter().GetValue())
		}
	}
	if want := map[string]uint64{"agree": agree, "kgc_only": kgcOnly, "other_only": otherOnly}; !maps.Equal(got, want) {
		t.Fatalf("kgc_shadow_agreement_total %v, want %v", got, want)
	}
}

func TestDecisionAgreesWhenItsEffectShows(t *testing.T) {
	tr, clk, reg := newTracker(t)
	tr.Decided(deleteRec("d"))
	tr.Decided(refsRec("r", "o1", "o2"))
	tr.Decided(finRec("f", rules.FinalizerOrphan))
	tr.Decided(finRec("g", rules.FinalizerForeground))
	wantCounts(t, tr, reg, 0, 0, 0)

	clk.Step(window / 2)
	tr.Observe(Change{Object: obj("d"), Deleted: true})
	// One of two references removed: not yet.
	tr.Observe(Change{Object: obj("r"), LostRefs: []LostRef{{Owner: "o1", State: OwnerAbsent}}})
	wantCounts(t, tr, reg, 1, 0, 0)
	tr.Observe(Change{Object: obj("r"), LostRefs: []LostRef{{Owner: "o2", State: OwnerAbsent}}})
	tr.Observe(Change{Object: obj("f"), LostFinalizers: []string{rules.FinalizerOrphan}, FinalizerGC: true})
	// Gone: it lost its finalizer on the way.
	tr.Observe(Change{Object: obj("g"), Gone: true})
	wantCounts(t, tr, reg, 4, 0, 0)
	clk.Step(2 * window)
	tr.Expire()
	wantCounts(t, tr, reg, 4, 0, 0)
	if p := tr.Snapshot(history.Filter{}); p.Pending != 0 || p.Unmatched != 0 || len(p.Disagreements) != 0 {
		t.Fatalf("page %+v", p)
	}
}

func TestDecisionWithoutEffectIsKGCOnlyAfterTheWindow(t *testing.T) {
	tr, clk, reg := newTracker(t)
	tr.Decided(deleteRec("d"))
	clk.Step(window - time.Second)
	tr.Expire()
	wantCounts(t, tr, reg, 0, 0, 0)
	// Decided again (a newer version of the object): still one decision.
	tr.Decided(deleteRec("d"))
	clk.Step(time.Second)
	tr.Expire()
	wantCounts(t, tr, reg, 0, 1, 0)
	p := tr.Snapshot(history.Filter{})
	if len(p.Disagreements) != 1 {
		t.Fatalf("disagreements %+v", p.Disagreements)
	}
	d := p.Disagreements[0]
	if d.Outcome != metrics.ShadowKGCOnly || d.Object.UID != "d" || d.Decision == nil || d.Decision.Reason != "no owner keeps it" || !strings.Contains(d.Observed, "within 1m0s") {
		t.Fatalf("disagreement %+v", d)
	}
	// The effect showing late changes nothing.
	tr.Observe(Change{Object: obj("d"), Deleted: true})
	wantCounts(t, tr, reg, 0, 1, 0)
}

func TestDecisionAboutAnObjectGoneOtherwiseIsKGCOnlyAtOnce(t *testing.T) {
	tr, _, reg := newTracker(t)
	tr.Decided(refsRec("r", "o1"))
	tr.Observe(Change{Object: obj("r"), Gone: true, Deleted: true})
	wantCounts(t, tr, reg, 0, 1, 0)
}

func TestOtherCollectorsChangeIsOtherOnlyUnlessKGCDecidesItInTheWindow(t *testing.T) {
	tr, clk, reg := newTracker(t)
	// GC-like changes with no decision.
	tr.Observe(Change{Object: obj("a"), Deleted: true, DeletedGC: true, Owners: "ReplicaSet rs (uid rs) absent"})
	tr.Observe(Change{Object: obj("b"), LostRefs: []LostRef{{Owner: "o", State: OwnerWaiting}}})
	tr.Observe(Change{Object: obj("c"), LostFinalizers: []string{rules.FinalizerForeground}, FinalizerGC: true})
	// Not a collector's: a user deleting an object a solid owner keeps,
	// a controller releasing it, a policy swap of the finalizers.
	tr.Observe(Change{Object: obj("u"), Deleted: true, DeletedGC: false})
	tr.Observe(Change{Object: obj("v"), LostRefs: []LostRef{{Owner: "o", State: OwnerSolid}}})
	tr.Observe(Change{Object: obj("w"), LostFinalizers: []string{rules.FinalizerOrphan}, FinalizerGC: false})
	// kgc decides two of them late, within the window (in flight).
	clk.Step(window / 2)
	tr.Decided(deleteRec("a"))
	tr.Decided(refsRec("b", "o"))
	wantCounts(t, tr, reg, 2, 0, 0)
	clk.Step(window)
	tr.Expire()
	wantCounts(t, tr, reg, 2, 0, 1)
	p := tr.Snapshot(history.Filter{UID: "c"})
	if len(p.Disagreements) != 1 || p.Disagreements[0].Outcome != metrics.ShadowOtherOnly || p.Disagreements[0].Operation != history.OpRemoveFinalizer ||
		p.Disagreements[0].Finalizer != rules.FinalizerForeground {
		t.Fatalf("disagreements %+v", p.Disagreements)
	}
}

// Two owners of one object go one event apart: one collector removes the
// reference to the first (the second still keeps it), the other, seeing
// both gone, deletes the object. The deletion decides.
func TestDeletionSupersedesReferenceRemoval(t *testing.T) {
	tr, clk, reg := newTracker(t)
	// kgc removes the reference, the other collector deletes.
	tr.Decided(refsRec("x", "a"))
	tr.Observe(Change{Object: obj("x"), Deleted: true, DeletedGC: true})
	tr.Decided(deleteRec("x")) // kgc sees the second owner go too
	// The other collector removes the reference, kgc deletes.
	tr.Observe(Change{Object: obj("y"), LostRefs: []LostRef{{Owner: "a", State: OwnerAbsent}}})
	tr.Decided(deleteRec("y"))
	tr.Observe(Change{Object: obj("y"), Deleted: true, DeletedGC: true})
	// kgc deletes; the other collector's reference removal, decided from
	// an older view, lands after.
	tr.Decided(deleteRec("z"))
	tr.Observe(Change{Object: obj("z"), LostRefs: []LostRef{{Owner: "a", State: OwnerWaiting}}})
	tr.Observe(Change{Object: obj("z"), Deleted: true, DeletedGC: true})
	clk.Step(2 * window)
	tr.Expire()
	wantCounts(t, tr, reg, 3, 0, 0)
	if p := tr.Snapshot(history.Filter{}); p.Pending != 0 || p.Unmatched != 0 {
		t.Fatalf("page %+v", p)
	}
}

func TestJudgeIsAskedAboutUnmatchedChanges(t *testing.T) {
	tr, _, reg := newTracker(t)
	var asked []string
	tr.cfg.Judge = func(uid types.UID, op, detail string) {
		asked = append(asked, string(uid)+" "+op+" "+detail)
		if uid == "a" {
			tr.Decided(deleteRec("a")) // kgc decides it now
		}
	}
	tr.Decided(deleteRec("m"))
	tr.Observe(Change{Object: obj("m"), Deleted: true, DeletedGC: true}) // matched: not asked
	tr.Observe(Change{Object: obj("a"), Deleted: true, DeletedGC: true})
	tr.Observe(Change{Object: obj("b"), LostRefs: []LostRef{{Owner: "o", State: OwnerOrphaning}}})
	if strings.Join(asked, ",") != "a delete ,b orphan_dependent o" {
		t.Fatalf("asked %q", asked)
	}
	wantCounts(t, tr, reg, 2, 0, 0)
}

func TestDisagreementsAreBounded(t *testing.T) {
	tr, clk, _ := newTracker(t)
	for _, u := range []string{"1", "2", "3", "4", "5"} {
		tr.Decided(deleteRec(u))
	}
	clk.Step(window)
	tr.Expire()
	p := tr.Snapshot(history.Filter{})
	if len(p.Disagreements) != 3 || p.Dropped != 2 || p.Counts.KGCOnly != 5 {
		t.Fatalf("page %+v", p)
	}
}

// fakeGraph is a graph with a few nodes, for Diff.
func fakeGraph(t *testing.T, objs ...rules.Object) *graph.Graph {
	t.Helper()
	g := graph.New()
	for _, o := range objs {
		g.Apply(graph.Event{Type: graph.Upsert, Object: o})
	}
	return g
}

func ref(uid string, block bool) metav1.OwnerReference {
	return metav1.OwnerReference{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "rs-" + uid, UID: types.UID(uid), BlockOwnerDeletion: ptr.To(block)}
}

func rsObj(uid string, deleting bool, finalizers ...string) rules.Object {
	return rules.Object{Identity: rules.Identity{APIVersion: "apps/v1", Kind: "ReplicaSet", Namespace: "a", Name: "rs-" + uid, UID: types.UID(uid)},
		ResourceVersion: "1", Deleting: deleting, Finalizers: finalizers}
}

func podObj(uid, rv string, deleting bool, refs ...metav1.OwnerReference) rules.Object {
	return rules.Object{Identity: rules.Identity{APIVersion: "v1", Kind: "Pod", Namespace: "a", Name: "p-" + uid, UID: types.UID(uid)},
		ResourceVersion: rv, Deleting: deleting, OwnerReferences: refs}
}

func TestDiff(t *testing.T) {
	solid := rsObj("solid", false)
	waiting := rsObj("waiting", true, rules.FinalizerForeground)
	orphaning := rsObj("orphaning", true, rules.FinalizerOrphan)
	for _, tc := range []struct {
		name   string
		before []rules.Object
		ev     graph.Event
		ok     bool
		check  func(*testing.T, Change)
	}{
		{"unobserved object", nil, graph.Event{Type: graph.Upsert, Object: podObj("p", "2", true, ref("x", true))}, false, nil},
		{"no change", []rules.Object{solid, podObj("p", "1", false, ref("solid", true))},
			graph.Event{Type: graph.Upsert, Object: podObj("p", "2", false, ref("solid", true))}, false, nil},
		{"deleted while its only owner is unobserved: GC-like", []rules.Object{podObj("p", "1", false, ref("x", true))},
			graph.Event{Type: graph.Upsert, Object: podObj("p", "2", true, ref("x", true))}, true, func(t *testing.T, c Change) {
				if !c.Deleted || !c.DeletedGC || c.Gone || !strings.Contains(c.Owners, "unobserved") {
					t.Errorf("%+v", c)
				}
			}},
		{"deleted while an owner is solid: a user's", []rules.Object{solid, podObj("p", "1", false, ref("x", true), ref("solid", true))},
			graph.Event{Type: graph.Delete, Object: podObj("p", "2", false)}, true, func(t *testing.T, c Change) {
				if !c.Deleted || c.DeletedGC || !c.Gone {
					t.Errorf("%+v", c)
				}
			}},
		{"deleted while its owner is waiting", []rules.Object{waiting, podObj("p", "1", false, ref("waiting", true))},
			graph.Event{Type: graph.Upsert, Object: podObj("p", "2", true, ref("waiting", true))}, true, func(t *testing.T, c Change) {
				if !c.DeletedGC {
					t.Errorf("%+v", c)
				}
			}},
		{"deleted while its owner is orphaning: not a collector's", []rules.Object{orphaning, podObj("p", "1", false, ref("orphaning", true))},
			graph.Event{Type: graph.Upsert, Object: podObj("p", "2", true, ref("orphaning", true))}, true, func(t *testing.T, c Change) {
				if !c.Deleted || c.DeletedGC {
					t.Errorf("%+v", c)
				}
			}},
		{"references lost and unblocked", []rules.Object{solid, orphaning, waiting, podObj("p", "1", false, ref("solid", true), ref("orphaning", true), ref("waiting", true))},
			graph.Event{Type: graph.Upsert, Object: podObj("p", "2", false, ref("solid", false))}, true, func(t *testing.T, c Change) {
				if len(c.LostRefs) != 2 || c.LostRefs[0] != (LostRef{"orphaning", OwnerOrphaning, false}) || c.LostRefs[1] != (LostRef{"waiting", OwnerWaiting, false}) ||
					len(c.Unblocked) != 1 || c.Unblocked[0] != "solid" || c.Deleted {
					t.Errorf("%+v", c)
				}
				if !c.LostRefs[0].GC() || !c.LostRefs[1].GC() || (LostRef{"s", OwnerSolid, false}).GC() || (LostRef{"w", OwnerWaiting, true}).GC() {
					t.Error("GC()")
				}
			}},
		{"orphan finalizer removed from a deleting owner", []rules.Object{orphaning},
			graph.Event{Type: graph.Upsert, Object: func() rules.Object { o := rsObj("orphaning", true); o.ResourceVersion = "2"; return o }()}, true, func(t *testing.T, c Change) {
				if len(c.LostFinalizers) != 1 || c.LostFinalizers[0] != rules.FinalizerOrphan || !c.FinalizerGC {
					t.Errorf("%+v", c)
				}
			}},
		{"orphan swapped for foregroundDeletion: the apiserver's", []rules.Object{orphaning},
			graph.Event{Type: graph.Upsert, Object: func() rules.Object {
				o := rsObj("orphaning", true, rules.FinalizerForeground)
				o.ResourceVersion = "2"
				return o
			}()}, true, func(t *testing.T, c Change) {
				if len(c.LostFinalizers) != 1 || c.FinalizerGC {
					t.Errorf("%+v", c)
				}
			}},
		{"gone holding foregroundDeletion", []rules.Object{waiting},
			graph.Event{Type: graph.Delete, Object: rsObj("waiting", true)}, true, func(t *testing.T, c Change) {
				if !c.Gone || c.Deleted || len(c.LostFinalizers) != 1 || !c.FinalizerGC {
					t.Errorf("%+v", c)
				}
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := fakeGraph(t, tc.before...)
			c, ok := Diff(g, tc.ev)
			if ok != tc.ok {
				t.Fatalf("ok %v, want %v: %+v", ok, tc.ok, c)
			}
			if tc.check != nil {
				tc.check(t, c)
			}
		})
	}
}
