package gc

import (
	"context"
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/kgc-dev/kgc/sandbox/internal/testenv"
)

// Scenario 12. Namespaced dependents of cluster-scoped owners: a live owner
// keeps them, a missing one does not, and an owner kind nobody serves is
// never taken for missing.
func TestClusterScopedOwners(t *testing.T) {
	t.Parallel()
	tc := newTestCase(t)
	role := tc.clusterRole("owner", protected())
	ns := tc.namespaceObj()

	ownedByRole := tc.configMap("owned-by-clusterrole", withOwners(role.ref(false)), protected())
	ownedByNamespace := tc.configMap("owned-by-namespace", withOwners(ns.ref(false)), protected())
	missingOwner := tc.configMap("owned-by-missing-clusterrole", withOwners(missingRef(clusterRoleKind, tc.ns+"-never-existed")))
	unknown := tc.configMap("owned-by-unknown-kind", withOwners(metav1.OwnerReference{
		APIVersion: "unknown.kgc.test/v1", Kind: "Nothing", Name: "nothing", UID: testenv.RandomUID(),
	}), protected())
	// A live owner named through a version of its group that is not served
	// (rbac v1beta1 is long gone): whether kgc resolves the kind through
	// another version (owner live) or not at all (unknown kind), it is kept.
	unservedVersion := role.ref(false)
	unservedVersion.APIVersion = "rbac.authorization.k8s.io/v1beta1"
	viaUnservedVersion := tc.configMap("owned-via-unserved-version", withOwners(unservedVersion), protected())

	tc.waitGone(missingOwner)
	tc.assertKeptAfterGC(configMapKind,
		aliveWithOwners(ownedByRole, role.uid),
		aliveWithOwners(ownedByNamespace, ns.uid),
		alive(unknown),
		alive(viaUnservedVersion),
		alive(role),
	)
}

// Scenario 13. References that cross namespaces. A namespaced dependent naming
// an owner that really lives in another namespace is treated as dangling (and
// the mistake reported as an event); a cluster-scoped dependent naming a
// namespaced owner is invalid and never collected.
func TestCrossNamespaceReferences(t *testing.T) {
	t.Parallel()
	tc := newTestCase(t)
	nsA := tc.ns
	nsB := tc.createNamespace()

	ownerA := tc.configMapIn(nsA, "owner", protected())
	// Make sure kgc has seen ownerA before the dependent appears, so that
	// it knows where the real owner lives (a sentinel created after ownerA
	// in the same resource stream).
	tc.assertKeptAfterGC(configMapKind, alive(ownerA))

	depB := tc.configMapIn(nsB, "dependent", withOwners(ownerA.ref(false)))
	tc.waitGone(depB)

	// The Warning event on the dependent.
	var seen []string
	err := wait.PollUntilContextTimeout(tc.ctx, pollInterval, waitTimeout, true, func(ctx context.Context) (bool, error) {
		evs, err := kubeClient.CoreV1().Events(nsB).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		seen = seen[:0]
		for _, ev := range evs.Items {
			if ev.InvolvedObject.UID != depB.uid {
				continue
			}
			seen = append(seen, fmt.Sprintf("%s/%s: %s", ev.Type, ev.Reason, ev.Message))
			if ev.Reason == "OwnerRefInvalidNamespace" && ev.Type == corev1.EventTypeWarning &&
				ev.InvolvedObject.Name == depB.name && ev.InvolvedObject.Namespace == nsB {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Errorf("no Warning event OwnerRefInvalidNamespace on %s within %s; events on it: %q", depB, waitTimeout, seen)
	}

	// Cluster-scoped dependents naming a namespaced owner kind, whether the
	// UID is a live ConfigMap's or nobody's: invalid, never collected.
	crLiveUID := tc.clusterRole("names-live-configmap", withOwners(ownerA.ref(false)), protected())
	crMissingUID := tc.clusterRole("names-missing-configmap", withOwners(missingRef(configMapKind, "nothing")), protected())
	tc.assertKeptAfterGC(clusterRoleKind, alive(crLiveUID), alive(crMissingUID), alive(ownerA))
	// The configmap stream too: kgc must not have touched the real owner.
	tc.assertKeptAfterGC(configMapKind, alive(ownerA))
}
