package graph

import (
	"slices"
	"testing"

	"github.com/kgc-dev/kgc/internal/rules"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// An object observed in a state its history cannot reach is reported:
// its resourceVersion going back, its deletionTimestamp going away, its
// coming back after a watch saw it deleted. Ordinary histories report
// nothing.
func TestRegressions(t *testing.T) {
	deleting := func(o rules.Object) rules.Object { o.Deleting = true; return o }
	for _, tc := range []struct {
		name   string
		events []Event
		want   int // regressions reported by the last event
	}{
		{"resourceVersion goes back", []Event{{Type: Upsert, Object: cm("a", "120")}, {Type: Upsert, Object: cm("a", "95")}}, 1},
		{"resourceVersion goes forward", []Event{{Type: Upsert, Object: cm("a", "95")}, {Type: Upsert, Object: cm("a", "120")}}, 0},
		{"the same state again (a relist)", []Event{{Type: Upsert, Object: cm("a", "95")}, {Type: Upsert, Object: cm("a", "95"), Gen: 2}}, 0},
		{"a resourceVersion that is no number", []Event{{Type: Upsert, Object: cm("a", "b")}, {Type: Upsert, Object: cm("a", "a")}}, 0},
		{"deletionTimestamp goes away", []Event{{Type: Upsert, Object: deleting(cm("a", "5"))}, {Type: Upsert, Object: cm("a", "6")}}, 1},
		{"deletionTimestamp set", []Event{{Type: Upsert, Object: cm("a", "5")}, {Type: Upsert, Object: deleting(cm("a", "6"))}}, 0},
		{"back after a DELETED event", []Event{
			{Type: Upsert, Object: cm("o", "5")}, {Type: Upsert, Object: cm("d", "6", "o")},
			{Type: Delete, Object: cm("o", "7")}, {Type: Upsert, Object: cm("o", "5")}}, 1},
		{"back after a relist missed it", []Event{
			{Type: Upsert, Object: cm("o", "5"), Gen: 1}, {Type: Upsert, Object: cm("d", "6", "o"), Gen: 1},
			{Type: Upsert, Object: cm("d", "6", "o"), Gen: 2}, {Type: Relisted, Object: rules.Object{Identity: rules.Identity{APIVersion: "v1", Kind: "ConfigMap"}}, Gen: 2},
			{Type: Upsert, Object: cm("o", "5"), Gen: 3}}, 0},
		{"a placeholder observed", []Event{{Type: Upsert, Object: cm("d", "6", "o")}, {Type: Upsert, Object: cm("o", "5")}}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := New()
			var eff Effects
			for _, ev := range tc.events {
				eff = g.Apply(ev)
			}
			if len(eff.Regressions) != tc.want {
				t.Fatalf("regressions %+v, want %d", eff.Regressions, tc.want)
			}
			if err := g.CheckInvariants(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// An object served under two groups (core and events.k8s.io Events)
// reaches the graph through two monitors whose events interleave: an
// older state from the other group is no regression.
func TestRegressionsComparedWithinOneResource(t *testing.T) {
	g := New()
	core := rules.Object{Identity: rules.Identity{APIVersion: "v1", Kind: "Event", Namespace: "a", Name: "e", UID: "e"}, ResourceVersion: "10"}
	other := core
	other.Identity.APIVersion, other.ResourceVersion = "events.k8s.io/v1", "9"
	g.Apply(Event{Type: Upsert, Object: core})
	if eff := g.Apply(Event{Type: Upsert, Object: other}); len(eff.Regressions) != 0 {
		t.Fatalf("regressions across groups: %+v", eff.Regressions)
	}
}

// The same, when one group's watch delivers the object's deletion first
// (the object has a dependent, so the graph keeps it as a placeholder)
// and the other group's watch then delivers an older state of it: no
// regression either.
func TestRegressionsComparedWithinOneResourceAfterADeletion(t *testing.T) {
	g := New()
	core := rules.Object{Identity: rules.Identity{APIVersion: "v1", Kind: "Event", Namespace: "a", Name: "e", UID: "e"}, ResourceVersion: "10"}
	other := core
	other.Identity.APIVersion, other.ResourceVersion = "events.k8s.io/v1", "12"
	dependent := cm("d", "11")
	dependent.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Event", Name: "e", UID: "e"}}
	g.Apply(Event{Type: Upsert, Object: core})
	g.Apply(Event{Type: Upsert, Object: dependent})
	g.Apply(Event{Type: Delete, Object: other})
	if eff := g.Apply(Event{Type: Upsert, Object: core}); len(eff.Regressions) != 0 {
		t.Fatalf("regressions across groups: %+v", eff.Regressions)
	}
	if err := g.CheckInvariants(); err != nil {
		t.Fatal(err)
	}
}

// A complete list that finds none of a resource's objects is reported,
// with which of them went without kgc seeing it coming; a list that found
// any is not.
func TestVanished(t *testing.T) {
	ns := func(name string, deleting bool) rules.Object {
		return rules.Object{Identity: rules.Identity{APIVersion: "v1", Kind: "Namespace", Name: name, UID: types.UID("ns-" + name)}, ResourceVersion: "1", Deleting: deleting}
	}
	crd := func(deleting bool) rules.Object {
		return rules.Object{Identity: rules.Identity{APIVersion: "apiextensions.k8s.io/v1", Kind: "CustomResourceDefinition", Name: "widgets.example.com", UID: "crd"},
			ResourceVersion: "1", Deleting: deleting}
	}
	widget := func(uid types.UID, namespace string, deleting bool) rules.Object {
		return rules.Object{Identity: rules.Identity{APIVersion: "example.com/v1", Kind: "Widget", Namespace: namespace, Name: string(uid), UID: uid}, ResourceVersion: "2", Deleting: deleting}
	}
	dependent := func(uid, owner types.UID) rules.Object {
		o := cm(uid, "3")
		o.OwnerReferences = []metav1.OwnerReference{{APIVersion: "example.com/v1", Kind: "Widget", Name: string(owner), UID: owner}}
		return o
	}
	relist := Event{Type: Relisted, Object: rules.Object{Identity: rules.Identity{APIVersion: "example.com/v1", Kind: "Widget"}, ResourceVersion: "99"}, Gen: 9, Resource: "widgets"}

	g := New()
	for _, o := range []rules.Object{ns("a", false), ns("b", true), crd(false),
		widget("w1", "a", false), widget("w2", "a", false), widget("w3", "a", true), widget("w4", "b", false), widget("w5", "gone", false),
		dependent("d1", "w1"), dependent("d3", "w3")} {
		g.Apply(Event{Type: Upsert, Object: o, Gen: 1})
	}
	eff := g.Apply(relist)
	v := eff.Vanished
	if v == nil {
		t.Fatal("an empty list was not reported")
	}
	// w1 and w2 went unexplained; w3 was deleting, w4's namespace is
	// terminating, w5's is not in the graph.
	if v.Gone != 5 || v.Unexplained != 2 || v.CRD != CRDLive || v.CRDUID != "crd" || v.ResourceVersion != "99" || v.Resource != "widgets" || v.Kind != "Widget" {
		t.Fatalf("vanish %+v", v)
	}
	if !slices.Equal(v.Owners, []types.UID{"w1"}) {
		t.Fatalf("owners %v, want w1 (the unexplained one with a dependent)", v.Owners)
	}

	// Its CRD being deleted is seen.
	g = New()
	g.Apply(Event{Type: Upsert, Object: crd(true), Gen: 1})
	g.Apply(Event{Type: Upsert, Object: widget("w1", "", false), Gen: 1})
	if v := g.Apply(relist).Vanished; v == nil || v.CRD != CRDDeleting {
		t.Fatalf("vanish %+v, want its CRD deleting", v)
	}

	// A list that found one of them reports nothing.
	g = New()
	g.Apply(Event{Type: Upsert, Object: widget("w1", "", false), Gen: 1})
	g.Apply(Event{Type: Upsert, Object: widget("w2", "", false), Gen: 1})
	g.Apply(Event{Type: Upsert, Object: widget("w2", "", false), Gen: 9})
	if eff := g.Apply(relist); eff.Vanished != nil || len(eff.Absent) != 1 {
		t.Fatalf("a partial relist: %+v", eff)
	}
	// Nor does a list of a resource the graph held nothing of.
	if eff := g.Apply(Event{Type: Relisted, Object: rules.Object{Identity: rules.Identity{APIVersion: "v1", Kind: "Secret"}}, Gen: 10}); eff.Vanished != nil {
		t.Fatalf("an empty resource: %+v", eff.Vanished)
	}
}

// An object first held from a fresh event appeared while kgc watched;
// one from a first list was there at start; an update does not change it.
func TestArrived(t *testing.T) {
	g := New()
	g.Apply(Event{Type: Upsert, Object: cm("listed", "1")})
	g.Apply(Event{Type: Upsert, Object: cm("watched", "2"), Fresh: true})
	g.Apply(Event{Type: Upsert, Object: cm("listed", "3"), Fresh: true})
	for uid, want := range map[types.UID]bool{"listed": false, "watched": true} {
		if it, _ := g.Item(uid); it.Arrived != want {
			t.Errorf("%s: Arrived %v, want %v", uid, it.Arrived, want)
		}
	}
}
