package collector

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/klog/v2/ktesting"

	"github.com/kgc-dev/kgc/internal/discovery"
	"github.com/kgc-dev/kgc/internal/fakeapi"
)

// A resource whose list fails does not hold up the workers (SyncTimeout is
// an hour here): they start once the other monitors synced, garbage of
// other resources is collected, and a dependent whose owner lives in the
// failing resource is kept, because the unobserved owner is verified with
// a GET (which works) before anything is decided.
func TestWorkersStartWhileAMonitorFails(t *testing.T) {
	srv := fakeapi.NewServer()
	srv.Client.PrependReactor("list", "deployments", func(clienttesting.Action) (bool, runtime.Object, error) {
		return true, nil, errors.New("conversion webhook for apps/v1, Kind=Deployment failed: service not found")
	})
	srv.Create(t, fakeapi.Deployments, fakeapi.Object("a", "web", "web-uid"))
	srv.Create(t, fakeapi.ConfigMaps, fakeapi.Object("a", "kept", "kept-uid", fakeapi.DeploymentRef("web", "web-uid")))
	srv.Create(t, fakeapi.ConfigMaps, fakeapi.Object("a", "garbage", "garbage-uid", fakeapi.ConfigMapRef("ghost", "ghost-uid")))

	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	e := &testEnv{srv: srv, disc: &fakeapi.Discovery{Lists: fakeapi.ResourceLists()}, mapper: fakeapi.NewMapper(), recorder: &fakeapi.Recorder{}, ctx: ctx}
	c, err := New(Config{
		Metadata: srv.Client, Discovery: e.disc, Mapper: e.mapper, Workers: 2,
		Ignored: []schema.GroupResource{fakeapi.Events.GroupResource()}, ResyncPeriod: time.Hour, SyncTimeout: time.Hour,
	})
	if err != nil {
		t.Fatal(err)
	}
	e.c = c
	done := make(chan struct{})
	go func() { defer close(done); _ = c.Run(ctx) }()
	defer func() { cancel(); <-done }()

	e.waitFor(t, "workers to start next to a failing monitor", c.Synced)
	if st := c.MonitorStatus()[fakeapi.Deployments]; st.State() != discovery.StateFailing {
		t.Errorf("deployments monitor %+v, want failing", st)
	}
	e.waitFor(t, "garbage to be collected", func() bool { return e.gone(fakeapi.ConfigMaps, "a", "garbage") })
	e.consistently(t, "dependent of an owner in the failing resource kept", 300*time.Millisecond, func() bool {
		return !e.gone(fakeapi.ConfigMaps, "a", "kept")
	})
	gets, _, _ := srv.KGCActions()
	verified := false
	for _, g := range gets {
		verified = verified || g.GetResource() == fakeapi.Deployments && g.GetName() == "web"
	}
	if !verified {
		t.Error("the unobserved owner was never verified with a GET")
	}
}

var gvCRDs = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// A CRD appearing triggers a rediscovery at once (the periodic one is an
// hour away), retried while discovery lags; its deletion removes the
// monitor again.
func TestCRDEventsDriveRediscovery(t *testing.T) {
	srv := fakeapi.NewServer()
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	lists := func(withWidgets bool) []*metav1.APIResourceList {
		out := append(fakeapi.ResourceLists(), &metav1.APIResourceList{GroupVersion: "apiextensions.k8s.io/v1", APIResources: []metav1.APIResource{
			{Name: "customresourcedefinitions", Kind: "CustomResourceDefinition", Verbs: fakeapi.AllVerbs},
		}})
		if withWidgets {
			out = append(out, &metav1.APIResourceList{GroupVersion: "example.com/v1", APIResources: []metav1.APIResource{
				{Name: "widgets", Kind: "Widget", Namespaced: true, Verbs: fakeapi.AllVerbs},
			}})
		}
		return out
	}
	disc := &fakeapi.Discovery{Lists: lists(false)}
	c, err := New(Config{
		Metadata: srv.Client, Discovery: disc, Mapper: fakeapi.NewMapper(), Workers: 1,
		Ignored: []schema.GroupResource{fakeapi.Events.GroupResource()}, ResyncPeriod: time.Hour,
	})
	if err != nil {
		t.Fatal(err)
	}
	e := &testEnv{srv: srv, disc: disc, c: c, ctx: ctx}
	done := make(chan struct{})
	go func() { defer close(done); _ = c.Run(ctx) }()
	defer func() { cancel(); <-done }()
	e.waitFor(t, "sync", c.Synced)
	e.waitFor(t, "the CRD monitor to watch", func() bool {
		for _, a := range srv.Client.Actions() {
			if w, ok := a.(clienttesting.WatchActionImpl); ok && w.GetResource() == gvCRDs {
				return true
			}
		}
		return false
	})
	widgets := schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "widgets"}
	hasWidgets := func() bool { _, ok := c.MonitorStatus()[widgets]; return ok }

	// Discovery serves the new resource only a while after the CRD event.
	var callsAtEvent atomic.Int64
	disc.Mu.Lock()
	callsAtEvent.Store(int64(disc.Calls))
	disc.Mu.Unlock()
	srv.Create(t, gvCRDs, &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Name: "widgets.example.com", UID: "crd-uid"}})
	e.waitFor(t, "a rediscovery after the CRD event", func() bool {
		disc.Mu.Lock()
		defer disc.Mu.Unlock()
		return int64(disc.Calls) > callsAtEvent.Load()
	})
	time.Sleep(300 * time.Millisecond) // the lag; kgc keeps retrying meanwhile
	disc.Mu.Lock()
	disc.Lists = lists(true)
	disc.Mu.Unlock()
	e.waitFor(t, "the widgets monitor to start", hasWidgets)

	disc.Mu.Lock()
	disc.Lists = lists(false)
	disc.Mu.Unlock()
	if err := srv.Client.Tracker().Delete(gvCRDs, "", "widgets.example.com"); err != nil {
		t.Fatal(err)
	}
	e.waitFor(t, "the widgets monitor to stop", func() bool { return !hasWidgets() })
	if m, h := c.MonitorHandlers(); m != h {
		t.Errorf("%d monitors hold %d handlers", m, h)
	}
}
