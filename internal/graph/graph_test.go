package graph_test

import (
	"fmt"
	"math/rand/v2"
	"os"
	"reflect"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kgc-dev/kgc/internal/graph"
	"github.com/kgc-dev/kgc/internal/rules"
)

// The scenario tests speak in short UIDs ("o", "d1", …). Unless an option
// says otherwise an object is a core/v1 ConfigMap named "name-<uid>" in
// namespace testNS, and a reference names exactly that object.
const testNS = "ns"

type objOpt func(*rules.Object)

func obj(uid string, opts ...objOpt) rules.Object {
	o := rules.Object{
		Identity:        rules.Identity{APIVersion: "v1", Kind: "ConfigMap", Namespace: testNS, Name: "name-" + uid, UID: types.UID(uid)},
		ResourceVersion: nextRV(),
	}
	for _, f := range opts {
		f(&o)
	}
	return o
}

func owners(refs ...metav1.OwnerReference) objOpt {
	return func(o *rules.Object) { o.OwnerReferences = refs }
}

// deleting sets deletionTimestamp with the given finalizers.
func deleting(finalizers ...string) objOpt {
	return func(o *rules.Object) { o.Deleting, o.Finalizers = true, finalizers }
}

func finalizers(f ...string) objOpt { return func(o *rules.Object) { o.Finalizers = f } }

func rv(v string) objOpt { return func(o *rules.Object) { o.ResourceVersion = v } }

func namespace(ns string) objOpt { return func(o *rules.Object) { o.Identity.Namespace = ns } }

func kind(apiVersion, k string) objOpt {
	return func(o *rules.Object) { o.Identity.APIVersion, o.Identity.Kind = apiVersion, k }
}

type refOpt func(*metav1.OwnerReference)

func ref(uid string, opts ...refOpt) metav1.OwnerReference {
	r := metav1.OwnerReference{APIVersion: "v1", Kind: "ConfigMap", Name: "name-" + uid, UID: types.UID(uid)}
	for _, f := range opts {
		f(&r)
	}
	return r
}

func block(r *metav1.OwnerReference) { r.BlockOwnerDeletion = ptr(true) }

func noBlock(r *metav1.OwnerReference) { r.BlockOwnerDeletion = ptr(false) }

func refName(n string) refOpt { return func(r *metav1.OwnerReference) { r.Name = n } }

func refKind(apiVersion, k string) refOpt {
	return func(r *metav1.OwnerReference) { r.APIVersion, r.Kind = apiVersion, k }
}

func ptr[T any](v T) *T { return &v }

func upsert(o rules.Object) graph.Event { return graph.Event{Type: graph.Upsert, Object: o} }

func del(o rules.Object) graph.Event { return graph.Event{Type: graph.Delete, Object: o} }

// nodeWant is the expected state of one node after a step.
type nodeWant struct {
	virtual, absent bool
	dependents      []string // exact set
}

type step struct {
	ev         graph.Event
	wantDelete []string // AttemptToDelete, as a set
	wantOrphan []string // AttemptToOrphan, as a set
	wantAbsent []string // UIDs of Absent identities, as a set
	nodes      map[string]nodeWant
	gone       []string // UIDs that must not be in the graph
	check      func(t *testing.T, g *graph.Graph)
}

func set[T ~string](in []T) []string {
	out := make([]string, 0, len(in))
	for _, v := range in {
		out = append(out, string(v))
	}
	slices.Sort(out)
	return slices.Compact(out)
}

func absentUIDs(ids []graph.Absence) []string {
	out := make([]types.UID, 0, len(ids))
	for _, id := range ids {
		out = append(out, id.UID)
	}
	return set(out)
}

func runSteps(t *testing.T, steps []step) *graph.Graph {
	t.Helper()
	g := graph.New()
	for i, s := range steps {
		eff := g.Apply(s.ev)
		if err := g.CheckInvariants(); err != nil {
			t.Fatalf("step %d (%v %s): invariants: %v", i, s.ev.Type, s.ev.Object.Identity.UID, err)
		}
		if got, want := set(eff.AttemptToDelete), set(s.wantDelete); !slices.Equal(got, want) {
			t.Errorf("step %d (%v %s): AttemptToDelete = %v, want %v", i, s.ev.Type, s.ev.Object.Identity.UID, got, want)
		}
		if got, want := set(eff.AttemptToOrphan), set(s.wantOrphan); !slices.Equal(got, want) {
			t.Errorf("step %d (%v %s): AttemptToOrphan = %v, want %v", i, s.ev.Type, s.ev.Object.Identity.UID, got, want)
		}
		if got, want := absentUIDs(eff.Absent), set(s.wantAbsent); !slices.Equal(got, want) {
			t.Errorf("step %d (%v %s): Absent = %v, want %v", i, s.ev.Type, s.ev.Object.Identity.UID, got, want)
		}
		for uid, want := range s.nodes {
			it, ok := g.Item(types.UID(uid))
			if !ok {
				t.Errorf("step %d: node %s missing", i, uid)
				continue
			}
			if it.Virtual != want.virtual || it.Absent != want.absent {
				t.Errorf("step %d: node %s virtual=%v absent=%v, want virtual=%v absent=%v", i, uid, it.Virtual, it.Absent, want.virtual, want.absent)
			}
			var deps []types.UID
			for _, d := range it.Dependents {
				deps = append(deps, d.UID)
			}
			if got, want := set(deps), set(want.dependents); !slices.Equal(got, want) {
				t.Errorf("step %d: node %s dependents = %v, want %v", i, uid, got, want)
			}
		}
		for _, uid := range s.gone {
			if _, ok := g.Item(types.UID(uid)); ok {
				t.Errorf("step %d: node %s still in the graph", i, uid)
			}
		}
		if s.check != nil {
			s.check(t, g)
		}
		if t.Failed() {
			t.FailNow()
		}
	}
	return g
}

func TestScenarios(t *testing.T) {
	fg := rules.FinalizerForeground
	orphan := rules.FinalizerOrphan
	tests := []struct {
		name  string
		steps []step
	}{
		{
			name: "dependent added before its owner",
			steps: []step{
				{
					ev:         upsert(obj("d", owners(ref("o")))),
					wantDelete: []string{"d"}, // the owner is only a placeholder
					nodes:      map[string]nodeWant{"o": {virtual: true, dependents: []string{"d"}}, "d": {}},
					check: func(t *testing.T, g *graph.Graph) {
						if _, ok := g.Object("o"); ok {
							t.Error("Object(o) ok for a placeholder")
						}
						ov, ok := g.Owner("o")
						if !ok || !ov.Virtual || ov.Identity.Namespace != testNS || ov.Identity.Name != "name-o" {
							t.Errorf("Owner(o) = %+v, %v; want a virtual guess in the dependent's namespace", ov, ok)
						}
					},
				},
				{
					ev:    upsert(obj("o")),
					nodes: map[string]nodeWant{"o": {dependents: []string{"d"}}},
					check: func(t *testing.T, g *graph.Graph) {
						if _, ok := g.Object("o"); !ok {
							t.Error("Object(o) not ok once observed")
						}
					},
				},
				{ev: upsert(obj("d", owners(ref("o")), rv("2")))}, // owner observed and matching: nothing to do
			},
		},
		{
			name: "owner deleted with dependents becomes an absent placeholder",
			steps: []step{
				{ev: upsert(obj("o"))},
				{ev: upsert(obj("d1", owners(ref("o"))))},
				{ev: upsert(obj("d2", owners(ref("o"))))},
				{
					ev:         del(obj("o")),
					wantDelete: []string{"d1", "d2"},
					wantAbsent: []string{"o"},
					nodes:      map[string]nodeWant{"o": {virtual: true, absent: true, dependents: []string{"d1", "d2"}}},
					check: func(t *testing.T, g *graph.Graph) {
						ov, ok := g.Owner("o")
						if !ok || !ov.Absent || !ov.Virtual || ov.Identity != obj("o").Identity {
							t.Errorf("Owner(o) = %+v, %v; want absent placeholder keeping the observed identity", ov, ok)
						}
					},
				},
				{ev: upsert(obj("d1", owners(ref("o")), rv("2"))), wantDelete: []string{"d1"}},
				{
					ev:         del(obj("d1")),
					wantAbsent: []string{"d1"},
					nodes:      map[string]nodeWant{"o": {virtual: true, absent: true, dependents: []string{"d2"}}},
					gone:       []string{"d1"},
				},
				{
					ev:         del(obj("d2")),
					wantAbsent: []string{"d2"},
					gone:       []string{"o", "d2"},
					check: func(t *testing.T, g *graph.Graph) {
						if g.Len() != 0 {
							t.Errorf("Len = %d, want 0", g.Len())
						}
					},
				},
			},
		},
		{
			name: "blocking ref removed from a foreground owner enqueues the owner",
			steps: []step{
				{ev: upsert(obj("o"))},
				{ev: upsert(obj("d", owners(ref("o", block))))},
				{ev: upsert(obj("o", deleting(fg), rv("2"))), wantDelete: []string{"o", "d"}},
				{
					ev:         upsert(obj("d", rv("2"))),
					wantDelete: []string{"o"},
					nodes:      map[string]nodeWant{"o": {dependents: nil}},
				},
			},
		},
		{
			name: "non-blocking ref removed from a foreground owner enqueues nothing",
			steps: []step{
				{ev: upsert(obj("o"))},
				{ev: upsert(obj("d", owners(ref("o", noBlock))))},
				{ev: upsert(obj("o", deleting(fg), rv("2"))), wantDelete: []string{"o", "d"}},
				{ev: upsert(obj("d", rv("2"))), nodes: map[string]nodeWant{"o": {}}},
			},
		},
		{
			name: "blocking ref removed from a live owner enqueues nothing",
			steps: []step{
				{ev: upsert(obj("o"))},
				{ev: upsert(obj("d", owners(ref("o", block))))},
				{ev: upsert(obj("d", rv("2"))), nodes: map[string]nodeWant{"o": {}}},
			},
		},
		{
			name: "ref removed from a placeholder owner drops the placeholder",
			steps: []step{
				{ev: upsert(obj("d", owners(ref("x"), ref("y")))), wantDelete: []string{"d"}},
				{ev: upsert(obj("d", owners(ref("y")), rv("2"))), wantDelete: []string{"d"}, gone: []string{"x"}},
				{ev: upsert(obj("d", rv("3"))), gone: []string{"x", "y"}},
			},
		},
		{
			name: "blockOwnerDeletion true to false releases a foreground owner",
			steps: []step{
				{ev: upsert(obj("o"))},
				{ev: upsert(obj("d", owners(ref("o", block))))},
				{ev: upsert(obj("o", deleting(fg), rv("2"))), wantDelete: []string{"o", "d"}},
				// o is re-checked; d still has a waiting owner, so it is too.
				{ev: upsert(obj("d", owners(ref("o", noBlock)), rv("2"))), wantDelete: []string{"o", "d"}},
				{
					ev:         upsert(obj("d", owners(ref("o")), rv("3"))), // false -> nil: no transition
					wantDelete: []string{"d"},
				},
				{ev: upsert(obj("d", owners(ref("o", block)), rv("4"))), wantDelete: []string{"d"}}, // false -> true: o stays blocked
			},
		},
		{
			name: "blockOwnerDeletion true to false with a live owner enqueues nothing",
			steps: []step{
				{ev: upsert(obj("o"))},
				{ev: upsert(obj("d", owners(ref("o", block))))},
				{ev: upsert(obj("d", owners(ref("o", noBlock)), rv("2")))},
			},
		},
		{
			name: "foreground transition enqueues dependents only on the transition",
			steps: []step{
				{ev: upsert(obj("o"))},
				{ev: upsert(obj("d1", owners(ref("o", block))))},
				{ev: upsert(obj("d2", owners(ref("o"))))},
				{ev: upsert(obj("o", deleting(fg), rv("2"))), wantDelete: []string{"o", "d1", "d2"}},
				{ev: upsert(obj("o", deleting(fg), rv("3"))), wantDelete: []string{"o"}},
				{ev: upsert(obj("o", deleting("example.com/x", fg), rv("4"))), wantDelete: []string{"o"}},
				// Blocking dependent gone: the owner is re-checked.
				{ev: del(obj("d1")), wantDelete: []string{"o"}, wantAbsent: []string{"d1"}},
				// Non-blocking dependent gone: nothing waits on it.
				{ev: del(obj("d2")), wantAbsent: []string{"d2"}},
			},
		},
		{
			name: "owner first observed in foreground deletion",
			steps: []step{
				{ev: upsert(obj("d", owners(ref("o", block)))), wantDelete: []string{"d"}},
				{ev: upsert(obj("o", deleting(fg))), wantDelete: []string{"o", "d"}},
			},
		},
		{
			name: "foreground finalizer without deletionTimestamp is not a transition",
			steps: []step{
				{ev: upsert(obj("o"))},
				{ev: upsert(obj("d", owners(ref("o", block))))},
				{ev: upsert(obj("o", finalizers(fg), rv("2")))},
				{ev: upsert(obj("o", deleting("example.com/x"), rv("3")))}, // background deletion pending
				{ev: upsert(obj("o", deleting("example.com/x", fg), rv("4"))), wantDelete: []string{"o", "d"}},
			},
		},
		{
			name: "orphan finalizer",
			steps: []step{
				{ev: upsert(obj("o"))},
				{ev: upsert(obj("d", owners(ref("o"))))},
				{ev: upsert(obj("o", finalizers(orphan), rv("2")))}, // not deleting yet
				{ev: upsert(obj("o", deleting(orphan), rv("3"))), wantOrphan: []string{"o"}},
				{ev: upsert(obj("o", deleting(orphan, fg), rv("4"))), wantOrphan: []string{"o"}, wantDelete: []string{"o", "d"}},
			},
		},
		{
			name: "orphaning owner without dependents is still enqueued",
			steps: []step{
				{ev: upsert(obj("o", deleting(orphan))), wantOrphan: []string{"o"}},
			},
		},
		{
			name: "duplicate references to the same UID",
			steps: []step{
				{
					ev:         upsert(obj("d", owners(ref("o", noBlock), ref("o", block), ref("o")))),
					wantDelete: []string{"d"},
					nodes:      map[string]nodeWant{"o": {virtual: true, dependents: []string{"d"}}},
					check: func(t *testing.T, g *graph.Graph) {
						it, _ := g.Item("o")
						if len(it.Dependents) != 1 || !it.Dependents[0].Blocking {
							t.Errorf("Dependents of o = %+v, want one blocking entry", it.Dependents)
						}
					},
				},
				{ev: upsert(obj("o"))},
				{ev: upsert(obj("o", deleting(fg), rv("2"))), wantDelete: []string{"o", "d"}},
				// One of the duplicates goes: the UID still blocks, nothing changes for o.
				{ev: upsert(obj("d", owners(ref("o", block), ref("o")), rv("2"))), wantDelete: []string{"d"}},
				// Every blocking duplicate goes: o is released.
				{ev: upsert(obj("d", owners(ref("o"), ref("o", noBlock)), rv("3"))), wantDelete: []string{"o", "d"}},
				{ev: del(obj("d")), wantAbsent: []string{"d"}, nodes: map[string]nodeWant{"o": {}}},
			},
		},
		{
			name: "self reference",
			steps: []step{
				{
					ev:    upsert(obj("s", owners(ref("s", block)))),
					nodes: map[string]nodeWant{"s": {dependents: []string{"s"}}},
				},
				{ev: upsert(obj("s", owners(ref("s", block)), deleting(fg), rv("2"))), wantDelete: []string{"s"}},
				{ev: upsert(obj("s", deleting(fg), rv("3"))), wantDelete: []string{"s"}, nodes: map[string]nodeWant{"s": {}}},
				{ev: upsert(obj("s", owners(ref("s")), rv("4"))), nodes: map[string]nodeWant{"s": {dependents: []string{"s"}}}},
				{ev: del(obj("s")), wantAbsent: []string{"s"}, gone: []string{"s"}},
			},
		},
		{
			name: "self reference with other dependents leaves a placeholder",
			steps: []step{
				{ev: upsert(obj("s", owners(ref("s"))))},
				{ev: upsert(obj("d", owners(ref("s"))))},
				{
					ev:         del(obj("s")),
					wantDelete: []string{"d"},
					wantAbsent: []string{"s"},
					nodes:      map[string]nodeWant{"s": {virtual: true, absent: true, dependents: []string{"d"}}},
				},
			},
		},
		{
			name: "identity mismatch needs attention",
			steps: []step{
				{ev: upsert(obj("o"))},
				{ev: upsert(obj("d", owners(ref("o")))), nodes: map[string]nodeWant{"o": {dependents: []string{"d"}}}},
				{ev: upsert(obj("d", owners(ref("o", refName("other"))), rv("2"))), wantDelete: []string{"d"}},
				{ev: upsert(obj("d", owners(ref("o", refKind("v1", "Secret"))), rv("3"))), wantDelete: []string{"d"}},
				{ev: upsert(obj("d", owners(ref("o", refKind("example.com/v1", "ConfigMap"))), rv("4"))), wantDelete: []string{"d"}},
				{ev: upsert(obj("d", owners(ref("o", refKind("v2", "ConfigMap"))), rv("5")))}, // the version is not identity
				{ev: upsert(obj("d2", namespace("other"), owners(ref("o")))), wantDelete: []string{"d2"}},
				{ev: upsert(obj("d", owners(ref("o")), rv("6")))},
			},
		},
		{
			name: "one mismatching ref among matching ones needs attention",
			steps: []step{
				{ev: upsert(obj("o1"))},
				{ev: upsert(obj("o2"))},
				{ev: upsert(obj("d", owners(ref("o1"), ref("o2", refName("wrong"))))), wantDelete: []string{"d"}},
			},
		},
		{
			name: "cluster-scoped owner matches a namespaced dependent",
			steps: []step{
				{ev: upsert(obj("n", kind("v1", "Namespace"), namespace("")))},
				{
					ev:    upsert(obj("d", owners(ref("n", refKind("v1", "Namespace"))))),
					nodes: map[string]nodeWant{"n": {dependents: []string{"d"}}},
				},
				{ev: upsert(obj("d2", namespace("elsewhere"), owners(ref("n", refKind("v1", "Namespace")))))},
			},
		},
		{
			name: "cluster-scoped dependent naming a namespaced owner needs attention",
			steps: []step{
				{ev: upsert(obj("o"))},
				{ev: upsert(obj("c", kind("rbac.authorization.k8s.io/v1", "ClusterRole"), namespace(""), owners(ref("o")))), wantDelete: []string{"c"}},
			},
		},
		{
			name: "deleting dependent needs no attention",
			steps: []step{
				{ev: upsert(obj("d", owners(ref("o")), deleting("example.com/x")))},
			},
		},
		{
			name: "dependent of a waiting owner needs attention",
			steps: []step{
				{ev: upsert(obj("o", deleting(fg))), wantDelete: []string{"o"}},
				{ev: upsert(obj("d", owners(ref("o")))), wantDelete: []string{"d"}},
			},
		},
		{
			name: "delete of an unknown UID is a no-op",
			steps: []step{
				{ev: del(obj("nope")), gone: []string{"nope"}},
				{ev: upsert(obj("d", owners(ref("v")))), wantDelete: []string{"d"}},
				// A delete for a placeholder's UID changes nothing: it was never observed.
				{ev: del(obj("v")), nodes: map[string]nodeWant{"v": {virtual: true, dependents: []string{"d"}}}},
			},
		},
		{
			name: "delete twice",
			steps: []step{
				{ev: upsert(obj("o"))},
				{ev: upsert(obj("d", owners(ref("o"))))},
				{ev: del(obj("o")), wantDelete: []string{"d"}, wantAbsent: []string{"o"}},
				{ev: del(obj("o")), nodes: map[string]nodeWant{"o": {virtual: true, absent: true, dependents: []string{"d"}}}},
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { runSteps(t, tc.steps) })
	}
}

func TestManyOwnerReferences(t *testing.T) {
	const n = 200
	var refs []metav1.OwnerReference
	var uids []string
	for i := range n {
		uid := fmt.Sprintf("o%03d", i)
		uids = append(uids, uid)
		refs = append(refs, ref(uid, block))
	}
	steps := []step{{
		ev:         upsert(obj("d", owners(refs...))),
		wantDelete: []string{"d"},
		check: func(t *testing.T, g *graph.Graph) {
			if g.Len() != n+1 {
				t.Errorf("Len = %d, want %d", g.Len(), n+1)
			}
			it, _ := g.Item("d")
			if len(it.OwnerReferences) != n {
				t.Errorf("Item(d) has %d refs, want %d", len(it.OwnerReferences), n)
			}
		},
	}}
	for i, uid := range uids {
		s := step{ev: upsert(obj(uid)), nodes: map[string]nodeWant{uid: {dependents: []string{"d"}}}}
		if i == n-1 {
			s.check = func(t *testing.T, g *graph.Graph) {
				for _, u := range uids {
					if ov, _ := g.Owner(types.UID(u)); ov.Virtual {
						t.Fatalf("owner %s still virtual", u)
					}
				}
			}
		}
		steps = append(steps, s)
	}
	// Every owner observed: d is fine now.
	steps = append(steps, step{ev: upsert(obj("d", owners(refs...), rv("2")))})
	// One owner starts foreground deletion, then d drops half its refs.
	steps = append(steps, step{ev: upsert(obj("o000", deleting(rules.FinalizerForeground), rv("2"))), wantDelete: []string{"o000", "d"}})
	steps = append(steps, step{
		ev:         upsert(obj("d", owners(refs[n/2:]...), rv("3"))),
		wantDelete: []string{"o000"},
		check: func(t *testing.T, g *graph.Graph) {
			for i, u := range uids {
				it, _ := g.Item(types.UID(u))
				if want := i >= n/2; (len(it.Dependents) == 1) != want {
					t.Fatalf("owner %s dependents %v, want linked=%v", u, it.Dependents, want)
				}
			}
		},
	})
	steps = append(steps, step{
		ev:         del(obj("d")),
		wantAbsent: []string{"d"},
		check: func(t *testing.T, g *graph.Graph) {
			if g.Len() != n {
				t.Errorf("Len = %d, want %d", g.Len(), n)
			}
		},
	})
	runSteps(t, steps)
}

func TestManyOwnerReferencesToPlaceholders(t *testing.T) {
	var refs []metav1.OwnerReference
	for i := range 200 {
		refs = append(refs, ref(fmt.Sprintf("v%03d", i)))
	}
	runSteps(t, []step{
		{ev: upsert(obj("d", owners(refs...))), wantDelete: []string{"d"}},
		{
			ev:         del(obj("d")),
			wantAbsent: []string{"d"},
			check: func(t *testing.T, g *graph.Graph) {
				if g.Len() != 0 {
					t.Errorf("Len = %d, want 0: placeholders outlived their last dependent", g.Len())
				}
			},
		},
	})
}

func TestMatches(t *testing.T) {
	owner := rules.Identity{APIVersion: "apps/v1", Kind: "Deployment", Namespace: "a", Name: "web", UID: "u"}
	cluster := rules.Identity{APIVersion: "v1", Kind: "Namespace", Name: "a", UID: "n"}
	good := metav1.OwnerReference{APIVersion: "apps/v1", Kind: "Deployment", Name: "web", UID: "u"}
	tests := []struct {
		name  string
		owner rules.Identity
		ref   metav1.OwnerReference
		ns    string
		want  bool
	}{
		{"exact", owner, good, "a", true},
		{"other version", owner, func() metav1.OwnerReference { r := good; r.APIVersion = "apps/v1beta2"; return r }(), "a", true},
		{"other group", owner, func() metav1.OwnerReference { r := good; r.APIVersion = "extensions/v1beta1"; return r }(), "a", false},
		{"other kind", owner, func() metav1.OwnerReference { r := good; r.Kind = "StatefulSet"; return r }(), "a", false},
		{"other name", owner, func() metav1.OwnerReference { r := good; r.Name = "api"; return r }(), "a", false},
		{"other uid", owner, func() metav1.OwnerReference { r := good; r.UID = "x"; return r }(), "a", false},
		{"other namespace", owner, good, "b", false},
		{"cluster-scoped dependent", owner, good, "", false},
		{"cluster-scoped owner", cluster, metav1.OwnerReference{APIVersion: "v1", Kind: "Namespace", Name: "a", UID: "n"}, "zzz", true},
		{"cluster-scoped owner, cluster-scoped dependent", cluster, metav1.OwnerReference{APIVersion: "v1", Kind: "Namespace", Name: "a", UID: "n"}, "", true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := rules.Matches(tc.owner, &tc.ref, tc.ns); got != tc.want {
				t.Errorf("Matches = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestIdentity(t *testing.T) {
	id := rules.Identity{APIVersion: "apps/v1", Kind: "Deployment", Namespace: "a", Name: "web", UID: "u"}
	if got, want := id.GroupKind(), (schema.GroupKind{Group: "apps", Kind: "Deployment"}); got != want {
		t.Errorf("GroupKind = %v, want %v", got, want)
	}
	if got, want := id.Coordinates(), (rules.Coordinates{Group: "apps", Kind: "Deployment", Namespace: "a", Name: "web", UID: "u"}); got != want {
		t.Errorf("Coordinates = %v, want %v", got, want)
	}
	if got, want := id.String(), "Deployment.apps/v1 a/web (uid u)"; got != want {
		t.Errorf("String = %q, want %q", got, want)
	}
	core := rules.Identity{APIVersion: "v1", Kind: "Namespace", Name: "a", UID: "n"}
	if got, want := core.String(), "Namespace.v1 a (uid n)"; got != want {
		t.Errorf("String = %q, want %q", got, want)
	}
	if got, want := core.Coordinates().String(), "Namespace. <cluster>/a (uid n)"; got != want {
		t.Errorf("Coordinates.String = %q, want %q", got, want)
	}
}

func nodeUIDs(nv []graph.Node) []string {
	out := make([]string, 0, len(nv))
	for _, n := range nv {
		out = append(out, string(n.Identity.UID))
	}
	return out
}

func TestComponents(t *testing.T) {
	g := graph.New()
	// Component 1: a <- b <- c, and c <- placeholder v (never observed).
	// Component 2: x <- y.  Lone node: z.
	for _, ev := range []graph.Event{
		upsert(obj("a")),
		upsert(obj("b", owners(ref("a")))),
		upsert(obj("c", owners(ref("b"), ref("v")))),
		upsert(obj("x", deleting(rules.FinalizerForeground))),
		upsert(obj("y", owners(ref("x", block)))),
		upsert(obj("z")),
	} {
		g.Apply(ev)
		if err := g.CheckInvariants(); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		name string
		uids []types.UID
		want []string
	}{
		{"no uids", nil, []string{}},
		{"from the root", []types.UID{"a"}, []string{"a", "b", "c", "v"}},
		{"from the middle", []types.UID{"b"}, []string{"a", "b", "c", "v"}},
		{"from a placeholder", []types.UID{"v"}, []string{"a", "b", "c", "v"}},
		{"two components", []types.UID{"c", "y"}, []string{"a", "b", "c", "v", "x", "y"}},
		{"repeated uid", []types.UID{"y", "y", "x"}, []string{"x", "y"}},
		{"lone node", []types.UID{"z"}, []string{"z"}},
		{"unknown uid", []types.UID{"nope"}, []string{}},
		{"unknown and known", []types.UID{"nope", "z"}, []string{"z"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := g.Components(tc.uids)
			if uids := nodeUIDs(got); !slices.Equal(uids, tc.want) {
				t.Errorf("Components(%v) = %v, want %v (sorted by UID)", tc.uids, uids, tc.want)
			}
		})
	}
	all, total := g.Nodes(nil)
	if uids := nodeUIDs(all); total != 7 || !slices.Equal(uids, []string{"a", "b", "c", "v", "x", "y", "z"}) {
		t.Errorf("Nodes(nil) = %v of %d, want the whole graph sorted by UID", uids, total)
	}
	// The nodes carry state.
	byUID := map[types.UID]graph.Node{}
	for _, n := range all {
		byUID[n.Identity.UID] = n
	}
	if v := byUID["v"]; !v.Virtual || v.Absent || !slices.Equal(v.Dependents, []types.UID{"c"}) {
		t.Errorf("node v = %+v, want virtual, not absent, with dependent c", v)
	}
	if x := byUID["x"]; !x.Deleting || !x.DeletingDependents() || x.Orphaning() || x.Virtual || !slices.Equal(x.Dependents, []types.UID{"y"}) {
		t.Errorf("node x = %+v, want deleting dependents y", x)
	}
	if c := byUID["c"]; len(c.OwnerReferences) != 2 || c.OwnerReferences[0].UID != "b" || c.OwnerReferences[1].UID != "v" || c.Dependents != nil {
		t.Errorf("owner references of c = %+v", c.OwnerReferences)
	}
	if a := byUID["a"]; !slices.Equal(a.Dependents, []types.UID{"b"}) {
		t.Errorf("dependents of a = %v", a.Dependents)
	}
}

// TestCopiesAreIndependent checks the concurrency contract: what the query
// methods return is the caller's to change.
func TestCopiesAreIndependent(t *testing.T) {
	newGraph := func() *graph.Graph {
		g := graph.New()
		g.Apply(upsert(obj("o")))
		g.Apply(upsert(obj("d", owners(ref("o", block)), finalizers("f1", "f2"), rv("7"))))
		return g
	}
	want := obj("d", owners(ref("o", block)), finalizers("f1", "f2"), rv("7"))

	t.Run("Item", func(t *testing.T) {
		g := newGraph()
		it, _ := g.Item("d")
		it.OwnerReferences[0].Name = "mutated"
		it.OwnerReferences = append(it.OwnerReferences, ref("x"))
		it.Finalizers[0] = "mutated"
		it.Identity.Name = "mutated"
		o, _ := g.Item("o")
		o.Dependents[0].UID = "mutated"
		o.Dependents[0].Blocking = false
		got, _ := g.Object("d")
		if !reflect.DeepEqual(got, want) {
			t.Errorf("graph changed through Item: %+v", got)
		}
		if o2, _ := g.Item("o"); len(o2.Dependents) != 1 || o2.Dependents[0].UID != "d" || !o2.Dependents[0].Blocking {
			t.Errorf("graph changed through Item.Dependents: %+v", o2.Dependents)
		}
		if err := g.CheckInvariants(); err != nil {
			t.Error(err)
		}
	})
	t.Run("Object", func(t *testing.T) {
		g := newGraph()
		ob, _ := g.Object("d")
		ob.OwnerReferences[0].UID = "mutated"
		ob.Finalizers[1] = "mutated"
		got, _ := g.Object("d")
		if !reflect.DeepEqual(got, want) {
			t.Errorf("graph changed through Object: %+v", got)
		}
		if err := g.CheckInvariants(); err != nil {
			t.Error(err)
		}
	})
	t.Run("Owner", func(t *testing.T) {
		g := newGraph()
		ov, _ := g.Owner("o")
		ov.Identity.Name = "mutated"
		ov.Deleting = true
		if ov2, _ := g.Owner("o"); ov2.Identity != obj("o").Identity || ov2.Deleting {
			t.Errorf("graph changed through Owner: %+v", ov2)
		}
	})
	t.Run("Nodes", func(t *testing.T) {
		g := newGraph()
		all, _ := g.Nodes(nil)
		for _, n := range append(all, g.Components([]types.UID{"d"})...) {
			for i := range n.OwnerReferences {
				n.OwnerReferences[i].UID = "mutated"
			}
			for i := range n.Finalizers {
				n.Finalizers[i] = "mutated"
			}
			for i := range n.Dependents {
				n.Dependents[i] = "mutated"
			}
		}
		if err := g.CheckInvariants(); err != nil {
			t.Errorf("graph changed through Nodes: %v", err)
		}
		if got, _ := g.Object("d"); !reflect.DeepEqual(got, want) {
			t.Errorf("graph changed through Nodes: %+v", got)
		}
		if o := g.NodesByUID([]types.UID{"o"}); len(o) != 1 || !slices.Equal(o[0].Dependents, []types.UID{"d"}) {
			t.Errorf("graph changed through Nodes.Dependents: %+v", o)
		}
	})
	// The ownerReference pointer fields (BlockOwnerDeletion, Controller) are
	// part of the copy too: writing through them must not reach the graph.
	t.Run("pointer fields", func(t *testing.T) {
		g := newGraph()
		it, _ := g.Item("d")
		*it.OwnerReferences[0].BlockOwnerDeletion = false
		ob, _ := g.Object("d")
		*ob.OwnerReferences[0].BlockOwnerDeletion = false
		all, _ := g.Nodes(nil)
		for _, n := range all {
			for _, r := range n.OwnerReferences {
				*r.BlockOwnerDeletion = false
			}
		}
		if got, _ := g.Item("o"); len(got.Dependents) != 1 || !got.Dependents[0].Blocking {
			t.Errorf("dependent d no longer blocks o: %+v", got.Dependents)
		}
		if got, _ := g.Object("d"); !reflect.DeepEqual(got, want) {
			t.Errorf("graph changed through a copy's pointer field: %+v", got)
		}
	})
}

// TestAbsentIdentity checks that a delete reports the identity the graph
// observed, not the one the delete event carries.
func TestAbsentIdentity(t *testing.T) {
	g := graph.New()
	o := obj("o", kind("apps/v1", "Deployment"))
	g.Apply(upsert(o))
	eff := g.Apply(del(obj("o")))
	if len(eff.Absent) != 1 || eff.Absent[0].Identity != o.Identity {
		t.Errorf("Absent = %+v, want [%+v]", eff.Absent, o.Identity)
	}
	if err := g.CheckInvariants(); err != nil {
		t.Error(err)
	}
}

// --- Randomized test against a model -------------------------------------

const randomUIDs = 300

func randomIdentity(i int) rules.Identity {
	// Half the UIDs are UUIDs as the apiserver makes them, half are not:
	// the graph keys them differently (uid.go).
	uid := types.UID(fmt.Sprintf("u%03d", i))
	if i%3 == 0 {
		uid = types.UID(fmt.Sprintf("%08x-0000-4000-8000-%012x", i, i))
	}
	switch {
	case i%10 == 0:
		return rules.Identity{APIVersion: "v1", Kind: "Namespace", Name: "n-" + string(uid), UID: uid}
	case i%10 == 1:
		return rules.Identity{APIVersion: "apps/v1", Kind: "Deployment", Namespace: "a", Name: "d-" + string(uid), UID: uid}
	default:
		return rules.Identity{APIVersion: "v1", Kind: "ConfigMap", Namespace: []string{"a", "b"}[i%2], Name: "c-" + string(uid), UID: uid}
	}
}

type model struct {
	objs   map[types.UID]rules.Object
	absent map[types.UID]bool
	// deps indexes objs by referenced UID: deps[owner][dependent] = blocking.
	deps map[types.UID]map[types.UID]bool
}

func newModel() *model {
	return &model{objs: map[types.UID]rules.Object{}, absent: map[types.UID]bool{}, deps: map[types.UID]map[types.UID]bool{}}
}

// set records o (or, with ok false, the absence of uid) in objs and deps.
func (m *model) set(uid types.UID, o rules.Object, ok bool) {
	if old, had := m.objs[uid]; had {
		for owner := range refsByUID(old.OwnerReferences) {
			delete(m.deps[owner], uid)
			if len(m.deps[owner]) == 0 {
				delete(m.deps, owner)
			}
		}
	}
	if !ok {
		delete(m.objs, uid)
		return
	}
	m.objs[uid] = o
	for owner, b := range refsByUID(o.OwnerReferences) {
		if m.deps[owner] == nil {
			m.deps[owner] = map[types.UID]bool{}
		}
		m.deps[owner][uid] = b
	}
}

func refsByUID(refs []metav1.OwnerReference) map[types.UID]bool {
	m := map[types.UID]bool{}
	for _, r := range refs {
		m[r.UID] = m[r.UID] || (r.BlockOwnerDeletion != nil && *r.BlockOwnerDeletion)
	}
	return m
}

func (m *model) dd(uid types.UID) bool {
	o, ok := m.objs[uid]
	return ok && o.DeletingDependents()
}

// dependents are the observed objects referencing uid, with whether they block.
func (m *model) dependents(uid types.UID) map[types.UID]bool { return m.deps[uid] }

func modelMatches(owner rules.Identity, r metav1.OwnerReference, ns string) bool {
	rgv, _ := schema.ParseGroupVersion(r.APIVersion)
	ogv, _ := schema.ParseGroupVersion(owner.APIVersion)
	return owner.Name == r.Name && owner.Kind == r.Kind && ogv.Group == rgv.Group &&
		(owner.Namespace == "" || owner.Namespace == ns)
}

func (m *model) needsAttention(o rules.Object) bool {
	if o.Deleting || len(o.OwnerReferences) == 0 {
		return false
	}
	for _, r := range o.OwnerReferences {
		owner, ok := m.objs[r.UID]
		if !ok || !modelMatches(owner.Identity, r, o.Identity.Namespace) || owner.DeletingDependents() {
			return true
		}
	}
	return false
}

// expectUpsert applies an upsert to the model and returns the exact effects
// the graph must report.
func (m *model) expectUpsert(o rules.Object) (del, orphan []types.UID) {
	uid := o.Identity.UID
	old, wasObserved := m.objs[uid]
	m.set(uid, o, true)
	delete(m.absent, uid)
	if wasObserved {
		cur := refsByUID(o.OwnerReferences)
		for owner, blocking := range refsByUID(old.OwnerReferences) {
			nowBlocking, still := cur[owner]
			if blocking && (!still || !nowBlocking) && m.dd(owner) {
				del = append(del, owner)
			}
		}
	}
	if o.DeletingDependents() {
		del = append(del, uid)
		if !wasObserved || !old.DeletingDependents() {
			for d := range m.dependents(uid) {
				del = append(del, d)
			}
		}
	}
	if m.needsAttention(o) {
		del = append(del, uid)
	}
	if o.Orphaning() {
		orphan = append(orphan, uid)
	}
	return del, orphan
}

// expectDelete applies a delete to the model and returns the effects; the
// deleted UID itself may or may not be among AttemptToDelete (a
// self-referencing foreground owner), so callers ignore it.
func (m *model) expectDelete(uid types.UID) (del []types.UID, absent []types.UID, observed bool) {
	o, ok := m.objs[uid]
	if !ok {
		return nil, nil, false
	}
	for owner, blocking := range refsByUID(o.OwnerReferences) {
		if blocking && owner != uid && m.dd(owner) {
			del = append(del, owner)
		}
	}
	m.set(uid, rules.Object{}, false)
	deps := m.dependents(uid)
	for d := range deps {
		del = append(del, d)
	}
	if len(deps) > 0 {
		m.absent[uid] = true
	}
	return del, []types.UID{uid}, true
}

// check compares the graph with the model: the node count, and the nodes
// in only (every node when only is nil).
func (m *model) check(g *graph.Graph, only map[types.UID]bool) error {
	want := map[types.UID]bool{}
	for uid := range m.objs {
		want[uid] = true
	}
	for uid := range m.deps {
		want[uid] = true
	}
	for uid := range m.absent {
		if !want[uid] {
			delete(m.absent, uid) // its placeholder went with its last dependent
		}
	}
	if g.Len() != len(want) {
		return fmt.Errorf("Len = %d, want %d", g.Len(), len(want))
	}
	if only == nil {
		only = want
	}
	for uid := range only {
		if !want[uid] {
			if _, ok := g.Item(uid); ok {
				return fmt.Errorf("node %s should not be in the graph", uid)
			}
			continue
		}
		it, ok := g.Item(uid)
		if !ok {
			return fmt.Errorf("node %s missing", uid)
		}
		o, observed := m.objs[uid]
		if it.Virtual == observed {
			return fmt.Errorf("node %s virtual=%v, observed=%v", uid, it.Virtual, observed)
		}
		if it.Absent != m.absent[uid] {
			return fmt.Errorf("node %s absent=%v, want %v", uid, it.Absent, m.absent[uid])
		}
		if observed {
			got := it.Object
			if !reflect.DeepEqual(got, o) {
				return fmt.Errorf("node %s = %+v, want %+v", uid, got, o)
			}
		}
		deps := m.dependents(uid)
		if len(it.Dependents) != len(deps) {
			return fmt.Errorf("node %s has %d dependents, want %d", uid, len(it.Dependents), len(deps))
		}
		for _, d := range it.Dependents {
			b, ok := deps[d.UID]
			b = b && d.UID != uid // a reference to oneself never blocks
			if !ok || b != d.Blocking {
				return fmt.Errorf("node %s dependent %s blocking=%v, model has %v (present %v)", uid, d.UID, d.Blocking, b, ok)
			}
			dep := m.objs[d.UID]
			if d.Deleting != dep.Deleting || d.DeletingDependents != dep.DeletingDependents() {
				return fmt.Errorf("node %s dependent %s state %+v, model %+v", uid, d.UID, d, dep)
			}
		}
	}
	return nil
}

// rvs makes every test object's resourceVersion unique, as the apiserver
// does: the graph takes an upsert with the resourceVersion it already has
// for "nothing changed".
var rvs atomic.Int64

func nextRV() string { return strconv.FormatInt(rvs.Add(1), 10) }

func randomObject(r *rand.Rand, i int) rules.Object {
	o := rules.Object{Identity: randomIdentity(i), ResourceVersion: nextRV()}
	nrefs := []int{0, 1, 1, 1, 2, 2, 3, 4}[r.IntN(8)]
	for range nrefs {
		target := randomIdentity(r.IntN(randomUIDs))
		if r.IntN(20) == 0 {
			target = o.Identity // self reference
		}
		or := metav1.OwnerReference{APIVersion: target.APIVersion, Kind: target.Kind, Name: target.Name, UID: target.UID}
		switch r.IntN(20) {
		case 0:
			or.Name = "wrong"
		case 1:
			or.Kind = "Secret"
		case 2:
			if target.Kind == "Deployment" {
				or.APIVersion = "apps/v1beta2" // another version of the same kind
			}
		}
		switch r.IntN(5) {
		case 0, 1:
			or.BlockOwnerDeletion = ptr(true)
		case 2:
			or.BlockOwnerDeletion = ptr(false)
		}
		if r.IntN(4) == 0 {
			or.Controller = ptr(true)
		}
		o.OwnerReferences = append(o.OwnerReferences, or)
	}
	var fins []string
	for _, f := range []string{rules.FinalizerOrphan, rules.FinalizerForeground, "example.com/x"} {
		if r.IntN(3) == 0 {
			fins = append(fins, f)
		}
	}
	o.Finalizers = fins
	o.Deleting = r.IntN(4) == 0
	return o
}

func seed(t testing.TB) uint64 {
	if s := os.Getenv("KGC_SEED"); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("KGC_SEED=%q: %v", s, err)
		}
		return v
	}
	return uint64(time.Now().UnixNano())
}

func TestRandomized(t *testing.T) {
	s := seed(t)
	t.Logf("seed %d (rerun with KGC_SEED=%d)", s, s)
	r := rand.New(rand.NewPCG(s, s^0x9e3779b97f4a7c15))
	steps := 6000
	if testing.Short() {
		steps = 1000
	}
	g := graph.New()
	m := newModel()
	for i := range steps {
		idx := r.IntN(randomUIDs)
		// The nodes this step can change: the object, its owners before and
		// after, and its dependents.
		touched := map[types.UID]bool{randomIdentity(idx).UID: true}
		touch := func() {
			uid := randomIdentity(idx).UID
			for _, or := range m.objs[uid].OwnerReferences {
				touched[or.UID] = true
			}
			for d := range m.dependents(uid) {
				touched[d] = true
			}
		}
		touch()
		var ev graph.Event
		var wantDel, wantOrphan, wantAbsent []types.UID
		var ignore types.UID
		if r.IntN(10) < 7 {
			ev = upsert(randomObject(r, idx))
			wantDel, wantOrphan = m.expectUpsert(ev.Object)
		} else {
			ev = del(rules.Object{Identity: randomIdentity(idx)})
			wantDel, wantAbsent, _ = m.expectDelete(ev.Object.Identity.UID)
			ignore = ev.Object.Identity.UID
		}
		eff := g.Apply(ev)
		fail := func(format string, args ...any) {
			t.Helper()
			t.Fatalf("step %d (%v %+v; seed %d): %s", i, ev.Type, ev.Object, s, fmt.Sprintf(format, args...))
		}
		if err := g.CheckInvariants(); err != nil {
			fail("invariants: %v", err)
		}
		touch()
		if i%500 == 0 || i == steps-1 {
			touched = nil // compare every node now and then
		}
		if err := m.check(g, touched); err != nil {
			fail("model: %v", err)
		}
		gotDel := slices.DeleteFunc(slices.Clone(eff.AttemptToDelete), func(u types.UID) bool { return ignore != "" && u == ignore })
		wantDel = slices.DeleteFunc(wantDel, func(u types.UID) bool { return ignore != "" && u == ignore })
		if got, want := set(gotDel), set(wantDel); !slices.Equal(got, want) {
			fail("AttemptToDelete = %v, want %v", got, want)
		}
		if got, want := set(eff.AttemptToOrphan), set(wantOrphan); !slices.Equal(got, want) {
			fail("AttemptToOrphan = %v, want %v", got, want)
		}
		if got, want := absentUIDs(eff.Absent), set(wantAbsent); !slices.Equal(got, want) {
			fail("Absent = %v, want %v", got, want)
		}
		// Everything enqueued for a check is an observed object.
		for _, u := range gotDel {
			if _, ok := m.objs[u]; !ok {
				fail("AttemptToDelete names %s, which is not observed", u)
			}
		}
	}
}

// --- Benchmarks -----------------------------------------------------------

const benchOwners = 1024

func benchGraph() *graph.Graph {
	g := graph.New()
	for i := range benchOwners {
		g.Apply(upsert(obj(fmt.Sprintf("owner-%d", i))))
	}
	return g
}

// BenchmarkApplyUpsert measures adds and updates of dependents whose owner
// changes, which exercises link and unlink.
func BenchmarkApplyUpsert(b *testing.B) {
	const deps = 8192
	g := benchGraph()
	events := make([]graph.Event, 2*deps)
	for i := range events {
		d := i % deps
		owner := fmt.Sprintf("owner-%d", (d+i/deps)%benchOwners)
		events[i] = upsert(obj(fmt.Sprintf("dep-%d", d), owners(ref(owner, block)), rv(strconv.Itoa(i))))
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		if i > 0 && i%len(events) == 0 {
			// The next pass updates the same objects: at later
			// resourceVersions, as a monitor delivers them (an older one
			// is a rollback's evidence, reported at a cost).
			b.StopTimer()
			for j := range events {
				events[j].Object.ResourceVersion = strconv.Itoa(i + j)
			}
			b.StartTimer()
		}
		g.Apply(events[i%len(events)])
	}
}

// BenchmarkApplyDelete measures deletes of dependents of observed owners.
func BenchmarkApplyDelete(b *testing.B) {
	const chunk = 4096
	g := benchGraph()
	adds := make([]graph.Event, chunk)
	dels := make([]graph.Event, chunk)
	for i := range chunk {
		o := obj(fmt.Sprintf("dep-%d", i), owners(ref(fmt.Sprintf("owner-%d", i%benchOwners), block)))
		adds[i], dels[i] = upsert(o), del(o)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		if i%chunk == 0 {
			b.StopTimer()
			for _, ev := range adds {
				g.Apply(ev)
			}
			b.StartTimer()
		}
		g.Apply(dels[i%chunk])
	}
}

// BenchmarkItemLargeOwner is a foreground owner check's read: an owner with
// 20,000 dependents.
func BenchmarkItemLargeOwner(b *testing.B) {
	g := graph.New()
	owner := rules.Object{Identity: rules.Identity{APIVersion: "v1", Kind: "ConfigMap", Namespace: "ns", Name: "owner", UID: "owner"}}
	g.Apply(graph.Event{Type: graph.Upsert, Object: owner})
	t := true
	for i := range 20000 {
		uid := types.UID(fmt.Sprintf("dep-%d", i))
		g.Apply(graph.Event{Type: graph.Upsert, Object: rules.Object{
			Identity:        rules.Identity{APIVersion: "v1", Kind: "Pod", Namespace: "ns", Name: string(uid), UID: uid},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "ConfigMap", Name: "owner", UID: "owner", BlockOwnerDeletion: &t}},
		}})
	}
	b.ReportAllocs()
	for b.Loop() {
		it, _ := g.Item("owner")
		if len(it.Dependents) != 20000 || !it.Dependents[0].Blocking {
			b.Fatal("wrong item")
		}
	}
}
