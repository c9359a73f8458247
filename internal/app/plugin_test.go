package app

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
)

func TestIsPlugin(t *testing.T) {
	for argv0, want := range map[string]bool{
		"kubectl-kgc": true, "/usr/local/bin/kubectl-kgc": true, "kubectl-kgc.exe": true,
		"kgc": false, "/usr/bin/kgc": false, "kubectl-kgc2": false, "kubectl": false,
	} {
		if got := IsPlugin(argv0); got != want {
			t.Errorf("IsPlugin(%q) = %v, want %v", argv0, got, want)
		}
	}
}

func runMain(t *testing.T, argv ...string) (stdout, stderr string, code int) {
	t.Helper()
	var out, errb bytes.Buffer
	code = Main(context.Background(), argv, &out, &errb)
	return out.String(), errb.String(), code
}

// Named kubectl-kgc, the binary is the kubectl plugin: the read-only
// commands only, spelled `kubectl kgc`, each with kubectl's flags.
func TestPluginCommands(t *testing.T) {
	out, errs, code := runMain(t, "/usr/local/bin/kubectl-kgc", "--help")
	if code != 0 {
		t.Fatalf("kubectl-kgc --help: exit %d: %s", code, errs)
	}
	if !strings.Contains(out, "kubectl kgc [command]") {
		t.Errorf("help does not say kubectl kgc:\n%s", out)
	}
	for _, c := range []string{"explain", "preview", "tree", "stuck"} {
		if !strings.Contains(out, "\n  "+c+" ") {
			t.Errorf("kubectl kgc lacks %s:\n%s", c, out)
		}
	}
	if strings.Contains(out, "\n  run ") {
		t.Errorf("kubectl kgc offers run:\n%s", out)
	}
	if _, _, code := runMain(t, "kubectl-kgc", "run"); code == 0 {
		t.Errorf("kubectl kgc run succeeded")
	}
	for _, args := range [][]string{{"explain"}, {"preview", "delete"}, {"tree"}, {"stuck"}} {
		out, errs, code := runMain(t, append(append([]string{"kubectl-kgc"}, args...), "--help")...)
		if code != 0 {
			t.Fatalf("%v --help: exit %d: %s", args, code, errs)
		}
		for _, flag := range []string{"--kubeconfig string", "--context string", "-n, --namespace string", "--server string"} {
			if !strings.Contains(out, flag) {
				t.Errorf("kubectl kgc %s lacks %s", strings.Join(args, " "), flag)
			}
		}
		if strings.Contains(out, "\n  kgc ") {
			t.Errorf("kubectl kgc %s shows examples without kubectl:\n%s", strings.Join(args, " "), out)
		}
	}
	// As kgc, the same binary still runs everything.
	out, _, _ = runMain(t, "/usr/bin/kgc", "--help")
	if !strings.Contains(out, "\n  run ") || !strings.Contains(out, "\n  stuck ") {
		t.Errorf("kgc --help:\n%s", out)
	}
}

// --kubeconfig and --context pick the cluster as kubectl's do, and -n the
// namespace: the commands ask the context's API server, not the current
// context's.
func TestPluginHonoursKubeconfigContextAndNamespace(t *testing.T) {
	var hits [2]atomic.Int64
	var paths [2]atomic.Value
	servers := make([]*httptest.Server, 2)
	for i := range servers {
		servers[i] = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			hits[i].Add(1)
			paths[i].Store(r.URL.Path)
			http.Error(w, "no", http.StatusServiceUnavailable)
		}))
		t.Cleanup(servers[i].Close)
	}
	kubeconfig := filepath.Join(t.TempDir(), "config")
	cfg := fmt.Sprintf(`apiVersion: v1
kind: Config
current-context: a
clusters:
- name: a
  cluster: {server: %q}
- name: b
  cluster: {server: %q}
users:
- name: u
  user: {token: t}
contexts:
- name: a
  context: {cluster: a, user: u, namespace: from-a}
- name: b
  context: {cluster: b, user: u, namespace: from-b}
`, servers[0].URL, servers[1].URL)
	if err := os.WriteFile(kubeconfig, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"stuck"}, {"explain", "cm/x"}, {"tree", "cm/x"}, {"preview", "delete", "cm/x"},
	} {
		hits[0].Store(0)
		hits[1].Store(0)
		argv := append(append([]string{"kubectl-kgc"}, args...), "--kubeconfig", kubeconfig, "--context", "b", "--request-timeout", "5s")
		if _, _, code := runMain(t, argv...); code == 0 {
			t.Errorf("%v: succeeded against a server that answers 503", args)
		}
		if hits[0].Load() != 0 || hits[1].Load() == 0 {
			t.Errorf("%v --context b: %d requests to context a's server, %d to b's", args, hits[0].Load(), hits[1].Load())
		}
	}
	// The namespace: the context's by default, -n's when given.
	o := newInspectOptions()
	*o.config.KubeConfig, *o.config.Context, o.kgc.url = kubeconfig, "b", "http://127.0.0.1:1"
	if _, ns, err := o.view(t.Context(), InspectDeps{}); err != nil || ns != "from-b" {
		t.Errorf("namespace of context b = %q, %v; want from-b", ns, err)
	}
	o = newInspectOptions()
	*o.config.KubeConfig, *o.config.Context, *o.config.Namespace, o.kgc.url = kubeconfig, "b", "shop", "http://127.0.0.1:1"
	if _, ns, err := o.view(t.Context(), InspectDeps{}); err != nil || ns != "shop" {
		t.Errorf("namespace with -n shop = %q, %v", ns, err)
	}
}
