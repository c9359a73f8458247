package builder

import (
	"testing"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kgc-dev/kgc/internal/discovery"
	"github.com/kgc-dev/kgc/internal/graph"
	"github.com/kgc-dev/kgc/internal/rules"
)

func TestRediscovererExpectations(t *testing.T) {
	crd := func(typ graph.EventType, name string, deleting bool) graph.Event {
		return graph.Event{Type: typ, Object: rules.Object{Identity: rules.Identity{
			APIVersion: "apiextensions.k8s.io/v1", Kind: "CustomResourceDefinition", Name: name, UID: types.UID("uid-" + name),
		}, Deleting: deleting}}
	}
	apiService := func(typ graph.EventType, name string) graph.Event {
		return graph.Event{Type: typ, Object: rules.Object{Identity: rules.Identity{
			APIVersion: "apiregistration.k8s.io/v1", Kind: "APIService", Name: name,
		}}}
	}
	widgets := schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "widgets"}
	want := func(gvrs ...schema.GroupVersionResource) map[schema.GroupVersionResource]discovery.Resource {
		m := map[schema.GroupVersionResource]discovery.Resource{}
		for _, g := range gvrs {
			m[g] = discovery.Resource{GVR: g}
		}
		return m
	}
	kicked := func(r *rediscoverer) bool {
		select {
		case <-r.kick:
			return true
		default:
			return false
		}
	}

	r := newRediscoverer()
	r.observe(graph.Event{Object: rules.Object{Identity: rules.Identity{APIVersion: "v1", Kind: "ConfigMap", Name: "x"}}})
	if kicked(r) || r.settle(want(), nil, nil) {
		t.Fatal("a ConfigMap event triggered rediscovery")
	}

	// A new CRD: pending until discovery serves its resource.
	r.observe(crd(graph.Upsert, "widgets.example.com", false))
	if !kicked(r) {
		t.Error("CRD event did not trigger rediscovery")
	}
	if !r.settle(want(), nil, nil) {
		t.Error("expectation met before discovery served widgets")
	}
	if r.settle(want(widgets), nil, nil) {
		t.Error("expectation still pending once discovery served widgets")
	}
	// First sight: nothing to restart. A later change marks the group.
	if g := r.changedGroups(); g["example.com"] {
		t.Errorf("changed groups %v include example.com after its first sight", g)
	}
	r.observe(crd(graph.Upsert, "widgets.example.com", false))
	if g := r.changedGroups(); !g["example.com"] {
		t.Errorf("changed groups %v lack example.com after an update", g)
	}

	// A deleted CRD: pending until discovery drops it.
	r.observe(crd(graph.Delete, "widgets.example.com", false))
	if !r.settle(want(widgets), nil, nil) || r.settle(want(), nil, nil) {
		t.Error("delete expectation not met exactly when widgets vanished")
	}
	// Terminating: a rediscovery, no expectation.
	r.observe(crd(graph.Upsert, "widgets.example.com", true))
	if !kicked(r) || r.settle(want(widgets), nil, nil) {
		t.Error("terminating CRD: want a kick and no expectation")
	}
	// Ignored resources are never expected.
	r.observe(crd(graph.Upsert, "widgets.example.com", false))
	if r.settle(want(), nil, map[schema.GroupResource]struct{}{widgets.GroupResource(): {}}) {
		t.Error("expectation kept for an ignored resource")
	}

	// An APIService is met when its group version is served or failing.
	r.observe(apiService(graph.Upsert, "v1beta1.broken.example.com"))
	if !r.settle(want(widgets), nil, nil) {
		t.Error("APIService expectation met without its group version")
	}
	if r.settle(want(), map[schema.GroupVersion]error{{Group: "broken.example.com", Version: "v1beta1"}: nil}, nil) {
		t.Error("APIService expectation pending although discovery reports its group version (as failed)")
	}
}
