package builder

import (
	"context"
	"slices"
	"sync"
)

// fifo is an unbounded, ordered queue between the monitors (many
// producers, which must never block) and the graph builder (one consumer).
type fifo[T any] struct {
	mu     sync.Mutex
	cond   *sync.Cond
	items  []T
	head   int
	closed bool
	busy   bool // the consumer holds an item it has not finished
}

func newFIFO[T any]() *fifo[T] {
	f := &fifo[T]{}
	f.cond = sync.NewCond(&f.mu)
	return f
}

// Push appends v and reports whether it did; it never blocks. Pushes
// after Close are dropped.
func (f *fifo[T]) Push(v T) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return false
	}
	f.items = append(f.items, v)
	f.cond.Broadcast()
	return true
}

// Pop waits for the next item; ok is false once the queue is closed and
// drained. The consumer calls Done after handling each item.
func (f *fifo[T]) Pop() (v T, ok bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for f.head == len(f.items) && !f.closed {
		f.cond.Wait()
	}
	if f.head == len(f.items) {
		return v, false
	}
	v = f.items[f.head]
	var zero T
	f.items[f.head] = zero
	f.head++
	switch {
	case f.head == len(f.items):
		f.items, f.head = f.items[:0], 0
		if cap(f.items) > 1<<16 {
			f.items = nil // a burst's array
		}
	case f.head > 1024 && f.head*2 > len(f.items):
		// Move what is left to the front of the same array: a new one for
		// every compaction made the graph builder's queue, at ten thousand
		// queued events during a list, a tenth of kgc's start-up CPU
		// (docs/scaling.md). The copy is at most what was popped since the
		// last compaction. An array grown far beyond what the queue holds
		// (a burst) is given back.
		n := copy(f.items, f.items[f.head:])
		clear(f.items[n:])
		f.items, f.head = f.items[:n], 0
		if cap(f.items) > 1<<16 && cap(f.items) > 8*n {
			f.items = slices.Clone(f.items)
		}
	}
	f.busy = true
	return v, true
}

// Done marks the item returned by the last Pop as handled.
func (f *fifo[T]) Done() {
	f.mu.Lock()
	f.busy = false
	f.cond.Broadcast()
	f.mu.Unlock()
}

// Len returns the number of items waiting.
func (f *fifo[T]) Len() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.items) - f.head
}

// WaitIdle blocks until the queue is empty and the consumer idle, or closed.
func (f *fifo[T]) WaitIdle() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for (f.head != len(f.items) || f.busy) && !f.closed {
		f.cond.Wait()
	}
}

// Close wakes every waiter; Pop drains what is left, then reports !ok.
func (f *fifo[T]) Close() {
	f.mu.Lock()
	f.closed = true
	f.cond.Broadcast()
	f.mu.Unlock()
}

// idle reports whether the queue is empty and its consumer is not in the
// middle of an item.
func (f *fifo[T]) idle() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.head == len(f.items) && !f.busy
}

// WaitBelow waits until at most n items are waiting, the queue is closed,
// or ctx is done. Producers that can wait (a list's next page) use it so
// that the queue does not grow without limit; those that must not (watch
// events) never call it.
func (f *fifo[T]) WaitBelow(ctx context.Context, n int) {
	stop := context.AfterFunc(ctx, func() {
		f.mu.Lock()
		f.cond.Broadcast()
		f.mu.Unlock()
	})
	defer stop()
	f.mu.Lock()
	defer f.mu.Unlock()
	for len(f.items)-f.head > n && !f.closed && ctx.Err() == nil {
		f.cond.Wait()
	}
}
