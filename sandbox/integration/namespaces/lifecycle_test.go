package namespaces

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilrand "k8s.io/apimachinery/pkg/util/rand"

	"github.com/kgc-dev/kgc/sandbox/internal/testenv"
)

// A namespace with built-in and custom resources is emptied and goes; a
// namespace next to it keeps its objects.
func TestBuiltinAndCustomResources(t *testing.T) {
	suffix := utilrand.String(5)
	group, plural, kind := "ns"+suffix+".kgc.test", "gadgets", "Gadget"
	crd(t, group, plural, kind, "v1")
	gvr := schema.GroupVersionResource{Group: group, Version: "v1", Resource: plural}

	ns, other := createNamespace(t), createNamespace(t)
	for _, n := range []string{ns, other} {
		configMap(t, n, "cm")
		pod(t, n, "pod")
		customResource(t, gvr, kind, n, "cr")
		if _, err := kubeClient.CoreV1().Secrets(n).Create(context.Background(), &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "s"}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	began := time.Now()
	deleteNamespace(t, ns)
	poll(t, "namespace "+ns+" to be gone", func() bool { return namespaceGone(ns) })
	t.Logf("namespace with built-in and custom resources gone %s after its deletion", time.Since(began).Round(time.Millisecond))

	if _, err := kubeClient.CoreV1().ConfigMaps(other).Get(context.Background(), "cm", metav1.GetOptions{}); err != nil {
		t.Errorf("configmap of the other namespace: %v", err)
	}
	if _, err := dynamicClient.Resource(gvr).Namespace(other).Get(context.Background(), "cr", metav1.GetOptions{}); err != nil {
		t.Errorf("custom resource of the other namespace: %v", err)
	}
	// The namespace's own content is gone with it.
	if l, err := dynamicClient.Resource(gvr).Namespace(ns).List(context.Background(), metav1.ListOptions{}); err != nil || len(l.Items) != 0 {
		t.Errorf("custom resources left in %s: %v %v", ns, l, err)
	}
	deleteNamespace(t, other)
	poll(t, "namespace "+other+" to be gone", func() bool { return namespaceGone(other) })
}

// Objects held by finalizers keep their namespace: Pods first (the other
// content waits for them), then the rest; the conditions say what remains
// and which finalizers hold it; kgc never removes the objects' finalizers.
func TestFinalizersHeldThenReleased(t *testing.T) {
	const hold = "example.com/hold"
	ns := createNamespace(t)
	pod(t, ns, "held-pod", hold)
	configMap(t, ns, "held-cm", hold)
	configMap(t, ns, "free-cm")
	deleteNamespace(t, ns)

	poll(t, "conditions to report the held pod", func() bool {
		c := condition(t, ns, corev1.NamespaceFinalizersRemaining)
		return c.Status == corev1.ConditionTrue && c.Message == "Some content in the namespace has finalizers remaining: "+hold+" in 1 resource instances"
	})
	if c := condition(t, ns, corev1.NamespaceContentRemaining); c.Status != corev1.ConditionTrue || c.Reason != "SomeResourcesRemain" || c.Message != "Some resources are remaining: pods. has 1 resource instances" {
		t.Errorf("ContentRemaining = %+v", c)
	}
	// Pods first: while the pod is held, nothing else has been deleted.
	for _, name := range []string{"held-cm", "free-cm"} {
		cm, err := kubeClient.CoreV1().ConfigMaps(ns).Get(context.Background(), name, metav1.GetOptions{})
		if err != nil || cm.DeletionTimestamp != nil {
			t.Errorf("configmap %s touched while a pod remains: %v %v", name, err, cm.GetDeletionTimestamp())
		}
	}
	p, err := kubeClient.CoreV1().Pods(ns).Get(context.Background(), "held-pod", metav1.GetOptions{})
	if err != nil || len(p.Finalizers) != 1 || p.DeletionTimestamp == nil {
		t.Fatalf("held pod = %v, %v; want deleting with its finalizer", p, err)
	}

	release(t, podsGVR, ns, "held-pod")
	poll(t, "conditions to report the held configmap", func() bool {
		c := condition(t, ns, corev1.NamespaceContentRemaining)
		return c.Status == corev1.ConditionTrue && c.Message == "Some resources are remaining: configmaps. has 1 resource instances"
	})
	if _, err := kubeClient.CoreV1().ConfigMaps(ns).Get(context.Background(), "free-cm", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("free configmap: %v, want deleted", err)
	}
	if c := condition(t, ns, corev1.NamespaceDeletionContentFailure); c.Status != corev1.ConditionFalse || c.Reason != "ContentDeleted" {
		t.Errorf("ContentFailure = %+v (held content is not a failure)", c)
	}
	cm, err := kubeClient.CoreV1().ConfigMaps(ns).Get(context.Background(), "held-cm", metav1.GetOptions{})
	if err != nil || len(cm.Finalizers) != 1 || cm.DeletionTimestamp == nil {
		t.Fatalf("held configmap = %v, %v; want deleting with its finalizer", cm, err)
	}

	release(t, configMapsGVR, ns, "held-cm")
	poll(t, "namespace "+ns+" to be gone", func() bool { return namespaceGone(ns) })
}

// A CRD whose conversion webhook is down cannot be listed or emptied: the
// condition names the failure, everything else is deleted, and the
// namespace stays until the CRD heals.
func TestBrokenConversionWebhook(t *testing.T) {
	suffix := utilrand.String(5)
	group, plural, kind := "broken"+suffix+".kgc.test", "things", "Thing"
	crd(t, group, plural, kind, "v1", "v2")
	v1 := schema.GroupVersionResource{Group: group, Version: "v1", Resource: plural}
	ns := createNamespace(t)
	customResource(t, v1, kind, ns, "thing")
	configMap(t, ns, "cm")
	setConversion(t, plural+"."+group, map[string]any{
		"strategy": "Webhook",
		"webhook": map[string]any{
			"conversionReviewVersions": []any{"v1"},
			"clientConfig": map[string]any{"service": map[string]any{
				"namespace": "default", "name": "kgc-no-such-conversion-service", "path": "/convert", "port": int64(443),
			}},
		},
	})
	v2 := schema.GroupVersionResource{Group: group, Version: "v2", Resource: plural}
	poll(t, "listing the CRD's v2 to fail", func() bool {
		_, err := dynamicClient.Resource(v2).Namespace(ns).List(context.Background(), metav1.ListOptions{})
		return err != nil
	})
	deleteNamespace(t, ns)

	poll(t, "ContentFailure to name the broken resource", func() bool {
		c := condition(t, ns, corev1.NamespaceDeletionContentFailure)
		return c.Status == corev1.ConditionTrue && c.Reason == "ContentDeletionFailed" && strings.Contains(c.Message, "conversion")
	})
	t.Logf("ContentFailure: %s", condition(t, ns, corev1.NamespaceDeletionContentFailure).Message)
	poll(t, "the rest to be deleted", func() bool {
		_, err := kubeClient.CoreV1().ConfigMaps(ns).Get(context.Background(), "cm", metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	})
	if namespaceGone(ns) {
		t.Fatal("namespace finalized while a resource could not be listed")
	}

	setConversion(t, plural+"."+group, map[string]any{"strategy": "None"})
	poll(t, "namespace "+ns+" to be gone once the CRD heals", func() bool { return namespaceGone(ns) })
}

// An aggregated APIService without a backend fails discovery of its group:
// DiscoveryFailure says so, the rest is deleted, and the namespace goes
// once the APIService is removed.
func TestUnavailableAPIService(t *testing.T) {
	name := "v1beta1.nsbroken.example.com"
	ns := createNamespace(t)
	configMap(t, ns, "cm")
	u := testenv.UnavailableAPIService("nsbroken.example.com", "v1beta1")
	if _, err := dynamicClient.Resource(apiServiceGVR).Create(context.Background(), u, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create APIService: %v", err)
	}
	removed := false
	remove := func() {
		if removed {
			return
		}
		removed = true
		if err := dynamicClient.Resource(apiServiceGVR).Delete(context.Background(), name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("delete APIService: %v", err)
		}
	}
	t.Cleanup(remove)
	poll(t, "the APIService to be reported unavailable", func() bool {
		got, err := dynamicClient.Resource(apiServiceGVR).Get(context.Background(), name, metav1.GetOptions{})
		return err == nil && testenv.HasCondition(got, "Available", "False")
	})
	deleteNamespace(t, ns)

	poll(t, "DiscoveryFailure to name the broken group", func() bool {
		c := condition(t, ns, corev1.NamespaceDeletionDiscoveryFailure)
		return c.Status == corev1.ConditionTrue && c.Reason == "DiscoveryFailed" &&
			strings.HasPrefix(c.Message, "Discovery failed for some groups, 1 failing: ") && strings.Contains(c.Message, "nsbroken.example.com")
	})
	t.Logf("DiscoveryFailure: %s", condition(t, ns, corev1.NamespaceDeletionDiscoveryFailure).Message)
	poll(t, "the rest to be deleted", func() bool {
		_, err := kubeClient.CoreV1().ConfigMaps(ns).Get(context.Background(), "cm", metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	})
	if namespaceGone(ns) {
		t.Fatal("namespace finalized while discovery was incomplete")
	}
	remove()
	poll(t, "namespace "+ns+" to be gone once the APIService is removed", func() bool { return namespaceGone(ns) })
}

// A namespace with thousands of objects: timed from its deletion to its
// disappearance (at least the 5 s admission grace; DELETECOLLECTION does
// the bulk in one call).
func TestThousandsOfObjects(t *testing.T) {
	const n = 2000
	ns := createNamespace(t)
	began := time.Now()
	createMany(t, ns, n)
	t.Logf("created %d configmaps in %s", n, time.Since(began).Round(time.Millisecond))
	began = time.Now()
	deleteNamespace(t, ns)
	poll(t, fmt.Sprintf("namespace with %d configmaps to be gone", n), func() bool { return namespaceGone(ns) })
	t.Logf("namespace with %d configmaps gone %s after its deletion (kgc unthrottled; includes the 5s admission grace)", n, time.Since(began).Round(time.Millisecond))
}
