package collector

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kgc-dev/kgc/internal/fakeapi"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/klog/v2/ktesting"
)

// A CRD is deleted with an instance owning a ConfigMap, and the instance's
// delete event never reaches kgc (its watch delivers nothing): once
// discovery drops the resource and its LIST answers 404, the instance is
// known deleted and the ConfigMap is collected. Before, the instance's node
// stayed observed and the ConfigMap was kept until kgc restarted (and then
// forever: its owner's kind is no longer served).
func TestDeletedCRDInstancesReleaseTheirDependents(t *testing.T) {
	srv := fakeapi.NewServer()
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	widgets := schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "widgets"}
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
	var served atomic.Bool
	served.Store(true)
	srv.Client.PrependReactor("list", "widgets", func(a clienttesting.Action) (bool, runtime.Object, error) {
		if !served.Load() {
			return true, nil, apierrors.NewNotFound(a.GetResource().GroupResource(), "")
		}
		return false, nil, nil
	})
	// The widgets' watch never delivers an event: their deletions are lost.
	srv.Client.PrependWatchReactor("widgets", func(clienttesting.Action) (bool, watch.Interface, error) {
		return true, watch.NewRaceFreeFake(), nil
	})
	srv.Create(t, gvCRDs, &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Name: "widgets.example.com", UID: "crd-uid"}})
	w := srv.Create(t, widgets, &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "w", UID: "w-uid"}})
	srv.Create(t, fakeapi.ConfigMaps, &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "dep", UID: "dep-uid",
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "example.com/v1", Kind: "Widget", Name: w.Name, UID: w.UID}}}})
	disc := &fakeapi.Discovery{Lists: lists(true)}
	c, err := New(Config{
		Metadata: srv.Client, Discovery: disc, Mapper: fakeapi.NewMapper(), Workers: 1,
		Ignored: []schema.GroupResource{fakeapi.Events.GroupResource()}, ResyncPeriod: 100 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	e := &testEnv{srv: srv, disc: disc, c: c, ctx: ctx}
	done := make(chan struct{})
	go func() { defer close(done); _ = c.Run(ctx) }()
	defer func() {
		cancel()
		select {
		case <-done:
		case <-time.After(testTimeout):
			t.Error("Run did not return")
		}
	}()
	e.waitFor(t, "sync", c.Synced)
	e.waitFor(t, "the widget observed", func() bool { _, ok := c.Graph().Object(w.UID); return ok })
	exists := func() bool { _, err := srv.Get(fakeapi.ConfigMaps, "a", "dep"); return err == nil }
	e.consistently(t, "the dependent of a live widget kept", 200*time.Millisecond, exists)

	// The CRD goes: the apiserver deletes its instances (events lost),
	// then discovery drops the resource and its LIST answers 404.
	if err := srv.Client.Tracker().Delete(widgets, "a", "w"); err != nil {
		t.Fatal(err)
	}
	if err := srv.Client.Tracker().Delete(gvCRDs, "", "widgets.example.com"); err != nil {
		t.Fatal(err)
	}
	served.Store(false)
	disc.Mu.Lock()
	disc.Lists = lists(false)
	disc.Mu.Unlock()
	e.waitFor(t, "the dependent of the deleted CRD's instance to be collected", func() bool { return !exists() })
	if it, ok := c.Graph().Item(w.UID); ok && !it.Absent {
		t.Errorf("the deleted instance is still in the graph: %+v", it)
	}
}
