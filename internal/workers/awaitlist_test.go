package workers

import (
	"slices"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
)

// Dependents park while their owner's resource lists and is not idle for
// the hold; they are queued again when its list is applied, or when the
// list stalls for the hold, and never for a resource that is not listing.
func TestAwaitList(t *testing.T) {
	deployments := schema.GroupKind{Group: "apps", Kind: "Deployment"}
	widgets := schema.GroupKind{Group: "example.com", Kind: "Widget"}
	clk := clocktesting.NewFakeClock(time.Now())
	var mu sync.Mutex
	listing := map[schema.GroupKind]time.Time{deployments: clk.Now(), widgets: clk.Now()} // last progress
	var requeued []types.UID
	a := newAwaitList(func(gk schema.GroupKind) (bool, time.Duration) {
		mu.Lock()
		defer mu.Unlock()
		at, ok := listing[gk]
		if !ok {
			return false, 0
		}
		return true, clk.Since(at)
	}, time.Minute, clk, func(uid types.UID) {
		mu.Lock()
		requeued = append(requeued, uid)
		mu.Unlock()
	})
	defer a.close()
	got := func() []types.UID {
		mu.Lock()
		defer mu.Unlock()
		out := slices.Clone(requeued)
		slices.Sort(out)
		requeued = nil
		return out
	}

	if a.park(schema.GroupKind{Kind: "ConfigMap"}, "x") {
		t.Error("parked for a resource that is not listing")
	}
	if !a.park(deployments, "d1") || !a.park(deployments, "d2") || !a.park(deployments, "d1") || !a.park(widgets, "w1") {
		t.Fatal("not parked for a listing resource")
	}
	if n := a.parked(); n != 3 {
		t.Errorf("parked %d, want 3", n)
	}

	// The deployments' list is applied: their dependents are queued again.
	mu.Lock()
	delete(listing, deployments)
	mu.Unlock()
	a.flush(deployments)
	if r := got(); !slices.Equal(r, []types.UID{"d1", "d2"}) {
		t.Errorf("requeued %v after the deployments' list, want d1, d2", r)
	}

	// The widgets' list progresses after 40s, then stalls: their
	// dependent is queued again a minute after the last progress.
	clk.Step(40 * time.Second)
	mu.Lock()
	listing[widgets] = clk.Now()
	mu.Unlock()
	waitFor(t, "the stall timer", func() bool { return clk.HasWaiters() })
	clk.Step(30 * time.Second) // the first timer fires: 30s idle, re-armed
	waitFor(t, "the re-armed stall timer", func() bool { return clk.HasWaiters() })
	if r := got(); len(r) != 0 {
		t.Errorf("requeued %v while the list progressed within the hold", r)
	}
	if a.park(widgets, "w2") != true {
		t.Error("not parked while the list progresses")
	}
	clk.Step(30 * time.Second)
	waitFor(t, "the stalled list's dependents", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(requeued) == 2
	})
	if r := got(); !slices.Equal(r, []types.UID{"w1", "w2"}) {
		t.Errorf("requeued %v once the list stalled, want w1, w2", r)
	}
	// Stalled: no longer parked.
	if a.park(widgets, "w3") {
		t.Error("parked for a stalled list")
	}
	if n := a.parked(); n != 0 {
		t.Errorf("parked %d at the end, want 0", n)
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waiting for %s: timed out", what)
		}
		time.Sleep(time.Millisecond)
	}
}
