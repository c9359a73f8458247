package collector

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/metadata"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"

	"github.com/kgc-dev/kgc/internal/fakeapi"
)

// pagedLists wraps a metadata client so that the LIST of one resource comes
// in two pages: the first (the object with the smallest name) at once, the
// second only once gate is closed. The workers start while the second page
// is outstanding (a short SyncTimeout), as they do at a million objects
// when the 60 s sync timeout passes before the last resource is listed.
type pagedLists struct {
	metadata.Interface
	gvr  schema.GroupVersionResource
	gate chan struct{}
}

func (p *pagedLists) IsWatchListSemanticsUnSupported() bool { return true }

func (p *pagedLists) Resource(gvr schema.GroupVersionResource) metadata.Getter {
	if gvr != p.gvr {
		return p.Interface.Resource(gvr)
	}
	return pagedGetter{p.Interface.Resource(gvr), p}
}

type pagedGetter struct {
	metadata.Getter
	p *pagedLists
}

func (g pagedGetter) Namespace(ns string) metadata.ResourceInterface {
	return pagedResource{g.Getter.Namespace(ns), g.p}
}

type pagedResource struct {
	metadata.ResourceInterface
	p *pagedLists
}

func (r pagedResource) List(ctx context.Context, opts metav1.ListOptions) (*metav1.PartialObjectMetadataList, error) {
	if opts.Continue != "" {
		select {
		case <-r.p.gate:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	l, err := r.ResourceInterface.List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	slices.SortFunc(l.Items, func(a, b metav1.PartialObjectMetadata) int { return strings.Compare(a.Name, b.Name) })
	if opts.Continue == "" {
		l.Items = l.Items[:min(1, len(l.Items))]
		l.Continue = "page-2"
		return l, nil
	}
	if len(l.Items) > 0 {
		l.Items = l.Items[1:]
	}
	return l, nil
}

// startPaged runs a collector whose list of paged stops after its first
// page until the returned gate is closed; its workers start without
// waiting for it.
func startPaged(t *testing.T, srv *fakeapi.Server, paged schema.GroupVersionResource, hold time.Duration) (*testEnv, chan struct{}, ktesting.Buffer) {
	t.Helper()
	gate := make(chan struct{})
	logger := ktesting.NewLogger(t, ktesting.NewConfig(ktesting.BufferLogs(true)))
	ctx, cancel := context.WithCancel(klog.NewContext(context.Background(), logger))
	c, err := New(Config{
		Metadata: &pagedLists{Interface: srv.Client, gvr: paged, gate: gate}, Discovery: &fakeapi.Discovery{Lists: fakeapi.ResourceLists()},
		Mapper: fakeapi.NewMapper(), Workers: 2, Ignored: []schema.GroupResource{fakeapi.Events.GroupResource()},
		ResyncPeriod: time.Hour, SyncTimeout: 100 * time.Millisecond, UnlistedHold: hold,
	})
	if err != nil {
		t.Fatal(err)
	}
	c.startupLogEvery = 50 * time.Millisecond
	done := make(chan struct{})
	go func() { defer close(done); _ = c.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(testTimeout):
			t.Errorf("Run did not return within %s of cancellation", testTimeout)
		}
	})
	e := &testEnv{srv: srv, c: c, ctx: ctx}
	e.waitFor(t, "workers to start", c.Synced)
	return e, gate, logger.GetSink().(ktesting.Underlier).GetBuffer()
}

// A dependent seen before its owner's resource finished
// its first list waits for that list instead of reading the owner with a
// quorum GET. Once the list is in the graph, owners it brought keep their
// dependents without a GET, and a truly absent owner is still found (one
// GET, 404) and its dependent collected. Decisions that need no owner of
// the listing resource go on meanwhile.
func TestNoOwnerGETsWhileOwnersResourceLists(t *testing.T) {
	srv := fakeapi.NewServer()
	srv.Create(t, fakeapi.Deployments, fakeapi.Object("a", "api", "api-uid")) // first page
	srv.Create(t, fakeapi.Deployments, fakeapi.Object("a", "web", "web-uid")) // second page
	srv.Create(t, fakeapi.ConfigMaps, fakeapi.Object("a", "dep-api", "dep-api-uid", fakeapi.DeploymentRef("api", "api-uid")))
	srv.Create(t, fakeapi.ConfigMaps, fakeapi.Object("a", "dep-web", "dep-web-uid", fakeapi.DeploymentRef("web", "web-uid")))
	srv.Create(t, fakeapi.ConfigMaps, fakeapi.Object("a", "dep-ghost", "dep-ghost-uid", fakeapi.DeploymentRef("ghost", "ghost-uid")))
	srv.Create(t, fakeapi.ConfigMaps, fakeapi.Object("a", "cm-owner", "cm-owner-uid"))
	srv.Create(t, fakeapi.ConfigMaps, fakeapi.Object("a", "cm-dep", "cm-dep-uid", fakeapi.ConfigMapRef("cm-owner", "cm-owner-uid")))

	e, gate, logs := startPaged(t, srv, fakeapi.Deployments, time.Minute)
	if st := e.c.MonitorStatus()[fakeapi.Deployments]; st.Synced {
		t.Fatalf("deployments synced before the gate opened: %+v", st)
	}
	// A deletion resting on a positive fact (its owner observed deleted)
	// is not held up by the listing resource.
	if err := srv.Delete(fakeapi.ConfigMaps, "a", "cm-owner", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitFor(t, "the dependent of a deleted ConfigMap to be collected", func() bool { return e.gone(fakeapi.ConfigMaps, "a", "cm-dep") })
	// The dependents of Deployments wait: no GET, and the ghost's
	// dependent stays until its resource is listed.
	e.consistently(t, "no GET while deployments are listing", 300*time.Millisecond, func() bool {
		gets, _, _ := srv.KGCActions()
		return len(gets) == 0 && !e.gone(fakeapi.ConfigMaps, "a", "dep-ghost")
	})
	if n := e.c.workers.AwaitingList(); n != 2 {
		t.Errorf("%d dependents wait for the deployments' list, want 2 (dep-web, dep-ghost)", n)
	}

	// Start-up progress: configmaps and namespaces
	// are listed, deployments not; five ConfigMaps and the first page's
	// Deployment have been listed so far.
	if listed, total, objects := e.c.StartupProgress(); listed != 2 || total != 3 || objects != 6 {
		t.Errorf("StartupProgress = %d/%d resources, %d objects; want 2/3, 6", listed, total, objects)
	}
	e.waitFor(t, "a progress line", func() bool {
		return strings.Contains(logs.String(), `Listing resources resources=2 total=3 objects=6`)
	})
	if !strings.Contains(logs.String(), `listing=["apps/v1, Resource=deployments"]`) {
		t.Errorf("the progress line does not name the deployments as listing:\n%s", logs.String())
	}

	close(gate)
	e.waitFor(t, "the dependent of a missing owner to be collected", func() bool { return e.gone(fakeapi.ConfigMaps, "a", "dep-ghost") })
	gets, deletes, _ := srv.KGCActions()
	if len(gets) != 1 || gets[0].GetName() != "ghost" {
		var names []string
		for _, g := range gets {
			names = append(names, g.GetName())
		}
		t.Errorf("GETs %v, want one, of the ghost (web and api were listed)", names)
	}
	if len(deletes) != 2 {
		t.Errorf("%d DELETEs, want 2 (cm-dep, dep-ghost)", len(deletes))
	}
	for _, name := range []string{"dep-api", "dep-web"} {
		if e.gone(fakeapi.ConfigMaps, "a", name) {
			t.Errorf("%s was deleted although its owner exists", name)
		}
	}
	if n := e.c.workers.AwaitingList(); n != 0 {
		t.Errorf("%d dependents still wait after the list", n)
	}
	if listed, total, objects := e.c.StartupProgress(); listed != 3 || total != 3 || objects != 7 {
		t.Errorf("StartupProgress = %d/%d resources, %d objects; want 3/3, 7", listed, total, objects)
	}
	e.waitFor(t, "the completion line", func() bool {
		return strings.Contains(logs.String(), `Resources listed resources=3 total=3 objects=7`)
	})
}

// A list that makes no progress for UnlistedHold is not waited for any
// longer: the owners are read with GETs, as for a failing resource.
func TestStalledListFallsBackToGETs(t *testing.T) {
	srv := fakeapi.NewServer()
	srv.Create(t, fakeapi.Deployments, fakeapi.Object("a", "api", "api-uid")) // first page
	srv.Create(t, fakeapi.Deployments, fakeapi.Object("a", "web", "web-uid")) // second page, never served
	srv.Create(t, fakeapi.ConfigMaps, fakeapi.Object("a", "dep-web", "dep-web-uid", fakeapi.DeploymentRef("web", "web-uid")))
	srv.Create(t, fakeapi.ConfigMaps, fakeapi.Object("a", "dep-ghost", "dep-ghost-uid", fakeapi.DeploymentRef("ghost", "ghost-uid")))

	e, _, _ := startPaged(t, srv, fakeapi.Deployments, 300*time.Millisecond)
	e.waitFor(t, "the dependent of a missing owner to be collected", func() bool { return e.gone(fakeapi.ConfigMaps, "a", "dep-ghost") })
	e.waitFor(t, "the owner of dep-web to be read", func() bool {
		gets, _, _ := srv.KGCActions()
		return slices.ContainsFunc(gets, func(g clienttesting.GetActionImpl) bool { return g.GetName() == "web" })
	})
	if e.gone(fakeapi.ConfigMaps, "a", "dep-web") {
		t.Error("dep-web was deleted although its owner exists")
	}
	if st := e.c.MonitorStatus()[fakeapi.Deployments]; st.Synced {
		t.Errorf("deployments synced: %+v; the test wants a stalled list", st)
	}
}

// The benchmark's populated cluster: owners and dependents in one resource,
// a dependent on an earlier page than its owner. It waits for the rest of
// its own resource's list, and no GET is ever sent.
func TestNoOwnerGETsWhileOwnAndOwnersResourceLists(t *testing.T) {
	srv := fakeapi.NewServer()
	srv.Create(t, fakeapi.ConfigMaps, fakeapi.Object("a", "g0-dep", "dep-uid", fakeapi.ConfigMapRef("g0-owner", "owner-uid"))) // first page
	srv.Create(t, fakeapi.ConfigMaps, fakeapi.Object("a", "g0-owner", "owner-uid"))
	e, gate, _ := startPaged(t, srv, fakeapi.ConfigMaps, time.Minute)
	e.waitFor(t, "the dependent to wait for its owner's list", func() bool { return e.c.workers.AwaitingList() == 1 })
	close(gate)
	e.waitFor(t, "the list to be applied", func() bool {
		listed, total, _ := e.c.StartupProgress()
		return listed == total && e.c.workers.AwaitingList() == 0
	})
	e.waitFor(t, "the workers to be idle", e.c.Idle)
	if gets, deletes, patches := srv.KGCActions(); len(gets)+len(deletes)+len(patches) != 0 {
		t.Errorf("%d GETs, %d DELETEs, %d PATCHes; want none", len(gets), len(deletes), len(patches))
	}
}

// Owners deleted with Orphan and Foreground while their
// dependents wait for the owners' resource to finish its first list. Once
// the list brings them: the Orphan owner's dependent is orphaned, never
// deleted (S2), and the owner goes; the Foreground owner's blocking
// dependent is deleted before the owner's finalizer goes (S3); nothing is
// decided, and no GET sent, before the list (L1: everything finishes).
func TestOwnersDeletedWhileDependentsWaitForTheirList(t *testing.T) {
	srv := fakeapi.NewServer()
	srv.Create(t, fakeapi.Deployments, fakeapi.Object("a", "api", "api-uid")) // first page
	srv.Create(t, fakeapi.Deployments, fakeapi.Object("a", "orphan", "orphan-uid"))
	srv.Create(t, fakeapi.Deployments, fakeapi.Object("a", "zfg", "fg-uid"))
	srv.Create(t, fakeapi.ConfigMaps, fakeapi.Object("a", "dep-orphan", "dep-orphan-uid", fakeapi.DeploymentRef("orphan", "orphan-uid")))
	srv.Create(t, fakeapi.ConfigMaps, fakeapi.Object("a", "dep-fg", "dep-fg-uid", fakeapi.DeploymentRef("zfg", "fg-uid")))

	e, gate, _ := startPaged(t, srv, fakeapi.Deployments, time.Minute)
	e.waitFor(t, "both dependents to wait for the deployments' list", func() bool { return e.c.workers.AwaitingList() == 2 })
	for name, policy := range map[string]metav1.DeletionPropagation{"orphan": metav1.DeletePropagationOrphan, "zfg": metav1.DeletePropagationForeground} {
		if err := srv.Delete(fakeapi.Deployments, "a", name, metav1.DeleteOptions{PropagationPolicy: &policy}); err != nil {
			t.Fatal(err)
		}
	}
	e.consistently(t, "nothing decided while deployments list", 200*time.Millisecond, func() bool {
		gets, deletes, patches := srv.KGCActions()
		return len(gets)+len(deletes)+len(patches) == 0
	})
	close(gate)
	e.waitFor(t, "both owners to be gone", func() bool {
		return e.gone(fakeapi.Deployments, "a", "orphan") && e.gone(fakeapi.Deployments, "a", "zfg")
	})
	if e.gone(fakeapi.ConfigMaps, "a", "dep-orphan") {
		t.Error("the dependent of an owner deleted with Orphan was deleted (S2)")
	} else if cur, err := srv.Get(fakeapi.ConfigMaps, "a", "dep-orphan"); err != nil || len(cur.OwnerReferences) != 0 {
		t.Errorf("dep-orphan: %v, %v; want it without references", cur, err)
	}
	if !e.gone(fakeapi.ConfigMaps, "a", "dep-fg") {
		t.Error("the blocking dependent of a Foreground owner outlived it (S3)")
	}
	// S3's order: dep-fg's DELETE before zfg's finalizer patch.
	delAt, patchAt := -1, -1
	for i, a := range srv.Client.Actions() {
		switch a := a.(type) {
		case clienttesting.DeleteActionImpl:
			if a.GetName() == "dep-fg" && delAt < 0 {
				delAt = i
			}
		case clienttesting.PatchActionImpl:
			if a.GetName() == "zfg" && patchAt < 0 {
				patchAt = i
			}
		}
	}
	if delAt < 0 || patchAt < 0 || patchAt < delAt {
		t.Errorf("dep-fg deleted at action %d, zfg's finalizer patched at %d: want the DELETE first", delAt, patchAt)
	}
	if gets, _, _ := srv.KGCActions(); len(gets) != 0 {
		t.Errorf("%d GETs, want none (the list brought both owners)", len(gets))
	}
}
