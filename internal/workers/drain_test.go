package workers

import (
	"context"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
)

// At shutdown a worker finishes the item in flight on a live context and
// starts no new item.
func TestWorkerDrainsInFlightItemOnly(t *testing.T) {
	c := &Workers{}
	q := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[types.UID]())
	q.Add("a")
	q.Add("b")
	ctx, cancel := context.WithCancel(context.Background())
	workCtx, cancelWork := context.WithCancel(context.Background())
	defer cancelWork()

	started := make(chan types.UID, 2)
	release := make(chan struct{})
	var mu sync.Mutex
	var processed []types.UID
	var inFlightErr error
	process := func(ctx context.Context, uid types.UID) (write, error) {
		started <- uid
		<-release
		mu.Lock()
		defer mu.Unlock()
		processed = append(processed, uid)
		inFlightErr = ctx.Err()
		return nil, nil
	}
	done := make(chan struct{})
	go func() { defer close(done); c.runWorker(ctx, workCtx, q, one(process), always) }()

	if uid := <-started; uid != "a" {
		t.Fatalf("first item = %s", uid)
	}
	cancel()     // Run's context ends while "a" is in flight…
	q.ShutDown() // …and Run shuts the queue down.
	close(release)
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("worker did not return after shutdown")
	}
	mu.Lock()
	defer mu.Unlock()
	if len(processed) != 1 || processed[0] != "a" {
		t.Errorf("processed %v, want only the in-flight item a", processed)
	}
	if inFlightErr != nil {
		t.Errorf("the in-flight item's context was cancelled (%v): its API calls would be cut off", inFlightErr)
	}
}
