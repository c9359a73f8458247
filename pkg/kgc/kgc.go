// Package kgc starts the kgc garbage collector in-process: give it a
// *rest.Config and it does for that API server what kube-controller-manager's
// garbage collector does — cascading deletion driven by ownerReferences and
// the orphan / foregroundDeletion finalizers.
//
// It is meant for API servers that run without a controller manager and for
// tests against etcd + kube-apiserver alone:
//
//	gc, err := kgc.Start(ctx, cfg, kgc.Options{}) // returns once synced
//	if err != nil { … }
//	defer gc.Stop()
//
// or, to manage the goroutine yourself, New then Run and WaitForSync.
//
// A Collector keeps no global state: several may run in one process (for
// parallel tests), and a stopped Collector leaves no goroutines and no open
// connections behind.
package kgc

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcoordinationv1 "k8s.io/client-go/kubernetes/typed/coordination/v1"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	"github.com/kgc-dev/kgc/internal/apiops"
	"github.com/kgc-dev/kgc/internal/breaker"
	"github.com/kgc-dev/kgc/internal/budget"
	"github.com/kgc-dev/kgc/internal/collector"
	kgcdiscovery "github.com/kgc-dev/kgc/internal/discovery"
	"github.com/kgc-dev/kgc/internal/graph"
	"github.com/kgc-dev/kgc/internal/graphapi"
	"github.com/kgc-dev/kgc/internal/history"
	"github.com/kgc-dev/kgc/internal/inspect"
	"github.com/kgc-dev/kgc/internal/metrics"
	"github.com/kgc-dev/kgc/internal/namespaces"
	"github.com/kgc-dev/kgc/internal/orphanlog"
	"github.com/kgc-dev/kgc/internal/rules"
	"github.com/kgc-dev/kgc/internal/server"
	"github.com/kgc-dev/kgc/internal/shadow"
)

// RecommendedGCPercent is the Go garbage collector's target percentage
// (GOGC) that `kgc run` sets unless GOGC or --gc-percent says otherwise.
// Almost all of a collector's heap is its ownership graph, which lives as
// long as the objects it tracks, and Go's default (100) lets the heap grow
// to twice the live heap between collections. At 50 a process holding
// 100k objects needs a third less memory for a few more GC cycles, of
// which a collector, allocating little between events, has few. A
// program embedding kgc that tracks many objects may want the same:
// debug.SetGCPercent(kgc.RecommendedGCPercent). The library itself never
// changes process-wide settings.
const RecommendedGCPercent = 50

// Reporting components for the events kgc records (Options.EventComponent).
const (
	// UpstreamEventComponent is kube-controller-manager's garbage
	// collector's reporting component.
	UpstreamEventComponent = "garbage-collector-controller"
	// DefaultEventComponent is kube-controller-manager's collector's, so
	// that event filters, alerts and field selectors (source=,
	// reportingComponent=) written for that collector keep working: kgc
	// does its job, records the events it records for the same facts, and
	// only one collector acts on a cluster at a time (docs/semantics.md,
	// Events).
	DefaultEventComponent = UpstreamEventComponent
	// OwnEventComponent is kgc's own name, for those who want kgc's events
	// told apart from kube-controller-manager's collector's by component.
	OwnEventComponent = "kgc-garbage-collector"
)

// ValidateEventComponent reports whether component can name the reporting
// component of kgc's events: a Kubernetes qualified name (at most 63
// letters, digits, '-', '_' or '.', starting and ending with a letter or
// digit, optionally after a DNS subdomain prefix and '/'), which is what
// the events.k8s.io API requires of reportingController.
func ValidateEventComponent(component string) error {
	if component == "" {
		return errors.New("the event reporting component must not be empty")
	}
	if msgs := validation.IsQualifiedName(component); len(msgs) > 0 {
		return fmt.Errorf("the event reporting component %q is not a qualified name: %s", component, strings.Join(msgs, "; "))
	}
	return nil
}

// Options configures a Collector. The zero value is usable.
type Options struct {
	// Workers is the number of attempt-to-delete and attempt-to-orphan
	// workers each (kube-controller-manager's --concurrent-gc-syncs). Default 20.
	Workers int
	// MaxWritesInFlight bounds the API writes (DELETEs and patches) in
	// flight at once. Default twice Workers. Workers decide; a decided
	// write runs in one of these slots while its worker decides the next
	// item, so the workers' count does not bound the deletion rate. The
	// client budget (QPS, Burst) applies to every write as well.
	MaxWritesInFlight int
	// UnlistedHold bounds how long an owner's orphan or foregroundDeletion
	// finalizer waits for resources that could hold its dependents and have
	// never been listed (their LIST fails). Default 1 minute. Past it the
	// finalizer is removed; dependents found later are still orphaned, not
	// deleted, when the owner was deleted with Orphan. It also bounds how
	// long a resource's first list may deliver no page while dependents
	// wait for it to bring their owners; past it those owners are read
	// with GETs.
	UnlistedHold time.Duration
	// IgnoredResources are never monitored. nil means DefaultIgnoredResources();
	// an empty non-nil slice ignores nothing.
	IgnoredResources []schema.GroupResource
	// DiscoveryResyncPeriod is how often deletable resources are rediscovered. Default 30s.
	DiscoveryResyncPeriod time.Duration
	// QPS and Burst override the client budget of the rest.Config (and its
	// RateLimiter, if it has one), and are read as kube-controller-manager
	// reads --kube-api-qps and --kube-api-burst for its garbage collector
	// (docs/kcm-flags.md, "The request budget"): the collector's own
	// requests — owner lookups, deletions and patches — get twice QPS with
	// the same burst, awaited work first (work an owner's finalizer waits
	// for: an orphaning owner's patches, a Foreground owner's blocking
	// dependents); every other client — the monitors' lists and watches,
	// discovery, events, Leases — gets QPS and Burst, each its own bucket.
	// A negative QPS means no client-side rate limit, as in rest.Config
	// and kube-controller-manager; Burst is then unused. When both are left
	// zero, a config without a budget gets kube-controller-manager's
	// defaults (20 QPS, burst 30); the config's own budget is read alike,
	// and a RateLimiter it carries is shared by every client as it is.
	QPS   float32
	Burst int
	// Logger defaults to klog's.
	Logger logr.Logger
	// Registerer receives kgc's metrics (see docs/metrics.md). nil means no
	// metrics; nothing is ever registered globally. When it is also a
	// prometheus.Gatherer (a *prometheus.Registry is), Handler serves it at
	// /metrics.
	Registerer prometheus.Registerer
	// QueueMetrics, when set, is told about each of the collector's work
	// queues too, as client-go tells a workqueue.MetricsProvider, under
	// kube-controller-manager's names for them:
	// garbage_collector_attempt_to_delete,
	// garbage_collector_attempt_to_orphan, garbage_collector_graph_changes
	// (the queue between the monitors and the graph) and, with
	// NamespaceLifecycle, namespace. `kgc run` passes one that exports
	// kube-controller-manager's workqueue_* series (docs/metrics.md).
	// client-go's process-wide provider (workqueue.SetProvider) is used
	// only where client-go itself falls back to it: for the queues of a
	// Collector with neither Registerer nor QueueMetrics.
	QueueMetrics workqueue.MetricsProvider
	// Profiling serves /debug/pprof/ from Handler.
	Profiling bool
	// EventComponent is the reporting component (source.component and
	// reportingComponent) of the events kgc records. Default
	// DefaultEventComponent, kube-controller-manager's collector's;
	// OwnEventComponent is kgc's own name. See ValidateEventComponent.
	EventComponent string
	// NamespaceLifecycle turns on kgc's namespace lifecycle: a deleted
	// Namespace is emptied (Pods first, then every namespaced resource;
	// the objects' own finalizers are waited for), its status conditions
	// report progress, and its "kubernetes" finalizer is removed once
	// nothing is left, so that the Namespace goes — what
	// kube-controller-manager's namespace controller does, for API servers
	// without one (envtest). Off by default; see docs/semantics.md.
	NamespaceLifecycle bool
	// StuckThreshold is how long a deletion may take before the metrics
	// kgc_stuck_objects and kgc_oldest_stuck_deletion_seconds count it
	// (`kgc stuck --older-than`). Default 5 minutes.
	StuckThreshold time.Duration
	// WriteHistorySize is how many of its last writes (DELETEs and
	// patches) kgc keeps in memory, each with why it was made — which
	// owner was gone and how kgc knew, the policy, the preconditions, the
	// outcome — served by Handler at
	// /debug/controllers/garbage-collector-controller/history and read by
	// `kgc explain --server` for objects that no longer exist. 0 means
	// DefaultWriteHistorySize; negative keeps none. Every write is logged
	// at the default verbosity either way.
	WriteHistorySize int
	// Breaker turns on the circuit breaker for mass deletions (see
	// BreakerOptions); nil leaves it off, as upstream has none. `kgc run`
	// turns it on (DefaultBreakerOptions, with its Lease).
	Breaker *BreakerOptions
	// HoldRestored holds, instead of deleting, a dependent whose owner
	// reference names a UID kgc never observed while an object of the same
	// kind, namespace and name exists with another UID (the restore
	// signature); `kgc relink` rewrites such references on request. Off by
	// default in the library; on in `kgc run`.
	HoldRestored bool
	// DryRun is shadow mode: kgc decides everything as usual and makes no
	// write — no DELETE, no patch, no Event. Each write it would have made
	// is logged, counted (kgc_shadow_decisions_total), kept in the write
	// history with outcome "shadow", and compared with what the cluster's
	// own garbage collector then does (kgc_shadow_agreement_total; the
	// latest disagreements are served by Handler at
	// /debug/controllers/garbage-collector-controller/shadow). For running
	// beside kube-controller-manager's collector before replacing it (see
	// docs/operator/migration.md). Excludes NamespaceLifecycle.
	DryRun bool
	// ShadowWindow is how long, in shadow mode, a decision waits for its
	// effect and a change only a garbage collector would make waits for a
	// matching decision. Default DefaultShadowWindow.
	ShadowWindow time.Duration
	// OrphanJournal keeps kgc's memory of the owners it orphaned (deleted
	// with the Orphan policy, their orphan finalizer removed by kgc) on a
	// Lease, so that it survives a restart or a change of leader: a
	// dependent of such an owner that kgc sees only after the owner went
	// (its resource was unlisted past UnlistedHold, or its watch lagged)
	// is then orphaned, not deleted as dangling, by whichever kgc sees it
	// (docs/correctness.md). nil keeps that memory in the process only;
	// `kgc run` keeps it (OrphanJournalOptions).
	OrphanJournal *OrphanJournalOptions
	// PagedLists lists every resource by pages (LIST with limit and
	// continue), never as a streaming list. By default kgc lists each
	// resource as one streaming list (a WATCH with sendInitialEvents,
	// kube-apiserver's WatchList feature; several times faster than
	// paging at a million objects) and falls back to pages by itself where
	// the server refuses or ignores it (docs/scaling.md).
	PagedLists bool
	// BenchmarkShard, when set, makes the collector keep only one shard of
	// the namespaces: the namespaced objects whose namespace hashes
	// (FNV-1a, modulo Count) to Index, and every cluster-scoped object;
	// the monitors drop the other objects' events as they arrive. It is a
	// measurement aid — what one shard of docs/scaling.md's sharded design
	// would hold and spend, measured by kgc-bench --scale-shards — and no
	// way to run kgc: the design's cross-shard index of cluster-scoped
	// owners is not built, so a shard would release a cluster-scoped
	// owner's finalizers without seeing its dependents in other shards.
	// nil, the default, keeps every object. Like the sandbox's tools, it
	// is not covered by docs/support.md's compatibility promise.
	BenchmarkShard *BenchmarkShard
}

// BenchmarkShard is shard Index of Count (0 <= Index < Count): see
// Options.BenchmarkShard.
type BenchmarkShard struct {
	Index, Count int
}

// shard is s as the monitors take it; nil keeps every object.
func (s *BenchmarkShard) shard() *kgcdiscovery.Shard {
	if s == nil {
		return nil
	}
	return &kgcdiscovery.Shard{Index: s.Index, Count: s.Count}
}

// OrphanJournalOptions name the Lease that holds the journal of orphaned
// owners, in its annotation kgc.dev/orphaned-owners. It is created on the
// first write; kgc needs get, create and update on it (the verbs its leader
// election needs on its own Lease). Each orphan finalizer removal waits
// until its owner is written there; writes are shared by the removals
// waiting at the same time.
type OrphanJournalOptions struct {
	LeaseNamespace, LeaseName string
	// TTL: how long an owner is remembered once every resource is listed
	// and healthy (while one is not, every owner is kept). Default 10
	// minutes, far longer than watch delivery lags.
	TTL time.Duration
}

// DefaultShadowWindow is Options.ShadowWindow's default.
const DefaultShadowWindow = shadow.DefaultWindow

// DefaultWriteHistorySize is the number of writes a Collector remembers
// unless Options.WriteHistorySize says otherwise (a record is about 1 KB).
const DefaultWriteHistorySize = 10000

// DefaultStuckThreshold is Options.StuckThreshold's default.
const DefaultStuckThreshold = 5 * time.Minute

// DefaultIgnoredResources returns the resources kgc ignores by default: core
// and events.k8s.io events.
func DefaultIgnoredResources() []schema.GroupResource { return kgcdiscovery.DefaultIgnored() }

// Collector is a garbage collector for one API server.
type Collector struct {
	c          *collector.Collector
	events     typedcorev1.EventInterface
	recorder   *lazyRecorder
	component  string // the events' reporting component
	logger     logr.Logger
	httpClient *http.Client
	limiter    *budget.Limiter // the workers' client's; nil without one (budget.go)
	handler    http.Handler
	metrics    *metrics.Metrics

	// The breaker's Lease (breaker.go).
	breakerOpts  BreakerOptions
	coordination typedcoordinationv1.LeasesGetter
	bsync        *breaker.Sync // nil without a breaker on a Lease
	lease        atomic.Pointer[coordinationv1.Lease]
	bg           sync.WaitGroup

	started atomic.Bool
	done    chan struct{} // closed when Run returns
	stop    context.CancelFunc
}

// New validates opts and builds a Collector for the API server cfg points at.
// It does not contact the server.
func New(cfg *rest.Config, opts Options) (_ *Collector, err error) {
	if cfg == nil {
		return nil, errors.New("kgc: rest config is required")
	}
	component, err := eventComponent(opts.EventComponent)
	if err != nil {
		return nil, err
	}
	cfg, err = withBudget(cfg, opts.QPS, opts.Burst)
	if err != nil {
		return nil, err
	}
	cfg = rest.AddUserAgent(cfg, "kgc")
	opts, err = completeOptions(opts)
	if err != nil {
		return nil, err
	}
	// The metrics' sources read the collector and its mapper, built below.
	// A scrape of the caller's registry may come while New runs, or after
	// it failed and before it unregistered the metrics again: it then
	// finds nothing built and reports nothing.
	var built atomic.Pointer[builtParts]
	m, err := metrics.New(opts.Registerer, metricsSources(&built, opts.StuckThreshold))
	if err != nil {
		return nil, fmt.Errorf("kgc: registering metrics: %w", err)
	}
	defer func() {
		if err != nil {
			m.Unregister()
		}
	}()
	cl, err := newClients(cfg, m, opts.PagedLists)
	if err != nil {
		return nil, err
	}
	out := &Collector{
		events:       cl.cs.CoreV1().Events(""),
		metrics:      m,
		coordination: cl.cs.CoordinationV1(),
		recorder:     &lazyRecorder{},
		component:    component,
		logger:       opts.Logger,
		httpClient:   cl.httpClient,
		limiter:      cl.limiter,
		done:         make(chan struct{}),
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(cl.dc))
	if out.c, err = out.buildCollector(opts, cl, mapper); err != nil {
		return nil, err
	}
	built.Store(&builtParts{c: out.c, mapper: mapper, out: out})
	out.handler = out.buildHandler(opts)
	return out, nil
}

// eventComponent returns the reporting component of kgc's events:
// component, or DefaultEventComponent when it is empty.
func eventComponent(component string) (string, error) {
	if component == "" {
		component = DefaultEventComponent
	}
	if err := ValidateEventComponent(component); err != nil {
		return "", fmt.Errorf("kgc: EventComponent: %w", err)
	}
	return component, nil
}

// completeOptions validates opts (but for Breaker, which buildCollector
// validates, and what collector.New validates: Workers,
// MaxWritesInFlight, DiscoveryResyncPeriod) and fills in StuckThreshold's
// default.
func completeOptions(opts Options) (Options, error) {
	if opts.StuckThreshold < 0 {
		return opts, fmt.Errorf("kgc: StuckThreshold must not be negative, got %s", opts.StuckThreshold)
	}
	if opts.StuckThreshold == 0 {
		opts.StuckThreshold = DefaultStuckThreshold
	}
	if opts.DryRun && opts.NamespaceLifecycle {
		return opts, errors.New("kgc: DryRun excludes NamespaceLifecycle (shadow mode makes no write)")
	}
	if opts.DryRun && (opts.Breaker != nil || opts.HoldRestored) {
		// Holds are writes too (the breaker's trip on its Lease, its
		// Event), and the cluster's own collector, the one shadow mode
		// is compared with, has none.
		return opts, errors.New("kgc: DryRun excludes Breaker and HoldRestored (shadow mode makes no write, and compares kgc's decisions with a collector that holds nothing)")
	}
	if opts.ShadowWindow < 0 {
		return opts, fmt.Errorf("kgc: ShadowWindow must not be negative, got %s", opts.ShadowWindow)
	}
	if shard := opts.BenchmarkShard.shard(); shard != nil {
		if err := shard.Validate(); err != nil {
			return opts, fmt.Errorf("kgc: BenchmarkShard: %w", err)
		}
	}
	if j := opts.OrphanJournal; j != nil {
		if j.LeaseNamespace == "" || j.LeaseName == "" {
			return opts, fmt.Errorf("kgc: OrphanJournal needs a Lease namespace and name, got %q and %q", j.LeaseNamespace, j.LeaseName)
		}
		if j.TTL < 0 {
			return opts, fmt.Errorf("kgc: OrphanJournal.TTL must not be negative, got %s", j.TTL)
		}
	}
	return opts, nil
}

// builtParts are what the metrics' sources read once New has built them.
type builtParts struct {
	c      *collector.Collector
	mapper *restmapper.DeferredDiscoveryRESTMapper
	out    *Collector
}

// metricsSources reads the metrics from what built holds, and reports
// nothing while it holds nothing.
func metricsSources(built *atomic.Pointer[builtParts], stuckThreshold time.Duration) metrics.Sources {
	return metrics.Sources{
		Graph: func() metrics.GraphCounts {
			if p := built.Load(); p != nil {
				return metrics.GraphCounts(p.c.Graph().Counts())
			}
			return metrics.GraphCounts{}
		},
		Monitors: func() []metrics.MonitorState {
			p := built.Load()
			if p == nil {
				return nil
			}
			var out []metrics.MonitorState
			for gvr, st := range p.c.MonitorStatus() {
				out = append(out, metrics.MonitorState{Resource: gvrString(gvr), Synced: st.Synced, Failing: st.Failing()})
			}
			return out
		},
		DiscoveryFailures: func() []string {
			p := built.Load()
			if p == nil {
				return nil
			}
			var out []string
			for gv := range p.c.DiscoveryFailures() {
				out = append(out, gv.String())
			}
			return out
		},
		Writes: func() (int, int) {
			if p := built.Load(); p != nil {
				return p.c.WritesInFlight()
			}
			return 0, 0
		},
		Stuck: func() (map[string]int, float64, bool) {
			if p := built.Load(); p != nil {
				return stuckMetrics(source{c: p.c}, p.mapper, stuckThreshold)
			}
			return nil, 0, false
		},
		Breaker: func() metrics.BreakerState {
			if p := built.Load(); p != nil {
				return p.out.breakerState()
			}
			return metrics.BreakerState{}
		},
		Startup: func() metrics.StartupProgress {
			p := built.Load()
			if p == nil {
				return metrics.StartupProgress{}
			}
			listed, total, objects := p.c.StartupProgress()
			return metrics.StartupProgress{ResourcesListed: listed, ResourcesTotal: total, ObjectsListed: objects}
		},
	}
}

// clients are the collector's API clients, all on one HTTP client.
type clients struct {
	httpClient *http.Client
	md, workMD metadata.Interface
	limiter    *budget.Limiter // the workers' client's; nil without one
	pages      kgcdiscovery.PageLister
	dc         *discovery.DiscoveryClient
	cs         *kubernetes.Clientset
}

// newClients builds the collector's clients for cfg, their requests
// measured by m; pagedLists lists by pages only (Options.PagedLists).
func newClients(cfg *rest.Config, m *metrics.Metrics, pagedLists bool) (clients, error) {
	cfg.Wrap(m.InstrumentTransport)
	// kgc lists every deletable resource, deprecated ones included, on
	// purpose: the apiserver's deprecation warnings are noise here.
	cfg.WarningHandler = rest.NoWarnings{}
	// One HTTP client for all of kgc's clients, so that Run can close its
	// idle connections when it returns.
	httpClient, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return clients{}, fmt.Errorf("kgc: http client: %w", err)
	}
	md, err := metadata.NewForConfigAndClient(cfg, httpClient)
	if err != nil {
		return clients{}, fmt.Errorf("kgc: metadata client: %w", err)
	}
	workCfg, limiter := workerConfig(cfg)
	workMD, err := metadata.NewForConfigAndClient(workCfg, httpClient)
	if err != nil {
		return clients{}, fmt.Errorf("kgc: workers' metadata client: %w", err)
	}
	var pages kgcdiscovery.PageLister
	pages, err = kgcdiscovery.NewRESTPageLister(cfg, httpClient)
	if err != nil {
		return clients{}, fmt.Errorf("kgc: list client: %w", err)
	}
	if pagedLists {
		pages = kgcdiscovery.PagesOnly(pages)
	}
	dc, err := discovery.NewDiscoveryClientForConfigAndClient(cfg, httpClient)
	if err != nil {
		return clients{}, fmt.Errorf("kgc: discovery client: %w", err)
	}
	cs, err := kubernetes.NewForConfigAndClient(cfg, httpClient)
	if err != nil {
		return clients{}, fmt.Errorf("kgc: clientset: %w", err)
	}
	return clients{httpClient: httpClient, md: md, workMD: workMD, limiter: limiter, pages: pages, dc: dc, cs: cs}, nil
}

// buildCollector builds the collector proper (package collector) from
// opts, on cl's clients, and c's breaker (c.breakerOpts, c.bsync) when
// opts asks for one.
func (c *Collector) buildCollector(opts Options, cl clients, mapper *restmapper.DeferredDiscoveryRESTMapper) (*collector.Collector, error) {
	ignored := opts.IgnoredResources
	if ignored == nil {
		ignored = DefaultIgnoredResources()
	}
	var nsAPI namespaces.API
	if opts.NamespaceLifecycle {
		nsAPI = &apiops.NamespaceOps{Namespaces: cl.cs.CoreV1().Namespaces(), Metadata: cl.md, Discovery: cl.dc}
	}
	historySize := opts.WriteHistorySize
	if historySize == 0 {
		historySize = DefaultWriteHistorySize
	}
	var brk *breaker.Breaker
	if opts.Breaker != nil {
		if err := opts.Breaker.Validate(); err != nil {
			return nil, fmt.Errorf("kgc: Breaker: %w", err)
		}
		brk = breaker.New(opts.Breaker.config())
		c.breakerOpts = *opts.Breaker
		c.bsync = c.newBreakerSync(brk)
	}
	// Shadow mode records no Events: they are writes, and the cluster's
	// own collector records its own.
	var recorder collector.Recorder = c.recorder
	if opts.DryRun {
		recorder = nil
	}
	var orphanStore orphanlog.Store
	var orphanTTL time.Duration
	if j := opts.OrphanJournal; j != nil {
		orphanStore = &orphanlog.LeaseStore{Client: c.coordination, Namespace: j.LeaseNamespace, Name: j.LeaseName}
		orphanTTL = j.TTL
	}
	cc, err := collector.New(collector.Config{
		OrphanStore:       orphanStore,
		OrphanTTL:         orphanTTL,
		Breaker:           brk,
		OnTrip:            c.onTrip,
		LoadBreaker:       c.loadBreaker(),
		HoldRestored:      opts.HoldRestored,
		DryRun:            opts.DryRun,
		Shadow:            shadow.Config{Window: opts.ShadowWindow},
		History:           history.NewRing(historySize),
		Namespaces:        nsAPI,
		Metadata:          cl.md,
		WorkerMetadata:    cl.workMD,
		Pages:             cl.pages,
		Discovery:         cl.dc,
		Mapper:            mapper,
		Recorder:          recorder,
		Workers:           opts.Workers,
		MaxWritesInFlight: opts.MaxWritesInFlight,
		UnlistedHold:      opts.UnlistedHold,
		Ignored:           ignored,
		ResyncPeriod:      opts.DiscoveryResyncPeriod,
		Metrics:           c.metrics,
		QueueMetrics:      opts.QueueMetrics,
		Shard:             opts.BenchmarkShard.shard(),
	})
	if err != nil {
		return nil, fmt.Errorf("kgc: %w", err)
	}
	return cc, nil
}

// buildHandler builds the collector's HTTP handler (Handler).
func (c *Collector) buildHandler(opts Options) http.Handler {
	hopts := server.Options{Profiling: opts.Profiling}
	if g, ok := opts.Registerer.(prometheus.Gatherer); ok {
		hopts.Metrics = promhttp.HandlerFor(g, promhttp.HandlerOpts{})
	}
	return server.BuildMux(c.source(opts.HoldRestored), hopts)
}

// Start builds a Collector, runs it in the background and returns once its
// monitors have synced, from which point cascading deletion works. ctx
// bounds the wait for sync and, when cancelled, stops the collector. Stop
// stops it and waits for it to finish.
func Start(ctx context.Context, cfg *rest.Config, opts Options) (*Collector, error) {
	c, err := New(cfg, opts)
	if err != nil {
		return nil, err
	}
	runCtx, cancel := context.WithCancel(ctx)
	c.stop = cancel
	go func() { _ = c.Run(runCtx) }()
	if err := c.WaitForSync(ctx); err != nil {
		c.Stop()
		return nil, fmt.Errorf("kgc: waiting for sync: %w", err)
	}
	return c, nil
}

// Stop stops a Collector started with Start and waits until everything it
// started has ended. It is safe to call more than once. (A Collector run
// with Run is stopped by cancelling Run's context instead.)
func (c *Collector) Stop() {
	if c.stop == nil {
		return
	}
	c.stop()
	if c.started.Load() {
		<-c.done
	}
}

// ErrAlreadyStarted is returned by Run on a Collector that already ran.
var ErrAlreadyStarted = errors.New("kgc: collector already started")

// Run runs the collector until ctx is done. It returns once everything it
// started has stopped. A Collector runs once; a second Run returns
// ErrAlreadyStarted.
func (c *Collector) Run(ctx context.Context) error {
	if !c.started.CompareAndSwap(false, true) {
		return ErrAlreadyStarted
	}
	defer close(c.done)
	defer c.httpClient.CloseIdleConnections()
	if c.limiter != nil {
		defer c.limiter.Stop()
	}
	if c.logger.GetSink() != nil {
		ctx = klog.NewContext(ctx, c.logger)
	}
	// The broadcaster starts goroutines, so it lives exactly as long as Run.
	broadcaster := record.NewBroadcaster(record.WithContext(ctx))
	broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: c.events})
	defer broadcaster.Shutdown()
	c.recorder.set(broadcaster.NewRecorder(scheme.Scheme, corev1.EventSource{Component: c.component}))
	defer c.recorder.set(nil)
	// The breaker's trips recorded by an earlier kgc apply before the
	// first decision.
	defer c.bg.Wait()
	// The breaker's Lease is kept in step until the collector has
	// returned, not merely until ctx ends: the workers drain after that
	// (their last decisions may trip the breaker), and only then does
	// the last record (Sync.recordAtStop) begin.
	bctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	defer cancel() // before the Wait: the collector may return on its own
	c.runBreaker(bctx)
	return c.c.Run(ctx)
}

// ErrStopped is returned by WaitForSync when the collector stopped first.
var ErrStopped = errors.New("kgc: collector stopped before its monitors synced")

// WaitForSync blocks until the monitors have synced and workers run, the
// collector has stopped (ErrStopped), or ctx is done.
func (c *Collector) WaitForSync(ctx context.Context) error {
	return wait.PollUntilContextCancel(ctx, 20*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		if c.c.Synced() {
			return true, nil
		}
		select {
		case <-c.done:
			if err := ctx.Err(); err != nil {
				return false, err // the caller's own cancellation stopped it
			}
			return false, ErrStopped
		default:
			return false, nil
		}
	})
}

// Handler serves /healthz, /livez, /readyz (?verbose lists every monitor),
// the debug graph (/debug/controllers/garbage-collector-controller/graph,
// DOT or ?format=json, filtered by ?namespace=, ?uid= or ?kind=&name=), the
// record of kgc's writes (/debug/controllers/garbage-collector-controller/history,
// JSON, filtered by ?uid=, ?namespace=, ?name=, ?limit=), in shadow mode
// (Options.DryRun) the comparison with the cluster's own collector
// (/debug/controllers/garbage-collector-controller/shadow, JSON, the same
// filters), the web view of the ownership graph (/ui), and, as Options ask, /metrics and /debug/pprof/.
//
// The handler authenticates no one, and its debug views name every object
// in the cluster: serve it on loopback, or behind authentication and
// authorization of your own (`kgc run` puts it behind k8s.io/apiserver's
// delegated authentication and authorization, as kube-controller-manager
// serves its endpoints).
func (c *Collector) Handler() http.Handler { return c.handler }

type source struct {
	c *collector.Collector
	// holdRestored and lease: for the holds' report (breaker.go).
	holdRestored bool
	lease        string
}

func (c *Collector) source(holdRestored bool) source {
	s := source{c: c.c, holdRestored: holdRestored}
	if c.breakerOpts.LeaseName != "" {
		s.lease = c.breakerOpts.LeaseNamespace + "/" + c.breakerOpts.LeaseName
	}
	return s
}

// Ready: kgc is ready once its workers run, which is when every monitor has
// synced or is failing. A failing resource (broken conversion webhook,
// unavailable APIService) never blocks readiness: it only affects its own
// objects, and Checks shows it.
func (s source) Ready() error {
	if !s.c.Synced() {
		return errors.New("monitors have not synced")
	}
	return nil
}

// Checks lists each monitor; a monitor that has not synced is shown but does
// not make kgc unready (it only affects its own resource).
func (s source) Checks() []server.Check {
	status := s.c.MonitorStatus()
	out := make([]server.Check, 0, len(status))
	for gvr, st := range status {
		ch := server.Check{Name: "monitor:" + gvrString(gvr), Informational: true}
		switch {
		case st.Failing():
			ch.Err = fmt.Errorf("failing: %w", st.LastError)
		case !st.Synced:
			ch.Err = errors.New("not synced yet")
		}
		out = append(out, ch)
	}
	// A group version discovery cannot read (an unavailable APIService) is
	// shown too; like a failing monitor it only affects its own resources.
	for gv, err := range s.c.DiscoveryFailures() {
		out = append(out, server.Check{Name: "discovery:" + gv.String(), Err: err, Informational: true})
	}
	// Finalizers held back for unlisted resources, and those removed anyway
	// once the hold passed: informational, like the monitors they wait for.
	held, released := s.c.Held()
	for _, h := range held {
		out = append(out, server.Check{Name: "finalizer-held:" + h.Owner.String(), Informational: true,
			Err: fmt.Errorf("%s finalizer waits since %s for resources never listed: %s", h.Finalizer, h.Since.UTC().Format(time.RFC3339), strings.Join(h.Unlisted, ", "))})
	}
	for _, h := range released {
		out = append(out, server.Check{Name: "finalizer-released-unlisted:" + h.Owner.String(), Informational: true,
			Err: fmt.Errorf("%s finalizer removed at %s although %s had never been listed", h.Finalizer, h.Released.UTC().Format(time.RFC3339), strings.Join(h.Unlisted, ", "))})
	}
	out = append(out, s.breakerChecks()...)
	slices.SortFunc(out, func(a, b server.Check) int { return strings.Compare(a.Name, b.Name) })
	return out
}

func gvrString(gvr schema.GroupVersionResource) string {
	if gvr.Group == "" {
		return gvr.Version + "/" + gvr.Resource
	}
	return gvr.Group + "/" + gvr.Version + "/" + gvr.Resource
}

// History is the record of writes the handler serves.
func (s source) History() *history.Ring { return s.c.History() }

// Shadow is shadow mode's comparison (nil unless Options.DryRun).
func (s source) Shadow() *shadow.Tracker { return s.c.Shadow() }

// Graph is the graph the handler's views read (in bounded batches).
func (s source) Graph() *graph.Graph { return s.c.Graph() }

// Unlisted: the monitored resources never listed completely, with their
// monitors' last errors (the graph endpoint serves them; the stuck report
// names them as the cause of the finalizers kgc holds).
func (s source) Unlisted() []graphapi.Resource {
	status := s.c.MonitorStatus()
	var out []graphapi.Resource
	for _, r := range s.c.Unlisted() {
		u := graphapi.Resource{Resource: gvrString(r.GVR), Namespaced: r.Namespaced}
		if st, ok := status[r.GVR]; ok && st.LastError != nil {
			u.Error = st.LastError.Error()
		}
		out = append(out, u)
	}
	slices.SortFunc(out, func(a, b graphapi.Resource) int { return strings.Compare(a.Resource, b.Resource) })
	return out
}

// stuckScrapeTimeout bounds one computation of the stuck metrics.
const stuckScrapeTimeout = 10 * time.Second

// stuckMetrics computes the stuck metrics from the graph: the deleting
// nodes (an index, not a walk of the graph) and the components of those
// older than threshold, classified as `kgc stuck --server` classifies them.
func stuckMetrics(src source, mapper meta.RESTMapper, threshold time.Duration) (map[string]int, float64, bool) {
	if src.Ready() != nil {
		return nil, 0, false
	}
	ctx, cancel := context.WithTimeout(context.Background(), stuckScrapeTimeout)
	defer cancel()
	r, err := server.StuckReport(ctx, src, mapper, rules.Policy{}, threshold)
	if err != nil {
		return nil, 0, false
	}
	by := make(map[string]int, len(inspect.StuckReasons))
	for _, reason := range inspect.StuckReasons {
		by[reason] = 0
	}
	for _, g := range r.Groups {
		by[g.Reason] = len(g.Objects)
	}
	return by, float64(r.OldestSeconds), true
}

// lazyRecorder forwards to the recorder of the running Run, if any.
type lazyRecorder struct {
	r atomic.Pointer[record.EventRecorder]
}

func (l *lazyRecorder) set(r record.EventRecorder) {
	if r == nil {
		l.r.Store(nil)
		return
	}
	l.r.Store(&r)
}

func (l *lazyRecorder) Warning(obj rules.Identity, reason, message string) {
	r := l.r.Load()
	if r == nil {
		return
	}
	(*r).Event(&corev1.ObjectReference{
		APIVersion: obj.APIVersion, Kind: obj.Kind,
		Namespace: obj.Namespace, Name: obj.Name, UID: obj.UID,
	}, corev1.EventTypeWarning, reason, message)
}
