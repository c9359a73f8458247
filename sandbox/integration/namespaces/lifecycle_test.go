package namespaces

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	utilrand "k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/kgc-dev/kgc/internal/breaker"
	"github.com/kgc-dev/kgc/sandbox/internal/testenv"
)

// The scenarios. Each runs on both sides (kgc's namespace lifecycle, and
// kube-controller-manager's namespace controller) and the two records are
// compared: see compare_test.go.

// A namespace with built-in and custom resources is emptied and goes; a
// namespace next to it keeps its objects.
func TestBuiltinAndCustomResources(t *testing.T) {
	suffix := utilrand.String(5)
	group, plural, kind := "ns"+suffix+".kgc.test", "gadgets", "Gadget"
	gvr := schema.GroupVersionResource{Group: group, Version: "v1", Resource: plural}
	ns, other := testenv.NamespaceName(t.Name()), testenv.NamespaceName(t.Name()+"-other")
	objects := func(n string) []obj {
		return []obj{{configMapsGVR, n, "cm"}, {podsGVR, n, "pod"}, {gvr, n, "cr"}, {secretsGVR, n, "s"}}
	}
	states := func(state string, sets ...[]obj) map[obj]string {
		out := map[obj]string{}
		for _, set := range sets {
			for _, o := range set {
				out[o] = state
			}
		}
		return out
	}
	compareSides(t, func(t *testing.T, r *record) {
		s := r.side
		s.crd(t, group, plural, kind, "v1")
		for _, n := range []string{ns, other} {
			s.createNamespace(t, n)
			s.configMap(t, n, "cm")
			s.pod(t, n, "pod")
			s.customResource(t, gvr, kind, n, "cr")
			s.secret(t, n, "s")
		}
		began := time.Now()
		s.deleteNamespace(t, ns)
		want := states("present", objects(other))
		for o, st := range states("gone", objects(ns)) {
			want[o] = st
		}
		r.checkpoint(t, expect{label: "namespace deleted", namespace: ns, gone: true, objects: want})
		r.logf(t, "%s: namespace with built-in and custom resources gone %s after its deletion", s.name, time.Since(began).Round(time.Millisecond))
		s.deleteNamespace(t, other)
		r.checkpoint(t, expect{label: "other namespace deleted", namespace: other, gone: true, objects: states("gone", objects(other))})
	})
}

// Objects held by finalizers keep their namespace: Pods first (the other
// content waits for them), then the rest; the conditions say what remains
// and which finalizers hold it; nobody removes the objects' finalizers.
func TestFinalizersHeldThenReleased(t *testing.T) {
	const hold = "example.com/hold"
	ns := testenv.NamespaceName(t.Name())
	heldPod, heldCM, freeCM := obj{podsGVR, ns, "held-pod"}, obj{configMapsGVR, ns, "held-cm"}, obj{configMapsGVR, ns, "free-cm"}
	deleting := fmt.Sprintf("deleting [%s]", hold)
	compareSides(t, func(t *testing.T, r *record) {
		s := r.side
		s.createNamespace(t, ns)
		s.pod(t, ns, heldPod.name, hold)
		s.configMap(t, ns, heldCM.name, hold)
		s.configMap(t, ns, freeCM.name)
		s.deleteNamespace(t, ns)

		// Pods first: while the pod is held, nothing else is deleted.
		r.checkpoint(t, expect{
			label: "pod held", namespace: ns,
			conds: allOK().with(wants{
				corev1.NamespaceContentRemaining:    {Status: corev1.ConditionTrue, Reason: "SomeResourcesRemain", Message: "Some resources are remaining: pods. has 1 resource instances"},
				corev1.NamespaceFinalizersRemaining: {Status: corev1.ConditionTrue, Reason: "SomeFinalizersRemain", Message: "Some content in the namespace has finalizers remaining: " + hold + " in 1 resource instances"},
			}),
			upstream: wants{
				corev1.NamespaceContentRemaining:    allOK()[corev1.NamespaceContentRemaining],
				corev1.NamespaceFinalizersRemaining: allOK()[corev1.NamespaceFinalizersRemaining],
			},
			why:     "while Pods remain, upstream returns before counting them and writes the all-good ContentRemaining and FinalizersRemaining",
			objects: map[obj]string{heldPod: deleting, heldCM: "present", freeCM: "present"},
		})

		s.release(t, podsGVR, ns, heldPod.name)
		r.checkpoint(t, expect{
			label: "pod released, configmap held", namespace: ns,
			conds: allOK().with(wants{
				corev1.NamespaceContentRemaining:    {Status: corev1.ConditionTrue, Reason: "SomeResourcesRemain", Message: "Some resources are remaining: configmaps. has 1 resource instances"},
				corev1.NamespaceFinalizersRemaining: {Status: corev1.ConditionTrue, Reason: "SomeFinalizersRemain", Message: "Some content in the namespace has finalizers remaining: " + hold + " in 1 resource instances"},
			}),
			objects: map[obj]string{heldPod: "gone", heldCM: deleting, freeCM: "gone"},
		})

		s.release(t, configMapsGVR, ns, heldCM.name)
		r.checkpoint(t, expect{label: "configmap released", namespace: ns, gone: true, objects: map[obj]string{heldCM: "gone"}})
	})
}

// A CRD whose conversion webhook is down cannot be listed or emptied: the
// condition names the failure, everything else is deleted, and the
// namespace stays until the CRD heals.
func TestBrokenConversionWebhook(t *testing.T) {
	suffix := utilrand.String(5)
	group, plural, kind := "broken"+suffix+".kgc.test", "things", "Thing"
	v1 := schema.GroupVersionResource{Group: group, Version: "v1", Resource: plural}
	v2 := schema.GroupVersionResource{Group: group, Version: "v2", Resource: plural}
	ns := testenv.NamespaceName(t.Name())
	compareSides(t, func(t *testing.T, r *record) {
		s := r.side
		s.crd(t, group, plural, kind, "v1", "v2")
		s.createNamespace(t, ns)
		s.customResource(t, v1, kind, ns, "thing")
		s.configMap(t, ns, "cm")
		s.setConversion(t, plural+"."+group, map[string]any{
			"strategy": "Webhook",
			"webhook": map[string]any{
				"conversionReviewVersions": []any{"v1"},
				"clientConfig": map[string]any{"service": map[string]any{
					"namespace": "default", "name": "kgc-no-such-conversion-service", "path": "/convert", "port": int64(443),
				}},
			},
		})
		poll(t, "listing the CRD's v2 to fail", func() bool {
			_, err := s.dynamic.Resource(v2).Namespace(ns).List(context.Background(), metav1.ListOptions{})
			return err != nil
		})
		s.deleteNamespace(t, ns)

		r.checkpoint(t, expect{
			label: "conversion webhook down", namespace: ns,
			conds: allOK().with(wants{
				corev1.NamespaceDeletionContentFailure: {Status: corev1.ConditionTrue, Reason: "ContentDeletionFailed",
					Prefix: "Failed to delete all resource types, 1 remaining: ", Contains: []string{"conversion webhook for " + group + "/v1, Kind=" + kind}},
			}),
			objects: map[obj]string{{v1, ns, "thing"}: "present", {configMapsGVR, ns, "cm"}: "gone"},
		})

		s.setConversion(t, plural+"."+group, map[string]any{"strategy": "None"})
		r.checkpoint(t, expect{label: "CRD healed", namespace: ns, gone: true, objects: map[obj]string{{v1, ns, "thing"}: "gone"}})
	})
}

// An aggregated APIService without a backend fails discovery of its group:
// DiscoveryFailure says so, the rest is deleted, and the namespace goes
// once the APIService is removed.
func TestUnavailableAPIService(t *testing.T) {
	const group, version = "nsbroken.example.com", "v1beta1"
	name := version + "." + group
	ns := testenv.NamespaceName(t.Name())
	compareSides(t, func(t *testing.T, r *record) {
		s := r.side
		s.createNamespace(t, ns)
		s.configMap(t, ns, "cm")
		if _, err := s.dynamic.Resource(apiServiceGVR).Create(context.Background(), testenv.UnavailableAPIService(group, version), metav1.CreateOptions{}); err != nil {
			t.Fatalf("create APIService: %v", err)
		}
		removed := false
		remove := func() {
			if removed {
				return
			}
			removed = true
			if err := s.dynamic.Resource(apiServiceGVR).Delete(context.Background(), name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
				t.Errorf("delete APIService: %v", err)
			}
		}
		t.Cleanup(remove)
		poll(t, "the APIService to be reported unavailable", func() bool {
			got, err := s.dynamic.Resource(apiServiceGVR).Get(context.Background(), name, metav1.GetOptions{})
			return err == nil && testenv.HasCondition(got, "Available", "False")
		})
		s.deleteNamespace(t, ns)

		r.checkpoint(t, expect{
			label: "APIService unavailable", namespace: ns,
			conds: allOK().with(wants{
				corev1.NamespaceDeletionDiscoveryFailure: {Status: corev1.ConditionTrue, Reason: "DiscoveryFailed",
					Prefix: "Discovery failed for some groups, 1 failing: ", Contains: []string{group}},
			}),
			objects: map[obj]string{{configMapsGVR, ns, "cm"}: "gone"},
		})
		remove()
		r.checkpoint(t, expect{label: "APIService removed", namespace: ns, gone: true})
	})
}

// A namespace with thousands of objects goes; timed from its deletion to
// its disappearance (both implementations wait at least 5 s: upstream
// before it starts, kgc before it removes the finalizer).
func TestThousandsOfObjects(t *testing.T) {
	const n = 2000
	ns := testenv.NamespaceName(t.Name())
	compareSides(t, func(t *testing.T, r *record) {
		s := r.side
		s.createNamespace(t, ns)
		began := time.Now()
		s.createMany(t, ns, n)
		r.logf(t, "%s: created %d configmaps in %s", s.name, n, time.Since(began).Round(time.Millisecond))
		began = time.Now()
		s.deleteNamespace(t, ns)
		// Under -race, with both sides at once on a busy machine, deleting
		// 2,000 objects has taken 2.5 minutes (5 s alone and without -race).
		r.checkpoint(t, expect{label: "namespace deleted", namespace: ns, gone: true, timeout: 10 * time.Minute, objects: map[obj]string{{configMapsGVR, ns, "cm-00000"}: "gone"}})
		r.logf(t, "%s: namespace with %d configmaps gone %s after its deletion", s.name, n, time.Since(began).Round(time.Millisecond))
	})
}

// A namespace holding thousands of owners, each with a dependent, goes
// on both sides, and neither side's kgc, at `kgc run`'s safety defaults,
// trips its deletion breaker or holds anything: the owners' deletions are
// observed (DELETED events, a terminating namespace), which is people
// deleting, not a fault. (CI size; KGC_BULK_FULL=1 runs 5,000.)
func TestOwnersGoWithTheirNamespace(t *testing.T) {
	n := 500
	if ok, _ := strconv.ParseBool(os.Getenv("KGC_BULK_FULL")); ok {
		n = 5000
	}
	ns := testenv.NamespaceName(t.Name())
	for _, s := range sides {
		t.Run(s.name, func(t *testing.T) {
			t.Parallel()
			s.createNamespace(t, ns)
			owners := make([]types.UID, n)
			parallelDo(t, n, func(i int) error {
				cm, err := s.kube.CoreV1().ConfigMaps(ns).Create(context.Background(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("owner-%d", i)}}, metav1.CreateOptions{})
				if err == nil {
					owners[i] = cm.UID
				}
				return err
			})
			parallelDo(t, n, func(i int) error {
				cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("dep-%d", i),
					OwnerReferences: []metav1.OwnerReference{testenv.OwnerRef("v1", "ConfigMap", fmt.Sprintf("owner-%d", i), owners[i], true)}}}
				_, err := s.kube.CoreV1().ConfigMaps(ns).Create(context.Background(), cm, metav1.CreateOptions{})
				return err
			})
			began := time.Now()
			s.deleteNamespace(t, ns)
			err := wait.PollUntilContextTimeout(context.Background(), pollInterval, 15*time.Minute, true, func(context.Context) (bool, error) {
				return s.namespaceGone(ns), nil
			})
			if err != nil {
				t.Fatalf("waiting for the namespace to go: %v", err)
			}
			t.Logf("BULK namespace (%s): %d owners and %d dependents gone %s after the namespace's deletion", s.name, n, n, time.Since(began).Round(time.Millisecond))
			rec := httptest.NewRecorder()
			s.gc.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, breaker.Path, nil))
			var r breaker.Report
			if err := json.Unmarshal(rec.Body.Bytes(), &r); err != nil {
				t.Fatalf("holds: %v: %s", err, rec.Body.String())
			}
			if r.Breaker == nil || len(r.Breaker.Trips) != 0 || r.Breaker.HeldTotal != 0 || len(r.Restored) != 0 {
				t.Fatalf("deleting a namespace tripped the breaker or held something: %+v", r.Breaker)
			}
		})
	}
}

// parallelDo runs do(i) for i in [0, n) from 16 goroutines and fails t on
// an error.
func parallelDo(t *testing.T, n int, do func(i int) error) {
	t.Helper()
	var wg sync.WaitGroup
	var first atomic.Value
	next := make(chan int)
	for range 16 {
		wg.Go(func() {
			for i := range next {
				if err := do(i); err != nil {
					first.CompareAndSwap(nil, err)
				}
			}
		})
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	if err, _ := first.Load().(error); err != nil {
		t.Fatal(err)
	}
}
