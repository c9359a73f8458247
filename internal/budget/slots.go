package budget

import (
	"container/list"
	"context"
	"sync"
)

// Slots bounds the writes in flight at once. A slot set free goes to a
// waiting awaited write first, then to the others, each in arrival order.
// Without the order, an orphaning owner's patches — one worker handing
// them out one after the other — would get one slot in every so many,
// behind the writes of every other worker waiting at the same time.
type Slots struct {
	mu      sync.Mutex
	limit   int
	used    int
	waiting [classes]list.List // of *waiter
}

// NewSlots returns n (at least 1) slots.
func NewSlots(n int) *Slots { return &Slots{limit: max(n, 1)} }

// Acquire waits for a slot, in awaited's class, and reports whether it
// got one: false when ctx is done first, or was done already (no write
// starts after shutdown began).
func (s *Slots) Acquire(ctx context.Context, awaited bool) bool {
	if ctx.Err() != nil {
		return false
	}
	s.mu.Lock()
	if s.used < s.limit {
		// A free slot means nobody waits: Release hands slots over.
		s.used++
		s.mu.Unlock()
		return true
	}
	w := &waiter{ready: make(chan struct{})}
	c := classOf(awaited)
	e := s.waiting[c].PushBack(w)
	s.mu.Unlock()

	select {
	case <-w.ready:
		return true
	case <-ctx.Done():
	}
	s.mu.Lock()
	granted := w.granted
	if !granted {
		s.waiting[c].Remove(e)
	}
	s.mu.Unlock()
	if granted {
		s.Release() // handed over as ctx ended: pass it on
	}
	return false
}

// Release frees a slot taken with Acquire.
func (s *Slots) Release() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for c := range classes {
		if s.waiting[c].Len() > 0 {
			w := s.waiting[c].Remove(s.waiting[c].Front()).(*waiter)
			w.granted = true
			close(w.ready)
			return
		}
	}
	s.used--
}

// InFlight returns the slots taken and the limit.
func (s *Slots) InFlight() (n, limit int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.used, s.limit
}

// Waiting returns how many writes wait for a slot.
func (s *Slots) Waiting() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.waiting[classAwaited].Len() + s.waiting[classOther].Len()
}
