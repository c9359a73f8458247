package budget

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	testingclock "k8s.io/utils/clock/testing"
)

// waitFor polls cond (the waiters a test started are in line) without
// asserting anything by sleeping.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	if err := wait.PollUntilContextTimeout(context.Background(), time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return cond(), nil
	}); err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
}

// TestLimiterServesAwaitedFirst: with the bucket empty, the waiters get the
// tokens as they come due, awaited ones first, each class in arrival order,
// at qps.
func TestLimiterServesAwaitedFirst(t *testing.T) {
	clk := testingclock.NewFakeClock(time.Now())
	l := NewLimiter(10, 2, clk)
	defer l.Stop()
	for range 2 {
		if !l.TryAccept() {
			t.Fatal("the burst is not available at start")
		}
	}
	if l.TryAccept() {
		t.Fatal("a third token within the burst of 2")
	}
	var mu sync.Mutex
	var order []string
	var wg sync.WaitGroup
	start := func(name string, awaited bool) {
		n := l.waiters()
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx := context.Background()
			if awaited {
				ctx = WithAwaited(ctx)
			}
			if err := l.Wait(ctx); err != nil {
				t.Error(err)
			}
			mu.Lock()
			order = append(order, name)
			mu.Unlock()
		}()
		waitFor(t, name+" in line", func() bool { return l.waiters() == n+1 })
	}
	start("other-1", false)
	start("other-2", false)
	start("awaited-1", true)
	start("other-3", false)
	start("awaited-2", true)
	served := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(order)
	}
	for i := 1; i <= 5; i++ {
		// The limiter sets its timer for the next token after it served
		// the last one.
		waitFor(t, "the limiter's timer", clk.HasWaiters)
		clk.Step(100 * time.Millisecond) // one token at 10 QPS
		waitFor(t, fmt.Sprintf("waiter %d served", i), func() bool { return served() == i })
	}
	wg.Wait()
	want := []string{"awaited-1", "awaited-2", "other-1", "other-2", "other-3"}
	if fmt.Sprint(order) != fmt.Sprint(want) {
		t.Errorf("served %v, want %v", order, want)
	}
}

// TestLimiterWaiterThatGivesUpLeavesTheLine: a waiter whose context ends
// returns its error and takes no token; the next one gets it.
func TestLimiterWaiterThatGivesUpLeavesTheLine(t *testing.T) {
	clk := testingclock.NewFakeClock(time.Now())
	l := NewLimiter(1, 1, clk)
	defer l.Stop()
	if !l.TryAccept() {
		t.Fatal("no token at start")
	}
	ctx, cancel := context.WithCancel(WithAwaited(context.Background()))
	gaveUp := make(chan error, 1)
	go func() { gaveUp <- l.Wait(ctx) }()
	waitFor(t, "the awaited waiter in line", func() bool { return l.waiters() == 1 })
	got := make(chan error, 1)
	go func() { got <- l.Wait(context.Background()) }()
	waitFor(t, "the other waiter in line", func() bool { return l.waiters() == 2 })
	cancel()
	if err := <-gaveUp; err == nil {
		t.Fatal("Wait returned nil for a cancelled context")
	}
	waitFor(t, "the limiter's timer", clk.HasWaiters)
	clk.Step(time.Second)
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	if l.waiters() != 0 {
		t.Errorf("%d waiters left", l.waiters())
	}
}

// TestLimiterKeepsTheRate: many concurrent requests of both kinds, in a
// random order (seed logged), get one token each, never more than burst
// plus qps × elapsed, and all of them.
func TestLimiterKeepsTheRate(t *testing.T) {
	seed := time.Now().UnixNano()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(uint64(seed), 0))
	const qps, burst, n = 1000, 5, 300
	l := NewLimiter(qps, burst, nil)
	defer l.Stop()
	began := time.Now()
	var wg sync.WaitGroup
	for i := range n {
		awaited := rng.IntN(2) == 0
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx := context.Background()
			if awaited {
				ctx = WithAwaited(ctx)
			}
			if err := l.Wait(ctx); err != nil {
				t.Errorf("request %d: %v", i, err)
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(began)
	if min := time.Duration(float64(n-burst) / qps * float64(time.Second)); elapsed < min {
		t.Errorf("%d requests in %s at %d QPS, burst %d: faster than %s", n, elapsed, qps, burst, min)
	}
}
