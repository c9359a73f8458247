package discovery

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/kgc-dev/kgc/internal/orphanlog"
	"github.com/kgc-dev/kgc/pkg/kgc"
)

// TestFinalizersWaitForUnlistedResources: negative facts wait for unlisted
// resources, boundedly (docs/correctness.md), against the real apiserver.
// Owners were deleted with Orphan and Foreground while no collector ran;
// their dependents are custom resources whose list fails when kgc starts (a
// conversion webhook that is down). kgc must not remove the owners'
// finalizers before it has seen those dependents:
//   - with a hold longer than the outage, the Orphan owner goes only after
//     its dependents lost their reference to it (they survive), and the
//     Foreground owner only after its dependents are gone;
//   - with a hold shorter than the outage, the Orphan owner goes when the
//     hold ends, and its dependents, seen only later, are still orphaned,
//     not deleted;
//   - the same with kgc restarted while the resource is still down: the
//     next kgc reads the owner from the orphan journal (a Lease) and
//     orphans its dependents too. Without the journal it deleted them as
//     dangling, as upstream does (upstream never remembers an orphaning
//     owner).
//
// Meanwhile Background cascades of healthy kinds go on: nothing waits for
// the broken resource but the two finalizers.
func TestFinalizersWaitForUnlistedResources(t *testing.T) {
	for _, tc := range []struct {
		name    string
		hold    time.Duration
		restart bool
	}{
		{"hold longer than the outage", time.Hour, false},
		{"hold shorter than the outage", 2 * time.Second, false},
		{"hold shorter than the outage, kgc restarted during it", 2 * time.Second, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ns := newNamespace(t)
			s := newCRDSpec("unlisted.kgc.test", "v1", "v2")
			createCRD(t, s)
			t.Cleanup(func() { deleteCRDAndWait(t, s.name()) })
			poll(t, "CRD to be established", func() bool { return crdEstablished(s.name()) })

			orphanOwner := configMap(t, ns, "orphan-owner", nil)
			fgOwner := configMap(t, ns, "fg-owner", nil)
			var orphans, fgDeps []*unstructured.Unstructured
			for i := range 3 {
				orphans = append(orphans, customResource(t, s, "v1", ns, fmt.Sprintf("orphan-%d", i), []metav1.OwnerReference{cmRef(orphanOwner, true)}))
				fgDeps = append(fgDeps, customResource(t, s, "v1", ns, fmt.Sprintf("fg-%d", i), []metav1.OwnerReference{cmRef(fgOwner, true)}))
			}
			breakConversion(t, s, ns)
			// No collector runs yet: the apiserver only adds the finalizers.
			deleteConfigMap(t, orphanOwner, metav1.DeletePropagationOrphan)
			deleteConfigMap(t, fgOwner, metav1.DeletePropagationForeground)

			journal := &kgc.OrphanJournalOptions{LeaseNamespace: ns, LeaseName: "kgc-orphans"}
			opts := kgc.Options{Workers: 5, UnlistedHold: tc.hold, DiscoveryResyncPeriod: time.Second, OrphanJournal: journal}
			gc, _, _, stop := startStoppableKGC(t, opts)
			srv := httptest.NewServer(gc.Handler())
			defer srv.Close()

			// A Background cascade of ConfigMaps completes while the CRD is
			// broken; by then kgc has checked both owners (it re-checks
			// everything unfinished when its workers start).
			barrier := configMap(t, ns, "barrier", nil)
			barrierDep := configMap(t, ns, "barrier-dep", []metav1.OwnerReference{cmRef(barrier, false)})
			deleteConfigMap(t, barrier, metav1.DeletePropagationBackground)
			poll(t, "a healthy cascade to complete next to the broken CRD", func() bool { return configMapGone(ns, barrierDep.Name) })

			if tc.hold == time.Hour {
				for _, o := range []*corev1.ConfigMap{orphanOwner, fgOwner} {
					if configMapGone(ns, o.Name) {
						t.Fatalf("%s went while its dependents' resource had never been listed", o.Name)
					}
				}
				poll(t, "readyz to name both held finalizers", func() bool {
					_, body := get(t, srv.URL+"/readyz?verbose")
					return strings.Contains(body, "finalizer-held:ConfigMap.v1 "+ns+"/orphan-owner") &&
						strings.Contains(body, "finalizer-held:ConfigMap.v1 "+ns+"/fg-owner")
				})
			} else {
				poll(t, "the orphan owner to go once the hold passed", func() bool { return configMapGone(ns, orphanOwner.Name) })
				poll(t, "readyz to name the finalizer removed early", func() bool {
					code, body := get(t, srv.URL+"/readyz?verbose")
					return code == http.StatusOK && strings.Contains(body, "finalizer-released-unlisted:ConfigMap.v1 "+ns+"/orphan-owner")
				})
			}

			if tc.restart {
				// The orphan owner went while its dependents' resource
				// was unlisted; a new kgc starts before it heals.
				stop()
				lease, err := kubeClient.CoordinationV1().Leases(ns).Get(context.Background(), journal.LeaseName, metav1.GetOptions{})
				if err != nil || lease.Annotations[orphanlog.Annotation] == "" {
					t.Fatalf("the orphan journal's Lease after the orphan owner went: %v, %v", lease, err)
				}
				startKGC(t, opts)
			}
			setConversion(t, s.name(), map[string]any{"strategy": "None"})
			poll(t, "both owners to go once their dependents are listed", func() bool {
				return configMapGone(ns, orphanOwner.Name) && configMapGone(ns, fgOwner.Name)
			})
			for _, d := range fgDeps {
				if tc.hold == time.Hour && !customResourceGone(s, "v1", ns, d.GetName()) {
					t.Errorf("Foreground owner gone before its blocking dependent %s", d.GetName())
				}
			}
			// Past the hold the Foreground owner went first (the order is
			// lost, not the outcome): its dependents still go.
			poll(t, "the Foreground owner's dependents to go", func() bool {
				for _, d := range fgDeps {
					if !customResourceGone(s, "v1", ns, d.GetName()) {
						return false
					}
				}
				return true
			})
			poll(t, "the orphaned dependents to lose their reference", func() bool {
				for _, d := range orphans {
					u, err := dynamicClient.Resource(s.gvr("v1")).Namespace(ns).Get(context.Background(), d.GetName(), metav1.GetOptions{})
					if err != nil || slices.ContainsFunc(u.GetOwnerReferences(), func(r metav1.OwnerReference) bool { return r.UID == orphanOwner.UID }) {
						return false
					}
				}
				return true
			})
		})
	}
}

// breakConversion makes the CRD's v2 (its preferred version, which kgc
// monitors) need a conversion webhook whose Service does not exist, and
// waits until listing v2 fails.
func breakConversion(t *testing.T, s crdSpec, ns string) {
	t.Helper()
	setConversion(t, s.name(), map[string]any{
		"strategy": "Webhook",
		"webhook": map[string]any{
			"conversionReviewVersions": []any{"v1"},
			"clientConfig": map[string]any{"service": map[string]any{
				"namespace": "default", "name": "kgc-no-such-conversion-service", "path": "/convert", "port": int64(443),
			}},
		},
	})
	poll(t, "listing the CRD's v2 to fail", func() bool {
		_, err := dynamicClient.Resource(s.gvr("v2")).Namespace(ns).List(context.Background(), metav1.ListOptions{})
		return err != nil
	})
}
