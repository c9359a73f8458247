package collector

import (
	"sync/atomic"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"
)

// Hooks for deterministic tests (package sim): an injectable clock
// (Config.Clock) and a quiescence probe (Idle). They cost an atomic add per
// queue item in production and change no behaviour.

// hooks is the collector's test-visible bookkeeping.
type hooks struct {
	// workersStarted is set once Run started the workers (after the
	// start-up re-check queued its items).
	workersStarted atomic.Bool
	// processing counts queue items handed out by Get and not yet Done
	// (an item stays processing while its write runs: see runWorker).
	processing atomic.Int64
	// busy counts goroutines in the middle of a step outside the queues
	// (a rediscovery round).
	busy atomic.Int64
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

// clock returns the configured clock, or the real one.
func (c *Collector) clock() clock.WithTicker {
	if c.cfg.Clock != nil {
		return c.cfg.Clock
	}
	return clock.RealClock{}
}

// useClock points every time source a test needs to control at clk (nil:
// leave the real clock).
func (c *Collector) useClock(clk clock.WithTicker) {
	if clk == nil {
		return
	}
	c.writes.now = clk.Now
	c.rechecks.now = clk.Now
	c.monitors.SetClock(clk)
}

// Idle reports whether the collector has nothing to do right now: its
// workers run, the event FIFO is drained and its consumer idle, no queue
// item is ready or being processed (which covers writes in flight), and no
// rediscovery round runs. Items waiting out a rate-limited requeue are not
// counted: they wait on Config.Clock, whose pending timers a test advances.
// A test hook: the answer may be stale as soon as it is returned unless
// whatever feeds the collector (its API server) is held still.
func (c *Collector) Idle() bool {
	if !c.hooks.workersStarted.Load() || c.hooks.busy.Load() != 0 || c.hooks.processing.Load() != 0 {
		return false
	}
	c.events.mu.Lock()
	fifoIdle := c.events.head == len(c.events.items) && !c.events.busy
	c.events.mu.Unlock()
	return fifoIdle && c.attemptToDelete.Len() == 0 && c.attemptToOrphan.Len() == 0
}
