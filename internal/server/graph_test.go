package server

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kgc-dev/kgc/internal/graph"
	"github.com/kgc-dev/kgc/internal/graphapi"
	"github.com/kgc-dev/kgc/internal/rules"
)

// richGraph is testGraph plus a second namespace:
//
//	cm-a (other) -> lonely (Namespace, cluster-scoped)
//	dep (other, deleting with a custom finalizer) -> releaser (other, orphan finalizer)
func richGraph(t *testing.T) *graph.Graph {
	g := testGraph(t)
	upsert(t, g, rules.Object{
		Identity:        rules.Identity{APIVersion: "v1", Kind: "ConfigMap", Namespace: "other", Name: "cm-a", UID: "uid-10"},
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Namespace", Name: "lonely", UID: "uid-6"}},
	})
	upsert(t, g, rules.Object{
		Identity:   rules.Identity{APIVersion: "v1", Kind: "Pod", Namespace: "other", Name: "releaser", UID: "uid-11"},
		Finalizers: []string{rules.FinalizerOrphan},
		Deleting:   true,
	})
	upsert(t, g, rules.Object{
		Identity:        rules.Identity{APIVersion: "example.com/v1", Kind: "Widget", Namespace: "other", Name: "dep", UID: "uid-12"},
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: "releaser", UID: "uid-11", BlockOwnerDeletion: boolPtr(true), Controller: boolPtr(true)}},
		Finalizers:      []string{"example.com/hold"},
		Deleting:        true,
	})
	return g
}

func getJSONGraph(t *testing.T, h http.Handler, target string, accept bool) graphapi.Graph {
	t.Helper()
	req := httptest.NewRequest(http.MethodGet, target, nil)
	if accept {
		req.Header.Set("Accept", "application/json")
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != http.StatusOK {
		t.Fatalf("%s: status %d: %s", target, rec.Code, rec.Body)
	}
	if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
		t.Errorf("%s: Content-Type %q", target, ct)
	}
	var g graphapi.Graph
	dec := json.NewDecoder(rec.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&g); err != nil {
		t.Fatalf("%s: %v", target, err)
	}
	return g
}

func uidsOf(g graphapi.Graph) []string {
	var out []string
	for _, n := range g.Nodes {
		out = append(out, string(n.UID))
	}
	return out
}

func TestGraphJSONStatesAndDetails(t *testing.T) {
	mux := BuildMux(&fakeSource{g: richGraph(t)}, Options{})
	g := getJSONGraph(t, mux, GraphPath+"?format=json", false)
	if g.Total != 10 || len(g.Nodes) != 10 || !g.Synced {
		t.Fatalf("total %d, %d nodes, synced %v; want 10, 10, true", g.Total, len(g.Nodes), g.Synced)
	}
	if !slices.IsSortedFunc(g.Nodes, func(a, b graphapi.Node) int { return strings.Compare(string(a.UID), string(b.UID)) }) {
		t.Errorf("nodes not sorted by UID: %v", uidsOf(g))
	}
	want := map[types.UID]string{
		"uid-1": graphapi.StateLive, "uid-2": graphapi.StateWaitingForDependents, "uid-3": graphapi.StateLive,
		"uid-4": graphapi.StateAbsent, "uid-5": graphapi.StateLive, "uid-6": graphapi.StateLive,
		"uid-9": graphapi.StatePlaceholder, "uid-10": graphapi.StateLive, "uid-11": graphapi.StateOrphaning,
		"uid-12": graphapi.StateDeleting,
	}
	byUID := map[types.UID]graphapi.Node{}
	for _, n := range g.Nodes {
		byUID[n.UID] = n
		if w, ok := want[n.UID]; ok && n.State != w {
			t.Errorf("%s (%s): state %q, want %q", n.UID, n.Name, n.State, w)
		}
	}
	rs := byUID["uid-2"]
	if rs.Kind != "ReplicaSet" || rs.APIVersion != "apps/v1" || rs.Namespace != "default" || rs.Name != "web-abc" {
		t.Errorf("uid-2 identity: %+v", rs)
	}
	if !slices.Equal(rs.Finalizers, []string{rules.FinalizerForeground}) {
		t.Errorf("uid-2 finalizers %v", rs.Finalizers)
	}
	if len(rs.OwnerReferences) != 1 || rs.OwnerReferences[0].UID != "uid-1" || !*rs.OwnerReferences[0].BlockOwnerDeletion || !*rs.OwnerReferences[0].Controller {
		t.Errorf("uid-2 owner references %+v", rs.OwnerReferences)
	}
	if !slices.Equal(rs.Dependents, []types.UID{"uid-3"}) {
		t.Errorf("uid-2 dependents %v, want [uid-3]", rs.Dependents)
	}
	if d := byUID["uid-9"].Dependents; !slices.Equal(d, []types.UID{"uid-3"}) {
		t.Errorf("placeholder dependents %v", d)
	}
	if d := byUID["uid-6"].Dependents; !slices.Equal(d, []types.UID{"uid-10"}) {
		t.Errorf("lonely dependents %v", d)
	}
	if p := byUID["uid-3"]; len(p.OwnerReferences) != 3 {
		t.Errorf("pod keeps its references as observed (3, with the duplicate): %+v", p.OwnerReferences)
	}
	// The Accept header selects JSON too.
	if a := getJSONGraph(t, mux, GraphPath, true); len(a.Nodes) != 10 {
		t.Errorf("Accept: application/json served %d nodes", len(a.Nodes))
	}
}

func TestGraphFilters(t *testing.T) {
	tests := []struct {
		query string
		want  []string
	}{
		{"namespace=default", []string{"uid-1", "uid-2", "uid-3", "uid-4", "uid-5", "uid-9"}},
		// other's objects plus the cluster-scoped owner one of them references.
		{"namespace=other", []string{"uid-10", "uid-11", "uid-12", "uid-6"}},
		{"namespace=nothing-here", nil},
		{"kind=Pod&name=web-abc-x&namespace=default", []string{"uid-1", "uid-2", "uid-3", "uid-9"}},
		{"kind=pod&name=web-abc-x&namespace=default&apiVersion=v1", []string{"uid-1", "uid-2", "uid-3", "uid-9"}},
		{"kind=Namespace&name=lonely", []string{"uid-10", "uid-6"}},
		{"kind=Secret&name=gone&namespace=default", []string{"uid-4", "uid-5"}},
		{"kind=Widget&name=dep&namespace=other&apiVersion=example.com/v2", []string{"uid-11", "uid-12"}},
		{"uid=uid-12&uid=uid-4", []string{"uid-11", "uid-12", "uid-4", "uid-5"}},
		{"uid=uid-12&kind=Namespace&name=lonely", []string{"uid-10", "uid-11", "uid-12", "uid-6"}},
	}
	mux := BuildMux(&fakeSource{g: richGraph(t)}, Options{})
	for _, tc := range tests {
		t.Run(tc.query, func(t *testing.T) {
			g := getJSONGraph(t, mux, GraphPath+"?format=json&"+tc.query, false)
			if got := uidsOf(g); !slices.Equal(got, tc.want) {
				t.Errorf("JSON nodes %v, want %v", got, tc.want)
			}
			if g.Total != 10 {
				t.Errorf("total %d, want 10 (the whole graph)", g.Total)
			}
			res, body := serve(t, mux, http.MethodGet, GraphPath+"?"+tc.query)
			if res.StatusCode != http.StatusOK {
				t.Fatalf("DOT status %d: %s", res.StatusCode, body)
			}
			checkDOTSyntax(t, body)
			want := slices.Clone(tc.want)
			slices.Sort(want)
			if got := nodeUIDs(body); !slices.Equal(got, want) {
				t.Errorf("DOT nodes %v, want %v", got, want)
			}
		})
	}
}

func TestGraphBadRequests(t *testing.T) {
	tests := []struct {
		query string
		code  int
		msg   string
	}{
		{"format=yaml", http.StatusBadRequest, "unknown format"},
		{"kind=Pod", http.StatusBadRequest, "kind and name go together"},
		{"name=x&namespace=default", http.StatusBadRequest, "kind and name go together"},
		{"apiVersion=v1", http.StatusBadRequest, "apiVersion selects an object"},
		{"kind=Pod&name=x&apiVersion=a/b/c", http.StatusBadRequest, "bad apiVersion"},
		{"namespace=default&uid=uid-1", http.StatusBadRequest, "one or the other"},
		{"namespace=", http.StatusBadRequest, "namespace needs"},
		{"namespace=a&namespace=b", http.StatusBadRequest, "namespace needs"},
		{"kind=Pod&name=nope&namespace=default", http.StatusNotFound, "not in kgc's graph: Pod default/nope"},
		{"kind=Pod&name=web-abc-x&namespace=other", http.StatusNotFound, "Pod other/web-abc-x"},
		{"kind=Pod&name=web-abc-x&namespace=default&apiVersion=apps/v1", http.StatusNotFound, "Pod.apps/v1 default/web-abc-x"},
		{"format=json&uid=missing", http.StatusNotFound, "uid missing"},
		{"format=json&uid=uid-1&uid=missing", http.StatusNotFound, "uid missing"},
		{"uid=uid-1&kind=Pod&name=nope", http.StatusNotFound, "Pod nope"},
	}
	mux := BuildMux(&fakeSource{g: richGraph(t)}, Options{})
	for _, tc := range tests {
		t.Run(tc.query, func(t *testing.T) {
			res, body := serve(t, mux, http.MethodGet, GraphPath+"?"+tc.query)
			if res.StatusCode != tc.code || !strings.Contains(body, tc.msg) {
				t.Errorf("got %d %q, want %d containing %q", res.StatusCode, body, tc.code, tc.msg)
			}
		})
	}
	// Upstream's DOT ?uid= ignores unknown objects.
	res, body := serve(t, mux, http.MethodGet, GraphPath+"?uid=missing")
	if res.StatusCode != http.StatusOK || nodeUIDs(body) != nil {
		t.Errorf("DOT ?uid=missing = %d %q, want an empty graph", res.StatusCode, body)
	}
	res, body = serve(t, mux, http.MethodGet, GraphPath+"?uid=missing&uid=uid-6")
	if got := nodeUIDs(body); res.StatusCode != http.StatusOK || !slices.Equal(got, []string{"uid-10", "uid-6"}) {
		t.Errorf("DOT ?uid=missing&uid=uid-6 = %d %v, want uid-6's component", res.StatusCode, got)
	}
}

func TestGraphJSONNotSynced(t *testing.T) {
	src := &fakeSource{g: richGraph(t), ready: http.ErrServerClosed}
	if g := getJSONGraph(t, BuildMux(src, Options{}), GraphPath+"?format=json", false); g.Synced {
		t.Errorf("synced = true before the source is ready")
	}
}

// bigSource is a 100k-node graph: 20k owners with four dependents each
// across ten namespaces.
func bigSource(b *testing.B) *fakeSource {
	g := graph.New()
	yes := true
	for i := 0; i < 20_000; i++ {
		ns := "ns-" + strconv.Itoa(i%10)
		owner := rules.Identity{APIVersion: "apps/v1", Kind: "ReplicaSet", Namespace: ns, Name: "rs-" + strconv.Itoa(i), UID: types.UID(fmt.Sprintf("owner-%07d", i))}
		g.Apply(graph.Event{Type: graph.Upsert, Object: rules.Object{Identity: owner}})
		for j := 0; j < 4; j++ {
			k := i*4 + j
			g.Apply(graph.Event{Type: graph.Upsert, Object: rules.Object{
				Identity:        rules.Identity{APIVersion: "v1", Kind: "Pod", Namespace: ns, Name: "pod-" + strconv.Itoa(k), UID: types.UID(fmt.Sprintf("dep-%07d", k))},
				OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: owner.Name, UID: owner.UID, Controller: &yes, BlockOwnerDeletion: &yes}},
				Finalizers:      []string{"example.com/keep"},
			}})
		}
	}
	if g.Len() != 100_000 {
		b.Fatalf("%d nodes", g.Len())
	}
	return &fakeSource{g: g}
}

func benchmarkGraphEndpoint(b *testing.B, query string) {
	mux := BuildMux(bigSource(b), Options{})
	req := httptest.NewRequest(http.MethodGet, GraphPath+query, nil)
	b.ReportAllocs()
	var size int
	for b.Loop() {
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, req)
		if rec.Code != http.StatusOK {
			b.Fatalf("status %d", rec.Code)
		}
		size = rec.Body.Len()
	}
	b.ReportMetric(float64(size)/(1<<20), "MiB/doc")
}

// The whole 100k-node graph as DOT and as JSON, through the handler.
func BenchmarkGraphDOT100k(b *testing.B)  { benchmarkGraphEndpoint(b, "") }
func BenchmarkGraphJSON100k(b *testing.B) { benchmarkGraphEndpoint(b, "?format=json") }

// One namespace (a tenth of the graph) of 100k nodes.
func BenchmarkGraphJSONNamespace100k(b *testing.B) {
	benchmarkGraphEndpoint(b, "?format=json&namespace=ns-3")
}

// One object's component in a 100k-node graph (found by a scan).
func BenchmarkGraphJSONObject100k(b *testing.B) {
	benchmarkGraphEndpoint(b, "?format=json&kind=Pod&name=pod-4242&namespace=ns-0")
}

// TestGraphGoldenRich pins the wire formats byte for byte for a graph with
// every node state: finalizers (foreground, orphan, custom), a placeholder,
// an absent owner and a cluster-scoped owner. graphapi is read by
// `kgc explain --server` and the web view, and the DOT form by upstream's
// tools, so the same graph must always serve the same documents.
func TestGraphGoldenRich(t *testing.T) {
	mux := BuildMux(&fakeSource{g: richGraph(t)}, Options{})
	for _, tc := range []struct{ query, golden string }{
		{"", "rich.dot.golden"},
		{"?format=json", "rich.json.golden"},
		{"?format=json&namespace=other", "rich-other.json.golden"},
		{"?format=json&uid=uid-3", "rich-uid3.json.golden"},
	} {
		t.Run(tc.golden, func(t *testing.T) {
			res, body := serve(t, mux, http.MethodGet, GraphPath+tc.query)
			if res.StatusCode != http.StatusOK {
				t.Fatalf("status %d: %s", res.StatusCode, body)
			}
			checkGolden(t, tc.golden, tc.query, body)
		})
	}
}
