package workers

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"

	"github.com/kgc-dev/kgc/internal/budget"
)

// pipelineProbe plans a blocking write for every item and records what the
// writes do.
type pipelineProbe struct {
	mu       sync.Mutex
	planned  map[types.UID]int
	inFlight int
	maxIn    int
	started  chan types.UID
	release  map[types.UID]chan error
	closed   bool
	ctxErrs  []error
}

// stop releases every write, present and future, with nil: a test that
// failed halfway must not leave writes blocked.
func (p *pipelineProbe) stop() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return
	}
	p.closed = true
	for _, ch := range p.release {
		close(ch)
	}
}

func newPipelineProbe() *pipelineProbe {
	return &pipelineProbe{planned: map[types.UID]int{}, started: make(chan types.UID, 100), release: map[types.UID]chan error{}}
}

func (p *pipelineProbe) gate(uid types.UID) chan error {
	p.mu.Lock()
	defer p.mu.Unlock()
	ch, ok := p.release[uid]
	if !ok {
		ch = make(chan error, 1)
		if p.closed {
			close(ch)
		}
		p.release[uid] = ch
	}
	return ch
}

func (p *pipelineProbe) plan(_ context.Context, uid types.UID) (write, error) {
	p.mu.Lock()
	p.planned[uid]++
	p.mu.Unlock()
	gate := p.gate(uid)
	return func(ctx context.Context) error {
		p.mu.Lock()
		p.inFlight++
		p.maxIn = max(p.maxIn, p.inFlight)
		p.mu.Unlock()
		p.started <- uid
		err := <-gate
		p.mu.Lock()
		p.inFlight--
		p.ctxErrs = append(p.ctxErrs, ctx.Err())
		p.mu.Unlock()
		return err
	}, nil
}

func (p *pipelineProbe) timesPlanned(uid types.UID) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.planned[uid]
}

func recvUID(t *testing.T, ch <-chan types.UID, what string) types.UID {
	t.Helper()
	select {
	case uid := <-ch:
		return uid
	case <-time.After(10 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
		return ""
	}
}

func noUID(t *testing.T, ch <-chan types.UID, what string) {
	t.Helper()
	select {
	case uid := <-ch:
		t.Fatalf("%s: %s started", what, uid)
	case <-time.After(200 * time.Millisecond):
	}
}

// run starts one worker of c on q that plans with p; the test's cleanup
// stops it and waits for its writes.
func (p *pipelineProbe) run(t *testing.T, c *Workers, q workqueue.TypedRateLimitingInterface[types.UID]) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); c.runWorker(ctx, context.Background(), q, one(p.plan), always) }()
	t.Cleanup(func() {
		cancel()
		q.ShutDown()
		p.stop()
		<-done
		c.pending.Wait()
	})
}

// releaseAll lets every write that starts finish with nil until nothing
// happens for a while and the queue is empty.
func (p *pipelineProbe) releaseAll(t *testing.T, q workqueue.TypedRateLimitingInterface[types.UID]) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		select {
		case uid := <-p.started:
			p.gate(uid) <- nil
		case <-time.After(300 * time.Millisecond):
			if q.Len() == 0 && p.inFlightNow() == 0 {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("queue %d, writes in flight %d: not drained", q.Len(), p.inFlightNow())
		}
	}
}

// One worker keeps as many writes in flight as there are slots, and no
// more; an item is not handed out again while its write is in flight.
func TestWorkerPipelinesWritesUpToTheSlots(t *testing.T) {
	c := &Workers{slots: budget.NewSlots(3)}
	q := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[types.UID]())
	p := newPipelineProbe()
	for i := range 5 {
		q.Add(types.UID(fmt.Sprintf("item-%d", i)))
	}
	p.run(t, c, q)

	busy := recvUID(t, p.started, "the first write")
	others := []types.UID{recvUID(t, p.started, "the second write"), recvUID(t, p.started, "the third write")}
	noUID(t, p.started, "a fourth write with three slots taken")

	// Re-adding an item whose write is in flight does not start it again…
	q.Add(busy)
	noUID(t, p.started, "an item re-added while its write is in flight")
	if n := p.timesPlanned(busy); n != 1 {
		t.Fatalf("%s planned %d times while its write was in flight, want 1", busy, n)
	}
	// …it is decided again once its write finished.
	p.gate(busy) <- nil
	for _, uid := range others {
		p.gate(uid) <- nil
	}
	p.releaseAll(t, q)
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.maxIn != 3 {
		t.Errorf("at most %d writes were in flight, want exactly the 3 slots", p.maxIn)
	}
	for i := range 5 {
		uid := types.UID(fmt.Sprintf("item-%d", i))
		want := 1
		if uid == busy {
			want = 2
		}
		if p.planned[uid] != want {
			t.Errorf("%s planned %d times, want %d", uid, p.planned[uid], want)
		}
	}
}

// A write's error retries its item with backoff; success forgets it.
func TestFailedWriteRetriesItem(t *testing.T) {
	c := &Workers{slots: budget.NewSlots(2)}
	q := workqueue.NewTypedRateLimitingQueue(workqueue.NewTypedItemExponentialFailureRateLimiter[types.UID](time.Millisecond, time.Millisecond))
	p := newPipelineProbe()
	q.Add("a")
	p.run(t, c, q)
	recvUID(t, p.started, "the first write")
	p.gate("a") <- errors.New("apiserver unavailable")
	recvUID(t, p.started, "the retried write")
	if n := q.NumRequeues("a"); n != 1 {
		t.Errorf("requeues after a failed write = %d, want 1", n)
	}
	p.gate("a") <- nil
	p.releaseAll(t, q)
	if n := q.NumRequeues("a"); n != 0 {
		t.Errorf("requeues after a successful write = %d, want 0 (forgotten)", n)
	}
	if n := p.timesPlanned("a"); n != 2 {
		t.Errorf("planned %d times, want 2", n)
	}
}

func (p *pipelineProbe) inFlightNow() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.inFlight
}

// At shutdown, writes already started finish on the live work context and
// are waited for (pending); a decided write still waiting for a slot is
// dropped, not started.
func TestShutdownFinishesStartedWritesOnly(t *testing.T) {
	c := &Workers{slots: budget.NewSlots(1)}
	q := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[types.UID]())
	p := newPipelineProbe()
	defer p.stop()
	q.Add("a")
	q.Add("b")
	ctx, cancel := context.WithCancel(context.Background())
	workCtx, cancelWork := context.WithCancel(context.Background())
	defer cancelWork()
	done := make(chan struct{})
	go func() { defer close(done); c.runWorker(ctx, workCtx, q, one(p.plan), always) }()

	if uid := recvUID(t, p.started, "the first write"); uid != "a" {
		t.Fatalf("first write = %s", uid)
	}
	// "b" is decided and waits for the only slot.
	deadline := time.Now().Add(10 * time.Second)
	for p.timesPlanned("b") == 0 {
		if time.Now().After(deadline) {
			t.Fatal("b was never decided")
		}
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	q.ShutDown()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("worker did not return after shutdown")
	}
	p.gate("a") <- nil
	waited := make(chan struct{})
	go func() { c.pending.Wait(); close(waited) }()
	select {
	case <-waited:
	case <-time.After(10 * time.Second):
		t.Fatal("the started write was not waited for")
	}
	noUID(t, p.started, "a write decided before shutdown but not started")
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.ctxErrs) != 1 || p.ctxErrs[0] != nil {
		t.Errorf("writes finished with context errors %v, want one write on a live context", p.ctxErrs)
	}
}
