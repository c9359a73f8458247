package workers

import "sync"

// recentSet remembers the last size/2 to size keys added, in two
// generations of plain maps (see absentCache, its first use): Add is
// one map insert, Has two lookups, and forgetting old keys needs no clock.
type recentSet[K comparable] struct {
	mu       sync.RWMutex
	half     int
	cur, old map[K]struct{}
}

func newRecentSet[K comparable](size int) *recentSet[K] {
	return &recentSet[K]{half: max(size/2, 1), cur: make(map[K]struct{})}
}

func (s *recentSet[K]) Add(k K) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cur[k] = struct{}{}
	if len(s.cur) >= s.half {
		s.old, s.cur = s.cur, make(map[K]struct{}, s.half)
	}
}

func (s *recentSet[K]) Has(k K) bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if _, ok := s.cur[k]; ok {
		return true
	}
	_, ok := s.old[k]
	return ok
}

// Delete forgets k.
func (s *recentSet[K]) Delete(k K) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.cur, k)
	delete(s.old, k)
}
