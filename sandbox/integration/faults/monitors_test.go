package faults

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kgc-dev/kgc/sandbox/internal/faultproxy"
	"github.com/kgc-dev/kgc/sandbox/internal/testenv"
)

// The monitor regression tests of bugs the simulator found (internal/sim),
// against the real apiserver: each fails without its fix in
// internal/discovery/listwatch.go.

// podTemplatesPath is the path of kgc's cluster-wide LIST of PodTemplates,
// a resource nothing else in this package (and nothing in the control
// plane) creates: its lists hold exactly what a test made.
const podTemplatesPath = "/api/v1/podtemplates"

// TestFirstListFailedPartWay: kgc's first list of a resource fails after
// its first object, owner "a-ghost": its streaming list breaks after one
// event, and the paged LIST kgc falls back to (served in pages of one
// object by the fault transport) fails after its first page. The owner is
// deleted while no complete list ever succeeded (so no watch tells kgc);
// then the list completes without it. The complete list must sweep the failed list's page: otherwise
// "a-ghost" stays in kgc's graph as a live owner and its dependent is kept
// forever (found by the simulator, seeds 102/131; unit test
// TestMonitorFirstListFailedPartWaySweeps). The other PodTemplate and its
// protected dependent stay.
func TestFirstListFailedPartWay(t *testing.T) {
	ctx := t.Context()
	ns := createNamespace(t, "pagefail")
	ghost := mustCreatePodTemplate(t, ns, "a-ghost")
	kept := mustCreatePodTemplate(t, ns, "b-kept")
	dep := mustCreate(t, configMaps, ns, "ghost-dependent", nil, ghost.ref(false))
	by := &bystanders{}
	by.add(mustCreate(t, configMaps, ns, "kept-dependent", protected(nil), kept.ref(true)))

	ft := faultproxy.New(faultproxy.Config{})
	undo := ft.PageLists(faultproxy.ResourcePath("", "v1", "podtemplates"), 1, http.StatusInternalServerError)
	startInProcessNoWait(t, ft, 100, 200)

	// The scenario: a first page answered, its continuation failed.
	poll(t, "kgc's PodTemplates list to fail after its first page", func(context.Context) (bool, error) {
		return failedPartWay(ft) != nil, nil
	})
	failed := failedPartWay(ft)
	t.Logf("PodTemplates page 2 (continue) answered %d (injected) at %s", failed.Status, failed.Start.Format(time.StampMilli))
	// kgc streamed first (its stream was broken after the owner's event).
	if first := firstRequest(ft, podTemplatesPath); first == nil || first.Query.Get("sendInitialEvents") != "true" {
		t.Errorf("kgc's first PodTemplates request %+v is not a streaming list", first)
	}

	// The owner goes while kgc cannot complete its list.
	if err := kubeClient.CoreV1().PodTemplates(ns).Delete(ctx, ghost.name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &ghost.uid}}); err != nil {
		t.Fatal(err)
	}
	deletedAt := time.Now()
	undo()

	poll(t, "the dependent of the owner deleted before the list completed to be collected", func(ctx context.Context) (bool, error) {
		_, err := dep.client().Get(ctx, dep.name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
	t.Logf("dependent collected %s after its owner was deleted", time.Since(deletedAt).Round(time.Millisecond))
	var complete bool
	for _, r := range ft.Requests() {
		if r.Path == podTemplatesPath && !r.Watch && r.Start.After(deletedAt) && r.Status == http.StatusOK && r.Query.Get("continue") == "" {
			complete = true
		}
	}
	if !complete {
		t.Errorf("no complete PodTemplates list after the owner's deletion: the scenario did not happen; transport: %s", ft)
	}
	if _, err := kubeClient.CoreV1().PodTemplates(ns).Get(ctx, kept.name, metav1.GetOptions{}); err != nil {
		t.Errorf("PodTemplate %s: %v", kept.name, err)
	}
	by.check(t)
	checkSafety(t, ns)
}

// failedPartWay returns kgc's first PodTemplates LIST continuation that
// failed, or nil.
func failedPartWay(ft *faultproxy.Transport) *faultproxy.Request {
	for _, r := range ft.Requests() {
		if r.Path == podTemplatesPath && !r.Watch && r.Query.Get("continue") != "" && r.Injected {
			return &r
		}
	}
	return nil
}

// firstRequest returns the first request recorded for path, or nil.
func firstRequest(ft *faultproxy.Transport, path string) *faultproxy.Request {
	for _, r := range ft.Requests() {
		if r.Path == path {
			return &r
		}
	}
	return nil
}

// podTemplates are a kind of this file only (see podTemplatesPath).
var podTemplates = kind{"podtemplates", "PodTemplate"}

func mustCreatePodTemplate(t *testing.T, ns, name string) obj {
	t.Helper()
	pt := &corev1.PodTemplate{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{labelTest: ns}},
		Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
			Containers: []corev1.Container{{Name: "c", Image: "kgc.test/none"}},
		}},
	}
	created, err := kubeClient.CoreV1().PodTemplates(ns).Create(t.Context(), pt, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating PodTemplate %s/%s: %v", ns, name, err)
	}
	return obj{kind: podTemplates, ns: ns, name: name, uid: created.UID}
}

// TestWatchNotFoundAfterCRDDeletion: owner O (a ConfigMap) is deleted
// Foreground and waits for its blocking dependent W, a custom resource
// that a finalizer keeps in deletion. kgc's reads of W's resource then
// fail (its watch is cut), and discovery fails as a whole, so kgc keeps the
// resource's monitor (a failing discovery is not a vanished resource).
// Meanwhile W's finalizer is removed and its CRD deleted. When the reads
// heal, kgc's watch resumes and the apiserver answers it 404. kgc must list
// again — the LIST answers 404 too, which empties the resource in the
// graph — and O must then go: retrying the watch kept W in the graph and O
// waited forever (found by the simulator, seed 13784; unit test
// TestMonitorWatchNotFoundRelists).
func TestWatchNotFoundAfterCRDDeletion(t *testing.T) {
	ctx := t.Context()
	ns := createNamespace(t, "watch404")
	const group, version, resource = "r14.faults.kgc.test", "v1", "widgets"
	gvr := schema.GroupVersionResource{Group: group, Version: version, Resource: resource}
	crd := createCRD(t, testenv.CRD(group, resource, "Widget", true, version))

	owner := mustCreate(t, configMaps, ns, "owner", nil)
	const finalizer = "kgc.test/hold"
	w := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": group + "/" + version, "kind": "Widget",
		"metadata": map[string]any{"name": "w", "namespace": ns, "finalizers": []any{finalizer}},
	}}
	w.SetOwnerReferences([]metav1.OwnerReference{owner.ref(true)})
	poll(t, "the Widget to be created", func(ctx context.Context) (bool, error) {
		_, err := dynamicClient.Resource(gvr).Namespace(ns).Create(ctx, w, metav1.CreateOptions{})
		return err == nil, ignoreNotFound(err) // the new resource may answer 404 for a moment
	})

	ft := faultproxy.New(faultproxy.Config{})
	startInProcess(t, ft, 100, 200)
	widgets := faultproxy.ResourcePath(group, version, resource)
	poll(t, "kgc to watch Widgets", func(context.Context) (bool, error) {
		for _, r := range ft.Requests() {
			if r.Watch && widgets(r.Path) && r.Status == http.StatusOK {
				return true, nil
			}
		}
		return false, nil
	})

	// O waits for W, which kgc deletes and the finalizer keeps.
	policy := metav1.DeletePropagationForeground
	if err := owner.client().Delete(ctx, owner.name, metav1.DeleteOptions{PropagationPolicy: &policy}); err != nil {
		t.Fatal(err)
	}
	poll(t, "kgc to delete the Widget (its finalizer keeps it)", func(ctx context.Context) (bool, error) {
		u, err := dynamicClient.Resource(gvr).Namespace(ns).Get(ctx, "w", metav1.GetOptions{})
		return err == nil && u.GetDeletionTimestamp() != nil, err
	})

	// kgc goes blind to Widgets, and cannot tell they vanished.
	ft.FailReads(func(path string) bool { return path == "/api" || path == "/apis" || path == "/apis/"+group+"/"+version }, http.StatusServiceUnavailable)
	healWidgets := ft.FailReads(widgets, http.StatusServiceUnavailable)
	patch := []byte(`{"metadata":{"finalizers":null}}`)
	if _, err := dynamicClient.Resource(gvr).Namespace(ns).Patch(ctx, "w", types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := dynamicClient.Resource(testenv.CRDGVR).Delete(ctx, crd.GetName(), metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	poll(t, "the CRD to be gone and its resource to answer 404", func(ctx context.Context) (bool, error) {
		_, err := dynamicClient.Resource(testenv.CRDGVR).Get(ctx, crd.GetName(), metav1.GetOptions{})
		if !apierrors.IsNotFound(err) {
			return false, nil
		}
		_, err = dynamicClient.Resource(gvr).Namespace(ns).List(ctx, metav1.ListOptions{})
		return apierrors.IsNotFound(err), nil
	})
	if gone, err := (cascade{owner: owner}).ownerGone(ctx); err != nil || gone {
		t.Fatalf("owner gone %v (err %v) before kgc could see its dependent go", gone, err)
	}
	healWidgets()
	healedAt := time.Now()

	poll(t, "the Foreground owner to go", cascade{owner: owner}.ownerGone)
	t.Logf("owner gone %s after kgc could read Widgets again", time.Since(healedAt).Round(time.Millisecond))
	var watch404, list404 bool
	for _, r := range ft.Requests() {
		if widgets(r.Path) && r.Start.After(healedAt) && r.Status == http.StatusNotFound {
			watch404 = watch404 || r.Watch
			list404 = list404 || !r.Watch
		}
	}
	if !watch404 {
		t.Errorf("no Widgets watch answered 404 after the heal: the scenario did not happen; transport: %s", ft)
	}
	if !list404 {
		t.Errorf("no Widgets LIST answered 404 after the heal; transport: %s", ft)
	}
	checkSafety(t, ns)
}

func ignoreNotFound(err error) error {
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

// createCRD creates crd, waits until it is established and deletes it at
// the end of the test if it is still there.
func createCRD(t *testing.T, crd *unstructured.Unstructured) *unstructured.Unstructured {
	t.Helper()
	created, err := dynamicClient.Resource(testenv.CRDGVR).Create(t.Context(), crd, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating CRD %s: %v", crd.GetName(), err)
	}
	t.Cleanup(func() {
		uid := created.GetUID()
		err := dynamicClient.Resource(testenv.CRDGVR).Delete(context.Background(), created.GetName(), metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
		if err != nil && !apierrors.IsNotFound(err) {
			t.Logf("cleanup: deleting CRD %s: %v", created.GetName(), err)
		}
	})
	poll(t, "CRD "+crd.GetName()+" to be established", func(ctx context.Context) (bool, error) {
		u, err := dynamicClient.Resource(testenv.CRDGVR).Get(ctx, created.GetName(), metav1.GetOptions{})
		return err == nil && testenv.HasCondition(u, "Established", "True"), nil
	})
	return created
}

// TestUnblockKeepsClientsOrphan: o7 (a ConfigMap) and o8 (a Secret)
// reference each other with blocking references. o8 is deleted with Orphan
// by a client, then o7 Foreground; kgc's Secrets watch lags (DelayWatches),
// so kgc sees o7's deletion and not o8's, breaks the cycle on o8 (a patch
// testing its references, which still match) and would send o8's
// Foreground DELETE at the version its patch produced — a version that
// already carries the client's Orphan deletion, whose orphan finalizer the
// apiserver would then swap for foregroundDeletion (S2). o8 must never
// carry foregroundDeletion, and both must go (found by the simulator, seed
// 2825; sim test TestUnblockThenDeleteOverridesClientsOrphan).
func TestUnblockKeepsClientsOrphan(t *testing.T) {
	ctx := t.Context()
	ns := createNamespace(t, "unblock")
	o7 := mustCreate(t, configMaps, ns, "o7", nil)
	o8 := mustCreate(t, secrets, ns, "o8", nil, o7.ref(true))
	refs, err := json.Marshal([]metav1.OwnerReference{o8.ref(true)})
	if err != nil {
		t.Fatal(err)
	}
	patched, err := kubeClient.CoreV1().ConfigMaps(ns).Patch(ctx, o7.name, types.MergePatchType, []byte(`{"metadata":{"ownerReferences":`+string(refs)+`}}`), metav1.PatchOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("o7 at %s", patched.ResourceVersion)
	s8, err := kubeClient.CoreV1().Secrets(ns).Get(ctx, o8.name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// Every state of o8 from now on.
	w, err := kubeClient.CoreV1().Secrets(ns).Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + o8.name, ResourceVersion: s8.ResourceVersion})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	var (
		mu     sync.Mutex
		states [][]string
	)
	go func() {
		for ev := range w.ResultChan() {
			if s, ok := ev.Object.(*corev1.Secret); ok {
				mu.Lock()
				states = append(states, s.Finalizers)
				mu.Unlock()
			}
		}
	}()

	ft := faultproxy.New(faultproxy.Config{Seed: seed(t)})
	ft.DelayWatches(faultproxy.ResourcePath("", "v1", "secrets"), 5*time.Second, 5*time.Second)
	startInProcess(t, ft, 100, 200)
	// kgc has listed both before their deletions (WaitForSync).
	orphan, foreground := metav1.DeletePropagationOrphan, metav1.DeletePropagationForeground
	if err := o8.client().Delete(ctx, o8.name, metav1.DeleteOptions{PropagationPolicy: &orphan}); err != nil {
		t.Fatal(err)
	}
	if err := o7.client().Delete(ctx, o7.name, metav1.DeleteOptions{PropagationPolicy: &foreground}); err != nil {
		t.Fatal(err)
	}
	for _, o := range []obj{o8, o7} {
		poll(t, o.String()+" to go", func(ctx context.Context) (bool, error) {
			_, err := o.client().Get(ctx, o.name, metav1.GetOptions{})
			return apierrors.IsNotFound(err), ignoreNotFound(err)
		})
	}
	writes := ft.Writes()
	for _, r := range writes {
		t.Logf("kgc %s %s → %d", r.Method, r.Path, r.Status)
	}
	// The interleaving happened: kgc's first write broke the cycle on o8.
	if len(writes) == 0 || writes[0].Method != http.MethodPatch || !strings.HasSuffix(writes[0].Path, "/secrets/o8") || writes[0].Status != http.StatusOK {
		t.Errorf("kgc's first write was not a successful PATCH of o8 (the cycle-breaking unblock): the scenario did not happen")
	}
	mu.Lock()
	defer mu.Unlock()
	for i, f := range states {
		t.Logf("o8 state %d: finalizers %v", i, f)
		if slices.Contains(f, metav1.FinalizerDeleteDependents) {
			t.Errorf("o8, deleted with Orphan by a client, carried %s (state %d): its orphan deletion was replaced", metav1.FinalizerDeleteDependents, i)
		}
	}
}
