package workers

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"

	"github.com/kgc-dev/kgc/internal/fakeapi"
	"github.com/kgc-dev/kgc/internal/graph"
	"github.com/kgc-dev/kgc/internal/rules"
)

func TestWriteLog(t *testing.T) {
	now := time.Unix(1000, 0)
	w := &writeLog{now: func() time.Time { return now }}
	gr := schema.GroupResource{Resource: "configmaps"}

	if skip, _ := w.check("a", "1"); skip {
		t.Fatal("empty log skips")
	}
	w.record("a", "1", nil)
	if skip, stale := w.check("a", "1"); !skip || stale {
		t.Fatalf("after a successful write at rv 1: skip=%v stale=%v, want skip", skip, stale)
	}
	// The graph moved on: decide again, and the entry is gone.
	if skip, _ := w.check("a", "2"); skip {
		t.Fatal("newer version skipped")
	}
	if w.len() != 0 {
		t.Fatalf("entry kept after a newer version was seen: %d", w.len())
	}

	w.record("b", "5", apierrors.NewConflict(gr, "b", errors.New("rv")))
	if skip, stale := w.check("b", "5"); !skip || !stale {
		t.Fatalf("after a 409 at rv 5: skip=%v stale=%v, want skip+stale", skip, stale)
	}
	now = now.Add(writeLogConflictTTL + time.Second)
	if skip, _ := w.check("b", "5"); skip {
		t.Fatal("fakeapi.Conflict entry did not expire")
	}

	w.record("c", "7", apierrors.NewNotFound(gr, "c"))
	if skip, stale := w.check("c", "7"); !skip || stale {
		t.Fatal("a 404 is not remembered as done")
	}
	// A failure that says nothing about the object is not remembered, and
	// clears what was.
	w.record("c", "7", errors.New("connection reset"))
	if skip, _ := w.check("c", "7"); skip {
		t.Fatal("transport error remembered")
	}

	w.record("d", "1", nil)
	now = now.Add(writeLogTTL + time.Second)
	if skip, _ := w.check("d", "1"); skip {
		t.Fatal("success entry did not expire")
	}

	// Entries never checked again are pruned by age.
	w.adds = 0
	for i := range writeLogPruneEvery - 1 {
		w.record(types.UID(strconv.Itoa(i)), "1", nil)
	}
	now = now.Add(writeLogTTL + time.Second)
	w.record("z", "1", nil)
	if w.len() != 1 {
		t.Fatalf("after pruning: %d entries, want 1", w.len())
	}
}

// blockingGetter counts GETs and holds them until released.
type blockingGetter struct {
	calls   atomic.Int32
	release chan struct{}
	objects map[string]*metav1.PartialObjectMetadata
}

func (b *blockingGetter) get(ctx context.Context, gvr schema.GroupVersionResource, ns, name string) (*metav1.PartialObjectMetadata, error) {
	b.calls.Add(1)
	select {
	case <-b.release:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	if o := b.objects[name]; o != nil {
		return o.DeepCopy(), nil
	}
	return nil, apierrors.NewNotFound(gvr.GroupResource(), name)
}

// Many dependents of one owner the graph cannot vouch for resolve with a
// single GET, whether they ask at once or afterwards.
func TestResolveSharesOneGETPerOwner(t *testing.T) {
	for _, tc := range []struct {
		name  string
		owner *metav1.PartialObjectMetadata
		want  rules.OwnerState
	}{
		{"absent", nil, rules.Dangling},
		{"present", pom("a", "owner", "owner"), rules.Solid},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newResolverFixture()
			bg := &blockingGetter{release: make(chan struct{}), objects: map[string]*metav1.PartialObjectMetadata{}}
			if tc.owner != nil {
				bg.objects["owner"] = tc.owner
			}
			f.r.get = bg.get
			const n = 20
			var wg sync.WaitGroup
			states := make([]rules.OwnerState, n)
			errs := make([]error, n)
			for i := range n {
				wg.Add(1)
				go func() {
					defer wg.Done()
					dep := depA
					dep.UID = types.UID(rune('a' + i))
					ref := cmRef
					states[i], errs[i] = f.r.resolve(context.Background(), dep, &ref)
				}()
			}
			// Wait until the first GET is in flight and the others had a
			// chance to join it, then answer it.
			deadline := time.Now().Add(10 * time.Second)
			for bg.calls.Load() == 0 && time.Now().Before(deadline) {
				time.Sleep(time.Millisecond)
			}
			// Every other resolution joins the one GET in flight.
			for {
				f.r.flightMu.Lock()
				inFlight, waiters := len(f.r.flights), 0
				for _, fl := range f.r.flights {
					waiters = fl.waiters
				}
				f.r.flightMu.Unlock()
				if inFlight != 1 {
					t.Fatalf("%d lookups in flight, want 1", inFlight)
				}
				if waiters == n-1 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("%d of %d resolutions joined the GET in flight", waiters, n-1)
				}
				time.Sleep(time.Millisecond)
			}
			close(bg.release)
			wg.Wait()
			for i := range n {
				if errs[i] != nil || states[i] != tc.want {
					t.Fatalf("dependent %d: %s, %v; want %s", i, states[i], errs[i], tc.want)
				}
			}
			if got := bg.calls.Load(); got != 1 {
				t.Fatalf("%d GETs for %d dependents of one owner", got, n)
			}
			if tc.want == rules.Dangling {
				// Absent now cached: no more GETs.
				before := bg.calls.Load()
				ref := cmRef
				s, err := f.r.resolve(context.Background(), depA, &ref)
				expectState(t, s, err, rules.Dangling)
				if bg.calls.Load() != before {
					t.Fatal("absent owner looked up again")
				}
			}
		})
	}
}

// A waiter whose context ends stops waiting; the GET's owner is unaffected.
func TestResolveSharedGETWaiterCanceled(t *testing.T) {
	f := newResolverFixture()
	bg := &blockingGetter{release: make(chan struct{})}
	f.r.get = bg.get
	first := make(chan error, 1)
	go func() {
		ref := cmRef
		_, err := f.r.resolve(context.Background(), depA, &ref)
		first <- err
	}()
	deadline := time.Now().Add(10 * time.Second)
	for bg.calls.Load() == 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	ref := cmRef
	dep := depA
	dep.UID = "other"
	if _, err := f.r.resolve(ctx, dep, &ref); !errors.Is(err, context.Canceled) {
		t.Fatalf("canceled waiter: err = %v, want context.Canceled", err)
	}
	close(bg.release)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
}

// BenchmarkResolveGraphHit classifies a reference to an owner the graph
// has observed: the common case, which must not touch the API.
func BenchmarkResolveGraphHit(b *testing.B) {
	f := newResolverFixture()
	f.g.Apply(graph.Event{Type: graph.Upsert, Object: ownerObj})
	f.r.get = func(context.Context, schema.GroupVersionResource, string, string) (*metav1.PartialObjectMetadata, error) {
		b.Fatal("GET on a graph hit")
		return nil, nil
	}
	ref := cmRef
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if s, err := f.r.resolve(ctx, depA, &ref); err != nil || s != rules.Solid {
			b.Fatal(s, err)
		}
	}
}

// BenchmarkResolveAbsentHit classifies a reference to an owner observed
// deleted while the graph still holds its placeholder (a background
// cascade: the owner's dependents keep it).
func BenchmarkResolveAbsentHit(b *testing.B) {
	f := newResolverFixture()
	f.g.Apply(graph.Event{Type: graph.Upsert, Object: ownerObj})
	f.g.Apply(graph.Event{Type: graph.Upsert, Object: rules.Object{Identity: depA, ResourceVersion: "1", OwnerReferences: []metav1.OwnerReference{cmRef}}})
	f.g.Apply(graph.Event{Type: graph.Delete, Object: ownerObj})
	f.r.get = func(context.Context, schema.GroupVersionResource, string, string) (*metav1.PartialObjectMetadata, error) {
		b.Fatal("GET for an owner observed deleted")
		return nil, nil
	}
	ref := cmRef
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if s, err := f.r.resolve(ctx, depA, &ref); err != nil || s != rules.Dangling {
			b.Fatal(s, err)
		}
	}
}

// BenchmarkResolveAbsentCacheHit classifies a reference to an owner
// observed deleted that the graph no longer holds (the absent cache).
func BenchmarkResolveAbsentCacheHit(b *testing.B) {
	f := newResolverFixture()
	f.g.Apply(graph.Event{Type: graph.Upsert, Object: ownerObj})
	eff := f.g.Apply(graph.Event{Type: graph.Delete, Object: ownerObj})
	for _, id := range eff.Absent {
		f.r.absent.Put(id.Coordinates(), rules.Evidence{})
	}
	ref := cmRef
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if s, err := f.r.resolve(ctx, depA, &ref); err != nil || s != rules.Dangling {
			b.Fatal(s, err)
		}
	}
}

// The graph answers for owners it observed, including one observed deleted
// (its placeholder), without a GET; an owner it observed under other
// coordinates is still looked up.
func TestResolveFastPath(t *testing.T) {
	f := newResolverFixture()
	f.r.get = func(context.Context, schema.GroupVersionResource, string, string) (*metav1.PartialObjectMetadata, error) {
		t.Fatal("GET for an owner the graph observed")
		return nil, nil
	}
	f.observe(t, ownerObj)
	f.observe(t, rules.Object{Identity: depA, ResourceVersion: "1", OwnerReferences: []metav1.OwnerReference{cmRef}})
	s, err := f.resolve(t, depA, cmRef)
	expectState(t, s, err, rules.Solid)
	deleting := ownerObj
	deleting.Deleting, deleting.Finalizers = true, []string{rules.FinalizerForeground}
	f.observe(t, deleting)
	s, err = f.resolve(t, depA, cmRef)
	expectState(t, s, err, rules.Waiting)
	f.g.Apply(graph.Event{Type: graph.Delete, Object: deleting})
	s, err = f.resolve(t, depA, cmRef)
	expectState(t, s, err, rules.Dangling)

	// Same UID, other name: not the referenced object; ask the server.
	other := newResolverFixture()
	other.observe(t, ownerObj)
	wrongName := cmRef
	wrongName.Name = "other"
	s, err = other.resolve(t, depA, wrongName)
	expectState(t, s, err, rules.Dangling)
	expectGETs(t, other, getKey{fakeapi.ConfigMaps, "a", "other"})
}

// BenchmarkDecideDependent decides for a dependent with one dangling and
// one solid owner (the reference-removal case, the most work decide does).
func BenchmarkDecideDependent(b *testing.B) {
	it := &rules.Item{Object: rules.Object{
		Identity:        depA,
		OwnerReferences: []metav1.OwnerReference{cmRef, {APIVersion: "v1", Kind: "ConfigMap", Name: "gone", UID: "gone"}},
	}}
	states := []rules.OwnerState{rules.Solid, rules.Dangling}
	b.ReportAllocs()
	for b.Loop() {
		if a := rules.DecideDependent(it, states, nil); a.Type != rules.RemoveReferences {
			b.Fatal(a)
		}
	}
}

// BenchmarkCheckSolidDependent is a worker's whole check of a live
// dependent whose owner the graph has observed (every dependent at startup):
// graph read, classification, decision — and no API call.
func BenchmarkCheckSolidDependent(b *testing.B) {
	f := newResolverFixture()
	f.g.Apply(graph.Event{Type: graph.Upsert, Object: ownerObj})
	f.g.Apply(graph.Event{Type: graph.Upsert, Object: rules.Object{Identity: depA, ResourceVersion: "1", OwnerReferences: []metav1.OwnerReference{cmRef}}})
	f.r.get = func(context.Context, schema.GroupVersionResource, string, string) (*metav1.PartialObjectMetadata, error) {
		b.Fatal("GET for a dependent of an observed owner")
		return nil, nil
	}
	c := &Workers{graph: f.g, resolver: f.r}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if err := c.attemptToDeleteItem(ctx, depA.UID); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkForegroundOwnerCheckBlocked is the check of a foreground owner
// still blocked by 20,000 dependents, which the graph re-queues each time
// one of them goes: constant time, not a copy of every dependent.
func BenchmarkForegroundOwnerCheckBlocked(b *testing.B) {
	g := graph.New()
	owner := ownerObj
	owner.Deleting, owner.Finalizers = true, []string{rules.FinalizerForeground}
	g.Apply(graph.Event{Type: graph.Upsert, Object: owner})
	blockRef := cmRef
	blockRef.BlockOwnerDeletion = ptr.To(true)
	for i := range 20000 {
		dep := depA
		dep.UID, dep.Name = types.UID(fmt.Sprintf("dep-%d", i)), fmt.Sprintf("dep-%d", i)
		g.Apply(graph.Event{Type: graph.Upsert, Object: rules.Object{Identity: dep, ResourceVersion: "1", OwnerReferences: []metav1.OwnerReference{blockRef}}})
	}
	c := &Workers{graph: g}
	c.attemptToDelete = workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[types.UID]())
	defer c.attemptToDelete.ShutDown()
	ctx := context.Background()
	// The first check re-queues the dependents; the following ones wait.
	if err := c.attemptToDeleteItem(ctx, owner.Identity.UID); err != nil {
		b.Fatal(err)
	}
	if n := c.attemptToDelete.Len(); n != 20000 {
		b.Fatalf("first check queued %d dependents, want 20000", n)
	}
	b.ReportAllocs()
	for b.Loop() {
		if err := c.attemptToDeleteItem(ctx, owner.Identity.UID); err != nil {
			b.Fatal(err)
		}
	}
	if n := c.attemptToDelete.Len(); n != 20000 {
		b.Fatalf("%d items queued after the re-checks", n)
	}
}
