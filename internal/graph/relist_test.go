package graph

import (
	"fmt"
	"slices"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

func cm(uid types.UID, rv string, owners ...types.UID) Object {
	o := Object{Identity: Identity{APIVersion: "v1", Kind: "ConfigMap", Namespace: "a", Name: "cm-" + string(uid), UID: uid}, ResourceVersion: rv}
	for _, ow := range owners {
		o.OwnerReferences = append(o.OwnerReferences, metav1.OwnerReference{APIVersion: "v1", Kind: "ConfigMap", Name: "cm-" + string(ow), UID: ow})
	}
	return o
}

// An upsert with the resourceVersion the node already has changes nothing
// and asks for nothing: it is a relist seeing the same state.
func TestUpsertSameVersionIsANoop(t *testing.T) {
	g := New()
	g.Apply(Event{Type: Upsert, Object: cm("d", "5", "missing"), Gen: 1})
	eff := g.Apply(Event{Type: Upsert, Object: cm("d", "5", "missing"), Gen: 2})
	if len(eff.AttemptToDelete)+len(eff.AttemptToOrphan)+len(eff.Absent)+len(eff.CascadeStarted) != 0 {
		t.Errorf("effects of an unchanged upsert: %+v", eff)
	}
	if n := g.node("d"); n.gen != 2 {
		t.Errorf("generation %d, want the relist's 2", n.gen)
	}
	// A new version is applied.
	if eff := g.Apply(Event{Type: Upsert, Object: cm("d", "6"), Gen: 2}); g.node("missing") != nil {
		t.Errorf("reference removal not applied: %+v", eff)
	}
}

// Relisted removes the resource's observed nodes the list did not see, as
// deletions (their dependents are re-checked), and nothing else: not nodes
// the list saw, not other resources' nodes, not placeholders.
func TestRelistedSweepsUnseenNodes(t *testing.T) {
	g := New()
	g.Apply(Event{Type: Upsert, Object: cm("owner", "1"), Gen: 1})
	g.Apply(Event{Type: Upsert, Object: cm("kept", "2", "ghost"), Gen: 1})
	g.Apply(Event{Type: Upsert, Object: cm("gone", "3"), Gen: 1})
	secret := Object{Identity: Identity{APIVersion: "v1", Kind: "Secret", Namespace: "a", Name: "s", UID: "s"}, ResourceVersion: "4"}
	g.Apply(Event{Type: Upsert, Object: secret, Gen: 7})
	dep := Object{Identity: Identity{APIVersion: "v1", Kind: "Secret", Namespace: "a", Name: "dep", UID: "dep"}, ResourceVersion: "5",
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "ConfigMap", Name: "cm-owner", UID: "owner"}}}
	g.Apply(Event{Type: Upsert, Object: dep, Gen: 7})

	// The relist (generation 9) sees kept (unchanged) only.
	g.Apply(Event{Type: Upsert, Object: cm("kept", "2", "ghost"), Gen: 9})
	eff := g.Apply(Event{Type: Relisted, Object: Object{Identity: Identity{APIVersion: "v1", Kind: "ConfigMap"}}, Gen: 9})

	var absent []types.UID
	for _, id := range eff.Absent {
		absent = append(absent, id.UID)
	}
	slices.Sort(absent)
	if want := []types.UID{"gone", "owner"}; !slices.Equal(absent, want) {
		t.Errorf("Absent = %v, want %v", absent, want)
	}
	if !slices.Contains(eff.AttemptToDelete, "dep") {
		t.Errorf("the dependent of a swept owner is not re-checked: %v", eff.AttemptToDelete)
	}
	for uid, want := range map[types.UID]bool{"kept": true, "s": true, "dep": true, "gone": false} {
		if _, ok := g.Object(uid); ok != want {
			t.Errorf("%s observed = %v, want %v", uid, ok, want)
		}
	}
	if it, ok := g.Item("owner"); !ok || !it.Absent {
		t.Errorf("swept owner with a dependent = %+v, %v; want an absent placeholder", it, ok)
	}
	if it, ok := g.Item("ghost"); !ok || !it.Virtual {
		t.Errorf("placeholder ghost = %+v, %v; want kept", it, ok)
	}
	if err := g.CheckInvariants(); err != nil {
		t.Error(err)
	}
}

// References and finalizers may name anything: the shared tables are bounded.
func TestSharedTablesAreBounded(t *testing.T) {
	g := New()
	for i := range maxKinds + 10 {
		o := cm(types.UID(fmt.Sprintf("o%d", i)), "1")
		o.OwnerReferences = []metav1.OwnerReference{{APIVersion: "x/v1", Kind: fmt.Sprintf("K%d", i), Name: "n", UID: "owner"}}
		o.Finalizers = []string{fmt.Sprintf("example.com/f%d", i)}
		g.Apply(Event{Type: Upsert, Object: o})
	}
	if len(g.kinds) > maxKinds || len(g.finalizers) > maxFinalizerLists {
		t.Errorf("%d kinds, %d finalizer lists shared; bounds %d and %d", len(g.kinds), len(g.finalizers), maxKinds, maxFinalizerLists)
	}
	last := types.UID(fmt.Sprintf("o%d", maxKinds+9))
	if o, ok := g.Object(last); !ok || o.OwnerReferences[0].Kind != fmt.Sprintf("K%d", maxKinds+9) || o.Finalizers[0] != fmt.Sprintf("example.com/f%d", maxKinds+9) {
		t.Errorf("object past the bounds = %+v", o)
	}
	if err := g.CheckInvariants(); err != nil {
		t.Error(err)
	}
}
