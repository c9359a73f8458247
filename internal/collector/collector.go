package collector

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/kgc-dev/kgc/internal/breaker"
	"github.com/kgc-dev/kgc/internal/builder"
	"github.com/kgc-dev/kgc/internal/discovery"
	"github.com/kgc-dev/kgc/internal/graph"
	"github.com/kgc-dev/kgc/internal/history"
	"github.com/kgc-dev/kgc/internal/metrics"
	"github.com/kgc-dev/kgc/internal/namespaces"
	"github.com/kgc-dev/kgc/internal/orphanlog"
	"github.com/kgc-dev/kgc/internal/rules"
	"github.com/kgc-dev/kgc/internal/shadow"
	"github.com/kgc-dev/kgc/internal/workers"
)

// ResettableRESTMapper is a RESTMapper whose discovery cache can be dropped.
type ResettableRESTMapper = builder.ResettableRESTMapper

// Recorder records events on objects.
type Recorder = workers.Recorder

// Config is what a Collector needs. Everything is required unless noted.
type Config struct {
	Metadata metadata.Interface
	// WorkerMetadata, optional, is the workers' client: the owner lookups
	// and every write (kube-controller-manager's collector's metadata
	// client, which gets its own request budget). nil: Metadata.
	WorkerMetadata metadata.Interface
	// Pages, optional, reads the monitors' list pages raw and decodes
	// them without per-object garbage (discovery.RESTPageLister); nil lists
	// with Metadata.
	Pages     discovery.PageLister
	Discovery discovery.Discovery
	Mapper    ResettableRESTMapper
	// Recorder is optional.
	Recorder Recorder
	// Workers per queue; default 20.
	Workers int
	// MaxWritesInFlight bounds the API writes (DELETEs and patches) kgc
	// has in flight at once, across both queues; default twice Workers.
	// A worker hands a decided write to this pool and goes on to decide
	// its next item (package workers).
	MaxWritesInFlight int
	// Ignored resources are never monitored.
	Ignored []schema.GroupResource
	// ResyncPeriod between rediscoveries; default 30s.
	ResyncPeriod time.Duration
	// SyncTimeout bounds the wait for the initial monitor sync before the
	// workers start anyway; default 60s. Workers normally start sooner: as
	// soon as every monitor has synced or is failing.
	SyncTimeout time.Duration
	// UnlistedHold bounds how long an owner's finalizer waits for the
	// resources that have not been listed yet (package workers);
	// default 1m. Past it the finalizer is removed anyway, and the owner is
	// remembered so that dependents found later are handled as its policy
	// asked (orphaned, not deleted, for Orphan).
	UnlistedHold time.Duration
	// DrainTimeout bounds how long, once Run's context is done, in-flight
	// items may finish their API calls; default 5s (below the default gap
	// between a leader's renew deadline and its lease duration).
	DrainTimeout time.Duration
	// Rules is the configurable part of the garbage-collection rules
	// (keep-rules); the zero value is kube-controller-manager's rules.
	Rules rules.Policy
	// Metrics is optional; nil records nothing.
	Metrics *metrics.Metrics
	// QueueMetrics, optional, is told about every queue too (the workers',
	// the graph builder's, the namespace lifecycle's), besides Metrics:
	// kube-controller-manager's workqueue_* series under its queue names.
	QueueMetrics workqueue.MetricsProvider
	// History keeps the record of every write the workers make (package
	// history); nil keeps none (every write is still logged).
	History *history.Ring
	// Namespaces, when set, turns on the namespace lifecycle (package
	// namespaces) with these API calls: deleting namespaces are emptied
	// and finalized, as kube-controller-manager's namespace controller
	// does. nil (the default) leaves namespaces alone.
	Namespaces namespaces.API
	// Breaker, when set, may hold deletions resting on dangling owners
	// (package breaker; workers/hold.go), and is told the evidence of
	// faults the graph finds (breaker.go); OnTrip is told once per trip.
	// LoadBreaker, when set, reads the trips an earlier kgc recorded: no
	// worker starts until it succeeds (retried with backoff, like the
	// journal of orphaned owners).
	Breaker     *breaker.Breaker
	OnTrip      func(breaker.Trip)
	LoadBreaker func(context.Context) error
	// HoldRestored holds dependents with the restore signature
	// (workers/hold.go).
	HoldRestored bool
	// OrphanStore keeps the journal of owners kgc orphaned across restarts
	// (package orphanlog); nil keeps it in memory only. OrphanTTL bounds
	// how long an entry is kept while every resource is listed and healthy
	// (orphanlog.DefaultTTL when 0).
	OrphanStore orphanlog.Store
	OrphanTTL   time.Duration
	// Clock drives the queues' backoff, the write log, foreground re-checks,
	// periodic rediscovery and the monitors' backoff; nil is the real clock
	// (the simulator, internal/sim, injects its fake one).
	Clock clock.WithTicker
	// DryRun is shadow mode: decide everything, write nothing, and compare
	// the decisions with what the cluster's own collector does (package
	// shadow; shadow.go). Namespaces must be nil.
	DryRun bool
	// Shadow configures the comparison (its Metrics and Clock default to
	// the collector's, its Judge is the workers').
	Shadow shadow.Config
	// Shard, optional, makes the monitors keep only one shard of the
	// namespaces (discovery.Shard: a measurement aid for kgc-bench, no way
	// to run kgc); nil keeps every object.
	Shard *discovery.Shard
}

// Collector is kgc's garbage collector: a graph builder (package builder)
// that keeps the ownership graph, and workers (package workers) that decide
// from it and write. Create it with New and start it with Run.
type Collector struct {
	cfg     Config
	builder *builder.Builder
	workers *workers.Workers
	// namespaces is the namespace lifecycle, nil when off.
	namespaces *namespaces.Controller
	synced     atomic.Bool
	// started is when Run started (the start-up progress log).
	started time.Time
	// startupLogEvery is how often the start-up progress is logged
	// (startupProgressInterval; tests shorten it).
	startupLogEvery time.Duration
	// shadow is shadow mode's comparison, nil unless DryRun (shadow.go).
	shadow *shadowMode
	// journal is the durable memory of the owners kgc orphaned.
	journal *orphanlog.Journal
	// logger and runCtx are Run's, set before anything that uses them
	// starts; bg counts the goroutines they start (Run waits for them).
	logger klog.Logger
	runCtx context.Context
	bg     sync.WaitGroup
}

// New builds a Collector from cfg.
func New(cfg Config) (*Collector, error) {
	var errs []error
	if cfg.Metadata == nil {
		errs = append(errs, errors.New("metadata client is required"))
	}
	if cfg.Discovery == nil {
		errs = append(errs, errors.New("discovery client is required"))
	}
	if cfg.Mapper == nil {
		errs = append(errs, errors.New("REST mapper is required"))
	}
	if cfg.Workers < 0 {
		errs = append(errs, fmt.Errorf("workers must not be negative, got %d", cfg.Workers))
	}
	if cfg.MaxWritesInFlight < 0 {
		errs = append(errs, fmt.Errorf("max writes in flight must not be negative, got %d", cfg.MaxWritesInFlight))
	}
	if cfg.ResyncPeriod < 0 {
		errs = append(errs, fmt.Errorf("discovery resync period must not be negative, got %s", cfg.ResyncPeriod))
	}
	if cfg.Shard != nil {
		if err := cfg.Shard.Validate(); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if cfg.Workers == 0 {
		cfg.Workers = 20
	}
	if cfg.MaxWritesInFlight == 0 {
		cfg.MaxWritesInFlight = 2 * cfg.Workers
	}
	if cfg.ResyncPeriod == 0 {
		cfg.ResyncPeriod = 30 * time.Second
	}
	if cfg.SyncTimeout == 0 {
		cfg.SyncTimeout = 60 * time.Second
	}
	if cfg.UnlistedHold == 0 {
		cfg.UnlistedHold = time.Minute
	}
	if cfg.DrainTimeout == 0 {
		cfg.DrainTimeout = 5 * time.Second
	}
	if cfg.DryRun && cfg.Namespaces != nil {
		return nil, errors.New("shadow mode (dry run) does not run the namespace lifecycle: it would write")
	}
	c := &Collector{cfg: cfg, startupLogEvery: startupProgressInterval}
	if cfg.DryRun {
		c.shadow = &shadowMode{c: c}
	}
	if cfg.Namespaces != nil {
		nc, err := namespaces.New(namespaces.Config{API: cfg.Namespaces, Observed: c.observedIn, Metrics: cfg.Metrics, QueueMetrics: cfg.QueueMetrics, Clock: cfg.Clock, History: cfg.History})
		if err != nil {
			return nil, err
		}
		c.namespaces = nc
	}
	g := graph.New()
	// The builder tells the workers what each event changed; the workers
	// ask the builder which resources are not listed yet and where a kind
	// is served. Data flows one way: monitors → builder → graph → workers
	// → API server.
	bcfg := builder.Config{
		Metadata: cfg.Metadata, Pages: cfg.Pages, Discovery: cfg.Discovery, Mapper: cfg.Mapper,
		Ignored: cfg.Ignored, ResyncPeriod: cfg.ResyncPeriod, Metrics: cfg.Metrics, QueueMetrics: cfg.QueueMetrics, Clock: cfg.Clock,
		Shard: cfg.Shard,
	}
	if c.shadow != nil {
		bcfg.BeforeApply = c.shadow.before
	}
	c.builder = builder.New(bcfg, g, builder.SinkFunc(func(ev graph.Event, eff graph.Effects) {
		// The evidence of a fault trips the breaker before the workers
		// are told what the event changed: the dependents it re-queues
		// are then held.
		c.judge(c.logger, eff)
		c.workers.Observed(ev, eff)
		if c.namespaces != nil {
			c.namespaces.Observed(ev, eff)
		}
		if c.shadow != nil {
			c.shadow.after(ev, eff)
		}
	}))
	workerMetadata := cfg.WorkerMetadata
	if workerMetadata == nil {
		workerMetadata = cfg.Metadata
	}
	wcfg := workers.Config{
		Metadata: workerMetadata, Mapper: cfg.Mapper, Recorder: cfg.Recorder,
		Workers: cfg.Workers, MaxWritesInFlight: cfg.MaxWritesInFlight, UnlistedHold: cfg.UnlistedHold,
		Unlisted: c.builder.Unlisted, Listing: c.builder.Listing, Unverified: c.builder.Unverified, HistoryLost: c.builder.HistoryLost, Resource: c.builder.Resource,
		Rules: cfg.Rules, Metrics: cfg.Metrics, QueueMetrics: cfg.QueueMetrics, History: cfg.History, Clock: cfg.Clock,
		Breaker: cfg.Breaker, OnTrip: cfg.OnTrip, HoldRestored: cfg.HoldRestored,
	}
	// An entry of the journal is kept past its TTL while a resource that
	// could hold a dependent of its owner has not been seen whole: never
	// listed, or failing (its watch broken and its relist failing).
	c.journal = orphanlog.New(orphanlog.Config{Store: cfg.OrphanStore, TTL: cfg.OrphanTTL, Clock: cfg.Clock, Keep: c.someResourceUnseen,
		OnWrite: cfg.Metrics.JournalWrite, ReadOnly: cfg.DryRun})
	wcfg.Journal = c.journal
	if c.shadow != nil {
		c.shadow.init(cfg.Shadow, &wcfg)
	}
	c.workers = workers.New(wcfg, g)
	return c, nil
}

// someResourceUnseen reports whether a monitored resource is not listed
// yet or failing, or a group version cannot be discovered (an APIService
// whose backend is down: its resources have no monitor, and their objects
// have never been seen).
func (c *Collector) someResourceUnseen() bool {
	if len(c.builder.DiscoveryFailures()) > 0 {
		return true
	}
	for _, st := range c.builder.MonitorStatus() {
		if st.State() != discovery.StateSynced {
			return true
		}
	}
	return false
}

// Journal returns the memory of the owners kgc orphaned.
func (c *Collector) Journal() *orphanlog.Journal { return c.journal }

// Graph returns the collector's ownership graph (read-only use).
func (c *Collector) Graph() *graph.Graph { return c.builder.Graph() }

// History returns the record of the collector's writes (nil when it
// keeps none).
func (c *Collector) History() *history.Ring { return c.cfg.History }

// Breaker returns the deletion breaker (nil when off).
func (c *Collector) Breaker() *breaker.Breaker { return c.cfg.Breaker }

// RestoreHolds returns the objects held for the restore signature.
func (c *Collector) RestoreHolds() []workers.RestoreHold { return c.workers.RestoreHolds() }

// RestoreHeld returns the restore hold on uid, if it is held.
func (c *Collector) RestoreHeld(uid types.UID) (workers.RestoreHold, bool) {
	return c.workers.RestoreHeld(uid)
}

// ResumeHeld queues the objects a resumed breaker released (or, when it
// held more than it remembered, every unfinished item).
func (c *Collector) ResumeHeld(ctx context.Context, release []types.UID, overflowed bool) {
	c.workers.Resume(ctx, release, overflowed)
}

// Synced reports whether the initial monitor sync finished and workers run.
func (c *Collector) Synced() bool { return c.synced.Load() }

// StartupProgress reports the monitored resources whose first complete
// list the graph holds, out of all monitored ones, and the objects those
// first lists delivered so far.
func (c *Collector) StartupProgress() (listed, total int, objects int64) {
	return c.builder.Progress()
}

// WritesInFlight reports the API writes in flight and their limit
// (MaxWritesInFlight).
func (c *Collector) WritesInFlight() (n, limit int) { return c.workers.WritesInFlight() }

// MonitorStatus reports each monitored resource's state.
func (c *Collector) MonitorStatus() map[schema.GroupVersionResource]discovery.Status {
	return c.builder.MonitorStatus()
}

// DiscoveryFailures returns the group versions the last discovery could not
// read (an aggregated API whose backend is unavailable), with their errors.
// Their resources, if monitored before, keep their monitors.
func (c *Collector) DiscoveryFailures() map[schema.GroupVersion]error {
	return c.builder.DiscoveryFailures()
}

// MonitorHandlers returns the number of running monitors and of event
// handlers they hold; a handler leak shows as more handlers than monitors
// (a test hook for resources that come and go).
func (c *Collector) MonitorHandlers() (monitors, handlers int) {
	return c.builder.MonitorHandlers()
}

// Unlisted returns the monitored resources whose monitor has not
// delivered a complete list yet (discovery.Monitors.Unlisted).
func (c *Collector) Unlisted() []discovery.Resource { return c.builder.Unlisted() }

// Held returns the owners whose finalizer is held back because resources
// that could hold their dependents are not listed yet, and the last ones
// released anyway once UnlistedHold passed.
func (c *Collector) Held() (held, released []workers.HeldFinalizer) { return c.workers.Held() }

// HeldFinalizer is one owner's finalizer held for unlisted resources.
type HeldFinalizer = workers.HeldFinalizer

// Idle reports whether the collector has nothing to do right now: its
// workers run, every event is applied, no rediscovery round runs, and no
// queue item is ready or being processed (which covers writes in flight).
// Items waiting out a rate-limited requeue are not counted: they wait on
// Config.Clock, whose pending timers a test advances. A test hook (package
// sim): the answer may be stale as soon as it is returned unless whatever
// feeds the collector (its API server) is held still.
func (c *Collector) Idle() bool { return c.workers.Idle() && c.builder.Idle() }

// Run runs the collector until ctx is done, then stops every goroutine it
// started before returning.
func (c *Collector) Run(ctx context.Context) error {
	logger := klog.FromContext(ctx).WithName("garbagecollector")
	ctx = klog.NewContext(ctx, logger)
	c.logger, c.runCtx = logger, ctx
	c.started = time.Now()
	if c.shadow != nil {
		c.shadow.ctx = ctx
		defer c.shadow.tracker.LogSummary(ctx)
	}
	// Workers' API calls run on workCtx, which outlives ctx by at most
	// DrainTimeout: at shutdown no new item starts, and the items in flight
	// finish their calls instead of being cut off halfway.
	workCtx, cancelWork := context.WithCancel(context.WithoutCancel(ctx))
	var wg sync.WaitGroup
	// The journal's writer stops once the workers' writes have ended
	// (they may wait for their journal entries).
	journalCtx, stopJournal := context.WithCancel(workCtx)
	defer func() {
		drain := time.AfterFunc(c.cfg.DrainTimeout, cancelWork)
		c.builder.Stop()
		c.workers.Stop()
		stopJournal()
		wg.Wait()
		c.bg.Wait()
		drain.Stop()
		cancelWork()
	}()

	c.startBuilder(ctx, &wg)
	if !c.discoverFirst(ctx) {
		return nil // ctx ended before discovery worked: a clean stop
	}
	c.startStartupReport(ctx, &wg)
	c.startRediscovery(ctx, &wg)
	if !c.waitForMonitors(ctx) {
		return nil
	}
	if !c.loadBeforeDecisions(ctx) {
		return nil // a clean stop
	}
	c.startWorkers(ctx, workCtx, journalCtx, &wg)

	<-ctx.Done()
	logger.Info("Stopping")
	return nil
}

// startBuilder starts the graph builder, and in shadow mode the
// comparison's tracker, on wg until ctx is done.
func (c *Collector) startBuilder(ctx context.Context, wg *sync.WaitGroup) {
	wg.Add(1)
	go func() {
		defer wg.Done()
		c.builder.Run(ctx)
	}()
	if c.shadow != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.shadow.tracker.Run(ctx)
		}()
	}
}

// discoverFirst runs the initial discovery. It returns false if ctx ended
// first.
func (c *Collector) discoverFirst(ctx context.Context) bool {
	logger := klog.FromContext(ctx)
	// Initial discovery: retry until it works, at least partially.
	err := wait.PollUntilContextCancel(ctx, time.Second, true, func(ctx context.Context) (bool, error) {
		if _, _, err := c.builder.Resync(ctx); err != nil {
			logger.Error(err, "Initial discovery failed, retrying")
			return c.builder.Monitors() > 0, nil
		}
		return true, nil
	})
	return err == nil
}

// startStartupReport starts, on wg, the log of the monitors' first lists
// (reportStartup).
func (c *Collector) startStartupReport(ctx context.Context, wg *sync.WaitGroup) {
	// Until every resource is listed (or failing), say how far the lists
	// have come: at millions of objects that takes a while.
	wg.Add(1)
	go func() {
		defer wg.Done()
		c.reportStartup(ctx, c.startupLogEvery)
	}()
}

// startRediscovery starts, on wg, the periodic and event-driven
// rediscovery (builder.RunDiscovery).
func (c *Collector) startRediscovery(ctx context.Context, wg *sync.WaitGroup) {
	// Discovery keeps running from now on: CRDs and APIServices that change
	// while the monitors sync get monitors too, without waiting. Each
	// periodic round re-checks the graph's unfinished work.
	wg.Add(1)
	go func() {
		defer wg.Done()
		c.builder.RunDiscovery(ctx, func(ctx context.Context) {
			if c.synced.Load() {
				c.workers.Recheck(ctx)
			}
		})
	}()
}

// waitForMonitors waits until every monitor has synced or is failing, or
// SyncTimeout has passed, and logs the monitors the workers then start
// without. It returns false if ctx ended first.
func (c *Collector) waitForMonitors(ctx context.Context) bool {
	logger := klog.FromContext(ctx)
	// Workers start once every monitor has either synced or is failing (its
	// list or watch returns errors: a CRD whose conversion webhook is down,
	// an unavailable APIService). A failing resource does not hold up the
	// others: its monitor keeps retrying with backoff, its state shows in
	// MonitorStatus, and its objects are collected once it heals.
	// SyncTimeout is only a backstop for a monitor that neither syncs nor
	// reports an error.
	//
	// Starting before every resource is observed is safe: an owner the
	// graph has not observed is a virtual node, and nothing is decided from
	// it unverified. A dependent whose owner's resource is still making its
	// first list waits for that list (no GET: the list brings the owner),
	// unless the list makes no progress for UnlistedHold; a dependent whose
	// owner sits in a failing resource has its owner verified with a GET,
	// is kept while the GET finds the owner, and retried while the GET
	// fails (package workers, awaitList and resolver). Negative facts ("no
	// dependent left") wait for the resources not listed yet, up to
	// UnlistedHold (package workers, negativeFactsReady).
	logger.Info("Waiting for monitors to sync", "monitors", c.builder.Monitors())
	syncCtx, cancel := context.WithTimeout(ctx, c.cfg.SyncTimeout)
	err := wait.PollUntilContextCancel(syncCtx, 50*time.Millisecond, true, func(context.Context) (bool, error) {
		return c.builder.Settled(), nil
	})
	cancel()
	if ctx.Err() != nil {
		return false
	}
	var failing, pending []string
	for gvr, st := range c.builder.MonitorStatus() {
		switch st.State() {
		case discovery.StateFailing:
			failing = append(failing, gvr.String())
		case discovery.StateSyncing:
			pending = append(pending, gvr.String())
		}
	}
	if len(failing) > 0 {
		logger.Info("Starting workers while some monitors fail; they are retried with backoff", "failing", failing)
	}
	if err != nil {
		logger.Info("Starting workers before every monitor synced", "pending", pending)
	}
	return true
}

// loadBeforeDecisions reads what an earlier kgc recorded, retrying until
// it can (loadBeforeWorkers). It returns false if ctx ended first.
func (c *Collector) loadBeforeDecisions(ctx context.Context) bool {
	// The journal of orphaned owners is read before any decision: a
	// dependent whose owner an earlier kgc orphaned, found only now, must
	// be orphaned, not deleted as dangling (package orphanlog). So are the
	// breaker's trips an earlier kgc recorded: starting untripped would
	// let a restart delete what it held. Until both are read nothing is
	// decided.
	if !c.loadBeforeWorkers(ctx, "the journal of orphaned owners", c.journal.Load, journalAdvice) {
		return false
	}
	if c.cfg.LoadBreaker != nil && !c.loadBeforeWorkers(ctx, "the deletion breaker's trips", c.cfg.LoadBreaker, breakerAdvice) {
		return false
	}
	return true
}

// startWorkers starts, on wg, the journal's writer (on journalCtx), then,
// once the graph holds every event queued so far, the workers (deciding
// until ctx is done, their API calls on workCtx) and the namespace
// lifecycle.
func (c *Collector) startWorkers(ctx, workCtx, journalCtx context.Context, wg *sync.WaitGroup) {
	wg.Add(1)
	go func() {
		defer wg.Done()
		c.journal.Run(journalCtx)
	}()
	c.builder.WaitIdle()
	klog.FromContext(ctx).Info("Monitors synced; starting workers", "workers", c.cfg.Workers, "maxWritesInFlight", c.cfg.MaxWritesInFlight, "nodes", c.Graph().Len())
	c.workers.Start(ctx, workCtx)
	// Synced once the workers run and their first sweep of the graph is
	// queued (Start does it): what the graph learns from then on comes
	// through events or the periodic re-check, as Synced's callers expect.
	c.synced.Store(true)
	if c.namespaces != nil {
		// The namespace lifecycle confirms every negative fact with quorum
		// LISTs of its own, so it needs no synced graph; it starts with the
		// workers so that a namespace's Background-deleted owners have a
		// collector for their dependents (as in kube-controller-manager).
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.namespaces.Run(ctx)
		}()
	}
}

// loadBeforeWorkers calls load until it succeeds, with backoff (1 s,
// doubling, up to 30 s), logging every failure with what to do (advice).
// It returns false if ctx ended first.
func (c *Collector) loadBeforeWorkers(ctx context.Context, what string, load func(context.Context) error, advice func(error) string) bool {
	logger := klog.FromContext(ctx)
	for delay := time.Second; ; delay = min(2*delay, 30*time.Second) {
		err := load(ctx)
		if err == nil {
			return true
		}
		if ctx.Err() != nil {
			return false
		}
		logger.Error(err, "Reading state kgc must know before any decision; no worker starts until it can be read", "what", what, "whatToDo", advice(err), "retryIn", delay)
		select {
		case <-ctx.Done():
			return false
		case <-time.After(delay):
		}
	}
}

// journalAdvice says what to do when the journal cannot be read.
func journalAdvice(err error) string {
	switch {
	case errors.Is(err, orphanlog.ErrUnreadable):
		return "fix or remove its annotation (" + orphanlog.Annotation + "): removing it forgets the owners it names, whose late dependents are then deleted as dangling"
	case apierrors.IsForbidden(err):
		return "kgc needs get, create and update on its Lease (deploy/30-leader-election-role.yaml), or run with --orphan-journal=false"
	}
	return "check that the API server answers; kgc retries"
}

// breakerAdvice says what to do when the breaker's trips cannot be read.
func breakerAdvice(err error) string {
	switch {
	case errors.Is(err, breaker.ErrUnreadable):
		return "fix or remove the annotation (" + breaker.AnnotationTrips + " or " + breaker.AnnotationResume + ") on kgc's Lease: removing " + breaker.AnnotationTrips + " forgets the trips, and deletions they held go"
	case apierrors.IsForbidden(err):
		return "kgc needs get, create and update on its Lease (deploy/30-leader-election-role.yaml), or run with --deletion-breaker=false"
	}
	return "check that the API server answers; kgc retries"
}

// startupProgressInterval is how often the start-up progress is logged.
const startupProgressInterval = 5 * time.Second

// startupPoll is how often reportStartup checks whether the start is done.
const startupPoll = 100 * time.Millisecond

// reportStartup logs the monitors' first lists every interval until every
// resource is listed or failing, and then once more, that it is done. It
// runs on the real clock: it only logs.
func (c *Collector) reportStartup(ctx context.Context, interval time.Duration) {
	logger := klog.FromContext(ctx)
	poll := time.NewTicker(startupPoll)
	defer poll.Stop()
	last := time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case <-poll.C:
		}
		listed, total, objects := c.builder.Progress()
		status := c.builder.MonitorStatus()
		var pending, failing []string
		for _, r := range c.builder.Unlisted() {
			if status[r.GVR].Failing() {
				failing = append(failing, r.GVR.String())
			} else {
				pending = append(pending, r.GVR.String())
			}
		}
		slices.Sort(failing)
		if len(pending) == 0 {
			kv := []any{"resources", listed, "total", total, "objects", objects, "nodes", c.Graph().Len(),
				"took", time.Since(c.started).Round(time.Millisecond).String()}
			if len(failing) > 0 {
				kv = append(kv, "failing", failing)
			}
			logger.Info("Resources listed", kv...)
			return
		}
		if time.Since(last) < interval {
			continue
		}
		last = time.Now()
		slices.Sort(pending)
		const maxNamed = 5
		more := 0
		if len(pending) > maxNamed {
			more = len(pending) - maxNamed
			pending = pending[:maxNamed]
		}
		kv := []any{"resources", listed, "total", total, "objects", objects, "nodes", c.Graph().Len(),
			"backlog", c.builder.Backlog(), "listing", pending, "moreListing", more,
			"workers", c.synced.Load(), "elapsed", time.Since(c.started).Round(time.Second).String()}
		if len(failing) > 0 {
			kv = append(kv, "failing", failing)
		}
		logger.Info("Listing resources", kv...)
	}
}

// observedIn is the namespace lifecycle's view of the graph
// (namespaces.Config.Observed): how many objects of gvr (of kind) the graph
// holds in namespace ns, and whether that count is complete — the resource
// (same group and resource, any version) is monitored, its monitor is not
// failing, and a complete list of it has been applied to the graph.
// Ignored resources (events) are not monitored, so never complete.
func (c *Collector) observedIn(ns string, gvr schema.GroupVersionResource, kind string) (int, bool) {
	monitored := false
	for r, st := range c.builder.MonitorStatus() {
		if r.Group != gvr.Group || r.Resource != gvr.Resource {
			continue
		}
		if st.Failing() || !st.Synced {
			return 0, false
		}
		monitored = true
	}
	if !monitored {
		return 0, false
	}
	for _, r := range c.builder.Unlisted() {
		if r.GVR.Group == gvr.Group && r.GVR.Resource == gvr.Resource {
			return 0, false
		}
	}
	return c.builder.Graph().ObservedIn(ns, gvr.Group, kind), true
}
