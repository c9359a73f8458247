package workers

import (
	"context"
	"fmt"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/lru"

	"github.com/kgc-dev/kgc/internal/graph"
	"github.com/kgc-dev/kgc/internal/metrics"
	"github.com/kgc-dev/kgc/internal/rules"
)

// absentCache remembers owners known not to exist, keyed by full
// coordinates. An entry is never wrong: UIDs are never reused, so an object
// once absent at given coordinates stays absent.
//
// The graph builder adds every object a cascade deletes, so Add is on the
// hot path of every collected object. The cache is therefore two
// generations of plain maps rather than a linked LRU: Add is one map
// insert without allocations of its own (the LRU boxed the key and
// allocated a list entry each time), and Has is two lookups. When the
// current generation reaches half the size it becomes the old one and the
// previous old one is dropped, so the cache holds the last size/2 to size
// entries added. Forgetting an entry costs at most one lookup, never a
// wrong answer. Each entry keeps the evidence that proved the owner absent
// (its observed deletion, a quorum read's answer), which the decisions
// resting on it carry to their writes' records.
type absentCache = recentMap[rules.Coordinates, rules.Evidence]

func newAbsentCache(size int) *absentCache {
	return newRecentMap[rules.Coordinates, rules.Evidence](size)
}

// getFunc reads one object's metadata from the API server.
type getFunc func(ctx context.Context, gvr schema.GroupVersionResource, ns, name string) (*metav1.PartialObjectMetadata, error)

// resolver classifies ownerReferences. It decides from the graph where the
// graph can vouch for an owner, and asks the API server otherwise.
//
// Freshness: the graph is fed by watches and may lag the server. Reading a
// lagging graph is safe in every case kgc uses it for:
//   - solid from the graph only ever keeps an object (if the owner has since
//     gone, its delete event re-checks the dependents);
//   - waiting from the graph means the owner had a deletionTimestamp, which
//     is never unset;
//   - dangling is only concluded from a quorum GET (404, or another UID at
//     the coordinates) or from an observed delete of exactly that UID at
//     exactly those coordinates (the absent cache).
//
// An owner the graph does not know, knows only as a placeholder, or knows
// under other coordinates is therefore looked up with a GET — unless its
// resource is still making its first list: then the dependent waits for
// that list (awaitList) and is resolved again from the graph.
type resolver struct {
	graph  *graph.Graph
	mapper meta.RESTMapper
	get    getFunc
	absent *absentCache
	// orphaned holds the UIDs of owners whose orphan finalizer kgc
	// removed (see OwnerState Orphaned); nil: none.
	orphaned interface{ Has(types.UID) bool }
	// await parks dependent until the first list of gk, the resource of an
	// owner the graph has not observed, is in the graph, and reports
	// whether it did (awaitList.park); nil: never.
	await func(gk schema.GroupKind, dependent types.UID) bool
	// invalidNamespace is told when a reference is dangling because its
	// owner lives in another namespace.
	invalidNamespace func(dependent rules.Identity, ref metav1.OwnerReference, ownerNamespace string)

	// unverified reports whether the watch of a group and kind was
	// interrupted and not verified since (Config.Unverified); nil: never.
	// reread remembers the interruption at which each owner's absence
	// was read again (stale).
	unverified func(schema.GroupKind) (epoch uint64, unverified bool)
	reread     *recentMap[rules.Coordinates, uint64]

	// metrics counts lookups; nil records nothing.
	metrics *metrics.Metrics
	// list, when set, lets many lookups of one resource and namespace
	// share a LIST (see lane); nil means one GET per owner.
	list listFunc

	flightMu sync.Mutex
	flights  map[rules.Coordinates]*flight // lookups in flight or queued, by owner
	lanes    map[laneKey]*lane             // resources and namespaces being looked up
}

// resolve classifies one ownerReference of dependent (see resolveFact).
func (r *resolver) resolve(ctx context.Context, dependent rules.Identity, ref *metav1.OwnerReference) (rules.OwnerState, error) {
	f, err := r.resolveFact(ctx, dependent, ref)
	return f.State, err
}

// resolveFact classifies one ownerReference of dependent, with the
// evidence the state rests on, gathered here: what the graph observed (an
// owner, or its deletion, at a resourceVersion), what the absent cache
// remembers of how the owner was found absent, or what a quorum read
// answered.
func (r *resolver) resolveFact(ctx context.Context, dependent rules.Identity, ref *metav1.OwnerReference) (rules.Fact, error) {
	// Fast path, without the REST mapping (most of a resolution's cost):
	// the graph observed an object with the reference's UID, group, kind
	// and name, cluster-scoped or in the dependent's namespace. A monitor
	// observed it, so its kind is served, and its observed namespace is
	// where its scope puts it: these are exactly the coordinates the slow
	// path would compute. Solid and Waiting are as safe from here as below;
	// Dangling is concluded only for an owner observed deleted at exactly
	// those coordinates (what the absent cache records).
	again := false
	o, ok := r.graph.Owner(ref.UID)
	if ok && (!o.Virtual || o.Absent) && rules.Matches(o.Identity, ref, dependent.Namespace) {
		if !o.Absent || !r.stale(o.Identity.Coordinates()) {
			return rules.ClassifyFact(ref.UID, observed(o), r.isOrphaned), nil
		}
		again = true // its coordinates are the slow path's
	}
	m, c, f, done, err := r.locate(dependent, ref)
	if done {
		if again && f.Evidence.Reason == rules.ReasonKindNotServed {
			// The absence kgc holds cannot be read again by name: no
			// API serves the owner's kind any more (its CRD went, and
			// the list that took its objects out of the graph answered
			// 404, which also left the watch interrupted for good).
			// Discovery, which the mapping reflects, is the read: a
			// kind that is not served has no object a client can get.
			// Keeping the dependent instead would keep it forever, as
			// upstream does. A rollback that brings the CRD back serves
			// the kind again once discovery sees it (the owners then go
			// through the read above); until then this absence may be
			// stale, the window docs/correctness.md states, which the
			// CRD's own watch closes by tripping rollback.
			return rules.ClassifyFact(ref.UID, observed(o), r.isOrphaned), nil
		}
		return f, err
	}
	if again {
		return r.readAgain(ctx, m.Resource, c, observedSource(o.Seen))
	}
	if e, ok := r.absent.Get(c); ok {
		if r.stale(c) {
			return r.readAgain(ctx, m.Resource, c, observedSource(e.Source))
		}
		r.checkNamespace(dependent, ref, c.Namespace)
		return rules.ClassifyFact(ref.UID, rules.Found{Source: e.Source, ResourceVersion: e.ResourceVersion, UID: e.FoundUID, Exists: e.FoundUID != ""}, r.isOrphaned), nil
	}
	if f, ok := r.observedAt(ref.UID, c); ok {
		return f, nil
	}
	// Not in the graph. If that is only because the owner's resource has
	// not finished its first list, the list will tell: wait for it instead
	// of reading the owner (awaitList).
	if r.await != nil && r.await(m.GroupVersionKind.GroupKind(), dependent.UID) {
		return rules.Fact{State: rules.Unresolvable}, errAwaitingList
	}
	// The list may have been applied since the look above.
	if f, ok := r.observedAt(ref.UID, c); ok {
		return f, nil
	}
	f, err = r.lookup(ctx, m.Resource, c)
	if f.State == rules.Dangling || f.State == rules.Orphaned {
		r.checkNamespace(dependent, ref, c.Namespace)
	}
	return f, err
}

// stale reports whether an absence of the owner at c that kgc holds (the
// graph's, or the absent cache's) must be read again before a decision
// rests on it: the watch of its resource was interrupted and not verified
// since (Config.Unverified), and no read since that interruption found
// it absent. Absences are monotonic in one history of the API's storage,
// but etcd restored from a snapshot under a running kgc brings back
// objects kgc saw deleted, under their UIDs; kgc learns that when it
// lists their resource again (graph.Regression trips the breaker), and a
// decision made meanwhile on the old absence deletes the dependents of an
// owner that exists. Every restore interrupts kgc's watches (etcd and the
// apiserver restart); so do ordinary apiserver restarts, which cost one
// quorum read per owner whose absence a decision needs until the watch
// resumes.
func (r *resolver) stale(c rules.Coordinates) bool {
	if r.unverified == nil {
		return false
	}
	epoch, unverified := r.unverified(schema.GroupKind{Group: c.Group, Kind: c.Kind})
	if !unverified {
		return false
	}
	at, ok := r.reread.Get(c)
	return !ok || at != epoch
}

// readAgain classifies the owner at c, whose absence kgc held, from a
// quorum read (stale), and remembers at which interruption it read it
// absent. The read keeps the provenance of the absence it replaces: an
// owner kgc observed (its deletion watched or relisted, or the graph held
// it; wasObserved) is read as a confirmation, whose absence is no evidence
// of an owner never observed alive; an owner kgc only ever read absent
// (a GET or LIST of a UID the graph never held) stays never observed. A
// read that said "observed" for it would let the dependents the
// unobserved-owners trip holds go when they are decided again while the
// owner's watch is interrupted (an apiserver restart after a restore).
func (r *resolver) readAgain(ctx context.Context, gvr schema.GroupVersionResource, c rules.Coordinates, wasObserved bool) (rules.Fact, error) {
	epoch, _ := r.unverified(schema.GroupKind{Group: c.Group, Kind: c.Kind})
	src := rules.SourceConfirm
	if !wasObserved {
		src = rules.SourceGet
	}
	f, err := r.read(ctx, gvr, c, metrics.LookupConfirm, src)
	if err == nil && (f.State == rules.Dangling || f.State == rules.Orphaned) {
		r.reread.Put(c, epoch)
	}
	return f, err
}

// observedAt classifies the owner uid from the graph if the graph observed
// it at exactly c.
func (r *resolver) observedAt(uid types.UID, c rules.Coordinates) (rules.Fact, bool) {
	o, ok := r.graph.Owner(uid)
	if !ok || o.Virtual || o.Identity.Coordinates() != c {
		return rules.Fact{}, false
	}
	return rules.ClassifyFact(uid, observed(o), r.isOrphaned), true
}

// observed is what the graph found at an owner's coordinates.
func observed(o graph.OwnerView) rules.Found {
	return rules.Found{Exists: !o.Absent, UID: o.Identity.UID, Deleting: o.Deleting, DeletingDependents: o.DeletingDependents,
		Source: o.Seen, ResourceVersion: o.ResourceVersion}
}

// isOrphaned reports whether kgc removed the orphan finalizer of owner
// (see OwnerState Orphaned).
func (r *resolver) isOrphaned(owner types.UID) bool {
	return r.orphaned != nil && r.orphaned.Has(owner)
}

// lookup asks the API server about the owner at c, once for any number of
// dependents asking at the same time (many dependents of one owner that was
// never observed, e.g. at startup, would otherwise send one GET each), and
// with one LIST for many owners of one resource and namespace (see lane).
//
// Sharing one answer is safe even for a dependent that asks after the GET
// was sent: the dependent that started the GET already referenced c.UID, and
// UIDs are assigned by the apiserver at creation, so an object with that UID
// was created before the GET started or never will be. A GET that finds no
// such object therefore proves it absent for every later asker too; Solid
// and Waiting answers only ever keep objects (see resolver).
func (r *resolver) lookup(ctx context.Context, gvr schema.GroupVersionResource, c rules.Coordinates) (rules.Fact, error) {
	r.flightMu.Lock()
	if f, ok := r.flights[c]; ok {
		f.waiters++
		r.flightMu.Unlock()
		return f.wait(ctx)
	}
	f := &flight{done: make(chan struct{})}
	if r.flights == nil {
		r.flights = make(map[rules.Coordinates]*flight)
	}
	r.flights[c] = f
	if r.list == nil {
		r.flightMu.Unlock()
		s, err := r.getOwner(ctx, gvr, c)
		r.answer(c, f, s, err)
		return f.fact, f.err
	}
	k := laneKey{gvr: gvr, namespace: c.Namespace}
	l := r.lanes[k]
	if l == nil {
		if r.lanes == nil {
			r.lanes = make(map[laneKey]*lane)
		}
		l = &lane{}
		r.lanes[k] = l
	}
	if l.busy {
		// Another resolution is talking to the API server about this
		// resource and namespace: join the next round, which will start
		// after this registration (see lane).
		if l.queued == nil {
			l.queued = make(map[rules.Coordinates]*flight)
		}
		l.queued[c] = f
		r.flightMu.Unlock()
		return f.wait(ctx)
	}
	l.busy = true
	r.flightMu.Unlock()

	s, err := r.getOwner(ctx, gvr, c)
	r.answer(c, f, s, err)
	// Serve the rounds that queued up meanwhile, until none is left.
	for {
		r.flightMu.Lock()
		round := l.queued
		l.queued = nil
		if len(round) == 0 {
			l.busy = false // the lane stays: it remembers its LIST's size
			r.flightMu.Unlock()
			return f.fact, f.err
		}
		r.flightMu.Unlock()
		r.serveRound(ctx, gvr, l, round)
	}
}

// answer completes f, the lookup of c.
func (r *resolver) answer(c rules.Coordinates, f *flight, s rules.Fact, err error) {
	f.fact, f.err = s, err
	r.flightMu.Lock()
	delete(r.flights, c)
	r.flightMu.Unlock()
	close(f.done)
}

// flight is one owner lookup that several resolutions wait for.
type flight struct {
	done    chan struct{}
	fact    rules.Fact
	err     error
	waiters int // guarded by resolver.flightMu (tests)
}

func (f *flight) wait(ctx context.Context) (rules.Fact, error) {
	select {
	case <-f.done:
		return f.fact, f.err
	case <-ctx.Done():
		return rules.Fact{State: rules.Unresolvable}, ctx.Err()
	}
}

// getOwner classifies the owner at c from a quorum GET.
func (r *resolver) getOwner(ctx context.Context, gvr schema.GroupVersionResource, c rules.Coordinates) (rules.Fact, error) {
	return r.read(ctx, gvr, c, metrics.LookupGet, rules.SourceGet)
}

// confirm classifies ref from a quorum GET sent now, whatever the graph
// says and without sharing another lookup's answer: for a write that would
// be wrong, and could not be undone, if an owner the graph shows as solid
// were gone or waiting by now (see planConfirmedRemoval). A graph fed by watches
// lags the server: an owner deleted a moment ago still looks solid there.
func (r *resolver) confirm(ctx context.Context, dependent rules.Identity, ref *metav1.OwnerReference) (rules.Fact, error) {
	m, c, f, done, err := r.locate(dependent, ref)
	if done {
		return f, err
	}
	return r.read(ctx, m.Resource, c, metrics.LookupConfirm, rules.SourceConfirm)
}

// locate maps ref's kind and returns the full coordinates of its owner as
// seen from dependent (rules.Locate). done reports a state settled without
// them: Invalid or Unresolvable (err is set when the mapping failed for
// another reason than an unserved kind, to be retried).
func (r *resolver) locate(dependent rules.Identity, ref *metav1.OwnerReference) (m *meta.RESTMapping, c rules.Coordinates, f rules.Fact, done bool, err error) {
	m, err = rules.OwnerMapping(r.mapper, ref.APIVersion, ref.Kind)
	c, s, why, done := rules.Locate(dependent, ref, m, err)
	f = rules.Fact{State: s, Evidence: rules.Evidence{Source: rules.SourceMapping, Reason: why}}
	if why == rules.ReasonKindUnknown {
		return nil, c, f, true, fmt.Errorf("mapping owner kind %s %s: %w", ref.APIVersion, ref.Kind, err)
	}
	return m, c, f, done, nil
}

// observedSource reports whether an absence kgc holds from src rests on
// an observation of the owner (its deletion watched or relisted, or the
// graph holding it before a confirming read) rather than only on reads of
// a UID the graph never held.
func observedSource(src rules.Source) bool {
	switch src {
	case rules.SourceWatchDeletion, rules.SourceRelist, rules.SourceConfirm, rules.SourceGraph:
		return true
	}
	return false
}

// read classifies the owner at c from a quorum GET, counted as verb, with
// src as the evidence's source.
func (r *resolver) read(ctx context.Context, gvr schema.GroupVersionResource, c rules.Coordinates, verb string, src rules.Source) (rules.Fact, error) {
	r.metrics.Lookup(verb)
	obj, err := r.get(ctx, gvr, c.Namespace, c.Name)
	switch {
	case apierrors.IsNotFound(err):
		return r.settle(c, nil, src, ""), nil
	case err != nil:
		return rules.Fact{State: rules.Unresolvable, Evidence: rules.Evidence{Source: src}}, fmt.Errorf("looking up owner %s: %w", c, err)
	}
	return r.settle(c, obj, src, obj.ResourceVersion), nil
}

// settle classifies the owner at c from obj, what a consistent read (src,
// at resourceVersion rv) found at c's name (nil: nothing), and remembers
// an owner found absent, with that evidence.
func (r *resolver) settle(c rules.Coordinates, obj *metav1.PartialObjectMetadata, src rules.Source, rv string) rules.Fact {
	f := rules.Found{Source: src, ResourceVersion: rv}
	if obj != nil {
		f = rules.FoundObject(&rules.Object{Identity: rules.Identity{UID: obj.UID}, Deleting: obj.DeletionTimestamp != nil, Finalizers: obj.Finalizers})
		f.Source, f.ResourceVersion = src, rv
	}
	fact := rules.ClassifyFact(c.UID, f, r.isOrphaned)
	if fact.State == rules.Dangling || fact.State == rules.Orphaned {
		r.absent.Put(c, fact.Evidence)
	}
	return fact
}

// checkNamespace reports a dangling reference whose UID the graph has seen
// in another namespace: the author most likely meant that object, and
// namespaced owners must share their dependent's namespace.
func (r *resolver) checkNamespace(dependent rules.Identity, ref *metav1.OwnerReference, ns string) {
	if ns == "" || r.invalidNamespace == nil {
		return
	}
	if o, ok := r.graph.Owner(ref.UID); ok && !o.Virtual && o.Identity.Namespace != "" && o.Identity.Namespace != ns {
		r.invalidNamespace(dependent, *ref, o.Identity.Namespace)
	}
}

// onceSet remembers keys, so that a warning is reported once per key.
type onceSet struct {
	mu   sync.Mutex
	seen *lru.Cache
}

func newOnceSet(size int) *onceSet { return &onceSet{seen: lru.New(size)} }

// First reports whether key is new, and remembers it.
func (s *onceSet) First(key any) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.seen.Get(key); ok {
		return false
	}
	s.seen.Add(key, struct{}{})
	return true
}
