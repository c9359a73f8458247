package metrics

import (
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"k8s.io/client-go/util/workqueue"
)

// recordingProvider counts what each queue's metrics are told, by
// "<queue>/<metric>".
type recordingProvider struct {
	mu sync.Mutex
	n  map[string]float64
}

type recorded struct {
	p   *recordingProvider
	key string
}

func (r recorded) add(v float64) {
	r.p.mu.Lock()
	defer r.p.mu.Unlock()
	if r.p.n == nil {
		r.p.n = map[string]float64{}
	}
	r.p.n[r.key] += v
}
func (r recorded) Inc()              { r.add(1) }
func (r recorded) Dec()              { r.add(-1) }
func (r recorded) Observe(v float64) { r.add(v) }
func (r recorded) Set(v float64)     { r.add(v) }

func (p *recordingProvider) metric(name, what string) recorded {
	return recorded{p, name + "/" + what}
}
func (p *recordingProvider) NewDepthMetric(n string) workqueue.GaugeMetric {
	return p.metric(n, "depth")
}
func (p *recordingProvider) NewAddsMetric(n string) workqueue.CounterMetric {
	return p.metric(n, "adds")
}
func (p *recordingProvider) NewLatencyMetric(n string) workqueue.HistogramMetric {
	return p.metric(n, "latency")
}
func (p *recordingProvider) NewWorkDurationMetric(n string) workqueue.HistogramMetric {
	return p.metric(n, "work")
}
func (p *recordingProvider) NewUnfinishedWorkSecondsMetric(n string) workqueue.SettableGaugeMetric {
	return p.metric(n, "unfinished")
}
func (p *recordingProvider) NewLongestRunningProcessorSecondsMetric(n string) workqueue.SettableGaugeMetric {
	return p.metric(n, "longest")
}
func (p *recordingProvider) NewRetriesMetric(n string) workqueue.CounterMetric {
	return p.metric(n, "retries")
}

func (p *recordingProvider) get(key string) float64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.n[key]
}

// TestQueuesFeedBothProviders: one client-go queue built with Queues feeds
// kgc's kgc_workqueue_* and the extra provider alike.
func TestQueuesFeedBothProviders(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := New(reg, Sources{})
	if err != nil {
		t.Fatal(err)
	}
	extra := &recordingProvider{}
	q := workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
		workqueue.TypedRateLimitingQueueConfig[string]{Name: QueueAttemptToDelete, MetricsProvider: m.Queues(extra)})
	defer q.ShutDown()
	q.Add("a")
	q.Add("b")
	item, _ := q.Get()
	q.Done(item)
	q.AddRateLimited("c")

	if got := extra.get(QueueAttemptToDelete + "/adds"); got != 2 {
		t.Errorf("extra provider: adds = %v, want 2", got)
	}
	if got := extra.get(QueueAttemptToDelete + "/depth"); got != 1 {
		t.Errorf("extra provider: depth = %v, want 1", got)
	}
	if got := extra.get(QueueAttemptToDelete + "/retries"); got != 1 {
		t.Errorf("extra provider: retries = %v, want 1", got)
	}
	if got := testutil.ToFloat64(m.queueAdds.WithLabelValues(QueueAttemptToDelete)); got != 2 {
		t.Errorf("kgc_workqueue_adds_total = %v, want 2", got)
	}
	if got := testutil.ToFloat64(m.queueDepth.WithLabelValues(QueueAttemptToDelete)); got != 1 {
		t.Errorf("kgc_workqueue_depth = %v, want 1", got)
	}
	if got := testutil.ToFloat64(m.queueRetries.WithLabelValues(QueueAttemptToDelete)); got != 1 {
		t.Errorf("kgc_workqueue_retries_total = %v, want 1", got)
	}
}

func TestQueuesWithoutProviders(t *testing.T) {
	var none *Metrics
	if p := none.Queues(nil); p != nil {
		t.Errorf("no metrics, no extra: provider %v, want nil (client-go's default)", p)
	}
	extra := &recordingProvider{}
	if p := none.Queues(extra); p != extra {
		t.Errorf("no metrics: provider %v, want the extra one", p)
	}
	m, err := New(prometheus.NewRegistry(), Sources{})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := m.Queues(nil).(queueProvider); !ok {
		t.Errorf("no extra: provider %T, want kgc's own", m.Queues(nil))
	}
}
