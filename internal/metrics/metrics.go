package metrics

import (
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/util/workqueue"

	"github.com/kgc-dev/kgc/internal/buildinfo"
)

const namespace = "kgc"

// Operation outcomes.
const (
	OutcomeSuccess  = "success"
	OutcomeConflict = "conflict"
	OutcomeNotFound = "not_found"
	OutcomeError    = "error"
)

// Operations kgc performs on objects.
const (
	OpDelete          = "delete"
	OpRemoveRefs      = "remove_owner_references"
	OpUnblockRefs     = "unblock_owner_references"
	OpOrphan          = "orphan_dependent"
	OpRemoveFinalizer = "remove_finalizer"
)

// Reasons a reference is unresolvable.
const (
	ReasonKindNotServed = "kind_not_served"
	ReasonInvalid       = "invalid"
)

// How an owner lookup reached the API server.
const (
	LookupGet  = "get"
	LookupList = "list"
	// LookupConfirm: a quorum GET confirming, just before a write, a fact
	// the graph holds but that may have changed since (a solid owner in the
	// mixed case; an object whose DELETE hit a 409).
	LookupConfirm = "confirm"
)

// Metrics holds kgc's metrics. A nil *Metrics is valid and records nothing.
type Metrics struct {
	operations   *prometheus.CounterVec
	apiRequests  *prometheus.CounterVec
	cascade      prometheus.Histogram
	unresolvable *prometheus.CounterVec
	lookups      *prometheus.CounterVec
	unlisted     *prometheus.CounterVec

	queueDepth      *prometheus.GaugeVec
	queueAdds       *prometheus.CounterVec
	queueLatency    *prometheus.HistogramVec
	queueWork       *prometheus.HistogramVec
	queueUnfinished *prometheus.GaugeVec
	queueLongest    *prometheus.GaugeVec
	queueRetries    *prometheus.CounterVec

	nsSyncs       *prometheus.CounterVec
	nsSync        prometheus.Histogram
	nsDeletion    prometheus.Histogram
	nsTerminating prometheus.Gauge
	nsSkipped     prometheus.Counter

	// syncErrors is kube-controller-manager's collector's counter, under
	// its name (resources.go).
	syncErrors prometheus.Counter

	breakerTrips *prometheus.CounterVec // breaker.go
	shadow       shadowMetrics          // shadow.go
	journal      journalMetrics         // journal.go

	collectors []prometheus.Collector
	reg        prometheus.Registerer
}

// GraphCounts is the graph size by node state.
type GraphCounts struct {
	Observed, Virtual, Absent, Deleting, DeletingDependents int
}

// MonitorState is one monitor's state.
type MonitorState struct {
	Resource string // group/version/resource
	Synced   bool
	Failing  bool // its list or watch fails (it may have synced before)
}

// Sources are read at scrape time, so that gauges are never stale.
type Sources struct {
	Graph    func() GraphCounts
	Monitors func() []MonitorState
	// DiscoveryFailures lists the group versions ("group/version") discovery
	// could not read. Optional.
	DiscoveryFailures func() []string
	// Writes reports the API writes in flight and their limit. Optional.
	Writes func() (inFlight, limit int)
	// Stuck reports the deletions stuck past kgc's threshold by root cause
	// (every reason, zeros included) and the age of the oldest one; ok is
	// false while there is no answer (kgc not synced yet). Optional.
	Stuck func() (byReason map[string]int, oldestSeconds float64, ok bool)
	// Startup reports how far the monitors' first lists have come.
	// Optional.
	Startup func() StartupProgress
	// Breaker reports the deletion breaker's state. Optional.
	Breaker func() BreakerState
}

// StartupProgress is how far kgc's start has come: the monitored resources
// whose first complete list is in the graph, out of all monitored ones,
// and the objects their first lists delivered so far.
type StartupProgress struct {
	ResourcesListed, ResourcesTotal int
	ObjectsListed                   int64
}

// New creates kgc's metrics and registers them on reg. With a nil reg it
// returns nil, and a nil *Metrics records nothing.
func New(reg prometheus.Registerer, src Sources) (*Metrics, error) {
	if reg == nil {
		return nil, nil
	}
	m := &Metrics{
		operations: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "operations_total",
			Help: "Writes kgc made to objects, by operation and outcome.",
		}, []string{"operation", "outcome"}),
		apiRequests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "api_requests_total",
			Help: "HTTP requests kgc sent to the API server, by verb and status code.",
		}, []string{"verb", "code"}),
		cascade: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: namespace, Name: "cascade_duration_seconds",
			Help:    "Time from kgc observing an owner deleted or deleting its dependents to the last of its dependents gone.",
			Buckets: prometheus.ExponentialBuckets(0.01, 2, 18),
		}),
		unresolvable: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "unresolvable_references_total",
			Help: "Owner references kgc could not resolve when checking a dependent, by reason (kind_not_served, invalid).",
		}, []string{"reason"}),
		lookups: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "owner_lookup_requests_total",
			Help: "Requests kgc sent to look up owners its cache could not vouch for, by verb (get: one owner; list: one page answering many owners of one resource and namespace).",
		}, []string{"verb"}),
		unlisted: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "finalizer_checks_unlisted_total",
			Help: "Finalizer removals (orphan, foregroundDeletion) that found a resource not listed yet, by outcome (held: retried later; released: removed anyway, the hold bound having passed).",
		}, []string{"finalizer", "outcome"}),
		queueDepth: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: namespace, Subsystem: "workqueue", Name: "depth",
			Help: "Items waiting in a work queue.",
		}, []string{"name"}),
		queueAdds: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Subsystem: "workqueue", Name: "adds_total",
			Help: "Items added to a work queue.",
		}, []string{"name"}),
		queueLatency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: namespace, Subsystem: "workqueue", Name: "queue_duration_seconds",
			Help:    "Time an item waits in a work queue before a worker takes it.",
			Buckets: prometheus.ExponentialBuckets(1e-6, 10, 10),
		}, []string{"name"}),
		queueWork: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: namespace, Subsystem: "workqueue", Name: "work_duration_seconds",
			Help:    "Time one item is in progress: its decision and its write, if any.",
			Buckets: prometheus.ExponentialBuckets(1e-6, 10, 10),
		}, []string{"name"}),
		queueUnfinished: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: namespace, Subsystem: "workqueue", Name: "unfinished_work_seconds",
			Help: "Seconds of work in progress not yet observed by work_duration_seconds; large values suggest stuck workers.",
		}, []string{"name"}),
		queueLongest: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: namespace, Subsystem: "workqueue", Name: "longest_running_processor_seconds",
			Help: "Seconds the longest-running item in progress of a queue (its decision or its write) has been in progress.",
		}, []string{"name"}),
		queueRetries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Subsystem: "workqueue", Name: "retries_total",
			Help: "Rate-limited retries of items in a work queue.",
		}, []string{"name"}),
		nsSyncs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Subsystem: "namespace", Name: "syncs_total",
			Help: "Passes of the namespace lifecycle over a deleting namespace, by outcome (finalized, waiting, failed, skipped).",
		}, []string{"outcome"}),
		nsSync: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: namespace, Subsystem: "namespace", Name: "sync_duration_seconds",
			Help:    "Time one pass of the namespace lifecycle over one namespace takes (discovery, deletions, confirming lists, status and finalize writes).",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 18),
		}),
		nsDeletion: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: namespace, Subsystem: "namespace", Name: "deletion_duration_seconds",
			Help:    "Time from kgc observing a namespace deleting to kgc removing its kubernetes finalizer.",
			Buckets: prometheus.ExponentialBuckets(0.05, 2, 16),
		}),
		nsTerminating: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: namespace, Subsystem: "namespace", Name: "terminating",
			Help: "Namespaces kgc observes deleting whose kubernetes finalizer it has not removed yet.",
		}),
		nsSkipped: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: namespace, Subsystem: "namespace", Name: "resources_skipped_total",
			Help: "Resources of a deleting namespace not deleted because kgc's graph showed them empty and a quorum list confirmed it.",
		}),
	}
	build := buildinfo.Get()
	buildInfo := prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: namespace, Name: "build_info",
		Help:        "Always 1; its labels say which kgc this is: version, VCS revision, build date and Go version.",
		ConstLabels: prometheus.Labels{"version": build.Version, "revision": build.Revision, "builddate": build.BuildDate, "goversion": build.GoVersion},
	})
	buildInfo.Set(1)
	m.syncErrors = newSyncErrors()
	m.collectors = []prometheus.Collector{m.syncErrors,
		buildInfo, m.operations, m.apiRequests, m.cascade, m.unresolvable, m.lookups, m.unlisted,
		m.queueDepth, m.queueAdds, m.queueLatency, m.queueWork, m.queueUnfinished, m.queueLongest, m.queueRetries,
		m.nsSyncs, m.nsSync, m.nsDeletion, m.nsTerminating, m.nsSkipped,
		&stateCollector{src: src},
	}
	m.collectors = append(m.collectors, m.breakerCollectors(src)...)
	m.collectors = append(m.collectors, m.shadow.init()...)
	m.collectors = append(m.collectors, m.journal.init()...)
	m.reg = reg
	for i, c := range m.collectors {
		if err := reg.Register(c); err != nil {
			// All or nothing: a caller that corrects its mistake may
			// register on the same registry again.
			for _, done := range m.collectors[:i] {
				reg.Unregister(done)
			}
			return nil, err
		}
	}
	// Known label values start at zero, so every documented series is on
	// /metrics from the start (and rate() sees the first increment).
	for _, op := range []string{OpDelete, OpRemoveRefs, OpUnblockRefs, OpOrphan, OpRemoveFinalizer} {
		for _, outcome := range []string{OutcomeSuccess, OutcomeConflict, OutcomeNotFound, OutcomeError} {
			m.operations.WithLabelValues(op, outcome)
		}
	}
	for _, reason := range []string{ReasonKindNotServed, ReasonInvalid} {
		m.unresolvable.WithLabelValues(reason)
	}
	for _, verb := range []string{LookupGet, LookupList, LookupConfirm} {
		m.lookups.WithLabelValues(verb)
	}
	for _, f := range []string{"orphan", "foregroundDeletion"} {
		for _, outcome := range []string{UnlistedHeld, UnlistedReleased} {
			m.unlisted.WithLabelValues(f, outcome)
		}
	}
	for _, outcome := range []string{NamespaceFinalized, NamespaceWaiting, NamespaceFailed, NamespaceSkipped} {
		m.nsSyncs.WithLabelValues(outcome)
	}
	return m, nil
}

// Outcomes of one pass of the namespace lifecycle over a namespace.
const (
	// NamespaceFinalized: its kubernetes finalizer was removed.
	NamespaceFinalized = "finalized"
	// NamespaceWaiting: content remains (finalizers, graceful deletion) or
	// the admission grace period has not passed; checked again later.
	NamespaceWaiting = "waiting"
	// NamespaceFailed: an API call failed (discovery, a list, a delete, a
	// conflict); retried with backoff.
	NamespaceFailed = "failed"
	// NamespaceSkipped: nothing to do (not deleting, gone, or no
	// kubernetes finalizer).
	NamespaceSkipped = "skipped"
)

// NamespaceSync records one pass of the namespace lifecycle.
func (m *Metrics) NamespaceSync(outcome string, d time.Duration) {
	if m == nil {
		return
	}
	m.nsSyncs.WithLabelValues(outcome).Inc()
	m.nsSync.Observe(d.Seconds())
}

// NamespaceFinalized records a namespace whose kubernetes finalizer kgc
// removed d after it first observed it deleting.
func (m *Metrics) NamespaceFinalized(d time.Duration) {
	if m == nil {
		return
	}
	m.nsDeletion.Observe(d.Seconds())
}

// NamespaceResourceSkipped records a resource of a deleting namespace the
// graph showed empty and a quorum list confirmed empty: no deletion sent.
func (m *Metrics) NamespaceResourceSkipped() {
	if m == nil {
		return
	}
	m.nsSkipped.Inc()
}

// NamespacesTerminating sets the number of deleting namespaces kgc works on.
func (m *Metrics) NamespacesTerminating(n int) {
	if m == nil {
		return
	}
	m.nsTerminating.Set(float64(n))
}

// Unregister removes every collector New registered from its registry (for
// a caller whose construction failed after New: its sources may never be
// valid).
func (m *Metrics) Unregister() {
	if m == nil {
		return
	}
	for _, c := range m.collectors {
		m.reg.Unregister(c)
	}
}

// Operation counts one write to an object.
func (m *Metrics) Operation(op, outcome string) {
	if m == nil {
		return
	}
	m.operations.WithLabelValues(op, outcome).Inc()
}

// Lookup counts one owner-lookup request (LookupGet or LookupList).
func (m *Metrics) Lookup(verb string) {
	if m == nil {
		return
	}
	m.lookups.WithLabelValues(verb).Inc()
}

// Outcomes of a finalizer removal that found a resource not listed yet.
const (
	UnlistedHeld     = "held"
	UnlistedReleased = "released"
)

// FinalizerUnlisted counts one finalizer removal that found a resource not
// listed yet, with its outcome (UnlistedHeld or UnlistedReleased).
func (m *Metrics) FinalizerUnlisted(finalizer, outcome string) {
	if m == nil {
		return
	}
	m.unlisted.WithLabelValues(finalizer, outcome).Inc()
}

// Unresolvable counts one unresolvable reference.
func (m *Metrics) Unresolvable(reason string) {
	if m == nil {
		return
	}
	m.unresolvable.WithLabelValues(reason).Inc()
}

// CascadeDone observes one cascade's duration.
func (m *Metrics) CascadeDone(d time.Duration) {
	if m == nil {
		return
	}
	m.cascade.Observe(d.Seconds())
}

// QueueMetricsProvider returns a per-queue metrics provider for client-go
// work queues (nil when metrics are off, which client-go treats as none).
func (m *Metrics) QueueMetricsProvider() workqueue.MetricsProvider {
	if m == nil {
		return nil
	}
	return queueProvider{m}
}

type queueProvider struct{ m *Metrics }

func (p queueProvider) NewDepthMetric(name string) workqueue.GaugeMetric {
	return p.m.queueDepth.WithLabelValues(name)
}
func (p queueProvider) NewAddsMetric(name string) workqueue.CounterMetric {
	return p.m.queueAdds.WithLabelValues(name)
}
func (p queueProvider) NewLatencyMetric(name string) workqueue.HistogramMetric {
	return p.m.queueLatency.WithLabelValues(name)
}
func (p queueProvider) NewWorkDurationMetric(name string) workqueue.HistogramMetric {
	return p.m.queueWork.WithLabelValues(name)
}
func (p queueProvider) NewUnfinishedWorkSecondsMetric(name string) workqueue.SettableGaugeMetric {
	return p.m.queueUnfinished.WithLabelValues(name)
}
func (p queueProvider) NewLongestRunningProcessorSecondsMetric(name string) workqueue.SettableGaugeMetric {
	return p.m.queueLongest.WithLabelValues(name)
}
func (p queueProvider) NewRetriesMetric(name string) workqueue.CounterMetric {
	return p.m.queueRetries.WithLabelValues(name)
}

// stateCollector reports the graph and the monitors as they are at scrape time.
type stateCollector struct{ src Sources }

var (
	graphNodesDesc = prometheus.NewDesc(namespace+"_graph_nodes",
		"Nodes in the ownership graph, by state (observed, virtual, absent, deleting, deleting_dependents; a node may count in several).",
		[]string{"state"}, nil)
	monitorsDesc = prometheus.NewDesc(namespace+"_monitors",
		"Monitored resources by state: synced, syncing (initial list in progress), failing (its list or watch fails).",
		[]string{"state"}, nil)
	monitorSyncedDesc = prometheus.NewDesc(namespace+"_monitor_synced",
		"1 if the monitor of a resource has synced, 0 if it is still syncing or failing.",
		[]string{"resource"}, nil)
	discoveryFailuresDesc = prometheus.NewDesc(namespace+"_discovery_failed_group_versions",
		"Group versions the last discovery could not read (e.g. an unavailable APIService); /readyz?verbose names them.",
		nil, nil)
	monitorStateDesc = prometheus.NewDesc(namespace+"_monitor_state",
		"1 for the state a resource's monitor is in (synced, syncing, failing), 0 for the others.",
		[]string{"resource", "state"}, nil)
	writesInFlightDesc = prometheus.NewDesc(namespace+"_writes_in_flight",
		"API writes (DELETEs and patches) kgc has in flight.",
		nil, nil)
	writesLimitDesc = prometheus.NewDesc(namespace+"_writes_in_flight_limit",
		"The most API writes kgc has in flight at once (--max-writes-inflight).",
		nil, nil)
	stuckDesc = prometheus.NewDesc(namespace+"_stuck_objects",
		"Objects whose deletion has not finished after --stuck-threshold, by root cause (as kgc stuck groups them).",
		[]string{"reason"}, nil)
	oldestStuckDesc = prometheus.NewDesc(namespace+"_oldest_stuck_deletion_seconds",
		"Age of the oldest deletion stuck past --stuck-threshold (0: none).",
		nil, nil)
	startupListedDesc = prometheus.NewDesc(namespace+"_startup_resources_listed",
		"Monitored resources whose first complete list is in the graph.",
		nil, nil)
	startupTotalDesc = prometheus.NewDesc(namespace+"_startup_resources_total",
		"Monitored resources.",
		nil, nil)
	startupObjectsDesc = prometheus.NewDesc(namespace+"_startup_objects_listed",
		"Objects the monitors' first lists delivered so far (each resource's until its first complete list).",
		nil, nil)
)

func (c *stateCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- graphNodesDesc
	ch <- monitorsDesc
	ch <- monitorSyncedDesc
	ch <- monitorStateDesc
	ch <- discoveryFailuresDesc
	ch <- writesInFlightDesc
	ch <- writesLimitDesc
	ch <- stuckDesc
	ch <- oldestStuckDesc
	ch <- startupListedDesc
	ch <- startupTotalDesc
	ch <- startupObjectsDesc
}

func (c *stateCollector) Collect(ch chan<- prometheus.Metric) {
	if c.src.Graph != nil {
		g := c.src.Graph()
		for state, n := range map[string]int{
			"observed": g.Observed, "virtual": g.Virtual, "absent": g.Absent,
			"deleting": g.Deleting, "deleting_dependents": g.DeletingDependents,
		} {
			ch <- prometheus.MustNewConstMetric(graphNodesDesc, prometheus.GaugeValue, float64(n), state)
		}
	}
	if c.src.Monitors != nil {
		synced, syncing, failing := 0, 0, 0
		for _, mon := range c.src.Monitors() {
			state := "syncing"
			switch {
			case mon.Failing:
				failing++
				state = "failing"
			case mon.Synced:
				synced++
				state = "synced"
			default:
				syncing++
			}
			v := 0.0
			if mon.Synced {
				v = 1
			}
			ch <- prometheus.MustNewConstMetric(monitorSyncedDesc, prometheus.GaugeValue, v, mon.Resource)
			for _, s := range []string{"synced", "syncing", "failing"} {
				one := 0.0
				if s == state {
					one = 1
				}
				ch <- prometheus.MustNewConstMetric(monitorStateDesc, prometheus.GaugeValue, one, mon.Resource, s)
			}
		}
		ch <- prometheus.MustNewConstMetric(monitorsDesc, prometheus.GaugeValue, float64(synced), "synced")
		ch <- prometheus.MustNewConstMetric(monitorsDesc, prometheus.GaugeValue, float64(syncing), "syncing")
		ch <- prometheus.MustNewConstMetric(monitorsDesc, prometheus.GaugeValue, float64(failing), "failing")
	}
	if c.src.DiscoveryFailures != nil {
		ch <- prometheus.MustNewConstMetric(discoveryFailuresDesc, prometheus.GaugeValue, float64(len(c.src.DiscoveryFailures())))
	}
	if c.src.Writes != nil {
		n, limit := c.src.Writes()
		ch <- prometheus.MustNewConstMetric(writesInFlightDesc, prometheus.GaugeValue, float64(n))
		ch <- prometheus.MustNewConstMetric(writesLimitDesc, prometheus.GaugeValue, float64(limit))
	}
	if c.src.Stuck != nil {
		if by, oldest, ok := c.src.Stuck(); ok {
			for reason, n := range by {
				ch <- prometheus.MustNewConstMetric(stuckDesc, prometheus.GaugeValue, float64(n), reason)
			}
			ch <- prometheus.MustNewConstMetric(oldestStuckDesc, prometheus.GaugeValue, oldest)
		}
	}
	if c.src.Startup != nil {
		p := c.src.Startup()
		ch <- prometheus.MustNewConstMetric(startupListedDesc, prometheus.GaugeValue, float64(p.ResourcesListed))
		ch <- prometheus.MustNewConstMetric(startupTotalDesc, prometheus.GaugeValue, float64(p.ResourcesTotal))
		ch <- prometheus.MustNewConstMetric(startupObjectsDesc, prometheus.GaugeValue, float64(p.ObjectsListed))
	}
}

// InstrumentTransport counts every request kgc sends, by verb and code.
func (m *Metrics) InstrumentTransport(rt http.RoundTripper) http.RoundTripper {
	if m == nil {
		return rt
	}
	return roundTripperFunc(func(req *http.Request) (*http.Response, error) {
		resp, err := rt.RoundTrip(req)
		code := "error"
		if err == nil {
			code = strconv.Itoa(resp.StatusCode)
		}
		m.apiRequests.WithLabelValues(Verb(req), code).Inc()
		return resp, err
	})
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// Verb names a request the way the API server's audit log does: get, list,
// watch, create, update, patch, delete, deletecollection, or discovery.
func Verb(req *http.Request) string {
	segs := strings.Split(strings.Trim(req.URL.Path, "/"), "/")
	// Strip /api/<version> or /apis/<group>/<version>.
	switch {
	case len(segs) >= 2 && segs[0] == "api":
		segs = segs[2:]
	case len(segs) >= 3 && segs[0] == "apis":
		segs = segs[3:]
	default:
		return "discovery"
	}
	if len(segs) == 0 {
		return "discovery"
	}
	if len(segs) >= 3 && segs[0] == "namespaces" {
		segs = segs[2:]
	}
	collection := len(segs) == 1
	switch req.Method {
	case http.MethodGet:
		if req.URL.Query().Get("watch") == "true" || req.URL.Query().Get("watch") == "1" {
			return "watch"
		}
		if collection {
			return "list"
		}
		return "get"
	case http.MethodPost:
		return "create"
	case http.MethodPut:
		return "update"
	case http.MethodPatch:
		return "patch"
	case http.MethodDelete:
		if collection {
			return "deletecollection"
		}
		return "delete"
	}
	return strings.ToLower(req.Method)
}
