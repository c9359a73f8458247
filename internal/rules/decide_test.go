package rules

import (
	"reflect"
	"slices"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

func boolPtr(b bool) *bool { return &b }

func oref(uid string, blocking *bool) metav1.OwnerReference {
	return metav1.OwnerReference{APIVersion: "v1", Kind: "ConfigMap", Name: "name-" + uid, UID: types.UID(uid), BlockOwnerDeletion: blocking}
}

func item(refs []metav1.OwnerReference, finalizers []string, deps ...Dependent) *Item {
	return &Item{
		Object: Object{
			Identity:        Identity{APIVersion: "v1", Kind: "ConfigMap", Namespace: "ns", Name: "item", UID: "item"},
			ResourceVersion: "7",
			OwnerReferences: refs,
			Finalizers:      finalizers,
		},
		Dependents: deps,
	}
}

func TestDecideDependent(t *testing.T) {
	a, b, c, d := oref("a", nil), oref("b", boolPtr(true)), oref("c", boolPtr(false)), oref("d", boolPtr(true))
	plainDep := Dependent{UID: "dep", Blocking: true}
	cycleDep := Dependent{UID: "cyc", Blocking: true, Deleting: true, DeletingDependents: true}
	tests := []struct {
		name   string
		item   *Item
		states []OwnerState
		want   Action
	}{
		// Solid owners keep the item, minus dangling and waiting refs.
		{"one solid", item([]metav1.OwnerReference{a}, nil), []OwnerState{Solid}, Action{Type: Keep}},
		{"all solid", item([]metav1.OwnerReference{a, b}, nil), []OwnerState{Solid, Solid}, Action{Type: Keep}},
		{
			"solid and dangling strips the dangling ref",
			item([]metav1.OwnerReference{a, b}, nil), []OwnerState{Dangling, Solid},
			Action{Type: RemoveReferences, Refs: []metav1.OwnerReference{b}},
		},
		{
			"solid and waiting strips the waiting ref",
			item([]metav1.OwnerReference{a, b}, nil, plainDep), []OwnerState{Solid, Waiting},
			Action{Type: RemoveReferences, Refs: []metav1.OwnerReference{a}},
		},
		{
			// Upstream's published rule: an invalid reference leaves the
			// item and all its references as they are.
			"solid, waiting, dangling and invalid leave everything untouched",
			item([]metav1.OwnerReference{a, b, c, d}, nil), []OwnerState{Invalid, Waiting, Solid, Dangling},
			Action{Type: Keep},
		},
		{
			"duplicate refs to a dangling owner all go",
			item([]metav1.OwnerReference{a, b, a}, nil), []OwnerState{Dangling, Solid, Dangling},
			Action{Type: RemoveReferences, Refs: []metav1.OwnerReference{b}},
		},
		// Owners deleted with Orphan never make an item garbage (S2).
		{"orphaned only", item([]metav1.OwnerReference{a}, nil), []OwnerState{Orphaned}, Action{Type: RemoveReferences}},
		{
			"orphaned and solid strips the orphaned ref",
			item([]metav1.OwnerReference{a, b}, nil), []OwnerState{Orphaned, Solid},
			Action{Type: RemoveReferences, Refs: []metav1.OwnerReference{b}},
		},
		{
			"orphaned and dangling: garbage on the dangling owner's account",
			item([]metav1.OwnerReference{a, b}, nil), []OwnerState{Orphaned, Dangling},
			Action{Type: DeleteItem, Policy: metav1.DeletePropagationBackground},
		},
		{"orphaned and invalid", item([]metav1.OwnerReference{a, b}, nil), []OwnerState{Orphaned, Invalid}, Action{Type: Keep}},
		// Invalid references are never ours to fix or collect on.
		{"invalid only", item([]metav1.OwnerReference{a}, nil), []OwnerState{Invalid}, Action{Type: Keep}},
		{"invalid and dangling", item([]metav1.OwnerReference{a, b}, nil), []OwnerState{Invalid, Dangling}, Action{Type: Keep}},
		{"invalid and waiting", item([]metav1.OwnerReference{a, b}, nil, plainDep), []OwnerState{Waiting, Invalid}, Action{Type: Keep}},
		{"invalid and solid", item([]metav1.OwnerReference{a, b}, nil), []OwnerState{Solid, Invalid}, Action{Type: Keep}},
		// An unresolvable kind stops everything and asks for a retry.
		{"unresolvable only", item([]metav1.OwnerReference{a}, nil), []OwnerState{Unresolvable}, Action{Type: Keep, Retry: true}},
		{"unresolvable and dangling", item([]metav1.OwnerReference{a, b}, nil), []OwnerState{Dangling, Unresolvable}, Action{Type: Keep, Retry: true}},
		{"unresolvable, solid and dangling", item([]metav1.OwnerReference{a, b, c}, nil), []OwnerState{Solid, Unresolvable, Dangling}, Action{Type: Keep, Retry: true}},
		{"unresolvable and waiting with dependents", item([]metav1.OwnerReference{a, b}, nil, plainDep), []OwnerState{Waiting, Unresolvable}, Action{Type: Keep, Retry: true}},
		// Waiting owner and dependents of its own: foreground.
		{
			"waiting with dependents",
			item([]metav1.OwnerReference{b}, nil, plainDep), []OwnerState{Waiting},
			Action{Type: DeleteItem, Policy: metav1.DeletePropagationForeground},
		},
		{
			"waiting and dangling with dependents",
			item([]metav1.OwnerReference{a, b}, []string{FinalizerOrphan}, plainDep), []OwnerState{Dangling, Waiting},
			Action{Type: DeleteItem, Policy: metav1.DeletePropagationForeground},
		},
		{
			"waiting with non-blocking dependents only",
			item([]metav1.OwnerReference{b}, nil, Dependent{UID: "x"}), []OwnerState{Waiting},
			Action{Type: DeleteItem, Policy: metav1.DeletePropagationForeground},
		},
		{
			"dependent deleting dependents is no cycle by itself (upstream unblocks here)",
			item([]metav1.OwnerReference{a, b}, nil, plainDep, cycleDep), []OwnerState{Waiting, Waiting},
			Action{Type: DeleteItem, Policy: metav1.DeletePropagationForeground},
		},
		{
			"dependent merely deleting is not a cycle",
			item([]metav1.OwnerReference{b}, nil, Dependent{UID: "x", Blocking: true, Deleting: true}), []OwnerState{Waiting},
			Action{Type: DeleteItem, Policy: metav1.DeletePropagationForeground},
		},
		// Otherwise: the item's own finalizers choose, orphan > foreground > background.
		{"dangling, no finalizers", item([]metav1.OwnerReference{a}, nil), []OwnerState{Dangling}, Action{Type: DeleteItem, Policy: metav1.DeletePropagationBackground}},
		{"all dangling", item([]metav1.OwnerReference{a, b, c}, nil), []OwnerState{Dangling, Dangling, Dangling}, Action{Type: DeleteItem, Policy: metav1.DeletePropagationBackground}},
		{
			"dangling with dependents is not foreground",
			item([]metav1.OwnerReference{a}, nil, plainDep, cycleDep), []OwnerState{Dangling},
			Action{Type: DeleteItem, Policy: metav1.DeletePropagationBackground},
		},
		{"waiting without dependents", item([]metav1.OwnerReference{b}, nil), []OwnerState{Waiting}, Action{Type: DeleteItem, Policy: metav1.DeletePropagationBackground}},
		{"orphan finalizer", item([]metav1.OwnerReference{a}, []string{FinalizerOrphan}), []OwnerState{Dangling}, Action{Type: DeleteItem, Policy: metav1.DeletePropagationOrphan}},
		{"foreground finalizer", item([]metav1.OwnerReference{a}, []string{"example.com/x", FinalizerForeground}), []OwnerState{Dangling}, Action{Type: DeleteItem, Policy: metav1.DeletePropagationForeground}},
		{
			"orphan beats foreground",
			item([]metav1.OwnerReference{a}, []string{FinalizerForeground, FinalizerOrphan}), []OwnerState{Waiting},
			Action{Type: DeleteItem, Policy: metav1.DeletePropagationOrphan},
		},
		{"unrelated finalizer", item([]metav1.OwnerReference{a}, []string{"example.com/x"}), []OwnerState{Dangling}, Action{Type: DeleteItem, Policy: metav1.DeletePropagationBackground}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before := deepCopyItem(tc.item)
			got := DecideDependent(tc.item, tc.states, nil)
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("DecideDependent =\n  %+v\nwant\n  %+v", got, tc.want)
			}
			if !reflect.DeepEqual(tc.item, before) {
				t.Errorf("DecideDependent changed its input:\n  %+v\nwas\n  %+v", tc.item, before)
			}
		})
	}
}

// Cycle breaking clears blockOwnerDeletion only on references to waiting
// owners that really wait for the item (a chain of waits is no cycle).
func TestDecideDependentCycles(t *testing.T) {
	a, b, c, d, e := oref("a", nil), oref("b", boolPtr(true)), oref("c", boolPtr(false)), oref("d", boolPtr(true)), oref("e", boolPtr(true))
	dep := Dependent{UID: "dep", Blocking: true}
	on := func(uids ...types.UID) func(types.UID) bool {
		return func(u types.UID) bool { return slices.Contains(uids, u) }
	}
	tests := []struct {
		name    string
		item    *Item
		states  []OwnerState
		onCycle func(types.UID) bool
		want    Action
	}{
		{
			"only blocking refs to waiting owners on the cycle are cleared",
			item([]metav1.OwnerReference{a, b, c, d, e}, nil, dep), []OwnerState{Waiting, Waiting, Waiting, Waiting, Dangling}, on("a", "b", "c", "e"),
			Action{Type: DeleteItem, Policy: metav1.DeletePropagationForeground, Unblock: true,
				Refs: []metav1.OwnerReference{a, oref("b", boolPtr(false)), c, d, e}},
		},
		{
			"no owner on a cycle: wait, blocking refs intact",
			item([]metav1.OwnerReference{b, d}, nil, dep), []OwnerState{Waiting, Waiting}, on(),
			Action{Type: DeleteItem, Policy: metav1.DeletePropagationForeground},
		},
		{
			"cycle, but no ref blocks: nothing to unblock",
			item([]metav1.OwnerReference{a, c}, nil, dep), []OwnerState{Waiting, Waiting}, on("a", "c"),
			Action{Type: DeleteItem, Policy: metav1.DeletePropagationForeground},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before := deepCopyItem(tc.item)
			if got := DecideDependent(tc.item, tc.states, tc.onCycle); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("DecideDependent =\n  %+v\nwant\n  %+v", got, tc.want)
			}
			if !reflect.DeepEqual(tc.item, before) {
				t.Errorf("DecideDependent changed its input")
			}
		})
	}
}

func TestCycleCheck(t *testing.T) {
	// owner ← middle ← lower ← held, all blocking; lower also waits for
	// owner? No: nothing waits back, so no owner of middle is on a cycle.
	chain := map[types.UID][]types.UID{"owner": {"middle"}, "middle": {"lower"}, "lower": {"held"}}
	waits := func(u types.UID) []types.UID { return chain[u] }
	if CycleCheck("middle", waits)("owner") {
		t.Error("a chain is not a cycle")
	}
	chain["held"] = []types.UID{"owner"} // held's dependent is owner: a cycle
	if !CycleCheck("middle", waits)("owner") {
		t.Error("owner → middle → lower → held → owner is a cycle")
	}
	calls := 0
	check := CycleCheck("middle", func(u types.UID) []types.UID { calls++; return chain[u] })
	check("owner")
	first := calls
	check("x")
	if calls != first || first == 0 {
		t.Errorf("waitsFor calls: %d for the first question, %d more for the second, want one search", first, calls-first)
	}
}

// deepCopyItem copies an item including the ownerReferences' pointer
// fields, so that a decision writing through them is caught.
func deepCopyItem(it *Item) *Item {
	out := *it
	out.OwnerReferences = nil
	for _, r := range it.OwnerReferences {
		out.OwnerReferences = append(out.OwnerReferences, *r.DeepCopy())
	}
	out.Finalizers = slices.Clone(it.Finalizers)
	out.Dependents = slices.Clone(it.Dependents)
	return &out
}

func TestDecideForegroundOwner(t *testing.T) {
	owner := func(finalizers []string, deps ...Dependent) *Item {
		it := item(nil, finalizers, deps...)
		it.Deleting = true
		return it
	}
	fg := FinalizerForeground
	tests := []struct {
		name string
		item *Item
		want Action
	}{
		{"no dependents", owner([]string{fg}), Action{Type: RemoveForegroundFinalizer, Finalizers: []string{}}},
		{
			"other finalizers are kept, in order",
			owner([]string{"example.com/a", fg, "example.com/b"}),
			Action{Type: RemoveForegroundFinalizer, Finalizers: []string{"example.com/a", "example.com/b"}},
		},
		{
			"duplicate foreground finalizers all go",
			owner([]string{fg, FinalizerOrphan, fg}),
			Action{Type: RemoveForegroundFinalizer, Finalizers: []string{FinalizerOrphan}},
		},
		{
			"non-blocking dependents never block",
			owner([]string{fg}, Dependent{UID: "x"}, Dependent{UID: "y", Deleting: true, DeletingDependents: true}),
			Action{Type: RemoveForegroundFinalizer, Finalizers: []string{}},
		},
		{
			"blocking dependents are re-checked",
			owner([]string{fg}, Dependent{UID: "x", Blocking: true}, Dependent{UID: "y"}, Dependent{UID: "z", Blocking: true, Deleting: true}),
			Action{Type: CheckDependents, Dependents: []types.UID{"x", "z"}},
		},
		{
			"blocking dependents deleting dependents block but are not re-checked",
			owner([]string{fg}, Dependent{UID: "x", Blocking: true}, Dependent{UID: "w", Blocking: true, Deleting: true, DeletingDependents: true}),
			Action{Type: CheckDependents, Dependents: []types.UID{"x"}},
		},
		{
			"only a blocking dependent deleting dependents",
			owner([]string{fg}, Dependent{UID: "w", Blocking: true, Deleting: true, DeletingDependents: true}),
			Action{Type: CheckDependents},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before := deepCopyItem(tc.item)
			got := DecideForegroundOwner(tc.item)
			if got.Type != tc.want.Type || !slices.Equal(got.Finalizers, tc.want.Finalizers) ||
				!slices.Equal(got.Dependents, tc.want.Dependents) || got.Refs != nil || got.Unblock || got.Retry {
				t.Errorf("DecideForegroundOwner =\n  %+v\nwant\n  %+v", got, tc.want)
			}
			if got.Type == RemoveForegroundFinalizer && slices.Contains(got.Finalizers, fg) {
				t.Errorf("finalizers to write = %#v still hold %s", got.Finalizers, fg)
			}
			if !reflect.DeepEqual(tc.item, before) {
				t.Errorf("DecideForegroundOwner changed its input")
			}
		})
	}
}

func TestPolicyFromFinalizers(t *testing.T) {
	tests := []struct {
		fins []string
		want metav1.DeletionPropagation
	}{
		{nil, metav1.DeletePropagationBackground},
		{[]string{}, metav1.DeletePropagationBackground},
		{[]string{"foregroundDeletion"}, metav1.DeletePropagationForeground},
		{[]string{"orphan"}, metav1.DeletePropagationOrphan},
		{[]string{"foregroundDeletion", "orphan"}, metav1.DeletePropagationOrphan},
		{[]string{"Orphan", "foreground"}, metav1.DeletePropagationBackground}, // exact names only
	}
	for _, tc := range tests {
		if got := PolicyFromFinalizers(tc.fins); got != tc.want {
			t.Errorf("PolicyFromFinalizers(%q) = %s, want %s", tc.fins, got, tc.want)
		}
	}
}

func TestOwnerStateString(t *testing.T) {
	for s, want := range map[OwnerState]string{Solid: "solid", Waiting: "waiting", Dangling: "dangling", Unresolvable: "unresolvable", Invalid: "invalid", OwnerState(42): "unknown"} {
		if got := s.String(); got != want {
			t.Errorf("OwnerState(%d).String() = %q, want %q", int(s), got, want)
		}
	}
}

// FuzzDecideDependent checks the safety rules on arbitrary inputs: an item
// with a solid owner is never deleted; one with an unresolvable owner is
// neither deleted nor edited; nor is one with an invalid reference; and an
// edit never drops a solid reference.
func FuzzDecideDependent(f *testing.F) {
	f.Add([]byte{0}, uint8(0), uint8(0))
	f.Add([]byte{2, 1}, uint8(3), uint8(1))
	f.Add([]byte{1, 1, 2}, uint8(255), uint8(2))
	f.Add([]byte{3, 2, 0}, uint8(7), uint8(3))
	f.Add([]byte{4, 2}, uint8(0), uint8(0))
	f.Fuzz(func(t *testing.T, stateBytes []byte, depBits, finBits uint8) {
		if len(stateBytes) == 0 || len(stateBytes) > 64 {
			t.Skip()
		}
		states := make([]OwnerState, len(stateBytes))
		refs := make([]metav1.OwnerReference, len(stateBytes))
		for i, b := range stateBytes {
			states[i] = OwnerState(int(b) % 6)
			var blocking *bool
			switch (b / 5) % 3 {
			case 1:
				blocking = boolPtr(true)
			case 2:
				blocking = boolPtr(false)
			}
			// Some refs share a UID, as duplicates do.
			refs[i] = oref(string(rune('a'+int(b/15)%8)), blocking)
		}
		var deps []Dependent
		for i := range int(depBits & 3) {
			deps = append(deps, Dependent{
				UID:                types.UID(rune('p' + i)),
				Blocking:           depBits&(4<<i) != 0,
				DeletingDependents: depBits&(32<<i) != 0,
			})
		}
		var fins []string
		if finBits&1 != 0 {
			fins = append(fins, FinalizerOrphan)
		}
		if finBits&2 != 0 {
			fins = append(fins, FinalizerForeground)
		}
		it := item(refs, fins, deps...)
		before := deepCopyItem(it)
		a := DecideDependent(it, states, nil)

		if !reflect.DeepEqual(it, before) {
			t.Fatalf("input changed")
		}
		has := func(s OwnerState) bool { return slices.Contains(states, s) }
		if has(Solid) && a.Type == DeleteItem {
			t.Fatalf("states %v: deletes an item with a solid owner: %+v", states, a)
		}
		if has(Unresolvable) && (a.Type == DeleteItem || a.Type == RemoveReferences) {
			t.Fatalf("states %v: acts on an item with an unresolvable owner: %+v", states, a)
		}
		if has(Unresolvable) != a.Retry {
			t.Fatalf("states %v: Retry = %v", states, a.Retry)
		}
		if has(Invalid) && !has(Unresolvable) && !reflect.DeepEqual(a, Action{Type: Keep}) {
			t.Fatalf("states %v: acts on an item with an invalid reference: %+v", states, a)
		}
		switch a.Type {
		case Keep:
		case RemoveReferences:
			if !has(Solid) && (!has(Orphaned) || has(Waiting) || has(Dangling)) {
				// Only references to orphaned owners go without a solid one.
				t.Fatalf("states %v: edits refs without a solid owner", states)
			}
			var want []metav1.OwnerReference
			for i, s := range states {
				if s == Solid {
					want = append(want, refs[i])
				}
			}
			if !reflect.DeepEqual(a.Refs, want) || len(a.Refs) == len(refs) {
				t.Fatalf("states %v: Refs = %+v, want exactly the solid ones %+v", states, a.Refs, want)
			}
		case DeleteItem:
			if a.Unblock {
				if a.Policy != metav1.DeletePropagationForeground || len(a.Refs) != len(refs) {
					t.Fatalf("unblock with %+v", a)
				}
				for i, r := range a.Refs {
					if r.UID != refs[i].UID || (r.BlockOwnerDeletion != nil && *r.BlockOwnerDeletion) {
						t.Fatalf("unblocked ref %d = %+v", i, r)
					}
				}
			} else if a.Refs != nil {
				t.Fatalf("refs without unblock: %+v", a)
			}
			if has(Waiting) && len(deps) > 0 && a.Policy != metav1.DeletePropagationForeground {
				t.Fatalf("states %v with dependents: policy %s, want Foreground", states, a.Policy)
			}
		default:
			t.Fatalf("DecideDependent returned %+v", a)
		}
	})
}
