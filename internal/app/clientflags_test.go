package app

import (
	"encoding/json"
	"encoding/pem"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/rest"
	certutil "k8s.io/client-go/util/cert"
)

// kubectl's printers over the inspection commands' answers: every format
// kubectl's -o has, the documents typed, -o name naming the objects.
func TestInspectOutputFormats(t *testing.T) {
	g := stuck()
	g.Nodes[0].Dependents = append(g.Nodes[0].Dependents, "u-p")
	srv := graphServer(t, g)
	for _, tc := range []struct {
		args []string
		want string // exact output, or a prefix ending in "…"
	}{
		{[]string{"tree", "deployment/web", "-o", "name"}, "deployment.apps/web\npod/web-x\n"},
		{[]string{"explain", "pod/web-x", "-o", "name"}, "pod/web-x\n"},
		{[]string{"preview", "delete", "deployment/web", "-o", "name"}, "deployment.apps/web\n"},
		{[]string{"explain", "pod/web-x", "-o", "jsonpath={.kind}/{.object.kind}/{.decision.verdict}"}, "Explanation/Pod/wait-for-finalizers"},
		{[]string{"tree", "deployment/web", "-o", "go-template={{.kind}} {{.object.name}}"}, "OwnershipTree web"},
		{[]string{"stuck", "--older-than=0s", "-o", "jsonpath={.apiVersion} {.kind}"}, "kgc.dev/v1alpha1 StuckReport"},
		{[]string{"tree", "deployment/web", "-o", "yaml"}, "apiVersion: kgc.dev/v1alpha1\ndependents:…"},
	} {
		args := append(tc.args, "-n", "shop", "--kgc-url", srv.URL)
		out, errs, code := runKGC(t, args...)
		if code != 0 {
			t.Errorf("kgc %s: exit %d: %s", strings.Join(args, " "), code, errs)
			continue
		}
		if prefix, ok := strings.CutSuffix(tc.want, "…"); ok {
			if !strings.HasPrefix(out, prefix) {
				t.Errorf("kgc %s:\n%s\nwant it to start with %q", strings.Join(tc.args, " "), out, prefix)
			}
		} else if out != tc.want {
			t.Errorf("kgc %s: %q, want %q", strings.Join(tc.args, " "), out, tc.want)
		}
	}
	// -o json stays what it was, typed: the fields at the top level.
	out, _, _ := runKGC(t, "explain", "pod/web-x", "-n", "shop", "--kgc-url", srv.URL, "-o", "json")
	var doc struct {
		APIVersion, Kind string
		Object           struct{ Name string }
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil || doc.APIVersion != outputAPIVersion || doc.Kind != "Explanation" || doc.Object.Name != "web-x" {
		t.Errorf("-o json: %v\n%s", err, out)
	}
	if _, errs, code := runKGC(t, "stuck", "-A", "--kgc-url", srv.URL); code != 0 {
		t.Errorf("stuck -A: exit %d: %s", code, errs)
	}
	// -A and -n exclude each other, as in kubectl.
	if _, errs, code := runKGC(t, "stuck", "-A", "-n", "shop", "--kgc-url", srv.URL); code == 0 || !strings.Contains(errs, "-A/--all-namespaces") {
		t.Errorf("stuck -A -n: exit %d, %s", code, errs)
	}
	// kubectl's --server is the API server's, no longer kgc's.
	if _, errs, code := runKGC(t, "stuck", "--server", srv.URL, "--request-timeout=2s"); code == 0 {
		t.Errorf("stuck --server (an API server that is not one): exit 0, %s", errs)
	}
	if _, errs, code := runKGC(t, "stuck", "-o", "table", "--kgc-url", srv.URL); code == 0 || !strings.Contains(errs, "--output") {
		t.Errorf("stuck -o table: exit %d, %s", code, errs)
	}
}

// The leader is the Pod named by the Lease holder's identity; its HTTPS
// port is its container port named https.
func TestLeaderPod(t *testing.T) {
	holder := "kgc-7d9c-x2x9z_0b5d"
	lease := func(ns, holder string) *coordinationv1.Lease {
		l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "kgc"}}
		if holder != "" {
			l.Spec.HolderIdentity = &holder
		}
		return l
	}
	pod := func(ns string, ports ...corev1.ContainerPort) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "kgc-7d9c-x2x9z"},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "kgc", Ports: ports, Args: []string{"run", "--secure-port=9443"}}}}}
	}
	for _, tc := range []struct {
		name      string
		objs      []any
		namespace string // --lease-namespace
		wantPod   string
		wantPort  int
		wantErr   string
	}{
		{"deploy/'s namespace", []any{lease("kgc-system", holder), pod("kgc-system", corev1.ContainerPort{Name: "https", ContainerPort: 10355})}, "", "kgc-system/kgc-7d9c-x2x9z", 10355, ""},
		{"kgc run's default namespace", []any{lease("kube-system", holder), pod("kube-system", corev1.ContainerPort{Name: "https", ContainerPort: 10355})}, "", "kube-system/kgc-7d9c-x2x9z", 10355, ""},
		{"the namespace given", []any{lease("kgc-system", holder), lease("ops", holder), pod("ops", corev1.ContainerPort{Name: "https", ContainerPort: 8443})}, "ops", "ops/kgc-7d9c-x2x9z", 8443, ""},
		{"no named port: the flag", []any{lease("kgc-system", holder), pod("kgc-system")}, "", "kgc-system/kgc-7d9c-x2x9z", 9443, ""},
		{"no holder", []any{lease("kgc-system", "")}, "", "", 0, "no kgc holds the Lease"},
		{"a holder without a Pod", []any{lease("kgc-system", holder)}, "", "", 0, "is that kgc running outside the cluster"},
		{"no Lease", nil, "", "", 0, "kube-system/kgc"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cs := fake.NewClientset()
			for _, o := range tc.objs {
				var err error
				switch o := o.(type) {
				case *coordinationv1.Lease:
					_, err = cs.CoordinationV1().Leases(o.Namespace).Create(t.Context(), o, metav1.CreateOptions{})
				case *corev1.Pod:
					_, err = cs.CoreV1().Pods(o.Namespace).Create(t.Context(), o, metav1.CreateOptions{})
				}
				if err != nil {
					t.Fatal(err)
				}
			}
			f := kgcFlags{leaseNamespace: tc.namespace, leaseName: "kgc"}
			p, port, err := f.leaderPod(t.Context(), cs)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want it to mention %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := p.Namespace + "/" + p.Name; got != tc.wantPod || port != tc.wantPort {
				t.Errorf("leader %s port %d, want %s port %d", got, port, tc.wantPod, tc.wantPort)
			}
		})
	}
}

// --ask-kgc sends the caller's credentials and impersonation to kgc over
// TLS, without verifying kgc's self-signed certificate unless told a CA;
// --kgc-url http:// sends nothing.
func TestKGCClientCredentials(t *testing.T) {
	var got http.Header
	tlsSrv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { got = r.Header.Clone() }))
	defer tlsSrv.Close()
	cfg := &rest.Config{Host: "https://api.example:6443", BearerToken: "my-token",
		Impersonate:     rest.ImpersonationConfig{UserName: "alice"},
		TLSClientConfig: rest.TLSClientConfig{CAData: []byte("the API server's CA, not kgc's"), ServerName: "api.example"}}
	f := kgcFlags{ask: true, leaseName: "kgc"}
	hc, err := f.httpsClient(cfg, 0)
	if err != nil {
		t.Fatal(err)
	}
	res, err := hc.Get(tlsSrv.URL + "/x")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if got.Get("Authorization") != "Bearer my-token" || got.Get("Impersonate-User") != "alice" {
		t.Errorf("kgc received %v, want the caller's token and impersonation", got)
	}

	// --kgc-certificate-authority verifies kgc's certificate.
	writeCA := func(srv *httptest.Server) string {
		path := filepath.Join(t.TempDir(), "ca.crt")
		if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	otherCert, _, err := certutil.GenerateSelfSignedCertKey("another-ca", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	otherCA := filepath.Join(t.TempDir(), "other.crt")
	if err := os.WriteFile(otherCA, otherCert, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		ca   string
		fail bool
	}{{writeCA(tlsSrv), false}, {otherCA, true}} {
		f.certificateAuthority = tc.ca
		hc, err := f.httpsClient(cfg, 0)
		if err != nil {
			t.Fatal(err)
		}
		res, err := hc.Get(tlsSrv.URL)
		if err == nil {
			res.Body.Close()
		}
		if (err != nil) != tc.fail {
			t.Errorf("CA %s: %v, want failure %v", tc.ca, err, tc.fail)
		}
	}

	// Plain HTTP carries no credentials.
	plain := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { got = r.Header.Clone() }))
	defer plain.Close()
	pf := kgcFlags{url: plain.URL}
	conn, err := pf.dial(t.Context(), cfg, InspectDeps{}, 0)
	if err != nil {
		t.Fatal(err)
	}
	res, err = conn.client.Get(conn.base)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if got.Get("Authorization") != "" || got.Get("Impersonate-User") != "" {
		t.Errorf("plain HTTP carried %v", got)
	}
}

// Breaker status and resume find the Lease where deploy/ or kgc run's
// default put it.
func TestAllNotFound(t *testing.T) {
	nf := apierrors.NewNotFound(schema.GroupResource{Group: "coordination.k8s.io", Resource: "leases"}, "kgc")
	forbidden := apierrors.NewForbidden(schema.GroupResource{Group: "coordination.k8s.io", Resource: "leases"}, "kgc", errors.New("no"))
	if !allNotFound(errors.Join(nf, nf)) || allNotFound(errors.Join(nf, forbidden)) || !allNotFound(nf) {
		t.Error("allNotFound")
	}
}
