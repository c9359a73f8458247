package graph_test

import (
	"testing"

	"github.com/kgc-dev/kgc/internal/graph"
)

// ObservedIn counts observed objects by namespace, group and kind (any
// version): placeholders do not count, deletions and deleted owners kept
// as placeholders uncount, and a version change moves nothing.
func TestObservedIn(t *testing.T) {
	g := graph.New()
	check := func(what string, ns, group, kind string, want int) {
		t.Helper()
		if err := g.CheckInvariants(); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if got := g.ObservedIn(ns, group, kind); got != want {
			t.Errorf("%s: ObservedIn(%q, %q, %q) = %d, want %d", what, ns, group, kind, got, want)
		}
	}
	check("empty", testNS, "", "ConfigMap", 0)

	// b references owner a, not observed yet: a is a placeholder.
	g.Apply(upsert(obj("b", owners(ref("a")))))
	check("dependent observed", testNS, "", "ConfigMap", 1)
	g.Apply(upsert(obj("a")))
	check("owner observed", testNS, "", "ConfigMap", 2)
	g.Apply(upsert(obj("c", namespace("other"))))
	check("another namespace", testNS, "", "ConfigMap", 2)
	check("another namespace itself", "other", "", "ConfigMap", 1)
	g.Apply(upsert(obj("w", kind("example.com/v1", "Widget"))))
	g.Apply(upsert(obj("w", kind("example.com/v2", "Widget"))))
	check("a kind at two versions", testNS, "example.com", "Widget", 1)
	check("same kind, other group", testNS, "other.example.com", "Widget", 0)
	g.Apply(upsert(obj("n", namespace(""), kind("v1", "Namespace"))))
	check("cluster-scoped", "", "", "Namespace", 0)

	// The owner goes while its dependent stays: a placeholder remains.
	g.Apply(del(obj("a")))
	check("owner deleted", testNS, "", "ConfigMap", 1)
	g.Apply(del(obj("b")))
	check("dependent deleted", testNS, "", "ConfigMap", 0)
	g.Apply(del(obj("w", kind("example.com/v2", "Widget"))))
	check("widget deleted", testNS, "example.com", "Widget", 0)

	// A relist that does not see an object sweeps it.
	g.Apply(graph.Event{Type: graph.Upsert, Object: obj("d"), Gen: 1})
	g.Apply(graph.Event{Type: graph.Upsert, Object: obj("e"), Gen: 1})
	check("listed", testNS, "", "ConfigMap", 2)
	g.Apply(graph.Event{Type: graph.Upsert, Object: obj("e"), Gen: 2})
	g.Apply(graph.Event{Type: graph.Relisted, Object: obj("e"), Gen: 2})
	check("relisted without d", testNS, "", "ConfigMap", 1)
}
