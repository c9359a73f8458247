package discovery

import (
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	metadatafake "k8s.io/client-go/metadata/fake"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/klog/v2/ktesting"

	"github.com/kgc-dev/kgc/internal/graph"
	"github.com/kgc-dev/kgc/internal/rules"
)

var (
	widgetsV2 = Resource{GVR: gvr("example.com", "v2", "widgets"), Kind: "Widget"}
	crds      = Resource{GVR: gvr("apiextensions.k8s.io", "v1", "customresourcedefinitions"), Kind: "CustomResourceDefinition"}
)

// withWidgetsCRD stores the CRD that serves widgets.
func withWidgetsCRD(t *testing.T, client *metadatafake.FakeMetadataClient) {
	t.Helper()
	if err := client.Tracker().Create(crds.GVR, newWidget("widgets.example.com", "1"), ""); err != nil {
		t.Fatal(err)
	}
}

// graphFeed applies the monitors' events to a real graph, as the graph
// builder does, and keeps their effects.
type graphFeed struct {
	mu     sync.Mutex
	g      *graph.Graph
	events []graph.Event
	eff    []graph.Effects
}

func newGraphFeed() *graphFeed { return &graphFeed{g: graph.New()} }

func (f *graphFeed) observe(ev graph.Event) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.events = append(f.events, ev)
	f.eff = append(f.eff, f.g.Apply(ev))
}

// apply feeds an event that does not come from a monitor (a dependent in
// a resource the test does not run a monitor for).
func (f *graphFeed) apply(ev graph.Event) { f.observe(ev) }

// relisted returns the Relisted events of kind, in order.
func (f *graphFeed) relisted(kind string) []graph.Event {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []graph.Event
	for _, ev := range f.events {
		if ev.Type == graph.Relisted && ev.Object.Identity.Kind == kind {
			out = append(out, ev)
		}
	}
	return out
}

func (f *graphFeed) absent() []types.UID {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []types.UID
	for _, e := range f.eff {
		for _, id := range e.Absent {
			out = append(out, id.UID)
		}
	}
	slices.Sort(out)
	return out
}

func (f *graphFeed) rechecked(uid types.UID) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, e := range f.eff {
		if slices.Contains(e.AttemptToDelete, uid) {
			return true
		}
	}
	return false
}

func (f *graphFeed) observed(uid types.UID) bool {
	_, ok := f.g.Object(uid)
	return ok
}

func newWidget(name string, rv string) *metav1.PartialObjectMetadata {
	return &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID(name), ResourceVersion: rv}}
}

// dependentOf returns a ConfigMap owned by the widget named owner.
func dependentOf(owner string) rules.Object {
	return rules.Object{
		Identity:        rules.Identity{APIVersion: "v1", Kind: "ConfigMap", Namespace: "a", Name: "dep-" + owner, UID: types.UID("dep-" + owner)},
		ResourceVersion: "100",
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "example.com/v1", Kind: "Widget", Name: owner, UID: types.UID(owner)}},
	}
}

// notFound makes the fake answer LISTs of resource with 404 while on is set.
func notFound(client *metadatafake.FakeMetadataClient, resource string, on *atomic.Bool, lists *atomic.Int32) {
	client.PrependReactor("list", resource, func(a clienttesting.Action) (bool, kruntime.Object, error) {
		if lists != nil {
			lists.Add(1)
		}
		if on.Load() {
			return true, nil, apierrors.NewNotFound(a.GetResource().GroupResource(), "")
		}
		return false, nil, nil
	})
}

// A LIST answering 404 is a complete, empty list: the monitor is synced,
// not failing, reports NotServed, sweeps every node of its resource (its
// dependents are re-checked), and opens no watch. When the resource is
// served again (a CRD created again under the same name while discovery
// still listed it), RestartFailing lists it at once and the monitor
// watches again.
func TestMonitorListNotFoundIsSyncedAndEmpty(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	client := metadatafake.NewSimpleMetadataClient(metadatafake.NewTestScheme())
	if err := client.Tracker().Create(widgets.GVR, newWidget("w1", "1"), ""); err != nil {
		t.Fatal(err)
	}
	var gone atomic.Bool
	notFound(client, "widgets", &gone, nil)
	watchers := make(chan *watch.RaceFreeFakeWatcher, 10)
	client.PrependWatchReactor("widgets", func(clienttesting.Action) (bool, watch.Interface, error) {
		w := watch.NewRaceFreeFake()
		watchers <- w
		return true, w, nil
	})
	feed := newGraphFeed()
	feed.apply(graph.Event{Type: graph.Upsert, Object: dependentOf("w1")})
	m := NewMonitors(client, feed.observe)
	defer m.Stop()
	m.Sync(ctx, want(widgets), nil)
	waitUntil(t, "widgets to sync", m.HasSynced)
	waitUntil(t, "w1 observed", func() bool { return feed.observed("w1") })
	var w *watch.RaceFreeFakeWatcher
	select {
	case w = <-watchers:
	case <-time.After(monitorTimeout):
		t.Fatal("no watch")
	}

	// The CRD is deleted: its instances' delete events never arrive (the
	// watch expires meanwhile), and the relist answers 404.
	gone.Store(true)
	if n := m.RestartFailing(ctx, func(schema.GroupVersionResource) bool { return true }); n != 0 {
		t.Errorf("RestartFailing restarted %d synced, served monitors", n)
	}
	watches := watchCount(client, widgets.GVR)
	expired := apierrors.NewResourceExpired("too old").ErrStatus
	w.Error(&expired)
	waitUntil(t, "the 404 list to sweep", func() bool { return !feed.observed("w1") })
	st := m.Status()[widgets.GVR]
	if !st.Synced || st.Failing() || !st.NotServed || st.State() != StateSynced || !m.HasSynced() || !m.Settled() {
		t.Errorf("status after a 404 list = %+v (state %s); want synced, not failing, not served", st, st.State())
	}
	if !slices.Equal(feed.absent(), []types.UID{"w1"}) || !feed.rechecked("dep-w1") {
		t.Errorf("absent %v, dependent re-checked %v; want w1 removed as deleted and dep-w1 re-checked", feed.absent(), feed.rechecked("dep-w1"))
	}
	time.Sleep(50 * time.Millisecond)
	if n := watchCount(client, widgets.GVR); n != watches {
		t.Errorf("a resource that is not served was watched (%d watches, had %d)", n, watches)
	}

	// Created again, with a new instance (a new UID).
	if err := client.Tracker().Create(widgets.GVR, newWidget("w2", "2"), ""); err != nil {
		t.Fatal(err)
	}
	gone.Store(false)
	if n := m.RestartFailing(ctx, func(g schema.GroupVersionResource) bool { return g.Group == "example.com" }); n != 1 {
		t.Errorf("RestartFailing restarted %d monitors, want the not-served one", n)
	}
	waitUntil(t, "w2 observed", func() bool { return feed.observed("w2") })
	waitUntil(t, "the monitor to watch again", func() bool { return watchCount(client, widgets.GVR) > watches })
	if st := m.Status()[widgets.GVR]; !st.Synced || st.NotServed || st.Failing() {
		t.Errorf("status once served again = %+v", st)
	}
	if err := feed.g.CheckInvariants(); err != nil {
		t.Error(err)
	}
}

// Without any restart, a monitor whose LIST answers 404 lists again on
// its own, with backoff, and picks the resource up once it is served.
func TestMonitorNotServedListsAgain(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	client := metadatafake.NewSimpleMetadataClient(metadatafake.NewTestScheme())
	var gone atomic.Bool
	gone.Store(true)
	var lists atomic.Int32
	notFound(client, "widgets", &gone, &lists)
	feed := newGraphFeed()
	m := NewMonitors(client, feed.observe)
	defer m.Stop()
	m.Sync(ctx, want(widgets), nil)
	waitUntil(t, "widgets to sync", m.HasSynced)
	if st := m.Status()[widgets.GVR]; !st.NotServed || st.Failing() {
		t.Errorf("status = %+v, want synced, not served, not failing", st)
	}
	if err := client.Tracker().Create(widgets.GVR, newWidget("w1", "1"), ""); err != nil {
		t.Fatal(err)
	}
	gone.Store(false)
	waitUntil(t, "w1 observed", func() bool { return feed.observed("w1") })
	if lists.Load() < 2 {
		t.Errorf("%d lists, want a second one", lists.Load())
	}
}

// A CRD is deleted with instances whose delete events the monitor never
// delivered; discovery drops the resource and its monitor stops. Once a
// LIST of it answers 404, every instance's node is removed as deleted and
// its dependents are re-checked. While the LIST still succeeds (discovery
// lagging the other way), nothing is removed.
func TestVanishedResourceIsSweptOnceProvenGone(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	client := metadatafake.NewSimpleMetadataClient(metadatafake.NewTestScheme())
	for _, w := range []string{"w1", "w2"} {
		if err := client.Tracker().Create(widgets.GVR, newWidget(w, "1"), ""); err != nil {
			t.Fatal(err)
		}
	}
	withWidgetsCRD(t, client)
	var gone atomic.Bool
	var lists atomic.Int32
	notFound(client, "widgets", &gone, &lists)
	feed := newGraphFeed()
	feed.apply(graph.Event{Type: graph.Upsert, Object: dependentOf("w1")})
	m := NewMonitors(client, feed.observe)
	defer m.Stop()
	m.Sync(ctx, want(configMaps, widgets, crds), nil)
	waitUntil(t, "sync", m.HasSynced)
	waitUntil(t, "widgets and their CRD observed", func() bool {
		return feed.observed("w1") && feed.observed("w2") && feed.observed("widgets.example.com")
	})

	// Discovery drops widgets; the LIST still answers (not proven).
	before := lists.Load()
	if a, r := m.Sync(ctx, want(configMaps, crds), nil); a != 0 || r != 1 {
		t.Fatalf("Sync = +%d -%d, want widgets stopped", a, r)
	}
	if p := m.Proving(); len(p) != 1 || p[0] != widgets.GroupKind() {
		t.Fatalf("proving %v, want widgets", p)
	}
	waitUntil(t, "the prover to list twice", func() bool { return lists.Load() >= before+2 })
	if !feed.observed("w1") || len(feed.relisted("Widget")) != 0 {
		t.Fatal("a vanished resource whose LIST succeeds was swept")
	}

	gone.Store(true)
	waitUntil(t, "the vanished resource to be swept", func() bool { return !feed.observed("w1") && !feed.observed("w2") })
	if got := feed.absent(); !slices.Equal(got, []types.UID{"w1", "w2"}) {
		t.Errorf("absent %v, want [w1 w2]", got)
	}
	if !feed.rechecked("dep-w1") {
		t.Error("the dependent of a vanished owner was not re-checked")
	}
	if it, ok := feed.g.Item("w1"); !ok || !it.Absent {
		t.Errorf("w1 = %+v, %v; want an absent placeholder for its dependent", it, ok)
	}
	waitUntil(t, "the prover to end", func() bool { return len(m.Proving()) == 0 })
	if err := feed.g.CheckInvariants(); err != nil {
		t.Error(err)
	}
}

// The CRD comes back (same name, new instances) before its absence was
// proven: the prover stops without a sweep of its own, and the new
// monitor's first list sweeps the old instances (their UIDs are not in it).
func TestVanishedResourceBackBeforeProof(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	client := metadatafake.NewSimpleMetadataClient(metadatafake.NewTestScheme())
	if err := client.Tracker().Create(widgets.GVR, newWidget("old", "1"), ""); err != nil {
		t.Fatal(err)
	}
	feed := newGraphFeed()
	m := NewMonitors(client, feed.observe)
	defer m.Stop()
	m.Sync(ctx, want(widgets), nil)
	waitUntil(t, "old observed", func() bool { return feed.observed("old") })
	m.Sync(ctx, nil, nil)
	if len(m.Proving()) != 1 {
		t.Fatalf("proving %v", m.Proving())
	}
	if err := client.Tracker().Delete(widgets.GVR, "", "old"); err != nil {
		t.Fatal(err)
	}
	if err := client.Tracker().Create(widgets.GVR, newWidget("new", "2"), ""); err != nil {
		t.Fatal(err)
	}
	m.Sync(ctx, want(widgets), nil)
	if len(m.Proving()) != 0 {
		t.Errorf("proving %v after the resource came back", m.Proving())
	}
	waitUntil(t, "new observed, old swept", func() bool { return feed.observed("new") && !feed.observed("old") })
	if got := feed.absent(); !slices.Equal(got, []types.UID{"old"}) {
		t.Errorf("absent %v, want [old]", got)
	}
}

// A resource kept because its group failed discovery (an unavailable
// APIService) is never swept: no prover runs for it, even if its LIST
// answers 404, and its monitor keeps running.
func TestFailedDiscoveryGroupIsNotSwept(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	client := metadatafake.NewSimpleMetadataClient(metadatafake.NewTestScheme())
	if err := client.Tracker().Create(widgets.GVR, newWidget("w1", "1"), ""); err != nil {
		t.Fatal(err)
	}
	var gone atomic.Bool
	var lists atomic.Int32
	notFound(client, "widgets", &gone, &lists)
	feed := newGraphFeed()
	m := NewMonitors(client, feed.observe)
	defer m.Stop()
	m.Sync(ctx, want(widgets), nil)
	waitUntil(t, "w1 observed", func() bool { return feed.observed("w1") })
	gone.Store(true)
	failed := func(g schema.GroupVersionResource) bool { return g.Group == "example.com" }
	if a, r := m.Sync(ctx, nil, failed); a != 0 || r != 0 || m.Len() != 1 {
		t.Errorf("Sync with the group failed = +%d -%d, Len %d; want the monitor kept", a, r, m.Len())
	}
	time.Sleep(100 * time.Millisecond)
	if len(m.Proving()) != 0 || len(feed.relisted("Widget")) != 0 || !feed.observed("w1") {
		t.Errorf("a resource whose discovery failed was swept (proving %v)", m.Proving())
	}
}

// The preferred version changes: one monitor per group and kind. The old
// version's monitor stops (even one kept for a failed group version), no
// prover runs (the resource is still served), and the new monitor's first
// list sweeps what the old one recorded and is gone.
func TestVersionSwitchOneMonitorPerGroupKind(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	client := metadatafake.NewSimpleMetadataClient(metadatafake.NewTestScheme())
	for _, w := range []string{"kept", "gone"} {
		if err := client.Tracker().Create(widgets.GVR, newWidget(w, "1"), ""); err != nil {
			t.Fatal(err)
		}
	}
	if err := client.Tracker().Create(widgetsV2.GVR, newWidget("kept", "1"), ""); err != nil {
		t.Fatal(err)
	}
	feed := newGraphFeed()
	feed.apply(graph.Event{Type: graph.Upsert, Object: dependentOf("gone")})
	m := NewMonitors(client, feed.observe)
	defer m.Stop()
	m.Sync(ctx, want(widgets), nil)
	waitUntil(t, "v1 observed", func() bool { return feed.observed("kept") && feed.observed("gone") })

	keepV1 := func(g schema.GroupVersionResource) bool { return g == widgets.GVR }
	if a, r := m.Sync(ctx, want(widgetsV2), keepV1); a != 1 || r != 1 || m.Len() != 1 {
		t.Fatalf("Sync to v2 = +%d -%d, Len %d; want v1 replaced by v2", a, r, m.Len())
	}
	if len(m.Proving()) != 0 {
		t.Errorf("proving %v for a resource still served", m.Proving())
	}
	waitUntil(t, "gone swept by the v2 list", func() bool { return !feed.observed("gone") })
	if o, ok := feed.g.Object("kept"); !ok || o.Identity.APIVersion != "example.com/v2" {
		t.Errorf("kept = %+v, %v; want observed at v2", o.Identity, ok)
	}
	if !feed.rechecked("dep-gone") {
		t.Error("the dependent of the swept owner was not re-checked")
	}

	// Two resources of one group and kind: only one is monitored.
	both := want(widgets, widgetsV2)
	m.Sync(ctx, both, nil)
	if m.Len() != 1 {
		t.Errorf("%d monitors for one group and kind", m.Len())
	}
	if err := feed.g.CheckInvariants(); err != nil {
		t.Error(err)
	}
}

// A vanished resource no CRD served (an aggregated API whose APIService
// was removed: its server may still hold the objects and serve them again
// under the same UIDs) is not swept even once its LIST answers 404: its
// nodes stay, as upstream leaves them.
func TestVanishedResourceNotServedByACRDIsKept(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	client := metadatafake.NewSimpleMetadataClient(metadatafake.NewTestScheme())
	if err := client.Tracker().Create(widgets.GVR, newWidget("w1", "1"), ""); err != nil {
		t.Fatal(err)
	}
	var gone atomic.Bool
	var lists atomic.Int32
	notFound(client, "widgets", &gone, &lists)
	feed := newGraphFeed()
	m := NewMonitors(client, feed.observe)
	defer m.Stop()
	m.Sync(ctx, want(widgets, crds), nil)
	waitUntil(t, "w1 observed", func() bool { return feed.observed("w1") })
	gone.Store(true)
	before := lists.Load()
	m.Sync(ctx, want(crds), nil)
	waitUntil(t, "the prover to see the 404 and end", func() bool { return lists.Load() > before && len(m.Proving()) == 0 })
	if !feed.observed("w1") || len(feed.relisted("Widget")) != 0 {
		t.Error("a vanished resource no CRD served was swept")
	}
}
