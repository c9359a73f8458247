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

// track wraps q so that Idle sees the items being processed.
func (h *hooks) track(q workqueue.TypedRateLimitingInterface[types.UID]) workqueue.TypedRateLimitingInterface[types.UID] {
	return &trackedQueue{TypedRateLimitingInterface: q, processing: &h.processing}
}

type trackedQueue struct {
	workqueue.TypedRateLimitingInterface[types.UID]
	processing *atomic.Int64
}

func (q *trackedQueue) Get() (types.UID, bool) {
	uid, shutdown := q.TypedRateLimitingInterface.Get()
	if !shutdown {
		q.processing.Add(1)
	}
	return uid, shutdown
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
