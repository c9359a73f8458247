package collector

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/klog/v2/ktesting"

	"github.com/kgc-dev/kgc/internal/fakeapi"
	"github.com/kgc-dev/kgc/internal/graph"
	"github.com/kgc-dev/kgc/internal/rules"
)

// The collector-level tests run the whole collector (discovery, monitors,
// graph builder, workers, apiops) against package fakeapi's API server.

const testTimeout = 15 * time.Second

type testEnv struct {
	srv      *fakeapi.Server
	disc     *fakeapi.Discovery
	mapper   *fakeapi.Mapper
	recorder *fakeapi.Recorder
	c        *Collector
	ctx      context.Context
}

// startCollector runs a collector with 2 workers against srv until the test
// ends, and waits for it to sync and for its informers to watch.
func startCollector(t *testing.T, srv *fakeapi.Server, opts ...func(*Config)) *testEnv {
	t.Helper()
	e := launchCollector(t, srv, opts...)
	c := e.c
	e.waitFor(t, "collector to sync", func() bool { return c.Synced() })
	e.waitFor(t, "informers to watch", func() bool {
		watching := map[schema.GroupVersionResource]bool{}
		for _, a := range srv.Client.Actions() {
			if w, ok := a.(clienttesting.WatchActionImpl); ok {
				watching[w.GetResource()] = true
			}
		}
		return watching[fakeapi.ConfigMaps] && watching[fakeapi.Deployments] && watching[fakeapi.Namespaces]
	})
	return e
}

// launchCollector runs a collector with 2 workers against srv (opts
// adjust its config; a *fakeapi.Discovery given there becomes e.disc)
// until the test ends, without waiting for anything.
func launchCollector(t *testing.T, srv *fakeapi.Server, opts ...func(*Config)) *testEnv {
	t.Helper()
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	e := &testEnv{srv: srv, disc: &fakeapi.Discovery{Lists: fakeapi.ResourceLists()}, mapper: fakeapi.NewMapper(), recorder: &fakeapi.Recorder{}, ctx: ctx}
	cfg := Config{
		Metadata:     srv.Client,
		Discovery:    e.disc,
		Mapper:       e.mapper,
		Recorder:     e.recorder,
		Workers:      2,
		Ignored:      []schema.GroupResource{fakeapi.Events.GroupResource()},
		ResyncPeriod: time.Hour,
		SyncTimeout:  testTimeout,
	}
	for _, o := range opts {
		o(&cfg)
	}
	if d, ok := cfg.Discovery.(*fakeapi.Discovery); ok {
		e.disc = d
	}
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	e.c = c
	runErr := make(chan error, 1)
	go func() { runErr <- c.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-runErr:
			if err != nil {
				t.Errorf("Run returned %v", err)
			}
		case <-time.After(testTimeout):
			t.Errorf("Run did not return within %s of cancellation", testTimeout)
		}
	})
	return e
}

func (e *testEnv) waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	err := wait.PollUntilContextTimeout(e.ctx, 10*time.Millisecond, testTimeout, true, func(context.Context) (bool, error) {
		return cond(), nil
	})
	if err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
}

// consistently fails if cond turns false within d.
func (e *testEnv) consistently(t *testing.T, what string, d time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if !cond() {
			t.Fatalf("%s stopped holding", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (e *testEnv) gone(gvr schema.GroupVersionResource, ns, name string) bool {
	_, err := e.srv.Get(gvr, ns, name)
	return apierrors.IsNotFound(err)
}

func (e *testEnv) observed(uid types.UID, rv string) bool {
	o, ok := e.c.Graph().Object(uid)
	return ok && o.ResourceVersion == rv
}

func checkDelete(t *testing.T, d clienttesting.DeleteActionImpl, gvr schema.GroupVersionResource, obj *metav1.PartialObjectMetadata, policy metav1.DeletionPropagation) {
	t.Helper()
	if d.GetResource() != gvr || d.GetNamespace() != obj.Namespace || d.GetName() != obj.Name {
		t.Errorf("DELETE %s %s/%s, want %s %s/%s", d.GetResource(), d.GetNamespace(), d.GetName(), gvr, obj.Namespace, obj.Name)
	}
	pre := d.DeleteOptions.Preconditions
	if pre == nil || pre.UID == nil || *pre.UID != obj.UID {
		t.Errorf("DELETE of %s without the UID precondition %s: %+v", obj.Name, obj.UID, pre)
	}
	if pre != nil && pre.ResourceVersion != nil && *pre.ResourceVersion != obj.ResourceVersion {
		t.Errorf("DELETE of %s: resourceVersion precondition %s, want %s", obj.Name, *pre.ResourceVersion, obj.ResourceVersion)
	}
	if p := d.DeleteOptions.PropagationPolicy; p == nil || *p != policy {
		t.Errorf("DELETE of %s: propagation policy %v, want %s", obj.Name, p, policy)
	}
}

func TestCollectorDeletesDependentOfDeletedOwner(t *testing.T) {
	srv := fakeapi.NewServer()
	e := startCollector(t, srv)

	// Owner first, so the dependent is never checked against a placeholder.
	owner := srv.Create(t, fakeapi.Deployments, fakeapi.Object("a", "web", "owner-uid"))
	e.waitFor(t, "owner in the graph", func() bool { return e.observed(owner.UID, owner.ResourceVersion) })
	dep := srv.Create(t, fakeapi.ConfigMaps, fakeapi.Object("a", "web-config", "dep-uid", fakeapi.DeploymentRef("web", "owner-uid")))
	bystander := srv.Create(t, fakeapi.ConfigMaps, fakeapi.Object("a", "unowned", "bystander-uid"))
	e.waitFor(t, "dependent in the graph", func() bool { return e.observed(dep.UID, dep.ResourceVersion) })

	if err := srv.Delete(fakeapi.Deployments, "a", "web", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitFor(t, "dependent to be collected", func() bool { return e.gone(fakeapi.ConfigMaps, "a", "web-config") })

	gets, deletes, patches := srv.KGCActions()
	if len(deletes) != 1 {
		t.Fatalf("kgc sent %d DELETEs, want 1: %+v", len(deletes), deletes)
	}
	checkDelete(t, deletes[0], fakeapi.ConfigMaps, dep, metav1.DeletePropagationBackground)
	// The owner's delete was observed: the absent cache answers, no GET.
	if len(gets) != 0 || len(patches) != 0 {
		t.Errorf("kgc sent %d GETs and %d PATCHes, want none", len(gets), len(patches))
	}
	if e.gone(fakeapi.ConfigMaps, "a", "unowned") {
		t.Errorf("unowned fakeapi.Object %s was deleted", bystander.Name)
	}
	e.waitFor(t, "graph to drop the collected objects", func() bool { return e.c.Graph().Len() == 1 })
	if e.mapper.Resets.Load() == 0 {
		t.Error("REST mapper never reset although monitors were added")
	}
	st := e.c.MonitorStatus()
	if len(st) != 3 || !st[fakeapi.ConfigMaps].Synced || !st[fakeapi.Deployments].Synced || !st[fakeapi.Namespaces].Synced {
		t.Errorf("MonitorStatus = %v, want configmaps, deployments and namespaces synced (events ignored)", st)
	}
}

func TestCollectorDependentOfNeverSeenOwner(t *testing.T) {
	srv := fakeapi.NewServer()
	// Both exist before the collector starts; the owner was never created.
	dep := srv.Create(t, fakeapi.ConfigMaps, fakeapi.Object("a", "orphaned", "dep-uid", fakeapi.DeploymentRef("ghost", "ghost-uid")))
	live := srv.Create(t, fakeapi.Deployments, fakeapi.Object("a", "web", "web-uid"))
	srv.Create(t, fakeapi.ConfigMaps, fakeapi.Object("a", "kept", "kept-uid", fakeapi.DeploymentRef("web", "web-uid"), fakeapi.DeploymentRef("ghost", "ghost-uid")))
	e := startCollector(t, srv)

	e.waitFor(t, "dependent of a missing owner to be collected", func() bool { return e.gone(fakeapi.ConfigMaps, "a", "orphaned") })
	e.waitFor(t, "dangling reference to be removed", func() bool {
		o, err := srv.Get(fakeapi.ConfigMaps, "a", "kept")
		return err == nil && len(o.OwnerReferences) == 1 && o.OwnerReferences[0].UID == live.UID
	})
	gets, deletes, patches := srv.KGCActions()
	if len(deletes) != 1 {
		t.Fatalf("DELETEs = %+v, want one", deletes)
	}
	checkDelete(t, deletes[0], fakeapi.ConfigMaps, dep, metav1.DeletePropagationBackground)
	// The ghost is looked up once and then remembered as absent.
	ghostGets := 0
	for _, g := range gets {
		if g.GetName() == "ghost" {
			ghostGets++
		}
	}
	// Two workers may look it up concurrently before either caches it.
	if ghostGets < 1 || ghostGets > 2 {
		t.Errorf("ghost owner looked up %d times, want 1 or 2 (absent cache)", ghostGets)
	}
	if len(patches) != 1 {
		t.Fatalf("PATCHes = %d, want 1", len(patches))
	}
	body := string(patches[0].GetPatch())
	if patches[0].GetPatchType() != types.JSONPatchType || !strings.Contains(body, `{"op":"test","path":"/metadata/uid","value":"kept-uid"}`) ||
		!strings.Contains(body, `{"op":"test","path":"/metadata/ownerReferences","value":[`) {
		t.Errorf("ownerReferences patch %s does not test the uid and the list it replaces", body)
	}
}

func TestCollectorOrphan(t *testing.T) {
	srv := fakeapi.NewServer()
	owner := fakeapi.Object("a", "web", "owner-uid")
	owner.DeletionTimestamp = &metav1.Time{Time: time.Now()}
	owner.Finalizers = []string{metav1.FinalizerOrphanDependents, "example.com/keep"}
	srv.Create(t, fakeapi.Deployments, owner)
	other := srv.Create(t, fakeapi.Deployments, fakeapi.Object("a", "other", "other-uid"))
	srv.Create(t, fakeapi.ConfigMaps, fakeapi.Object("a", "dep", "dep-uid", fakeapi.DeploymentRef("web", "owner-uid")))
	srv.Create(t, fakeapi.ConfigMaps, fakeapi.Object("a", "dep2", "dep2-uid", fakeapi.DeploymentRef("other", "other-uid"), fakeapi.DeploymentRef("web", "owner-uid")))
	e := startCollector(t, srv)

	e.waitFor(t, "orphan finalizer to be removed", func() bool {
		o, err := srv.Get(fakeapi.Deployments, "a", "web")
		return err == nil && slices.Equal(o.Finalizers, []string{"example.com/keep"})
	})
	for _, name := range []string{"dep", "dep2"} {
		d, err := srv.Get(fakeapi.ConfigMaps, "a", name)
		if err != nil {
			t.Fatalf("dependent %s: %v", name, err)
		}
		for _, r := range d.OwnerReferences {
			if r.UID == "owner-uid" {
				t.Errorf("dependent %s still references the orphaning owner", name)
			}
		}
	}
	if d, _ := srv.Get(fakeapi.ConfigMaps, "a", "dep2"); len(d.OwnerReferences) != 1 || d.OwnerReferences[0].UID != other.UID {
		t.Errorf("dep2 lost its other owner: %+v", d.OwnerReferences)
	}
	_, deletes, patches := srv.KGCActions()
	if len(deletes) != 0 {
		t.Errorf("kgc deleted while orphaning: %+v", deletes)
	}
	// Dependents first, the owner's finalizer last.
	if n := len(patches); n != 3 || patches[n-1].GetName() != "web" {
		t.Fatalf("PATCHes = %v, want the two dependents then the owner", patchNames(patches))
	}

	// The owner goes away; the orphans stay.
	srv.SetFinalizers(t, fakeapi.Deployments, "a", "web")
	e.waitFor(t, "owner gone", func() bool { return e.gone(fakeapi.Deployments, "a", "web") })
	e.consistently(t, "orphans surviving their owner", 300*time.Millisecond, func() bool {
		return !e.gone(fakeapi.ConfigMaps, "a", "dep") && !e.gone(fakeapi.ConfigMaps, "a", "dep2")
	})
}

func patchNames(ps []clienttesting.PatchActionImpl) []string {
	var out []string
	for _, p := range ps {
		out = append(out, p.GetName())
	}
	return out
}

func TestCollectorForegroundCascade(t *testing.T) {
	srv := fakeapi.NewServer()
	// owner (foreground) <- mid (blocking) <- leaf (blocking)
	owner := fakeapi.Object("a", "web", "owner-uid")
	owner.DeletionTimestamp = &metav1.Time{Time: time.Now()}
	owner.Finalizers = []string{metav1.FinalizerDeleteDependents, "example.com/keep"}
	srv.Create(t, fakeapi.Deployments, owner)
	mid := srv.Create(t, fakeapi.ConfigMaps, fakeapi.Object("a", "mid", "mid-uid", fakeapi.DeploymentRef("web", "owner-uid")))
	leaf := srv.Create(t, fakeapi.ConfigMaps, fakeapi.Object("a", "leaf", "leaf-uid", fakeapi.ConfigMapRef("mid", "mid-uid")))
	e := startCollector(t, srv)

	e.waitFor(t, "the cascade to reach the owner", func() bool {
		o, err := srv.Get(fakeapi.Deployments, "a", "web")
		return err == nil && slices.Equal(o.Finalizers, []string{"example.com/keep"})
	})
	if !e.gone(fakeapi.ConfigMaps, "a", "mid") || !e.gone(fakeapi.ConfigMaps, "a", "leaf") {
		t.Fatal("owner released before its dependents were gone")
	}
	_, deletes, _ := srv.KGCActions()
	byName := map[string]clienttesting.DeleteActionImpl{}
	for _, d := range deletes {
		byName[d.GetName()] = d
	}
	// mid has dependents of its own: it goes in the foreground.
	checkDelete(t, byName["mid"], fakeapi.ConfigMaps, mid, metav1.DeletePropagationForeground)
	checkDelete(t, byName["leaf"], fakeapi.ConfigMaps, leaf, metav1.DeletePropagationBackground)
}

func TestCollectorCrossNamespaceOwner(t *testing.T) {
	srv := fakeapi.NewServer()
	owner := srv.Create(t, fakeapi.ConfigMaps, fakeapi.Object("b", "owner", "owner-uid"))
	srv.Create(t, fakeapi.ConfigMaps, fakeapi.Object("a", "dep", "dep-uid", fakeapi.ConfigMapRef("owner", "owner-uid")))
	e := startCollector(t, srv)

	e.waitFor(t, "dependent with a cross-namespace owner to be collected", func() bool { return e.gone(fakeapi.ConfigMaps, "a", "dep") })
	if e.gone(fakeapi.ConfigMaps, "b", owner.Name) {
		t.Fatal("the owner in the other namespace was deleted")
	}
	e.waitFor(t, "the fakeapi.Warning", func() bool { return len(e.recorder.Get()) > 0 })
	w := e.recorder.Get()
	if len(w) != 1 || w[0].Reason != "OwnerRefInvalidNamespace" || w[0].Object.UID != "dep-uid" || !strings.Contains(w[0].Message, `"b"`) {
		t.Errorf("warnings = %+v, want one OwnerRefInvalidNamespace on dep naming namespace b", w)
	}
}

func TestCollectorKeepsDependentOfUnservedKind(t *testing.T) {
	srv := fakeapi.NewServer()
	srv.Create(t, fakeapi.ConfigMaps, fakeapi.Object("a", "dep", "dep-uid", metav1.OwnerReference{APIVersion: "example.com/v1", Kind: "Widget", Name: "w", UID: "w-uid"}))
	e := startCollector(t, srv)
	e.consistently(t, "dependent of an unserved kind kept", 500*time.Millisecond, func() bool { return !e.gone(fakeapi.ConfigMaps, "a", "dep") })
	if gets, deletes, patches := srv.KGCActions(); len(gets)+len(deletes)+len(patches) != 0 {
		t.Errorf("kgc called the API for an unresolvable owner: %d GETs, %d DELETEs, %d PATCHes", len(gets), len(deletes), len(patches))
	}
}

// TestCollectorStaleDecisionFailsSafely: kgc decides from its informer
// cache; if the object changed since, the DELETE's preconditions make the
// decision fail instead of deleting.
func TestCollectorStaleDecisionFailsSafely(t *testing.T) {
	srv := fakeapi.NewServer()
	e := startCollector(t, srv)
	owner := srv.Create(t, fakeapi.Deployments, fakeapi.Object("a", "web", "owner-uid"))
	e.waitFor(t, "owner in the graph", func() bool { return e.observed(owner.UID, owner.ResourceVersion) })
	dep := srv.Create(t, fakeapi.ConfigMaps, fakeapi.Object("a", "dep", "dep-uid", fakeapi.DeploymentRef("web", "owner-uid")))
	e.waitFor(t, "dependent in the graph", func() bool { return e.observed(dep.UID, dep.ResourceVersion) })

	// Stall DELETEs of dep until its owner reference is gone on the server,
	// so that kgc's decision (made while dep still had the ref) is stale.
	release := make(chan struct{})
	var stalled atomic.Bool
	srv.Client.PrependReactor("delete", "configmaps", func(a clienttesting.Action) (bool, runtime.Object, error) {
		if !stalled.Swap(true) {
			<-release
		}
		return false, nil, nil
	})
	if err := srv.Delete(fakeapi.Deployments, "a", "web", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitFor(t, "kgc to try deleting dep", stalled.Load)
	// Someone else drops the reference meanwhile (bypassing the fake's lock
	// held by the stalled reactor chain: the tracker has its own).
	go func() {
		defer close(release)
		o, err := srv.Get(fakeapi.ConfigMaps, "a", "dep")
		if err != nil {
			t.Error(err)
			return
		}
		o.OwnerReferences = nil
		o.ResourceVersion = srv.NextRV()
		if err := srv.Client.Tracker().Update(fakeapi.ConfigMaps, o, "a"); err != nil {
			t.Error(err)
		}
	}()
	<-release
	e.consistently(t, "dep surviving a stale decision", 500*time.Millisecond, func() bool { return !e.gone(fakeapi.ConfigMaps, "a", "dep") })
}

func TestNewValidatesConfig(t *testing.T) {
	_, err := New(Config{Workers: -1, ResyncPeriod: -time.Second})
	if err == nil {
		t.Fatal("New accepted an empty config")
	}
	for _, want := range []string{"metadata client", "discovery client", "REST mapper", "workers", "resync period"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
	c, err := New(Config{Metadata: fakeapi.NewServer().Client, Discovery: &fakeapi.Discovery{}, Mapper: fakeapi.NewMapper()})
	if err != nil {
		t.Fatal(err)
	}
	if c.cfg.Workers != 20 || c.cfg.ResyncPeriod != 30*time.Second || c.cfg.SyncTimeout != time.Minute {
		t.Errorf("defaults = %d workers, %s resync, %s sync timeout", c.cfg.Workers, c.cfg.ResyncPeriod, c.cfg.SyncTimeout)
	}
	if c.Synced() {
		t.Error("Synced before Run")
	}
}

func TestRunStopsWhenDiscoveryNeverWorks(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	d := &fakeapi.Discovery{Err: errors.New("apiserver down")}
	c, err := New(Config{Metadata: fakeapi.NewServer().Client, Discovery: d, Mapper: fakeapi.NewMapper(), Workers: 1})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run = %v, want nil on cancellation", err)
		}
	case <-time.After(testTimeout):
		t.Fatal("Run did not return after its context ended")
	}
	if c.Synced() {
		t.Error("Synced without discovery")
	}
	if d.Calls == 0 {
		t.Error("discovery never called")
	}
}

// TestRunStopsDuringInitialGraphBuild cancels Run while it waits for the
// graph builder to drain the events of the initial list (a large cluster
// takes seconds there). The graph builder stops at cancellation, so Run must
// not keep waiting for a queue nobody drains any more.
func TestRunStopsDuringInitialGraphBuild(t *testing.T) {
	srv := fakeapi.NewServer()
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	c, err := New(Config{
		Metadata: srv.Client, Discovery: &fakeapi.Discovery{Lists: fakeapi.ResourceLists()}, Mapper: fakeapi.NewMapper(),
		Workers: 1, Ignored: []schema.GroupResource{fakeapi.Events.GroupResource()}, ResyncPeriod: time.Hour,
	})
	if err != nil {
		t.Fatal(err)
	}
	// A backlog that takes a while to apply: one object flipping between two
	// sets of 200 owners, so that every event unlinks and links 200 edges.
	var refsA, refsB []metav1.OwnerReference
	for i := range 200 {
		refsA = append(refsA, fakeapi.ConfigMapRef(fmt.Sprintf("a%d", i), types.UID(fmt.Sprintf("a%d", i))))
		refsB = append(refsB, fakeapi.ConfigMapRef(fmt.Sprintf("b%d", i), types.UID(fmt.Sprintf("b%d", i))))
	}
	id := rules.Identity{APIVersion: "v1", Kind: "ConfigMap", Namespace: "a", Name: "busy", UID: "busy"}
	for i := range 40000 {
		refs := refsA
		if i%2 == 1 {
			refs = refsB
		}
		c.builder.Enqueue(graph.Event{Type: graph.Upsert, Object: rules.Object{Identity: id, ResourceVersion: strconv.Itoa(i), OwnerReferences: refs}})
	}
	// The lists must be delivered while the backlog is still applied:
	// without this, each list's pages wait for the queue to get below the
	// builder's bound (about a page) first.
	c.builder.SetListBacklog(1 << 20)
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	err = wait.PollUntilContextTimeout(ctx, 5*time.Millisecond, testTimeout, true, func(context.Context) (bool, error) {
		return c.builder.Monitors() > 0 && c.builder.Settled(), nil
	})
	if err != nil {
		t.Fatalf("monitors never synced: %v", err)
	}
	time.Sleep(300 * time.Millisecond) // Run's sync poll (50ms) has ended: it waits for the backlog now
	if c.builder.Backlog() == 0 || c.Synced() {
		t.Skip("the backlog drained before cancellation; nothing exercised")
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run = %v", err)
		}
	case <-time.After(testTimeout):
		t.Fatalf("Run did not return within %s of cancellation (%d events left in the queue)", testTimeout, c.builder.Backlog())
	}
}
