package graph_test

import (
	"testing"

	"github.com/kgc-dev/kgc/internal/graph"
	"github.com/kgc-dev/kgc/internal/rules"
)

// An absent placeholder keeps the resourceVersion its deletion was
// observed at, for the write records' evidence (OwnerView). It must never
// pass for an object's resourceVersion: the workers' write log compares
// graph versions with the versions kgc wrote at (Item, Object), and the
// inspection views render nodes (Nodes). And an upsert of the same UID
// (a lagging monitor re-listing what it saw before the deletion) at that
// very version must not be taken for "the same state again".
func TestAbsentPlaceholderVersionIsNoObjectVersion(t *testing.T) {
	for _, how := range []string{"watch", "relist"} {
		t.Run(how, func(t *testing.T) {
			g := graph.New()
			g.Apply(upsert(obj("o", rv("5"))))
			g.Apply(upsert(obj("d", owners(ref("o")))))
			switch how {
			case "watch":
				g.Apply(del(obj("o", rv("9"))))
			case "relist":
				// A relist of ConfigMaps at 9 that saw only d.
				g.Apply(graph.Event{Type: graph.Upsert, Object: obj("d", owners(ref("o"))), Gen: 7})
				g.Apply(graph.Event{Type: graph.Relisted, Object: rules.Object{Identity: rules.Identity{APIVersion: "v1", Kind: "ConfigMap"}, ResourceVersion: "9"}, Gen: 7})
			}
			ov, ok := g.Owner("o")
			if !ok || !ov.Absent || ov.ResourceVersion != "9" {
				t.Fatalf("Owner(o) = %+v, %v; want absent at 9", ov, ok)
			}
			if _, ok := g.Object("o"); ok {
				t.Error("Object(o) answers for an absent placeholder")
			}
			it, ok := g.Item("o")
			if !ok || !it.Virtual || it.ResourceVersion != "" {
				t.Errorf("Item(o): virtual=%v rv=%q; want a placeholder without a resourceVersion", it.Virtual, it.ResourceVersion)
			}
			nodes, _ := g.Nodes(nil)
			for _, n := range nodes {
				if n.Identity.UID == "o" && n.ResourceVersion != "" {
					t.Errorf("Nodes: placeholder o shows resourceVersion %q", n.ResourceVersion)
				}
			}

			// The same UID upserted at the deletion's version: applied in
			// full, not skipped as an unchanged node.
			g.Apply(upsert(obj("o", rv("9"), finalizers("x"))))
			o, ok := g.Object("o")
			if !ok || o.ResourceVersion != "9" || len(o.Finalizers) != 1 {
				t.Errorf("after an upsert at the deletion's version: Object(o) = %+v, %v; want observed at 9 with its finalizer", o, ok)
			}
			if ov, _ := g.Owner("o"); ov.Absent || ov.Virtual || ov.Seen != rules.SourceGraph {
				t.Errorf("after the upsert: Owner(o) = %+v, want observed", ov)
			}
			if err := g.CheckInvariants(); err != nil {
				t.Error(err)
			}
		})
	}
}
