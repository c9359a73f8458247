package graph

import (
	"fmt"
	"testing"

	"github.com/kgc-dev/kgc/internal/rules"
	"k8s.io/apimachinery/pkg/types"
)

// BenchmarkRelist100k measures the sweep that ends a relist of one
// resource (1,000 objects) in a graph of 100k nodes: a list that found
// its objects (one pass over the graph), and one that found none of them
// (the sweep's pass, then the vanish's, and the removals).
func BenchmarkRelist100k(b *testing.B) {
	const n = 1000
	objs := make([]rules.Object, n)
	for i := range objs {
		objs[i] = rules.Object{Identity: rules.Identity{APIVersion: "example.com/v1", Kind: "Widget", Namespace: fmt.Sprintf("ns-%d", i%10),
			Name: fmt.Sprintf("w-%d", i), UID: types.UID(fmt.Sprintf("widget-%07d", i))}, ResourceVersion: "5"}
	}
	relist := func(gen uint32) Event {
		return Event{Type: Relisted, Object: rules.Object{Identity: rules.Identity{APIVersion: "example.com/v1", Kind: "Widget"}, ResourceVersion: "9"},
			Gen: gen, Resource: "widgets"}
	}
	for _, found := range []bool{true, false} {
		name := "found"
		if !found {
			name = "found-none"
		}
		b.Run(name, func(b *testing.B) {
			g := bigGraph(100_000)
			gen := uint32(1)
			b.ReportAllocs()
			for range b.N {
				b.StopTimer()
				gen++
				for i := range objs {
					g.Apply(Event{Type: Upsert, Object: objs[i], Gen: gen})
				}
				if found {
					gen++
					for i := range objs {
						g.Apply(Event{Type: Upsert, Object: objs[i], Gen: gen})
					}
				} else {
					gen++
				}
				b.StartTimer()
				g.Apply(relist(gen))
			}
		})
	}
}
