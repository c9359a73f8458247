package discovery

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kgc-dev/kgc/pkg/kgc"
)

// Work left unfinished while no collector ran is finished when kgc starts:
// (a) an owner already in Foreground deletion with dependents, (b) an owner
// already orphaning its dependents, (c) dependents whose owner was deleted
// (Background) while nothing collected. A dependent of a live owner stays.
func TestStartupFinishesUnfinishedWork(t *testing.T) {
	ns := newNamespace(t)
	deps := func(prefix string, owner *corev1.ConfigMap, n int) []string {
		var names []string
		for i := range n {
			name := fmt.Sprintf("%s-%d", prefix, i)
			configMap(t, ns, name, []metav1.OwnerReference{cmRef(owner, true)})
			names = append(names, name)
		}
		return names
	}
	fgOwner := configMap(t, ns, "fg-owner", nil)
	fgDeps := deps("fg-dep", fgOwner, 5)
	orphanOwner := configMap(t, ns, "orphan-owner", nil)
	orphanDeps := deps("orphan-dep", orphanOwner, 3)
	bgOwner := configMap(t, ns, "bg-owner", nil)
	bgDeps := deps("bg-dep", bgOwner, 3)
	liveOwner := configMap(t, ns, "live-owner", nil)
	liveDeps := deps("live-dep", liveOwner, 2)

	deleteConfigMap(t, fgOwner, metav1.DeletePropagationForeground)
	deleteConfigMap(t, orphanOwner, metav1.DeletePropagationOrphan)
	deleteConfigMap(t, bgOwner, metav1.DeletePropagationBackground)
	// Nothing collects yet: the owners wait with their finalizers.
	for name, fin := range map[string]string{"fg-owner": metav1.FinalizerDeleteDependents, "orphan-owner": metav1.FinalizerOrphanDependents} {
		cm, err := kubeClient.CoreV1().ConfigMaps(ns).Get(context.Background(), name, metav1.GetOptions{})
		if err != nil || cm.DeletionTimestamp == nil || !slices.Contains(cm.Finalizers, fin) {
			t.Fatalf("%s before kgc starts: %v, %+v; want it deleting with %s", name, err, cm, fin)
		}
	}

	began := time.Now()
	startKGC(t, kgc.Options{Workers: 5, DiscoveryResyncPeriod: 5 * time.Minute})

	poll(t, "foreground owner and its dependents to be gone", func() bool {
		for _, d := range append([]string{"fg-owner"}, fgDeps...) {
			if !configMapGone(ns, d) {
				return false
			}
		}
		return true
	})
	poll(t, "dependents of the background-deleted owner to be gone", func() bool {
		for _, d := range bgDeps {
			if !configMapGone(ns, d) {
				return false
			}
		}
		return true
	})
	poll(t, "orphaning owner to be gone", func() bool { return configMapGone(ns, "orphan-owner") })
	for _, d := range append(orphanDeps, liveDeps...) {
		cm, err := kubeClient.CoreV1().ConfigMaps(ns).Get(context.Background(), d, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("%s: %v; want it kept", d, err)
		}
		for _, r := range cm.OwnerReferences {
			if r.UID == orphanOwner.UID {
				t.Errorf("%s still references the orphaning owner", d)
			}
		}
		if slices.Contains(liveDeps, d) && len(cm.OwnerReferences) != 1 {
			t.Errorf("%s lost its reference to its live owner: %+v", d, cm.OwnerReferences)
		}
	}
	t.Logf("all unfinished work done %s after kgc started", time.Since(began).Round(time.Millisecond))
}
