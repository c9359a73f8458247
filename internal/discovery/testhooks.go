package discovery

import (
	"sync/atomic"

	"k8s.io/utils/clock"

	"github.com/kgc-dev/kgc/internal/graph"
)

// SetClock makes the monitors started from now on back off on clk instead
// of the real clock (deterministic tests). Call it before the first Sync.
func (m *Monitors) SetClock(clk clock.WithTicker) {
	m.mu.Lock()
	m.clock = clk
	m.mu.Unlock()
}

// benchShard, when set, is the shard of namespaces a benchmark's kgc
// keeps (SetBenchmarkShard).
var benchShard atomic.Pointer[shardFilter]

type shardFilter struct{ index, count uint32 }

// SetBenchmarkShard makes the monitors started from now on, in this
// process, hand on only the namespaced objects whose namespace hashes
// (FNV-1a, modulo count) to index, and every cluster-scoped object: what
// one shard of docs/scaling.md's sharded design would keep. It exists to
// measure that design's memory and start-up on one machine (kgc-bench
// --scale-shards) and is no way to run kgc: the design's cross-shard
// index of cluster-scoped owners is not built, so a shard would release
// a cluster-scoped owner's finalizers without seeing its dependents in
// other shards. count 0 switches it off.
func SetBenchmarkShard(index, count int) {
	if count <= 0 {
		benchShard.Store(nil)
		return
	}
	benchShard.Store(&shardFilter{index: uint32(index), count: uint32(count)})
}

// keeps reports whether the shard keeps an object of namespace ns.
func (s *shardFilter) keeps(ns string) bool {
	if ns == "" {
		return true
	}
	h := uint32(2166136261) // FNV-1a
	for i := 0; i < len(ns); i++ {
		h = (h ^ uint32(ns[i])) * 16777619
	}
	return h%s.count == s.index
}

// benchmarkShardFilter wraps observe with the benchmark shard, if any.
func benchmarkShardFilter(observe func(graph.Event)) func(graph.Event) {
	s := benchShard.Load()
	if s == nil {
		return observe
	}
	return func(ev graph.Event) {
		if (ev.Type == graph.Upsert || ev.Type == graph.Delete) && !s.keeps(ev.Object.Identity.Namespace) {
			return
		}
		observe(ev)
	}
}
