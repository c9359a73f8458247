package namespaces

import (
	"context"
	"fmt"
	"os"
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
	"k8s.io/client-go/util/retry"

	"github.com/kgc-dev/kgc/pkg/kgc"
	"github.com/kgc-dev/kgc/sandbox/internal/testenv"
)

var (
	kubeClient    kubernetes.Interface
	dynamicClient dynamic.Interface
)

const (
	pollInterval = 50 * time.Millisecond
	waitTimeout  = 2 * time.Minute
)

// One collector with the namespace lifecycle on serves every test of the
// package; the tests run one after the other (a broken APIService fails
// discovery for every namespace while it exists).
func TestMain(m *testing.M) {
	os.Exit(testenv.Main(m, testenv.Options{Name: "namespaces"}, func(env *testenv.Env) error {
		kubeClient, dynamicClient = env.Kube, env.Dynamic
		_, err := env.StartCollector(env.Config, kgc.Options{
			NamespaceLifecycle: true,
			QPS:                -1, // unthrottled: the tests time the apiserver's work, not a budget
			Logger:             testenv.Logger("kgc"),
		}, time.Minute)
		return err
	}))
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

func createNamespace(t *testing.T) string {
	t.Helper()
	name := testenv.NamespaceName(t.Name())
	if _, err := kubeClient.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create namespace: %v", err)
	}
	return name
}

func deleteNamespace(t *testing.T, name string) {
	t.Helper()
	if err := kubeClient.CoreV1().Namespaces().Delete(context.Background(), name, metav1.DeleteOptions{}); err != nil {
		t.Fatalf("delete namespace %s: %v", name, err)
	}
}

func namespaceGone(name string) bool {
	_, err := kubeClient.CoreV1().Namespaces().Get(context.Background(), name, metav1.GetOptions{})
	return apierrors.IsNotFound(err)
}

// condition returns the namespace's condition of type typ (zero if none).
func condition(t *testing.T, name string, typ corev1.NamespaceConditionType) corev1.NamespaceCondition {
	t.Helper()
	ns, err := kubeClient.CoreV1().Namespaces().Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get namespace %s: %v", name, err)
	}
	for _, c := range ns.Status.Conditions {
		if c.Type == typ {
			return c
		}
	}
	return corev1.NamespaceCondition{}
}

func configMap(t *testing.T, ns, name string, finalizers ...string) {
	t.Helper()
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Finalizers: finalizers}}
	if _, err := kubeClient.CoreV1().ConfigMaps(ns).Create(context.Background(), cm, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create configmap %s/%s: %v", ns, name, err)
	}
}

func pod(t *testing.T, ns, name string, finalizers ...string) {
	t.Helper()
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Finalizers: finalizers},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "example.invalid/none"}}},
	}
	if _, err := kubeClient.CoreV1().Pods(ns).Create(context.Background(), p, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create pod %s/%s: %v", ns, name, err)
	}
}

// release removes every finalizer of one object (what its controller would
// do once done).
func release(t *testing.T, gvr schema.GroupVersionResource, ns, name string) {
	t.Helper()
	patch := []byte(`{"metadata":{"finalizers":null}}`)
	if _, err := dynamicClient.Resource(gvr).Namespace(ns).Patch(context.Background(), name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatalf("release %s %s/%s: %v", gvr.Resource, ns, name, err)
	}
}

var (
	podsGVR       = schema.GroupVersionResource{Version: "v1", Resource: "pods"}
	configMapsGVR = schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}
	apiServiceGVR = schema.GroupVersionResource{Group: "apiregistration.k8s.io", Version: "v1", Resource: "apiservices"}
)

// crd creates a namespaced CRD serving versions (the first stores) and
// waits until it is established and served; it is deleted when the test ends.
func crd(t *testing.T, group, plural, kind string, versions ...string) {
	t.Helper()
	u := testenv.CRD(group, plural, kind, true, versions...)
	if _, err := dynamicClient.Resource(testenv.CRDGVR).Create(context.Background(), u, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create CRD: %v", err)
	}
	t.Cleanup(func() {
		_ = dynamicClient.Resource(testenv.CRDGVR).Delete(context.Background(), plural+"."+group, metav1.DeleteOptions{})
	})
	poll(t, "the CRD to be established", func() bool {
		got, err := dynamicClient.Resource(testenv.CRDGVR).Get(context.Background(), plural+"."+group, metav1.GetOptions{})
		return err == nil && testenv.HasCondition(got, "Established", "True")
	})
}

// customResource creates an instance (retrying while the new endpoint
// still answers NotFound).
func customResource(t *testing.T, gvr schema.GroupVersionResource, kind, ns, name string, finalizers ...string) {
	t.Helper()
	u := &unstructured.Unstructured{}
	u.SetAPIVersion(gvr.GroupVersion().String())
	u.SetKind(kind)
	u.SetNamespace(ns)
	u.SetName(name)
	u.SetFinalizers(finalizers)
	err := wait.PollUntilContextTimeout(context.Background(), pollInterval, waitTimeout, true, func(ctx context.Context) (bool, error) {
		_, err := dynamicClient.Resource(gvr).Namespace(ns).Create(ctx, u, metav1.CreateOptions{})
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		return err == nil, err
	})
	if err != nil {
		t.Fatalf("create %s %s/%s: %v", kind, ns, name, err)
	}
}

func setConversion(t *testing.T, crdName string, conversion map[string]any) {
	t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		u, err := dynamicClient.Resource(testenv.CRDGVR).Get(context.Background(), crdName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if err := unstructured.SetNestedField(u.Object, conversion, "spec", "conversion"); err != nil {
			return err
		}
		_, err = dynamicClient.Resource(testenv.CRDGVR).Update(context.Background(), u, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatalf("set conversion of CRD %s: %v", crdName, err)
	}
}

// createMany creates n ConfigMaps in ns with 16 clients at once.
func createMany(t *testing.T, ns string, n int) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	next := make(chan int)
	for range 16 {
		wg.Go(func() {
			for i := range next {
				cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cm-%05d", i)}, Data: map[string]string{"k": strings.Repeat("v", 64)}}
				if _, err := kubeClient.CoreV1().ConfigMaps(ns).Create(context.Background(), cm, metav1.CreateOptions{}); err != nil {
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
