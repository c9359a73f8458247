package namespaces

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
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
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"

	"github.com/kgc-dev/kgc/pkg/kgc"
	"github.com/kgc-dev/kgc/sandbox/internal/cpproc"
	"github.com/kgc-dev/kgc/sandbox/internal/testenv"
)

// side is one implementation of the namespace lifecycle, on a control
// plane of its own:
//
//   - "kgc": etcd + kube-apiserver without a controller manager (the
//     audience of kgc's namespace lifecycle: envtest and the like), and kgc
//     with NamespaceLifecycle on;
//   - "kcm": a whole sandbox cluster (cpproc.Options.Cluster):
//     kube-controller-manager v1.36.3 with its namespace controller and
//     every other controller but its garbage collector, kube-scheduler,
//     one simulated node; and kgc as the garbage collector, with
//     NamespaceLifecycle off.
//
// Every scenario runs on both sides at once, with the same names, and the
// two records are compared (compare_test.go).
type side struct {
	name    string
	kube    kubernetes.Interface
	dynamic dynamic.Interface
	// gc is the kgc collecting there.
	gc *testenv.Collector
}

var (
	kgcSide, kcmSide *side
	sides            []*side
)

const (
	pollInterval = 50 * time.Millisecond
	// waitTimeout bounds every wait. kube-controller-manager re-checks a
	// namespace whose Pods terminate only after its estimate (up to 16 s
	// for the default 30 s grace period), and the machine may be busy.
	waitTimeout = 3 * time.Minute
)

// Two control planes serve every test of the package. Scenarios run one
// after the other (a broken APIService fails discovery for every
// namespace of its control plane while it exists); within a scenario the
// two sides run in parallel.
func TestMain(m *testing.M) {
	os.Exit(testenv.Main(m, testenv.Options{Name: "namespaces"}, func(env *testenv.Env) error {
		kgcSide = &side{name: "kgc", kube: env.Kube, dynamic: env.Dynamic}
		// Both sides' kgc run with `kgc run`'s safety defaults: deleting
		// a namespace must never trip them.
		opts := runDefaults()
		opts.NamespaceLifecycle = true
		opts.QPS = -1 // unthrottled: the tests time the apiserver's work, not a budget
		opts.Logger = testenv.Logger("kgc")
		var err error
		if kgcSide.gc, err = env.StartCollector(env.Config, opts, time.Minute); err != nil {
			return err
		}

		began := time.Now()
		ctx, cancel := context.WithTimeout(env.Ctx, 5*time.Minute)
		defer cancel()
		cluster, err := cpproc.Start(ctx, cpproc.Options{
			Dir:     filepath.Join(env.Dir, "cluster"),
			Logf:    testenv.Logf("cluster"),
			Cluster: true,
			Nodes:   1,
		})
		if err != nil {
			return fmt.Errorf("starting the cluster with kube-controller-manager: %w", err)
		}
		// Registered first, so it runs after the collector's cleanup.
		env.Cleanup(func() {
			if err := cluster.Stop(); err != nil {
				fmt.Fprintln(os.Stderr, "stop the cluster:", err)
			}
		})
		testenv.Logf("setup")("cluster with kube-controller-manager up in %s", time.Since(began).Round(time.Millisecond))
		cfg := rest.CopyConfig(cluster.Config)
		kcmSide = &side{name: "kcm", kube: kubernetes.NewForConfigOrDie(cfg), dynamic: dynamic.NewForConfigOrDie(cfg)}
		// kgc replaces kube-controller-manager's garbage collector there,
		// as it would in a real cluster, and leaves namespaces to it.
		opts = runDefaults()
		opts.QPS = -1
		opts.Logger = testenv.Logger("kgc-gc")
		if kcmSide.gc, err = env.StartCollector(cfg, opts, time.Minute); err != nil {
			return err
		}
		sides = []*side{kgcSide, kcmSide}
		return nil
	}))
}

// runDefaults are `kgc run`'s safety defaults: the deletion breaker and
// the orphan journal on their Leases in kube-system, the restore hold.
func runDefaults() kgc.Options {
	b := kgc.DefaultBreakerOptions()
	b.LeaseNamespace, b.LeaseName = metav1.NamespaceSystem, "kgc"
	return kgc.Options{Breaker: &b, HoldRestored: true,
		OrphanJournal: &kgc.OrphanJournalOptions{LeaseNamespace: metav1.NamespaceSystem, LeaseName: "kgc-orphans"}}
}

func poll(t *testing.T, what string, cond func() bool) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), pollInterval, waitTimeout, true, func(context.Context) (bool, error) {
		return cond(), nil
	})
	if err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
}

func (s *side) createNamespace(t *testing.T, name string) {
	t.Helper()
	if _, err := s.kube.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create namespace: %v", err)
	}
}

func (s *side) deleteNamespace(t *testing.T, name string) {
	t.Helper()
	if err := s.kube.CoreV1().Namespaces().Delete(context.Background(), name, metav1.DeleteOptions{}); err != nil {
		t.Fatalf("delete namespace %s: %v", name, err)
	}
}

func (s *side) namespaceGone(name string) bool {
	_, err := s.kube.CoreV1().Namespaces().Get(context.Background(), name, metav1.GetOptions{})
	return apierrors.IsNotFound(err)
}

// conditions returns the namespace's deletion conditions (nil once it is
// gone).
func (s *side) conditions(t *testing.T, name string) conds {
	t.Helper()
	ns, err := s.kube.CoreV1().Namespaces().Get(context.Background(), name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		t.Fatalf("get namespace %s: %v", name, err)
	}
	out := conds{}
	for _, c := range ns.Status.Conditions {
		out[c.Type] = cond{Status: c.Status, Reason: c.Reason, Message: c.Message}
	}
	return out
}

func (s *side) configMap(t *testing.T, ns, name string, finalizers ...string) {
	t.Helper()
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Finalizers: finalizers}}
	if _, err := s.kube.CoreV1().ConfigMaps(ns).Create(context.Background(), cm, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create configmap %s/%s: %v", ns, name, err)
	}
}

func (s *side) secret(t *testing.T, ns, name string) {
	t.Helper()
	if _, err := s.kube.CoreV1().Secrets(ns).Create(context.Background(), &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create secret %s/%s: %v", ns, name, err)
	}
}

func (s *side) pod(t *testing.T, ns, name string, finalizers ...string) {
	t.Helper()
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Finalizers: finalizers},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "example.invalid/none"}}},
	}
	if _, err := s.kube.CoreV1().Pods(ns).Create(context.Background(), p, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create pod %s/%s: %v", ns, name, err)
	}
}

// state is what became of one object: "present", "deleting [finalizers]"
// or "gone".
func (s *side) state(t *testing.T, gvr schema.GroupVersionResource, ns, name string) string {
	t.Helper()
	u, err := s.dynamic.Resource(gvr).Namespace(ns).Get(context.Background(), name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return "gone"
	case err != nil:
		t.Fatalf("get %s %s/%s: %v", gvr.Resource, ns, name, err)
	case u.GetDeletionTimestamp() != nil:
		return fmt.Sprintf("deleting %v", u.GetFinalizers())
	}
	return "present"
}

// release removes every finalizer of one object (what its controller would
// do once done).
func (s *side) release(t *testing.T, gvr schema.GroupVersionResource, ns, name string) {
	t.Helper()
	patch := []byte(`{"metadata":{"finalizers":null}}`)
	if _, err := s.dynamic.Resource(gvr).Namespace(ns).Patch(context.Background(), name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatalf("release %s %s/%s: %v", gvr.Resource, ns, name, err)
	}
}

var (
	podsGVR       = schema.GroupVersionResource{Version: "v1", Resource: "pods"}
	configMapsGVR = schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}
	secretsGVR    = schema.GroupVersionResource{Version: "v1", Resource: "secrets"}
	apiServiceGVR = schema.GroupVersionResource{Group: "apiregistration.k8s.io", Version: "v1", Resource: "apiservices"}
)

// crd creates a namespaced CRD serving versions (the first stores) and
// waits until it is established; it is deleted when the test ends.
func (s *side) crd(t *testing.T, group, plural, kind string, versions ...string) {
	t.Helper()
	u := testenv.CRD(group, plural, kind, true, versions...)
	if _, err := s.dynamic.Resource(testenv.CRDGVR).Create(context.Background(), u, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create CRD: %v", err)
	}
	t.Cleanup(func() {
		_ = s.dynamic.Resource(testenv.CRDGVR).Delete(context.Background(), plural+"."+group, metav1.DeleteOptions{})
	})
	poll(t, "the CRD to be established", func() bool {
		got, err := s.dynamic.Resource(testenv.CRDGVR).Get(context.Background(), plural+"."+group, metav1.GetOptions{})
		return err == nil && testenv.HasCondition(got, "Established", "True")
	})
}

// customResource creates an instance (retrying while the new endpoint
// still answers NotFound).
func (s *side) customResource(t *testing.T, gvr schema.GroupVersionResource, kind, ns, name string, finalizers ...string) {
	t.Helper()
	u := &unstructured.Unstructured{}
	u.SetAPIVersion(gvr.GroupVersion().String())
	u.SetKind(kind)
	u.SetNamespace(ns)
	u.SetName(name)
	u.SetFinalizers(finalizers)
	err := wait.PollUntilContextTimeout(context.Background(), pollInterval, waitTimeout, true, func(ctx context.Context) (bool, error) {
		_, err := s.dynamic.Resource(gvr).Namespace(ns).Create(ctx, u, metav1.CreateOptions{})
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		return err == nil, err
	})
	if err != nil {
		t.Fatalf("create %s %s/%s: %v", kind, ns, name, err)
	}
}

func (s *side) setConversion(t *testing.T, crdName string, conversion map[string]any) {
	t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		u, err := s.dynamic.Resource(testenv.CRDGVR).Get(context.Background(), crdName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if err := unstructured.SetNestedField(u.Object, conversion, "spec", "conversion"); err != nil {
			return err
		}
		_, err = s.dynamic.Resource(testenv.CRDGVR).Update(context.Background(), u, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatalf("set conversion of CRD %s: %v", crdName, err)
	}
}

// createMany creates n ConfigMaps in ns with 16 clients at once.
func (s *side) createMany(t *testing.T, ns string, n int) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	next := make(chan int)
	for range 16 {
		wg.Go(func() {
			for i := range next {
				cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cm-%05d", i)}, Data: map[string]string{"k": strings.Repeat("v", 64)}}
				if _, err := s.kube.CoreV1().ConfigMaps(ns).Create(context.Background(), cm, metav1.CreateOptions{}); err != nil {
					select {
					case errs <- err:
					default:
					}
					continue // keep draining, so that the sender never blocks
				}
			}
		})
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	select {
	case err := <-errs:
		t.Fatalf("create configmaps: %v", err)
	default:
	}
}
