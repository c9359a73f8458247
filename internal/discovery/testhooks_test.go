package discovery

import (
	"fmt"
	"hash/fnv"
	"testing"

	"github.com/kgc-dev/kgc/internal/graph"
	"github.com/kgc-dev/kgc/internal/rules"
)

// The benchmark shards split namespaces as FNV-1a does, each namespace to
// exactly one shard, keep every cluster-scoped object and every marker,
// and switch off again.
func TestBenchmarkShard(t *testing.T) {
	defer SetBenchmarkShard(0, 0)
	const count = 4
	kept := map[string]int{}
	for i := range count {
		SetBenchmarkShard(i, count)
		var got []graph.Event
		observe := benchmarkShardFilter(func(ev graph.Event) { got = append(got, ev) })
		for n := range 100 {
			ns := fmt.Sprintf("scale-%03d", n)
			observe(graph.Event{Type: graph.Upsert, Object: rules.Object{Identity: rules.Identity{Namespace: ns, Name: "a"}}})
			h := fnv.New32a()
			_, _ = h.Write([]byte(ns))
			if want := h.Sum32()%count == uint32(i); benchShard.Load().keeps(ns) != want {
				t.Errorf("shard %d keeps %s: %v, want %v", i, ns, !want, want)
			}
		}
		observe(graph.Event{Type: graph.Upsert, Object: rules.Object{Identity: rules.Identity{Name: "cluster-scoped"}}})
		observe(graph.Event{Type: graph.Listed})
		for _, ev := range got {
			if ns := ev.Object.Identity.Namespace; ns != "" {
				kept[ns]++
			}
		}
		if n := len(got); n < 2 || got[n-2].Object.Identity.Name != "cluster-scoped" || got[n-1].Type != graph.Listed {
			t.Errorf("shard %d dropped a cluster-scoped object or a marker: %+v", i, got[max(0, n-2):])
		}
	}
	if len(kept) != 100 {
		t.Errorf("%d of 100 namespaces kept by some shard", len(kept))
	}
	for ns, n := range kept {
		if n != 1 {
			t.Errorf("namespace %s kept by %d shards", ns, n)
		}
	}
	SetBenchmarkShard(0, 0)
	calls := 0
	benchmarkShardFilter(func(graph.Event) { calls++ })(graph.Event{Type: graph.Upsert, Object: rules.Object{Identity: rules.Identity{Namespace: "x"}}})
	if calls != 1 {
		t.Error("switched off, the filter still drops objects")
	}
}
