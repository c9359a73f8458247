package server

import (
	"errors"
	"flag"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kgc-dev/kgc/internal/graph"
	"github.com/kgc-dev/kgc/internal/rules"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden from the current output")

// fakeSource is a Source over a real graph whose readiness tests control.
type fakeSource struct {
	g *graph.Graph

	mu    sync.Mutex
	ready error
}

func (s *fakeSource) Ready() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ready
}

func (s *fakeSource) Graph() *graph.Graph { return s.g }

func boolPtr(b bool) *bool { return &b }

func upsert(t *testing.T, g *graph.Graph, o rules.Object) {
	t.Helper()
	g.Apply(graph.Event{Type: graph.Upsert, Object: o})
	if err := g.CheckInvariants(); err != nil {
		t.Fatal(err)
	}
}

// testGraph is a small graph with every kind of node:
//
//	web (Deployment) <- web-abc (ReplicaSet, foreground deletion) <- web-abc-x (Pod) -> ghost (placeholder)
//	settings (ConfigMap) -> gone (absent placeholder)
//	lonely (Namespace, cluster-scoped)
func testGraph(t *testing.T) *graph.Graph {
	g := graph.New()
	upsert(t, g, rules.Object{Identity: rules.Identity{APIVersion: "apps/v1", Kind: "Deployment", Namespace: "default", Name: "web", UID: "uid-1"}})
	upsert(t, g, rules.Object{
		Identity:        rules.Identity{APIVersion: "apps/v1", Kind: "ReplicaSet", Namespace: "default", Name: "web-abc", UID: "uid-2"},
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "Deployment", Name: "web", UID: "uid-1", Controller: boolPtr(true), BlockOwnerDeletion: boolPtr(true)}},
		Finalizers:      []string{rules.FinalizerForeground},
		Deleting:        true,
	})
	upsert(t, g, rules.Object{
		Identity: rules.Identity{APIVersion: "v1", Kind: "Pod", Namespace: "default", Name: "web-abc-x", UID: "uid-3"},
		OwnerReferences: []metav1.OwnerReference{
			{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "web-abc", UID: "uid-2", BlockOwnerDeletion: boolPtr(true)},
			{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "ghost", UID: "uid-9"},
			{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "web-abc", UID: "uid-2"}, // duplicate: one edge
		},
	})
	gone := rules.Object{Identity: rules.Identity{APIVersion: "v1", Kind: "Secret", Namespace: "default", Name: "gone", UID: "uid-4"}}
	upsert(t, g, gone)
	upsert(t, g, rules.Object{
		Identity:        rules.Identity{APIVersion: "v1", Kind: "ConfigMap", Namespace: "default", Name: "settings", UID: "uid-5"},
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Secret", Name: "gone", UID: "uid-4"}},
	})
	g.Apply(graph.Event{Type: graph.Delete, Object: gone})
	upsert(t, g, rules.Object{Identity: rules.Identity{APIVersion: "v1", Kind: "Namespace", Name: "lonely", UID: "uid-6"}})
	return g
}

func serve(t *testing.T, h http.Handler, method, target string) (*http.Response, string) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(method, target, nil))
	res := rec.Result()
	body, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return res, string(body)
}

func TestHealth(t *testing.T) {
	mux := BuildMux(&fakeSource{g: graph.New(), ready: errors.New("never")}, Options{})
	for _, path := range []string{"/healthz", "/livez"} {
		res, body := serve(t, mux, http.MethodGet, path)
		if res.StatusCode != http.StatusOK || body != "ok\n" {
			t.Errorf("GET %s = %d %q, want 200 \"ok\\n\" (liveness does not depend on readiness)", path, res.StatusCode, body)
		}
		if ct := res.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/plain") {
			t.Errorf("GET %s Content-Type = %q", path, ct)
		}
		if res, _ := serve(t, mux, http.MethodPost, path); res.StatusCode != http.StatusMethodNotAllowed {
			t.Errorf("POST %s = %d, want 405", path, res.StatusCode)
		}
	}
	if res, _ := serve(t, mux, http.MethodGet, "/nope"); res.StatusCode != http.StatusNotFound {
		t.Errorf("GET /nope = %d, want 404", res.StatusCode)
	}
}

func TestReadyz(t *testing.T) {
	src := &fakeSource{g: graph.New(), ready: errors.New("monitors have not synced")}
	srv := httptest.NewServer(BuildMux(src, Options{}))
	defer srv.Close()
	get := func() (int, string) {
		res, err := http.Get(srv.URL + "/readyz")
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(b)
	}
	if code, body := get(); code != http.StatusServiceUnavailable || !strings.Contains(body, "monitors have not synced") {
		t.Errorf("before sync: /readyz = %d %q, want 503 with the reason", code, body)
	}
	src.mu.Lock()
	src.ready = nil
	src.mu.Unlock()
	if code, body := get(); code != http.StatusOK || body != "ok\n" {
		t.Errorf("after sync: /readyz = %d %q, want 200 ok", code, body)
	}
}

func TestGraphGolden(t *testing.T) {
	src := &fakeSource{g: testGraph(t)}
	res, body := serve(t, BuildMux(src, Options{}), http.MethodGet, GraphPath)
	if res.StatusCode != http.StatusOK {
		t.Fatalf("status %d", res.StatusCode)
	}
	if ct := res.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/vnd.graphviz") {
		t.Errorf("Content-Type = %q", ct)
	}
	checkDOTSyntax(t, body)
	checkGolden(t, "graph.golden", "graph", body)
}

var uidAttr = regexp.MustCompile(`(?m)^    uid="([^"]*)"$`)

// nodeUIDs returns the uid attributes of the nodes in a DOT document.
func nodeUIDs(body string) []string {
	var out []string
	for _, m := range uidAttr.FindAllStringSubmatch(body, -1) {
		out = append(out, m[1])
	}
	slices.Sort(out)
	return out
}

func edgeCount(body string) int {
	return strings.Count(body, " -> ")
}

func TestGraphUIDFilter(t *testing.T) {
	src := &fakeSource{g: testGraph(t)}
	mux := BuildMux(src, Options{})
	tests := []struct {
		query     string
		wantUIDs  []string
		wantEdges int
	}{
		{"", []string{"uid-1", "uid-2", "uid-3", "uid-4", "uid-5", "uid-6", "uid-9"}, 4},
		{"?uid=uid-3", []string{"uid-1", "uid-2", "uid-3", "uid-9"}, 3},
		{"?uid=uid-9", []string{"uid-1", "uid-2", "uid-3", "uid-9"}, 3},
		{"?uid=uid-4", []string{"uid-4", "uid-5"}, 1},
		{"?uid=uid-5&uid=uid-1", []string{"uid-1", "uid-2", "uid-3", "uid-4", "uid-5", "uid-9"}, 4},
		{"?uid=uid-6&uid=uid-6&uid=", []string{"uid-6"}, 0},
		{"?uid=unknown", nil, 0},
		{"?uid=", nil, 0},
	}
	for _, tc := range tests {
		t.Run(tc.query, func(t *testing.T) {
			res, body := serve(t, mux, http.MethodGet, GraphPath+tc.query)
			if res.StatusCode != http.StatusOK {
				t.Fatalf("status %d", res.StatusCode)
			}
			checkDOTSyntax(t, body)
			if got := nodeUIDs(body); !slices.Equal(got, tc.wantUIDs) {
				t.Errorf("nodes = %v, want %v", got, tc.wantUIDs)
			}
			if got := edgeCount(body); got != tc.wantEdges {
				t.Errorf("%d edges, want %d:\n%s", got, tc.wantEdges, body)
			}
		})
	}
}

func TestGraphEmpty(t *testing.T) {
	res, body := serve(t, BuildMux(&fakeSource{g: graph.New()}, Options{}), http.MethodGet, GraphPath)
	if res.StatusCode != http.StatusOK {
		t.Fatalf("status %d", res.StatusCode)
	}
	if !strings.HasPrefix(body, "strict digraph full {\n") || !strings.HasSuffix(body, "}\n") || strings.Contains(body, "[") {
		t.Errorf("empty graph = %q", body)
	}
}

type checkingSource struct {
	fakeSource
	checks []Check
}

func (s *checkingSource) Checks() []Check { return s.checks }

func TestReadyzVerbose(t *testing.T) {
	src := &checkingSource{
		fakeSource: fakeSource{g: graph.New()},
		checks: []Check{
			{Name: "monitor:v1/configmaps"},
			{Name: "monitor:example.com/v1/widgets", Err: errors.New("not synced"), Informational: true},
		},
	}
	res, body := serve(t, BuildMux(src, Options{}), http.MethodGet, "/readyz?verbose")
	if res.StatusCode != http.StatusOK {
		t.Fatalf("status %d, want 200: %s", res.StatusCode, body)
	}
	for _, want := range []string{
		"[+]synced ok\n",
		"[+]monitor:v1/configmaps ok\n",
		"[-]monitor:example.com/v1/widgets failed: not synced (informational)\n",
		"readyz check passed\n",
	} {
		if !strings.Contains(body, want) {
			t.Errorf("verbose readyz lacks %q:\n%s", want, body)
		}
	}
	src.ready = errors.New("monitors have not synced")
	res, body = serve(t, BuildMux(src, Options{}), http.MethodGet, "/readyz?verbose")
	if res.StatusCode != http.StatusServiceUnavailable || !strings.Contains(body, "[-]synced failed: monitors have not synced") || !strings.Contains(body, "readyz check failed") {
		t.Errorf("unready verbose readyz: %d\n%s", res.StatusCode, body)
	}
}

func TestOptionalEndpoints(t *testing.T) {
	metrics := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("kgc_up 1\n")) })
	off := BuildMux(&fakeSource{g: graph.New()}, Options{})
	on := BuildMux(&fakeSource{g: graph.New()}, Options{Metrics: metrics, Profiling: true})
	for _, path := range []string{"/metrics", "/debug/pprof/"} {
		if res, _ := serve(t, off, http.MethodGet, path); res.StatusCode != http.StatusNotFound {
			t.Errorf("%s served without being enabled: %d", path, res.StatusCode)
		}
		if res, body := serve(t, on, http.MethodGet, path); res.StatusCode != http.StatusOK {
			t.Errorf("%s not served when enabled: %d %s", path, res.StatusCode, body)
		}
	}
}

// checkGolden compares body, the answer to what, with testdata/name (or
// rewrites the file under -update).
func checkGolden(t *testing.T, name, what, body string) {
	t.Helper()
	golden := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(golden, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if body != string(want) {
		t.Errorf("%s differs from %s (run go test -update if the change is intended):\n--- got\n%s\n--- want\n%s", what, golden, body, want)
	}
}
