package builder

import (
	"context"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/workqueue"

	"github.com/kgc-dev/kgc/internal/fakeapi"
	"github.com/kgc-dev/kgc/internal/graph"
	"github.com/kgc-dev/kgc/internal/metrics"
	"github.com/kgc-dev/kgc/internal/rules"
)

// queueRecorder is a workqueue.MetricsProvider that keeps, per metric of
// the graph builder's queue, the sum of what it was told and how often.
type queueRecorder struct {
	mu    sync.Mutex
	sum   map[string]float64
	count map[string]int
	names map[string]bool // the queue names metrics were made for
}

type recorderMetric struct {
	r    *queueRecorder
	what string
}

func (m recorderMetric) add(v float64) {
	m.r.mu.Lock()
	defer m.r.mu.Unlock()
	m.r.sum[m.what] += v
	m.r.count[m.what]++
}
func (m recorderMetric) Inc()              { m.add(1) }
func (m recorderMetric) Dec()              { m.add(-1) }
func (m recorderMetric) Observe(v float64) { m.add(v) }
func (m recorderMetric) Set(v float64) {
	m.r.mu.Lock()
	defer m.r.mu.Unlock()
	m.r.sum[m.what] = v
	m.r.count[m.what]++
}

func (r *queueRecorder) metric(name, what string) recorderMetric {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.names[name] = true
	return recorderMetric{r, what}
}
func (r *queueRecorder) NewDepthMetric(n string) workqueue.GaugeMetric { return r.metric(n, "depth") }
func (r *queueRecorder) NewAddsMetric(n string) workqueue.CounterMetric {
	return r.metric(n, "adds")
}
func (r *queueRecorder) NewLatencyMetric(n string) workqueue.HistogramMetric {
	return r.metric(n, "latency")
}
func (r *queueRecorder) NewWorkDurationMetric(n string) workqueue.HistogramMetric {
	return r.metric(n, "work")
}
func (r *queueRecorder) NewUnfinishedWorkSecondsMetric(n string) workqueue.SettableGaugeMetric {
	return r.metric(n, "unfinished")
}
func (r *queueRecorder) NewLongestRunningProcessorSecondsMetric(n string) workqueue.SettableGaugeMetric {
	return r.metric(n, "longest")
}
func (r *queueRecorder) NewRetriesMetric(n string) workqueue.CounterMetric {
	return r.metric(n, "retries")
}

func (r *queueRecorder) get(what string) (sum float64, count int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.sum[what], r.count[what]
}

// TestGraphChangesQueueIsMeasuredAsAWorkQueue: the queue between the
// monitors and the graph builder reports, under kube-controller-manager's
// name for it, what a client-go work queue reports: each event added,
// waiting (depth), its wait and its application measured, and the
// application in progress while it lasts.
func TestGraphChangesQueueIsMeasuredAsAWorkQueue(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	rec := &queueRecorder{sum: map[string]float64{}, count: map[string]int{}, names: map[string]bool{}}
	release := make(chan struct{})
	applying := make(chan struct{}, 1)
	b := New(Config{Metadata: fakeapi.NewServer().Client, Discovery: &fakeapi.Discovery{}, Mapper: fakeapi.NewMapper(), QueueMetrics: rec},
		graph.New(), SinkFunc(func(ev graph.Event, _ graph.Effects) {
			if ev.Object.Identity.Name == "slow" {
				applying <- struct{}{}
				<-release
			}
		}))
	defer b.Stop()
	if len(rec.names) != 1 || !rec.names[metrics.QueueGraphChanges] {
		t.Fatalf("queue metrics made for %v, want only %s", rec.names, metrics.QueueGraphChanges)
	}
	if _, n := rec.get("retries"); n != 0 {
		t.Errorf("retries counted %d times; the FIFO never retries", n)
	}
	event := func(name string) graph.Event {
		return graph.Event{Type: graph.Upsert, Object: rules.Object{Identity: rules.Identity{
			APIVersion: "v1", Kind: "ConfigMap", Namespace: "ns", Name: name, UID: types.UID(name)}}}
	}
	for _, name := range []string{"a", "b", "slow", "c"} {
		b.Enqueue(event(name))
	}
	if adds, _ := rec.get("adds"); adds != 4 {
		t.Errorf("adds = %v after 4 events, want 4", adds)
	}
	if depth, _ := rec.get("depth"); depth != 4 {
		t.Errorf("depth = %v before the builder runs, want 4", depth)
	}
	go b.Run(ctx)
	<-applying
	// The slow event is being applied: the in-progress gauges grow.
	if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 5*time.Second, true, func(context.Context) (bool, error) {
		v, _ := rec.get("unfinished")
		l, _ := rec.get("longest")
		return v > 0 && l > 0, nil
	}); err != nil {
		t.Error("unfinished_work_seconds and longest_running_processor_seconds stayed at 0 while an event was being applied")
	}
	if depth, _ := rec.get("depth"); depth != 1 {
		t.Errorf("depth = %v with one event left, want 1", depth)
	}
	close(release)
	b.WaitIdle()
	if depth, _ := rec.get("depth"); depth != 0 {
		t.Errorf("depth = %v once every event is applied, want 0", depth)
	}
	if _, n := rec.get("latency"); n != 4 {
		t.Errorf("queue_duration_seconds observed %d times, want 4", n)
	}
	if _, n := rec.get("work"); n != 4 {
		t.Errorf("work_duration_seconds observed %d times, want 4", n)
	}
	if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 5*time.Second, true, func(context.Context) (bool, error) {
		v, _ := rec.get("unfinished")
		return v == 0, nil
	}); err != nil {
		t.Error("unfinished_work_seconds did not fall back to 0 once the builder was idle")
	}
}
