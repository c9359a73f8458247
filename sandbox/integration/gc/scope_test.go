package gc

import (
	"context"
	"errors"
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/kgc-dev/kgc/sandbox/internal/safety"
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
	tc.waitWarning(depB, "OwnerRefInvalidNamespace")

	// Cluster-scoped dependents naming a namespaced owner kind, whether the
	// UID is a live ConfigMap's or nobody's: invalid, never collected, and
	// (upstream's published rule) every reference left as it is, a
	// dangling one next to the invalid one too, with a Warning event.
	liveRefs := []metav1.OwnerReference{ownerA.ref(false), missingRef(clusterRoleKind, tc.ns+"-never-existed")}
	missingRefs := []metav1.OwnerReference{missingRef(configMapKind, "nothing")}
	crLiveUID := tc.clusterRole("names-live-configmap", withOwners(liveRefs...), protected())
	crMissingUID := tc.clusterRole("names-missing-configmap", withOwners(missingRefs...), protected())
	// kgc records the event while it decides on the dependent: once it is
	// there, kgc has decided, and the sentinel below gives any write of
	// that decision time to land before the references are checked.
	tc.waitWarning(crLiveUID, "OwnerRefInvalidNamespace")
	tc.waitWarning(crMissingUID, "OwnerRefInvalidNamespace")
	tc.assertKeptAfterGC(clusterRoleKind,
		aliveWithReferences(crLiveUID, liveRefs),
		aliveWithReferences(crMissingUID, missingRefs),
		alive(ownerA),
	)
	// The configmap stream too: kgc must not have touched the real owner.
	tc.assertKeptAfterGC(configMapKind, alive(ownerA))
}

// waitWarning waits for a Warning event with reason on o. Events on a
// cluster-scoped object are recorded in namespace default, so they are
// looked for in every namespace, by the object's UID.
func (tc *testCase) waitWarning(o obj, reason string) {
	tc.t.Helper()
	var seen []string
	err := wait.PollUntilContextTimeout(tc.ctx, pollInterval, waitTimeout, true, func(ctx context.Context) (bool, error) {
		evs, err := kubeClient.CoreV1().Events(metav1.NamespaceAll).List(ctx, metav1.ListOptions{
			FieldSelector: fields.OneTermEqualSelector("involvedObject.uid", string(o.uid)).String(),
		})
		if err != nil {
			return false, nil
		}
		seen = seen[:0]
		for _, ev := range evs.Items {
			seen = append(seen, fmt.Sprintf("%s/%s: %s", ev.Type, ev.Reason, ev.Message))
			if ev.Reason == reason && ev.Type == corev1.EventTypeWarning &&
				ev.InvolvedObject.Name == o.name && ev.InvolvedObject.Namespace == o.namespace {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		tc.t.Errorf("no Warning event %s on %s within %s; events on it: %q", reason, o, waitTimeout, seen)
	}
}

// aliveWithReferences: alive, with exactly the ownerReferences refs, in
// order.
func aliveWithReferences(o obj, refs []metav1.OwnerReference) kept {
	return kept{o: o, check: func(m *metav1.PartialObjectMetadata) error {
		if m.DeletionTimestamp != nil {
			return errors.New("is being deleted")
		}
		if !apiequality.Semantic.DeepEqual(m.OwnerReferences, refs) {
			return fmt.Errorf("ownerReferences changed: want %s", safety.Describe(&metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{OwnerReferences: refs}}))
		}
		return nil
	}}
}
