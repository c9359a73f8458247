package discovery

import (
	"reflect"
	"strconv"
	"strings"
	"testing"
	"unsafe"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	metadatafake "k8s.io/client-go/metadata/fake"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2/ktesting"

	"github.com/kgc-dev/kgc/internal/graph"
)

func TestLeanMetadata(t *testing.T) {
	now := metav1.Now()
	yes, no := true, false
	in := &metav1.PartialObjectMetadata{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"},
		ObjectMeta: metav1.ObjectMeta{
			Namespace: "a", Name: "s", UID: "u", ResourceVersion: "9", Generation: 3, GenerateName: "s-",
			Labels: map[string]string{"l": "v"}, Annotations: map[string]string{"a": "v"},
			ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "m"}},
			OwnerReferences: []metav1.OwnerReference{
				{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "rs", UID: "o", Controller: &yes, BlockOwnerDeletion: &no},
				{APIVersion: "v1", Kind: "ConfigMap", Name: "cm", UID: "p"},
			},
			Finalizers:        []string{"orphan", "example.com/f"},
			DeletionTimestamp: &now,
		},
	}
	before := in.DeepCopy()
	out, err := leanMetadata(in)
	if err != nil {
		t.Fatal(err)
	}
	m, ok := out.(*Meta)
	if !ok {
		t.Fatalf("transform returned %T, want *Meta", out)
	}
	want := &Meta{
		Namespace: "a", Name: "s", UID: "u", ResourceVersion: "9",
		OwnerReferences:   before.OwnerReferences,
		Finalizers:        before.Finalizers,
		DeletionTimestamp: &now,
	}
	if !reflect.DeepEqual(m, want) {
		t.Errorf("lean = %+v, want %+v", m, want)
	}
	if !reflect.DeepEqual(in, before) {
		t.Error("transform changed its input")
	}
	// Idempotent: a Meta passes through; so do other types.
	if again, _ := leanMetadata(m); again != any(m) {
		t.Error("transform is not idempotent on a Meta")
	}
	other := &metav1.Status{}
	if got, _ := leanMetadata(other); got != any(other) {
		t.Error("non-metadata object not passed through")
	}
	// Repeated strings are shared between objects.
	in2 := before.DeepCopy()
	in2.Namespace = strings.Clone("a")
	out2, _ := leanMetadata(in2)
	m2 := out2.(*Meta)
	same := func(a, b string) bool { return unsafe.StringData(a) == unsafe.StringData(b) }
	if !same(m.Namespace, m2.Namespace) || !same(m.OwnerReferences[0].Kind, m2.OwnerReferences[0].Kind) ||
		!same(m.OwnerReferences[0].APIVersion, m2.OwnerReferences[0].APIVersion) || !same(m.Finalizers[1], m2.Finalizers[1]) {
		t.Error("repeated strings are not interned")
	}
	if m.OwnerReferences[0].Controller != m2.OwnerReferences[0].Controller {
		t.Error("bool pointers are not shared")
	}
	// A deep copy aliases nothing.
	cp := m.DeepCopyObject().(*Meta)
	if !reflect.DeepEqual(cp, m) {
		t.Errorf("deep copy = %+v, want %+v", cp, m)
	}
	if &cp.OwnerReferences[0] == &m.OwnerReferences[0] || cp.DeletionTimestamp == m.DeletionTimestamp {
		t.Error("deep copy aliases the original")
	}
}

func TestLeanMetaKeysAndVersions(t *testing.T) {
	m := &Meta{Namespace: "a", Name: "s", UID: "u", ResourceVersion: "9"}
	key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(m)
	if err != nil || key != "a/s" {
		t.Fatalf("key = %q, %v; want a/s", key, err)
	}
	if !sameVersion(m, &Meta{ResourceVersion: "9"}) || sameVersion(m, &Meta{ResourceVersion: "10"}) {
		t.Error("sameVersion compares resourceVersions wrongly")
	}
	if sameVersion(m, "not an object") {
		t.Error("sameVersion of a non-object")
	}
	if replaced(m, &Meta{Namespace: "a", Name: "s", UID: "u", ResourceVersion: "10"}) {
		t.Error("an update of the same object counts as a replacement")
	}
	if !replaced(m, &Meta{Namespace: "a", Name: "s", UID: "v", ResourceVersion: "10"}) {
		t.Error("a re-created object (other UID) does not count as a replacement")
	}
}

func TestToGraphEvent(t *testing.T) {
	now := metav1.Now()
	m := &Meta{Namespace: "a", Name: "s", UID: "u", ResourceVersion: "9", Finalizers: []string{"f"}, DeletionTimestamp: &now,
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "ConfigMap", Name: "o", UID: "o"}}}
	want := graph.Event{Type: graph.Delete, Object: graph.Object{
		Identity:        graph.Identity{APIVersion: "v1", Kind: "Secret", Namespace: "a", Name: "s", UID: "u"},
		ResourceVersion: "9", OwnerReferences: m.OwnerReferences, Finalizers: m.Finalizers, Deleting: true,
	}}
	for name, obj := range map[string]any{
		"meta":      m,
		"tombstone": cache.DeletedFinalStateUnknown{Key: "a/s", Obj: m},
		"untransformed": &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{
			Namespace: "a", Name: "s", UID: "u", ResourceVersion: "9", Finalizers: []string{"f"}, DeletionTimestamp: &now,
			OwnerReferences: m.OwnerReferences}},
	} {
		ev, ok := toGraphEvent(graph.Delete, obj, "v1", "Secret")
		if !ok || !reflect.DeepEqual(ev, want) {
			t.Errorf("%s: event = %+v, %v; want %+v", name, ev, ok, want)
		}
	}
	if _, ok := toGraphEvent(graph.Upsert, &metav1.Status{}, "v1", "Secret"); ok {
		t.Error("event from a non-metadata object")
	}
}

func TestInternerIsBounded(t *testing.T) {
	in := &interner{m: make(map[string]string)}
	for i := range maxInterned + 10 {
		in.get("s" + strconv.Itoa(i))
	}
	if len(in.m) != maxInterned {
		t.Fatalf("interner holds %d strings, want at most %d", len(in.m), maxInterned)
	}
	if got := in.get("beyond"); got != "beyond" {
		t.Fatalf("get past the bound = %q", got)
	}
}

// An object deleted and re-created under the same name, seen by the
// informer as one update, reaches the graph as the old object's deletion
// followed by the new one.
func TestMonitorsReportReplacedObjectAsDeleted(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	client := metadatafake.NewSimpleMetadataClient(metadatafake.NewTestScheme())
	tracker := client.Tracker()
	first := &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "x", UID: "uid-1", ResourceVersion: "1"}}
	if err := tracker.Create(configMaps.GVR, first, "a"); err != nil {
		t.Fatal(err)
	}
	rec := &recorder{}
	m := NewMonitors(client, rec.observe)
	defer m.Stop()
	m.Sync(ctx, want(configMaps), nil)
	waitUntil(t, "monitor sync", m.HasSynced)
	waitUntil(t, "watch", func() bool { return watchCount(client, configMaps.GVR) > 0 })

	second := &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "x", UID: "uid-2", ResourceVersion: "2"}}
	if err := tracker.Update(configMaps.GVR, second, "a"); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "events", func() bool { return len(rec.get()) >= 3 })
	evs := rec.get()
	id := func(uid types.UID) graph.Identity {
		return graph.Identity{APIVersion: "v1", Kind: "ConfigMap", Namespace: "a", Name: "x", UID: uid}
	}
	wantEvents := []graph.Event{
		{Type: graph.Upsert, Object: graph.Object{Identity: id("uid-1"), ResourceVersion: "1"}},
		{Type: graph.Delete, Object: graph.Object{Identity: id("uid-1"), ResourceVersion: "1"}},
		{Type: graph.Upsert, Object: graph.Object{Identity: id("uid-2"), ResourceVersion: "2"}},
	}
	if !reflect.DeepEqual(evs, wantEvents) {
		t.Fatalf("events = %+v, want %+v", evs, wantEvents)
	}
}
