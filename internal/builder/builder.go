package builder

import (
	"context"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

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

// Config is what a Builder needs. Everything is required unless noted.
type Config struct {
	Metadata  metadata.Interface
	Discovery discovery.Discovery
	// Mapper is reset whenever monitors are added or removed.
	Mapper ResettableRESTMapper
	// Ignored resources are never monitored.
	Ignored []schema.GroupResource
	// ResyncPeriod between periodic rediscoveries; default 30s.
	ResyncPeriod time.Duration
	// Metrics is optional; nil records nothing.
	Metrics *metrics.Metrics
	// QueueMetrics, optional, is told about the graph builder's queue too,
	// besides Metrics (metrics.Metrics.Queues).
	QueueMetrics workqueue.MetricsProvider
	// Clock drives periodic rediscovery and the monitors' backoff; nil is
	// the real clock.
	Clock clock.WithTicker
	// BeforeApply, when set, is shown every event (but the Listed
	// markers) on the graph builder's goroutine just before the graph
	// applies it, so that it can read what the event changes (shadow
	// mode's comparison). It must not write to the graph.
	BeforeApply func(graph.Event)
	// Pages, optional, reads the monitors' list pages raw (see
	// discovery.Monitors.SetPageLister); nil lists with Metadata.
	Pages discovery.PageLister
	// Shard, optional, makes the monitors keep only one shard of the
	// namespaces (discovery.Shard: a measurement aid, no way to run kgc);
	// nil keeps every object.
	Shard *discovery.Shard
}

// listBacklog is how many queued events a list page waits for the graph
// builder to get below before it is requested: about one page (the
// monitors' page size), so that the next page is fetched while the last
// one is applied, and the queue never holds much more than two pages.
const listBacklog = 5000

// Sink is told what each applied event changed (the workers: they queue
// the UIDs the effects name, and remember owners observed absent). It is
// called on the graph builder's goroutine, in event order, for every event
// including the Listed marker that ends a resource's complete list (with
// no effects): once it is called for that marker, the resource counts as
// listed (Unlisted, Listing).
type Sink interface {
	Observed(ev graph.Event, eff graph.Effects)
}

// SinkFunc adapts a function to Sink.
type SinkFunc func(ev graph.Event, eff graph.Effects)

// Observed implements Sink.
func (f SinkFunc) Observed(ev graph.Event, eff graph.Effects) { f(ev, eff) }

// Builder is the graph builder: it discovers the deletable resources, runs
// one monitor per resource, and applies every observation to the graph,
// in order, on one goroutine (the graph's single writer). It never calls
// the API server but to discover, list and watch, and never decides.
type Builder struct {
	cfg     Config
	ignored map[schema.GroupResource]struct{}
	graph   *graph.Graph
	events  *fifo[queued]
	// queue measures events (queuemetrics.go); nil measures nothing.
	queue    *queueMetrics
	monitors *discovery.Monitors
	sink     Sink
	// rediscover turns CRD and APIService events into rediscoveries.
	rediscover *rediscoverer

	// cascadeStart is when each in-flight cascade started; only the graph
	// builder goroutine touches it.
	cascadeStart map[types.UID]time.Time
	// listed holds the group kinds a complete list of which the graph
	// applied in this process (their Listed markers: see ownersListed);
	// only the graph builder goroutine touches it.
	listed map[schema.GroupKind]struct{}

	// kinds maps each monitored kind to its resource, refreshed by discovery.
	kinds atomic.Pointer[map[schema.GroupVersionKind]schema.GroupVersionResource]
	// discoveryFailures are the group versions the last discovery could not
	// read (an unavailable APIService), with their errors.
	discoveryFailures atomic.Pointer[map[schema.GroupVersion]error]
	// busy counts rediscovery rounds in progress (Idle).
	busy atomic.Int64
	// running: Run is applying events (the list gate waits only then:
	// tests that apply events themselves are never held up).
	running atomic.Bool
	// backlog is the list gate's bound (listBacklog; SetListBacklog).
	backlog atomic.Int64
	// syncCheck is when the monitors must all have synced after the last
	// change of the monitored resources (UnixNano; 0: no check due).
	syncCheck atomic.Int64
}

// New returns a Builder that writes to g and tells sink what changed.
func New(cfg Config, g *graph.Graph, sink Sink) *Builder {
	if cfg.ResyncPeriod == 0 {
		cfg.ResyncPeriod = 30 * time.Second
	}
	b := &Builder{
		cfg:          cfg,
		ignored:      make(map[schema.GroupResource]struct{}),
		graph:        g,
		events:       newFIFO[queued](),
		sink:         sink,
		rediscover:   newRediscoverer(),
		cascadeStart: make(map[types.UID]time.Time),
		listed:       make(map[schema.GroupKind]struct{}),
	}
	for _, gr := range cfg.Ignored {
		b.ignored[gr] = struct{}{}
	}
	b.monitors = discovery.NewMonitors(cfg.Metadata, b.Enqueue)
	if cfg.Pages != nil {
		b.monitors.SetPageLister(cfg.Pages)
	}
	b.backlog.Store(listBacklog)
	b.monitors.SetListGate(b.listGate)
	if cfg.Clock != nil {
		b.monitors.SetClock(cfg.Clock)
	}
	b.monitors.SetShard(cfg.Shard)
	empty := map[schema.GroupVersionKind]schema.GroupVersionResource{}
	b.kinds.Store(&empty)
	// Real time, whatever clock drives the rest: the metrics measure the
	// process, and a ticker of theirs on a test's fake clock would be one
	// more timer for the test to step.
	b.queue = newQueueMetrics(cfg.Metrics.Queues(cfg.QueueMetrics), clock.RealClock{})
	return b
}

// Graph returns the graph the builder writes.
func (b *Builder) Graph() *graph.Graph { return b.graph }

// Monitors returns the number of running monitors.
func (b *Builder) Monitors() int { return b.monitors.Len() }

// Settled reports whether every monitor has synced or is failing.
func (b *Builder) Settled() bool { return b.monitors.Settled() }

// MonitorStatus reports each monitored resource's state.
func (b *Builder) MonitorStatus() map[schema.GroupVersionResource]discovery.Status {
	return b.monitors.Status()
}

// MonitorHandlers returns the number of running monitors and of event
// handlers they hold (see Collector.MonitorHandlers).
func (b *Builder) MonitorHandlers() (monitors, handlers int) {
	return b.monitors.Len(), b.monitors.Handlers()
}

// Unlisted returns the monitored resources whose objects are not all in
// the graph yet: no complete list of theirs has been applied.
func (b *Builder) Unlisted() []discovery.Resource { return b.monitors.Unlisted() }

// RelistAll lists every monitored resource again (discovery.Monitors
// RestartAll). It waits for the monitors to stop: not to be called from
// the graph builder's goroutine, which their last events may wait for.
func (b *Builder) RelistAll(ctx context.Context) int { return b.monitors.RestartAll(ctx) }

// Unverified reports whether the watch of gk was interrupted and not
// verified since (discovery.Monitors.Unverified).
func (b *Builder) Unverified(gk schema.GroupKind) (epoch uint64, unverified bool) {
	return b.monitors.Unverified(gk)
}

// HistoryLost returns when a list of gk last completed after its watch
// had lost the storage's history (discovery.Monitors.HistoryLost).
func (b *Builder) HistoryLost(gk schema.GroupKind) time.Time {
	return b.monitors.HistoryLost(gk)
}

// CRDBacked reports whether a CRD was observed to serve gr.
func (b *Builder) CRDBacked(gr schema.GroupResource) bool { return b.monitors.CRDBacked(gr) }

// Listing reports whether the resource of gk is making its first list and
// how long that list has made no progress (discovery.Monitors.Listing).
func (b *Builder) Listing(gk schema.GroupKind) (listing bool, idle time.Duration) {
	return b.monitors.Listing(gk)
}

// Progress reports the resources whose first complete list the graph
// holds, out of all monitored ones, and the objects those first lists
// delivered so far (discovery.Monitors.Progress).
func (b *Builder) Progress() (listed, total int, objects int64) { return b.monitors.Progress() }

// DiscoveryFailures returns the group versions the last discovery could not
// read (an aggregated API whose backend is unavailable), with their errors.
// Their resources, if monitored before, keep their monitors.
func (b *Builder) DiscoveryFailures() map[schema.GroupVersion]error {
	if p := b.discoveryFailures.Load(); p != nil {
		return *p
	}
	return nil
}

// Resource returns the monitored resource of an observed kind.
func (b *Builder) Resource(gvk schema.GroupVersionKind) (schema.GroupVersionResource, bool) {
	gvr, ok := (*b.kinds.Load())[gvk]
	return gvr, ok
}

// Enqueue queues an observation for the graph builder: the monitors'
// entry point. It never blocks (the queue is unbounded, so a slow graph
// never stalls a watch).
func (b *Builder) Enqueue(ev graph.Event) {
	if b.events.Push(queued{ev: ev, at: b.queue.now()}) {
		b.queue.added()
	}
	b.rediscover.observe(ev)
}

// listGate holds a list's next page while the queue holds more than
// listBacklog events and Run is applying them (see
// discovery.Monitors.SetListGate).
func (b *Builder) listGate(ctx context.Context) {
	if b.running.Load() {
		b.events.WaitBelow(ctx, int(b.backlog.Load()))
	}
}

// SetListBacklog sets the queue length above which a list's next page
// waits (listBacklog by default); a test hook for tests that need the lists
// delivered while a long backlog is still being applied.
func (b *Builder) SetListBacklog(n int) { b.backlog.Store(int64(n)) }

// Backlog returns the number of observations queued and not applied yet.
func (b *Builder) Backlog() int { return b.events.Len() }

// WaitIdle waits until every event pushed so far has been applied.
func (b *Builder) WaitIdle() { b.events.WaitIdle() }

// Stop stops the monitors and the event queue (Run then returns).
func (b *Builder) Stop() {
	b.monitors.Stop()
	b.events.Close()
}

// Idle reports whether every event pushed so far has been applied and no
// rediscovery round runs (a test hook; see Collector.Idle).
func (b *Builder) Idle() bool {
	return b.busy.Load() == 0 && b.events.idle()
}

// Resync rediscovers deletable resources and adds or removes monitors to
// match. Resources of groups that failed discovery keep their monitors: a
// failing APIService is not a vanished one. It returns what discovery found
// (want is nil when discovery failed altogether).
func (b *Builder) Resync(ctx context.Context) (want map[schema.GroupVersionResource]discovery.Resource, failed map[schema.GroupVersion]error, err error) {
	want, failed, err = discovery.Deletable(b.cfg.Discovery, b.ignored)
	if want == nil {
		b.cfg.Metrics.ResourcesSyncError()
		return nil, nil, err
	}
	failures := make(map[schema.GroupVersion]error, len(failed))
	for gv, e := range failed {
		failures[gv] = e
	}
	b.discoveryFailures.Store(&failures)
	kinds := make(map[schema.GroupVersionKind]schema.GroupVersionResource, len(want))
	for gvr, r := range want {
		kinds[gvr.GroupVersion().WithKind(r.Kind)] = gvr
	}
	old := *b.kinds.Load()
	for gvk, gvr := range old {
		if _, ok := failed[gvk.GroupVersion()]; ok {
			kinds[gvk] = gvr
		}
	}
	b.kinds.Store(&kinds)
	added, removed := b.monitors.Sync(ctx, want, func(gvr schema.GroupVersionResource) bool {
		_, ok := failed[gvr.GroupVersion()]
		return ok
	})
	if added+removed > 0 {
		b.expectSynced()
		b.cfg.Mapper.Reset()
		klog.FromContext(ctx).V(1).Info("Monitors changed", "added", added, "removed", removed, "monitors", b.monitors.Len())
	}
	return want, failed, err
}

// Run is the graph's single writer: it applies events until ctx is done or
// Stop is called. When it stops it closes the event queue, which releases
// anyone waiting for the queue to drain.
func (b *Builder) Run(ctx context.Context) {
	defer b.events.Close()
	b.running.Store(true)
	defer b.running.Store(false)
	qctx, stopQueue := context.WithCancel(ctx)
	queueDone := make(chan struct{})
	go func() { defer close(queueDone); b.queue.updateUnfinished(qctx) }()
	defer func() { stopQueue(); <-queueDone }()
	for {
		q, ok := b.events.Pop()
		if !ok {
			return
		}
		b.queue.taken(q.at)
		b.Apply(q.ev)
		b.queue.applied()
		b.events.Done()
		if ctx.Err() != nil {
			return
		}
	}
}

// Apply applies one monitor event to the graph and hands its effects to
// the sink. Only Run calls it (and tests, in its place).
func (b *Builder) Apply(ev graph.Event) {
	if ev.Type == graph.Listed {
		// Everything the list saw is in the graph now.
		b.listed[ev.Object.Identity.GroupKind()] = struct{}{}
		b.monitors.Applied(ev.Gen)
		b.sink.Observed(ev, graph.Effects{})
		return
	}
	if ev.Fresh && ev.Type == graph.Upsert && !b.ownersListed(&ev.Object) {
		ev.Fresh = false
	}
	if b.cfg.BeforeApply != nil {
		b.cfg.BeforeApply(ev)
	}
	eff := b.graph.Apply(ev)
	if ev.Type == graph.Relisted {
		// Deletions a relist found never came as events: tell the
		// rediscoverer (CRDs and APIServices deleted while a watch was
		// down).
		for _, id := range eff.Absent {
			b.rediscover.observe(graph.Event{Type: graph.Delete, Object: rules.Object{Identity: id.Identity}})
		}
	}
	b.sink.Observed(ev, eff)
	now := time.Now()
	for _, uid := range eff.CascadeStarted {
		if _, ok := b.cascadeStart[uid]; !ok {
			b.cascadeStart[uid] = now
		}
	}
	for _, uid := range eff.CascadeDone {
		if t, ok := b.cascadeStart[uid]; ok {
			b.cfg.Metrics.CascadeDone(now.Sub(t))
			delete(b.cascadeStart, uid)
		}
	}
}

// ownersListed reports whether the graph holds a complete list of the
// resource of every owner obj references (graph.Event.Fresh): an object
// that arrives before its owner's resource was first listed is no
// evidence of a restore when that owner is never observed alive, since
// the owner may have come and gone before kgc could see it (at start-up
// the resources' first lists end at different times; a CRD's resource is
// listed only once its monitor starts). Only the graph builder goroutine
// calls it.
func (b *Builder) ownersListed(obj *rules.Object) bool {
	for i := range obj.OwnerReferences {
		ref := &obj.OwnerReferences[i]
		if _, ok := b.listed[schema.GroupKind{Group: rules.GroupOf(ref.APIVersion), Kind: ref.Kind}]; !ok {
			return false
		}
	}
	return true
}

// clock returns the configured clock, or the real one.
func (b *Builder) clock() clock.WithTicker {
	if b.cfg.Clock != nil {
		return b.cfg.Clock
	}
	return clock.RealClock{}
}
