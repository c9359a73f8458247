package rules

import (
	"errors"
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
)

func testMapper() meta.RESTMapper {
	m := meta.NewDefaultRESTMapper([]schema.GroupVersion{{Version: "v1"}, {Group: "apps", Version: "v1"}, {Group: "apps", Version: "v1beta2"}})
	m.Add(schema.GroupVersionKind{Version: "v1", Kind: "ConfigMap"}, meta.RESTScopeNamespace)
	m.Add(schema.GroupVersionKind{Version: "v1", Kind: "Namespace"}, meta.RESTScopeRoot)
	m.Add(schema.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"}, meta.RESTScopeNamespace)
	return m
}

// Locate settles a reference without looking at its owner exactly when the
// owner can never be found (Invalid) or its kind is not served
// (Unresolvable); otherwise it returns where the owner must be.
func TestLocate(t *testing.T) {
	namespaced := Identity{APIVersion: "v1", Kind: "ConfigMap", Namespace: "a", Name: "d", UID: "d"}
	cluster := Identity{APIVersion: "v1", Kind: "Namespace", Name: "d", UID: "d"}
	for _, tc := range []struct {
		name      string
		dependent Identity
		ref       metav1.OwnerReference
		want      Coordinates
		state     OwnerState
		why       Reason
		done      bool
	}{
		{name: "namespaced owner in the dependent's namespace", dependent: namespaced,
			ref:  metav1.OwnerReference{APIVersion: "apps/v1", Kind: "Deployment", Name: "web", UID: "o"},
			want: Coordinates{Group: "apps", Kind: "Deployment", Namespace: "a", Name: "web", UID: "o"}},
		{name: "an unserved version of a served kind resolves through a served one", dependent: namespaced,
			ref:  metav1.OwnerReference{APIVersion: "apps/v1beta2", Kind: "Deployment", Name: "web", UID: "o"},
			want: Coordinates{Group: "apps", Kind: "Deployment", Namespace: "a", Name: "web", UID: "o"}},
		{name: "cluster-scoped owner of a namespaced dependent", dependent: namespaced,
			ref:  metav1.OwnerReference{APIVersion: "v1", Kind: "Namespace", Name: "a", UID: "o"},
			want: Coordinates{Kind: "Namespace", Name: "a", UID: "o"}},
		{name: "cluster-scoped dependent naming a namespaced kind", dependent: cluster,
			ref:   metav1.OwnerReference{APIVersion: "v1", Kind: "ConfigMap", Name: "x", UID: "o"},
			state: Invalid, why: ReasonClusterScopedDependent, done: true},
		{name: "malformed apiVersion", dependent: namespaced,
			ref:   metav1.OwnerReference{APIVersion: "a/b/c", Kind: "ConfigMap", Name: "x", UID: "o"},
			state: Invalid, why: ReasonMalformedAPIVersion, done: true},
		{name: "kind no API serves", dependent: namespaced,
			ref:   metav1.OwnerReference{APIVersion: "example.com/v1", Kind: "Widget", Name: "x", UID: "o"},
			state: Unresolvable, why: ReasonKindNotServed, done: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, err := OwnerMapping(testMapper(), tc.ref.APIVersion, tc.ref.Kind)
			c, s, why, done := Locate(tc.dependent, &tc.ref, m, err)
			if done != tc.done || s != tc.state || why != tc.why || (!done && c != tc.want) {
				t.Errorf("Locate = %v, %v, %v, done %v; want %v, %v, %v, done %v", c, s, why, done, tc.want, tc.state, tc.why, tc.done)
			}
		})
	}
	// A mapping that fails for another reason than an unserved kind (a
	// discovery outage) is Unresolvable, to be retried: never dangling.
	ref := metav1.OwnerReference{APIVersion: "v1", Kind: "ConfigMap", Name: "x", UID: "o"}
	if _, s, why, done := Locate(namespaced, &ref, nil, errors.New("discovery down")); !done || s != Unresolvable || why != ReasonKindUnknown {
		t.Errorf("Locate after a failed mapping = %v, %v, done %v; want unresolvable, kind unknown", s, why, done)
	}
}

// Classify: what was found at a reference's coordinates decides its state;
// an owner kgc orphaned is Orphaned, never Dangling, whatever is there now.
func TestClassify(t *testing.T) {
	const owner types.UID = "o"
	orphaned := func(u types.UID) bool { return u == owner }
	for _, tc := range []struct {
		name     string
		found    Found
		orphaned func(types.UID) bool
		state    OwnerState
		why      Reason
	}{
		{"exists", Found{Exists: true, UID: owner}, nil, Solid, ReasonExists},
		{"orphaning counts as alive", Found{Exists: true, UID: owner, Deleting: true, Orphaning: true}, nil, Solid, ReasonOrphaning},
		{"deleting without foregroundDeletion counts as alive", Found{Exists: true, UID: owner, Deleting: true}, nil, Solid, ReasonDeleting},
		{"foreground deletion waits", Found{Exists: true, UID: owner, Deleting: true, DeletingDependents: true}, nil, Waiting, ReasonForeground},
		{"nothing there", Found{}, nil, Dangling, ReasonNotFound},
		{"another object there", Found{Exists: true, UID: "other"}, nil, Dangling, ReasonOtherUID},
		{"orphaned by kgc, gone", Found{}, orphaned, Orphaned, ReasonNotFound},
		{"orphaned by kgc, name reused", Found{Exists: true, UID: "other"}, orphaned, Orphaned, ReasonOtherUID},
		{"orphaned is only about absent owners", Found{Exists: true, UID: owner}, orphaned, Solid, ReasonExists},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if s, why := Classify(owner, tc.found, tc.orphaned); s != tc.state || why != tc.why {
				t.Errorf("Classify = %v, %v; want %v, %v", s, why, tc.state, tc.why)
			}
		})
	}
}

// DecideOrphan removes the owner's references from every dependent that
// still has one (all of them, duplicates included), and the finalizer only
// once none has.
func TestDecideOrphan(t *testing.T) {
	owner := &Object{Identity: Identity{UID: "o"}, Deleting: true, Finalizers: []string{"x", FinalizerOrphan}}
	ref := func(uid types.UID) metav1.OwnerReference { return metav1.OwnerReference{UID: uid} }
	deps := []Object{
		{Identity: Identity{UID: "a"}, OwnerReferences: []metav1.OwnerReference{ref("o")}},
		{Identity: Identity{UID: "b"}, OwnerReferences: []metav1.OwnerReference{ref("p")}},
		{Identity: Identity{UID: "c"}, OwnerReferences: []metav1.OwnerReference{ref("p"), ref("o"), ref("o")}},
	}
	a := DecideOrphan(owner, deps)
	if a.Type != OrphanDependents || len(a.Orphan) != 2 ||
		a.Orphan[0].Dependent.Identity.UID != "a" || len(a.Orphan[0].Indices) != 1 || a.Orphan[0].Indices[0] != 0 ||
		a.Orphan[1].Dependent.Identity.UID != "c" || len(a.Orphan[1].Indices) != 2 || a.Orphan[1].Indices[0] != 1 || a.Orphan[1].Indices[1] != 2 {
		t.Errorf("DecideOrphan = %+v, want references of a (0) and c (1, 2) removed", a)
	}
	a = DecideOrphan(owner, deps[1:2])
	if a.Type != RemoveOrphanFinalizer || len(a.Finalizers) != 1 || a.Finalizers[0] != "x" {
		t.Errorf("DecideOrphan with no reference left = %+v, want the orphan finalizer removed, x kept", a)
	}
	if len(owner.Finalizers) != 2 {
		t.Errorf("DecideOrphan changed the owner's finalizers: %v", owner.Finalizers)
	}
}

// A keep-rule vetoes deletions only: the decision is otherwise the
// package's, and the zero Policy is exactly DecideDependent.
func TestPolicyKeepRule(t *testing.T) {
	keepAll := Policy{Keep: []KeepRule{{Name: "all", Keeps: func(*Object) string { return "kept" }}}}
	ref := func(uid types.UID) metav1.OwnerReference {
		return metav1.OwnerReference{APIVersion: "v1", Kind: "ConfigMap", Name: string(uid), UID: uid}
	}
	it := &Item{Object: Object{Identity: Identity{UID: "d"}, OwnerReferences: []metav1.OwnerReference{ref("a"), ref("b")}}}
	if a := keepAll.DecideDependent(it, []OwnerState{Dangling, Dangling}, nil); a.Type != Keep || a.Why != "all: kept" {
		t.Errorf("vetoed deletion = %+v, want Keep with the rule's reason", a)
	}
	if a := keepAll.DecideDependent(it, []OwnerState{Solid, Dangling}, nil); a.Type != RemoveReferences || len(a.Refs) != 1 {
		t.Errorf("reference removal under a keep-rule = %+v, want the dangling reference removed", a)
	}
	if a := (Policy{}).DecideDependent(it, []OwnerState{Dangling, Dangling}, nil); a.Type != DeleteItem {
		t.Errorf("zero Policy = %+v, want DeleteItem", a)
	}
}
