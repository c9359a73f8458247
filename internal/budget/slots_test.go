package budget

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestSlotsGoToAwaitedWritesFirst: a slot set free goes to the awaited
// writes waiting, in arrival order, then to the others.
func TestSlotsGoToAwaitedWritesFirst(t *testing.T) {
	s := NewSlots(1)
	if !s.Acquire(context.Background(), false) {
		t.Fatal("no slot at start")
	}
	var mu sync.Mutex
	var order []string
	got := make(chan struct{}, 4)
	start := func(name string, awaited bool) {
		n := s.Waiting()
		go func() {
			if !s.Acquire(context.Background(), awaited) {
				t.Errorf("%s got no slot", name)
			}
			mu.Lock()
			order = append(order, name)
			mu.Unlock()
			got <- struct{}{}
		}()
		waitFor(t, name+" in line", func() bool { return s.Waiting() == n+1 })
	}
	start("other-1", false)
	start("awaited-1", true)
	start("other-2", false)
	start("awaited-2", true)
	for range 4 {
		s.Release()
		<-got
	}
	want := []string{"awaited-1", "awaited-2", "other-1", "other-2"}
	if fmt.Sprint(order) != fmt.Sprint(want) {
		t.Errorf("slots went to %v, want %v", order, want)
	}
	if n, limit := s.InFlight(); n != 1 || limit != 1 {
		t.Errorf("in flight %d of %d, want 1 of 1", n, limit)
	}
}

// TestSlotsAcquireGivesUpWithItsContext: a write whose context ends while
// it waits gets no slot and leaves none taken; after shutdown none starts.
func TestSlotsAcquireGivesUpWithItsContext(t *testing.T) {
	s := NewSlots(1)
	s.Acquire(context.Background(), false)
	ctx, cancel := context.WithCancel(context.Background())
	res := make(chan bool, 1)
	go func() { res <- s.Acquire(ctx, true) }()
	waitFor(t, "the write in line", func() bool { return s.Waiting() == 1 })
	cancel()
	if <-res {
		t.Fatal("Acquire succeeded after its context ended")
	}
	if s.Acquire(ctx, true) {
		t.Fatal("Acquire succeeded with a context already done")
	}
	s.Release()
	if n, _ := s.InFlight(); n != 0 {
		t.Errorf("%d slots taken after every release", n)
	}
}

// TestSlotsNeverExceedTheLimit: writes of both kinds, some giving up, in a
// random order (seed logged), never hold more slots than the limit, and
// every slot is free at the end.
func TestSlotsNeverExceedTheLimit(t *testing.T) {
	seed := time.Now().UnixNano()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(uint64(seed), 0))
	const limit, n = 3, 500
	s := NewSlots(limit)
	var held, most atomic.Int64
	var wg sync.WaitGroup
	for range n {
		awaited, giveUp := rng.IntN(2) == 0, rng.IntN(5) == 0
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if giveUp {
				go cancel()
			}
			if !s.Acquire(ctx, awaited) {
				return
			}
			if h := held.Add(1); h > most.Load() {
				most.Store(h)
			}
			time.Sleep(time.Microsecond)
			held.Add(-1)
			s.Release()
		}()
	}
	wg.Wait()
	if most.Load() > limit {
		t.Errorf("%d slots held at once, limit %d", most.Load(), limit)
	}
	if n, _ := s.InFlight(); n != 0 {
		t.Errorf("%d slots taken at the end", n)
	}
}
