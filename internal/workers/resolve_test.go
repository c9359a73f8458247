package workers

import (
	"context"
	"errors"
	"fmt"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kgc-dev/kgc/internal/fakeapi"
	"github.com/kgc-dev/kgc/internal/graph"
	"github.com/kgc-dev/kgc/internal/rules"
)

type getKey struct {
	gvr       schema.GroupVersionResource
	namespace string
	name      string
}

// fakeGetter serves GETs from a map and counts them.
type fakeGetter struct {
	objects map[getKey]*metav1.PartialObjectMetadata
	errs    map[getKey]error
	calls   []getKey
}

func (f *fakeGetter) get(_ context.Context, gvr schema.GroupVersionResource, ns, name string) (*metav1.PartialObjectMetadata, error) {
	k := getKey{gvr, ns, name}
	f.calls = append(f.calls, k)
	if err := f.errs[k]; err != nil {
		return nil, err
	}
	if o := f.objects[k]; o != nil {
		return o.DeepCopy(), nil
	}
	return nil, apierrors.NewNotFound(gvr.GroupResource(), name)
}

func pom(ns, name string, uid types.UID) *metav1.PartialObjectMetadata {
	return &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: uid}}
}

type nsWarning struct {
	dependent      types.UID
	ref            types.UID
	ownerNamespace string
}

type resolverFixture struct {
	g        *graph.Graph
	getter   *fakeGetter
	r        *resolver
	warnings []nsWarning
}

func newResolverFixture() *resolverFixture {
	f := &resolverFixture{g: graph.New(), getter: &fakeGetter{objects: map[getKey]*metav1.PartialObjectMetadata{}, errs: map[getKey]error{}}}
	f.r = &resolver{
		graph:  f.g,
		mapper: fakeapi.NewMapper(),
		get:    f.getter.get,
		absent: newAbsentCache(100),
		invalidNamespace: func(dependent rules.Identity, ref metav1.OwnerReference, ownerNamespace string) {
			f.warnings = append(f.warnings, nsWarning{dependent.UID, ref.UID, ownerNamespace})
		},
	}
	return f
}

func (f *resolverFixture) observe(t *testing.T, o rules.Object) {
	t.Helper()
	f.g.Apply(graph.Event{Type: graph.Upsert, Object: o})
	if err := f.g.CheckInvariants(); err != nil {
		t.Fatal(err)
	}
}

var (
	depA       = rules.Identity{APIVersion: "v1", Kind: "ConfigMap", Namespace: "a", Name: "dep", UID: "dep"}
	clusterDep = rules.Identity{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "ClusterRole", Name: "cdep", UID: "cdep"}
	cmRef      = metav1.OwnerReference{APIVersion: "v1", Kind: "ConfigMap", Name: "owner", UID: "owner"}
	ownerObj   = rules.Object{Identity: rules.Identity{APIVersion: "v1", Kind: "ConfigMap", Namespace: "a", Name: "owner", UID: "owner"}}
)

func (f *resolverFixture) resolve(t *testing.T, dep rules.Identity, ref metav1.OwnerReference) (rules.OwnerState, error) {
	t.Helper()
	return f.r.resolve(context.Background(), dep, &ref)
}

func expectState(t *testing.T, got rules.OwnerState, err error, want rules.OwnerState) {
	t.Helper()
	if err != nil {
		t.Fatalf("resolve: unexpected error %v", err)
	}
	if got != want {
		t.Fatalf("resolve = %s, want %s", got, want)
	}
}

func expectGETs(t *testing.T, f *resolverFixture, want ...getKey) {
	t.Helper()
	if len(f.getter.calls) != len(want) {
		t.Fatalf("GETs = %v, want %v", f.getter.calls, want)
	}
	for i := range want {
		if f.getter.calls[i] != want[i] {
			t.Fatalf("GET %d = %v, want %v", i, f.getter.calls[i], want[i])
		}
	}
}

func TestResolveFromGraph(t *testing.T) {
	t.Run("observed owner is solid without a GET", func(t *testing.T) {
		f := newResolverFixture()
		f.observe(t, ownerObj)
		s, err := f.resolve(t, depA, cmRef)
		expectState(t, s, err, rules.Solid)
		expectGETs(t, f)
	})
	t.Run("owner deleting dependents is waiting without a GET", func(t *testing.T) {
		f := newResolverFixture()
		o := ownerObj
		o.Deleting, o.Finalizers = true, []string{rules.FinalizerForeground}
		f.observe(t, o)
		s, err := f.resolve(t, depA, cmRef)
		expectState(t, s, err, rules.Waiting)
		expectGETs(t, f)
	})
	t.Run("owner being deleted in the background is still solid", func(t *testing.T) {
		f := newResolverFixture()
		o := ownerObj
		o.Deleting, o.Finalizers = true, []string{"example.com/x"}
		f.observe(t, o)
		s, err := f.resolve(t, depA, cmRef)
		expectState(t, s, err, rules.Solid)
		expectGETs(t, f)
	})
	t.Run("cluster-scoped owner of a namespaced dependent", func(t *testing.T) {
		f := newResolverFixture()
		f.observe(t, rules.Object{Identity: rules.Identity{APIVersion: "v1", Kind: "Namespace", Name: "a", UID: "ns-a"}})
		s, err := f.resolve(t, depA, metav1.OwnerReference{APIVersion: "v1", Kind: "Namespace", Name: "a", UID: "ns-a"})
		expectState(t, s, err, rules.Solid)
		expectGETs(t, f)
	})
	t.Run("ref in another served version matches the observed owner", func(t *testing.T) {
		f := newResolverFixture()
		f.observe(t, rules.Object{Identity: rules.Identity{APIVersion: "apps/v1", Kind: "Deployment", Namespace: "a", Name: "web", UID: "web"}})
		s, err := f.resolve(t, depA, metav1.OwnerReference{APIVersion: "apps/v1beta2", Kind: "Deployment", Name: "web", UID: "web"})
		expectState(t, s, err, rules.Solid)
		expectGETs(t, f)
	})
	t.Run("placeholder owner is looked up", func(t *testing.T) {
		f := newResolverFixture()
		f.observe(t, rules.Object{Identity: depA, OwnerReferences: []metav1.OwnerReference{cmRef}}) // owner now a placeholder
		f.getter.objects[getKey{fakeapi.ConfigMaps, "a", "owner"}] = pom("a", "owner", "owner")
		s, err := f.resolve(t, depA, cmRef)
		expectState(t, s, err, rules.Solid)
		expectGETs(t, f, getKey{fakeapi.ConfigMaps, "a", "owner"})
	})
	t.Run("absent placeholder is dangling from the absent cache", func(t *testing.T) {
		f := newResolverFixture()
		f.observe(t, ownerObj)
		f.observe(t, rules.Object{Identity: depA, OwnerReferences: []metav1.OwnerReference{cmRef}})
		eff := f.g.Apply(graph.Event{Type: graph.Delete, Object: ownerObj})
		for _, id := range eff.Absent { // what the graph builder does
			f.r.absent.Put(id.Coordinates(), rules.Evidence{})
		}
		s, err := f.resolve(t, depA, cmRef)
		expectState(t, s, err, rules.Dangling)
		expectGETs(t, f)
	})
	t.Run("observed owner under another name is looked up", func(t *testing.T) {
		f := newResolverFixture()
		o := ownerObj
		o.Identity.Name = "renamed"
		f.observe(t, o)
		s, err := f.resolve(t, depA, cmRef)
		expectState(t, s, err, rules.Dangling)
		expectGETs(t, f, getKey{fakeapi.ConfigMaps, "a", "owner"})
		if len(f.warnings) != 0 {
			t.Errorf("warnings = %v, want none (same namespace)", f.warnings)
		}
	})
}

func TestResolveWithGET(t *testing.T) {
	key := getKey{fakeapi.ConfigMaps, "a", "owner"}
	t.Run("404 is dangling and cached", func(t *testing.T) {
		f := newResolverFixture()
		s, err := f.resolve(t, depA, cmRef)
		expectState(t, s, err, rules.Dangling)
		expectGETs(t, f, key)
		s, err = f.resolve(t, depA, cmRef)
		expectState(t, s, err, rules.Dangling)
		expectGETs(t, f, key) // no second GET
		// Another dependent naming the same coordinates uses the cache too.
		other := depA
		other.UID, other.Name = "dep2", "dep2"
		s, err = f.resolve(t, other, cmRef)
		expectState(t, s, err, rules.Dangling)
		expectGETs(t, f, key)
		// The cache is keyed by full coordinates: a different name is looked up.
		renamed := cmRef
		renamed.Name = "other"
		s, err = f.resolve(t, depA, renamed)
		expectState(t, s, err, rules.Dangling)
		expectGETs(t, f, key, getKey{fakeapi.ConfigMaps, "a", "other"})
		// …and so is the same name in another namespace.
		inB := depA
		inB.Namespace = "b"
		s, err = f.resolve(t, inB, cmRef)
		expectState(t, s, err, rules.Dangling)
		expectGETs(t, f, key, getKey{fakeapi.ConfigMaps, "a", "other"}, getKey{fakeapi.ConfigMaps, "b", "owner"})
	})
	t.Run("another UID at the coordinates is dangling and cached", func(t *testing.T) {
		f := newResolverFixture()
		f.getter.objects[key] = pom("a", "owner", "someone-else")
		s, err := f.resolve(t, depA, cmRef)
		expectState(t, s, err, rules.Dangling)
		s, err = f.resolve(t, depA, cmRef)
		expectState(t, s, err, rules.Dangling)
		expectGETs(t, f, key)
	})
	t.Run("live owner is solid and not cached", func(t *testing.T) {
		f := newResolverFixture()
		f.getter.objects[key] = pom("a", "owner", "owner")
		for range 2 {
			s, err := f.resolve(t, depA, cmRef)
			expectState(t, s, err, rules.Solid)
		}
		expectGETs(t, f, key, key)
	})
	t.Run("owner in foreground deletion is waiting", func(t *testing.T) {
		f := newResolverFixture()
		o := pom("a", "owner", "owner")
		o.DeletionTimestamp = &metav1.Time{}
		o.Finalizers = []string{"example.com/x", rules.FinalizerForeground}
		f.getter.objects[key] = o
		s, err := f.resolve(t, depA, cmRef)
		expectState(t, s, err, rules.Waiting)
	})
	t.Run("foreground finalizer without deletionTimestamp is solid", func(t *testing.T) {
		f := newResolverFixture()
		o := pom("a", "owner", "owner")
		o.Finalizers = []string{rules.FinalizerForeground}
		f.getter.objects[key] = o
		s, err := f.resolve(t, depA, cmRef)
		expectState(t, s, err, rules.Solid)
	})
	t.Run("owner being deleted in the background is solid", func(t *testing.T) {
		f := newResolverFixture()
		o := pom("a", "owner", "owner")
		o.DeletionTimestamp = &metav1.Time{}
		o.Finalizers = []string{rules.FinalizerOrphan}
		f.getter.objects[key] = o
		s, err := f.resolve(t, depA, cmRef)
		expectState(t, s, err, rules.Solid)
	})
	t.Run("cluster-scoped owner is looked up cluster-wide", func(t *testing.T) {
		f := newResolverFixture()
		f.getter.objects[getKey{fakeapi.Namespaces, "", "a"}] = pom("", "a", "ns-a")
		s, err := f.resolve(t, depA, metav1.OwnerReference{APIVersion: "v1", Kind: "Namespace", Name: "a", UID: "ns-a"})
		expectState(t, s, err, rules.Solid)
		expectGETs(t, f, getKey{fakeapi.Namespaces, "", "a"})
	})
	t.Run("cluster-scoped dependent, cluster-scoped owner", func(t *testing.T) {
		f := newResolverFixture()
		s, err := f.resolve(t, clusterDep, metav1.OwnerReference{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "ClusterRole", Name: "gone", UID: "gone"})
		expectState(t, s, err, rules.Dangling)
		expectGETs(t, f, getKey{fakeapi.ClusterRoles, "", "gone"})
	})
	t.Run("ref version not served, kind served in another version", func(t *testing.T) {
		f := newResolverFixture()
		f.getter.objects[getKey{fakeapi.Deployments, "a", "web"}] = pom("a", "web", "web")
		s, err := f.resolve(t, depA, metav1.OwnerReference{APIVersion: "apps/v1beta2", Kind: "Deployment", Name: "web", UID: "web"})
		expectState(t, s, err, rules.Solid)
		expectGETs(t, f, getKey{fakeapi.Deployments, "a", "web"})
	})
	t.Run("server error is returned and not cached", func(t *testing.T) {
		f := newResolverFixture()
		f.getter.errs[key] = apierrors.NewInternalError(errors.New("etcd is sad"))
		s, err := f.resolve(t, depA, cmRef)
		if err == nil || !apierrors.IsInternalError(err) {
			t.Fatalf("resolve error = %v, want a wrapped InternalError", err)
		}
		if s == rules.Dangling || s == rules.Solid || s == rules.Waiting {
			t.Errorf("state on error = %s; must not look decidable", s)
		}
		delete(f.getter.errs, key)
		s, err = f.resolve(t, depA, cmRef)
		expectState(t, s, err, rules.Dangling)
		expectGETs(t, f, key, key)
	})
	t.Run("forbidden is an error, never dangling", func(t *testing.T) {
		f := newResolverFixture()
		f.getter.errs[key] = apierrors.NewForbidden(fakeapi.ConfigMaps.GroupResource(), "owner", errors.New("rbac"))
		_, err := f.resolve(t, depA, cmRef)
		if !apierrors.IsForbidden(err) {
			t.Fatalf("resolve error = %v, want a wrapped Forbidden", err)
		}
	})
}

func TestResolveWithoutLookup(t *testing.T) {
	tests := []struct {
		name string
		dep  rules.Identity
		ref  metav1.OwnerReference
		want rules.OwnerState
	}{
		{"unknown kind", depA, metav1.OwnerReference{APIVersion: "example.com/v1", Kind: "Widget", Name: "w", UID: "w"}, rules.Unresolvable},
		{"unknown kind in a known group", depA, metav1.OwnerReference{APIVersion: "apps/v1", Kind: "Widget", Name: "w", UID: "w"}, rules.Unresolvable},
		{"cluster-scoped dependent, namespaced owner kind", clusterDep, cmRef, rules.Invalid},
		{"cluster-scoped dependent, namespaced owner in another version", clusterDep, metav1.OwnerReference{APIVersion: "apps/v1beta2", Kind: "Deployment", Name: "web", UID: "web"}, rules.Invalid},
		{"malformed apiVersion", depA, metav1.OwnerReference{APIVersion: "a/b/c", Kind: "ConfigMap", Name: "x", UID: "x"}, rules.Invalid},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newResolverFixture()
			s, err := f.resolve(t, tc.dep, tc.ref)
			expectState(t, s, err, tc.want)
			expectGETs(t, f)
			if len(f.warnings) != 0 {
				t.Errorf("warnings = %v", f.warnings)
			}
		})
	}
}

// failingMapper fails every mapping with an error that is not a no-match.
type failingMapper struct{ meta.RESTMapper }

func (failingMapper) RESTMapping(schema.GroupKind, ...string) (*meta.RESTMapping, error) {
	return nil, fmt.Errorf("discovery is down")
}

func TestResolveMapperError(t *testing.T) {
	f := newResolverFixture()
	f.r.mapper = failingMapper{}
	s, err := f.resolve(t, depA, cmRef)
	if err == nil || s != rules.Unresolvable {
		t.Fatalf("resolve = %s, %v; want Unresolvable and an error", s, err)
	}
	expectGETs(t, f)
}

func TestResolveCrossNamespaceOwner(t *testing.T) {
	f := newResolverFixture()
	// The owner's UID lives in namespace b; the dependent in a names it.
	inB := ownerObj
	inB.Identity.Namespace = "b"
	f.observe(t, inB)
	s, err := f.resolve(t, depA, cmRef)
	expectState(t, s, err, rules.Dangling)
	expectGETs(t, f, getKey{fakeapi.ConfigMaps, "a", "owner"})
	want := nsWarning{dependent: "dep", ref: "owner", ownerNamespace: "b"}
	if len(f.warnings) != 1 || f.warnings[0] != want {
		t.Fatalf("warnings = %+v, want [%+v]", f.warnings, want)
	}
	// From the absent cache: still dangling, no GET; the callback is told
	// again (the collector's onceSet deduplicates the Warning event).
	s, err = f.resolve(t, depA, cmRef)
	expectState(t, s, err, rules.Dangling)
	expectGETs(t, f, getKey{fakeapi.ConfigMaps, "a", "owner"})
	if len(f.warnings) != 2 || f.warnings[1] != want {
		t.Fatalf("warnings = %+v", f.warnings)
	}
	// A dependent in b itself is fine.
	depB := depA
	depB.Namespace, depB.UID = "b", "depB"
	s, err = f.resolve(t, depB, cmRef)
	expectState(t, s, err, rules.Solid)
	if len(f.warnings) != 2 {
		t.Fatalf("warnings = %+v", f.warnings)
	}
}

func TestResolveCrossNamespaceOwnerNilCallback(t *testing.T) {
	f := newResolverFixture()
	f.r.invalidNamespace = nil
	inB := ownerObj
	inB.Identity.Namespace = "b"
	f.observe(t, inB)
	s, err := f.resolve(t, depA, cmRef)
	expectState(t, s, err, rules.Dangling)
}

func TestOnceSet(t *testing.T) {
	s := newOnceSet(2)
	if !s.First("a") || s.First("a") {
		t.Fatal("First(a) twice: want true then false")
	}
	s.First("b")
	s.First("c") // evicts a
	if !s.First("a") {
		t.Error("evicted key not reported again")
	}
	if s.First([2]types.UID{"x", "y"}) != true || s.First([2]types.UID{"x", "y"}) {
		t.Error("array keys")
	}
}

func TestAbsentCache(t *testing.T) {
	c := newAbsentCache(10)
	k := rules.Coordinates{Kind: "ConfigMap", Namespace: "a", Name: "x", UID: "u"}
	if c.Has(k) {
		t.Fatal("empty cache has a key")
	}
	c.Put(k, rules.Evidence{})
	if !c.Has(k) {
		t.Fatal("added key missing")
	}
	other := k
	other.Namespace = ""
	if c.Has(other) {
		t.Fatal("cache ignores the namespace")
	}
}

// BenchmarkAbsentCacheAdd records owners observed deleted, as the graph
// builder does for every object a cascade deletes (past the cache's size,
// so eviction is part of the cost).
func BenchmarkAbsentCacheAdd(b *testing.B) {
	c := newAbsentCache(16384)
	keys := make([]rules.Coordinates, 1<<16)
	for i := range keys {
		keys[i] = rules.Coordinates{Kind: "ConfigMap", Namespace: "ns", Name: fmt.Sprintf("dep-%06d", i), UID: types.UID(fmt.Sprintf("0b9b3c1e-7d1a-4a43-9c1f-%012d", i))}
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		c.Put(keys[i&(len(keys)-1)], rules.Evidence{})
		i++
	}
}

// BenchmarkAbsentCacheHas looks up owners in a full cache, half of them
// present.
func BenchmarkAbsentCacheHas(b *testing.B) {
	c := newAbsentCache(16384)
	keys := make([]rules.Coordinates, 16384)
	for i := range keys {
		keys[i] = rules.Coordinates{Kind: "ConfigMap", Namespace: "ns", Name: fmt.Sprintf("dep-%06d", i), UID: types.UID(fmt.Sprintf("0b9b3c1e-7d1a-4a43-9c1f-%012d", i))}
		if i%2 == 0 {
			c.Put(keys[i], rules.Evidence{})
		}
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		c.Has(keys[i&(len(keys)-1)])
		i++
	}
}
