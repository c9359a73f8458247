package inspect

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kgc-dev/kgc/internal/graphapi"
	"github.com/kgc-dev/kgc/internal/rules"
)

// fakeKGC serves a graph like kgc's JSON graph endpoint: ?uid= returns the
// connected component (here: the whole graph), ?name= filters by name.
type fakeKGC struct {
	mu      sync.Mutex
	g       graphapi.Graph
	queries []string
}

func (f *fakeKGC) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.queries = append(f.queries, r.URL.RawQuery)
	if r.URL.Path != GraphPath || r.URL.Query().Get("format") != "json" {
		http.NotFound(w, r)
		return
	}
	g := f.g
	if name := r.URL.Query().Get("name"); name != "" {
		g.Nodes = nil
		for _, n := range f.g.Nodes {
			if n.Name == name {
				g.Nodes = append(g.Nodes, n)
			}
		}
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(g)
}

func node(apiVersion, kind, ns, name, state string, fins []string, refs ...metav1.OwnerReference) graphapi.Node {
	return graphapi.Node{UID: types.UID("uid-" + name), APIVersion: apiVersion, Kind: kind, Namespace: ns, Name: name, State: state, Finalizers: fins, OwnerReferences: refs}
}

func oref(apiVersion, kind, name string, block bool) metav1.OwnerReference {
	return metav1.OwnerReference{APIVersion: apiVersion, Kind: kind, Name: name, UID: types.UID("uid-" + name), BlockOwnerDeletion: &block}
}

// withDependents fills Dependents from the nodes' references.
func withDependents(nodes ...graphapi.Node) graphapi.Graph {
	idx := map[types.UID]int{}
	for i, n := range nodes {
		idx[n.UID] = i
	}
	for _, n := range nodes {
		for _, r := range n.OwnerReferences {
			if i, ok := idx[r.UID]; ok {
				nodes[i].Dependents = append(nodes[i].Dependents, n.UID)
			}
		}
	}
	return graphapi.Graph{Nodes: nodes, Total: len(nodes), Synced: true}
}

func stuckGraph() graphapi.Graph {
	return withDependents(
		node("apps/v1", "Deployment", "a", "web", graphapi.StateWaitingForDependents, []string{"foregroundDeletion"}),
		node("apps/v1", "ReplicaSet", "a", "web-1", graphapi.StateDeleting, []string{"example.com/keep"}, oref("apps/v1", "Deployment", "web", true)),
		node("v1", "Pod", "a", "solo", graphapi.StateLive, nil,
			oref("apps/v1", "Deployment", "web", true), oref("apps/v1", "ReplicaSet", "ghost", false), oref("v1", "ConfigMap", "never", false),
			oref("v1", "ConfigMap", "other-ns", false), oref("v1", "Namespace", "a", false)),
		node("v1", "ConfigMap", "b", "other-ns", graphapi.StateLive, nil),
		node("apps/v1", "ReplicaSet", "a", "ghost", graphapi.StateAbsent, nil),
		node("v1", "ConfigMap", "a", "never", graphapi.StatePlaceholder, nil),
		node("v1", "Namespace", "", "a", graphapi.StateLive, nil),
		node("rbac.authorization.k8s.io/v1", "ClusterRole", "", "cr", graphapi.StateLive, nil, oref("apps/v1", "ReplicaSet", "web-1", false)),
	)
}

func TestServerViewClassification(t *testing.T) {
	f := &fakeKGC{g: stuckGraph()}
	srv := httptest.NewServer(f)
	defer srv.Close()
	v, err := NewServerView(srv.URL, srv.Client())
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	pod, err := v.Lookup(ctx, "pods", "a", "solo")
	if err != nil {
		t.Fatal(err)
	}
	want := []rules.OwnerState{rules.Waiting, rules.Dangling, rules.Dangling, rules.Dangling, rules.Solid}
	for i, ref := range pod.OwnerReferences {
		r, err := v.ResolveOwner(ctx, pod, ref)
		if err != nil {
			t.Fatal(err)
		}
		if r.State != want[i] {
			t.Errorf("%s: %s, want %s (%s)", ref.Name, r.State, want[i], r.Reason)
		}
		if ref.Name == "other-ns" && (r.ElsewhereNamespace != "b" || !strings.Contains(r.Reason, "OwnerRefInvalidNamespace")) {
			t.Errorf("other-ns: %+v", r)
		}
		if ref.Name == "never" && !strings.Contains(r.Reason, "placeholder") {
			t.Errorf("never: %+v", r)
		}
	}
	cr, err := v.Lookup(ctx, "ClusterRole.rbac.authorization.k8s.io", "ignored", "cr")
	if err != nil {
		t.Fatal(err)
	}
	if r, _ := v.ResolveOwner(ctx, cr, cr.OwnerReferences[0]); r.State != rules.Invalid {
		t.Errorf("cluster-scoped dependent of a namespaced owner: %+v", r)
	}
	for _, kind := range []string{"deployment", "Deployment", "deployments", "deployments.apps", "deployments.v1.apps"} {
		if _, err := v.Lookup(ctx, kind, "a", "web"); err != nil {
			t.Errorf("%s: %v", kind, err)
		}
	}
	if _, err := v.Lookup(ctx, "deployments.batch", "a", "web"); !errors.Is(err, ErrNotFound) {
		t.Errorf("wrong group: %v", err)
	}
}

func TestServerViewExplainStuck(t *testing.T) {
	srv := httptest.NewServer(&fakeKGC{g: stuckGraph()})
	defer srv.Close()
	v, _ := NewServerView(srv.URL, srv.Client())
	ctx := context.Background()
	d, err := v.Lookup(ctx, "deployment", "a", "web")
	if err != nil {
		t.Fatal(err)
	}
	e, err := Explain(ctx, rules.Policy{}, v, d)
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	_ = WriteExplanation(&b, e)
	for _, want := range []string{"wait-for-dependents", "ReplicaSet.apps/web-1 -n a", "example.com/keep", "whoever owns it must", "Pod/solo"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, b.String())
		}
	}
	tr, err := BuildTree(ctx, v, d)
	if err != nil {
		t.Fatal(err)
	}
	var tb bytes.Buffer
	if err := WriteTree(&tb, tr); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(tb.String()), "\n")
	if len(lines) != 5 {
		t.Fatalf("tree:\n%s", tb.String())
	}
	for i, want := range []string{"NAMESPACE", "DELETING WAITING(foreground) FINALIZERS=foregroundDeletion", "├─Pod/solo", "└─ReplicaSet.apps/web-1", "└─ClusterRole.rbac.authorization.k8s.io/cr"} {
		if !strings.Contains(lines[i], want) {
			t.Errorf("line %d = %q, want %q", i, lines[i], want)
		}
	}
	if !strings.Contains(lines[3], "DELETING FINALIZERS=example.com/keep") || !strings.Contains(lines[3], "dependent,blocking") {
		t.Errorf("line 3 = %q", lines[3])
	}
}

func TestServerViewNotJSON(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/vnd.graphviz")
		_, _ = w.Write([]byte("digraph full {}"))
	}))
	defer srv.Close()
	v, _ := NewServerView(srv.URL, srv.Client())
	if _, err := v.Lookup(context.Background(), "pod", "a", "x"); !errors.Is(err, ErrNoJSONGraph) {
		t.Errorf("want ErrNoJSONGraph, got %v", err)
	}
	if _, err := NewServerView("localhost:1", nil); err == nil {
		t.Error("want an error for a URL without a scheme")
	}
}

// A graph endpoint that answers JSON which does not decode (a truncated or
// broken answer) is a fault, not an older kgc without the JSON form:
// its error is ErrBadJSONGraph, not ErrNoJSONGraph, which callers take
// as "this kgc cannot answer" and skip or fall back on.
func TestServerViewBrokenJSON(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"synced":true,"nodes":[{"uid":`))
	}))
	defer srv.Close()
	v, _ := NewServerView(srv.URL, srv.Client())
	_, err := v.Lookup(context.Background(), "pod", "a", "x")
	if !errors.Is(err, ErrBadJSONGraph) || errors.Is(err, ErrNoJSONGraph) {
		t.Errorf("Lookup on a broken JSON graph: %v, want ErrBadJSONGraph and not ErrNoJSONGraph", err)
	}
}

func TestTreeOwnersAboveAndJSON(t *testing.T) {
	c := newCluster(t)
	ns := c.add(nsR, "", "a")
	d := c.add(deployR, "a", "d", owned(ns, false))
	rs := c.add(rsR, "a", "rs", owned(d, true), ref("apps/v1", "Deployment", "gone", "uid-gone"), ref("example.com/v1", "Widget", "w", "uid-w"))
	c.add(podR, "a", "p1", owned(rs, true), deleting(), finalizers("example.com/keep"))
	c.add(podR, "a", "p2", owned(rs, false))
	v := c.view()
	tr, err := BuildTree(context.Background(), v, rs)
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := WriteTree(&b, tr); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	wants := []string{
		"NAMESPACE  NAME",
		"-            ↑ Namespace/a",
		"a          ↑ Deployment.apps/d",
		"a          ↑ Deployment.apps/gone",
		"-          ↑ Widget.example.com/w",
		"a          ReplicaSet.apps/rs",
		"a          ├─Pod/p1",
		"a          └─Pod/p2",
	}
	if len(lines) != len(wants) {
		t.Fatalf("tree:\n%s", b.String())
	}
	for i, w := range wants {
		if !strings.HasPrefix(lines[i], w) {
			t.Errorf("line %d = %q, want prefix %q\n%s", i, lines[i], w, b.String())
		}
	}
	for i, w := range map[int]string{1: "LIVE", 2: "solid,blocking", 3: "DANGLING", 4: "UNRESOLVABLE", 6: "DELETING FINALIZERS=example.com/keep"} {
		if !strings.Contains(lines[i], w) {
			t.Errorf("line %d = %q lacks %q", i, lines[i], w)
		}
	}
	js, err := json.Marshal(tr)
	if err != nil {
		t.Fatal(err)
	}
	var back TreeNode
	if err := json.Unmarshal(js, &back); err != nil {
		t.Fatal(err)
	}
	if back.Object.Name != "rs" || len(back.Owners) != 3 || back.Owners[0].Owners[0].Object.Kind != "Namespace" || len(back.Dependents) != 2 || back.Owners[1].Ref != "dangling" {
		t.Errorf("json: %s", js)
	}
}

// TestServerViewFilterRejected: a kgc that rejects the kind filter still
// answers from its whole graph.
func TestServerViewFilterRejected(t *testing.T) {
	f := &fakeKGC{g: stuckGraph()}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Has("kind") {
			http.Error(w, "unknown kind", http.StatusBadRequest)
			return
		}
		f.ServeHTTP(w, r)
	}))
	defer srv.Close()
	v, _ := NewServerView(srv.URL, srv.Client())
	o, err := v.Lookup(context.Background(), "deployment", "a", "web")
	if err != nil || o.UID != "uid-web" || !o.DeletingDependents() {
		t.Errorf("lookup: %+v, %v", o, err)
	}
}

// Without a cluster to ask, --server still understands kubectl's spellings
// of built-in kinds: kind, plural, short name, with a group.
func TestServerViewKindSpellings(t *testing.T) {
	srv := httptest.NewServer(&fakeKGC{g: stuckGraph()})
	defer srv.Close()
	v, _ := NewServerView(srv.URL, srv.Client())
	ctx := context.Background()
	for _, spelling := range []string{"deployment", "Deployment", "deployments", "deploy", "deployments.apps", "deployments.v1.apps"} {
		d, err := v.Lookup(ctx, spelling, "a", "web")
		if err != nil {
			t.Errorf("%s/web: %v", spelling, err)
			continue
		}
		if d.Kind != "Deployment" {
			t.Errorf("%s/web found a %s", spelling, d.Kind)
		}
	}
	if _, err := v.Lookup(ctx, "rs", "a", "web"); err == nil {
		t.Error("rs/web found an object; only a Deployment is called web")
	}
	if _, err := v.Lookup(ctx, "deploy.batch", "a", "web"); err == nil {
		t.Error("deploy.batch/web found the apps Deployment")
	}
}
