package graph

import (
	"fmt"
	"slices"
	"testing"

	"github.com/kgc-dev/kgc/internal/rules"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

func cm(uid types.UID, rv string, owners ...types.UID) rules.Object {
	o := rules.Object{Identity: rules.Identity{APIVersion: "v1", Kind: "ConfigMap", Namespace: "a", Name: "cm-" + string(uid), UID: uid}, ResourceVersion: rv}
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
	secret := rules.Object{Identity: rules.Identity{APIVersion: "v1", Kind: "Secret", Namespace: "a", Name: "s", UID: "s"}, ResourceVersion: "4"}
	g.Apply(Event{Type: Upsert, Object: secret, Gen: 7})
	dep := rules.Object{Identity: rules.Identity{APIVersion: "v1", Kind: "Secret", Namespace: "a", Name: "dep", UID: "dep"}, ResourceVersion: "5",
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "ConfigMap", Name: "cm-owner", UID: "owner"}}}
	g.Apply(Event{Type: Upsert, Object: dep, Gen: 7})

	// The relist (generation 9) sees kept (unchanged) only.
	g.Apply(Event{Type: Upsert, Object: cm("kept", "2", "ghost"), Gen: 9})
	eff := g.Apply(Event{Type: Relisted, Object: rules.Object{Identity: rules.Identity{APIVersion: "v1", Kind: "ConfigMap"}}, Gen: 9})

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

func widget(apiVersion string, uid types.UID, rv string) rules.Object {
	return rules.Object{Identity: rules.Identity{APIVersion: apiVersion, Kind: "Widget", Name: "w-" + string(uid), UID: uid}, ResourceVersion: rv}
}

func ownedBy(o rules.Object, owner rules.Object) rules.Object {
	o.OwnerReferences = append(o.OwnerReferences, metav1.OwnerReference{
		APIVersion: owner.Identity.APIVersion, Kind: owner.Identity.Kind, Name: owner.Identity.Name, UID: owner.Identity.UID,
	})
	return o
}

func absentUIDs(eff Effects) []types.UID {
	var out []types.UID
	for _, id := range eff.Absent {
		out = append(out, id.UID)
	}
	slices.Sort(out)
	return out
}

// A resource's preferred version changes (example.com/v1 to v2): the v1
// monitor stops, the v2 monitor lists. An object it lists again at the same
// resourceVersion takes the new version; an object deleted while no watch
// ran (the switch, or a watch that expired later) is swept by the v2
// monitor's relist although the graph recorded it at v1, and its dependents
// are re-checked. Before the fix the v1 node stayed observed forever, a
// solid owner to its dependents.
func TestVersionSwitchRelistSweepsNodesOfTheOldVersion(t *testing.T) {
	g := New()
	kept, gone := widget("example.com/v1", "kept", "5"), widget("example.com/v1", "gone", "6")
	later := widget("example.com/v1", "later", "7")
	g.Apply(Event{Type: Upsert, Object: kept, Gen: 1})
	g.Apply(Event{Type: Upsert, Object: gone, Gen: 1})
	g.Apply(Event{Type: Upsert, Object: later, Gen: 1})
	// Other resources of the same kind or group are not the resource.
	otherGroup := widget("other.example.com/v1", "other-group", "8")
	otherKind := rules.Object{Identity: rules.Identity{APIVersion: "example.com/v1", Kind: "Gadget", Name: "g", UID: "other-kind"}, ResourceVersion: "9"}
	g.Apply(Event{Type: Upsert, Object: otherGroup, Gen: 2})
	g.Apply(Event{Type: Upsert, Object: otherKind, Gen: 3})
	for _, owner := range []rules.Object{kept, gone, later} {
		g.Apply(Event{Type: Upsert, Object: ownedBy(cm("dep-"+owner.Identity.UID, "10"), owner), Gen: 4})
	}

	// The v2 monitor's first list: kept and later, unchanged; gone was
	// deleted during the switch.
	for _, o := range []rules.Object{kept, later} {
		o.Identity.APIVersion = "example.com/v2"
		if eff := g.Apply(Event{Type: Upsert, Object: o, Gen: 5}); len(eff.AttemptToDelete)+len(eff.Absent) != 0 {
			t.Errorf("an unchanged object listed at a new version has effects: %+v", eff)
		}
	}
	eff := g.Apply(Event{Type: Relisted, Object: rules.Object{Identity: rules.Identity{APIVersion: "example.com/v2", Kind: "Widget"}}, Gen: 5})
	if got := absentUIDs(eff); !slices.Equal(got, []types.UID{"gone"}) {
		t.Errorf("swept %v, want [gone]", got)
	}
	if !slices.Contains(eff.AttemptToDelete, "dep-gone") {
		t.Errorf("the dependent of the swept owner is not re-checked: %v", eff.AttemptToDelete)
	}
	if o, ok := g.Object("kept"); !ok || o.Identity.APIVersion != "example.com/v2" {
		t.Errorf("kept = %+v, %v; want observed at example.com/v2", o.Identity, ok)
	}

	// later is deleted while the v2 watch is expired: the next relist
	// misses it.
	k := kept
	k.Identity.APIVersion = "example.com/v2"
	g.Apply(Event{Type: Upsert, Object: k, Gen: 6})
	eff = g.Apply(Event{Type: Relisted, Object: rules.Object{Identity: rules.Identity{APIVersion: "example.com/v2", Kind: "Widget"}}, Gen: 6})
	if got := absentUIDs(eff); !slices.Equal(got, []types.UID{"later"}) {
		t.Errorf("swept %v, want [later]", got)
	}
	if !slices.Contains(eff.AttemptToDelete, "dep-later") {
		t.Errorf("the dependent of the swept owner is not re-checked: %v", eff.AttemptToDelete)
	}
	for uid, want := range map[types.UID]bool{"kept": true, "gone": false, "later": false, "other-group": true, "other-kind": true} {
		if _, ok := g.Object(uid); ok != want {
			t.Errorf("%s observed = %v, want %v", uid, ok, want)
		}
	}
	// The dependents' references (at v1) still match the owner the graph
	// holds at v2: same group, kind and name.
	if g.needsAttention(g.node("dep-kept")) {
		t.Error("a dependent of an owner observed at another version of its kind needs attention")
	}
	if err := g.CheckInvariants(); err != nil {
		t.Error(err)
	}
}

// A Relisted whose generation no upsert carries removes every node of the
// group and kind, at any version, as deletions: how the monitors report a
// resource proven gone (a LIST answering 404).
func TestRelistedWithFreshGenerationRemovesTheResource(t *testing.T) {
	g := New()
	a, b := widget("example.com/v1", "a", "1"), widget("example.com/v2", "b", "2")
	g.Apply(Event{Type: Upsert, Object: a, Gen: 1})
	g.Apply(Event{Type: Upsert, Object: b, Gen: 2})
	g.Apply(Event{Type: Upsert, Object: ownedBy(cm("dep", "3"), a), Gen: 3})
	eff := g.Apply(Event{Type: Relisted, Object: rules.Object{Identity: rules.Identity{APIVersion: "example.com/v1", Kind: "Widget"}}, Gen: 99})
	if got := absentUIDs(eff); !slices.Equal(got, []types.UID{"a", "b"}) {
		t.Errorf("swept %v, want [a b]", got)
	}
	if !slices.Contains(eff.AttemptToDelete, "dep") {
		t.Errorf("dependent not re-checked: %v", eff.AttemptToDelete)
	}
	if it, ok := g.Item("a"); !ok || !it.Absent {
		t.Errorf("a = %+v, %v; want an absent placeholder", it, ok)
	}
	if err := g.CheckInvariants(); err != nil {
		t.Error(err)
	}
}

func TestGroupOf(t *testing.T) {
	for _, v := range []string{"", "v1", "apps/v1", "example.com/v1beta1", "x/y/z"} {
		if got, want := rules.GroupOf(v), (rules.Identity{APIVersion: v}).GroupKind().Group; got != want && v != "x/y/z" {
			t.Errorf("rules.GroupOf(%q) = %q, want %q", v, got, want)
		}
	}
}
