package app

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/kgc-dev/kgc/internal/graphapi"
	"github.com/kgc-dev/kgc/internal/inspect"
)

// graphServer serves a fixed graph like kgc's JSON graph endpoint.
func graphServer(t *testing.T, g graphapi.Graph) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != inspect.GraphPath || r.URL.Query().Get("format") != "json" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(g)
	}))
	t.Cleanup(srv.Close)
	return srv
}

func stuck() graphapi.Graph {
	yes := true
	return graphapi.Graph{Synced: true, Total: 2, Nodes: []graphapi.Node{
		{UID: "u-d", APIVersion: "apps/v1", Kind: "Deployment", Namespace: "shop", Name: "web", State: graphapi.StateWaitingForDependents, Finalizers: []string{"foregroundDeletion"}},
		{UID: "u-p", APIVersion: "v1", Kind: "Pod", Namespace: "shop", Name: "web-x", State: graphapi.StateDeleting, Finalizers: []string{"example.com/keep"},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "Deployment", Name: "web", UID: "u-d", BlockOwnerDeletion: &yes}}},
	}}
}

func runKGC(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var out, errb bytes.Buffer
	code = Execute(context.Background(), args, &out, &errb)
	return out.String(), errb.String(), code
}

func TestInspectCommandsAgainstServer(t *testing.T) {
	g := stuck()
	g.Nodes[0].Dependents = append(g.Nodes[0].Dependents, "u-p")
	srv := graphServer(t, g)

	out, errs, code := runKGC(t, "explain", "deployment/web", "-n", "shop", "--kgc-url", srv.URL)
	if code != 0 {
		t.Fatalf("explain: exit %d: %s", code, errs)
	}
	for _, want := range []string{"Deployment.apps/web -n shop", "wait-for-dependents", "Pod/web-x -n shop", "example.com/keep", "nothing in kgc will remove this; whoever owns it must"} {
		if !strings.Contains(out, want) {
			t.Errorf("explain output lacks %q:\n%s", want, out)
		}
	}

	out, errs, code = runKGC(t, "tree", "deployments.apps", "web", "-n", "shop", "--kgc-url", srv.URL, "-o", "json")
	if code != 0 {
		t.Fatalf("tree: exit %d: %s", code, errs)
	}
	var tr inspect.TreeNode
	if err := json.Unmarshal([]byte(out), &tr); err != nil {
		t.Fatalf("tree -o json: %v\n%s", err, out)
	}
	if tr.Object.Name != "web" || len(tr.Dependents) != 1 || tr.Dependents[0].Object.Name != "web-x" || !tr.Dependents[0].Blocking {
		t.Errorf("tree: %s", out)
	}

	out, errs, code = runKGC(t, "preview", "delete", "pod/web-x", "-n", "shop", "--kgc-url", srv.URL, "--cascade=foreground", "-o", "json")
	if code != 0 {
		t.Fatalf("preview: exit %d: %s", code, errs)
	}
	var p inspect.Preview
	if err := json.Unmarshal([]byte(out), &p); err != nil {
		t.Fatalf("preview -o json: %v\n%s", err, out)
	}
	if p.Policy != "Foreground" || len(p.Blocked) != 1 || p.Blocked[0].Object.Name != "web-x" {
		t.Errorf("preview: %s", out)
	}
}

func TestInspectCommandErrors(t *testing.T) {
	srv := graphServer(t, stuck())
	dot := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/vnd.graphviz")
		_, _ = w.Write([]byte("digraph full {}"))
	}))
	defer dot.Close()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"explain", "web", "--kgc-url", srv.URL}, "want KIND/NAME"},
		{[]string{"explain", "deployment/nope", "-n", "shop", "--kgc-url", srv.URL}, `"nope"`},
		{[]string{"tree", "deployment/web", "-o", "xml", "--kgc-url", srv.URL}, "--output"},
		{[]string{"preview", "delete", "deployment/web", "--cascade=sideways", "--kgc-url", srv.URL}, "--cascade"},
		{[]string{"preview"}, "kgc preview delete"},
		{[]string{"explain", "pod/x", "--kgc-url", dot.URL}, "does not serve the ownership graph as JSON"},
		{[]string{"explain", "pod/x", "--kgc-url", "nohost"}, "want a URL"},
		{[]string{"explain", "pod/x", "--kubeconfig", "/nonexistent/kubeconfig"}, "kubeconfig"},
	} {
		out, errs, code := runKGC(t, tc.args...)
		if code == 0 || !strings.Contains(errs, tc.want) {
			t.Errorf("kgc %s: exit %d, stderr %q, stdout %q; want a failure mentioning %q", strings.Join(tc.args, " "), code, errs, out, tc.want)
		}
	}
}

func TestParseCascade(t *testing.T) {
	for in, want := range map[string]metav1.DeletionPropagation{"background": "Background", "Foreground": "Foreground", "orphan": "Orphan", "true": "Background", "false": "Orphan"} {
		if got, err := parseCascade(in); err != nil || got != want {
			t.Errorf("%s: %s, %v", in, got, err)
		}
	}
}

// The inspection commands give a config without a budget their own, and
// leave a negative QPS (no rate limit) as it is.
func TestInspectWrapBudget(t *testing.T) {
	o := newInspectOptions()
	for _, tc := range []struct {
		qps, wantQPS     float32
		burst, wantBurst int
	}{{0, 50, 0, 100}, {-1, -1, 0, 0}, {5, 5, 6, 6}} {
		var wrapped float32
		cfg := &rest.Config{QPS: tc.qps, Burst: tc.burst}
		o.wrap(cfg, InspectDeps{WrapConfig: func(c *rest.Config) { wrapped = c.QPS }})
		if cfg.QPS != tc.wantQPS || cfg.Burst != tc.wantBurst || wrapped != tc.wantQPS {
			t.Errorf("QPS %v, Burst %d: got %v, %d (WrapConfig saw %v); want %v, %d", tc.qps, tc.burst, cfg.QPS, cfg.Burst, wrapped, tc.wantQPS, tc.wantBurst)
		}
	}
}
