package cluster

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
)

func TestParsePath(t *testing.T) {
	for _, c := range []struct {
		path       string
		gvr        schema.GroupVersionResource
		ns, name   string
		collection bool
	}{
		{"/api/v1/namespaces/a/pods/p", podsGVR, "a", "p", false},
		{"/apis/apps/v1/namespaces/a/replicasets/r", replicaSetsGVR, "a", "r", false},
		{"/api/v1/namespaces/a", corev1Namespaces, "", "a", false},
		{"/api/v1/namespaces/a/pods", podsGVR, "a", "", true},
		{"/apis/rbac.authorization.k8s.io/v1/clusterroles/c", schema.GroupVersionResource{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "clusterroles"}, "", "c", false},
		{"/apis/batch/v1/namespaces/a/jobs/j/status", jobsGVR, "a", "j", false},
	} {
		gvr, ns, name, coll := parsePath(c.path)
		if gvr != c.gvr || ns != c.ns || name != c.name || coll != c.collection {
			t.Errorf("parsePath(%q) = %v %q %q %v, want %v %q %q %v", c.path, gvr, ns, name, coll, c.gvr, c.ns, c.name, c.collection)
		}
	}
}

var corev1Namespaces = schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}

const holdFinalizer = "kgc.test/hold"

// The auditor is not vacuous: deletions through an audited client of a
// dependent whose owner is live, and of an object without owners, are
// judged wrong; of a dependent whose owner is gone, or being deleted in the
// foreground, right.
func TestAuditorJudges(t *testing.T) {
	t.Parallel()
	tc := newTestCase(t)
	a := newAuditor(metadataClient, mapper)
	cfg := rest.CopyConfig(restConfig)
	cfg.Wrap(a.wrap)
	// A metadata client, as kgc's: it sends its DeleteOptions as JSON.
	audited := metadata.NewForConfigOrDie(cfg).Resource(configMapsGVR).Namespace(tc.ns)
	del := func(o obj) {
		t.Helper()
		if err := audited.Delete(tc.ctx, o.name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &o.uid}}); err != nil {
			t.Fatal(err)
		}
	}

	// The garbage dependents are held by a finalizer: kgc deletes them
	// too, and the test's own DELETE must still find them.
	held := func(name string, owner obj) obj {
		t.Helper()
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{
			Name: name, Finalizers: []string{holdFinalizer},
			OwnerReferences: []metav1.OwnerReference{ownerRef(owner, "v1", "ConfigMap", true)},
		}}
		cm, err := kubeClient.CoreV1().ConfigMaps(tc.ns).Create(tc.ctx, cm, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		o := objOf(configMapsGVR, cm)
		t.Cleanup(func() {
			patch := []byte(`{"metadata":{"finalizers":null}}`)
			_, err := o.client().Patch(context.Background(), o.name, types.MergePatchType, patch, metav1.PatchOptions{})
			if err != nil && !apierrors.IsNotFound(err) {
				t.Errorf("release %s: %v", o, err)
			}
		})
		return o
	}
	live := tc.configMap("live-owner", nil)
	heldByLive := tc.configMap("held", []metav1.OwnerReference{ownerRef(live, "v1", "ConfigMap", false)})
	unowned := tc.configMap("unowned", nil)
	gone := tc.configMap("gone-owner", nil)
	heldByGone := held("garbage", gone)
	fg := tc.configMap("foreground-owner", nil)
	heldByFg := held("foreground-dependent", fg)

	del(heldByLive)
	del(unowned)
	tc.del(gone, metav1.DeletePropagationBackground)
	tc.waitGone(gone)
	del(heldByGone)
	tc.del(fg, metav1.DeletePropagationForeground)
	del(heldByFg)

	want := map[string]string{
		heldByLive.name: "is live",
		unowned.name:    "no ownerReferences",
		heldByGone.name: "",
		heldByFg.name:   "",
	}
	got := map[string]string{}
	for _, d := range a.in(tc.ns) {
		got[d.name] = d.problem
	}
	for name, problem := range want {
		p, ok := got[name]
		switch {
		case !ok:
			t.Errorf("the deletion of %s was not recorded", name)
		case problem == "" && p != "":
			t.Errorf("the deletion of %s judged wrong: %s", name, p)
		case problem != "" && !strings.Contains(p, problem):
			t.Errorf("the deletion of %s judged %q, want %q", name, p, problem)
		}
	}
}
