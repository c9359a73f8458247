package inspect

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/wait"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/rest"

	"github.com/kgc-dev/kgc/internal/app"
	"github.com/kgc-dev/kgc/sandbox/internal/testenv"
)

// TestAskKGCFindsTheLeaderAndKeepsRBAC runs `kgc run` with leader election
// and its HTTPS port, and asks it with --ask-kgc: the command finds the
// leader from the Lease (its holder names its Pod), opens the way to the
// Pod's HTTPS port, and sends the caller's identity, so that Kubernetes
// RBAC decides who reads the graph: deploy/60-readers.yaml's roles let a
// reader in, and without them the API server (the Lease) or kgc (the
// graph) refuses. The sandbox has no kubelet to port-forward through, so
// the tunnel itself is replaced by a direct connection to the port the
// command asked for.
func TestAskKGCFindsTheLeaderAndKeepsRBAC(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the kgc binary")
	}
	tc := newTestCase(t)
	host, err := os.Hostname()
	if err != nil || len(validation.IsDNS1123Subdomain(host)) > 0 {
		t.Skipf("the host name %q cannot name the leader's Pod", host)
	}
	bin, err := testenv.BuildKGC(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	port := freePort(t)
	testenv.StartProc(t, "kgc", waitTimeout, bin, "run",
		"--kubeconfig", kubeconfigPath,
		"--leader-elect", "--leader-elect-resource-namespace="+tc.ns,
		"--secure-port="+strconv.Itoa(port), "--bind-address=127.0.0.1")

	// The leader, as a Deployment's Pod would carry it: named by the
	// host, with the HTTPS port named.
	var holder string
	err = wait.PollUntilContextTimeout(tc.ctx, pollInterval, waitTimeout, true, func(ctx context.Context) (bool, error) {
		l, err := kubeClient.CoordinationV1().Leases(tc.ns).Get(ctx, "kgc", metav1.GetOptions{})
		if err == nil && l.Spec.HolderIdentity != nil {
			holder = *l.Spec.HolderIdentity
		}
		return holder != "", nil
	})
	if err != nil {
		t.Fatalf("kgc never took the Lease: %v", err)
	}
	if !strings.HasPrefix(holder, host+"_") {
		t.Fatalf("Lease holder %q does not start with the host name %q", holder, host)
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: host, Namespace: tc.ns},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name: "kgc", Image: "kgc",
			Ports: []corev1.ContainerPort{{Name: "https", ContainerPort: int32(port)}},
		}}},
	}
	if _, err := kubeClient.CoreV1().Pods(tc.ns).Create(tc.ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var forwarded []string
	deps := app.InspectDeps{Forward: func(_ context.Context, cfg *rest.Config, p *corev1.Pod, pt int) (string, func(), error) {
		forwarded = append(forwarded, p.Namespace+"/"+p.Name+":"+strconv.Itoa(pt))
		return "127.0.0.1:" + strconv.Itoa(pt), func() {}, nil
	}}

	web := tc.configMap("web")
	tc.configMap("web-part", ownedBy(web, true))

	// Readers: one with the shipped roles, one with only the way in, one
	// with nothing.
	reader := serviceAccount(t, tc, "reader", true, true)
	wayInOnly := serviceAccount(t, tc, "way-in-only", false, true)
	nobody := serviceAccount(t, tc, "nobody", false, false)

	ask := func(args ...string) (string, error) {
		t.Helper()
		args = append(args, "-n", tc.ns, "--kubeconfig", kubeconfigPath, "--ask-kgc", "--lease-namespace", tc.ns)
		var out, errOut bytes.Buffer
		err := app.ExecuteInspect(tc.ctx, deps, args, &out, &errOut)
		if err != nil {
			err = fmt.Errorf("%w (stderr: %s)", err, errOut.String())
		}
		return out.String(), err
	}
	// The graph is kgc's once its monitors synced.
	var out string
	err = wait.PollUntilContextTimeout(tc.ctx, pollInterval, waitTimeout, true, func(context.Context) (bool, error) {
		out, err = ask("tree", "configmap/web")
		return err == nil && strings.Contains(out, "ConfigMap/web-part"), nil
	})
	if err != nil {
		t.Fatalf("kgc tree --ask-kgc as the admin: %v\n%s", err, out)
	}
	if want := tc.ns + "/" + host + ":" + strconv.Itoa(port); len(forwarded) == 0 || forwarded[0] != want {
		t.Errorf("forwarded to %v, want the leader's Pod and HTTPS port %s", forwarded, want)
	}

	for _, c := range []struct {
		name, as string
		want     string // in the output, or in the error when fail
		fail     bool
	}{
		{"a reader with the shipped roles", reader, "ConfigMap/web-part", false},
		{"a user who may reach kgc but not read its graph", wayInOnly, "403", true},
		{"a user who may not even read the Lease", nobody, "forbidden", true},
	} {
		t.Run(c.name, func(t *testing.T) {
			out, err := ask("tree", "configmap/web", "--as", c.as)
			switch {
			case c.fail && err == nil:
				t.Errorf("--as %s succeeded:\n%s", c.as, out)
			case c.fail && !strings.Contains(err.Error(), c.want):
				t.Errorf("--as %s: %v, want it to mention %q", c.as, err, c.want)
			case !c.fail && (err != nil || !strings.Contains(out, c.want)):
				t.Errorf("--as %s: %v\n%s", c.as, err, out)
			}
		})
	}

	t.Run("kubectl's printers", func(t *testing.T) {
		out, err := ask("tree", "configmap/web", "-o", "name")
		if err != nil || out != "configmap/web\nconfigmap/web-part\n" {
			t.Errorf("-o name: %v\n%q", err, out)
		}
		out, err = ask("explain", "configmap/web-part", "-o", "jsonpath={.kind} {.object.name} {.decision.verdict}")
		if err != nil || out != "Explanation web-part keep" {
			t.Errorf("-o jsonpath: %v\n%q", err, out)
		}
		out, err = ask("explain", "configmap/web-part", "-o", "yaml")
		if err != nil || !strings.Contains(out, "apiVersion: kgc.dev/v1alpha1\n") || !strings.Contains(out, "kind: Explanation\n") {
			t.Errorf("-o yaml: %v\n%s", err, out)
		}
	})
}

// serviceAccount creates a service account in tc's namespace and returns
// the user name to impersonate it with. read binds it to the shipped
// ClusterRole kgc-debug-reader; wayIn to the shipped Role kgc-inspector
// (in tc's namespace, where this test's Lease is).
func serviceAccount(t *testing.T, tc *testCase, name string, read, wayIn bool) string {
	t.Helper()
	if _, err := kubeClient.CoreV1().ServiceAccounts(tc.ns).Create(tc.ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	subject := []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: tc.ns, Name: name}}
	roles := shippedReaderRoles(t)
	if read {
		cr := roles.debugReader.DeepCopy()
		cr.ObjectMeta = metav1.ObjectMeta{Name: tc.ns + "-debug-reader"}
		if _, err := kubeClient.RbacV1().ClusterRoles().Create(tc.ctx, cr, metav1.CreateOptions{}); err != nil && !strings.Contains(err.Error(), "already exists") {
			t.Fatal(err)
		}
		crb := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: tc.ns + "-" + name},
			RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: cr.Name}, Subjects: subject}
		if _, err := kubeClient.RbacV1().ClusterRoleBindings().Create(tc.ctx, crb, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = kubeClient.RbacV1().ClusterRoleBindings().Delete(context.Background(), crb.Name, metav1.DeleteOptions{})
			_ = kubeClient.RbacV1().ClusterRoles().Delete(context.Background(), cr.Name, metav1.DeleteOptions{})
		})
	}
	if wayIn {
		r := roles.inspector.DeepCopy()
		r.ObjectMeta = metav1.ObjectMeta{Name: "kgc-inspector", Namespace: tc.ns}
		if _, err := kubeClient.RbacV1().Roles(tc.ns).Create(tc.ctx, r, metav1.CreateOptions{}); err != nil && !strings.Contains(err.Error(), "already exists") {
			t.Fatal(err)
		}
		rb := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "inspector-" + name, Namespace: tc.ns},
			RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: r.Name}, Subjects: subject}
		if _, err := kubeClient.RbacV1().RoleBindings(tc.ns).Create(tc.ctx, rb, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	user := "system:serviceaccount:" + tc.ns + ":" + name
	// kgc caches SubjectAccessReview answers: ask it once the API server
	// agrees.
	waitForNonResourceAccess(t, tc, user, "/debug/controllers/garbage-collector-controller/graph", read)
	return user
}

func waitForNonResourceAccess(t *testing.T, tc *testCase, user, path string, allowed bool) {
	t.Helper()
	err := wait.PollUntilContextTimeout(tc.ctx, pollInterval, waitTimeout, true, func(ctx context.Context) (bool, error) {
		r, err := kubeClient.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
			User: user, NonResourceAttributes: &authorizationv1.NonResourceAttributes{Path: path, Verb: "get"},
		}}, metav1.CreateOptions{})
		return err == nil && r.Status.Allowed == allowed, nil
	})
	if err != nil {
		t.Fatalf("%s get %s: never allowed=%v", user, path, allowed)
	}
}

type readerRoles struct {
	debugReader *rbacv1.ClusterRole
	inspector   *rbacv1.Role
}

// shippedReaderRoles reads deploy/60-readers.yaml.
func shippedReaderRoles(t *testing.T) readerRoles {
	t.Helper()
	f, err := os.Open("../../../deploy/60-readers.yaml")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var r readerRoles
	dec := utilyaml.NewYAMLOrJSONDecoder(f, 4096)
	for {
		var u unstructured.Unstructured
		if err := dec.Decode(&u.Object); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		switch u.GetKind() + "/" + u.GetName() {
		case "ClusterRole/kgc-debug-reader":
			r.debugReader = &rbacv1.ClusterRole{}
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, r.debugReader); err != nil {
				t.Fatal(err)
			}
		case "Role/kgc-inspector":
			r.inspector = &rbacv1.Role{}
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, r.inspector); err != nil {
				t.Fatal(err)
			}
		}
	}
	if r.debugReader == nil || r.inspector == nil {
		t.Fatal("deploy/60-readers.yaml lacks ClusterRole kgc-debug-reader or Role kgc-inspector")
	}
	return r
}

func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}
