package server

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kgc-dev/kgc/internal/graph"
	"github.com/kgc-dev/kgc/internal/graphapi"
	"github.com/kgc-dev/kgc/internal/inspect"
	"github.com/kgc-dev/kgc/internal/rules"
)

// unlistedSource is a source with resources never listed.
type unlistedSource struct {
	fakeSource
	unlisted []graphapi.Resource
}

func (s *unlistedSource) Unlisted() []graphapi.Resource { return s.unlisted }

func stuckMapper() meta.RESTMapper {
	m := meta.NewDefaultRESTMapper(nil)
	m.Add(schema.GroupVersionKind{Version: "v1", Kind: "ConfigMap"}, meta.RESTScopeNamespace)
	m.Add(schema.GroupVersionKind{Group: "rbac.authorization.k8s.io", Version: "v1", Kind: "ClusterRole"}, meta.RESTScopeRoot)
	return m
}

type stuckGraph struct {
	t *testing.T
	g *graph.Graph
}

func (s *stuckGraph) add(kind, ns, name string, deletedAgo time.Duration, finalizers []string, refs ...metav1.OwnerReference) rules.Object {
	s.t.Helper()
	apiVersion := "v1"
	if kind == "ClusterRole" {
		apiVersion = "rbac.authorization.k8s.io/v1"
	}
	o := rules.Object{
		Identity:        rules.Identity{APIVersion: apiVersion, Kind: kind, Namespace: ns, Name: name, UID: types.UID("uid-" + name)},
		ResourceVersion: "1", Finalizers: finalizers, OwnerReferences: refs,
	}
	if deletedAgo > 0 {
		o.Deleting = true
		o.DeletionTimestamp = &metav1.Time{Time: time.Now().Add(-deletedAgo)}
	}
	upsert(s.t, s.g, o)
	return o
}

func blockingRef(o rules.Object) metav1.OwnerReference {
	return metav1.OwnerReference{APIVersion: o.Identity.APIVersion, Kind: o.Identity.Kind, Name: o.Identity.Name, UID: o.Identity.UID, BlockOwnerDeletion: boolPtr(true)}
}

// The stuck report read from kgc's own graph (in-process, and over HTTP
// the way `kgc stuck --server` reads it) finds each root cause.
func TestStuckReportFromGraph(t *testing.T) {
	s := &stuckGraph{t: t, g: graph.New()}
	fg := []string{rules.FinalizerForeground}
	old := 10 * time.Minute
	s.add("ConfigMap", "a", "fin", old, []string{"example.com/keep"})
	owner := s.add("ConfigMap", "a", "fg-owner", old, fg)
	s.add("ConfigMap", "a", "fg-held", old, []string{"example.com/keep"}, blockingRef(owner))
	unk := s.add("ConfigMap", "a", "unk-owner", old, fg)
	s.add("ConfigMap", "a", "unk-dep", 0, nil, blockingRef(unk),
		metav1.OwnerReference{APIVersion: "nothing.example.com/v1", Kind: "Nothing", Name: "x", UID: "uid-nothing"})
	inv := s.add("ConfigMap", "a", "inv-owner", old, fg)
	s.add("ClusterRole", "", "inv-dep", 0, nil, blockingRef(inv))
	s.add("ConfigMap", "b", "held-for-unlisted", old, fg)
	s.add("ConfigMap", "a", "recent", time.Second, []string{"example.com/keep"})
	for range 50 { // unrelated objects the report must not need
		s.add("ConfigMap", "c", fmt.Sprintf("bystander-%d", s.g.Len()), 0, nil)
	}
	src := &unlistedSource{fakeSource: fakeSource{g: s.g}, unlisted: []graphapi.Resource{{Resource: "example.com/v1/widgets", Namespaced: true, Error: "conversion webhook failed"}}}
	want := map[string]string{
		"fin": inspect.StuckFinalizer, "fg-held": inspect.StuckFinalizer,
		"fg-owner":  inspect.StuckDependentFinalizer,
		"unk-owner": inspect.StuckUnresolvableOwner,
		"inv-owner": inspect.StuckInvalidReference,
		// Every namespaced Foreground owner waits for the unlisted
		// namespaced resource.
		"held-for-unlisted": inspect.StuckUnlisted,
	}
	check := func(name string, r *inspect.StuckReport) {
		t.Helper()
		got := map[string]string{}
		for _, g := range r.Groups {
			for _, o := range g.Objects {
				got[o.Object.Name] = g.Reason
				if o.AgeSeconds < 599 {
					t.Errorf("%s: %s: age %ds", name, o.Object.Name, o.AgeSeconds)
				}
			}
		}
		for k, w := range want {
			if got[k] != w {
				t.Errorf("%s: %s is %q, want %q", name, k, got[k], w)
			}
		}
		for k := range got {
			if _, ok := want[k]; !ok {
				t.Errorf("%s: %s reported stuck (%s)", name, k, got[k])
			}
		}
		if len(r.Unlisted) != 1 {
			t.Errorf("%s: unlisted %v", name, r.Unlisted)
		}
	}
	r, err := StuckReport(context.Background(), src, stuckMapper(), rules.Policy{}, 5*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	check("in-process", r)

	// Over HTTP, as `kgc stuck --server` reads it: one graph request.
	var requests int
	mux := BuildMux(src, Options{})
	srv := httptest.NewServer(countRequests(mux, &requests))
	defer srv.Close()
	v, err := inspect.NewServerView(srv.URL, srv.Client())
	if err != nil {
		t.Fatal(err)
	}
	v.Mapper = stuckMapper()
	r, err = inspect.Stuck(context.Background(), rules.Policy{}, v, inspect.StuckOptions{OlderThan: 5 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	check("over HTTP", r)
	if requests != 1 {
		t.Errorf("%d requests, want 1 (the stuck objects' components at once)", requests)
	}

	// The filter selects the stuck objects' components only.
	g := getJSONGraph(t, mux, "/debug/controllers/garbage-collector-controller/graph?format=json&deletingFor=5m", false)
	var names []string
	for _, n := range g.Nodes {
		names = append(names, n.Name)
		if n.Name == "fin" && n.DeletionTimestamp == nil {
			t.Errorf("node fin has no deletionTimestamp")
		}
	}
	for _, n := range names {
		if n == "recent" || slices.Contains([]string{"bystander-0"}, n) {
			t.Errorf("?deletingFor=5m selected %s", n)
		}
	}
	if !slices.Contains(names, "unk-dep") || !slices.Contains(names, "inv-dep") {
		t.Errorf("?deletingFor=5m lacks the blocking dependents: %v", names)
	}
	if len(g.Unlisted) != 1 || g.Unlisted[0].Resource != "example.com/v1/widgets" {
		t.Errorf("graph JSON unlisted = %v", g.Unlisted)
	}
	for _, bad := range []string{"deletingFor=x", "deletingFor=-1m", "deletingFor=1m&namespace=a"} {
		res, _ := serve(t, mux, "GET", "/debug/controllers/garbage-collector-controller/graph?format=json&"+bad)
		if res.StatusCode != 400 {
			t.Errorf("?%s: status %d, want 400", bad, res.StatusCode)
		}
	}
}

func countRequests(h http.Handler, n *int) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		*n++
		h.ServeHTTP(w, r)
	})
}

// BenchmarkStuckReport is one scrape of the stuck metrics on graphs of
// 10k and 100k objects of which 100 are stuck deletions (50 Foreground
// owners, each waiting for a dependent held by a finalizer, among 9
// dependents) and 1,000 more are deleting, not for long. Its cost follows
// the stuck objects and their components, not the graph's size.
func BenchmarkStuckReport(b *testing.B) {
	for _, size := range []int{10_000, 100_000} {
		b.Run(fmt.Sprintf("nodes=%d", size), func(b *testing.B) { benchmarkStuckReport(b, size) })
	}
}

func benchmarkStuckReport(b *testing.B, size int) {
	g := graph.New()
	now := time.Now()
	apply := func(o rules.Object) { g.Apply(graph.Event{Type: graph.Upsert, Object: o}) }
	cm := func(ns, name string) rules.Object {
		return rules.Object{Identity: rules.Identity{APIVersion: "v1", Kind: "ConfigMap", Namespace: ns, Name: name, UID: types.UID(fmt.Sprintf("%08d-0000-0000-0000-000000000000", g.Len()))}, ResourceVersion: "1"}
	}
	for i := 0; g.Len() < size; i++ {
		ns := fmt.Sprintf("ns-%d", i%100)
		owner := cm(ns, fmt.Sprintf("owner-%d", i))
		switch {
		case i < 50: // a Foreground owner held by its dependent's finalizer
			owner.Deleting, owner.Finalizers = true, []string{rules.FinalizerForeground}
			owner.DeletionTimestamp = &metav1.Time{Time: now.Add(-time.Hour)}
		case i < 550: // deleting for a second: not stuck
			owner.Deleting, owner.Finalizers = true, []string{"example.com/f"}
			owner.DeletionTimestamp = &metav1.Time{Time: now.Add(-time.Second)}
		}
		apply(owner)
		for j := range 9 {
			d := cm(ns, fmt.Sprintf("dep-%d-%d", i, j))
			d.OwnerReferences = []metav1.OwnerReference{blockingRef(owner)}
			if i < 50 && j == 0 {
				d.Deleting, d.Finalizers = true, []string{"example.com/keep"}
				d.DeletionTimestamp = &metav1.Time{Time: now.Add(-time.Hour)}
			}
			if i >= 50 && i < 550 && j == 0 {
				d.Deleting, d.Finalizers = true, []string{"example.com/f"}
				d.DeletionTimestamp = &metav1.Time{Time: now.Add(-time.Second)}
			}
			apply(d)
		}
	}
	src := &fakeSource{g: g}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		r, err := StuckReport(context.Background(), src, stuckMapper(), rules.Policy{}, 5*time.Minute)
		if err != nil || r.Total != 100 {
			b.Fatalf("%v, %d stuck, want 100", err, r.Total)
		}
	}
}

// BenchmarkGraphCounts is the full walk kgc_graph_nodes does at every
// scrape, on the same size of graph, for comparison.
func BenchmarkGraphCounts(b *testing.B) {
	g := graph.New()
	for i := range 100_000 {
		g.Apply(graph.Event{Type: graph.Upsert, Object: rules.Object{Identity: rules.Identity{APIVersion: "v1", Kind: "ConfigMap", Namespace: "a", Name: fmt.Sprint(i), UID: types.UID(fmt.Sprintf("%08d-0000-0000-0000-000000000000", i))}}})
	}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		_ = g.Counts()
	}
}
