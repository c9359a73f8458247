package workers

import "sync"

// recentMap remembers the last size/2 to size keys added, with a value
// each, in two generations of plain maps (see absentCache, its first use):
// Add is one map insert, Get two lookups, and forgetting old keys needs no
// clock.
type recentMap[K comparable, V any] struct {
	mu       sync.RWMutex
	half     int
	cur, old map[K]V
}

func newRecentMap[K comparable, V any](size int) *recentMap[K, V] {
	return &recentMap[K, V]{half: max(size/2, 1), cur: make(map[K]V)}
}

// Put remembers k with v.
func (s *recentMap[K, V]) Put(k K, v V) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cur[k] = v
	if len(s.cur) >= s.half {
		s.old, s.cur = s.cur, make(map[K]V, s.half)
	}
}

// Get returns what is remembered of k.
func (s *recentMap[K, V]) Get(k K) (V, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if v, ok := s.cur[k]; ok {
		return v, true
	}
	v, ok := s.old[k]
	return v, ok
}

func (s *recentMap[K, V]) Has(k K) bool {
	_, ok := s.Get(k)
	return ok
}

// Delete forgets k.
func (s *recentMap[K, V]) Delete(k K) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.cur, k)
	delete(s.old, k)
}

// Clear forgets every key.
func (s *recentMap[K, V]) Clear() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cur, s.old = make(map[K]V), nil
}

// recentSet is a recentMap of keys alone.
type recentSet[K comparable] struct {
	recentMap[K, struct{}]
}

func newRecentSet[K comparable](size int) *recentSet[K] {
	return &recentSet[K]{recentMap[K, struct{}]{half: max(size/2, 1), cur: make(map[K]struct{})}}
}

func (s *recentSet[K]) Add(k K) { s.Put(k, struct{}{}) }
