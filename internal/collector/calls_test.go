package collector

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/kgc-dev/kgc/internal/fakeapi"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/metadata"
	"k8s.io/klog/v2/ktesting"
)

// A foreground owner re-checks its blocking dependents on every change;
// each dependent is still deleted exactly once, without a GET, and the
// owner's finalizer is removed once.
func TestCollectorForegroundOneCallPerDependent(t *testing.T) {
	const n = 40
	srv := fakeapi.NewServer()
	owner := fakeapi.Object("a", "web", "owner-uid")
	owner.DeletionTimestamp = &metav1.Time{Time: time.Now()}
	owner.Finalizers = []string{metav1.FinalizerDeleteDependents, "example.com/keep"}
	srv.Create(t, fakeapi.Deployments, owner)
	for i := range n {
		srv.Create(t, fakeapi.ConfigMaps, fakeapi.Object("a", fmt.Sprintf("dep-%02d", i), types.UID(fmt.Sprintf("dep-%02d", i)), fakeapi.DeploymentRef("web", "owner-uid")))
	}
	e := startCollector(t, srv)
	e.waitFor(t, "the owner's foregroundDeletion finalizer to go", func() bool {
		o, err := srv.Get(fakeapi.Deployments, "a", "web")
		return err == nil && slices.Equal(o.Finalizers, []string{"example.com/keep"})
	})
	gets, deletes, patches := srv.KGCActions()
	if len(gets) != 0 {
		t.Errorf("%d GETs, want none: every owner is in the cache", len(gets))
	}
	perName := map[string]int{}
	for _, d := range deletes {
		perName[d.GetName()]++
	}
	for name, c := range perName {
		if c != 1 {
			t.Errorf("%s deleted %d times, want once", name, c)
		}
	}
	if len(perName) != n {
		t.Errorf("%d dependents deleted, want %d", len(perName), n)
	}
	if len(patches) != 1 {
		t.Errorf("%d patches, want 1 (the owner's finalizer): %v", len(patches), patchNames(patches))
	}
}

// patchTracker wraps a metadata client and records how many PATCHes are in
// flight at once. Each PATCH waits (bounded) for a second one to start, so
// that concurrency, when there is any, is observed.
type patchTracker struct {
	metadata.Interface
	mu       sync.Mutex
	inFlight int
	max      int
	cond     *sync.Cond
}

func newPatchTracker(inner metadata.Interface) *patchTracker {
	p := &patchTracker{Interface: inner}
	p.cond = sync.NewCond(&p.mu)
	return p
}

// IsWatchListSemanticsUnSupported passes on the fake client's answer: the
// informers must not try a streaming list against it.
func (p *patchTracker) IsWatchListSemanticsUnSupported() bool { return true }

func (p *patchTracker) Resource(gvr schema.GroupVersionResource) metadata.Getter {
	return trackedResource{p.Interface.Resource(gvr), p}
}

type trackedResource struct {
	metadata.Getter
	p *patchTracker
}

func (r trackedResource) Namespace(ns string) metadata.ResourceInterface {
	return trackedNamespaced{r.Getter.Namespace(ns), r.p}
}

type trackedNamespaced struct {
	metadata.ResourceInterface
	p *patchTracker
}

func (r trackedNamespaced) Patch(ctx context.Context, name string, pt types.PatchType, data []byte, opts metav1.PatchOptions, sub ...string) (*metav1.PartialObjectMetadata, error) {
	p := r.p
	p.mu.Lock()
	p.inFlight++
	p.max = max(p.max, p.inFlight)
	p.cond.Broadcast()
	deadline := time.Now().Add(200 * time.Millisecond)
	for p.inFlight < 2 && time.Now().Before(deadline) {
		// Woken by the next PATCH, or by the timer below.
		t := time.AfterFunc(10*time.Millisecond, p.cond.Broadcast)
		p.cond.Wait()
		t.Stop()
	}
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		p.inFlight--
		p.mu.Unlock()
	}()
	return r.ResourceInterface.Patch(ctx, name, pt, data, opts, sub...)
}

// An orphaning owner's dependents are patched concurrently, through the
// write slots: never more at once than MaxWritesInFlight.
func TestCollectorOrphanBoundedConcurrency(t *testing.T) {
	const n = 12
	srv := fakeapi.NewServer()
	owner := fakeapi.Object("a", "web", "owner-uid")
	owner.DeletionTimestamp = &metav1.Time{Time: time.Now()}
	owner.Finalizers = []string{metav1.FinalizerOrphanDependents}
	srv.Create(t, fakeapi.Deployments, owner)
	for i := range n {
		srv.Create(t, fakeapi.ConfigMaps, fakeapi.Object("a", fmt.Sprintf("dep-%02d", i), types.UID(fmt.Sprintf("dep-%02d", i)), fakeapi.DeploymentRef("web", "owner-uid")))
	}
	tracker := newPatchTracker(srv.Client)
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	c, err := New(Config{
		Metadata: tracker, Discovery: &fakeapi.Discovery{Lists: fakeapi.ResourceLists()}, Mapper: fakeapi.NewMapper(),
		Workers: 2, MaxWritesInFlight: 3, Ignored: []schema.GroupResource{fakeapi.Events.GroupResource()}, ResyncPeriod: time.Hour, SyncTimeout: testTimeout,
	})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); _ = c.Run(ctx) }()
	defer func() { cancel(); <-done }()
	e := &testEnv{srv: srv, c: c, ctx: ctx}
	e.waitFor(t, "the owner to be released", func() bool { return e.gone(fakeapi.Deployments, "a", "web") || finalizersOf(srv, "web") == 0 })
	tracker.mu.Lock()
	maxInFlight := tracker.max
	tracker.mu.Unlock()
	if maxInFlight < 2 || maxInFlight > 3 {
		t.Errorf("at most %d PATCHes in flight, want 2 or 3 (concurrent, within MaxWritesInFlight)", maxInFlight)
	}
	_, _, patches := srv.KGCActions()
	if len(patches) != n+1 {
		t.Errorf("%d PATCHes, want %d (one per dependent, then the owner)", len(patches), n+1)
	}
}

func finalizersOf(srv *fakeapi.Server, name string) int {
	o, err := srv.Get(fakeapi.Deployments, "a", name)
	if err != nil {
		return -1
	}
	return len(o.Finalizers)
}
