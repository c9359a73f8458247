package discovery

import (
	"fmt"

	"github.com/kgc-dev/kgc/internal/graph"
)

// Shard is one shard of the namespaces: the namespaced objects whose
// namespace hashes (FNV-1a, modulo Count) to Index, and every
// cluster-scoped object — what one shard of docs/scaling.md's sharded
// design would keep. It exists to measure that design's memory and
// start-up on one machine (kgc-bench --scale-shards) and is no way to run
// kgc: the design's cross-shard index of cluster-scoped owners is not
// built, so a shard would release a cluster-scoped owner's finalizers
// without seeing its dependents in other shards.
type Shard struct {
	Index, Count int
}

// Validate reports whether the shard is one of Count (0 <= Index < Count).
func (s Shard) Validate() error {
	if s.Count < 1 || s.Index < 0 || s.Index >= s.Count {
		return fmt.Errorf("shard %d of %d: want 0 <= index < count", s.Index, s.Count)
	}
	return nil
}

// keeps reports whether the shard keeps an object of namespace ns.
func (s *Shard) keeps(ns string) bool {
	if ns == "" {
		return true
	}
	h := uint32(2166136261) // FNV-1a
	for i := 0; i < len(ns); i++ {
		h = (h ^ uint32(ns[i])) * 16777619
	}
	return h%uint32(s.Count) == uint32(s.Index)
}

// filter wraps observe with the shard; a nil shard keeps everything.
func (s *Shard) filter(observe func(graph.Event)) func(graph.Event) {
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

// SetShard makes the monitors started from now on hand on only the
// objects shard keeps (see Shard); nil keeps every object. Call it before
// the first Sync. It is a measurement aid, no way to run kgc.
func (m *Monitors) SetShard(shard *Shard) {
	m.mu.Lock()
	m.shard = shard
	m.mu.Unlock()
}
