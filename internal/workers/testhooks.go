package workers

import (
	"sync/atomic"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"
)

// Hooks for deterministic tests (package sim): an injectable clock
// (Config.Clock) and a quiescence probe (Idle). They cost an atomic add per
// queue item in production and change no behaviour.

// hooks is the workers' test-visible bookkeeping.
type hooks struct {
	// workersStarted is set once Start started the workers (after the
	// start-up re-check queued its items).
	workersStarted atomic.Bool
	// processing counts queue items handed out by Get and not yet Done
	// (an item stays processing while its writes run: see runWorker).
	processing atomic.Int64
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
func (h *hooks) track(q workqueue.TypedRateLimitingInterface[types.UID]) workqueue.TypedRateLimitingInterface[types.UID] {
	return &trackedQueue{TypedRateLimitingInterface: q, processing: &h.processing}
}

type trackedQueue struct {
	workqueue.TypedRateLimitingInterface[types.UID]
	processing *atomic.Int64
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
// in flight). Items waiting out a rate-limited requeue are not counted:
// they wait on Config.Clock, whose pending timers a test advances. A test
// hook (see Collector.Idle).
func (w *Workers) Idle() bool {
	return w.hooks.workersStarted.Load() && w.hooks.processing.Load() == 0 &&
		w.attemptToDelete.Len() == 0 && w.attemptToOrphan.Len() == 0
}
