package discovery

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/metadata"
	metadatafake "k8s.io/client-go/metadata/fake"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/kgc-dev/kgc/internal/graph"
	"github.com/kgc-dev/kgc/internal/rules"
)

const monitorTimeout = 10 * time.Second

var (
	configMaps = Resource{GVR: gvr("", "v1", "configmaps"), Kind: "ConfigMap", Namespaced: true}
	widgets    = Resource{GVR: gvr("example.com", "v1", "widgets"), Kind: "Widget"}
)

type recorder struct {
	mu     sync.Mutex
	events []graph.Event
	listed []graph.Event // Listed markers, kept apart
}

func (r *recorder) observe(ev graph.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if ev.Type == graph.Listed {
		r.listed = append(r.listed, ev)
		return
	}
	r.events = append(r.events, ev)
}

func (r *recorder) get() []graph.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]graph.Event(nil), r.events...)
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, monitorTimeout, true, func(context.Context) (bool, error) {
		return cond(), nil
	})
	if err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
}

func watchCount(c *metadatafake.FakeMetadataClient, r schema.GroupVersionResource) int {
	n := 0
	for _, a := range c.Actions() {
		if w, ok := a.(clienttesting.WatchActionImpl); ok && w.GetResource() == r {
			n++
		}
	}
	return n
}

func want(rs ...Resource) map[schema.GroupVersionResource]Resource {
	m := map[schema.GroupVersionResource]Resource{}
	for _, r := range rs {
		m[r.GVR] = r
	}
	return m
}

func TestMonitorsDeliverMetadataEvents(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	client := metadatafake.NewSimpleMetadataClient(metadatafake.NewTestScheme())
	tracker := client.Tracker()
	existing := &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{
		Namespace: "a", Name: "old", UID: "old-uid", ResourceVersion: "1",
		Labels: map[string]string{"secret": "x"}, Annotations: map[string]string{"big": "y"},
		ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "m"}},
	}}
	if err := tracker.Create(configMaps.GVR, existing, "a"); err != nil {
		t.Fatal(err)
	}
	rec := &recorder{}
	m := NewMonitors(client, rec.observe)
	defer m.Stop()

	added, removed := m.Sync(ctx, want(configMaps), nil)
	if added != 1 || removed != 0 || m.Len() != 1 {
		t.Fatalf("Sync = +%d -%d, Len %d; want +1 -0, 1", added, removed, m.Len())
	}
	waitUntil(t, "monitor sync", m.HasSynced)
	waitUntil(t, "watch", func() bool { return watchCount(client, configMaps.GVR) > 0 })
	if st := m.Status(); !st[configMaps.GVR].Synced || len(st) != 1 {
		t.Errorf("Status = %v", st)
	}

	// Every watch event is delivered, even an update that keeps the
	// resourceVersion (the real apiserver never sends one; the graph takes
	// it for "nothing changed").
	ref := metav1.OwnerReference{APIVersion: "v1", Kind: "ConfigMap", Name: "old", UID: "old-uid"}
	created := &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "new", UID: "new-uid", ResourceVersion: "2"}}
	if err := tracker.Create(configMaps.GVR, created, "a"); err != nil {
		t.Fatal(err)
	}
	same := created.DeepCopy()
	same.Labels = map[string]string{"only": "labels changed"}
	if err := tracker.Update(configMaps.GVR, same, "a"); err != nil {
		t.Fatal(err)
	}
	changed := created.DeepCopy()
	changed.ResourceVersion = "3"
	changed.OwnerReferences = []metav1.OwnerReference{ref}
	changed.Finalizers = []string{"example.com/f"}
	now := metav1.Now()
	changed.DeletionTimestamp = &now
	if err := tracker.Update(configMaps.GVR, changed, "a"); err != nil {
		t.Fatal(err)
	}
	if err := tracker.Delete(configMaps.GVR, "a", "old"); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "events", func() bool { return len(rec.get()) >= 5 })
	time.Sleep(50 * time.Millisecond) // let a wrongly delivered extra event show up
	evs := rec.get()
	wantEvents := []graph.Event{
		{Type: graph.Upsert, Object: rules.Object{Identity: rules.Identity{APIVersion: "v1", Kind: "ConfigMap", Namespace: "a", Name: "old", UID: "old-uid"}, ResourceVersion: "1"}},
		{Type: graph.Upsert, Object: rules.Object{Identity: rules.Identity{APIVersion: "v1", Kind: "ConfigMap", Namespace: "a", Name: "new", UID: "new-uid"}, ResourceVersion: "2"}},
		{Type: graph.Upsert, Object: rules.Object{Identity: rules.Identity{APIVersion: "v1", Kind: "ConfigMap", Namespace: "a", Name: "new", UID: "new-uid"}, ResourceVersion: "2"}},
		{Type: graph.Upsert, Object: rules.Object{
			Identity:        rules.Identity{APIVersion: "v1", Kind: "ConfigMap", Namespace: "a", Name: "new", UID: "new-uid"},
			ResourceVersion: "3", OwnerReferences: []metav1.OwnerReference{ref}, Finalizers: []string{"example.com/f"}, Deleting: true,
		}},
		{Type: graph.Delete, Object: rules.Object{Identity: rules.Identity{APIVersion: "v1", Kind: "ConfigMap", Namespace: "a", Name: "old", UID: "old-uid"}, ResourceVersion: "1"}},
	}
	if len(evs) != len(wantEvents) {
		t.Fatalf("got %d events, want %d: %+v", len(evs), len(wantEvents), evs)
	}
	for i := range evs {
		if !equalEvents(evs[i], wantEvents[i]) {
			t.Errorf("event %d = %+v, want %+v", i, evs[i], wantEvents[i])
		}
		// The first list's object was there at start; the watch's
		// appeared while kgc watched (graph.Event.Fresh).
		if evs[i].Fresh != (i > 0) {
			t.Errorf("event %d: Fresh %v, want %v", i, evs[i].Fresh, i > 0)
		}
	}
}

// A resource listed once in this process is fresh from then on, also for
// a monitor that replaces the first (its list is a relist), and its
// Relisted events name the resource's plural.
func TestFreshAfterFirstList(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	client := metadatafake.NewSimpleMetadataClient(metadatafake.NewTestScheme())
	obj := &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "x", UID: "x-uid", ResourceVersion: "1"}}
	if err := client.Tracker().Create(configMaps.GVR, obj, "a"); err != nil {
		t.Fatal(err)
	}
	rec := &recorder{}
	m := NewMonitors(client, rec.observe)
	defer m.Stop()
	m.Sync(ctx, want(configMaps), nil)
	waitUntil(t, "first list", m.HasSynced)
	if evs := rec.get(); len(evs) != 1 || evs[0].Fresh {
		t.Fatalf("first list: %+v, want one upsert, not fresh", evs)
	}
	// Gone from discovery and back: a new monitor relists.
	m.Sync(ctx, want(), nil)
	m.Sync(ctx, want(configMaps), nil)
	waitUntil(t, "relist", func() bool {
		for _, ev := range rec.get() {
			if ev.Type == graph.Relisted {
				return true
			}
		}
		return false
	})
	for i, ev := range rec.get()[1:] {
		switch {
		case ev.Type == graph.Upsert && !ev.Fresh:
			t.Errorf("event %d of the relist: %+v, want fresh", i+1, ev)
		case ev.Type == graph.Relisted && ev.Resource != "configmaps":
			t.Errorf("Relisted %+v, want Resource configmaps", ev)
		}
	}
}

func equalEvents(a, b graph.Event) bool {
	if a.Type != b.Type || a.Object.Identity != b.Object.Identity || a.Object.ResourceVersion != b.Object.ResourceVersion || a.Object.Deleting != b.Object.Deleting {
		return false
	}
	if len(a.Object.OwnerReferences) != len(b.Object.OwnerReferences) || len(a.Object.Finalizers) != len(b.Object.Finalizers) {
		return false
	}
	for i := range a.Object.OwnerReferences {
		if a.Object.OwnerReferences[i].UID != b.Object.OwnerReferences[i].UID {
			return false
		}
	}
	for i := range a.Object.Finalizers {
		if a.Object.Finalizers[i] != b.Object.Finalizers[i] {
			return false
		}
	}
	return true
}

func TestMonitorsSyncLifecycle(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	client := metadatafake.NewSimpleMetadataClient(metadatafake.NewTestScheme())
	rec := &recorder{}
	m := NewMonitors(client, rec.observe)
	before := runtime.NumGoroutine()

	if a, r := m.Sync(ctx, want(configMaps, widgets), nil); a != 2 || r != 0 {
		t.Fatalf("first Sync = +%d -%d", a, r)
	}
	waitUntil(t, "sync", m.HasSynced)
	if a, r := m.Sync(ctx, want(configMaps, widgets), nil); a != 0 || r != 0 {
		t.Errorf("unchanged Sync = +%d -%d, want no change", a, r)
	}

	// widgets vanish from discovery, but their group failed: keep the monitor.
	keepWidgets := func(g schema.GroupVersionResource) bool { return g.Group == "example.com" }
	if a, r := m.Sync(ctx, want(configMaps), keepWidgets); a != 0 || r != 0 || m.Len() != 2 {
		t.Errorf("Sync with a failed group = +%d -%d, Len %d; want the monitor kept", a, r, m.Len())
	}
	// Now they are really gone.
	if a, r := m.Sync(ctx, want(configMaps), nil); a != 0 || r != 1 || m.Len() != 1 {
		t.Errorf("Sync removing widgets = +%d -%d, Len %d", a, r, m.Len())
	}
	if _, ok := m.Status()[widgets.GVR]; ok {
		t.Error("removed monitor still reported")
	}

	// A Kind change for the same resource restarts its monitor.
	renamed := configMaps
	renamed.Kind = "ConfigMapV2"
	watches := watchCount(client, configMaps.GVR)
	if a, r := m.Sync(ctx, want(renamed), nil); a != 1 || r != 1 {
		t.Errorf("Sync with a new Kind = +%d -%d, want a restart", a, r)
	}
	waitUntil(t, "restarted monitor to watch", func() bool { return watchCount(client, configMaps.GVR) > watches })
	if err := client.Tracker().Create(configMaps.GVR, &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "x", UID: "x", ResourceVersion: "5"}}, "a"); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "event with the new kind", func() bool {
		for _, ev := range rec.get() {
			if ev.Object.Identity.UID == "x" {
				return ev.Object.Identity.Kind == "ConfigMapV2"
			}
		}
		return false
	})
	// Exactly one event for x: the old monitor's handler is gone.
	time.Sleep(50 * time.Millisecond)
	n := 0
	for _, ev := range rec.get() {
		if ev.Object.Identity.UID == types.UID("x") {
			n++
		}
	}
	if n != 1 {
		t.Errorf("object x delivered %d times, want once", n)
	}

	m.Stop()
	if m.Len() != 0 || !m.HasSynced() {
		t.Errorf("after Stop: Len %d", m.Len())
	}
	// Every monitor goroutine ends with Stop (allow for the runtime's own).
	waitUntil(t, "monitor goroutines to end", func() bool { return runtime.NumGoroutine() <= before+2 })
}

// A monitor whose list fails is reported failing, with the error, while
// the other monitors sync.
func TestMonitorFailingResource(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	client := metadatafake.NewSimpleMetadataClient(metadatafake.NewTestScheme())
	client.PrependReactor("list", "widgets", func(clienttesting.Action) (bool, kruntime.Object, error) {
		return true, nil, errors.New("conversion webhook for example.com/v1, Kind=Widget failed: connection refused")
	})
	m := NewMonitors(client, func(graph.Event) {})
	defer m.Stop()
	m.Sync(ctx, map[schema.GroupVersionResource]Resource{configMaps.GVR: configMaps, widgets.GVR: widgets}, nil)
	err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, monitorTimeout, true, func(context.Context) (bool, error) {
		st := m.Status()
		return st[configMaps.GVR].Synced && st[widgets.GVR].Failing(), nil
	})
	if err != nil {
		t.Fatalf("want configmaps synced and widgets failing, got %+v", m.Status())
	}
	if st := m.Status()[widgets.GVR]; !strings.Contains(st.LastError.Error(), "conversion webhook") {
		t.Errorf("widgets' last error = %v", st.LastError)
	}
	if m.Status()[configMaps.GVR].Failing() {
		t.Error("a synced monitor is reported failing")
	}
}

// A resource counts as listed only once the graph builder applied the
// Listed marker of its complete list: a decision that read the graph while
// the list's events were still queued would miss what it found.
func TestUnlistedUntilTheListIsApplied(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	client := metadatafake.NewSimpleMetadataClient(metadatafake.NewTestScheme())
	if err := client.Tracker().Create(configMaps.GVR, &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "x", UID: "x"}}, "a"); err != nil {
		t.Fatal(err)
	}
	rec := &recorder{}
	m := NewMonitors(client, rec.observe)
	defer m.Stop()
	m.Sync(ctx, want(configMaps), nil)
	if err := wait.PollUntilContextTimeout(ctx, 5*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return m.HasSynced(), nil
	}); err != nil {
		t.Fatal("monitor never synced")
	}
	if u := m.Unlisted(); len(u) != 1 {
		t.Fatalf("Unlisted() = %v with the list synced but its marker not applied, want configmaps", u)
	}
	rec.mu.Lock()
	markers := slices.Clone(rec.listed)
	upserts := len(rec.events)
	rec.mu.Unlock()
	if len(markers) != 1 || upserts != 1 {
		t.Fatalf("%d Listed markers after %d upserts, want one after the list's one", len(markers), upserts)
	}
	m.Applied(markers[0].Gen + 1000) // another list's marker
	if u := m.Unlisted(); len(u) != 1 {
		t.Fatalf("Unlisted() = %v after another generation's marker", u)
	}
	m.Applied(markers[0].Gen)
	if u := m.Unlisted(); len(u) != 0 {
		t.Fatalf("Unlisted() = %v after the marker was applied, want none", u)
	}
}

// Listing is true while a resource's first list is under way and not
// failing, until its Listed marker is applied; idle measures the time since
// its last page. Progress counts listed resources and the objects of the
// first lists.
func TestListingAndProgress(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	client := metadatafake.NewSimpleMetadataClient(metadatafake.NewTestScheme())
	for _, name := range []string{"x", "y"} {
		if err := client.Tracker().Create(configMaps.GVR, &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: name, UID: types.UID(name)}}, "a"); err != nil {
			t.Fatal(err)
		}
	}
	gate := make(chan struct{})
	rec := &recorder{}
	m := NewMonitors(gatedLists{client, widgets.GVR, gate}, rec.observe)
	clk := clocktesting.NewFakeClock(time.Now())
	m.SetClock(clk)
	defer m.Stop()
	m.Sync(ctx, want(configMaps, widgets), nil)
	waitUntil(t, "configmaps to sync", func() bool { return m.Status()[configMaps.GVR].Synced })

	if l, _ := m.Listing(schema.GroupKind{Kind: "Secret"}); l {
		t.Error("an unmonitored resource is listing")
	}
	clk.Step(7 * time.Second)
	if l, idle := m.Listing(widgets.GroupKind()); !l || idle != 7*time.Second {
		t.Errorf("widgets: Listing = %v, %s; want true, 7s while its list is outstanding", l, idle)
	}
	// Complete but not applied: still listing, and not idle (the graph
	// builder, not the list, is what it waits for).
	if l, idle := m.Listing(configMaps.GroupKind()); !l || idle != 0 {
		t.Errorf("configmaps before its marker is applied: Listing = %v, %s; want true, 0", l, idle)
	}
	if listed, total, objects := m.Progress(); listed != 0 || total != 2 || objects != 2 {
		t.Errorf("Progress = %d/%d, %d objects; want 0/2, 2", listed, total, objects)
	}
	rec.mu.Lock()
	marker := rec.listed[0]
	rec.mu.Unlock()
	m.Applied(marker.Gen)
	if l, _ := m.Listing(configMaps.GroupKind()); l {
		t.Error("configmaps listing after its marker was applied")
	}
	if listed, total, _ := m.Progress(); listed != 1 || total != 2 {
		t.Errorf("Progress = %d/%d, want 1/2", listed, total)
	}
	close(gate)
	waitUntil(t, "widgets to sync", func() bool { return m.Status()[widgets.GVR].Synced })
	rec.mu.Lock()
	for _, ev := range rec.listed {
		m.Applied(ev.Gen)
	}
	rec.mu.Unlock()
	if l, _ := m.Listing(widgets.GroupKind()); l {
		t.Error("widgets listing after their marker was applied")
	}
	if listed, total, objects := m.Progress(); listed != 2 || total != 2 || objects != 2 {
		t.Errorf("Progress = %d/%d, %d objects; want 2/2, 2", listed, total, objects)
	}
}

// A failing resource is not listing: its owners are read, not waited for.
func TestFailingResourceIsNotListing(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	client := metadatafake.NewSimpleMetadataClient(metadatafake.NewTestScheme())
	client.PrependReactor("list", "widgets", func(clienttesting.Action) (bool, kruntime.Object, error) {
		return true, nil, errors.New("conversion webhook down")
	})
	m := NewMonitors(client, func(graph.Event) {})
	defer m.Stop()
	m.Sync(ctx, want(widgets), nil)
	waitUntil(t, "widgets to fail", func() bool { return m.Status()[widgets.GVR].Failing() })
	if l, _ := m.Listing(widgets.GroupKind()); l {
		t.Error("a failing resource is listing")
	}
}

// gatedLists holds the LISTs of one resource until gate is closed (a
// reactor cannot: the fake client runs reactors under one lock).
type gatedLists struct {
	metadata.Interface
	gvr  schema.GroupVersionResource
	gate chan struct{}
}

func (g gatedLists) Resource(gvr schema.GroupVersionResource) metadata.Getter {
	if gvr != g.gvr {
		return g.Interface.Resource(gvr)
	}
	return gatedGetter{g.Interface.Resource(gvr), g.gate}
}

type gatedGetter struct {
	metadata.Getter
	gate chan struct{}
}

func (g gatedGetter) Namespace(ns string) metadata.ResourceInterface {
	return gatedResource{g.Getter.Namespace(ns), g.gate}
}

type gatedResource struct {
	metadata.ResourceInterface
	gate chan struct{}
}

func (r gatedResource) List(ctx context.Context, opts metav1.ListOptions) (*metav1.PartialObjectMetadataList, error) {
	select {
	case <-r.gate:
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-time.After(monitorTimeout):
		return nil, errors.New("gate never opened")
	}
	return r.ResourceInterface.List(ctx, opts)
}

// A watch that reconnects after an error checks that its resource's
// storage did not go back: a consistent read answering an older
// resourceVersion than the one the watch would resume from (a plain etcd
// restore) makes it list again; an equal or newer one, a failed read, or
// a resourceVersion that is no number do not.
func TestStorageWentBack(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	for _, tc := range []struct {
		name, resume, now string
		fail              bool
		want              bool
	}{
		{name: "gone back", resume: "1217", now: "1213", want: true},
		{name: "the same", resume: "1217", now: "1217"},
		{name: "newer", resume: "1217", now: "1300"},
		{name: "the read fails", resume: "1217", fail: true},
		{name: "no number", resume: "abc", now: "1"},
		{name: "no number now", resume: "1217", now: "x1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			client := metadatafake.NewSimpleMetadataClient(metadatafake.NewTestScheme())
			client.PrependReactor("list", "configmaps", func(a clienttesting.Action) (bool, kruntime.Object, error) {
				if tc.fail {
					return true, nil, errors.New("connection refused")
				}
				return true, &metav1.List{ListMeta: metav1.ListMeta{ResourceVersion: tc.now}}, nil
			})
			mon := &monitor{resource: configMaps, res: client.Resource(configMaps.GVR).Namespace(metav1.NamespaceAll)}
			if got := mon.storageWentBack(ctx, klog.FromContext(ctx), tc.resume); got != tc.want {
				t.Fatalf("storageWentBack(%s) with the storage at %s = %v, want %v", tc.resume, tc.now, got, tc.want)
			}
		})
	}
}

// A relist after the monitor's watch lost the storage's history (a 410)
// ends a gap in kgc's history of the resource: its objects may have been
// created at any time in the gap, so they are not fresh (graph.Event.Fresh:
// not arrivals), and HistoryLost dates the gap's end. The first list
// leaves HistoryLost zero; a watch event after the relist is fresh. Both
// paged and streaming lists.
func TestRelistAfterLostHistoryIsNotFresh(t *testing.T) {
	for _, streaming := range []bool{false, true} {
		t.Run(fmt.Sprintf("streaming=%v", streaming), func(t *testing.T) {
			s := &streamServer{
				list: func(w http.ResponseWriter, r *http.Request, n int) {
					answerPage(w, strconv.Itoa(41+n), cm(fmt.Sprintf("p%d", n), strconv.Itoa(40+n)))
				},
				// The first watch (after the first list) answers 410: the
				// monitor lists again; the second delivers an event.
				watch: func(w http.ResponseWriter, r *http.Request, n int) {
					if n == 1 {
						answerExpired(w)
						return
					}
					sw := startStream(w)
					sw.event(watch.Added, cm("after", "99"))
					<-r.Context().Done()
				},
			}
			if streaming {
				s.stream = func(w http.ResponseWriter, r *http.Request, n int) {
					sw := startStream(w)
					sw.event(watch.Added, cm(fmt.Sprintf("s%d", n), strconv.Itoa(30+10*n)))
					sw.end(strconv.Itoa(31 + 10*n))
					if n == 1 {
						return // the watch resumes from the bookmark: 410
					}
					sw.event(watch.Added, cm("after", strconv.Itoa(32+10*n)))
					<-r.Context().Done()
				}
			}
			m, rec := streamMonitor(t, s, streamMonitorOptions{})
			gk := schema.GroupKind{Kind: "ConfigMap"}
			waitUntil(t, "the watch event after the relist", func() bool {
				for _, ev := range rec.get() {
					if ev.Type == graph.Upsert && ev.Object.Identity.Name == "after" {
						return true
					}
				}
				return false
			})
			fresh := map[string]bool{}
			for _, ev := range rec.get() {
				if ev.Type == graph.Upsert {
					fresh[ev.Object.Identity.Name] = ev.Fresh
				}
			}
			first, relisted := "p1", "p2"
			if streaming {
				first, relisted = "s1", "s2"
			}
			want := map[string]bool{first: false, relisted: false, "after": true}
			if !reflect.DeepEqual(fresh, want) {
				t.Errorf("fresh by object %v, want %v (the first list's and the relist's objects are not arrivals, the watch's are)", fresh, want)
			}
			if m.HistoryLost(gk).IsZero() {
				t.Error("HistoryLost is zero after a relist that ended a gap")
			}
			if !m.HistoryLost(schema.GroupKind{Kind: "Secret"}).IsZero() {
				t.Error("HistoryLost of a kind never relisted is not zero")
			}
		})
	}
}
