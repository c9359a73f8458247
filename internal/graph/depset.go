package graph

import (
	"iter"
	"slices"
)

// depSet is an owner's set of dependents. Most owners have a few (a
// ReplicaSet's Pods, a Deployment's ReplicaSets), and a Go map costs about
// 200 bytes even for one entry, so a set is a slice until it holds
// depSetSmall dependents and a map beyond (adding and removing one of
// 20k dependents must stay constant-time). Leaves, most nodes, have none:
// nodes hold a *depSet that is nil until the first dependent.
type depSet struct {
	small []key
	big   map[key]struct{}
}

const depSetSmall = 16

func (s *depSet) len() int {
	if s == nil {
		return 0
	}
	if s.big != nil {
		return len(s.big)
	}
	return len(s.small)
}

func (s *depSet) has(uid key) bool {
	if s == nil {
		return false
	}
	if s.big != nil {
		_, ok := s.big[uid]
		return ok
	}
	return slices.Contains(s.small, uid)
}

func (s *depSet) add(uid key) {
	if s.big != nil {
		s.big[uid] = struct{}{}
		return
	}
	if slices.Contains(s.small, uid) {
		return
	}
	if len(s.small) < depSetSmall {
		s.small = append(s.small, uid)
		return
	}
	s.big = make(map[key]struct{}, 2*depSetSmall)
	for _, d := range s.small {
		s.big[d] = struct{}{}
	}
	s.big[uid] = struct{}{}
	s.small = nil
}

func (s *depSet) remove(uid key) {
	if s == nil {
		return
	}
	if s.big != nil {
		delete(s.big, uid)
		return
	}
	if i := slices.Index(s.small, uid); i >= 0 {
		last := len(s.small) - 1
		s.small[i] = s.small[last]
		s.small[last] = key{}
		s.small = s.small[:last]
	}
}

// all iterates over the dependents; the set must not change meanwhile.
func (s *depSet) all() iter.Seq[key] {
	return func(yield func(key) bool) {
		if s == nil {
			return
		}
		if s.big != nil {
			for uid := range s.big {
				if !yield(uid) {
					return
				}
			}
			return
		}
		for _, uid := range s.small {
			if !yield(uid) {
				return
			}
		}
	}
}
