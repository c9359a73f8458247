package discovery

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strconv"
	"sync"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2/ktesting"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/kgc-dev/kgc/internal/graph"
)

// Request kinds the stream server tells apart.
const (
	reqStream = "stream" // a streaming list: watch=true&sendInitialEvents=true
	reqList   = "list"   // a LIST page
	reqWatch  = "watch"  // a plain watch (the metadata client's)
	reqCount  = "count"  // a LIST with limit 1: a streaming list reads its resource's count
)

type streamReq struct {
	kind   string
	q      url.Values
	accept string
}

// streamServer answers a monitor of configMaps: each handler gets the
// request's number among those of its kind, from 1. A nil watch keeps
// plain watches open without an event; a nil stream answers streaming
// lists 422, a nil list answers LISTs with an empty list at "42".
type streamServer struct {
	stream func(w http.ResponseWriter, r *http.Request, n int)
	list   func(w http.ResponseWriter, r *http.Request, n int)
	watch  func(w http.ResponseWriter, r *http.Request, n int)
	// count answers a LIST with limit 1 (default: no count, as a server
	// that does not give remainingItemCount).
	count func(w http.ResponseWriter, r *http.Request, n int)

	mu   sync.Mutex
	reqs []streamReq
}

func (s *streamServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	kind := reqList
	switch {
	case q.Get("watch") == "true" && q.Has("sendInitialEvents"):
		kind = reqStream
	case q.Get("watch") == "true":
		kind = reqWatch
	case q.Get("limit") == "1":
		kind = reqCount
	}
	s.mu.Lock()
	s.reqs = append(s.reqs, streamReq{kind, q, r.Header.Get("Accept")})
	n := 0
	for _, req := range s.reqs {
		if req.kind == kind {
			n++
		}
	}
	s.mu.Unlock()
	switch {
	case kind == reqStream && s.stream != nil:
		s.stream(w, r, n)
	case kind == reqStream:
		answerStatus(w, http.StatusUnprocessableEntity, metav1.StatusReasonInvalid)
	case kind == reqList && s.list != nil:
		s.list(w, r, n)
	case kind == reqList:
		answerPage(w, "42")
	case kind == reqCount && s.count != nil:
		s.count(w, r, n)
	case kind == reqCount:
		answerPage(w, "42")
	case kind == reqWatch && s.watch != nil:
		s.watch(w, r, n)
	default:
		holdOpen(w, r)
	}
}

// requests returns the requests of kind ("" for all), in order.
func (s *streamServer) requests(kind string) []streamReq {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []streamReq
	for _, r := range s.reqs {
		if kind == "" || r.kind == kind {
			out = append(out, r)
		}
	}
	return out
}

// kinds returns the kinds of the requests so far, in order, without the
// count reads (a stream of more than streamProbeAfter objects makes one).
func (s *streamServer) kinds() []string {
	var out []string
	for _, r := range s.requests("") {
		if r.kind != reqCount {
			out = append(out, r.kind)
		}
	}
	return out
}

// holdOpen answers a watch that sends nothing until the client leaves.
func holdOpen(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	w.(http.Flusher).Flush()
	<-r.Context().Done()
}

func answerStatus(w http.ResponseWriter, code int, reason metav1.StatusReason) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	fmt.Fprintf(w, `{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","reason":%q,"code":%d}`, reason, code)
}

// answerExpired answers a plain watch with an ERROR event 410 Expired, as
// kube-apiserver answers a watch from a compacted resourceVersion.
func answerExpired(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	fmt.Fprint(w, `{"type":"ERROR","object":{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"too old resource version","reason":"Expired","code":410}}`+"\n")
}

// answerPage answers a LIST with one protobuf page (the last) at rv.
func answerPage(w http.ResponseWriter, rv string, objs ...*metav1.PartialObjectMetadata) {
	l := &metav1.PartialObjectMetadataList{ListMeta: metav1.ListMeta{ResourceVersion: rv}}
	for _, o := range objs {
		l.Items = append(l.Items, *o)
	}
	w.Header().Set("Content-Type", contentTypeProtobuf)
	_, _ = w.Write(protobufBody(nopTB{}, l))
}

// nopTB lets protobufBody run on a server goroutine (its encoding does not
// fail).
type nopTB struct{ testing.TB }

func (nopTB) Helper() {}

// cm is a ConfigMap's metadata, named and UIDed name, at rv.
func cm(name, rv string) *metav1.PartialObjectMetadata {
	return &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: name, UID: types.UID(name), ResourceVersion: rv}}
}

// streamWriter writes a protobuf watch response, frame by frame.
type streamWriter struct {
	w http.ResponseWriter
}

func startStream(w http.ResponseWriter) *streamWriter {
	w.Header().Set("Content-Type", contentTypeProtobuf+";stream=watch")
	w.WriteHeader(http.StatusOK)
	w.(http.Flusher).Flush()
	return &streamWriter{w}
}

func (s *streamWriter) write(b []byte) {
	_, _ = s.w.Write(b)
	s.w.(http.Flusher).Flush()
}

func (s *streamWriter) event(typ watch.EventType, pom *metav1.PartialObjectMetadata) {
	s.write(frame(nopTB{}, typ, pomObject(nopTB{}, pom)))
}

// end sends the bookmark that ends the initial events, at rv.
func (s *streamWriter) end(rv string) {
	s.event(watch.Bookmark, bookmark(rv, true))
}

// seqRecorder records every event, Listed markers included, in order.
type seqRecorder struct {
	mu  sync.Mutex
	evs []graph.Event
}

func (r *seqRecorder) observe(ev graph.Event) {
	r.mu.Lock()
	r.evs = append(r.evs, ev)
	r.mu.Unlock()
}

func (r *seqRecorder) get() []graph.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.evs)
}

// upserts counts the Upsert events so far.
func (r *seqRecorder) upserts() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, ev := range r.evs {
		if ev.Type == graph.Upsert {
			n++
		}
	}
	return n
}

// trace names the events: "Upsert name@rv gN", "Delete name@rv gN",
// "Relisted @rv gN", "Listed gN", with generations numbered in order of
// appearance (g1 is the first list's).
func trace(evs []graph.Event) []string {
	gens := map[uint32]int{}
	g := func(gen uint32) string {
		if _, ok := gens[gen]; !ok {
			gens[gen] = len(gens) + 1
		}
		return "g" + strconv.Itoa(gens[gen])
	}
	var out []string
	for _, ev := range evs {
		o := ev.Object
		switch ev.Type {
		case graph.Upsert, graph.Delete:
			if o.Identity.Kind != "ConfigMap" || o.Identity.APIVersion != "v1" {
				out = append(out, fmt.Sprintf("%v of a %s %s", ev.Type, o.Identity.APIVersion, o.Identity.Kind))
			}
			typ := "Upsert"
			if ev.Type == graph.Delete {
				typ = "Delete"
			}
			out = append(out, fmt.Sprintf("%s %s@%s %s", typ, o.Identity.Name, o.ResourceVersion, g(ev.Gen)))
		case graph.Relisted:
			out = append(out, fmt.Sprintf("Relisted @%s %s", o.ResourceVersion, g(ev.Gen)))
		case graph.Listed:
			out = append(out, "Listed "+g(ev.Gen))
		default:
			out = append(out, fmt.Sprintf("%v %s", ev.Type, g(ev.Gen)))
		}
	}
	return out
}

// waitTrace waits until the recorder holds want's number of events, and
// then checks they are want.
func waitTrace(t *testing.T, rec *seqRecorder, want ...string) {
	t.Helper()
	waitUntil(t, fmt.Sprintf("%d events", len(want)), func() bool { return len(rec.get()) >= len(want) })
	if got := trace(rec.get()); !slices.Equal(got, want) {
		t.Fatalf("events:\n got  %q\n want %q", got, want)
	}
}

// waitRequests waits until the server saw n requests of kind.
func waitRequests(t *testing.T, s *streamServer, kind string, n int) {
	t.Helper()
	waitUntil(t, fmt.Sprintf("%d %s requests", n, kind), func() bool { return len(s.requests(kind)) >= n })
}

type streamMonitorOptions struct {
	gate      func(context.Context)
	clock     *clocktesting.FakeClock
	pagesOnly bool
	// reads, if set, is given the RESTPageLister and lists in its place.
	reads *readTracker
}

// streamMonitor runs a monitor of configMaps for the rest of the test,
// against s, listing through a RESTPageLister (which streams) and
// watching through the metadata client, as kgc does.
func streamMonitor(t *testing.T, s *streamServer, o streamMonitorOptions) (*Monitors, *seqRecorder) {
	t.Helper()
	_, ctx := ktesting.NewTestContext(t)
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)
	cfg := &rest.Config{Host: srv.URL}
	client, err := metadata.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	pl, err := NewRESTPageLister(cfg, srv.Client())
	if err != nil {
		t.Fatal(err)
	}
	rec := &seqRecorder{}
	m := NewMonitors(client, rec.observe)
	t.Cleanup(m.Stop)
	switch {
	case o.pagesOnly:
		m.SetPageLister(PagesOnly(pl))
	case o.reads != nil:
		o.reads.RESTPageLister = pl
		m.SetPageLister(o.reads)
	default:
		m.SetPageLister(pl)
	}
	if o.gate != nil {
		m.SetListGate(o.gate)
	}
	if o.clock != nil {
		m.SetClock(o.clock)
	}
	m.Sync(ctx, want(configMaps), nil)
	return m, rec
}

// checkStreamRequest checks that req asks for a streaming list of the
// latest state, as kube-apiserver's WatchList takes it.
func checkStreamRequest(t *testing.T, req streamReq) {
	t.Helper()
	q := req.q
	if q.Get("watch") != "true" || q.Get("sendInitialEvents") != "true" || q.Get("resourceVersionMatch") != "NotOlderThan" ||
		q.Get("allowWatchBookmarks") != "true" || q.Get("resourceVersion") != "" || q.Has("limit") || q.Has("continue") {
		t.Errorf("streaming request %v, want watch=true&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true from the latest state", q)
	}
	if s, err := strconv.Atoi(q.Get("timeoutSeconds")); err != nil || s < int(monitorWatchTimeout.Seconds()) || s > 2*int(monitorWatchTimeout.Seconds()) {
		t.Errorf("streaming request timeoutSeconds=%q, want between %s and twice that", q.Get("timeoutSeconds"), monitorWatchTimeout)
	}
	if req.accept != watchAccept {
		t.Errorf("streaming request Accept %q, want %q", req.accept, watchAccept)
	}
}

// A first streaming list: one request for exactly a streaming list; its
// initial events are upserted under one new generation, then Listed (no
// Relisted: nothing was recorded of a resource never seen); the monitor
// is synced; an event after the end bookmark is the watch's, in the same
// generation; and once the stream ends, the metadata client's watch
// resumes from the bookmark's resourceVersion (or a later event's), never
// from an initial event's (here larger than the bookmark's, so that one
// taken for the other shows).
func TestStreamListFirstList(t *testing.T) {
	for _, live := range []bool{false, true} {
		t.Run(fmt.Sprintf("live event %v", live), func(t *testing.T) {
			s := &streamServer{stream: func(w http.ResponseWriter, r *http.Request, n int) {
				sw := startStream(w)
				sw.event(watch.Added, cm("a", "300"))
				sw.event(watch.Added, cm("b", "301"))
				sw.end("100")
				if live {
					sw.event(watch.Modified, cm("a", "150"))
				}
			}}
			m, rec := streamMonitor(t, s, streamMonitorOptions{})
			waitRequests(t, s, reqWatch, 1)
			want := []string{"Upsert a@300 g1", "Upsert b@301 g1", "Listed g1"}
			resume := "100"
			if live {
				want = append(want, "Upsert a@150 g1")
				resume = "150"
			}
			waitTrace(t, rec, want...)
			if st := m.Status()[configMaps.GVR]; !st.Synced || st.NotServed || st.Failing() {
				t.Errorf("status %+v, want synced, served, not failing", st)
			}
			if _, _, objects := m.Progress(); objects != 2 {
				t.Errorf("Progress: %d objects, want the 2 initial events", objects)
			}
			if k := s.kinds(); !slices.Equal(k, []string{reqStream, reqWatch}) {
				t.Fatalf("requests %q, want one streaming list, then a plain watch", k)
			}
			checkStreamRequest(t, s.requests(reqStream)[0])
			if w := s.requests(reqWatch)[0].q; w.Get("resourceVersion") != resume || w.Get("allowWatchBookmarks") != "true" || w.Has("sendInitialEvents") {
				t.Errorf("watch %v, want a plain watch from %s", w, resume)
			}
		})
	}
}

// A relist (the watch answered 410) streams again, and its end bookmark
// completes it: Relisted at the bookmark's resourceVersion, then Listed.
func TestStreamListRelist(t *testing.T) {
	s := &streamServer{
		stream: func(w http.ResponseWriter, r *http.Request, n int) {
			sw := startStream(w)
			if n == 1 {
				sw.event(watch.Added, cm("a", "30"))
				sw.event(watch.Added, cm("b", "31"))
				sw.end("40")
				return
			}
			sw.event(watch.Added, cm("a", "50"))
			sw.event(watch.Added, cm("c", "51"))
			sw.end("60")
			<-r.Context().Done() // the watch goes on
		},
		watch: func(w http.ResponseWriter, r *http.Request, n int) {
			answerExpired(w)
		},
	}
	_, rec := streamMonitor(t, s, streamMonitorOptions{})
	waitTrace(t, rec, "Upsert a@30 g1", "Upsert b@31 g1", "Listed g1",
		"Upsert a@50 g2", "Upsert c@51 g2", "Relisted @60 g2", "Listed g2")
	if k := s.kinds(); !slices.Equal(k, []string{reqStream, reqWatch, reqStream}) {
		t.Fatalf("requests %q, want a streaming list, a watch (410), a streaming list", k)
	}
	checkStreamRequest(t, s.requests(reqStream)[1])
	if w := s.requests(reqWatch)[0].q; w.Get("resourceVersion") != "40" {
		t.Errorf("watch %v, want from the bookmark's 40", w)
	}
}

// Listing is about a resource's first list (the workers park dependents
// whose owner's resource is listing, instead of reading the owner): a
// resource whose first list the graph builder applied is not listing,
// also while a later relist (after a 410) is handed on and its marker not
// applied yet, and also when the graph builder applies the first list's
// marker only after the relist completed. Before, Listing compared with
// the last complete list only: it answered (true, 0) in that window (0:
// never idle, so never given up on), and for good if the resource
// relists faster than the graph builder applies its markers (each marker
// applied after the next list completed matched nothing), parking the
// dependents of every owner of the resource missing from the graph
// instead of reading it. Unlisted keeps its stricter meaning (the last
// complete list applied): it only holds negative facts back.
func TestRelistIsNotAFirstList(t *testing.T) {
	release := make(chan struct{})
	s := &streamServer{
		stream: func(w http.ResponseWriter, r *http.Request, n int) {
			sw := startStream(w)
			if n == 1 {
				sw.event(watch.Added, cm("a", "30"))
				sw.end("40")
				return
			}
			sw.event(watch.Added, cm("a", "50"))
			sw.end("60")
			<-r.Context().Done()
		},
		watch: func(w http.ResponseWriter, r *http.Request, n int) {
			select {
			case <-release:
			case <-r.Context().Done():
				return
			}
			answerExpired(w)
		},
	}
	m, rec := streamMonitor(t, s, streamMonitorOptions{})
	waitTrace(t, rec, "Upsert a@30 g1", "Listed g1")
	if l, idle := m.Listing(configMaps.GroupKind()); !l || idle != 0 {
		t.Errorf("first list handed on, not applied: Listing = %v, %s; want true, 0", l, idle)
	}
	close(release)
	waitTrace(t, rec, "Upsert a@30 g1", "Listed g1", "Upsert a@50 g2", "Relisted @60 g2", "Listed g2")
	// The graph builder applies the first list's marker only now.
	m.Applied(rec.get()[1].Gen)
	if l, idle := m.Listing(configMaps.GroupKind()); l {
		t.Errorf("first list applied, relist handed on: Listing = %v, %s; want false: this is no first list", l, idle)
	}
	if u := m.Unlisted(); len(u) != 1 {
		t.Errorf("Unlisted() = %v with the relist handed on but not applied, want configmaps (unchanged: strict)", u)
	}
	m.Applied(rec.get()[4].Gen)
	if u := m.Unlisted(); len(u) != 0 {
		t.Errorf("Unlisted() = %v after the relist was applied, want none", u)
	}
	if l, _ := m.Listing(configMaps.GroupKind()); l {
		t.Error("Listing after the relist was applied")
	}
}

// A server that refuses streaming lists (422: WatchList off, or an
// apiserver that does not know sendInitialEvents) is listed by pages, and
// never asked to stream again, not even by the relist after a 410.
func TestStreamListRefusedListsByPagesForGood(t *testing.T) {
	for _, code := range []int{http.StatusBadRequest, http.StatusUnprocessableEntity} {
		t.Run(strconv.Itoa(code), func(t *testing.T) {
			s := &streamServer{
				stream: func(w http.ResponseWriter, r *http.Request, n int) {
					reason := metav1.StatusReasonInvalid
					if code == http.StatusBadRequest {
						reason = metav1.StatusReasonBadRequest
					}
					answerStatus(w, code, reason)
				},
				list: func(w http.ResponseWriter, r *http.Request, n int) {
					answerPage(w, strconv.Itoa(41+n), cm("x", "7"))
				},
				watch: expireFirstWatch,
			}
			_, rec := streamMonitor(t, s, streamMonitorOptions{})
			waitRequests(t, s, reqWatch, 2)
			waitTrace(t, rec, "Upsert x@7 g1", "Listed g1", "Upsert x@7 g2", "Relisted @43 g2", "Listed g2")
			if k := s.kinds(); !slices.Equal(k, []string{reqStream, reqList, reqWatch, reqList, reqWatch}) {
				t.Fatalf("requests %q, want one refused streaming list, then pages only", k)
			}
			if l := s.requests(reqList)[0].q; l.Get("limit") != strconv.Itoa(monitorListPageSize) || l.Has("watch") {
				t.Errorf("list %v, want a LIST page", l)
			}
		})
	}
}

// A streaming list that fails otherwise (429 while the watch cache
// initializes, which is not retried; a 500) is listed by pages at once;
// once a paged list completed, the next list (after a 410) streams again.
func TestStreamListFailedListsByPagesUntilOneCompletes(t *testing.T) {
	for _, code := range []int{http.StatusTooManyRequests, http.StatusInternalServerError} {
		t.Run(strconv.Itoa(code), func(t *testing.T) {
			s := &streamServer{
				stream: func(w http.ResponseWriter, r *http.Request, n int) {
					if n == 1 {
						if code == http.StatusTooManyRequests {
							w.Header().Set("Retry-After", "1") // which the REST client would honour
							answerStatus(w, code, metav1.StatusReasonTooManyRequests)
							return
						}
						answerStatus(w, code, metav1.StatusReasonInternalError)
						return
					}
					sw := startStream(w)
					sw.event(watch.Added, cm("a", "50"))
					sw.end("60")
					<-r.Context().Done()
				},
				list: func(w http.ResponseWriter, r *http.Request, n int) {
					answerPage(w, "42", cm("a", "7"))
				},
				watch: func(w http.ResponseWriter, r *http.Request, n int) {
					answerExpired(w)
				},
			}
			_, rec := streamMonitor(t, s, streamMonitorOptions{})
			waitTrace(t, rec, "Upsert a@7 g1", "Listed g1", "Upsert a@50 g2", "Relisted @60 g2", "Listed g2")
			if k := s.kinds(); !slices.Equal(k, []string{reqStream, reqList, reqWatch, reqStream}) {
				t.Fatalf("requests %q, want a failed streaming list (not retried), a paged list, a watch (410), a streaming list", k)
			}
		})
	}
}

// A stream that ends, or breaks, before its end bookmark is a list that
// failed part way: what it delivered stays, and the paged list that
// follows sweeps (even as the first list of a resource never seen). Either
// way it lists by pages until one completes, then streams again: a clean
// end is also how kube-apiserver drops a watcher that reads too slowly,
// which is no reason to page for good.
func TestStreamListIncomplete(t *testing.T) {
	for _, tc := range []struct {
		name string
		// cut: the stream ends in the middle of b's frame, not cleanly.
		cut   bool
		kinds []string
		trace []string
	}{
		{
			name:  "ended without its end bookmark",
			kinds: []string{reqStream, reqList, reqWatch, reqStream},
			trace: []string{"Upsert a@30 g1", "Upsert gone@31 g1", "Upsert a@30 g2", "Relisted @42 g2", "Listed g2", "Upsert a@50 g3", "Relisted @60 g3", "Listed g3"},
		},
		{
			name:  "cut mid-frame",
			cut:   true,
			kinds: []string{reqStream, reqList, reqWatch, reqStream},
			trace: []string{"Upsert a@30 g1", "Upsert gone@31 g1", "Upsert a@30 g2", "Relisted @42 g2", "Listed g2", "Upsert a@50 g3", "Relisted @60 g3", "Listed g3"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			runFirstStream(t, func(sw *streamWriter) {
				sw.event(watch.Added, cm("a", "30"))
				sw.event(watch.Added, cm("gone", "31"))
				if tc.cut {
					f := frame(nopTB{}, watch.Added, pomObject(nopTB{}, cm("b", "32")))
					sw.write(f[:len(f)/2])
				}
			}, tc.trace, tc.kinds)
		})
	}
}

// expireFirstWatch answers the first plain watch 410 (the monitor lists
// again) and holds later ones open.
func expireFirstWatch(w http.ResponseWriter, r *http.Request, n int) {
	if n == 1 {
		answerExpired(w)
		return
	}
	holdOpen(w, r)
}

// runFirstStream runs a monitor whose first streaming list sends what
// first sends and ends; later streaming lists send "a"@50 and end at 60;
// paged lists answer "a"@30 at 41+n; the first plain watch answers 410.
// The monitor's events must be trace, and its requests kinds.
func runFirstStream(t *testing.T, first func(*streamWriter), trace, kinds []string) {
	t.Helper()
	s := &streamServer{
		stream: func(w http.ResponseWriter, r *http.Request, n int) {
			sw := startStream(w)
			if n == 1 {
				first(sw)
				return
			}
			sw.event(watch.Added, cm("a", "50"))
			sw.end("60")
			<-r.Context().Done()
		},
		list: func(w http.ResponseWriter, r *http.Request, n int) {
			answerPage(w, strconv.Itoa(41+n), cm("a", "30"))
		},
		watch: expireFirstWatch,
	}
	_, rec := streamMonitor(t, s, streamMonitorOptions{})
	waitTrace(t, rec, trace...)
	waitUntil(t, "requests", func() bool { return len(s.kinds()) >= len(kinds) })
	if k := s.kinds(); !slices.Equal(k, kinds) {
		t.Fatalf("requests %q, want %q", k, kinds)
	}
}

// A stream cut before it delivered anything leaves nothing to sweep: the
// paged list that follows, a never-seen resource's first, has no Relisted.
func TestStreamListCutBeforeAnyEventDoesNotSweep(t *testing.T) {
	s := &streamServer{
		stream: func(w http.ResponseWriter, r *http.Request, n int) {
			f := frame(nopTB{}, watch.Added, pomObject(nopTB{}, cm("a", "30")))
			startStream(w).write(f[:3])
		},
		list: func(w http.ResponseWriter, r *http.Request, n int) {
			answerPage(w, "42", cm("a", "30"))
		},
	}
	_, rec := streamMonitor(t, s, streamMonitorOptions{})
	waitRequests(t, s, reqWatch, 1)
	waitTrace(t, rec, "Upsert a@30 g1", "Listed g1")
}

// The list gate holds a streaming list every streamBatch initial events,
// as it holds a paged list before each page (and once before it starts).
func TestStreamListGateBetweenBatches(t *testing.T) {
	const events = 2*streamBatch + 1
	s := &streamServer{
		stream: func(w http.ResponseWriter, r *http.Request, n int) {
			sw := startStream(w)
			for i := range events {
				sw.event(watch.Added, cm(fmt.Sprintf("o%d", i), strconv.Itoa(i+1)))
			}
			sw.end("90000")
			<-r.Context().Done()
		},
	}
	var mu sync.Mutex
	var at []int // upserts handed on at each call of the gate
	var rec *seqRecorder
	var ready sync.WaitGroup
	ready.Add(1)
	gate := func(context.Context) {
		ready.Wait()
		mu.Lock()
		at = append(at, rec.upserts())
		mu.Unlock()
	}
	var m *Monitors
	m, rec = streamMonitor(t, s, streamMonitorOptions{gate: gate})
	ready.Done()
	waitUntil(t, "sync", m.HasSynced)
	mu.Lock()
	defer mu.Unlock()
	if want := []int{0, streamBatch, 2 * streamBatch}; !slices.Equal(at, want) {
		t.Errorf("gate called after %v upserts, want %v", at, want)
	}
	if _, _, objects := m.Progress(); objects != events {
		t.Errorf("Progress: %d objects, want %d", objects, events)
	}
}

// PagesOnly(lister) lists by pages only: it never asks for a streaming
// list.
func TestPagesOnlyNeverStreams(t *testing.T) {
	s := &streamServer{
		list: func(w http.ResponseWriter, r *http.Request, n int) {
			answerPage(w, "42", cm("a", "7"))
		},
	}
	_, rec := streamMonitor(t, s, streamMonitorOptions{pagesOnly: true})
	waitRequests(t, s, reqWatch, 1)
	waitTrace(t, rec, "Upsert a@7 g1", "Listed g1")
	if k := s.kinds(); !slices.Equal(k, []string{reqList, reqWatch}) {
		t.Fatalf("requests %q, want a paged list and a watch", k)
	}
	if _, ok := PagesOnly(&RESTPageLister{}).(StreamLister); ok {
		t.Error("PagesOnly returned a StreamLister")
	}
}

// A server that streams JSON (no protobuf: an aggregated API) is read as
// well: the same events, the same list.
func TestStreamListJSON(t *testing.T) {
	s := &streamServer{stream: func(w http.ResponseWriter, r *http.Request, n int) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		for _, ev := range []struct {
			typ watch.EventType
			pom *metav1.PartialObjectMetadata
		}{{watch.Added, cm("a", "30")}, {watch.Added, cm("b", "31")}, {watch.Bookmark, bookmark("40", true)}, {watch.Deleted, cm("b", "41")}} {
			ev.pom.Kind, ev.pom.APIVersion = "PartialObjectMetadata", "meta.k8s.io/v1"
			_, _ = w.Write(jsonEvent(nopTB{}, ev.typ, ev.pom))
			w.(http.Flusher).Flush()
		}
		<-r.Context().Done()
	}}
	m, rec := streamMonitor(t, s, streamMonitorOptions{})
	waitTrace(t, rec, "Upsert a@30 g1", "Upsert b@31 g1", "Listed g1", "Delete b@41 g1")
	if !m.HasSynced() || !slices.Equal(s.kinds(), []string{reqStream}) {
		t.Errorf("synced %v, requests %q; want synced by the one streaming list", m.HasSynced(), s.kinds())
	}
}

// Streams that fail in band: an ERROR event among the initial events (a
// failure: pages until one completes), an end bookmark without a
// resourceVersion (nothing to resume from: pages for good), a plain
// bookmark (not the end: ignored, the list goes on).
func TestStreamListInBand(t *testing.T) {
	for _, tc := range []struct {
		name  string
		send  func(sw *streamWriter)
		kinds []string
		trace []string
	}{
		{
			name: "an ERROR 500 before the end bookmark",
			send: func(sw *streamWriter) {
				sw.event(watch.Added, cm("a", "30"))
				sw.write(frame(nopTB{}, watch.Error, statusObject(nopTB{}, &metav1.Status{Status: metav1.StatusFailure, Code: 500, Reason: metav1.StatusReasonInternalError})))
			},
			kinds: []string{reqStream, reqList, reqWatch, reqStream},
			trace: []string{"Upsert a@30 g1", "Upsert a@30 g2", "Relisted @42 g2", "Listed g2", "Upsert a@50 g3", "Relisted @60 g3", "Listed g3"},
		},
		{
			name: "an end bookmark without a resourceVersion",
			send: func(sw *streamWriter) {
				sw.event(watch.Added, cm("a", "30"))
				sw.end("")
			},
			kinds: []string{reqStream, reqList, reqWatch, reqList, reqWatch},
			trace: []string{"Upsert a@30 g1", "Upsert a@30 g2", "Relisted @42 g2", "Listed g2", "Upsert a@30 g3", "Relisted @43 g3", "Listed g3"},
		},
		{
			name: "a plain bookmark among the initial events",
			send: func(sw *streamWriter) {
				sw.event(watch.Added, cm("a", "30"))
				sw.event(watch.Bookmark, bookmark("35", false))
				sw.event(watch.Added, cm("b", "31"))
				sw.end("40")
			},
			kinds: []string{reqStream, reqWatch, reqStream},
			trace: []string{"Upsert a@30 g1", "Upsert b@31 g1", "Listed g1", "Upsert a@50 g2", "Relisted @60 g2", "Listed g2"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			runFirstStream(t, tc.send, tc.trace, tc.kinds)
		})
	}
}

// A streaming list answered 404 (a CRD deleted) is listed by pages, whose
// 404 is the complete empty list: the resource is swept and not served.
func TestStreamListNotFound(t *testing.T) {
	s := &streamServer{
		stream: func(w http.ResponseWriter, r *http.Request, n int) {
			answerStatus(w, http.StatusNotFound, metav1.StatusReasonNotFound)
		},
		list: func(w http.ResponseWriter, r *http.Request, n int) {
			answerStatus(w, http.StatusNotFound, metav1.StatusReasonNotFound)
		},
	}
	m, rec := streamMonitor(t, s, streamMonitorOptions{})
	waitTrace(t, rec, "Relisted @ g1", "Listed g1")
	if st := m.Status()[configMaps.GVR]; !st.Synced || !st.NotServed {
		t.Errorf("status %+v, want synced and not served", st)
	}
	if k := s.kinds(); len(k) < 2 || k[0] != reqStream || k[1] != reqList {
		t.Errorf("requests %q, want a streaming list, then a LIST", k)
	}
}
