package discovery

import (
	"reflect"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"unsafe"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	metadatafake "k8s.io/client-go/metadata/fake"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/klog/v2/ktesting"

	"github.com/kgc-dev/kgc/internal/graph"
	"github.com/kgc-dev/kgc/internal/rules"
)

func TestLeanObject(t *testing.T) {
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
	o := leanObject(in, "v1", "Secret")
	want := rules.Object{
		Identity:        rules.Identity{APIVersion: "v1", Kind: "Secret", Namespace: "a", Name: "s", UID: "u"},
		ResourceVersion: "9",
		OwnerReferences: before.OwnerReferences,
		Finalizers:      before.Finalizers,
		Deleting:        true,

		DeletionTimestamp: before.DeletionTimestamp,
	}
	if !reflect.DeepEqual(o, want) {
		t.Errorf("lean = %+v, want %+v", o, want)
	}
	if !reflect.DeepEqual(in, before) {
		t.Error("leanObject changed its input")
	}
	// Nothing of the decoded object's slices is kept: it can be dropped.
	if &o.OwnerReferences[0] == &in.OwnerReferences[0] || &o.Finalizers[0] == &in.Finalizers[0] || o.DeletionTimestamp == in.DeletionTimestamp {
		t.Error("the lean object aliases the decoded one's slices")
	}
	// Repeated strings are shared between objects.
	in2 := before.DeepCopy()
	in2.Namespace = strings.Clone("a")
	o2 := leanObject(in2, "v1", "Secret")
	same := func(a, b string) bool { return unsafe.StringData(a) == unsafe.StringData(b) }
	if !same(o.Identity.Namespace, o2.Identity.Namespace) || !same(o.OwnerReferences[0].Kind, o2.OwnerReferences[0].Kind) ||
		!same(o.OwnerReferences[0].APIVersion, o2.OwnerReferences[0].APIVersion) || !same(o.Finalizers[1], o2.Finalizers[1]) {
		t.Error("repeated strings are not interned")
	}
	if o.OwnerReferences[0].Controller != o2.OwnerReferences[0].Controller {
		t.Error("bool pointers are not shared")
	}
	if o := leanObject(&metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Name: "x", UID: "x"}}, "v1", "Namespace"); o.OwnerReferences != nil || o.Finalizers != nil || o.Deleting {
		t.Errorf("empty metadata became %+v", o)
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

// A relist (the watch expired) reaches the graph as upserts of the listed
// objects and a Relisted event, on which the graph removes what the list did
// not see: here an object deleted and re-created under the same name while
// the watch was down (the graph holds the old UID), and one deleted.
func TestMonitorsRelistRemovesWhatIsGone(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	client := metadatafake.NewSimpleMetadataClient(metadatafake.NewTestScheme())
	tracker := client.Tracker()
	for _, o := range []*metav1.PartialObjectMetadata{
		{ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "x", UID: "uid-1", ResourceVersion: "1"}},
		{ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "y", UID: "uid-y", ResourceVersion: "2"}},
		{ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "z", UID: "uid-z", ResourceVersion: "3"}},
	} {
		if err := tracker.Create(configMaps.GVR, o, "a"); err != nil {
			t.Fatal(err)
		}
	}
	// The first watch expires at once (410), the second one is real.
	var watches atomic.Int32
	client.PrependWatchReactor("configmaps", func(clienttesting.Action) (bool, watch.Interface, error) {
		if watches.Add(1) > 1 {
			return false, nil, nil
		}
		// While the watch is down: x is re-created, z is deleted.
		if err := tracker.Delete(configMaps.GVR, "a", "x"); err != nil {
			t.Error(err)
		}
		if err := tracker.Create(configMaps.GVR, &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "x", UID: "uid-2", ResourceVersion: "4"}}, "a"); err != nil {
			t.Error(err)
		}
		if err := tracker.Delete(configMaps.GVR, "a", "z"); err != nil {
			t.Error(err)
		}
		return true, nil, apierrors.NewResourceExpired("too old resource version: 3 (4)")
	})
	g := graph.New()
	var mu sync.Mutex
	var types_ []graph.EventType
	m := NewMonitors(client, func(ev graph.Event) {
		mu.Lock()
		defer mu.Unlock()
		if ev.Type == graph.Listed {
			return
		}
		types_ = append(types_, ev.Type)
		g.Apply(ev)
	})
	defer m.Stop()
	m.Sync(ctx, want(configMaps), nil)
	waitUntil(t, "the relist", func() bool { return watches.Load() >= 2 })
	waitUntil(t, "the graph to match", func() bool {
		_, old := g.Object("uid-1")
		_, cur := g.Object("uid-2")
		_, y := g.Object("uid-y")
		_, z := g.Object("uid-z")
		return !old && cur && y && !z && g.Len() == 2
	})
	mu.Lock()
	defer mu.Unlock()
	// First list: 3 upserts, no sweep (nothing observed before); relist:
	// 2 upserts (y unchanged, x's new UID) and the sweep.
	wantTypes := []graph.EventType{graph.Upsert, graph.Upsert, graph.Upsert, graph.Upsert, graph.Upsert, graph.Relisted}
	if !reflect.DeepEqual(types_, wantTypes) {
		t.Errorf("events %v, want %v", types_, wantTypes)
	}
	if err := g.CheckInvariants(); err != nil {
		t.Error(err)
	}
}
