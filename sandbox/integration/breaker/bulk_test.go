package breaker

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kgc-dev/kgc/internal/breaker"
	"github.com/kgc-dev/kgc/pkg/kgc"
	"github.com/kgc-dev/kgc/sandbox/internal/testenv"
)

// The bulk deletions people make every day, collected by kgc with `kgc
// run`'s safety defaults (the breaker with its Lease, the restore hold,
// the orphan journal): none trips anything, and every dependent goes.
//
// Sizes: under go test -race the in-process apiserver is several times
// slower than in production, so CI runs the sizes at which the breaker's
// old volume signals stopped collection for good (2,000 CRs, 1,500 owners
// of one DeleteCollection, a start-up backlog of 500). `make test-bulk`
// runs the same tests without -race at full size (KGC_BULK_FULL=1: 10,000
// CRs, 5,000 owners, a namespace of 5,000 owners, a backlog of 5,000).
// Nothing the breaker decides depends on the size any more.

// bulk returns ci, or full under KGC_BULK_FULL.
func bulk(ci, full int) int {
	if ok, _ := strconv.ParseBool(os.Getenv("KGC_BULK_FULL")); ok {
		return full
	}
	return ci
}

// defaultOptions are `kgc run`'s safety defaults with their Leases in ns.
func defaultOptions(ns string) kgc.Options {
	return kgc.Options{Breaker: breakerOptions(ns), HoldRestored: true,
		OrphanJournal: &kgc.OrphanJournalOptions{LeaseNamespace: ns, LeaseName: "kgc-orphans"}}
}

// parallel runs do(i) for i in [0, n) from 32 goroutines and fails t on
// the first error.
func parallel(t *testing.T, what string, n int, do func(i int) error) {
	t.Helper()
	began := time.Now()
	var wg sync.WaitGroup
	var failed atomic.Value
	next := make(chan int)
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				if err := do(i); err != nil {
					failed.CompareAndSwap(nil, err)
				}
			}
		}()
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	if err, _ := failed.Load().(error); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	t.Logf("%s: %d in %s", what, n, time.Since(began).Round(time.Millisecond))
}

// createOwned creates n ConfigMaps dep-i in ns labelled set, each owned by
// owner(i) (Background: not blocking).
func createOwned(t *testing.T, ns, set string, n int, owner func(i int) metav1.OwnerReference) {
	t.Helper()
	parallel(t, "create dependents "+set, n, func(i int) error {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%d", set, i), Namespace: ns,
			Labels: map[string]string{labelSet: set}, OwnerReferences: []metav1.OwnerReference{owner(i)}}}
		_, err := kubeClient.CoreV1().ConfigMaps(ns).Create(context.Background(), cm, metav1.CreateOptions{})
		return err
	})
}

// noTrip fails t if gc's breaker tripped or holds anything.
func noTrip(t *testing.T, gc *running) {
	t.Helper()
	r := gc.holds(t)
	if r.Breaker == nil || len(r.Breaker.Trips) != 0 || r.Breaker.HeldTotal != 0 || len(r.Restored) != 0 {
		t.Fatalf("an ordinary bulk deletion tripped the breaker or held something: %+v, restore holds %d", r.Breaker, len(r.Restored))
	}
	ns, name, _ := strings.Cut(r.Lease, "/")
	l, err := kubeClient.CoordinationV1().Leases(ns).Get(t.Context(), name, metav1.GetOptions{})
	if err == nil && l.Annotations[breaker.AnnotationTrips] != "" {
		t.Fatalf("a trip recorded on the Lease: %s", l.Annotations[breaker.AnnotationTrips])
	}
}

// A CRD deleted with thousands of instances, each owning a ConfigMap: the
// apiserver deletes the instances, kgc collects every ConfigMap.
func TestCRDDeletionDoesNotTrip(t *testing.T) {
	n := bulk(2000, 10000)
	ns := newNamespace(t)
	gc := startKGC(t, defaultOptions(ns))
	group := "bulk" + ns[len(ns)-5:] + ".kgc.test"
	crd := testenv.CRD(group, "widgets", "Widget", true, "v1")
	crds := dynamicClient.Resource(testenv.CRDGVR)
	if _, err := crds.Create(t.Context(), crd, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = crds.Delete(context.Background(), crd.GetName(), metav1.DeleteOptions{}) })
	waitFor(t, "the CRD established", func() (bool, error) {
		u, err := crds.Get(t.Context(), crd.GetName(), metav1.GetOptions{})
		return err == nil && testenv.HasCondition(u, "Established", "True"), nil
	})
	widgets := dynamicClient.Resource(schema.GroupVersionResource{Group: group, Version: "v1", Resource: "widgets"}).Namespace(ns)
	uids := make([]types.UID, n)
	parallel(t, "create widgets", n, func(i int) error {
		w := &unstructured.Unstructured{Object: map[string]any{"apiVersion": group + "/v1", "kind": "Widget",
			"metadata": map[string]any{"name": fmt.Sprintf("w-%d", i)}}}
		for {
			got, err := widgets.Create(context.Background(), w, metav1.CreateOptions{})
			if apierrors.IsNotFound(err) || apierrors.IsMethodNotSupported(err) {
				time.Sleep(100 * time.Millisecond) // the new resource is not served yet
				continue
			}
			if err != nil {
				return err
			}
			uids[i] = got.GetUID()
			return nil
		}
	})
	createOwned(t, ns, "dep", n, func(i int) metav1.OwnerReference {
		return testenv.OwnerRef(group+"/v1", "Widget", fmt.Sprintf("w-%d", i), uids[i], false)
	})
	began := time.Now()
	if err := crds.Delete(t.Context(), crd.GetName(), metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitWithin(t, 15*time.Minute, "every dependent of the CRD's instances collected", func() (bool, error) {
		return count(t, ns, "dep") == 0, nil
	})
	t.Logf("BULK crd-delete: %d instances, %d dependents collected %s after the CRD's deletion", n, n, time.Since(began).Round(time.Millisecond))
	noTrip(t, gc)
}

// One DeleteCollection removes thousands of owners, each owning a Secret.
func TestDeleteCollectionDoesNotTrip(t *testing.T) {
	n := bulk(1500, 5000)
	ns := newNamespace(t)
	gc := startKGC(t, defaultOptions(ns))
	owners := make([]types.UID, n)
	parallel(t, "create owners", n, func(i int) error {
		cm, err := kubeClient.CoreV1().ConfigMaps(ns).Create(context.Background(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{
			Name: fmt.Sprintf("owner-%d", i), Labels: map[string]string{"app": "x"}}}, metav1.CreateOptions{})
		if err == nil {
			owners[i] = cm.UID
		}
		return err
	})
	parallel(t, "create secrets", n, func(i int) error {
		s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("secret-%d", i), Labels: map[string]string{labelSet: "secret"},
			OwnerReferences: []metav1.OwnerReference{testenv.OwnerRef("v1", "ConfigMap", fmt.Sprintf("owner-%d", i), owners[i], false)}}}
		_, err := kubeClient.CoreV1().Secrets(ns).Create(context.Background(), s, metav1.CreateOptions{})
		return err
	})
	began := time.Now()
	if err := kubeClient.CoreV1().ConfigMaps(ns).DeleteCollection(t.Context(), metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: "app=x"}); err != nil {
		t.Fatal(err)
	}
	secretsLeft := func() int {
		l, err := kubeClient.CoreV1().Secrets(ns).List(t.Context(), metav1.ListOptions{LabelSelector: labelSet + "=secret"})
		if err != nil {
			t.Fatal(err)
		}
		return len(l.Items)
	}
	waitWithin(t, 15*time.Minute, "every Secret of the deleted owners collected", func() (bool, error) { return secretsLeft() == 0, nil })
	t.Logf("BULK collection: %d owners deleted in one DeleteCollection, %d Secrets collected %s after it", n, n, time.Since(began).Round(time.Millisecond))
	noTrip(t, gc)
}

// A namespace holding thousands of owners, each with a dependent, is
// deleted; kgc's namespace lifecycle empties it (kube-controller-manager's
// namespace controller does the same in sandbox/integration/namespaces).
func TestNamespaceDeletionDoesNotTrip(t *testing.T) {
	n := bulk(500, 5000)
	leases := newNamespace(t) // the Leases outlive the namespace deleted
	opts := defaultOptions(leases)
	opts.NamespaceLifecycle = true
	gc := startKGC(t, opts)
	ns := testenv.NamespaceName(t.Name())
	if _, err := kubeClient.CoreV1().Namespaces().Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	owners := make([]types.UID, n)
	parallel(t, "create owners", n, func(i int) error {
		cm, err := kubeClient.CoreV1().ConfigMaps(ns).Create(context.Background(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("owner-%d", i)}}, metav1.CreateOptions{})
		if err == nil {
			owners[i] = cm.UID
		}
		return err
	})
	createOwned(t, ns, "dep", n, func(i int) metav1.OwnerReference {
		return testenv.OwnerRef("v1", "ConfigMap", fmt.Sprintf("owner-%d", i), owners[i], true)
	})
	began := time.Now()
	if err := kubeClient.CoreV1().Namespaces().Delete(t.Context(), ns, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitWithin(t, 15*time.Minute, "the namespace gone", func() (bool, error) {
		_, err := kubeClient.CoreV1().Namespaces().Get(t.Context(), ns, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
	t.Logf("BULK namespace: a namespace of %d owners and %d dependents gone %s after its deletion", n, n, time.Since(began).Round(time.Millisecond))
	noTrip(t, gc)
}

// Dependents whose owners went while no collector ran — kgc's first
// start, or a restart after an upgrade — are collected at start-up, as
// kube-controller-manager's collector does, and trip nothing.
func TestBacklogAtStartDoesNotTrip(t *testing.T) {
	n := bulk(500, 5000)
	ns := newNamespace(t)
	opts := defaultOptions(ns)
	backlog := func(set string) {
		t.Helper()
		owners := make([]types.UID, n)
		parallel(t, "create owners of "+set, n, func(i int) error {
			cm, err := kubeClient.CoreV1().ConfigMaps(ns).Create(context.Background(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{
				Name: fmt.Sprintf("%s-owner-%d", set, i), Labels: map[string]string{labelSet: set + "-owner"}}}, metav1.CreateOptions{})
			if err == nil {
				owners[i] = cm.UID
			}
			return err
		})
		createOwned(t, ns, set, n, func(i int) metav1.OwnerReference {
			return testenv.OwnerRef("v1", "ConfigMap", fmt.Sprintf("%s-owner-%d", set, i), owners[i], true)
		})
		bg := metav1.DeletePropagationBackground
		if err := kubeClient.CoreV1().ConfigMaps(ns).DeleteCollection(t.Context(), metav1.DeleteOptions{PropagationPolicy: &bg},
			metav1.ListOptions{LabelSelector: labelSet + "=" + set + "-owner"}); err != nil {
			t.Fatal(err)
		}
	}

	// First start: the backlog is there before kgc ever ran.
	backlog("first")
	began := time.Now()
	gc := startKGC(t, opts)
	waitWithin(t, 15*time.Minute, "the first start's backlog collected", func() (bool, error) { return count(t, ns, "first") == 0, nil })
	t.Logf("BULK backlog (first start): %d dependents collected %s after kgc started", n, time.Since(began).Round(time.Millisecond))
	noTrip(t, gc)

	// A restart: kgc ran, stopped, and a backlog grew meanwhile.
	gc.stop(t)
	backlog("restart")
	began = time.Now()
	gc = startKGC(t, opts)
	waitWithin(t, 15*time.Minute, "the restart's backlog collected", func() (bool, error) { return count(t, ns, "restart") == 0, nil })
	t.Logf("BULK backlog (restart): %d dependents collected %s after kgc started again", n, time.Since(began).Round(time.Millisecond))
	noTrip(t, gc)
}
