package cluster

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// A namespace deleted with a thousand objects in it (KGC_IT_NAMESPACE_OBJECTS
// ConfigMaps, when set): kube-controller-manager's namespace controller
// empties it (and then finalizes it) while kgc collects what loses its
// owner on the way — the Deployment's ReplicaSet and Pods, ConfigMaps owned
// by the Deployment or by another ConfigMap. The namespace goes, with
// everything in it.
//
// The default is 1,000 ConfigMaps rather than more because the race
// detector makes the apiserver slow: on a busy 2-core machine 2,000 took
// 53 s to create and the namespace 133 s to go (the namespace controller's
// DeleteCollection, one worker as in production, exceeds the apiserver's
// 60 s request timeout and is retried).
func TestNamespaceWithThousandsOfObjects(t *testing.T) {
	t.Parallel()
	tc := newTestCase(t)
	configMaps := 1000
	if n, err := strconv.Atoi(os.Getenv("KGC_IT_NAMESPACE_OBJECTS")); err == nil && n > 0 {
		configMaps = n
	}
	d := tc.deployment("web", 3, false)
	tc.waitRolledOut("web", 3)
	parent := tc.configMap("parent", nil)

	began := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, configMaps)
	next := make(chan int)
	for range 32 {
		wg.Go(func() {
			for i := range next {
				cm := &corev1.ConfigMap{
					ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cm-%04d", i)},
					Data:       map[string]string{"i": fmt.Sprint(i)},
				}
				switch i % 10 {
				case 1:
					cm.OwnerReferences = []metav1.OwnerReference{ownerRef(d, "apps/v1", "Deployment", false)}
				case 2:
					cm.OwnerReferences = []metav1.OwnerReference{ownerRef(parent, "v1", "ConfigMap", false)}
				}
				if _, err := kubeClient.CoreV1().ConfigMaps(tc.ns).Create(tc.ctx, cm, metav1.CreateOptions{}); err != nil {
					errs <- err
				}
			}
		})
	}
	for i := range configMaps {
		next <- i
	}
	close(next)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("create configmap: %v", err)
	}
	t.Logf("%d ConfigMaps created in %v", configMaps, time.Since(began).Round(time.Millisecond))

	began = time.Now()
	if err := kubeClient.CoreV1().Namespaces().Delete(tc.ctx, tc.ns, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	tc.poll("namespace "+tc.ns+" to go", 2*waitTimeout, func(ctx context.Context) (bool, string, error) {
		ns, err := kubeClient.CoreV1().Namespaces().Get(ctx, tc.ns, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, "", nil
		}
		if err != nil {
			return false, "", err
		}
		cms, err := tc.list(ctx, configMapsGVR, "")
		if err != nil {
			return false, "", err
		}
		pods, err := tc.list(ctx, podsGVR, "")
		if err != nil {
			return false, "", err
		}
		return false, fmt.Sprintf("phase %s, %d ConfigMaps, %d Pods, conditions %v", ns.Status.Phase, len(cms), len(pods), ns.Status.Conditions), nil
	})
	t.Logf("namespace gone %v after its deletion; kgc deleted %d objects in it", time.Since(began).Round(time.Millisecond), len(audit.in(tc.ns)))
	for _, gvr := range recordedResources {
		items, err := tc.list(tc.ctx, gvr, "")
		if err != nil {
			t.Fatalf("list %s: %v", gvr.Resource, err)
		}
		if len(items) > 0 {
			t.Errorf("%d %s left in the deleted namespace", len(items), gvr.Resource)
		}
	}
	if items, err := tc.list(tc.ctx, configMapsGVR, ""); err != nil || len(items) > 0 {
		t.Errorf("%d ConfigMaps left in the deleted namespace (%v)", len(items), err)
	}
}
