package discovery

import (
	"errors"
	"maps"
	"reflect"
	"slices"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
)

type fakeDiscovery struct {
	lists []*metav1.APIResourceList
	err   error
}

func (f fakeDiscovery) ServerPreferredResources() ([]*metav1.APIResourceList, error) {
	return f.lists, f.err
}

var full = metav1.Verbs{"create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"}

func lists() []*metav1.APIResourceList {
	return []*metav1.APIResourceList{
		{GroupVersion: "v1", APIResources: []metav1.APIResource{
			{Name: "pods", Kind: "Pod", Namespaced: true, Verbs: full},
			{Name: "pods/status", Kind: "Pod", Namespaced: true, Verbs: metav1.Verbs{"get", "patch", "update"}},
			{Name: "pods/eviction", Kind: "Eviction", Namespaced: true, Verbs: metav1.Verbs{"create", "delete", "list", "watch"}},
			{Name: "namespaces", Kind: "Namespace", Verbs: full},
			{Name: "events", Kind: "Event", Namespaced: true, Verbs: full},
			{Name: "bindings", Kind: "Binding", Namespaced: true, Verbs: metav1.Verbs{"create"}},
			{Name: "componentstatuses", Kind: "ComponentStatus", Verbs: metav1.Verbs{"get", "list"}},
			{Name: "nodelete", Kind: "NoDelete", Verbs: metav1.Verbs{"list", "watch"}},
			{Name: "nowatch", Kind: "NoWatch", Verbs: metav1.Verbs{"list", "delete"}},
			{Name: "nolist", Kind: "NoList", Verbs: metav1.Verbs{"watch", "delete"}},
		}},
		{GroupVersion: "apps/v1", APIResources: []metav1.APIResource{
			{Name: "deployments", Kind: "Deployment", Namespaced: true, Verbs: full},
			{Name: "deployments/scale", Kind: "Scale", Group: "autoscaling", Version: "v1", Namespaced: true, Verbs: metav1.Verbs{"get", "patch", "update"}},
		}},
		{GroupVersion: "events.k8s.io/v1", APIResources: []metav1.APIResource{
			{Name: "events", Kind: "Event", Namespaced: true, Verbs: full},
		}},
		nil, // discovery may hand back holes
		{GroupVersion: "not/a/groupversion", APIResources: []metav1.APIResource{
			{Name: "broken", Kind: "Broken", Verbs: full},
		}},
	}
}

func gvr(group, version, resource string) schema.GroupVersionResource {
	return schema.GroupVersionResource{Group: group, Version: version, Resource: resource}
}

func ignoredSet(grs ...schema.GroupResource) map[schema.GroupResource]struct{} {
	m := map[schema.GroupResource]struct{}{}
	for _, gr := range grs {
		m[gr] = struct{}{}
	}
	return m
}

func sortedKeys(m map[schema.GroupVersionResource]Resource) []string {
	var out []string
	for k := range maps.Keys(m) {
		out = append(out, k.String())
	}
	slices.Sort(out)
	return out
}

func TestDeletable(t *testing.T) {
	tests := []struct {
		name    string
		ignored map[schema.GroupResource]struct{}
		want    []schema.GroupVersionResource
	}{
		{
			name:    "default ignores",
			ignored: ignoredSet(DefaultIgnored()...),
			want:    []schema.GroupVersionResource{gvr("", "v1", "pods"), gvr("", "v1", "namespaces"), gvr("apps", "v1", "deployments")},
		},
		{
			name: "nothing ignored",
			want: []schema.GroupVersionResource{
				gvr("", "v1", "pods"), gvr("", "v1", "namespaces"), gvr("", "v1", "events"),
				gvr("apps", "v1", "deployments"), gvr("events.k8s.io", "v1", "events"),
			},
		},
		{
			name:    "ignoring core events keeps events.k8s.io events",
			ignored: ignoredSet(schema.GroupResource{Resource: "events"}, schema.GroupResource{Group: "apps", Resource: "deployments"}),
			want:    []schema.GroupVersionResource{gvr("", "v1", "pods"), gvr("", "v1", "namespaces"), gvr("events.k8s.io", "v1", "events")},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, failed, err := Deletable(fakeDiscovery{lists: lists()}, tc.ignored)
			if err != nil || failed != nil {
				t.Fatalf("Deletable: failed=%v err=%v", failed, err)
			}
			want := map[schema.GroupVersionResource]Resource{}
			for _, g := range tc.want {
				want[g] = Resource{}
			}
			if !slices.Equal(sortedKeys(got), sortedKeys(want)) {
				t.Errorf("resources = %v, want %v", sortedKeys(got), sortedKeys(want))
			}
		})
	}
	got, _, _ := Deletable(fakeDiscovery{lists: lists()}, nil)
	for g, want := range map[schema.GroupVersionResource]Resource{
		gvr("", "v1", "pods"):                {GVR: gvr("", "v1", "pods"), Kind: "Pod", Namespaced: true},
		gvr("", "v1", "namespaces"):          {GVR: gvr("", "v1", "namespaces"), Kind: "Namespace", Namespaced: false},
		gvr("apps", "v1", "deployments"):     {GVR: gvr("apps", "v1", "deployments"), Kind: "Deployment", Namespaced: true},
		gvr("events.k8s.io", "v1", "events"): {GVR: gvr("events.k8s.io", "v1", "events"), Kind: "Event", Namespaced: true},
	} {
		if got[g] != want {
			t.Errorf("resource %s = %+v, want %+v", g, got[g], want)
		}
	}
}

func TestDeletablePartialFailure(t *testing.T) {
	metrics := schema.GroupVersion{Group: "metrics.k8s.io", Version: "v1beta1"}
	cause := errors.New("the server is currently unable to handle the request")
	d := fakeDiscovery{
		lists: lists(),
		err:   &discovery.ErrGroupDiscoveryFailed{Groups: map[schema.GroupVersion]error{metrics: cause}},
	}
	got, failed, err := Deletable(d, ignoredSet(DefaultIgnored()...))
	if err == nil {
		t.Fatal("partial failure reported no error")
	}
	var gdf *discovery.ErrGroupDiscoveryFailed
	if !errors.As(err, &gdf) {
		t.Errorf("error %v is not an ErrGroupDiscoveryFailed", err)
	}
	if !reflect.DeepEqual(failed, map[schema.GroupVersion]error{metrics: cause}) {
		t.Errorf("failed = %v", failed)
	}
	if want := []string{"/v1, Resource=namespaces", "/v1, Resource=pods", "apps/v1, Resource=deployments"}; !slices.Equal(sortedKeys(got), want) {
		t.Errorf("resources = %v, want %v (what was found despite the failure)", sortedKeys(got), want)
	}
}

func TestDeletableTotalFailure(t *testing.T) {
	cause := errors.New("connection refused")
	got, failed, err := Deletable(fakeDiscovery{lists: lists(), err: cause}, nil)
	if got != nil || failed != nil {
		t.Errorf("Deletable = %v, %v; want nothing on a total failure", got, failed)
	}
	if !errors.Is(err, cause) {
		t.Errorf("error %v does not wrap the cause", err)
	}
}

func TestDeletableEmpty(t *testing.T) {
	got, failed, err := Deletable(fakeDiscovery{}, nil)
	if err != nil || failed != nil || got == nil || len(got) != 0 {
		t.Errorf("Deletable on an empty server = %v, %v, %v; want an empty non-nil map", got, failed, err)
	}
}

func TestParseGroupResources(t *testing.T) {
	tests := []struct {
		name    string
		in      []string
		want    []schema.GroupResource
		wantErr []string // substrings; nil means no error
	}{
		{name: "nil", in: nil, want: nil},
		{name: "empty strings", in: []string{"", "  "}, want: nil},
		{name: "core", in: []string{"pods"}, want: []schema.GroupResource{{Resource: "pods"}}},
		{name: "grouped", in: []string{"deployments.apps"}, want: []schema.GroupResource{{Group: "apps", Resource: "deployments"}}},
		{name: "dotted group", in: []string{"events.events.k8s.io"}, want: []schema.GroupResource{{Group: "events.k8s.io", Resource: "events"}}},
		{name: "trimmed", in: []string{"  leases.coordination.k8s.io "}, want: []schema.GroupResource{{Group: "coordination.k8s.io", Resource: "leases"}}},
		{name: "trailing dot is core", in: []string{"pods."}, want: []schema.GroupResource{{Resource: "pods"}}},
		{name: "order kept", in: []string{"b", "a.x"}, want: []schema.GroupResource{{Resource: "b"}, {Group: "x", Resource: "a"}}},
		{name: "slash", in: []string{"apps/deployments"}, wantErr: []string{`"apps/deployments"`}},
		{name: "no resource", in: []string{".apps"}, wantErr: []string{`".apps"`}},
		{
			name:    "valid ones kept, every invalid one reported",
			in:      []string{"pods", "a/b", "deployments.apps", ".x"},
			want:    []schema.GroupResource{{Resource: "pods"}, {Group: "apps", Resource: "deployments"}},
			wantErr: []string{`"a/b"`, `".x"`},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseGroupResources(tc.in)
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("ParseGroupResources(%q) = %#v, want %#v", tc.in, got, tc.want)
			}
			if (err != nil) != (tc.wantErr != nil) {
				t.Fatalf("error = %v, want one: %v", err, tc.wantErr != nil)
			}
			for _, w := range tc.wantErr {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %s", err, w)
				}
			}
		})
	}
}

func TestDefaultIgnoredRoundTrips(t *testing.T) {
	var specs []string
	for _, gr := range DefaultIgnored() {
		specs = append(specs, gr.String())
	}
	got, err := ParseGroupResources(specs)
	if err != nil || !reflect.DeepEqual(got, DefaultIgnored()) {
		t.Errorf("ParseGroupResources(%q) = %v, %v; want %v", specs, got, err, DefaultIgnored())
	}
	if len(DefaultIgnored()) != 2 {
		t.Errorf("DefaultIgnored = %v, want core and events.k8s.io events", DefaultIgnored())
	}
}

func TestResourceAPIVersion(t *testing.T) {
	if got := (Resource{GVR: gvr("", "v1", "pods")}).APIVersion(); got != "v1" {
		t.Errorf("core APIVersion = %q", got)
	}
	if got := (Resource{GVR: gvr("apps", "v1", "deployments")}).APIVersion(); got != "apps/v1" {
		t.Errorf("apps APIVersion = %q", got)
	}
}
