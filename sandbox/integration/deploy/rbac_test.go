package deploy

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"

	"github.com/kgc-dev/kgc/pkg/kgc"
	"github.com/kgc-dev/kgc/sandbox/internal/testenv"
)

const (
	// waitTimeout bounds every wait for something that must happen.
	waitTimeout = 60 * time.Second
	// negativeWindow is how long something that must not happen is watched
	// for. kgc collects a Background cascade of a few objects in well under
	// a second here (TestRBACSufficient), so five seconds leave a wide margin.
	negativeWindow = 5 * time.Second
	pollInterval   = 50 * time.Millisecond
	// holdFinalizer keeps a dependent deleting, so that a Foreground owner
	// has to wait for it.
	holdFinalizer = "kgc.test/hold"
)

// rbacKinds are the objects of deploy/ that grant kgc its permissions.
var rbacKinds = []string{"Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"}

// impersonating returns the admin config acting as a service account, with
// the groups the API server gives service-account tokens. The sandbox
// authorizes with RBAC, so every request of that config is checked against
// the service account's roles.
func impersonating(namespace, name string) *rest.Config {
	cfg := rest.CopyConfig(adminConfig)
	cfg.Impersonate = rest.ImpersonationConfig{
		UserName: fmt.Sprintf("system:serviceaccount:%s:%s", namespace, name),
		Groups:   []string{"system:serviceaccounts", "system:serviceaccounts:" + namespace, "system:authenticated"},
	}
	return cfg
}

// applyRBAC creates, for real, the objects of deploy/ that define kgc's
// identity and permissions.
func applyRBAC(t *testing.T) installed {
	t.Helper()
	manifests := loadManifests(t)
	a := newApplier(t, adminConfig)
	for _, m := range manifests {
		if slices.Contains(rbacKinds, m.obj.GetKind()) {
			a.applyClean(t, "apply "+m.String(), m.obj, false)
		}
	}
	return decodeInstalled(t, manifests)
}

// waitForAccess waits until the identity of cfg is (or is not) allowed attrs,
// as the API server's authorizer sees it: new bindings reach the RBAC
// authorizer's cache shortly after they are created.
func waitForAccess(t *testing.T, cfg *rest.Config, attrs authorizationv1.ResourceAttributes, allowed bool) {
	t.Helper()
	client := kubernetes.NewForConfigOrDie(cfg)
	var last authorizationv1.SubjectAccessReviewStatus
	err := wait.PollUntilContextTimeout(t.Context(), pollInterval, waitTimeout, true, func(ctx context.Context) (bool, error) {
		review, err := client.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx,
			&authorizationv1.SelfSubjectAccessReview{Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &attrs}},
			metav1.CreateOptions{})
		if err != nil {
			return false, err
		}
		last = review.Status
		return review.Status.Allowed == allowed, nil
	})
	if err != nil {
		t.Fatalf("%s %+v: allowed=%v, want %v (%+v): %v", cfg.Impersonate.UserName, attrs, last.Allowed, allowed, last, err)
	}
}

// startCollector runs kgc in-process with cfg and stops it when the test ends.
func startCollector(t *testing.T, cfg *rest.Config) *kgc.Collector {
	t.Helper()
	opts := kgc.Options{Workers: 2}
	if testenv.Verbose {
		opts.Logger = funcr.New(func(prefix, args string) { t.Logf("kgc: %s %s", prefix, args) }, funcr.Options{Verbosity: 4})
	}
	// Start's context also bounds the collector's life: the test's, which
	// ends just before the cleanups run.
	gc, err := kgc.Start(t.Context(), cfg, opts)
	if err != nil {
		t.Fatalf("starting kgc as %s: %v", cfg.Impersonate.UserName, err)
	}
	t.Cleanup(gc.Stop)
	return gc
}

// TestRBACSufficient runs kgc with exactly the permissions deploy/ grants —
// as its service account, through impersonation — through every kind of
// cascade, and runs client-go leader election on the Role's Lease
// permissions.
func TestRBACSufficient(t *testing.T) {
	in := applyRBAC(t)
	cfg := impersonating(in.serviceAccount.Namespace, in.serviceAccount.Name)
	// The bindings are in the authorizer's cache once these are allowed.
	waitForAccess(t, cfg, authorizationv1.ResourceAttributes{Verb: "delete", Resource: "configmaps", Namespace: "default"}, true)
	waitForAccess(t, cfg, authorizationv1.ResourceAttributes{Verb: "create", Group: "coordination.k8s.io", Resource: "leases", Namespace: kgcNamespace}, true)
	// And the identity is really restricted: nothing beyond the roles.
	waitForAccess(t, cfg, authorizationv1.ResourceAttributes{Verb: "create", Resource: "configmaps", Namespace: "default"}, false)
	waitForAccess(t, cfg, authorizationv1.ResourceAttributes{Verb: "create", Group: "coordination.k8s.io", Resource: "leases", Namespace: "default"}, false)

	t.Run("leader election", func(t *testing.T) { leaderElection(t, cfg) })

	cascades(t, startCollector(t, cfg))
}

// cascades runs, with gc collecting, a Background, a Foreground and an
// Orphan cascade and a cross-namespace reference, and checks that gc
// completes each.
func cascades(t *testing.T, gc *kgc.Collector) {
	t.Helper()
	t.Run("background", func(t *testing.T) {
		ns := createNamespace(t)
		owner := createConfigMap(t, ns, "owner")
		deps := createDependents(t, ns, owner, 3, false)
		deleteConfigMap(t, owner, metav1.DeletePropagationBackground)
		waitGone(t, deps...)
	})

	t.Run("foreground", func(t *testing.T) {
		ns := createNamespace(t)
		owner := createConfigMap(t, ns, "owner")
		deps := createDependents(t, ns, owner, 3, true)
		// One dependent stays deleting until its hold is released: the
		// owner must wait for it.
		held := addFinalizer(t, deps[0], holdFinalizer)
		deleteConfigMap(t, owner, metav1.DeletePropagationForeground)
		waitGone(t, deps[1:]...)
		waitDeleting(t, held)
		if o := get(t, owner); o == nil || o.DeletionTimestamp == nil || !slices.Contains(o.Finalizers, metav1.FinalizerDeleteDependents) {
			t.Fatalf("owner while a blocking dependent remains: %+v, want it deleting with the %s finalizer", o, metav1.FinalizerDeleteDependents)
		}
		removeFinalizer(t, held, holdFinalizer)
		waitGone(t, held, owner)
	})

	t.Run("orphan", func(t *testing.T) {
		ns := createNamespace(t)
		owner := createConfigMap(t, ns, "owner")
		deps := createDependents(t, ns, owner, 3, true)
		deleteConfigMap(t, owner, metav1.DeletePropagationOrphan)
		waitGone(t, owner)
		for _, d := range deps {
			cm := get(t, d)
			if cm == nil {
				t.Errorf("orphaned dependent %s was deleted", d)
			} else if len(cm.OwnerReferences) > 0 {
				t.Errorf("orphaned dependent %s still has ownerReferences %+v", d, cm.OwnerReferences)
			}
		}
	})

	t.Run("cross-namespace reference records a warning event", func(t *testing.T) {
		nsA, nsB := createNamespace(t), createNamespace(t)
		owner := createConfigMap(t, nsA, "owner")
		// kgc must know where the owner really lives before it meets the
		// dependent, or it cannot tell a misplaced owner from a missing one.
		waitInGraph(t, gc, owner)
		dep := createConfigMap(t, nsB, "dependent", ownerRef(owner, false))
		waitGone(t, dep)
		waitEvent(t, dep, corev1.EventTypeWarning, "OwnerRefInvalidNamespace")
		if get(t, owner) == nil {
			t.Error("the owner in the other namespace was deleted")
		}
	})
}

// TestRBACWithoutDeleteIsInsufficient is the negative control: the same
// ClusterRole without the delete verb leaves a Background cascade undone,
// which shows that the impersonated identity is really restricted (and so
// that TestRBACSufficient proves something). The same objects are then
// collected by kgc with the real role.
func TestRBACWithoutDeleteIsInsufficient(t *testing.T) {
	in := applyRBAC(t)
	var rules []rbacv1.PolicyRule
	for _, r := range in.clusterRole.Rules {
		r = *r.DeepCopy()
		r.Verbs = slices.DeleteFunc(r.Verbs, func(v string) bool { return v == "delete" || v == "*" })
		rules = append(rules, r)
	}
	ctx := t.Context()
	cfg := grantAs(t, "kgc-test-no-delete", rules, nil)
	waitForAccess(t, cfg, authorizationv1.ResourceAttributes{Verb: "patch", Resource: "configmaps", Namespace: "default"}, true)
	waitForAccess(t, cfg, authorizationv1.ResourceAttributes{Verb: "delete", Resource: "configmaps", Namespace: "default"}, false)

	ns := createNamespace(t)
	owner := createConfigMap(t, ns, "owner")
	deps := createDependents(t, ns, owner, 3, false)
	// The identity itself cannot delete.
	err := kubernetes.NewForConfigOrDie(cfg).CoreV1().ConfigMaps(ns).Delete(ctx, deps[0].name, metav1.DeleteOptions{})
	if !apierrors.IsForbidden(err) {
		t.Fatalf("deleting as %s: err = %v, want Forbidden", cfg.Impersonate.UserName, err)
	}

	crippled := startCollector(t, cfg)
	deleteConfigMap(t, owner, metav1.DeletePropagationBackground)
	deadline := time.Now().Add(negativeWindow)
	for time.Now().Before(deadline) {
		for _, d := range deps {
			if get(t, d) == nil {
				t.Fatalf("dependent %s was deleted by a kgc without the delete permission", d)
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	crippled.Stop()

	// The same garbage with the real role: collected.
	startCollector(t, impersonating(in.serviceAccount.Namespace, in.serviceAccount.Name))
	waitGone(t, deps...)
}

// grantAs binds clusterRules (a ClusterRole) and, unless nil, roleRules (a
// Role in kgcNamespace) to the service account kgcNamespace/name, all
// under that name, so that tests granting different permissions do not
// interfere; they are removed when t ends. It returns the service
// account's (impersonated) config. Impersonation needs no ServiceAccount
// object: the authorizer goes by the user name and groups alone.
func grantAs(t *testing.T, name string, clusterRules, roleRules []rbacv1.PolicyRule) *rest.Config {
	t.Helper()
	ctx := t.Context()
	rbac := kubeClient.RbacV1()
	subjects := []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: name, Namespace: kgcNamespace}}
	meta := metav1.ObjectMeta{Name: name}
	if _, err := rbac.ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: meta, Rules: clusterRules}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rbac.ClusterRoles().Delete(context.Background(), name, metav1.DeleteOptions{}) })
	binding := &rbacv1.ClusterRoleBinding{ObjectMeta: meta, Subjects: subjects,
		RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: name}}
	if _, err := rbac.ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rbac.ClusterRoleBindings().Delete(context.Background(), name, metav1.DeleteOptions{}) })
	if roleRules != nil {
		roles, bindings := rbac.Roles(kgcNamespace), rbac.RoleBindings(kgcNamespace)
		if _, err := roles.Create(ctx, &rbacv1.Role{ObjectMeta: meta, Rules: roleRules}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = roles.Delete(context.Background(), name, metav1.DeleteOptions{}) })
		rb := &rbacv1.RoleBinding{ObjectMeta: meta, Subjects: subjects,
			RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: name}}
		if _, err := bindings.Create(ctx, rb, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = bindings.Delete(context.Background(), name, metav1.DeleteOptions{}) })
	}
	return impersonating(kgcNamespace, name)
}

// leaderElection runs client-go's leader election, as kgc --leader-elect
// does, on its Lease: acquire (get; create, which the Role grants), renew
// and release (update, which the ClusterRole grants).
func leaderElection(t *testing.T, cfg *rest.Config) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), waitTimeout)
	defer cancel()
	if err := electLeader(ctx, cfg, "kgc"); err != nil {
		t.Fatal(err)
	}
}

// electLeader acquires, renews and releases the Lease kgcNamespace/lease
// with client-go's leader election as cfg's identity, within ctx. An error
// says which step did not happen.
func electLeader(ctx context.Context, cfg *rest.Config, lease string) error {
	client := kubernetes.NewForConfigOrDie(cfg)
	const identity = "deploy-test"
	lock := &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Namespace: kgcNamespace, Name: lease},
		Client:     client.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: identity},
	}
	leading := make(chan struct{})
	le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock:            lock,
		LeaseDuration:   3 * time.Second,
		RenewDeadline:   2 * time.Second,
		RetryPeriod:     200 * time.Millisecond,
		ReleaseOnCancel: true,
		Name:            "kgc",
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(context.Context) { close(leading) },
			OnStoppedLeading: func() {},
		},
	})
	if err != nil {
		return err
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		le.Run(runCtx)
	}()
	defer func() {
		stop()
		<-done
	}()
	select {
	case <-leading:
	case <-ctx.Done():
		return fmt.Errorf("leader election as %s did not acquire the Lease %s/%s", cfg.Impersonate.UserName, kgcNamespace, lease)
	}
	leases := kubeClient.CoordinationV1().Leases(kgcNamespace)
	l, err := leases.Get(ctx, lease, metav1.GetOptions{})
	if err != nil {
		return err
	}
	firstRenew := l.Spec.RenewTime
	// Renewals are updates.
	err = wait.PollUntilContextCancel(ctx, pollInterval, true, func(ctx context.Context) (bool, error) {
		l, err = leases.Get(ctx, lease, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		return !l.Spec.RenewTime.Equal(firstRenew), nil
	})
	if err != nil || l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity != identity || !le.IsLeader() {
		return fmt.Errorf("the Lease %s/%s was not renewed by %s as %s (lease %+v, leader %v): %v", kgcNamespace, lease, identity, cfg.Impersonate.UserName, l.Spec, le.IsLeader(), err)
	}
	// Releasing on cancel is an update too.
	stop()
	<-done
	l, err = leases.Get(ctx, lease, metav1.GetOptions{})
	if err != nil {
		return err
	}
	if h := l.Spec.HolderIdentity; h != nil && *h != "" {
		return fmt.Errorf("the Lease %s/%s is still held by %q after release", kgcNamespace, lease, *h)
	}
	return nil
}

// ref is a ConfigMap created by a test.
type ref struct {
	namespace, name string
	uid             types.UID
}

func (r ref) String() string { return r.namespace + "/" + r.name }

func createNamespace(t *testing.T) string {
	t.Helper()
	ns, err := kubeClient.CoreV1().Namespaces().Create(t.Context(),
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "deploy-"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// No namespace controller runs in the sandbox: a deleted namespace would
	// stay Terminating. The control plane is private to this package and
	// discarded after it, so namespaces are left as they are.
	return ns.Name
}

func createConfigMap(t *testing.T, ns, name string, owners ...metav1.OwnerReference) ref {
	t.Helper()
	cm, err := kubeClient.CoreV1().ConfigMaps(ns).Create(t.Context(), &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: name, OwnerReferences: owners},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return ref{namespace: ns, name: name, uid: cm.UID}
}

func ownerRef(owner ref, block bool) metav1.OwnerReference {
	return metav1.OwnerReference{APIVersion: "v1", Kind: "ConfigMap", Name: owner.name, UID: owner.uid, BlockOwnerDeletion: &block}
}

func createDependents(t *testing.T, ns string, owner ref, n int, block bool) []ref {
	t.Helper()
	var out []ref
	for i := range n {
		out = append(out, createConfigMap(t, ns, fmt.Sprintf("dependent-%d", i), ownerRef(owner, block)))
	}
	return out
}

func deleteConfigMap(t *testing.T, r ref, policy metav1.DeletionPropagation) {
	t.Helper()
	err := kubeClient.CoreV1().ConfigMaps(r.namespace).Delete(t.Context(), r.name, metav1.DeleteOptions{
		PropagationPolicy: &policy,
		Preconditions:     &metav1.Preconditions{UID: &r.uid},
	})
	if err != nil {
		t.Fatalf("delete %s (%s): %v", r, policy, err)
	}
}

// get returns the ConfigMap r names, or nil once it (that UID) is gone.
func get(t *testing.T, r ref) *corev1.ConfigMap {
	t.Helper()
	cm, err := kubeClient.CoreV1().ConfigMaps(r.namespace).Get(t.Context(), r.name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) || err == nil && cm.UID != r.uid {
		return nil
	}
	if err != nil {
		t.Fatalf("get %s: %v", r, err)
	}
	return cm
}

func waitGone(t *testing.T, refs ...ref) {
	t.Helper()
	var left []ref
	err := wait.PollUntilContextTimeout(t.Context(), pollInterval, waitTimeout, true, func(context.Context) (bool, error) {
		left = slices.DeleteFunc(slices.Clone(refs), func(r ref) bool { return get(t, r) == nil })
		return len(left) == 0, nil
	})
	if err != nil {
		t.Fatalf("still there after %s: %v", waitTimeout, left)
	}
}

func waitDeleting(t *testing.T, r ref) {
	t.Helper()
	err := wait.PollUntilContextTimeout(t.Context(), pollInterval, waitTimeout, true, func(context.Context) (bool, error) {
		cm := get(t, r)
		return cm != nil && cm.DeletionTimestamp != nil, nil
	})
	if err != nil {
		t.Fatalf("%s was not deleted (with its hold finalizer keeping it) within %s", r, waitTimeout)
	}
}

func addFinalizer(t *testing.T, r ref, finalizer string) ref {
	t.Helper()
	patch := fmt.Sprintf(`{"metadata":{"finalizers":[%q]}}`, finalizer)
	if _, err := kubeClient.CoreV1().ConfigMaps(r.namespace).Patch(t.Context(), r.name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	return r
}

func removeFinalizer(t *testing.T, r ref, finalizer string) {
	t.Helper()
	cms := kubeClient.CoreV1().ConfigMaps(r.namespace)
	err := wait.PollUntilContextTimeout(t.Context(), pollInterval, waitTimeout, true, func(ctx context.Context) (bool, error) {
		cm, err := cms.Get(ctx, r.name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		cm.Finalizers = slices.DeleteFunc(cm.Finalizers, func(f string) bool { return f == finalizer })
		_, err = cms.Update(ctx, cm, metav1.UpdateOptions{})
		if apierrors.IsConflict(err) {
			return false, nil
		}
		return err == nil, err
	})
	if err != nil {
		t.Fatalf("removing %s from %s: %v", finalizer, r, err)
	}
}

// waitInGraph waits until kgc's debug graph shows r as an observed object.
func waitInGraph(t *testing.T, gc *kgc.Collector, r ref) {
	t.Helper()
	handler := gc.Handler()
	var body string
	err := wait.PollUntilContextTimeout(t.Context(), pollInterval, waitTimeout, true, func(context.Context) (bool, error) {
		rec := httptest.NewRecorder()
		handler.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/debug/controllers/garbage-collector-controller/graph?uid="+string(r.uid), nil))
		body = rec.Body.String()
		return rec.Code == http.StatusOK && strings.Contains(body, "uid="+string(r.uid)) && strings.Contains(body, `virtual="false"`), nil
	})
	if err != nil {
		t.Fatalf("kgc's graph does not show %s (uid %s) within %s:\n%s", r, r.uid, waitTimeout, body)
	}
}

func waitEvent(t *testing.T, r ref, eventType, reason string) {
	t.Helper()
	var seen []string
	err := wait.PollUntilContextTimeout(t.Context(), pollInterval, waitTimeout, true, func(ctx context.Context) (found bool, err error) {
		found, seen, err = hasEvent(ctx, r, eventType, reason)
		return found, err
	})
	if err != nil {
		t.Fatalf("no %s event %s on %s within %s; events on it: %q", eventType, reason, r, waitTimeout, seen)
	}
}

// hasEvent reports whether r has an event of eventType and reason, and
// every event on r as "type/reason".
func hasEvent(ctx context.Context, r ref, eventType, reason string) (found bool, seen []string, err error) {
	events, err := kubeClient.CoreV1().Events(r.namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return false, nil, err
	}
	for _, ev := range events.Items {
		if ev.InvolvedObject.UID != r.uid {
			continue
		}
		seen = append(seen, ev.Type+"/"+ev.Reason)
		found = found || ev.Type == eventType && ev.Reason == reason
	}
	return found, seen, nil
}
