package collector

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/kgc-dev/kgc/internal/apiops"
	"github.com/kgc-dev/kgc/internal/discovery"
	"github.com/kgc-dev/kgc/internal/graph"
	"github.com/kgc-dev/kgc/internal/metrics"
	"github.com/kgc-dev/kgc/internal/rules"
)

// ResettableRESTMapper is a RESTMapper whose discovery cache can be dropped.
type ResettableRESTMapper interface {
	meta.RESTMapper
	Reset()
}

// Recorder records events on objects.
type Recorder interface {
	Warning(object rules.Identity, reason, message string)
}

// Config is what a Collector needs. Everything is required unless noted.
type Config struct {
	Metadata  metadata.Interface
	Discovery discovery.Discovery
	Mapper    ResettableRESTMapper
	// Recorder is optional.
	Recorder Recorder
	// Workers per queue; default 20.
	Workers int
	// MaxWritesInFlight bounds the API writes (DELETEs and patches) kgc
	// has in flight at once, across both queues; default twice Workers.
	// A worker hands a decided write to this pool and goes on to decide
	// its next item (see runWorker).
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
	// resources that have not been listed yet (see negativeFactsReady);
	// default 1m. Past it the finalizer is removed anyway, and the owner is
	// remembered so that dependents found later are handled as its policy
	// asked (orphaned, not deleted, for Orphan).
	UnlistedHold time.Duration
	// DrainTimeout bounds how long, once Run's context is done, in-flight
	// items may finish their API calls; default 5s (below the default gap
	// between a leader's renew deadline and its lease duration).
	DrainTimeout time.Duration
	// Metrics is optional; nil records nothing.
	Metrics *metrics.Metrics
	// Clock drives the queues' backoff, the write log, foreground re-checks,
	// periodic rediscovery and the monitors' backoff; nil is the real clock
	// (tests inject a fake one: see testhooks.go).
	Clock clock.WithTicker
}

// Collector is kgc's garbage collector. Create it with New and start it with Run.
type Collector struct {
	cfg      Config
	ignored  map[schema.GroupResource]struct{}
	graph    *graph.Graph
	events   *fifo[graph.Event]
	monitors *discovery.Monitors
	// rediscover turns CRD and APIService events into rediscoveries.
	rediscover *rediscoverer
	ops        *apiops.Ops
	resolver   *resolver
	warned     *onceSet
	writes     writeLog // kgc's writes the graph has not observed yet (writes.go)
	rechecks   dependentsRecheck
	deletions  deletionLocks // kgc's DELETEs vs writes resting on a solid owner (locks.go)
	// fgReleased: owners whose foregroundDeletion finalizer kgc removed
	// (deleteItem).
	fgReleased *recentSet[types.UID]
	// orphaned: owners whose orphan finalizer kgc removed, recorded just
	// before the write (planOrphanItem), read by the resolver (OwnerState
	// Orphaned).
	orphaned *recentSet[types.UID]
	// holds: when each owner's finalizer removal was first held back for
	// unlisted resources (negativeFactsReady).
	holds sync.Map // types.UID -> HeldFinalizer
	// released: the last finalizers removed although resources were
	// unlisted (Held).
	releasedMu sync.Mutex
	released   []HeldFinalizer
	// unlisted returns the resources not listed yet (the monitors'
	// Unlisted; tests replace it).
	unlisted func() []discovery.Resource

	// slots holds a token per API write in flight (MaxWritesInFlight).
	slots chan struct{}
	// pending counts the writes workers handed off that have not finished.
	pending sync.WaitGroup

	attemptToDelete workqueue.TypedRateLimitingInterface[types.UID]
	attemptToOrphan workqueue.TypedRateLimitingInterface[types.UID]

	// cascadeStart is when each in-flight cascade started; only the graph
	// builder goroutine touches it.
	cascadeStart map[types.UID]time.Time

	// kinds maps each monitored kind to its resource, refreshed by discovery.
	kinds atomic.Pointer[map[schema.GroupVersionKind]schema.GroupVersionResource]
	// discoveryFailures are the group versions the last discovery could not
	// read (an unavailable APIService), with their errors.
	discoveryFailures atomic.Pointer[map[schema.GroupVersion]error]
	synced            atomic.Bool
	hooks             hooks // testhooks.go
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
	c := &Collector{
		cfg:     cfg,
		ignored: make(map[schema.GroupResource]struct{}),
		graph:   graph.New(),
		events:  newFIFO[graph.Event](),
		ops:     &apiops.Ops{Client: cfg.Metadata},
		warned:  newOnceSet(4096),
		// Far more owners than are ever orphaning at once; an entry is
		// needed only until the owner's dependents have been checked
		// after it went.
		orphaned:   newRecentSet[types.UID](65536),
		fgReleased: newRecentSet[types.UID](65536),
		slots:      make(chan struct{}, cfg.MaxWritesInFlight),

		cascadeStart: make(map[types.UID]time.Time),
	}
	for _, gr := range cfg.Ignored {
		c.ignored[gr] = struct{}{}
	}
	c.rediscover = newRediscoverer()
	c.monitors = discovery.NewMonitors(cfg.Metadata, func(ev graph.Event) {
		c.events.Push(ev)
		c.rediscover.observe(ev)
	})
	c.unlisted = c.monitors.Unlisted
	c.resolver = &resolver{
		graph:            c.graph,
		mapper:           cfg.Mapper,
		get:              c.ops.Get,
		list:             c.ops.List,
		metrics:          cfg.Metrics,
		absent:           newAbsentCache(16384),
		orphaned:         c.orphaned,
		invalidNamespace: c.reportInvalidNamespace,
	}
	newQueue := func(name string) workqueue.TypedRateLimitingInterface[types.UID] {
		return workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.NewTypedItemExponentialFailureRateLimiter[types.UID](5*time.Millisecond, 60*time.Second),
			workqueue.TypedRateLimitingQueueConfig[types.UID]{Name: name, MetricsProvider: cfg.Metrics.QueueMetricsProvider(), Clock: cfg.Clock},
		)
	}
	c.attemptToDelete = c.hooks.track(newQueue("garbage_collector_attempt_to_delete"))
	c.attemptToOrphan = c.hooks.track(newQueue("garbage_collector_attempt_to_orphan"))
	c.useClock(cfg.Clock)
	empty := map[schema.GroupVersionKind]schema.GroupVersionResource{}
	c.kinds.Store(&empty)
	return c, nil
}

// Graph returns the collector's ownership graph (read-only use).
func (c *Collector) Graph() *graph.Graph { return c.graph }

// Synced reports whether the initial monitor sync finished and workers run.
func (c *Collector) Synced() bool { return c.synced.Load() }

// WritesInFlight reports the API writes in flight and their limit
// (MaxWritesInFlight).
func (c *Collector) WritesInFlight() (n, limit int) { return len(c.slots), cap(c.slots) }

// MonitorStatus reports each monitored resource's state.
func (c *Collector) MonitorStatus() map[schema.GroupVersionResource]discovery.Status {
	return c.monitors.Status()
}

// DiscoveryFailures returns the group versions the last discovery could not
// read (an aggregated API whose backend is unavailable), with their errors.
// Their resources, if monitored before, keep their monitors.
func (c *Collector) DiscoveryFailures() map[schema.GroupVersion]error {
	if p := c.discoveryFailures.Load(); p != nil {
		return *p
	}
	return nil
}

// MonitorHandlers returns the number of running monitors and of informer
// event handlers they hold; a handler leak shows as more handlers than
// monitors (a test hook for resources that come and go).
func (c *Collector) MonitorHandlers() (monitors, handlers int) {
	return c.monitors.Len(), c.monitors.Handlers()
}

// Run runs the collector until ctx is done, then stops every goroutine it
// started before returning.
func (c *Collector) Run(ctx context.Context) error {
	logger := klog.FromContext(ctx).WithName("garbagecollector")
	ctx = klog.NewContext(ctx, logger)
	// Workers' API calls run on workCtx, which outlives ctx by at most
	// DrainTimeout: at shutdown no new item starts, and the items in flight
	// finish their calls instead of being cut off halfway.
	workCtx, cancelWork := context.WithCancel(context.WithoutCancel(ctx))
	var wg sync.WaitGroup
	defer func() {
		drain := time.AfterFunc(c.cfg.DrainTimeout, cancelWork)
		c.attemptToDelete.ShutDown()
		c.attemptToOrphan.ShutDown()
		c.monitors.Stop()
		c.events.Close()
		wg.Wait()
		c.pending.Wait()
		drain.Stop()
		cancelWork()
	}()

	wg.Add(1)
	go func() {
		defer wg.Done()
		c.runGraphBuilder(ctx)
	}()

	// Initial discovery: retry until it works, at least partially.
	err := wait.PollUntilContextCancel(ctx, time.Second, true, func(ctx context.Context) (bool, error) {
		if _, _, err := c.resyncMonitors(ctx); err != nil {
			logger.Error(err, "Initial discovery failed, retrying")
			return c.monitors.Len() > 0, nil
		}
		return true, nil
	})
	if err != nil {
		return nil //nolint:nilerr // ctx ended before discovery worked: a clean stop
	}

	// Discovery keeps running from now on: CRDs and APIServices that change
	// while the monitors sync get monitors too, without waiting.
	wg.Add(1)
	go func() {
		defer wg.Done()
		c.runDiscovery(ctx)
	}()

	// Workers start once every monitor has either synced or is failing (its
	// list or watch returns errors: a CRD whose conversion webhook is down,
	// an unavailable APIService). A failing resource does not hold up the
	// others: its reflector keeps retrying with backoff, its state shows in
	// MonitorStatus, and its objects are collected once it heals.
	// SyncTimeout is only a backstop for a monitor that neither syncs nor
	// reports an error.
	//
	// Starting before every resource is observed is safe: an owner the
	// graph has not observed is a virtual node, and the resolver verifies a
	// virtual owner with a GET before anything is decided from it, so a
	// dependent whose owner sits in a failing (or still syncing) resource is
	// kept while the GET finds the owner, and retried while the GET fails.
	// What an unobserved resource can delay is ordering, never safety: a
	// Foreground owner whose dependents are all in a failing resource sees
	// no blocking dependent and is released early; those dependents are
	// then collected as dangling once their resource heals.
	logger.Info("Waiting for monitors to sync", "monitors", c.monitors.Len())
	syncCtx, cancel := context.WithTimeout(ctx, c.cfg.SyncTimeout)
	err = wait.PollUntilContextCancel(syncCtx, 50*time.Millisecond, true, func(context.Context) (bool, error) {
		return c.monitors.Settled(), nil
	})
	cancel()
	if ctx.Err() != nil {
		return nil
	}
	var failing, pending []string
	for gvr, st := range c.monitors.Status() {
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
	c.events.WaitIdle()
	c.synced.Store(true)
	c.recheck(ctx)
	logger.Info("Monitors synced; starting workers", "workers", c.cfg.Workers, "maxWritesInFlight", c.cfg.MaxWritesInFlight, "nodes", c.graph.Len())

	for range c.cfg.Workers {
		wg.Add(2)
		go func() {
			defer wg.Done()
			c.runWorker(ctx, workCtx, c.attemptToDelete, one(c.planDeleteItem))
		}()
		go func() {
			defer wg.Done()
			c.runWorker(ctx, workCtx, c.attemptToOrphan, c.planOrphanItem)
		}()
	}
	c.hooks.workersStarted.Store(true)

	<-ctx.Done()
	logger.Info("Stopping")
	return nil
}

// resyncMonitors rediscovers deletable resources and adds or removes
// monitors to match. Resources of groups that failed discovery keep their
// monitors: a failing APIService is not a vanished one. It returns what
// discovery found (want is nil when discovery failed altogether).
func (c *Collector) resyncMonitors(ctx context.Context) (want map[schema.GroupVersionResource]discovery.Resource, failed map[schema.GroupVersion]error, err error) {
	want, failed, err = discovery.Deletable(c.cfg.Discovery, c.ignored)
	if want == nil {
		return nil, nil, err
	}
	failures := make(map[schema.GroupVersion]error, len(failed))
	for gv, e := range failed {
		failures[gv] = e
	}
	c.discoveryFailures.Store(&failures)
	kinds := make(map[schema.GroupVersionKind]schema.GroupVersionResource, len(want))
	for gvr, r := range want {
		kinds[gvr.GroupVersion().WithKind(r.Kind)] = gvr
	}
	old := *c.kinds.Load()
	for gvk, gvr := range old {
		if _, ok := failed[gvk.GroupVersion()]; ok {
			kinds[gvk] = gvr
		}
	}
	c.kinds.Store(&kinds)
	added, removed := c.monitors.Sync(ctx, want, func(gvr schema.GroupVersionResource) bool {
		_, ok := failed[gvr.GroupVersion()]
		return ok
	})
	if added+removed > 0 {
		c.cfg.Mapper.Reset()
		klog.FromContext(ctx).V(1).Info("Monitors changed", "added", added, "removed", removed, "monitors", c.monitors.Len())
	}
	return want, failed, err
}

// runGraphBuilder is the graph's single writer. When it stops it closes
// the event queue, which releases anyone waiting for the queue to drain.
func (c *Collector) runGraphBuilder(ctx context.Context) {
	defer c.events.Close()
	for {
		ev, ok := c.events.Pop()
		if !ok {
			return
		}
		c.apply(ev)
		c.events.Done()
		if ctx.Err() != nil {
			return
		}
	}
}

// apply applies one monitor event to the graph and acts on its effects.
// Only the graph builder calls it (and tests, in its place).
func (c *Collector) apply(ev graph.Event) {
	if ev.Type == graph.Listed {
		// Everything the list saw is in the graph now.
		c.monitors.Applied(ev.Gen)
		return
	}
	eff := c.graph.Apply(ev)
	for _, id := range eff.Absent {
		c.resolver.absent.Add(id.Coordinates())
		c.holds.Delete(id.UID) // gone, whoever removed its finalizer
		if ev.Type == graph.Relisted {
			// Deletions a relist found never came as events: tell the
			// rediscoverer (CRDs and APIServices deleted while a watch
			// was down).
			c.rediscover.observe(graph.Event{Type: graph.Delete, Object: rules.Object{Identity: id}})
		}
	}
	// Until the workers start, queueing is pointless: the initial
	// lists would queue every dependent listed before its owner (a
	// LIST returns them in name order), 75k items for 100k objects,
	// each to find its owner in the graph once workers run. Run
	// instead re-checks the whole graph once when it starts them
	// (recheck), which finds exactly what is still unfinished then:
	// an event applied before the builder saw synced is in the graph
	// before that re-check reads it (synced is set before it).
	if c.synced.Load() {
		for _, uid := range eff.AttemptToDelete {
			c.attemptToDelete.Add(uid)
		}
		for _, uid := range eff.AttemptToOrphan {
			c.attemptToOrphan.Add(uid)
		}
	}
	now := time.Now()
	for _, uid := range eff.CascadeStarted {
		if _, ok := c.cascadeStart[uid]; !ok {
			c.cascadeStart[uid] = now
		}
	}
	for _, uid := range eff.CascadeDone {
		if t, ok := c.cascadeStart[uid]; ok {
			c.cfg.Metrics.CascadeDone(now.Sub(t))
			delete(c.cascadeStart, uid)
		}
	}
}

// planner decides an item and returns the API writes that carry the
// decision out, if any; it never writes itself.
type planner func(context.Context, types.UID) ([]write, error)

// one adapts a planner of at most one write.
func one(plan func(context.Context, types.UID) (write, error)) planner {
	return func(ctx context.Context, uid types.UID) ([]write, error) {
		w, err := plan(ctx, uid)
		if w == nil {
			return nil, err
		}
		return []write{w}, err
	}
}

// runWorker processes one queue until it shuts down.
//
// Each decided write runs on its own goroutine once a slot is free (at most
// MaxWritesInFlight across the collector), and the worker goes on to decide
// its next item once its writes have started. A write takes milliseconds
// and a decision microseconds, so a worker that waited for its writes would
// leave the apiserver idle for most of each item's turn: with one write per
// collected object, the workers' count, not the apiserver, would bound the
// deletion rate. An orphaning owner's fan-out (one patch per dependent)
// takes its slots like any other writes. The item is marked done only when
// all its writes finished, so the queue never hands out an item whose
// writes are in flight (an item added meanwhile is decided again
// afterwards, from the graph as it is then).
//
// nil from the item (plan, or its writes) forgets it; errAgain decides it
// again at once; an error retries it with per-item exponential backoff.
// Once ctx is done the worker starts no new item and no new write (the
// queue hands out what it still holds; those are dropped); a write already
// started finishes on workCtx.
func (c *Collector) runWorker(ctx, workCtx context.Context, q workqueue.TypedRateLimitingInterface[types.UID], plan planner) {
	for {
		uid, shutdown := q.Get()
		if shutdown {
			return
		}
		if ctx.Err() != nil {
			q.Forget(uid)
			q.Done(uid)
			continue
		}
		ws, err := plan(workCtx, uid)
		if err != nil || len(ws) == 0 {
			c.finish(ctx, q, uid, err)
			continue
		}
		// The worker holds one share of the item's outcome until every
		// write has started (or shutdown stopped the rest), so the item
		// finishes exactly once, after its last write.
		o := &outcome{left: len(ws) + 1}
		started := 0
		for _, w := range ws {
			if !c.acquireSlot(ctx) {
				break
			}
			started++
			c.pending.Add(1)
			go func() {
				defer c.pending.Done()
				err := w(workCtx)
				c.releaseSlot()
				if o.add(err, 1) {
					c.finish(ctx, q, uid, o.err)
				}
			}()
		}
		var err2 error
		if started < len(ws) {
			err2 = ctx.Err() // shutdown: finish forgets the item
		}
		if o.add(err2, 1+len(ws)-started) {
			c.finish(ctx, q, uid, o.err)
		}
	}
}

// outcome combines the results of one item's writes: a failure wins over
// errRetry, which wins over errAgain, which wins over success.
type outcome struct {
	mu   sync.Mutex
	left int
	err  error
}

// add records err for n shares and reports whether they were the last.
func (o *outcome) add(err error, n int) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	if rank(err) > rank(o.err) {
		o.err = err
	}
	o.left -= n
	return o.left == 0
}

func rank(err error) int {
	switch {
	case err == nil:
		return 0
	case errors.Is(err, errAgain):
		return 1
	case errors.Is(err, errRetry):
		return 2
	}
	return 3
}

// finish ends an item's turn with its outcome.
func (c *Collector) finish(ctx context.Context, q workqueue.TypedRateLimitingInterface[types.UID], uid types.UID, err error) {
	switch {
	case err == nil:
		q.Forget(uid)
	case ctx.Err() != nil:
		q.Forget(uid)
	case errors.Is(err, errAgain):
		// Added while processing: the queue hands it out again once Done.
		q.Forget(uid)
		q.Add(uid)
	default:
		if !errors.Is(err, errRetry) {
			klog.FromContext(ctx).V(2).Info("Will retry", "uid", uid, "err", err.Error(), "retries", q.NumRequeues(uid))
		}
		q.AddRateLimited(uid)
	}
	q.Done(uid)
}

// acquireSlot waits until a write may start; false if ctx ended first (or
// had ended already: no write starts after shutdown began).
func (c *Collector) acquireSlot(ctx context.Context) bool {
	if ctx.Err() != nil {
		return false
	}
	select {
	case c.slots <- struct{}{}:
		return true
	case <-ctx.Done():
		return false
	}
}

func (c *Collector) releaseSlot() { <-c.slots }

// target returns where to write to an observed item.
func (c *Collector) target(it *rules.Item) (apiops.Target, error) {
	gv, err := schema.ParseGroupVersion(it.Identity.APIVersion)
	if err != nil {
		return apiops.Target{}, err
	}
	gvk := gv.WithKind(it.Identity.Kind)
	gvr, ok := (*c.kinds.Load())[gvk]
	if !ok {
		// The node may carry a version no longer served (observed before
		// the kind's preferred version changed, not relisted yet): any
		// served version of the kind addresses the same object.
		m, err := c.cfg.Mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if meta.IsNoMatchError(err) {
			m, err = c.cfg.Mapper.RESTMapping(gvk.GroupKind())
		}
		if err != nil {
			return apiops.Target{}, fmt.Errorf("mapping %s: %w", gvk, err)
		}
		gvr = m.Resource
	}
	return apiops.Target{
		Resource:        gvr,
		Namespace:       it.Identity.Namespace,
		Name:            it.Identity.Name,
		UID:             it.Identity.UID,
		ResourceVersion: it.ResourceVersion,
	}, nil
}

// reportUnresolvable counts a reference kgc cannot resolve and tells the
// dependent's owner-to-be once: a kind no API serves, or (as upstream) a
// cluster-scoped dependent naming a namespaced kind.
func (c *Collector) reportUnresolvable(dependent rules.Identity, ref *metav1.OwnerReference, state rules.OwnerState) {
	switch state {
	case rules.Invalid:
		c.cfg.Metrics.Unresolvable(metrics.ReasonInvalid)
		if _, err := schema.ParseGroupVersion(ref.APIVersion); err != nil || dependent.Namespace != "" {
			return // a malformed apiVersion: the author's typo, not an owner elsewhere
		}
		c.warn(dependent, "OwnerRefInvalidNamespace", [3]string{"scope", string(dependent.UID), string(ref.UID)}, fmt.Sprintf(
			"ownerRef [%s, Kind=%s, Name=%s, UID=%s] names a namespaced kind, which a cluster-scoped object cannot be owned by; the object is never garbage collected on it",
			ref.APIVersion, ref.Kind, ref.Name, ref.UID))
	case rules.Unresolvable:
		c.cfg.Metrics.Unresolvable(metrics.ReasonKindNotServed)
		c.warn(dependent, "OwnerRefKindNotServed", [3]string{"kind", string(dependent.UID), string(ref.UID)}, fmt.Sprintf(
			"ownerRef [%s, Kind=%s, Name=%s, UID=%s] names a kind no API serves; the object is kept and checked again later",
			ref.APIVersion, ref.Kind, ref.Name, ref.UID))
	}
}

// warn records a Warning event on object once per key.
func (c *Collector) warn(object rules.Identity, reason string, key any, message string) {
	if c.cfg.Recorder == nil || !c.warned.First(key) {
		return
	}
	c.cfg.Recorder.Warning(object, reason, message)
}

func (c *Collector) reportInvalidNamespace(dependent rules.Identity, ref metav1.OwnerReference, ownerNamespace string) {
	c.warn(dependent, "OwnerRefInvalidNamespace", [2]types.UID{dependent.UID, ref.UID}, fmt.Sprintf(
		"ownerRef [%s, Kind=%s, Name=%s, UID=%s] does not exist in namespace %q (an object with that UID exists in namespace %q)",
		ref.APIVersion, ref.Kind, ref.Name, ref.UID, dependent.Namespace, ownerNamespace))
}
