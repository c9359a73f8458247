package discovery

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	kruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/metadata"
	metadatafake "k8s.io/client-go/metadata/fake"
	"k8s.io/client-go/rest"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/klog/v2/ktesting"

	"github.com/kgc-dev/kgc/internal/graph"
)

// A monitor lists the latest state (no resourceVersion: not "any", "0",
// which a resource with a broken watch cache answers with 429s the client
// retries for a long time), never as a streaming list, in pages of
// monitorListPageSize; it hands each page's objects on and watches, with
// bookmarks, from the complete list's version. (The metadata fake client
// drops list options, so this talks to an HTTP server.)
func TestMonitorsListPagesAndWatchFromList(t *testing.T) {
	var mu sync.Mutex
	var lists, watches []url.Values
	rec := monitorOverHTTP(t, func(q url.Values) {
		mu.Lock()
		defer mu.Unlock()
		if q.Get("watch") == "true" {
			watches = append(watches, q)
		} else {
			lists = append(lists, q)
		}
	}, func(w http.ResponseWriter, q url.Values) {
		switch q.Get("continue") {
		case "":
			fmt.Fprintf(w, `{"kind":"PartialObjectMetadataList","apiVersion":"meta.k8s.io/v1","metadata":{"continue":"next"},"items":[%s]}`, metaItem("p1"))
		default:
			fmt.Fprintf(w, `{"kind":"PartialObjectMetadataList","apiVersion":"meta.k8s.io/v1","metadata":{"resourceVersion":"42"},"items":[%s]}`, metaItem("p2"))
		}
	}, false)
	waitUntil(t, "watch", func() bool { mu.Lock(); defer mu.Unlock(); return len(watches) > 0 })
	mu.Lock()
	defer mu.Unlock()
	page := strconv.Itoa(monitorListPageSize)
	if len(lists) != 2 || lists[0].Get("limit") != page || lists[1].Get("continue") != "next" || lists[1].Get("limit") != page {
		t.Errorf("lists = %v, want two pages of %s", lists, page)
	}
	for _, l := range lists {
		if l.Has("resourceVersion") || l.Has("resourceVersionMatch") || l.Has("sendInitialEvents") {
			t.Errorf("list %v does not ask for the latest state as a plain list", l)
		}
	}
	if w := watches[0]; w.Get("resourceVersion") != "42" || w.Get("allowWatchBookmarks") != "true" || w.Get("timeoutSeconds") == "" {
		t.Errorf("watch %v, want from the list's version 42 with bookmarks and a timeout", w)
	}
	if evs := rec.get(); len(evs) != 2 || evs[0].Object.Identity.Name != "p1" || evs[1].Object.Identity.Name != "p2" || evs[0].Gen != evs[1].Gen || evs[0].Gen == 0 {
		t.Errorf("events = %+v, want p1 and p2 upserted under one list generation", evs)
	}
}

// Settled turns true once every monitor synced or fails; a failing monitor
// that never synced is restarted by RestartFailing (a fresh list at once)
// and syncs once its resource heals; handlers stay one per monitor.
func TestMonitorsSettleAndRestartFailing(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	client := metadatafake.NewSimpleMetadataClient(metadatafake.NewTestScheme())
	var broken atomic.Bool
	broken.Store(true)
	var widgetLists atomic.Int32
	client.PrependReactor("list", "widgets", func(clienttesting.Action) (bool, kruntime.Object, error) {
		widgetLists.Add(1)
		if broken.Load() {
			return true, nil, errors.New("conversion webhook for example.com/v1, Kind=Widget failed: service not found")
		}
		return false, nil, nil
	})
	m := NewMonitors(client, func(graph.Event) {})
	defer m.Stop()
	m.Sync(ctx, want(configMaps, widgets), nil)
	waitUntil(t, "monitors to settle", m.Settled)
	st := m.Status()
	if !st[configMaps.GVR].Synced || st[widgets.GVR].State() != StateFailing {
		t.Fatalf("status = %+v, want configmaps synced and widgets failing", st)
	}
	if m.HasSynced() {
		t.Error("HasSynced with a failing monitor")
	}

	// A restart of a synced monitor would drop its cache: only failing,
	// never-synced ones are restarted.
	all := func(schema.GroupVersionResource) bool { return true }
	broken.Store(false)
	lists := widgetLists.Load()
	if n := m.RestartFailing(ctx, all); n != 1 {
		t.Errorf("RestartFailing = %d, want 1 (widgets only)", n)
	}
	waitUntil(t, "widgets to sync after the restart", func() bool { return m.Status()[widgets.GVR].Synced })
	if widgetLists.Load() <= lists {
		t.Error("the restarted monitor did not list")
	}
	if n := m.RestartFailing(ctx, all); n != 0 {
		t.Errorf("RestartFailing with nothing failing = %d", n)
	}
	if m.Len() != 2 || m.Handlers() != 2 {
		t.Errorf("Len %d, Handlers %d; want 2 and 2", m.Len(), m.Handlers())
	}
	m.Stop()
	if m.Handlers() != 0 {
		t.Errorf("after Stop: %d handlers left", m.Handlers())
	}
}

// A monitor that synced and then fails (its watch and relists error) is
// failing until it makes progress again.
func TestStatusFailingAfterSync(t *testing.T) {
	st := Status{Synced: true, LastError: errors.New("boom")}
	if !st.Failing() || st.State() != StateFailing {
		t.Errorf("synced monitor with a current error: Failing %v, State %s", st.Failing(), st.State())
	}
	if s := (Status{Synced: true}); s.State() != StateSynced {
		t.Errorf("State = %s", s.State())
	}
	if s := (Status{}); s.State() != StateSyncing {
		t.Errorf("State = %s", s.State())
	}
}

// A first list that fails part way has handed its first pages on; an
// object of those pages may be deleted before the list is retried, and no
// watch will report it (the watch starts after the list that completes).
// The retried list, the monitor's first complete one, therefore ends with
// a Relisted sweep, which removes it (found by the simulator: a ghost owner
// whose dependents were never collected).
func TestMonitorFirstListFailedPartWaySweeps(t *testing.T) {
	var lists atomic.Int32
	rec := monitorOverHTTP(t, nil, func(w http.ResponseWriter, _ url.Values) {
		switch lists.Add(1) {
		case 1: // first page of the first attempt: gone and kept
			fmt.Fprintf(w, `{"kind":"PartialObjectMetadataList","apiVersion":"meta.k8s.io/v1","metadata":{"continue":"next"},"items":[%s,%s]}`, metaItem("gone"), metaItem("kept"))
		case 2: // its second page fails
			w.WriteHeader(http.StatusInternalServerError)
			fmt.Fprint(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"InternalError","code":500}`)
		default: // the retry: gone was deleted meanwhile
			fmt.Fprintf(w, `{"kind":"PartialObjectMetadataList","apiVersion":"meta.k8s.io/v1","metadata":{"resourceVersion":"42"},"items":[%s]}`, metaItem("kept"))
		}
	}, false)
	evs := rec.get()
	if len(evs) != 4 || evs[3].Type != graph.Relisted || evs[3].Gen != evs[2].Gen || evs[2].Object.Identity.Name != "kept" || evs[3].Object.ResourceVersion != "42" {
		t.Fatalf("events = %+v, want gone and kept upserted, kept upserted again, and a Relisted sweep of the complete list's generation at its version", evs)
	}
}

// metaItem is a PartialObjectMetadata list item named name (its UID too).
func metaItem(name string) string {
	return fmt.Sprintf(`{"metadata":{"namespace":"a","name":%q,"uid":%q,"resourceVersion":"7"}}`, name, name)
}

// monitorOverHTTP runs a monitor of configMaps, for the rest of the test,
// against an HTTP server whose LISTs list answers and whose watches stay
// open without an event (list answers them too with answerWatches), and
// waits until it has synced. onRequest, when set, sees every request's
// query first. (The metadata fake client drops list options and cannot
// fail one page of a list.)
func monitorOverHTTP(t *testing.T, onRequest func(q url.Values), list func(w http.ResponseWriter, q url.Values), answerWatches bool) *recorder {
	t.Helper()
	_, ctx := ktesting.NewTestContext(t)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		if onRequest != nil {
			onRequest(q)
		}
		w.Header().Set("Content-Type", "application/json")
		if q.Get("watch") == "true" && !answerWatches {
			w.WriteHeader(http.StatusOK)
			w.(http.Flusher).Flush()
			<-r.Context().Done()
			return
		}
		list(w, q)
	}))
	t.Cleanup(srv.Close)
	client, err := metadata.NewForConfig(&rest.Config{Host: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	rec := &recorder{}
	m := NewMonitors(client, rec.observe)
	t.Cleanup(m.Stop)
	m.Sync(ctx, want(configMaps), nil)
	waitUntil(t, "sync", m.HasSynced)
	return rec
}

// A watch answered with 404 (a CRD deleted while the watch was down) is
// not retried as a watch: the resource is listed again, and a LIST
// answering 404 empties it in the graph (found by the simulator: the
// deleted CRD's instances stayed in the graph, and a Foreground owner of
// one waited forever).
func TestMonitorWatchNotFoundRelists(t *testing.T) {
	var lists atomic.Int32
	rec := monitorOverHTTP(t, nil, func(w http.ResponseWriter, q url.Values) {
		if q.Get("watch") != "true" && lists.Add(1) == 1 {
			fmt.Fprintf(w, `{"kind":"PartialObjectMetadataList","apiVersion":"meta.k8s.io/v1","metadata":{"resourceVersion":"42"},"items":[%s]}`, metaItem("gone"))
			return
		}
		w.WriteHeader(http.StatusNotFound)
		fmt.Fprint(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"NotFound","code":404}`)
	}, true)
	waitUntil(t, "the resource swept as not served", func() bool {
		evs := rec.get()
		return len(evs) == 2 && evs[0].Object.Identity.Name == "gone" && evs[1].Type == graph.Relisted && evs[1].Gen != evs[0].Gen
	})
}
