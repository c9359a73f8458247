package gc

import (
	"context"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilrand "k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/kgc-dev/kgc/sandbox/internal/safety"
	"github.com/kgc-dev/kgc/sandbox/internal/testenv"
)

const crdGroup = "kgc.test"

var crdGVR = testenv.CRDGVR

// newCRDKind returns a fresh namespaced kind in group kgc.test (not yet
// created): random names keep parallel tests and reruns apart.
func newCRDKind() kindInfo {
	suffix := utilrand.String(6)
	return kindInfo{
		gvr:        schema.GroupVersionResource{Group: crdGroup, Version: "v1", Resource: "widgets" + suffix},
		apiVersion: crdGroup + "/v1",
		kind:       "Widget" + strings.ToUpper(suffix[:1]) + suffix[1:],
		namespaced: true,
	}
}

func crdName(k kindInfo) string { return k.gvr.Resource + "." + k.gvr.Group }

// createCRD creates the CustomResourceDefinition serving k, waits until it is
// established, and deletes it when the test ends.
func (tc *testCase) createCRD(k kindInfo) obj {
	tc.t.Helper()
	crd := testenv.CRD(k.gvr.Group, k.gvr.Resource, k.kind, true, k.gvr.Version)
	created, err := dynamicClient.Resource(crdGVR).Create(tc.ctx, crd, metav1.CreateOptions{})
	if err != nil {
		tc.t.Fatalf("create CRD %s: %v", crdName(k), err)
	}
	o := obj{kindInfo: kindInfo{gvr: crdGVR, apiVersion: "apiextensions.k8s.io/v1", kind: "CustomResourceDefinition"},
		name: created.GetName(), uid: created.GetUID()}
	tc.cleanup(func(ctx context.Context) {
		err := dynamicClient.Resource(crdGVR).Delete(ctx, o.name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &o.uid}})
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			tc.t.Logf("cleanup: delete CRD %s: %v", o.name, err)
		}
	})

	err = wait.PollUntilContextTimeout(tc.ctx, pollInterval, waitTimeout, true, func(ctx context.Context) (bool, error) {
		u, err := dynamicClient.Resource(crdGVR).Get(ctx, o.name, metav1.GetOptions{})
		return err == nil && testenv.HasCondition(u, "Established", "True"), nil
	})
	if err != nil {
		tc.t.Fatalf("CRD %s not established within %s: %v", o.name, waitTimeout, err)
	}
	return o
}

// deleteCRD deletes the CRD and waits until it is gone (the apiserver deletes
// its instances first).
func (tc *testCase) deleteCRD(crd obj) {
	tc.t.Helper()
	err := dynamicClient.Resource(crdGVR).Delete(tc.ctx, crd.name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &crd.uid}})
	if err != nil {
		tc.t.Fatalf("delete CRD %s: %v", crd.name, err)
	}
	tc.waitFor(crd, "deleted", func(m *metav1.PartialObjectMetadata) bool { return m == nil })
}

// customResource creates an instance of the custom kind k in the test
// namespace. Right after the CRD is established its endpoint may still
// answer 404 for a moment, so creation is retried on NotFound.
func (tc *testCase) customResource(k kindInfo, name string, opts ...objOpt) obj {
	tc.t.Helper()
	m := tc.objectMeta(tc.ns, name, opts)
	u := &unstructured.Unstructured{}
	u.SetAPIVersion(k.apiVersion)
	u.SetKind(k.kind)
	u.SetNamespace(m.Namespace)
	u.SetName(m.Name)
	u.SetLabels(m.Labels)
	u.SetFinalizers(m.Finalizers)
	u.SetOwnerReferences(m.OwnerReferences)
	var created *unstructured.Unstructured
	err := wait.PollUntilContextTimeout(tc.ctx, pollInterval, waitTimeout, true, func(ctx context.Context) (bool, error) {
		var err error
		created, err = dynamicClient.Resource(k.gvr).Namespace(tc.ns).Create(ctx, u, metav1.CreateOptions{})
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		return err == nil, err
	})
	if err != nil {
		tc.t.Fatalf("create %s %s/%s: %v", k.kind, tc.ns, name, err)
	}
	return tc.created(k, created)
}

// Scenario 9. Owner and dependent are both custom resources of a CRD created
// while kgc runs: kgc must pick up the new resource and cascade through it.
func TestCustomResourceCascadingDeletion(t *testing.T) {
	t.Parallel()
	tc := newTestCase(t)
	k := newCRDKind()
	tc.createCRD(k)

	t.Log("background")
	owner := tc.customResource(k, "owner")
	dep := tc.customResource(k, "dependent", withOwners(owner.ref(false)))
	tc.del(owner, background())
	tc.waitGone(owner, dep)

	t.Log("foreground")
	owner = tc.customResource(k, "fg-owner")
	blocking := tc.customResource(k, "fg-blocking", withOwners(owner.ref(true)))
	nonBlocking := tc.customResource(k, "fg-non-blocking", withOwners(owner.ref(false)))
	grandchild := tc.customResource(k, "fg-grandchild", withOwners(blocking.ref(true)))
	tc.del(owner, foreground())
	tc.waitGone(grandchild, blocking, nonBlocking, owner)
}

// Scenario 10. Ownership crossing between custom and core kinds:
// CR → ConfigMap → CR.
func TestMixedCustomAndCoreCascadingDeletion(t *testing.T) {
	t.Parallel()
	tc := newTestCase(t)
	k := newCRDKind()
	tc.createCRD(k)

	t.Log("background")
	top := tc.customResource(k, "top")
	middle := tc.configMap("middle", withOwners(top.ref(false)))
	bottom := tc.customResource(k, "bottom", withOwners(middle.ref(false)))
	tc.del(top, background())
	tc.waitGone(top, middle, bottom)

	t.Log("foreground")
	top = tc.customResource(k, "fg-top")
	middle = tc.configMap("fg-middle", withOwners(top.ref(true)))
	bottom = tc.customResource(k, "fg-bottom", withOwners(middle.ref(true)))
	tc.del(top, foreground())
	tc.waitGone(bottom, middle, top)

	t.Log("core owner, custom dependent, core grandchild")
	cmTop := tc.configMap("cm-top")
	crMiddle := tc.customResource(k, "cr-middle", withOwners(cmTop.ref(false)))
	cmBottom := tc.configMap("cm-bottom", withOwners(crMiddle.ref(false)))
	tc.del(cmTop, background())
	tc.waitGone(cmTop, crMiddle, cmBottom)
}

// Scenario 11. Deleting a CRD makes the apiserver delete its instances; kgc
// must then collect what those instances owned. Twice, with the same CRD name:
// kgc must notice the recreated resource.
func TestCRDDeletionCascading(t *testing.T) {
	t.Parallel()
	tc := newTestCase(t)
	k := newCRDKind()
	for round := 1; round <= 2; round++ {
		t.Logf("round %d", round)
		crd := tc.createCRD(k)
		owner := tc.customResource(k, "owner")
		cm := tc.configMap("owned-by-cr", withOwners(owner.ref(false)))

		// Prove kgc monitors the (re)created resource: a cascade inside it
		// can only happen if kgc watches it. The pair is created after
		// owner, so by the time it is done kgc has also seen owner.
		a := tc.customResource(k, "a")
		b := tc.customResource(k, "b", withOwners(a.ref(false)))
		tc.del(a, background())
		tc.waitGone(a, b)
		if m, err := tc.get(tc.ctx, cm); err != nil || m == nil {
			t.Fatalf("round %d: %s should still exist while its owner does; got %s, err %v", round, cm, safety.Describe(m), err)
		}

		tc.deleteCRD(crd)
		tc.waitGone(owner, cm)
	}
}
