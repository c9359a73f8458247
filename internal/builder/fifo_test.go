package builder

import (
	"context"
	"sync"
	"testing"
	"time"
)

const fifoTimeout = 5 * time.Second

// done runs f in a goroutine and returns a channel closed when it returns.
func done(f func()) <-chan struct{} {
	ch := make(chan struct{})
	go func() {
		defer close(ch)
		f()
	}()
	return ch
}

func mustFinish(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(fifoTimeout):
		t.Fatalf("%s did not return within %s", what, fifoTimeout)
	}
}

func mustBlock(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
		t.Fatalf("%s returned, want it to block", what)
	case <-time.After(50 * time.Millisecond):
	}
}

func TestFIFOOrder(t *testing.T) {
	f := newFIFO[int]()
	const n = 5000 // enough to exercise the compaction of consumed items
	next := 0
	for i := range n {
		f.Push(i)
		// Consume in bursts so that the queue both drains and grows.
		if i%7 == 0 {
			for f.Len() > 3 {
				v, ok := f.Pop()
				if !ok || v != next {
					t.Fatalf("Pop = %d, %v; want %d, true", v, ok, next)
				}
				f.Done()
				next++
			}
		}
	}
	if got := f.Len(); got != n-next {
		t.Fatalf("Len = %d, want %d", got, n-next)
	}
	for next < n {
		v, ok := f.Pop()
		if !ok || v != next {
			t.Fatalf("Pop = %d, %v; want %d, true", v, ok, next)
		}
		f.Done()
		next++
	}
	if f.Len() != 0 {
		t.Fatalf("Len = %d after draining", f.Len())
	}
}

func TestFIFOCompactionKeepsOrder(t *testing.T) {
	f := newFIFO[int]()
	for i := range 3000 {
		f.Push(i)
	}
	for i := range 2000 { // head passes 1024 while more than half is consumed
		if v, _ := f.Pop(); v != i {
			t.Fatalf("Pop = %d, want %d", v, i)
		}
		f.Done()
	}
	for i := 3000; i < 3100; i++ {
		f.Push(i)
	}
	for i := 2000; i < 3100; i++ {
		if v, _ := f.Pop(); v != i {
			t.Fatalf("Pop = %d, want %d", v, i)
		}
		f.Done()
	}
}

func TestFIFOPopWaitsForPush(t *testing.T) {
	f := newFIFO[string]()
	var got string
	ch := done(func() { got, _ = f.Pop() })
	mustBlock(t, ch, "Pop on an empty queue")
	f.Push("x")
	mustFinish(t, ch, "Pop after Push")
	if got != "x" {
		t.Fatalf("Pop = %q", got)
	}
}

func TestFIFOWaitIdle(t *testing.T) {
	f := newFIFO[int]()
	mustFinish(t, done(f.WaitIdle), "WaitIdle on an empty queue")

	f.Push(1)
	f.Push(2)
	idle := done(f.WaitIdle)
	mustBlock(t, idle, "WaitIdle with queued items")

	f.Pop()
	f.Done()
	mustBlock(t, idle, "WaitIdle with one item left")

	f.Pop() // queue empty, but the consumer still holds the item
	mustBlock(t, idle, "WaitIdle while the consumer is busy")
	f.Done()
	mustFinish(t, idle, "WaitIdle after the last Done")
}

func TestFIFOClose(t *testing.T) {
	t.Run("wakes a blocked Pop", func(t *testing.T) {
		f := newFIFO[int]()
		var ok bool
		ch := done(func() { _, ok = f.Pop() })
		mustBlock(t, ch, "Pop")
		f.Close()
		mustFinish(t, ch, "Pop after Close")
		if ok {
			t.Fatal("Pop ok after Close of an empty queue")
		}
	})
	t.Run("drains before reporting closed", func(t *testing.T) {
		f := newFIFO[int]()
		f.Push(1)
		f.Push(2)
		f.Close()
		f.Push(3) // dropped
		if f.Len() != 2 {
			t.Fatalf("Len = %d after a Push on a closed queue, want 2", f.Len())
		}
		for _, want := range []int{1, 2} {
			v, ok := f.Pop()
			if !ok || v != want {
				t.Fatalf("Pop = %d, %v; want %d, true", v, ok, want)
			}
			f.Done()
		}
		if v, ok := f.Pop(); ok {
			t.Fatalf("Pop = %d, true after draining a closed queue", v)
		}
		f.Close() // idempotent
	})
	t.Run("wakes WaitIdle", func(t *testing.T) {
		f := newFIFO[int]()
		f.Push(1)
		idle := done(f.WaitIdle)
		mustBlock(t, idle, "WaitIdle")
		f.Close()
		mustFinish(t, idle, "WaitIdle after Close")
		mustFinish(t, done(f.WaitIdle), "WaitIdle on a closed queue")
	})
}

// TestFIFOConcurrentProducers runs many producers against one consumer (run
// with -race): nothing is lost or duplicated, and each producer's items
// arrive in the order it pushed them.
func TestFIFOConcurrentProducers(t *testing.T) {
	type item struct{ producer, seq int }
	const producers, perProducer = 8, 2000
	f := newFIFO[item]()
	var wg sync.WaitGroup
	for p := range producers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range perProducer {
				f.Push(item{p, i})
			}
		}()
	}
	// A watcher calling WaitIdle and Len concurrently must not race either.
	stopWatch := make(chan struct{})
	watch := done(func() {
		for {
			select {
			case <-stopWatch:
				return
			default:
				_ = f.Len()
			}
		}
	})
	next := make([]int, producers)
	consumed := done(func() {
		for range producers * perProducer {
			v, ok := f.Pop()
			if !ok {
				t.Error("queue closed early")
				return
			}
			if v.seq != next[v.producer] {
				t.Errorf("producer %d: got seq %d, want %d", v.producer, v.seq, next[v.producer])
			}
			next[v.producer]++
			f.Done()
		}
	})
	wg.Wait()
	mustFinish(t, consumed, "consumer")
	close(stopWatch)
	mustFinish(t, watch, "watcher")
	mustFinish(t, done(f.WaitIdle), "WaitIdle after everything was consumed")
	if f.Len() != 0 {
		t.Fatalf("Len = %d", f.Len())
	}
	for p, n := range next {
		if n != perProducer {
			t.Errorf("producer %d: consumed %d items, want %d", p, n, perProducer)
		}
	}
	f.Close()
	if _, ok := f.Pop(); ok {
		t.Fatal("Pop ok after Close")
	}
}

// TestFIFOWaitBelow: WaitBelow returns once the consumer has brought the
// queue down to the bound, at once when it is already there, and when the
// queue closes or the caller's context ends.
func TestFIFOWaitBelow(t *testing.T) {
	ctx := context.Background()
	f := newFIFO[int]()
	for i := range 10 {
		f.Push(i)
	}
	mustFinish(t, done(func() { f.WaitBelow(ctx, 10) }), "WaitBelow at the bound")
	waited := done(func() { f.WaitBelow(ctx, 3) })
	select {
	case <-waited:
		t.Fatal("WaitBelow(3) returned with 10 items queued")
	case <-time.After(50 * time.Millisecond):
	}
	for range 6 {
		if _, ok := f.Pop(); !ok {
			t.Fatal("Pop failed")
		}
		f.Done()
	}
	select {
	case <-waited:
		t.Fatal("WaitBelow(3) returned with 4 items queued")
	case <-time.After(50 * time.Millisecond):
	}
	f.Pop()
	f.Done()
	mustFinish(t, waited, "WaitBelow(3) once 3 items are left")

	cctx, cancel := context.WithCancel(ctx)
	cancelled := done(func() { f.WaitBelow(cctx, 0) })
	cancel()
	mustFinish(t, cancelled, "WaitBelow after its context ended")

	closed := done(func() { f.WaitBelow(ctx, 0) })
	f.Close()
	mustFinish(t, closed, "WaitBelow after Close")
}
