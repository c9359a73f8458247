package deploy

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"

	"github.com/kgc-dev/kgc/pkg/kgc"
	"github.com/kgc-dev/kgc/sandbox/internal/testenv"
)

// optionalNamespaceLifecycle is the optional role for kgc run
// --namespace-lifecycle.
const optionalNamespaceLifecycle = "deploy/optional"

// TestRBACNamespaceLifecycle runs kgc's namespace lifecycle as kgc's
// service account, through impersonation:
//   - with deploy/'s roles alone, which do not grant deletecollection:
//     every DELETECOLLECTION is forbidden, and kgc falls back to one DELETE
//     per object; the namespace still goes;
//   - with deploy/optional/namespace-lifecycle.yaml too: DELETECOLLECTION
//     is allowed and used, and nothing is forbidden.
func TestRBACNamespaceLifecycle(t *testing.T) {
	in := applyRBAC(t)
	cfg := impersonating(in.serviceAccount.Namespace, in.serviceAccount.Name)
	for _, sub := range []string{"status", "finalize"} {
		waitForAccess(t, cfg, authorizationv1.ResourceAttributes{Verb: "update", Resource: "namespaces", Subresource: sub, Name: "any"}, true)
	}
	deleteCollection := authorizationv1.ResourceAttributes{Verb: "deletecollection", Resource: "configmaps", Namespace: "default"}
	waitForAccess(t, cfg, deleteCollection, false)

	t.Run("deploy/ alone: one DELETE per object", func(t *testing.T) {
		calls := emptyNamespaceAs(t, cfg, lifecycleOptions)
		if calls["deletecollection 403"] == 0 {
			t.Errorf("no DELETECOLLECTION was forbidden: %v", calls)
		}
		if calls["deletecollection 200"] != 0 {
			t.Errorf("a DELETECOLLECTION succeeded without the permission: %v", calls)
		}
		if calls["delete 200"] < objectsPerNamespace {
			t.Errorf("%v DELETEs succeeded, want at least one per object (%d): %v", calls["delete 200"], objectsPerNamespace, calls)
		}
	})

	a := newApplier(t, adminConfig)
	optional := loadManifestsIn(t, optionalNamespaceLifecycle)
	for _, m := range optional {
		a.applyClean(t, "apply "+m.String(), m.obj, false)
	}
	t.Cleanup(func() {
		for _, m := range slices.Backward(optional) {
			ri, err := a.resource(m.obj)
			if err == nil {
				err = ri.Delete(context.Background(), m.obj.GetName(), metav1.DeleteOptions{})
			}
			if err != nil && !apierrors.IsNotFound(err) {
				t.Errorf("removing %s: %v", m, err)
			}
		}
	})
	checkOptionalRole(t, optional, in)
	waitForAccess(t, cfg, deleteCollection, true)

	t.Run("with deploy/optional: DELETECOLLECTION", func(t *testing.T) {
		checkLifecycleCalls(t, emptyNamespaceAs(t, cfg, lifecycleOptions))
	})
}

// lifecycleOptions run kgc's namespace lifecycle.
var lifecycleOptions = kgc.Options{Workers: 2, NamespaceLifecycle: true}

// checkLifecycleCalls checks kgc's API requests while it emptied a
// namespace with the optional role bound: DELETECOLLECTION used, nothing
// forbidden.
func checkLifecycleCalls(t *testing.T, calls map[string]float64) {
	t.Helper()
	if calls["deletecollection 200"] == 0 {
		t.Errorf("no DELETECOLLECTION succeeded: %v", calls)
	}
	for k, n := range calls {
		if n > 0 && (k == "deletecollection 403" || k == "delete 403" || k == "update 403" || k == "list 403") {
			t.Errorf("%s: %v (all: %v)", k, n, calls)
		}
	}
}

// checkOptionalRole checks what the API server cannot: the optional
// binding grants the optional role to deploy/'s service account, and the
// role grants exactly what its comment says.
func checkOptionalRole(t *testing.T, optional []manifest, in installed) {
	t.Helper()
	var role *rbacv1.ClusterRole
	var binding *rbacv1.ClusterRoleBinding
	for _, m := range optional {
		switch m.obj.GetKind() {
		case "ClusterRole":
			role = typed[rbacv1.ClusterRole](t, m)
		case "ClusterRoleBinding":
			binding = typed[rbacv1.ClusterRoleBinding](t, m)
		default:
			t.Errorf("%s: unexpected kind", m)
		}
	}
	if role == nil || binding == nil {
		t.Fatalf("%s: want one ClusterRole and one ClusterRoleBinding", optionalNamespaceLifecycle)
	}
	want := []rbacv1.PolicyRule{
		{APIGroups: []string{"*"}, Resources: []string{"*"}, Verbs: []string{"deletecollection"}},
		{APIGroups: []string{""}, Resources: []string{"namespaces/status", "namespaces/finalize"}, Verbs: []string{"update"}},
	}
	if fmt.Sprint(role.Rules) != fmt.Sprint(want) {
		t.Errorf("optional ClusterRole rules = %+v, want %+v", role.Rules, want)
	}
	if binding.RoleRef.Name != role.Name || binding.RoleRef.Kind != "ClusterRole" {
		t.Errorf("optional binding's roleRef = %+v, want ClusterRole %s", binding.RoleRef, role.Name)
	}
	sa := in.serviceAccount
	if len(binding.Subjects) != 1 || binding.Subjects[0].Kind != rbacv1.ServiceAccountKind || binding.Subjects[0].Name != sa.Name || binding.Subjects[0].Namespace != sa.Namespace {
		t.Errorf("optional binding's subjects = %+v, want ServiceAccount %s/%s", binding.Subjects, sa.Namespace, sa.Name)
	}
}

// objectsPerNamespace is how many objects emptyNamespaceAs creates.
const objectsPerNamespace = 12

// emptyNamespaceAs runs kgc with opts (NamespaceLifecycle among them) as
// cfg's identity, creates a namespace with a Pod, a Secret and ConfigMaps
// (as admin), deletes it, waits until it is gone and returns kgc's API
// requests by "verb code".
func emptyNamespaceAs(t *testing.T, cfg *rest.Config, opts kgc.Options) map[string]float64 {
	t.Helper()
	reg := prometheus.NewRegistry()
	opts.Registerer, opts.Logger = reg, testenv.Logger("kgc")
	gc, err := kgc.Start(t.Context(), cfg, opts)
	if err != nil {
		t.Fatalf("starting kgc as %s: %v", cfg.Impersonate.UserName, err)
	}
	ns := doomedNamespace(t)
	ctx := t.Context()
	err = wait.PollUntilContextTimeout(ctx, pollInterval, waitTimeout, true, func(ctx context.Context) (bool, error) {
		_, err := kubeClient.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
	gc.Stop()
	calls := requestsByVerb(t, reg)
	if err != nil {
		got, _ := kubeClient.CoreV1().Namespaces().Get(context.Background(), ns, metav1.GetOptions{})
		t.Fatalf("namespace %s not gone within %s (kgc as %s; requests %v): %+v", ns, waitTimeout, cfg.Impersonate.UserName, calls, got.Status)
	}
	t.Logf("kgc's requests as %s: %v", cfg.Impersonate.UserName, calls)
	return calls
}

// doomedNamespace creates a namespace with a Pod, a Secret and ConfigMaps
// (objectsPerNamespace objects, as admin), deletes it and returns its name.
func doomedNamespace(t *testing.T) string {
	t.Helper()
	ns := createNamespace(t)
	ctx := t.Context()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "pod"},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "example.invalid/none"}}},
	}
	if _, err := kubeClient.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := kubeClient.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "s"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for i := range objectsPerNamespace - 2 {
		createConfigMap(t, ns, fmt.Sprintf("cm-%d", i))
	}
	if err := kubeClient.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	return ns
}

// requestsByVerb reads kgc_api_requests_total as "verb code" → count.
func requestsByVerb(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != "kgc_api_requests_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			var verb, code string
			for _, l := range m.GetLabel() {
				switch l.GetName() {
				case "verb":
					verb = l.GetValue()
				case "code":
					code = l.GetValue()
				}
			}
			out[verb+" "+code] += m.GetCounter().GetValue()
		}
	}
	return out
}
