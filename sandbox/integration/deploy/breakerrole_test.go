package deploy

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	authorizationv1 "k8s.io/api/authorization/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"

	"github.com/kgc-dev/kgc/internal/app"
	"github.com/kgc-dev/kgc/internal/breaker"
	"github.com/kgc-dev/kgc/pkg/kgc"
	"github.com/kgc-dev/kgc/sandbox/internal/testenv"
)

// breakerOperatorDir holds the Role people who resume the breaker need.
const breakerOperatorDir = "deploy/operators"

// TestBreakerResumeWithOperatorRole runs kgc as deploy/'s service account
// with the breaker as deploy/'s `kgc run` arguments enable it (its state on
// the Lease kgc-system/kgc), trips it, and resumes it with `kgc breaker
// resume` as a user bound to nothing but deploy/operators' Role; a user
// without it is refused, and the trip stays.
func TestBreakerResumeWithOperatorRole(t *testing.T) {
	in := applyRBAC(t)
	a := newApplier(t, adminConfig)
	var role *rbacv1.Role
	for _, m := range loadManifestsIn(t, breakerOperatorDir) {
		a.applyClean(t, "apply "+m.String(), m.obj, false)
		if m.obj.GetKind() == "Role" {
			role = typed[rbacv1.Role](t, m)
		}
	}
	if role == nil {
		t.Fatalf("%s: no Role", breakerOperatorDir)
	}
	const operator, stranger = "breaker-oncall", "breaker-stranger"
	rb := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "kgc-test-breaker-operator", Namespace: role.Namespace},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role.Name},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: operator}},
	}
	bindings := kubeClient.RbacV1().RoleBindings(role.Namespace)
	if _, err := bindings.Create(t.Context(), rb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The binding is in the authorizer's cache once the operator may
	// update kgc's Lease.
	asOperator := rest.CopyConfig(adminConfig)
	asOperator.Impersonate = rest.ImpersonationConfig{UserName: operator}
	waitForAccess(t, asOperator, authorizationv1.ResourceAttributes{Verb: "update", Group: "coordination.k8s.io", Resource: "leases", Namespace: kgcNamespace, Name: "kgc"}, true)
	leases := kubeClient.CoordinationV1().Leases(kgcNamespace)
	t.Cleanup(func() {
		_ = bindings.Delete(context.Background(), rb.Name, metav1.DeleteOptions{})
		// The trips and resumes stay on the Lease otherwise; the other
		// tests' leader elections create it again.
		_ = leases.Delete(context.Background(), "kgc", metav1.DeleteOptions{})
	})

	// kgc run's options from deploy/'s arguments: the breaker on, its
	// state on the leader-election Lease. A small unobserved-owner limit
	// trips it with a few objects instead of kgc run's hundreds.
	opts := runOptions(t, in.deployment.Spec.Template.Spec.Containers[0].Args)
	if opts.Breaker == nil || opts.Breaker.LeaseNamespace != kgcNamespace || opts.Breaker.LeaseName != "kgc" {
		t.Fatalf("deploy/'s kgc run: breaker %+v, want it on, on the Lease %s/kgc", opts.Breaker, kgcNamespace)
	}
	const limit, n = 2, 6
	opts.Breaker.UnobservedOwners = limit
	opts.Registerer, opts.Logger = prometheus.NewRegistry(), testenv.Logger("kgc")
	cfg := renderedIdentity(t, in)
	waitForAccess(t, cfg, authorizationv1.ResourceAttributes{Verb: "create", Group: "coordination.k8s.io", Resource: "leases", Namespace: kgcNamespace}, true)
	gc, err := kgc.Start(t.Context(), cfg, opts)
	if err != nil {
		t.Fatalf("starting kgc as its service account: %v", err)
	}
	t.Cleanup(gc.Stop)

	// A restore, in small: objects appear naming Deployments kgc never saw.
	ns := createNamespace(t)
	var deps []ref
	for i := range n {
		deps = append(deps, createConfigMap(t, ns, fmt.Sprintf("restored-%d", i),
			testenv.OwnerRef("apps/v1", "Deployment", fmt.Sprintf("gone-%d", i), testenv.RandomUID(), true)))
	}
	tripped := func(ctx context.Context) (bool, error) {
		l, err := leases.Get(ctx, "kgc", metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false, nil
		} else if err != nil {
			return false, err
		}
		st, err := breaker.ParseState(l.Annotations)
		return len(st.Active()) > 0, err
	}
	if err := wait.PollUntilContextTimeout(t.Context(), pollInterval, waitTimeout, true, tripped); err != nil {
		t.Fatalf("no trip recorded on the Lease %s/kgc by kgc as its service account: %v", kgcNamespace, err)
	}
	left := func() int {
		var k int
		for _, d := range deps {
			if get(t, d) != nil {
				k++
			}
		}
		return k
	}
	t.Logf("tripped: %d of %d restored objects left", left(), n)

	resume := func(user string) (string, error) {
		var out, errb bytes.Buffer
		args := []string{"breaker", "resume", "--lease-namespace", kgcNamespace, "--lease-name", "kgc", "--kubeconfig", kubeconfigPath, "--as", user}
		if code := app.Execute(t.Context(), args, &out, &errb); code != 0 {
			return out.String(), fmt.Errorf("kgc %s: exit %d: %s", strings.Join(args, " "), code, errb.String())
		}
		return out.String(), nil
	}

	t.Run("refused without the Role", func(t *testing.T) {
		_, err := resume(stranger)
		if err == nil || !strings.Contains(strings.ToLower(err.Error()), "forbidden") {
			t.Fatalf("resume as %s: %v, want forbidden", stranger, err)
		}
		t.Logf("as %s: %v", stranger, err)
		if ok, err := tripped(t.Context()); !ok || err != nil {
			t.Fatalf("the trip is gone after a refused resume (%v)", err)
		}
	})

	t.Run("resumed with the Role", func(t *testing.T) {
		out, err := resume(operator)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(out, "Resumed unobserved-owners") {
			t.Errorf("kgc breaker resume as %s:\n%s", operator, out)
		}
		// kgc, as its service account, reads the resume and deletes what
		// it held.
		waitGone(t, deps...)
		if ok, err := tripped(t.Context()); ok || err != nil {
			t.Errorf("a trip is still active after the resume (%v)", err)
		}
	})
}
