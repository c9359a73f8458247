package app

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"k8s.io/client-go/util/workqueue"
	k8smetrics "k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"

	// client-go's REST client and leader election report through
	// process-wide hooks (k8s.io/client-go/tools/metrics,
	// leaderelection.SetProvider); these adapters, the ones
	// kube-controller-manager loads, export them as its
	// rest_client_* and leader_election_* series on component-base's
	// process-wide registry. The library (pkg/kgc) sets no process-wide
	// state; the binary does.
	_ "k8s.io/component-base/metrics/prometheus/clientgo/leaderelection"
	_ "k8s.io/component-base/metrics/prometheus/restclient"
	// component-base's workqueue adapter, which kube-controller-manager
	// loads (and k8s.io/apiserver too): it registers the workqueue_*
	// families on component-base's registry and sets client-go's
	// process-wide queue provider, for every queue of the process that
	// names none (the secure port's certificate controllers).
	_ "k8s.io/component-base/metrics/prometheus/workqueue"
)

// registry is `kgc run`'s metrics registry: kgc's own metrics (the library
// registers them on it) gathered together with component-base's
// process-wide registry, which holds what kube-controller-manager's process
// exports besides its collector's own series: client-go's REST client and
// leader election series, the work queues' (kcmQueueMetrics), and the Go
// runtime's and the process's (go_*, process_*, as component-base
// registers them: kube-controller-manager's set).
type registry struct {
	*prometheus.Registry
}

// Gather gathers the registries (the library serves /metrics from it):
// kgc's own, component-base's, and that of kgc's queues' workqueue_*
// series, whose families merge with component-base's of the same names.
func (r registry) Gather() ([]*dto.MetricFamily, error) {
	return prometheus.Gatherers{r.Registry, legacyregistry.DefaultGatherer, kcmQueueRegistry}.Gather()
}

// newRegistry returns kgc run's metrics registry.
func newRegistry() registry {
	return registry{prometheus.NewRegistry()}
}

// kube-controller-manager exports its work queues' metrics through
// client-go's process-wide provider, which component-base's workqueue
// adapter sets. kgc's queues report to the provider the library is given
// (kgc.Options.QueueMetrics) besides its own kgc_workqueue_*: client-go
// offers no way to read the process-wide provider back, and the library
// must not set it. So the binary defines the same families, with
// component-base's metric types, names, help, stability and buckets, on a
// registry of its own gathered with component-base's (the families merge),
// and gives them to the library. The contract
// test (sandbox/integration/signals) compares them with a real
// kube-controller-manager's.
var (
	kcmQueueMetricsOnce sync.Once
	kcmQueues           kcmQueueProvider
	// kcmQueueRegistry holds them: component-base's registry already
	// holds families of the same names (its own adapter's), which a second
	// registration there would collide with.
	kcmQueueRegistry = k8smetrics.NewKubeRegistry()
)

// kcmQueueMetrics returns the provider of kube-controller-manager's
// workqueue_* series for kgc's queues, registering them on first use.
func kcmQueueMetrics() workqueue.MetricsProvider {
	kcmQueueMetricsOnce.Do(func() {
		const subsystem = "workqueue"
		// Kube-controller-manager's buckets: 10 ns to 100 s.
		buckets := k8smetrics.ExponentialBuckets(10e-9, 10, 10)
		kcmQueues = kcmQueueProvider{
			depth: k8smetrics.NewGaugeVec(&k8smetrics.GaugeOpts{Subsystem: subsystem, Name: "depth", StabilityLevel: k8smetrics.BETA,
				Help: "Current depth of workqueue"}, []string{"name"}),
			adds: k8smetrics.NewCounterVec(&k8smetrics.CounterOpts{Subsystem: subsystem, Name: "adds_total", StabilityLevel: k8smetrics.BETA,
				Help: "Total number of adds handled by workqueue"}, []string{"name"}),
			latency: k8smetrics.NewHistogramVec(&k8smetrics.HistogramOpts{Subsystem: subsystem, Name: "queue_duration_seconds", StabilityLevel: k8smetrics.BETA,
				Help: "How long in seconds an item stays in workqueue before being requested.", Buckets: buckets}, []string{"name"}),
			work: k8smetrics.NewHistogramVec(&k8smetrics.HistogramOpts{Subsystem: subsystem, Name: "work_duration_seconds", StabilityLevel: k8smetrics.BETA,
				Help: "How long in seconds processing an item from workqueue takes.", Buckets: buckets}, []string{"name"}),
			unfinished: k8smetrics.NewGaugeVec(&k8smetrics.GaugeOpts{Subsystem: subsystem, Name: "unfinished_work_seconds", StabilityLevel: k8smetrics.BETA,
				Help: "How many seconds of work has done that is in progress and hasn't been observed by work_duration. Large values indicate stuck threads. One can deduce the number of stuck threads by observing the rate at which this increases."}, []string{"name"}),
			longest: k8smetrics.NewGaugeVec(&k8smetrics.GaugeOpts{Subsystem: subsystem, Name: "longest_running_processor_seconds", StabilityLevel: k8smetrics.BETA,
				Help: "How many seconds has the longest running processor for workqueue been running."}, []string{"name"}),
			retries: k8smetrics.NewCounterVec(&k8smetrics.CounterOpts{Subsystem: subsystem, Name: "retries_total", StabilityLevel: k8smetrics.BETA,
				Help: "Total number of retries handled by workqueue"}, []string{"name"}),
		}
		kcmQueueRegistry.MustRegister(kcmQueues.depth, kcmQueues.adds, kcmQueues.latency, kcmQueues.work, kcmQueues.unfinished, kcmQueues.longest, kcmQueues.retries)
	})
	return kcmQueues
}

// kcmQueueProvider is a workqueue.MetricsProvider of the workqueue_*
// series.
type kcmQueueProvider struct {
	depth, unfinished, longest *k8smetrics.GaugeVec
	adds, retries              *k8smetrics.CounterVec
	latency, work              *k8smetrics.HistogramVec
}

func (p kcmQueueProvider) NewDepthMetric(name string) workqueue.GaugeMetric {
	return p.depth.WithLabelValues(name)
}

func (p kcmQueueProvider) NewAddsMetric(name string) workqueue.CounterMetric {
	return p.adds.WithLabelValues(name)
}

func (p kcmQueueProvider) NewLatencyMetric(name string) workqueue.HistogramMetric {
	return p.latency.WithLabelValues(name)
}

func (p kcmQueueProvider) NewWorkDurationMetric(name string) workqueue.HistogramMetric {
	return p.work.WithLabelValues(name)
}

func (p kcmQueueProvider) NewUnfinishedWorkSecondsMetric(name string) workqueue.SettableGaugeMetric {
	return p.unfinished.WithLabelValues(name)
}

func (p kcmQueueProvider) NewLongestRunningProcessorSecondsMetric(name string) workqueue.SettableGaugeMetric {
	return p.longest.WithLabelValues(name)
}

func (p kcmQueueProvider) NewRetriesMetric(name string) workqueue.CounterMetric {
	return p.retries.WithLabelValues(name)
}
