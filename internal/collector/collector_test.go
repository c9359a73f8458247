package collector

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
	"k8s.io/apimachinery/pkg/util/wait"
	metadatafake "k8s.io/client-go/metadata/fake"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/klog/v2/ktesting"

	"github.com/kgc-dev/kgc/internal/graph"
	"github.com/kgc-dev/kgc/internal/rules"
)

// The collector-level tests run the real pipeline (discovery, metadata
// informers, graph builder, workers, apiops) against client-go's fake
// metadata client.
//
// The fake's object tracker alone is too forgiving for a garbage
// collector: it ignores DELETE preconditions and propagation policies,
// never changes resourceVersions (so kgc's own patches would be invisible
// to its informers, which drop updates with an unchanged resourceVersion)
// and never finalizes objects. fakeServer adds, through reactors, the
// apiserver behaviour GC depends on: conditional DELETE and PATCH,
// resourceVersion bumps, deletionTimestamp + finalizers for Foreground and
// Orphan deletes, and removal once the last finalizer goes.

const testTimeout = 15 * time.Second

var (
	testEvents = schema.GroupVersionResource{Version: "v1", Resource: "events"}
)

type fakeServer struct {
	client *metadatafake.FakeMetadataClient
	mu     sync.Mutex // serializes read-modify-write sequences on the tracker
	rv     atomic.Int64
}

func newFakeServer() *fakeServer {
	s := &fakeServer{client: metadatafake.NewSimpleMetadataClient(metadatafake.NewTestScheme())}
	s.rv.Store(100)
	s.client.PrependReactor("delete", "*", func(a clienttesting.Action) (bool, runtime.Object, error) {
		d := a.(clienttesting.DeleteActionImpl)
		return true, nil, s.delete(d.GetResource(), d.GetNamespace(), d.GetName(), d.DeleteOptions)
	})
	s.client.PrependReactor("patch", "*", func(a clienttesting.Action) (bool, runtime.Object, error) {
		p := a.(clienttesting.PatchActionImpl)
		obj, err := s.patch(p.GetResource(), p.GetNamespace(), p.GetName(), p.GetPatchType(), p.GetPatch())
		if err != nil {
			return true, nil, err
		}
		return true, obj, nil
	})
	return s
}

func (s *fakeServer) nextRV() string { return strconv.FormatInt(s.rv.Add(1), 10) }

// create stores a copy of o with a fresh resourceVersion and returns it.
func (s *fakeServer) create(t *testing.T, gvr schema.GroupVersionResource, o *metav1.PartialObjectMetadata) *metav1.PartialObjectMetadata {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	o = o.DeepCopy()
	o.ResourceVersion = s.nextRV()
	if err := s.client.Tracker().Create(gvr, o, o.Namespace); err != nil {
		t.Fatalf("creating %s %s/%s: %v", gvr.Resource, o.Namespace, o.Name, err)
	}
	return o
}

func (s *fakeServer) get(gvr schema.GroupVersionResource, ns, name string) (*metav1.PartialObjectMetadata, error) {
	obj, err := s.client.Tracker().Get(gvr, ns, name)
	if err != nil {
		return nil, err
	}
	return obj.(*metav1.PartialObjectMetadata).DeepCopy(), nil
}

// store writes o back with a new resourceVersion, or removes it when it is
// being deleted and has no finalizers left. Callers hold mu.
func (s *fakeServer) store(gvr schema.GroupVersionResource, o *metav1.PartialObjectMetadata) error {
	if o.DeletionTimestamp != nil && len(o.Finalizers) == 0 {
		return s.client.Tracker().Delete(gvr, o.Namespace, o.Name)
	}
	o.ResourceVersion = s.nextRV()
	return s.client.Tracker().Update(gvr, o, o.Namespace)
}

// update replaces an object's finalizers as a client other than kgc would.
func (s *fakeServer) setFinalizers(t *testing.T, gvr schema.GroupVersionResource, ns, name string, finalizers ...string) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	o, err := s.get(gvr, ns, name)
	if err != nil {
		t.Fatal(err)
	}
	o.Finalizers = finalizers
	if err := s.store(gvr, o); err != nil {
		t.Fatal(err)
	}
}

func conflict(gvr schema.GroupVersionResource, name, what string) error {
	return apierrors.NewConflict(gvr.GroupResource(), name, errors.New(what+" precondition failed"))
}

func (s *fakeServer) delete(gvr schema.GroupVersionResource, ns, name string, opts metav1.DeleteOptions) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	o, err := s.get(gvr, ns, name)
	if err != nil {
		return err
	}
	if p := opts.Preconditions; p != nil {
		if p.UID != nil && *p.UID != o.UID {
			return conflict(gvr, name, "uid")
		}
		if p.ResourceVersion != nil && *p.ResourceVersion != o.ResourceVersion {
			return conflict(gvr, name, "resourceVersion")
		}
	}
	policy := metav1.DeletePropagationBackground
	if opts.PropagationPolicy != nil {
		policy = *opts.PropagationPolicy
	}
	switch policy {
	case metav1.DeletePropagationForeground:
		if !slices.Contains(o.Finalizers, metav1.FinalizerDeleteDependents) {
			o.Finalizers = append(o.Finalizers, metav1.FinalizerDeleteDependents)
		}
	case metav1.DeletePropagationOrphan:
		if !slices.Contains(o.Finalizers, metav1.FinalizerOrphanDependents) {
			o.Finalizers = append(o.Finalizers, metav1.FinalizerOrphanDependents)
		}
	}
	if len(o.Finalizers) == 0 {
		return s.client.Tracker().Delete(gvr, ns, name)
	}
	if o.DeletionTimestamp == nil {
		now := metav1.Now()
		o.DeletionTimestamp = &now
	}
	return s.store(gvr, o)
}

// patch applies the patches kgc sends, as the apiserver would: JSON
// patches (a failed test answers 422), strategic merge patches of
// metadata.ownerReferences keyed by uid, and JSON merge patches of
// metadata.ownerReferences and/or metadata.finalizers with metadata.uid and
// metadata.resourceVersion as preconditions. A patch touching anything but
// those metadata fields is an error.
func (s *fakeServer) patch(gvr schema.GroupVersionResource, ns, name string, pt types.PatchType, data []byte) (*metav1.PartialObjectMetadata, error) {
	switch pt {
	case types.MergePatchType:
	case types.JSONPatchType, types.StrategicMergePatchType:
		return s.patchJSON(gvr, ns, name, pt, data)
	default:
		return nil, apierrors.NewBadRequest(fmt.Sprintf("unexpected patch type %s", pt))
	}
	var raw map[string]map[string]json.RawMessage
	if err := json.Unmarshal(data, &raw); err != nil {
		return nil, apierrors.NewBadRequest(err.Error())
	}
	for k, m := range raw {
		if k != "metadata" {
			return nil, apierrors.NewBadRequest("patch touches " + k)
		}
		for f := range m {
			if !slices.Contains([]string{"uid", "resourceVersion", "ownerReferences", "finalizers"}, f) {
				return nil, apierrors.NewBadRequest("patch touches metadata." + f)
			}
		}
	}
	var p struct {
		Metadata struct {
			UID             types.UID                `json:"uid"`
			ResourceVersion string                   `json:"resourceVersion"`
			OwnerReferences *[]metav1.OwnerReference `json:"ownerReferences"`
			Finalizers      *[]string                `json:"finalizers"`
		} `json:"metadata"`
	}
	if err := json.Unmarshal(data, &p); err != nil {
		return nil, apierrors.NewBadRequest(err.Error())
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	o, err := s.get(gvr, ns, name)
	if err != nil {
		return nil, err
	}
	if p.Metadata.UID != "" && p.Metadata.UID != o.UID {
		return nil, conflict(gvr, name, "uid")
	}
	if p.Metadata.ResourceVersion != "" && p.Metadata.ResourceVersion != o.ResourceVersion {
		return nil, conflict(gvr, name, "resourceVersion")
	}
	if p.Metadata.OwnerReferences != nil {
		o.OwnerReferences = *p.Metadata.OwnerReferences
	}
	if p.Metadata.Finalizers != nil {
		o.Finalizers = *p.Metadata.Finalizers
	}
	if err := s.store(gvr, o); err != nil {
		return nil, err
	}
	return o, nil
}

// patchJSON applies a JSON patch or a strategic merge patch to the object's
// JSON; only ownerReferences and finalizers may change.
func (s *fakeServer) patchJSON(gvr schema.GroupVersionResource, ns, name string, pt types.PatchType, data []byte) (*metav1.PartialObjectMetadata, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	o, err := s.get(gvr, ns, name)
	if err != nil {
		return nil, err
	}
	orig, err := json.Marshal(o)
	if err != nil {
		return nil, err
	}
	var patched []byte
	if pt == types.JSONPatchType {
		p, err := jsonpatch.DecodePatch(data)
		if err != nil {
			return nil, apierrors.NewBadRequest(err.Error())
		}
		if patched, err = p.Apply(orig); err != nil {
			return nil, apierrors.NewGenericServerResponse(http.StatusUnprocessableEntity, "", schema.GroupResource{}, "", err.Error(), 0, false)
		}
	} else if patched, err = strategicpatch.StrategicMergePatch(orig, data, &metav1.PartialObjectMetadata{}); err != nil {
		return nil, apierrors.NewBadRequest(err.Error())
	}
	var n metav1.PartialObjectMetadata
	if err := json.Unmarshal(patched, &n); err != nil {
		return nil, apierrors.NewBadRequest(err.Error())
	}
	if n.UID != o.UID {
		return nil, conflict(gvr, name, "uid")
	}
	// Compared after the same JSON round trip (timestamps lose their
	// sub-second part in it).
	want := &metav1.PartialObjectMetadata{}
	if err := json.Unmarshal(orig, want); err != nil {
		return nil, err
	}
	want.OwnerReferences, want.Finalizers = n.OwnerReferences, n.Finalizers
	if !apiequality.Semantic.DeepEqual(want, &n) {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("patch %s touches more than ownerReferences and finalizers", data))
	}
	o.OwnerReferences, o.Finalizers = n.OwnerReferences, n.Finalizers
	if err := s.store(gvr, o); err != nil {
		return nil, err
	}
	return o, nil
}

// kgcActions returns the writes and reads kgc made (the informers' list and
// watch calls left out).
func (s *fakeServer) kgcActions() (gets []clienttesting.GetActionImpl, deletes []clienttesting.DeleteActionImpl, patches []clienttesting.PatchActionImpl) {
	for _, a := range s.client.Actions() {
		switch a := a.(type) {
		case clienttesting.GetActionImpl:
			gets = append(gets, a)
		case clienttesting.DeleteActionImpl:
			deletes = append(deletes, a)
		case clienttesting.PatchActionImpl:
			patches = append(patches, a)
		}
	}
	return gets, deletes, patches
}

// fakeDiscovery serves fixed resource lists.
type fakeDiscovery struct {
	mu    sync.Mutex
	lists []*metav1.APIResourceList
	err   error
	calls int
}

func (d *fakeDiscovery) ServerPreferredResources() ([]*metav1.APIResourceList, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.calls++
	return d.lists, d.err
}

var allVerbs = metav1.Verbs{"create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"}

func testResourceLists() []*metav1.APIResourceList {
	return []*metav1.APIResourceList{
		{GroupVersion: "v1", APIResources: []metav1.APIResource{
			{Name: "configmaps", Kind: "ConfigMap", Namespaced: true, Verbs: allVerbs},
			{Name: "namespaces", Kind: "Namespace", Verbs: allVerbs},
			{Name: "events", Kind: "Event", Namespaced: true, Verbs: allVerbs},
		}},
		{GroupVersion: "apps/v1", APIResources: []metav1.APIResource{
			{Name: "deployments", Kind: "Deployment", Namespaced: true, Verbs: allVerbs},
			{Name: "deployments/scale", Kind: "Scale", Namespaced: true, Verbs: metav1.Verbs{"get", "patch", "update"}},
		}},
	}
}

type warning struct {
	object          rules.Identity
	reason, message string
}

type fakeRecorder struct {
	mu       sync.Mutex
	warnings []warning
}

func (r *fakeRecorder) Warning(object rules.Identity, reason, message string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.warnings = append(r.warnings, warning{object, reason, message})
}

func (r *fakeRecorder) get() []warning {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.warnings)
}

type testEnv struct {
	srv      *fakeServer
	disc     *fakeDiscovery
	mapper   *resettableMapper
	recorder *fakeRecorder
	c        *Collector
	ctx      context.Context
}

// startCollector runs a collector with 2 workers against srv until the test
// ends, and waits for it to sync and for its informers to watch.
func startCollector(t *testing.T, srv *fakeServer) *testEnv {
	t.Helper()
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	e := &testEnv{srv: srv, disc: &fakeDiscovery{lists: testResourceLists()}, mapper: newTestMapper(), recorder: &fakeRecorder{}, ctx: ctx}
	c, err := New(Config{
		Metadata:     srv.client,
		Discovery:    e.disc,
		Mapper:       e.mapper,
		Recorder:     e.recorder,
		Workers:      2,
		Ignored:      []schema.GroupResource{testEvents.GroupResource()},
		ResyncPeriod: time.Hour,
		SyncTimeout:  testTimeout,
	})
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
	e.waitFor(t, "collector to sync", func() bool { return c.Synced() })
	e.waitFor(t, "informers to watch", func() bool {
		watching := map[schema.GroupVersionResource]bool{}
		for _, a := range srv.client.Actions() {
			if w, ok := a.(clienttesting.WatchActionImpl); ok {
				watching[w.GetResource()] = true
			}
		}
		return watching[gvConfigMaps] && watching[gvDeployments] && watching[gvNamespaces]
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
	_, err := e.srv.get(gvr, ns, name)
	return apierrors.IsNotFound(err)
}

func (e *testEnv) observed(uid types.UID, rv string) bool {
	o, ok := e.c.Graph().Object(uid)
	return ok && o.ResourceVersion == rv
}

func object(ns, name string, uid types.UID, refs ...metav1.OwnerReference) *metav1.PartialObjectMetadata {
	return &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: uid, OwnerReferences: refs}}
}

func deploymentRef(name string, uid types.UID) metav1.OwnerReference {
	return metav1.OwnerReference{APIVersion: "apps/v1", Kind: "Deployment", Name: name, UID: uid, BlockOwnerDeletion: boolPtr(true), Controller: boolPtr(true)}
}

func configMapRef(name string, uid types.UID) metav1.OwnerReference {
	return metav1.OwnerReference{APIVersion: "v1", Kind: "ConfigMap", Name: name, UID: uid, BlockOwnerDeletion: boolPtr(true)}
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
	srv := newFakeServer()
	e := startCollector(t, srv)

	// Owner first, so the dependent is never checked against a placeholder.
	owner := srv.create(t, gvDeployments, object("a", "web", "owner-uid"))
	e.waitFor(t, "owner in the graph", func() bool { return e.observed(owner.UID, owner.ResourceVersion) })
	dep := srv.create(t, gvConfigMaps, object("a", "web-config", "dep-uid", deploymentRef("web", "owner-uid")))
	bystander := srv.create(t, gvConfigMaps, object("a", "unowned", "bystander-uid"))
	e.waitFor(t, "dependent in the graph", func() bool { return e.observed(dep.UID, dep.ResourceVersion) })

	if err := srv.delete(gvDeployments, "a", "web", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitFor(t, "dependent to be collected", func() bool { return e.gone(gvConfigMaps, "a", "web-config") })

	gets, deletes, patches := srv.kgcActions()
	if len(deletes) != 1 {
		t.Fatalf("kgc sent %d DELETEs, want 1: %+v", len(deletes), deletes)
	}
	checkDelete(t, deletes[0], gvConfigMaps, dep, metav1.DeletePropagationBackground)
	// The owner's delete was observed: the absent cache answers, no GET.
	if len(gets) != 0 || len(patches) != 0 {
		t.Errorf("kgc sent %d GETs and %d PATCHes, want none", len(gets), len(patches))
	}
	if e.gone(gvConfigMaps, "a", "unowned") {
		t.Errorf("unowned object %s was deleted", bystander.Name)
	}
	e.waitFor(t, "graph to drop the collected objects", func() bool { return e.c.Graph().Len() == 1 })
	if e.mapper.resets.Load() == 0 {
		t.Error("REST mapper never reset although monitors were added")
	}
	st := e.c.MonitorStatus()
	if len(st) != 3 || !st[gvConfigMaps].Synced || !st[gvDeployments].Synced || !st[gvNamespaces].Synced {
		t.Errorf("MonitorStatus = %v, want configmaps, deployments and namespaces synced (events ignored)", st)
	}
}

func TestCollectorDependentOfNeverSeenOwner(t *testing.T) {
	srv := newFakeServer()
	// Both exist before the collector starts; the owner was never created.
	dep := srv.create(t, gvConfigMaps, object("a", "orphaned", "dep-uid", deploymentRef("ghost", "ghost-uid")))
	live := srv.create(t, gvDeployments, object("a", "web", "web-uid"))
	srv.create(t, gvConfigMaps, object("a", "kept", "kept-uid", deploymentRef("web", "web-uid"), deploymentRef("ghost", "ghost-uid")))
	e := startCollector(t, srv)

	e.waitFor(t, "dependent of a missing owner to be collected", func() bool { return e.gone(gvConfigMaps, "a", "orphaned") })
	e.waitFor(t, "dangling reference to be removed", func() bool {
		o, err := srv.get(gvConfigMaps, "a", "kept")
		return err == nil && len(o.OwnerReferences) == 1 && o.OwnerReferences[0].UID == live.UID
	})
	gets, deletes, patches := srv.kgcActions()
	if len(deletes) != 1 {
		t.Fatalf("DELETEs = %+v, want one", deletes)
	}
	checkDelete(t, deletes[0], gvConfigMaps, dep, metav1.DeletePropagationBackground)
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
	srv := newFakeServer()
	owner := object("a", "web", "owner-uid")
	owner.DeletionTimestamp = &metav1.Time{Time: time.Now()}
	owner.Finalizers = []string{metav1.FinalizerOrphanDependents, "example.com/keep"}
	srv.create(t, gvDeployments, owner)
	other := srv.create(t, gvDeployments, object("a", "other", "other-uid"))
	srv.create(t, gvConfigMaps, object("a", "dep", "dep-uid", deploymentRef("web", "owner-uid")))
	srv.create(t, gvConfigMaps, object("a", "dep2", "dep2-uid", deploymentRef("other", "other-uid"), deploymentRef("web", "owner-uid")))
	e := startCollector(t, srv)

	e.waitFor(t, "orphan finalizer to be removed", func() bool {
		o, err := srv.get(gvDeployments, "a", "web")
		return err == nil && slices.Equal(o.Finalizers, []string{"example.com/keep"})
	})
	for _, name := range []string{"dep", "dep2"} {
		d, err := srv.get(gvConfigMaps, "a", name)
		if err != nil {
			t.Fatalf("dependent %s: %v", name, err)
		}
		for _, r := range d.OwnerReferences {
			if r.UID == "owner-uid" {
				t.Errorf("dependent %s still references the orphaning owner", name)
			}
		}
	}
	if d, _ := srv.get(gvConfigMaps, "a", "dep2"); len(d.OwnerReferences) != 1 || d.OwnerReferences[0].UID != other.UID {
		t.Errorf("dep2 lost its other owner: %+v", d.OwnerReferences)
	}
	_, deletes, patches := srv.kgcActions()
	if len(deletes) != 0 {
		t.Errorf("kgc deleted while orphaning: %+v", deletes)
	}
	// Dependents first, the owner's finalizer last.
	if n := len(patches); n != 3 || patches[n-1].GetName() != "web" {
		t.Fatalf("PATCHes = %v, want the two dependents then the owner", patchNames(patches))
	}

	// The owner goes away; the orphans stay.
	srv.setFinalizers(t, gvDeployments, "a", "web")
	e.waitFor(t, "owner gone", func() bool { return e.gone(gvDeployments, "a", "web") })
	e.consistently(t, "orphans surviving their owner", 300*time.Millisecond, func() bool {
		return !e.gone(gvConfigMaps, "a", "dep") && !e.gone(gvConfigMaps, "a", "dep2")
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
	srv := newFakeServer()
	// owner (foreground) <- mid (blocking) <- leaf (blocking)
	owner := object("a", "web", "owner-uid")
	owner.DeletionTimestamp = &metav1.Time{Time: time.Now()}
	owner.Finalizers = []string{metav1.FinalizerDeleteDependents, "example.com/keep"}
	srv.create(t, gvDeployments, owner)
	mid := srv.create(t, gvConfigMaps, object("a", "mid", "mid-uid", deploymentRef("web", "owner-uid")))
	leaf := srv.create(t, gvConfigMaps, object("a", "leaf", "leaf-uid", configMapRef("mid", "mid-uid")))
	e := startCollector(t, srv)

	e.waitFor(t, "the cascade to reach the owner", func() bool {
		o, err := srv.get(gvDeployments, "a", "web")
		return err == nil && slices.Equal(o.Finalizers, []string{"example.com/keep"})
	})
	if !e.gone(gvConfigMaps, "a", "mid") || !e.gone(gvConfigMaps, "a", "leaf") {
		t.Fatal("owner released before its dependents were gone")
	}
	_, deletes, _ := srv.kgcActions()
	byName := map[string]clienttesting.DeleteActionImpl{}
	for _, d := range deletes {
		byName[d.GetName()] = d
	}
	// mid has dependents of its own: it goes in the foreground.
	checkDelete(t, byName["mid"], gvConfigMaps, mid, metav1.DeletePropagationForeground)
	checkDelete(t, byName["leaf"], gvConfigMaps, leaf, metav1.DeletePropagationBackground)
}

func TestCollectorCrossNamespaceOwner(t *testing.T) {
	srv := newFakeServer()
	owner := srv.create(t, gvConfigMaps, object("b", "owner", "owner-uid"))
	srv.create(t, gvConfigMaps, object("a", "dep", "dep-uid", configMapRef("owner", "owner-uid")))
	e := startCollector(t, srv)

	e.waitFor(t, "dependent with a cross-namespace owner to be collected", func() bool { return e.gone(gvConfigMaps, "a", "dep") })
	if e.gone(gvConfigMaps, "b", owner.Name) {
		t.Fatal("the owner in the other namespace was deleted")
	}
	e.waitFor(t, "the warning", func() bool { return len(e.recorder.get()) > 0 })
	w := e.recorder.get()
	if len(w) != 1 || w[0].reason != "OwnerRefInvalidNamespace" || w[0].object.UID != "dep-uid" || !strings.Contains(w[0].message, `"b"`) {
		t.Errorf("warnings = %+v, want one OwnerRefInvalidNamespace on dep naming namespace b", w)
	}
}

func TestCollectorKeepsDependentOfUnservedKind(t *testing.T) {
	srv := newFakeServer()
	srv.create(t, gvConfigMaps, object("a", "dep", "dep-uid", metav1.OwnerReference{APIVersion: "example.com/v1", Kind: "Widget", Name: "w", UID: "w-uid"}))
	e := startCollector(t, srv)
	e.consistently(t, "dependent of an unserved kind kept", 500*time.Millisecond, func() bool { return !e.gone(gvConfigMaps, "a", "dep") })
	if gets, deletes, patches := srv.kgcActions(); len(gets)+len(deletes)+len(patches) != 0 {
		t.Errorf("kgc called the API for an unresolvable owner: %d GETs, %d DELETEs, %d PATCHes", len(gets), len(deletes), len(patches))
	}
}

// TestCollectorStaleDecisionFailsSafely: kgc decides from its informer
// cache; if the object changed since, the DELETE's preconditions make the
// decision fail instead of deleting.
func TestCollectorStaleDecisionFailsSafely(t *testing.T) {
	srv := newFakeServer()
	e := startCollector(t, srv)
	owner := srv.create(t, gvDeployments, object("a", "web", "owner-uid"))
	e.waitFor(t, "owner in the graph", func() bool { return e.observed(owner.UID, owner.ResourceVersion) })
	dep := srv.create(t, gvConfigMaps, object("a", "dep", "dep-uid", deploymentRef("web", "owner-uid")))
	e.waitFor(t, "dependent in the graph", func() bool { return e.observed(dep.UID, dep.ResourceVersion) })

	// Stall DELETEs of dep until its owner reference is gone on the server,
	// so that kgc's decision (made while dep still had the ref) is stale.
	release := make(chan struct{})
	var stalled atomic.Bool
	srv.client.PrependReactor("delete", "configmaps", func(a clienttesting.Action) (bool, runtime.Object, error) {
		if !stalled.Swap(true) {
			<-release
		}
		return false, nil, nil
	})
	if err := srv.delete(gvDeployments, "a", "web", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitFor(t, "kgc to try deleting dep", stalled.Load)
	// Someone else drops the reference meanwhile (bypassing the fake's lock
	// held by the stalled reactor chain: the tracker has its own).
	go func() {
		defer close(release)
		o, err := srv.get(gvConfigMaps, "a", "dep")
		if err != nil {
			t.Error(err)
			return
		}
		o.OwnerReferences = nil
		o.ResourceVersion = srv.nextRV()
		if err := srv.client.Tracker().Update(gvConfigMaps, o, "a"); err != nil {
			t.Error(err)
		}
	}()
	<-release
	e.consistently(t, "dep surviving a stale decision", 500*time.Millisecond, func() bool { return !e.gone(gvConfigMaps, "a", "dep") })
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
	c, err := New(Config{Metadata: newFakeServer().client, Discovery: &fakeDiscovery{}, Mapper: newTestMapper()})
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
	d := &fakeDiscovery{err: errors.New("apiserver down")}
	c, err := New(Config{Metadata: newFakeServer().client, Discovery: d, Mapper: newTestMapper(), Workers: 1})
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
	if d.calls == 0 {
		t.Error("discovery never called")
	}
}

// TestRunStopsDuringInitialGraphBuild cancels Run while it waits for the
// graph builder to drain the events of the initial list (a large cluster
// takes seconds there). The graph builder stops at cancellation, so Run must
// not keep waiting for a queue nobody drains any more.
func TestRunStopsDuringInitialGraphBuild(t *testing.T) {
	srv := newFakeServer()
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	c, err := New(Config{
		Metadata: srv.client, Discovery: &fakeDiscovery{lists: testResourceLists()}, Mapper: newTestMapper(),
		Workers: 1, Ignored: []schema.GroupResource{testEvents.GroupResource()}, ResyncPeriod: time.Hour,
	})
	if err != nil {
		t.Fatal(err)
	}
	// A backlog that takes a while to apply: one object flipping between two
	// sets of 200 owners, so that every event unlinks and links 200 edges.
	var refsA, refsB []metav1.OwnerReference
	for i := range 200 {
		refsA = append(refsA, configMapRef(fmt.Sprintf("a%d", i), types.UID(fmt.Sprintf("a%d", i))))
		refsB = append(refsB, configMapRef(fmt.Sprintf("b%d", i), types.UID(fmt.Sprintf("b%d", i))))
	}
	id := rules.Identity{APIVersion: "v1", Kind: "ConfigMap", Namespace: "a", Name: "busy", UID: "busy"}
	for i := range 40000 {
		refs := refsA
		if i%2 == 1 {
			refs = refsB
		}
		c.events.Push(graph.Event{Type: graph.Upsert, Object: rules.Object{Identity: id, ResourceVersion: strconv.Itoa(i), OwnerReferences: refs}})
	}
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	err = wait.PollUntilContextTimeout(ctx, 5*time.Millisecond, testTimeout, true, func(context.Context) (bool, error) {
		return c.monitors.Len() > 0 && c.monitors.HasSynced(), nil
	})
	if err != nil {
		t.Fatalf("monitors never synced: %v", err)
	}
	time.Sleep(300 * time.Millisecond) // Run's sync poll (50ms) has ended: it waits for the backlog now
	if c.events.Len() == 0 || c.Synced() {
		t.Skip("the backlog drained before cancellation; nothing exercised")
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run = %v", err)
		}
	case <-time.After(testTimeout):
		t.Fatalf("Run did not return within %s of cancellation (%d events left in the queue)", testTimeout, c.events.Len())
	}
}

func boolPtr(b bool) *bool { return &b }
