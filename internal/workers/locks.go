package workers

import (
	"slices"
	"sync"

	"k8s.io/apimachinery/pkg/types"
)

// deletionLocks orders kgc's own DELETE of an object (exclusive) against
// kgc's writes that rest on that object being a solid owner (shared): see
// planConfirmedRemoval. A lock exists only while someone holds or waits
// for it. The zero value is ready to use.
//
// No deadlock: every holder takes all its locks at once, in UID order
// (lockSet, rlock), or a single one (lock).
type deletionLocks struct {
	mu sync.Mutex
	m  map[types.UID]*deletionLock
}

type deletionLock struct {
	rw    sync.RWMutex
	users int // guarded by deletionLocks.mu
}

func (l *deletionLocks) get(uid types.UID) *deletionLock {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.m == nil {
		l.m = make(map[types.UID]*deletionLock)
	}
	x := l.m[uid]
	if x == nil {
		x = &deletionLock{}
		l.m[uid] = x
	}
	x.users++
	return x
}

func (l *deletionLocks) put(uid types.UID, x *deletionLock) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if x.users--; x.users == 0 {
		delete(l.m, uid)
	}
}

// lock takes uid's lock exclusively and returns its release.
func (l *deletionLocks) lock(uid types.UID) (unlock func()) {
	x := l.get(uid)
	x.rw.Lock()
	return func() {
		x.rw.Unlock()
		l.put(uid, x)
	}
}

// rlock takes the locks of uids shared, in UID order, and returns their
// release.
func (l *deletionLocks) rlock(uids []types.UID) (unlock func()) {
	return l.lockSet(uids, "")
}

// lockSet takes the locks of shared (shared) and of exclusive (exclusive,
// unless "") in UID order, and returns their release.
func (l *deletionLocks) lockSet(shared []types.UID, exclusive types.UID) (unlock func()) {
	if len(shared) == 0 && exclusive != "" {
		return l.lock(exclusive)
	}
	uids := slices.Clone(shared)
	if exclusive != "" {
		uids = append(uids, exclusive)
	}
	uids = slices.Compact(slices.Sorted(slices.Values(uids)))
	held := make([]*deletionLock, len(uids))
	for i, uid := range uids {
		held[i] = l.get(uid)
		if uid == exclusive {
			held[i].rw.Lock()
		} else {
			held[i].rw.RLock()
		}
	}
	return func() {
		for i := len(uids) - 1; i >= 0; i-- {
			if uids[i] == exclusive {
				held[i].rw.Unlock()
			} else {
				held[i].rw.RUnlock()
			}
			l.put(uids[i], held[i])
		}
	}
}

// len returns the number of locks in use (tests).
func (l *deletionLocks) len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.m)
}
