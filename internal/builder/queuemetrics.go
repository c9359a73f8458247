package builder

import (
	"context"
	"sync/atomic"
	"time"

	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"

	"github.com/kgc-dev/kgc/internal/graph"
	"github.com/kgc-dev/kgc/internal/metrics"
)

// queued is one event waiting for the graph builder, with when it was
// queued (since the queue's epoch; zero when the queue is not measured).
type queued struct {
	ev graph.Event
	at time.Duration
}

// unfinishedUpdatePeriod is how often the in-progress gauges are updated,
// as client-go's work queues update theirs.
const unfinishedUpdatePeriod = 500 * time.Millisecond

// queueMetrics measures the queue between the monitors and the graph
// builder as client-go measures a work queue (workqueue.MetricsProvider),
// under kube-controller-manager's name for it
// (metrics.QueueGraphChanges): kube-controller-manager's graph builder
// reads its events from a client-go queue of that name, kgc's from a FIFO
// that never blocks a monitor. Its one consumer makes the in-progress
// gauges the age of the event being applied. A nil *queueMetrics measures
// nothing.
type queueMetrics struct {
	clock clock.WithTicker
	epoch time.Time

	depth               workqueue.GaugeMetric
	adds                workqueue.CounterMetric
	latency, work       workqueue.HistogramMetric
	unfinished, longest workqueue.SettableGaugeMetric

	// applying is when the event being applied was taken (since epoch,
	// plus one so that zero means none).
	applying atomic.Int64
}

// newQueueMetrics returns the graph builder queue's metrics from p, or nil
// when p is nil.
func newQueueMetrics(p workqueue.MetricsProvider, clk clock.WithTicker) *queueMetrics {
	if p == nil {
		return nil
	}
	name := metrics.QueueGraphChanges
	q := &queueMetrics{
		clock: clk, epoch: clk.Now(),
		depth: p.NewDepthMetric(name), adds: p.NewAddsMetric(name),
		latency: p.NewLatencyMetric(name), work: p.NewWorkDurationMetric(name),
		unfinished: p.NewUnfinishedWorkSecondsMetric(name), longest: p.NewLongestRunningProcessorSecondsMetric(name),
	}
	// The FIFO never retries an event; the series exists, at zero, as
	// kube-controller-manager's does.
	p.NewRetriesMetric(name)
	return q
}

func (q *queueMetrics) now() time.Duration {
	if q == nil {
		return 0
	}
	return q.clock.Since(q.epoch)
}

// added records one event queued.
func (q *queueMetrics) added() {
	if q == nil {
		return
	}
	q.adds.Inc()
	q.depth.Inc()
}

// taken records the graph builder taking an event queued at at.
func (q *queueMetrics) taken(at time.Duration) {
	if q == nil {
		return
	}
	now := q.now()
	q.depth.Dec()
	q.latency.Observe((now - at).Seconds())
	q.applying.Store(int64(now) + 1)
}

// applied records the end of the event taken last.
func (q *queueMetrics) applied() {
	if q == nil {
		return
	}
	since := time.Duration(q.applying.Swap(0) - 1)
	q.work.Observe((q.now() - since).Seconds())
}

// updateUnfinished sets the in-progress gauges every
// unfinishedUpdatePeriod until ctx is done.
func (q *queueMetrics) updateUnfinished(ctx context.Context) {
	if q == nil {
		return
	}
	t := q.clock.NewTicker(unfinishedUpdatePeriod)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
		}
		v := 0.0
		if since := q.applying.Load(); since != 0 {
			v = (q.now() - time.Duration(since-1)).Seconds()
		}
		q.unfinished.Set(v)
		q.longest.Set(v)
	}
}
