package workers

import (
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"
)

// Hooks for deterministic tests (package sim): an injectable clock
// (Config.Clock) and a quiescence probe (Idle). They cost an atomic add per
// queue item in production and change no behaviour. With Config.Clock set
// (tests only), the queues' delays are made here rather than by
// client-go's delaying queue, with its semantics (delays), and are not
// counted in its retries metric.

// hooks is the workers' test-visible bookkeeping.
type hooks struct {
	// workersStarted is set once Start started the workers (after the
	// start-up re-check queued its items).
	workersStarted atomic.Bool
	// processing counts queue items handed out by Get and not yet Done
	// (an item stays processing while its writes run: see runWorker).
	processing atomic.Int64
	// delays: the queues' delayed items, with a test clock only.
	delays []*delays
}

// store returns the item store of a work queue (order; client-go's
// default when nil) that counts an item as processing the moment it
// leaves the store: client-go's queue pops it under its own lock, in Get,
// so no instant exists in which an item handed out is neither waiting
// (Len) nor processing. Counting it in Get after the queue returned it
// left such an instant, in which Idle was wrongly true: a quiescence probe
// could pass while a worker was about to decide.
func (h *hooks) store(order workqueue.Queue[types.UID]) workqueue.Queue[types.UID] {
	if order == nil {
		order = workqueue.DefaultQueue[types.UID]()
	}
	return countingStore{Queue: order, processing: &h.processing}
}

type countingStore struct {
	workqueue.Queue[types.UID]
	processing *atomic.Int64
}

func (s countingStore) Pop() types.UID {
	s.processing.Add(1)
	return s.Queue.Pop()
}

// track wraps q so that an item stops counting as processing once Done.
// With a test clock (clk not nil) it also delays items itself (delays),
// with limiter, q's rate limiter, for AddRateLimited.
func (h *hooks) track(q workqueue.TypedRateLimitingInterface[types.UID], limiter workqueue.TypedRateLimiter[types.UID], clk clock.WithTicker) workqueue.TypedRateLimitingInterface[types.UID] {
	t := &trackedQueue{TypedRateLimitingInterface: q, processing: &h.processing}
	if clk != nil {
		t.delays = &delays{clock: clk, limiter: limiter, waiting: map[types.UID]*delayed{}, stop: make(chan struct{})}
		h.delays = append(h.delays, t.delays)
	}
	return t
}

type trackedQueue struct {
	workqueue.TypedRateLimitingInterface[types.UID]
	processing *atomic.Int64
	delays     *delays
}

// delays delays a queue's items on a test clock in place of client-go's
// delaying queue, with its semantics (an item waits once, until the
// earliest time asked for), so that a quiescence probe sees them. The
// delaying queue hands an item to its queue on its own goroutine: it
// receives the item on a channel, later arms a timer on the clock, and
// when the timer fires takes the tick and only then queues the item. In
// both gaps the item was neither waiting (Len) nor processing, so Idle was
// wrongly true: a step could end before the timer was armed (the
// scheduler's next Advance then stepped past it), or after the clock fired
// it but before the item was queued (the retry then ran in the next step).
// Here the timer is armed by the caller of AddAfter, a worker still
// processing, and the item counts from then until it is queued, once due.
type delays struct {
	clock   clock.WithTicker
	limiter workqueue.TypedRateLimiter[types.UID]
	mu      sync.Mutex
	waiting map[types.UID]*delayed
	stop    chan struct{}
	stopped bool
}

type delayed struct {
	at     time.Time
	timer  clock.Timer
	cancel chan struct{}
}

// due reports whether an item's time came and it is not queued yet.
func (d *delays) due() bool {
	now := d.clock.Now()
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, e := range d.waiting {
		if !e.at.After(now) {
			return true
		}
	}
	return false
}

func (q *trackedQueue) AddAfter(uid types.UID, wait time.Duration) {
	d := q.delays
	if d == nil {
		q.TypedRateLimitingInterface.AddAfter(uid, wait)
		return
	}
	if q.ShuttingDown() {
		return
	}
	if wait <= 0 {
		q.Add(uid)
		return
	}
	at := d.clock.Now().Add(wait)
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.stopped {
		return
	}
	if e := d.waiting[uid]; e != nil {
		if !e.at.After(at) {
			return // it waits already, for no longer
		}
		e.timer.Stop()
		close(e.cancel)
	}
	e := &delayed{at: at, timer: d.clock.NewTimer(wait), cancel: make(chan struct{})}
	d.waiting[uid] = e
	go func() {
		select {
		case <-e.timer.C():
		case <-e.cancel:
			return
		case <-d.stop:
			e.timer.Stop()
			return
		}
		q.Add(uid)
		d.mu.Lock()
		if d.waiting[uid] == e {
			delete(d.waiting, uid)
		}
		d.mu.Unlock()
	}()
}

// AddRateLimited is the rate-limiting queue's, through AddAfter.
func (q *trackedQueue) AddRateLimited(uid types.UID) {
	if q.delays == nil {
		q.TypedRateLimitingInterface.AddRateLimited(uid)
		return
	}
	q.AddAfter(uid, q.delays.limiter.When(uid))
}

func (q *trackedQueue) ShutDown() {
	q.stopDelays()
	q.TypedRateLimitingInterface.ShutDown()
}

func (q *trackedQueue) ShutDownWithDrain() {
	q.stopDelays()
	q.TypedRateLimitingInterface.ShutDownWithDrain()
}

func (q *trackedQueue) stopDelays() {
	if d := q.delays; d != nil {
		d.mu.Lock()
		if !d.stopped {
			d.stopped = true
			close(d.stop)
		}
		d.mu.Unlock()
	}
}

func (q *trackedQueue) Done(uid types.UID) {
	q.TypedRateLimitingInterface.Done(uid)
	q.processing.Add(-1)
}

// useClock points every time source a test needs to control at clk (nil:
// leave the real clock).
func (w *Workers) useClock(clk clock.WithTicker) {
	if clk == nil {
		return
	}
	w.writes.now = clk.Now
	w.rechecks.now = clk.Now
}

// Idle reports whether the workers have nothing to do right now: they
// run, and no queue item is ready or being processed (which covers writes
// in flight). Items waiting out a rate-limited requeue are not counted
// while they wait on Config.Clock, whose pending timers a test advances;
// they are once due, until queued (delays). A test hook (see
// Collector.Idle).
func (w *Workers) Idle() bool {
	if !w.hooks.workersStarted.Load() || w.hooks.processing.Load() != 0 ||
		w.attemptToDelete.Len() != 0 || w.attemptToOrphan.Len() != 0 {
		return false
	}
	for _, d := range w.hooks.delays {
		if d.due() {
			return false
		}
	}
	return true
}
