package deploy

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
)

// The path classes of kgc's HTTPS port, each with a path that answers 200
// to whoever may read it.
var (
	healthPaths  = []string{"/healthz", "/livez", "/readyz"}
	metricsPaths = []string{"/metrics"}
	debugClass   = []string{
		"/debug/controllers/garbage-collector-controller/graph",
		"/debug/controllers/garbage-collector-controller/graph?format=json",
		"/debug/controllers/garbage-collector-controller/history",
		"/debug/controllers/garbage-collector-controller/holds",
		"/ui",
		"/ui/app.js",
		"/debug/pprof/",
		"/debug/pprof/heap",
	}
	// shadowPath is authorized like every debug path, then answered 404
	// by a kgc that is not in shadow mode.
	shadowPath = "/debug/controllers/garbage-collector-controller/shadow"
)

// TestSecurePortAuthorization runs the kgc binary as the Deployment runs
// it (its arguments, deploy/'s RBAC, as kgc's service account) and asks
// its HTTPS port for every class of path as every kind of caller: nobody
// (no credentials), a bad token, a service account without a role, one
// bound to each reader role of deploy/60-readers.yaml, the cluster admin,
// and the admin impersonating each reader. Tokens are real service
// account tokens (TokenRequest), checked by kgc through the API server
// (TokenReview, SubjectAccessReview), as a Prometheus scrape presents
// them.
func TestSecurePortAuthorization(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the kgc binary")
	}
	in := applyRBAC(t)
	impersonated := impersonating(in.serviceAccount.Namespace, in.serviceAccount.Name)
	kubeconfig := impersonatingKubeconfig(t, impersonated.Impersonate.UserName, impersonated.Impersonate.Groups)
	c := deploymentContainer(t)
	bin := buildAsDockerfile(t)

	addr := freeAddress(t)
	args := append(withSecurePort(c.Args, addr), "--kubeconfig="+kubeconfig, "--profiling", "--leader-elect=false")
	p := startProcess(t, "kgc", bin, addr, args)
	p.waitStatus(t, "/readyz", http.StatusOK)

	norole := serviceAccountToken(t, "norole")
	metrics := serviceAccountToken(t, "prometheus", "kgc-metrics-reader")
	debug := serviceAccountToken(t, "oncall", "kgc-debug-reader")
	admin := bearer(adminConfig.BearerToken)
	as := func(user string) http.Header {
		h := admin.Clone()
		h.Set("Impersonate-User", user)
		return h
	}

	type caller struct {
		name   string
		header http.Header
		// want is the status for each class.
		health, metrics, debug int
	}
	callers := []caller{
		{"anonymous", nil, 200, 401, 401},
		{"a bad token", bearer("not-a-token"), 401, 401, 401},
		{"no role", bearer(norole.token), 200, 403, 403},
		{"kgc-metrics-reader (a Prometheus scrape)", bearer(metrics.token), 200, 200, 403},
		{"kgc-debug-reader", bearer(debug.token), 200, 403, 200},
		{"cluster admin (system:masters)", admin, 200, 200, 200},
		{"admin as the metrics reader", as(metrics.user), 200, 200, 403},
		{"admin as the debug reader", as(debug.user), 200, 403, 200},
		{"admin as no role", as(norole.user), 200, 403, 403},
		{"the debug reader impersonating (not allowed)", func() http.Header {
			h := bearer(debug.token)
			h.Set("Impersonate-User", metrics.user)
			return h
		}(), 403, 403, 403},
	}
	// The matrix, for the note: one line per caller and class.
	var matrix strings.Builder
	fmt.Fprintf(&matrix, "%-45s %-8s %-8s %-8s\n", "caller", "health", "metrics", "debug")
	for _, cl := range callers {
		t.Run(cl.name, func(t *testing.T) {
			check := func(class string, paths []string, want int) {
				for _, path := range paths {
					code, body := p.requestWith(path, cl.header)
					if code != want {
						t.Errorf("%s GET %s: %d, want %d: %.300s", class, path, code, want, body)
					}
				}
			}
			check("health", healthPaths, cl.health)
			check("metrics", metricsPaths, cl.metrics)
			check("debug", debugClass, cl.debug)
			shadowWant := cl.debug
			if shadowWant == http.StatusOK {
				shadowWant = http.StatusNotFound
			}
			check("debug", []string{shadowPath}, shadowWant)
		})
		fmt.Fprintf(&matrix, "%-45s %-8d %-8d %-8d\n", cl.name, cl.health, cl.metrics, cl.debug)
	}
	t.Logf("security matrix (status by caller and path class; shadow answers 404 where debug is 200):\n%s", matrix.String())

	t.Run("a Prometheus scrape reads kgc's metrics", func(t *testing.T) {
		code, body := p.requestWith("/metrics", http.Header{
			"Authorization": {"Bearer " + metrics.token},
			"Accept":        {"application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5,*/*;q=0.1"},
		})
		if code != http.StatusOK || !strings.Contains(body, "kgc_graph_nodes") {
			t.Errorf("scrape: %d %.500s", code, body)
		}
	})
}

// saToken is a service account's token and the user name it authenticates as.
type saToken struct{ user, token string }

// serviceAccountToken creates a service account in a namespace of its
// own, binds it to clusterRoles, waits until the API server's authorizer
// sees the bindings, and returns a token for it (TokenRequest).
func serviceAccountToken(t *testing.T, name string, clusterRoles ...string) saToken {
	t.Helper()
	ctx := t.Context()
	ns := createNamespace(t)
	if _, err := kubeClient.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	user := "system:serviceaccount:" + ns + ":" + name
	for _, role := range clusterRoles {
		crb := &rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: ns + "-" + role},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: name}},
		}
		if _, err := kubeClient.RbacV1().ClusterRoleBindings().Create(ctx, crb, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = kubeClient.RbacV1().ClusterRoleBindings().Delete(context.Background(), crb.Name, metav1.DeleteOptions{})
		})
		// kgc caches SubjectAccessReview answers, denials included: ask
		// it only once the API server allows.
		path := "/metrics"
		if role == "kgc-debug-reader" {
			path = "/debug/controllers/garbage-collector-controller/graph"
		}
		err := wait.PollUntilContextTimeout(ctx, pollInterval, waitTimeout, true, func(ctx context.Context) (bool, error) {
			r, err := kubeClient.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
				User: user, NonResourceAttributes: &authorizationv1.NonResourceAttributes{Path: path, Verb: "get"},
			}}, metav1.CreateOptions{})
			return err == nil && r.Status.Allowed, nil
		})
		if err != nil {
			t.Fatalf("%s never allowed to get %s: %v", user, path, err)
		}
	}
	tr, err := kubeClient.CoreV1().ServiceAccounts(ns).CreateToken(ctx, name, &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return saToken{user: user, token: tr.Status.Token}
}

// TestAuthDelegationBindingIsNeeded runs the kgc binary as the Deployment
// runs it, as an identity granted all of deploy/'s RBAC but the binding of
// deploy/25-auth-delegation.yaml: kgc starts (it reads the cluster's
// client and front-proxy CAs through its ClusterRole, with no
// extension-apiserver-authentication-reader binding), but cannot ask the
// API server who a bearer token is (TokenReview), so a Prometheus scrape
// with a valid token is refused.
func TestAuthDelegationBindingIsNeeded(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the kgc binary")
	}
	in := applyRBAC(t)
	c := deploymentContainer(t)
	bin := buildAsDockerfile(t)
	scraper := serviceAccountToken(t, "scraper", "kgc-metrics-reader")
	const name = "kgc-test-no-auth-delegator"
	cfg := grantAs(t, name, in.clusterRole.Rules, in.role.Rules)
	// The bindings are in the authorizer's cache once these are allowed.
	waitForAccess(t, cfg, authorizationv1.ResourceAttributes{Verb: "get", Resource: "configmaps", Namespace: metav1.NamespaceSystem, Name: "extension-apiserver-authentication"}, true)
	waitForAccess(t, cfg, authorizationv1.ResourceAttributes{Verb: "create", Group: "authentication.k8s.io", Resource: "tokenreviews"}, false)
	kubeconfig := impersonatingKubeconfig(t, cfg.Impersonate.UserName, cfg.Impersonate.Groups)
	addr := freeAddress(t)
	args := append(withSecurePort(c.Args, addr), "--kubeconfig="+kubeconfig, "--leader-elect=false")
	p := startProcess(t, "kgc", bin, addr, args)
	p.waitStatus(t, "/readyz", http.StatusOK)
	code, body := p.requestWith("/metrics", bearer(scraper.token))
	if code != http.StatusUnauthorized {
		t.Fatalf("a scrape with a metrics reader's valid token, kgc without %s: %d, want 401 (kgc cannot review tokens): %.300s", in.authDelegator.RoleRef.Name, code, body)
	}
	t.Logf("without %s: a scrape with a valid token is refused (%d)", in.authDelegator.RoleRef.Name, code)
}
