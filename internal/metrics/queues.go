package metrics

import (
	"k8s.io/client-go/util/workqueue"
)

// Queue names, kube-controller-manager's for the same queues, so that
// series selected by name read the same in both.
const (
	QueueAttemptToDelete = "garbage_collector_attempt_to_delete"
	QueueAttemptToOrphan = "garbage_collector_attempt_to_orphan"
	// QueueGraphChanges is the queue between the monitors and the graph
	// builder (kube-controller-manager's graphChanges).
	QueueGraphChanges = "garbage_collector_graph_changes"
	// QueueNamespace is the namespace lifecycle's (kube-controller-manager's
	// namespace controller's).
	QueueNamespace = "namespace"
)

// Queues returns the metrics provider of kgc's work queues: kgc's own
// (kgc_workqueue_*, nothing when m is nil) and, when extra is not nil, extra
// as well, so that one queue feeds both. It returns nil when there are
// neither; client-go's queues then report to its process-wide provider
// (workqueue.SetProvider), as every client-go queue does.
func (m *Metrics) Queues(extra workqueue.MetricsProvider) workqueue.MetricsProvider {
	own := m.QueueMetricsProvider()
	switch {
	case own == nil:
		return extra
	case extra == nil:
		return own
	}
	return teeProvider{own, extra}
}

// teeProvider gives each queue the metrics of two providers.
type teeProvider struct{ a, b workqueue.MetricsProvider }

func (t teeProvider) NewDepthMetric(name string) workqueue.GaugeMetric {
	return teeGauge{t.a.NewDepthMetric(name), t.b.NewDepthMetric(name)}
}

func (t teeProvider) NewAddsMetric(name string) workqueue.CounterMetric {
	return teeCounter{t.a.NewAddsMetric(name), t.b.NewAddsMetric(name)}
}

func (t teeProvider) NewLatencyMetric(name string) workqueue.HistogramMetric {
	return teeHistogram{t.a.NewLatencyMetric(name), t.b.NewLatencyMetric(name)}
}

func (t teeProvider) NewWorkDurationMetric(name string) workqueue.HistogramMetric {
	return teeHistogram{t.a.NewWorkDurationMetric(name), t.b.NewWorkDurationMetric(name)}
}

func (t teeProvider) NewUnfinishedWorkSecondsMetric(name string) workqueue.SettableGaugeMetric {
	return teeSettable{t.a.NewUnfinishedWorkSecondsMetric(name), t.b.NewUnfinishedWorkSecondsMetric(name)}
}

func (t teeProvider) NewLongestRunningProcessorSecondsMetric(name string) workqueue.SettableGaugeMetric {
	return teeSettable{t.a.NewLongestRunningProcessorSecondsMetric(name), t.b.NewLongestRunningProcessorSecondsMetric(name)}
}

func (t teeProvider) NewRetriesMetric(name string) workqueue.CounterMetric {
	return teeCounter{t.a.NewRetriesMetric(name), t.b.NewRetriesMetric(name)}
}

type teeGauge struct{ a, b workqueue.GaugeMetric }

func (g teeGauge) Inc() { g.a.Inc(); g.b.Inc() }
func (g teeGauge) Dec() { g.a.Dec(); g.b.Dec() }

type teeCounter struct{ a, b workqueue.CounterMetric }

func (c teeCounter) Inc() { c.a.Inc(); c.b.Inc() }

type teeHistogram struct{ a, b workqueue.HistogramMetric }

func (h teeHistogram) Observe(v float64) { h.a.Observe(v); h.b.Observe(v) }

type teeSettable struct{ a, b workqueue.SettableGaugeMetric }

func (s teeSettable) Set(v float64) { s.a.Set(v); s.b.Set(v) }
