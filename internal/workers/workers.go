package workers

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
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/kgc-dev/kgc/internal/apiops"
	"github.com/kgc-dev/kgc/internal/breaker"
	"github.com/kgc-dev/kgc/internal/budget"
	"github.com/kgc-dev/kgc/internal/discovery"
	"github.com/kgc-dev/kgc/internal/graph"
	"github.com/kgc-dev/kgc/internal/history"
	"github.com/kgc-dev/kgc/internal/metrics"
	"github.com/kgc-dev/kgc/internal/orphanlog"
	"github.com/kgc-dev/kgc/internal/rules"
)

// Recorder records events on objects.
type Recorder interface {
	Warning(object rules.Identity, reason, message string)
}

// Config is what the workers need. Everything is required unless noted.
type Config struct {
	Metadata metadata.Interface
	// Mapper maps owner kinds (any served version) to resources.
	Mapper meta.RESTMapper
	// Recorder is optional.
	Recorder Recorder
	// Workers per queue; default 20.
	Workers int
	// MaxWritesInFlight bounds the API writes kgc has in flight at once,
	// across both queues; default twice Workers.
	MaxWritesInFlight int
	// UnlistedHold bounds how long an owner's finalizer waits for the
	// resources that have not been listed yet (see negativeFactsReady),
	// and how long a first list may make no progress before the owners
	// its dependents wait for are read with GETs (awaitList); default 1m.
	UnlistedHold time.Duration
	// Unlisted returns the resources whose objects are not all in the
	// graph yet (the graph builder's Unlisted); nil: none.
	Unlisted func() []discovery.Resource
	// Listing reports whether the resource of a group and kind is making
	// its first list, and how long that list has made no progress (the
	// graph builder's Listing). A dependent whose owner the graph has not
	// observed waits for such a list instead of reading the owner, as
	// long as the list has not been idle for UnlistedHold (awaitList).
	// nil: no resource is ever listing.
	Listing func(schema.GroupKind) (listing bool, idle time.Duration)
	// Unverified reports whether the watch of a group and kind was
	// interrupted and not verified since, and the interruption's number
	// (the graph builder's Unverified); nil: never. An absence of an owner
	// of that kind is then read again before a decision rests on it
	// (resolver.stale).
	Unverified func(schema.GroupKind) (epoch uint64, unverified bool)
	// HistoryLost returns when a list of a group and kind last completed
	// after kgc's watch of it had lost the storage's history (the graph
	// builder's HistoryLost; zero: never); nil: never. With Unverified it
	// tells the breaker which owners kgc may have missed (historyGap).
	HistoryLost func(schema.GroupKind) time.Time
	// Resource returns the monitored resource of an observed kind (the
	// graph builder's Resource); nil: ask Mapper.
	Resource func(schema.GroupVersionKind) (schema.GroupVersionResource, bool)
	// Rules is the configurable part of the rules (keep-rules); the zero
	// value is kube-controller-manager's rules.
	Rules rules.Policy
	// Metrics is optional; nil records nothing.
	Metrics *metrics.Metrics
	// QueueMetrics, optional, is told about the queues too, besides
	// Metrics (metrics.Metrics.Queues).
	QueueMetrics workqueue.MetricsProvider
	// History keeps the record of every write (history.go); nil keeps
	// none. Every write is logged either way.
	History *history.Ring
	// Clock drives the queues' backoff, the write log and foreground
	// re-checks; nil is the real clock.
	Clock clock.WithTicker
	// Breaker, when set, may hold deletions resting on dangling owners
	// (hold.go); OnTrip is told once per trip.
	Breaker *breaker.Breaker
	OnTrip  func(breaker.Trip)
	// HoldRestored holds dependents with the restore signature (hold.go).
	HoldRestored bool
	// DryRun is shadow mode: decide as usual, write nothing (shadow.go).
	DryRun bool
	// Shadow receives every write decided in shadow mode; optional.
	Shadow func(history.Record)
	// Journal is the durable record of the owners kgc orphaned (package
	// orphanlog): each orphan finalizer removal waits until its owner is
	// recorded there, and owners recorded there by earlier kgc processes
	// count as orphaned. The caller loads it before Start and runs it.
	// nil: a journal in memory only.
	Journal *orphanlog.Journal
}

// Workers are kgc's attempt-to-delete and attempt-to-orphan workers: they
// read items from the graph, gather the facts about their owners (the
// resolver), decide with package rules, and carry the decisions out
// through a bounded pool of write slots (package apiops). They never write
// to the graph: they learn the outcome of their writes from the graph
// builder, like everyone else's.
type Workers struct {
	cfg      Config
	graph    *graph.Graph
	ops      *apiops.Ops
	resolver *resolver
	// awaiting parks dependents whose owner's resource is still making its
	// first list (awaitlist.go).
	awaiting *awaitList
	warned   *onceSet
	// shadowSeen: decisions already recorded in shadow mode (shadow.go).
	shadowSeen *recentSet[shadowKey]
	writes     writeLog // kgc's writes the graph has not observed yet (writes.go)
	rechecks   dependentsRecheck
	// deletions orders kgc's DELETEs and the writes resting on a solid
	// owner (locks.go).
	deletions deletionLocks
	// fgReleased: owners whose foregroundDeletion finalizer kgc removed,
	// with the resourceVersion the release is known to have landed by
	// (deleteItem, releasedAfter).
	fgReleased *recentMap[types.UID, string]
	// fgUncertain: owners whose foregroundDeletion finalizer removal was
	// answered ambiguously (a timeout, a 5xx, a broken connection): it
	// may have landed. A DELETE resting on such an owner waiting reads
	// the owner first (confirmStillWaiting).
	fgUncertain *recentSet[types.UID]
	// orphaned: owners whose orphan finalizer kgc removed, recorded just
	// before the write (planOrphanItem), read by the resolver (OwnerState
	// Orphaned) together with journal, which holds them durably (and those
	// earlier kgc processes orphaned) for a shorter time.
	orphaned *recentSet[types.UID]
	journal  *orphanlog.Journal
	// holds: when each owner's finalizer removal was first held back for
	// unlisted resources (negativeFactsReady).
	holds sync.Map // types.UID -> HeldFinalizer
	// released: the last finalizers removed although resources were
	// unlisted (Held).
	releasedMu sync.Mutex
	released   []HeldFinalizer
	// deletedByKGC: objects kgc deleted (deleteItem), so that deletions
	// resting on them count once, at the cascade's root (hold.go).
	deletedByKGC *recentSet[types.UID]
	// restored: the objects held for the restore signature (hold.go).
	restored restoreHolds
	// unlisted returns the resources not listed yet (Config.Unlisted;
	// tests replace it).
	unlisted func() []discovery.Resource

	// slots holds one per API write in flight (MaxWritesInFlight), awaited
	// writes served first (priority.go).
	slots *budget.Slots
	// pending counts the writes workers handed off that have not finished.
	pending sync.WaitGroup
	// running counts the worker goroutines.
	running sync.WaitGroup

	attemptToDelete workqueue.TypedRateLimitingInterface[types.UID]
	attemptToOrphan workqueue.TypedRateLimitingInterface[types.UID]

	// started is set once Start runs: from then on the graph's effects are
	// queued (Observed).
	started atomic.Bool
	hooks   hooks // testhooks.go
}

// New returns workers that decide from g. They do nothing until Start.
func New(cfg Config, g *graph.Graph) *Workers {
	if cfg.Workers <= 0 {
		cfg.Workers = 20
	}
	if cfg.MaxWritesInFlight <= 0 {
		cfg.MaxWritesInFlight = 2 * cfg.Workers
	}
	if cfg.UnlistedHold == 0 {
		cfg.UnlistedHold = time.Minute
	}
	w := &Workers{
		cfg:    cfg,
		graph:  g,
		ops:    &apiops.Ops{Client: cfg.Metadata},
		warned: newOnceSet(4096),
		// Far more owners than are ever orphaning at once; an entry is
		// needed only until the owner's dependents have been checked
		// after it went.
		orphaned:   newRecentSet[types.UID](65536),
		fgReleased: newRecentMap[types.UID, string](65536),
		// Filled only by ambiguous answers, emptied by each confirmation;
		// as large as fgReleased so that an owner is never forgotten
		// sooner (forgetting one lets a DELETE go without the read).
		fgUncertain: newRecentSet[types.UID](65536),
		// Owners whose dependents are still to be decided: a cascade's
		// inner owners (ReplicaSets), not its leaves.
		deletedByKGC: newRecentSet[types.UID](65536),
		restored:     restoreHolds{max: breaker.DefaultMaxHeld},
		slots:        budget.NewSlots(cfg.MaxWritesInFlight),
		unlisted:     cfg.Unlisted,
		shadowSeen:   newRecentSet[shadowKey](65536),
	}
	if w.unlisted == nil {
		w.unlisted = func() []discovery.Resource { return nil }
	}
	if w.journal = cfg.Journal; w.journal == nil {
		w.journal = orphanlog.New(orphanlog.Config{})
	}
	w.awaiting = newAwaitList(cfg.Listing, cfg.UnlistedHold, cfg.Clock, func(uid types.UID) { w.attemptToDelete.Add(uid) })
	w.resolver = &resolver{
		graph:            g,
		mapper:           cfg.Mapper,
		get:              w.ops.Get,
		list:             w.ops.List,
		metrics:          cfg.Metrics,
		absent:           newAbsentCache(16384),
		orphaned:         orphanMemory{w.orphaned, w.journal},
		invalidNamespace: w.reportInvalidNamespace,
		await:            w.awaiting.park,
		unverified:       cfg.Unverified,
		reread:           newRecentMap[rules.Coordinates, uint64](16384),
	}
	newQueue := func(name string, order workqueue.Queue[types.UID]) workqueue.TypedRateLimitingInterface[types.UID] {
		provider := cfg.Metrics.Queues(cfg.QueueMetrics)
		clk := cfg.Clock
		if clk == nil {
			clk = clock.RealClock{}
		}
		// The rate-limiting queue's own delaying queue, over a queue in
		// the given order.
		limiter := workqueue.NewTypedItemExponentialFailureRateLimiter[types.UID](5*time.Millisecond, 60*time.Second)
		return w.hooks.track(workqueue.NewTypedRateLimitingQueueWithConfig(limiter,
			workqueue.TypedRateLimitingQueueConfig[types.UID]{Name: name, MetricsProvider: provider, Clock: clk,
				DelayingQueue: workqueue.NewTypedDelayingQueueWithConfig(workqueue.TypedDelayingQueueConfig[types.UID]{
					Name: name, MetricsProvider: provider, Clock: clk,
					Queue: workqueue.NewTypedWithConfig(workqueue.TypedQueueConfig[types.UID]{Name: name, MetricsProvider: provider, Clock: clk, Queue: w.hooks.store(order)}),
				})},
		), limiter, cfg.Clock)
	}
	w.attemptToDelete = newQueue(metrics.QueueAttemptToDelete, newAwaitedFirst(g.Awaited))
	w.attemptToOrphan = newQueue(metrics.QueueAttemptToOrphan, nil)
	w.useClock(cfg.Clock)
	return w
}

// Observed takes what one applied event changed (the graph builder's
// Sink): owners observed absent are remembered, and once the workers run,
// the UIDs the graph says need a check are queued.
func (w *Workers) Observed(ev graph.Event, eff graph.Effects) {
	if ev.Type == graph.Listed {
		// A resource's list is in the graph: its parked dependents can be
		// resolved from the graph now.
		id := ev.Object.Identity
		w.awaiting.flush(schema.GroupKind{Group: rules.GroupOf(id.APIVersion), Kind: id.Kind})
		return
	}
	for _, a := range eff.Absent {
		w.resolver.absent.Put(a.Coordinates(), a.Evidence)
		w.holds.Delete(a.UID) // gone, whoever removed its finalizer
		w.forgetHold(a.UID)
	}
	// Until the workers start, queueing is pointless: the initial lists
	// would queue every dependent listed before its owner (a LIST returns
	// them in name order), 75k items for 100k objects, each to find its
	// owner in the graph once workers run. Start instead re-checks the
	// whole graph once (Recheck), which finds exactly what is still
	// unfinished then: an event applied before the builder saw started is
	// in the graph before that re-check reads it (started is set before
	// it).
	if w.started.Load() {
		for _, uid := range eff.AttemptToDelete {
			w.attemptToDelete.Add(uid)
		}
		for _, uid := range eff.AttemptToOrphan {
			w.attemptToOrphan.Add(uid)
		}
	}
}

// Start re-checks the graph's unfinished work and starts the workers. Their
// API calls run on workCtx, which should outlive ctx a little: once ctx is
// done no new item or write starts, and those in flight finish on workCtx
// (see Stop).
func (w *Workers) Start(ctx, workCtx context.Context) {
	w.started.Store(true)
	w.Recheck(ctx)
	for range w.cfg.Workers {
		w.running.Add(2)
		go func() {
			defer w.running.Done()
			w.runWorker(ctx, workCtx, w.attemptToDelete, one(w.planDeleteItem), w.graph.Awaited)
		}()
		go func() {
			defer w.running.Done()
			w.runWorker(ctx, workCtx, w.attemptToOrphan, w.planOrphanItem, always)
		}()
	}
	w.hooks.workersStarted.Store(true)
}

// Stop shuts the queues down and waits for the workers and their writes
// in flight to finish.
func (w *Workers) Stop() {
	w.awaiting.close()
	w.attemptToDelete.ShutDown()
	w.attemptToOrphan.ShutDown()
	w.running.Wait()
	w.pending.Wait()
}

// Recheck re-enqueues every node whose work the graph says is unfinished:
// owners waiting for their dependents to be deleted or orphaned, and live
// dependents whose owners are unobserved, gone or deleting. Correctness then
// does not depend on every event and queue item arriving: whatever was
// missed is finished by the next round.
func (w *Workers) Recheck(ctx context.Context) {
	p := w.graph.Pending()
	for _, uid := range p.AttemptToDelete {
		w.attemptToDelete.Add(uid)
	}
	for _, uid := range p.AttemptToOrphan {
		w.attemptToOrphan.Add(uid)
	}
	if n := len(p.AttemptToDelete) + len(p.AttemptToOrphan); n > 0 {
		klog.FromContext(ctx).V(2).Info("Re-checking unfinished work", "attemptToDelete", len(p.AttemptToDelete), "attemptToOrphan", len(p.AttemptToOrphan))
	}
}

// WritesInFlight reports the API writes in flight and their limit
// (MaxWritesInFlight).
func (w *Workers) WritesInFlight() (n, limit int) { return w.slots.InFlight() }

// planner decides an item and returns the API writes that carry the
// decision out, if any; it never writes to an object itself (the orphan
// journal, kgc's own Lease, is written by planOrphanItem).
type planner func(context.Context, types.UID) ([]write, error)

// one adapts a planner of at most one write.
func one(plan func(context.Context, types.UID) (write, error)) planner {
	return func(ctx context.Context, uid types.UID) ([]write, error) {
		wr, err := plan(ctx, uid)
		if wr == nil {
			return nil, err
		}
		return []write{wr}, err
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
//
// The writes of an item awaited reports (an owner's finalizer waits for
// them) take their slots, and then their requests take the rate limiter's
// tokens, before those of work nobody waits for (priority.go).
func (w *Workers) runWorker(ctx, workCtx context.Context, q workqueue.TypedRateLimitingInterface[types.UID], plan planner, awaited func(types.UID) bool) {
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
			w.finish(ctx, q, uid, err)
			continue
		}
		// The worker holds one share of the item's outcome until every
		// write has started (or shutdown stopped the rest), so the item
		// finishes exactly once, after its last write.
		o := &outcome{left: len(ws) + 1}
		started := 0
		first, writeCtx := awaited(uid), workCtx
		if first {
			writeCtx = budget.WithAwaited(workCtx)
		}
		for _, wr := range ws {
			if !w.slots.Acquire(ctx, first) {
				break
			}
			started++
			w.pending.Add(1)
			go func() {
				defer w.pending.Done()
				err := wr(writeCtx)
				w.slots.Release()
				if o.add(err, 1) {
					w.finish(ctx, q, uid, o.err)
				}
			}()
		}
		var err2 error
		if started < len(ws) {
			err2 = ctx.Err() // shutdown: finish forgets the item
		}
		if o.add(err2, 1+len(ws)-started) {
			w.finish(ctx, q, uid, o.err)
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
func (w *Workers) finish(ctx context.Context, q workqueue.TypedRateLimitingInterface[types.UID], uid types.UID, err error) {
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

// target returns where to write to an observed item.
func (w *Workers) target(it *rules.Item) (apiops.Target, error) {
	gv, err := schema.ParseGroupVersion(it.Identity.APIVersion)
	if err != nil {
		return apiops.Target{}, err
	}
	gvk := gv.WithKind(it.Identity.Kind)
	var gvr schema.GroupVersionResource
	ok := false
	if w.cfg.Resource != nil {
		gvr, ok = w.cfg.Resource(gvk)
	}
	if !ok {
		// The node may carry a version no longer served (observed before
		// the kind's preferred version changed, not relisted yet): any
		// served version of the kind addresses the same object.
		m, err := w.cfg.Mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if meta.IsNoMatchError(err) {
			m, err = w.cfg.Mapper.RESTMapping(gvk.GroupKind())
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
func (w *Workers) reportUnresolvable(dependent rules.Identity, ref *metav1.OwnerReference, state rules.OwnerState) {
	switch state {
	case rules.Invalid:
		w.cfg.Metrics.Unresolvable(metrics.ReasonInvalid)
		if _, err := schema.ParseGroupVersion(ref.APIVersion); err != nil || dependent.Namespace != "" {
			return // a malformed apiVersion: the author's typo, not an owner elsewhere
		}
		w.warn(dependent, "OwnerRefInvalidNamespace", [3]string{"scope", string(dependent.UID), string(ref.UID)}, fmt.Sprintf(
			"ownerRef [%s, Kind=%s, Name=%s, UID=%s] names a namespaced kind, which a cluster-scoped object cannot be owned by; the object is never garbage collected on it",
			ref.APIVersion, ref.Kind, ref.Name, ref.UID))
	case rules.Unresolvable:
		w.cfg.Metrics.Unresolvable(metrics.ReasonKindNotServed)
		w.warn(dependent, "OwnerRefKindNotServed", [3]string{"kind", string(dependent.UID), string(ref.UID)}, fmt.Sprintf(
			"ownerRef [%s, Kind=%s, Name=%s, UID=%s] names a kind no API serves; the object is kept and checked again later",
			ref.APIVersion, ref.Kind, ref.Name, ref.UID))
	}
}

// warn records a Warning event on object once per key.
func (w *Workers) warn(object rules.Identity, reason string, key any, message string) {
	if w.cfg.Recorder == nil || !w.warned.First(key) {
		return
	}
	w.cfg.Recorder.Warning(object, reason, message)
}

func (w *Workers) reportInvalidNamespace(dependent rules.Identity, ref metav1.OwnerReference, ownerNamespace string) {
	w.warn(dependent, "OwnerRefInvalidNamespace", [2]types.UID{dependent.UID, ref.UID}, fmt.Sprintf(
		"ownerRef [%s, Kind=%s, Name=%s, UID=%s] does not exist in namespace %q (an object with that UID exists in namespace %q)",
		ref.APIVersion, ref.Kind, ref.Name, ref.UID, dependent.Namespace, ownerNamespace))
}
