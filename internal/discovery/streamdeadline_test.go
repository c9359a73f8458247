package discovery

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/kgc-dev/kgc/internal/graph"
)

// A streaming list whose response never starts (no status line, no
// headers: an aggregated API whose backend accepted the connection and
// hangs; kube-aggregator proxies a watch without a timeout, as it is a
// long-running request) sends nothing before its end bookmark just as a
// stream that stalls after its headers does: it is given up after
// streamStall and the resource listed by pages. Before, the watchdog ran
// only once the headers had arrived, and such a monitor stayed neither
// synced nor failing for as long as the backend hung (RestartFailing
// never restarts it, Settled never holds), where the paged LIST it
// replaced got a 504 from the apiserver's request timeout.
func TestStreamListStallBeforeHeadersGivesUp(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Now())
	var cancelled atomic.Bool
	s := &streamServer{
		stream: func(w http.ResponseWriter, r *http.Request, n int) {
			if n > 1 {
				sw := startStream(w)
				sw.end("60")
				<-r.Context().Done()
				return
			}
			<-r.Context().Done() // never answers
			cancelled.Store(true)
		},
		list: func(w http.ResponseWriter, r *http.Request, n int) {
			answerPage(w, "42", cm("a", "7"))
		},
	}
	m, rec := streamMonitor(t, s, streamMonitorOptions{clock: clk})
	waitRequests(t, s, reqStream, 1)
	deadline := time.Now().Add(monitorTimeout)
	stepped := time.Duration(0)
	for len(s.requests(reqList)) == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("no paged list %s after a streaming list that never answered (stepped the clock %s): requests %q, status %+v",
				monitorTimeout, stepped, s.kinds(), m.Status()[configMaps.GVR])
		}
		if clk.HasWaiters() {
			clk.Step(streamStall)
			stepped += streamStall
		}
		time.Sleep(10 * time.Millisecond)
	}
	if stepped < streamStall {
		t.Errorf("given up after %s, before streamStall", stepped)
	}
	waitUntil(t, "the hung request to be cancelled", cancelled.Load)
	waitRequests(t, s, reqWatch, 1)
	waitTrace(t, rec, "Upsert a@7 g1", "Listed g1")
	if k := s.kinds(); !slices.Equal(k, []string{reqStream, reqList, reqWatch}) {
		t.Fatalf("requests %q, want a streaming list given up, a paged list, a watch", k)
	}
}

// readTracker wraps a RESTPageLister's streaming list bodies so that a
// test knows when the monitor waits for the server: a Read of the body in
// progress (the watch decoder reads the body only to decode the next
// event, with the watchdog armed).
type readTracker struct {
	*RESTPageLister
	reading atomic.Int32
}

func (rt *readTracker) WatchList(ctx context.Context, gvr schema.GroupVersionResource, opts metav1.ListOptions) (io.ReadCloser, error) {
	body, err := rt.RESTPageLister.WatchList(ctx, gvr, opts)
	if err != nil {
		return nil, err
	}
	return &trackedBody{body, rt}, nil
}

type trackedBody struct {
	io.ReadCloser
	rt *readTracker
}

func (b *trackedBody) Read(p []byte) (int, error) {
	b.rt.reading.Add(1)
	defer b.rt.reading.Add(-1)
	return b.ReadCloser.Read(p)
}

// waitStreamWaits waits until the monitor has handed on upserts objects
// and waits for the server's next bytes, or has given its stream up (a
// paged list was asked for). A Read in progress once the upserts are
// handed on, with the server writing nothing more, is the wait for the
// next event: the watchdog counts the clock's steps from then on.
func waitStreamWaits(t *testing.T, s *streamServer, rec *seqRecorder, rt *readTracker, upserts int) {
	t.Helper()
	waitUntil(t, fmt.Sprintf("the monitor to wait for the server after %d objects", upserts), func() bool {
		return len(s.requests(reqList)) > 0 || rec.upserts() >= upserts && rt.reading.Load() > 0
	})
}

// stepUntilPaged steps clk by streamStall/20 every 20 ms until the
// monitor asks for a paged list, and returns how far it stepped. A stream
// whose events are far less than 20 ms apart thus waits much less than
// streamStall between two of them.
func stepUntilPaged(t *testing.T, s *streamServer, clk *clocktesting.FakeClock) time.Duration {
	t.Helper()
	deadline := time.Now().Add(monitorTimeout)
	stepped := time.Duration(0)
	for len(s.requests(reqList)) == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("no paged list after %s (the fake clock stepped %s): requests %q", monitorTimeout, stepped, s.kinds())
		}
		clk.Step(streamStall / 20)
		stepped += streamStall / 20
		time.Sleep(20 * time.Millisecond)
	}
	return stepped
}

// A server that ignores sendInitialEvents but not allowWatchBookmarks
// answers with the objects as ADDED events and then a plain bookmark now
// and then (a minute apart for kube-apiserver's cacher). Before, every
// bookmark restarted the watchdog, so the stream never stalled and never
// completed, and the monitor stayed neither synced nor failing until the
// server's watch timeout ended it (5–10 min; for good if the server
// ignores timeoutSeconds too). kube-apiserver never sends a plain
// bookmark before the one that ends the initial events of a streaming
// list (its cacher annotates the first bookmark a watch-list watcher
// sends; its etcd watcher queues the annotated one right after its
// initial list): a plain bookmark, like an initial event, renews nothing,
// and the stream is given up after streamStall of waiting and listed by
// pages for good.
func TestStreamListPlainBookmarksGiveUp(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Now())
	s := &streamServer{
		stream: func(w http.ResponseWriter, r *http.Request, n int) {
			sw := startStream(w)
			sw.event(watch.Added, cm("a", "30"))
			tick := time.NewTicker(2 * time.Millisecond)
			defer tick.Stop()
			for rv := 31; ; rv++ {
				select {
				case <-r.Context().Done():
					return
				case <-tick.C:
					sw.event(watch.Bookmark, bookmark(strconv.Itoa(rv), false))
				}
			}
		},
		list: func(w http.ResponseWriter, r *http.Request, n int) {
			answerPage(w, strconv.Itoa(41+n), cm("a", "30"))
		},
		watch: expireFirstWatch,
	}
	m, rec := streamMonitor(t, s, streamMonitorOptions{clock: clk})
	waitRequests(t, s, reqStream, 1)
	if stepped := stepUntilPaged(t, s, clk); stepped < streamStall {
		t.Errorf("given up after %s, before streamStall", stepped)
	}
	waitRequests(t, s, reqWatch, 2)
	waitTrace(t, rec, "Upsert a@30 g1", "Upsert a@30 g2", "Relisted @42 g2", "Listed g2", "Upsert a@30 g3", "Relisted @43 g3", "Listed g3")
	if k := s.kinds(); !slices.Equal(k, []string{reqStream, reqList, reqWatch, reqList, reqWatch}) {
		t.Fatalf("requests %q, want a streaming list given up, then pages only", k)
	}
	if !m.HasSynced() {
		t.Error("not synced by pages")
	}
}

// A server that ignores sendInitialEvents and sends no bookmark streams
// the objects as ADDED events, and then the objects created since, as
// ADDED events too. Before, every event restarted the watchdog, so a
// resource created into now and then never stalled, never completed, and
// stayed unlisted until the server's watch timeout. The watchdog's budget
// is renewed by whole batches of streamBatch initial events only: a
// stream that sends fewer in streamStall of waiting is given up and
// listed by pages for good.
func TestStreamListTrickleOfAddedEventsGivesUp(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Now())
	s := &streamServer{
		stream: func(w http.ResponseWriter, r *http.Request, n int) {
			sw := startStream(w)
			tick := time.NewTicker(2 * time.Millisecond)
			defer tick.Stop()
			for i := 30; ; i++ {
				select {
				case <-r.Context().Done():
					return
				case <-tick.C:
					sw.event(watch.Added, cm(fmt.Sprintf("o%d", i), strconv.Itoa(i)))
				}
			}
		},
		list: func(w http.ResponseWriter, r *http.Request, n int) {
			answerPage(w, strconv.Itoa(41+n), cm("a", "30"))
		},
		watch: expireFirstWatch,
	}
	m, rec := streamMonitor(t, s, streamMonitorOptions{clock: clk})
	waitRequests(t, s, reqStream, 1)
	if stepped := stepUntilPaged(t, s, clk); stepped < streamStall {
		t.Errorf("given up after %s, before streamStall", stepped)
	}
	waitRequests(t, s, reqWatch, 2)
	waitUntil(t, "sync by pages", m.HasSynced)
	if k := s.kinds(); !slices.Equal(k, []string{reqStream, reqList, reqWatch, reqList, reqWatch}) {
		t.Fatalf("requests %q, want a streaming list given up, then pages only", k)
	}
	evs := trace(rec.get())
	if tail := evs[max(0, len(evs)-6):]; !slices.Equal(tail, []string{"Upsert a@30 g2", "Relisted @42 g2", "Listed g2", "Upsert a@30 g3", "Relisted @43 g3", "Listed g3"}) {
		t.Errorf("events end with %q, want two paged lists, the first sweeping what the stream delivered", tail)
	}
}

// A server that ignores sendInitialEvents on a resource created into
// faster than streamBatch objects per streamStall, and sends bookmarks: the
// batches would renew the watchdog's budget for as long as the creations
// go on, but the plain bookmark shows that the server does not end the
// initial events with the annotated one kube-apiserver sends first: from
// it, nothing renews the budget, and the end bookmark must come within
// streamStall of waiting.
func TestStreamListBusyServerGivesUpAfterPlainBookmark(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Now())
	release := make(chan struct{}, 100)
	s := &streamServer{
		stream: func(w http.ResponseWriter, r *http.Request, n int) {
			sw := startStream(w)
			sw.event(watch.Added, cm("a", "30"))
			sw.event(watch.Bookmark, bookmark("31", false))
			for i := 0; ; i++ {
				select {
				case <-r.Context().Done():
					return
				case <-release:
				}
				for j := range streamBatch {
					sw.event(watch.Added, cm(fmt.Sprintf("o%d-%d", i, j), strconv.Itoa(32+i*streamBatch+j)))
				}
			}
		},
		list: func(w http.ResponseWriter, r *http.Request, n int) {
			answerPage(w, "42", cm("a", "30"))
		},
	}
	rt := &readTracker{}
	_, rec := streamMonitor(t, s, streamMonitorOptions{clock: clk, reads: rt})
	const step = streamStall / 3
	stepped, batches := time.Duration(0), 0
	for ; len(s.requests(reqList)) == 0; batches++ {
		if batches > 10 {
			t.Fatalf("the stream was not given up after %d batches of %d ADDED events, %s apart, following a plain bookmark: requests %q", batches, streamBatch, step, s.kinds())
		}
		waitStreamWaits(t, s, rec, rt, 1+batches*streamBatch)
		clk.Step(step)
		stepped += step
		release <- struct{}{}
	}
	if stepped < streamStall {
		t.Errorf("given up after %s, before streamStall", stepped)
	}
	waitRequests(t, s, reqWatch, 1)
	if k := s.kinds(); !slices.Equal(k, []string{reqStream, reqList, reqWatch}) {
		t.Fatalf("requests %q, want a streaming list given up, a paged list, a watch", k)
	}
}

// A slow but honest server: the initial events of a big resource come
// in batches, each within streamStall of waiting, and in all for far
// longer than streamStall (kube-apiserver streams a million objects in
// 14 s on this machine; ten million on a loaded server take minutes).
// The list is not given up: it completes by the stream and goes on as the
// watch.
func TestStreamListSlowHonestStreamCompletes(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Now())
	const batches, tail = 3, 10
	release := make(chan struct{}, batches+1)
	var cancelled atomic.Bool
	s := &streamServer{
		stream: func(w http.ResponseWriter, r *http.Request, n int) {
			sw := startStream(w)
			for i := range batches + 1 {
				select {
				case <-r.Context().Done():
					cancelled.Store(true)
					return
				case <-release:
				}
				k := streamBatch
				if i == batches {
					k = tail
				}
				for j := range k {
					sw.event(watch.Added, cm(fmt.Sprintf("o%d-%d", i, j), strconv.Itoa(1+i*streamBatch+j)))
				}
			}
			sw.end("90000")
			<-r.Context().Done()
			cancelled.Store(true)
		},
	}
	rt := &readTracker{}
	m, rec := streamMonitor(t, s, streamMonitorOptions{clock: clk, reads: rt})
	const step = streamStall * 2 / 3
	stepped := time.Duration(0)
	for i := range batches + 1 {
		waitStreamWaits(t, s, rec, rt, i*streamBatch)
		clk.Step(step)
		stepped += step
		release <- struct{}{}
	}
	waitUntil(t, "sync", m.HasSynced)
	if k := s.kinds(); !slices.Equal(k, []string{reqStream}) || cancelled.Load() {
		t.Fatalf("requests %q (stream cancelled: %v), want the one streaming list, going on as the watch", k, cancelled.Load())
	}
	evs := trace(rec.get())
	if n := batches*streamBatch + tail; len(evs) != n+1 || evs[n] != "Listed g1" {
		t.Errorf("%d events (last %q), want %d upserts then Listed", len(evs), evs[len(evs)-1], n)
	}
	if stepped <= streamStall {
		t.Errorf("the stream waited %s in all, want more than streamStall", stepped)
	}
}

// A server that ignores sendInitialEvents (an aggregated API whose own
// storage serves watches: the generic handler lets the option through to
// it) streams an ordinary watch: live MODIFIED and DELETED events, and
// never the end bookmark. On a busy resource the watchdog never fires,
// and the monitor stayed neither synced nor failing until the server's
// watch timeout (5–10 min, at every list). kube-apiserver sends only
// ADDED events before the end bookmark (its cacher's initial events are
// the store's objects as ADDED, its etcd watcher's those of a LIST), so a
// MODIFIED or DELETED before it means the server does not stream lists:
// the event is handed on (it is true), the stream given up and the
// resource listed by pages for good.
func TestStreamListIgnoredByBusyServer(t *testing.T) {
	for _, typ := range []watch.EventType{watch.Modified, watch.Deleted} {
		t.Run(string(typ), func(t *testing.T) {
			s := &streamServer{
				stream: func(w http.ResponseWriter, r *http.Request, n int) {
					sw := startStream(w)
					tick := time.NewTicker(5 * time.Millisecond)
					defer tick.Stop()
					for rv := 30; ; rv++ {
						select {
						case <-r.Context().Done():
							return
						case <-tick.C:
							sw.event(typ, cm("a", strconv.Itoa(rv)))
						}
					}
				},
				list: func(w http.ResponseWriter, r *http.Request, n int) {
					answerPage(w, "42", cm("a", "7"))
				},
				watch: expireFirstWatch,
			}
			m, rec := streamMonitor(t, s, streamMonitorOptions{})
			waitUntil(t, "sync by pages", m.HasSynced)
			waitRequests(t, s, reqWatch, 2)
			evs := trace(rec.get())
			first := "Upsert a@30 g1"
			if typ == watch.Deleted {
				first = "Delete a@30 g1"
			}
			if len(evs) < 3 || evs[0] != first || evs[1] != "Upsert a@7 g2" {
				t.Fatalf("events %q, want the stream's first event handed on, then the paged list", evs)
			}
			if k := s.kinds(); !slices.Equal(k, []string{reqStream, reqList, reqWatch, reqList, reqWatch}) {
				t.Fatalf("requests %q, want a streaming list given up at its first event, then pages only", k)
			}
		})
	}
}

// A stream that sends nothing for streamStall before its end bookmark is
// given up (its request cancelled) and the resource listed by pages, the
// initial events it delivered swept by that list.
func TestStreamListStallGivesUp(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Now())
	var cancelled atomic.Bool
	s := &streamServer{
		stream: func(w http.ResponseWriter, r *http.Request, n int) {
			sw := startStream(w)
			sw.event(watch.Added, cm("a", "30"))
			<-r.Context().Done()
			cancelled.Store(true)
		},
		list: func(w http.ResponseWriter, r *http.Request, n int) {
			answerPage(w, "42")
		},
	}
	_, rec := streamMonitor(t, s, streamMonitorOptions{clock: clk})
	waitUntil(t, "the initial event", func() bool { return rec.upserts() == 1 })
	stepped := time.Duration(0)
	waitUntil(t, "the stalled stream to be given up", func() bool {
		if cancelled.Load() {
			return true
		}
		if len(s.requests(reqList)) == 0 && clk.HasWaiters() {
			// The watchdog's timer (nothing else of the monitor's waits
			// on the clock while it streams).
			clk.Step(streamStall)
			stepped += streamStall
		}
		return false
	})
	if stepped < streamStall {
		t.Errorf("given up after %s, before streamStall", stepped)
	}
	waitRequests(t, s, reqWatch, 1)
	waitTrace(t, rec, "Upsert a@30 g1", "Relisted @42 g2", "Listed g2")
	if k := s.kinds(); !slices.Equal(k, []string{reqStream, reqList, reqWatch}) {
		t.Fatalf("requests %q, want a streaming list given up, a paged list, a watch", k)
	}
}

// The time a streaming list spends at the list gate is not a stall: a
// gate that holds it for longer than streamStall does not make it give
// up.
func TestStreamListGateTimeIsNoStall(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Now())
	var cancelled atomic.Bool
	const events = streamBatch + 1
	s := &streamServer{
		stream: func(w http.ResponseWriter, r *http.Request, n int) {
			sw := startStream(w)
			for i := range events {
				sw.event(watch.Added, cm(fmt.Sprintf("o%d", i), strconv.Itoa(i+1)))
			}
			sw.end("9000")
			<-r.Context().Done()
			cancelled.Store(true)
		},
	}
	entered, release := make(chan struct{}), make(chan struct{})
	var calls atomic.Int32
	gate := func(ctx context.Context) {
		if calls.Add(1) != 2 { // the first between batches
			return
		}
		close(entered)
		select {
		case <-release:
		case <-ctx.Done():
		}
	}
	m, rec := streamMonitor(t, s, streamMonitorOptions{gate: gate, clock: clk})
	select {
	case <-entered:
	case <-time.After(monitorTimeout):
		t.Fatal("the gate was not called between batches")
	}
	waitUntil(t, "the watchdog's timer", clk.HasWaiters)
	clk.Step(2 * streamStall)
	// The watchdog read its timer: it either armed a new one (not
	// stalled) or gave the stream up.
	waitUntil(t, "the watchdog to look", func() bool { return clk.HasWaiters() || cancelled.Load() })
	if cancelled.Load() {
		t.Fatal("the stream was given up while it waited at the list gate")
	}
	close(release)
	waitUntil(t, "sync", m.HasSynced)
	evs := trace(rec.get())
	if len(evs) != events+1 || evs[events] != "Listed g1" || evs[0] != "Upsert o0@1 g1" || evs[events-1] != fmt.Sprintf("Upsert o%d@%d g1", events-1, events) {
		t.Errorf("%d events (last %q), want %d upserts then Listed", len(evs), evs[len(evs)-1], events)
	}
	if k := s.kinds(); !slices.Equal(k, []string{reqStream}) || cancelled.Load() {
		t.Errorf("requests %q (stream cancelled: %v), want the one streaming list, going on as the watch", k, cancelled.Load())
	}
}

// answerCount answers a LIST with limit 1 as kube-apiserver does: one
// object and the count of the others (remainingItemCount).
func answerCount(w http.ResponseWriter, count int64) {
	rest := count - 1
	l := &metav1.PartialObjectMetadataList{ListMeta: metav1.ListMeta{ResourceVersion: "42", Continue: "more", RemainingItemCount: &rest}, Items: []metav1.PartialObjectMetadata{*cm("a", "7")}}
	w.Header().Set("Content-Type", contentTypeProtobuf)
	_, _ = w.Write(protobufBody(nopTB{}, l))
}

// A server that ignores sendInitialEvents, sends no bookmark and creates
// objects faster than any budget of waiting time notices: each batch of
// 5,000 ADDED events renews the watchdog. Once the stream has sent
// streamProbeAfter events, kgc reads the resource's count (100 objects)
// and gives the stream up at twice that plus streamProbeAfter events,
// however fast they come; the resource is listed by pages for good.
func TestStreamListFloodBeyondTheCountGivesUp(t *testing.T) {
	var sent atomic.Int64
	s := &streamServer{
		stream: func(w http.ResponseWriter, r *http.Request, n int) {
			sw := startStream(w)
			for i := 30; r.Context().Err() == nil; i++ {
				sw.event(watch.Added, cm(fmt.Sprintf("o%d", i), strconv.Itoa(i)))
				sent.Add(1)
			}
		},
		list: func(w http.ResponseWriter, r *http.Request, n int) {
			answerPage(w, "42", cm("a", "7"))
		},
		count: func(w http.ResponseWriter, r *http.Request, n int) { answerCount(w, 100) },
		watch: expireFirstWatch,
	}
	m, rec := streamMonitor(t, s, streamMonitorOptions{})
	waitUntil(t, "sync by pages", m.HasSynced)
	waitRequests(t, s, reqWatch, 2)
	if k := s.kinds(); !slices.Equal(k, []string{reqStream, reqList, reqWatch, reqList, reqWatch}) {
		t.Fatalf("requests %q, want a streaming list given up, then pages only", k)
	}
	if n := len(s.requests(reqCount)); n != 1 {
		t.Errorf("the count was read %d times, want once", n)
	}
	bound := streamCountBound(100)
	handed := 0
	for _, ev := range rec.get() {
		if ev.Type == graph.Upsert && ev.Object.Identity.Name != "a" {
			handed++
		}
	}
	if handed != int(bound)+1 {
		t.Errorf("the stream handed on %d objects (the server sent %d), want it given up at the first beyond %d", handed, sent.Load(), bound)
	}
}

// An honest streaming list of a resource bigger than streamProbeAfter has
// its count read once, and completes: its initial events are its objects.
func TestStreamListBigHonestStreamCompletes(t *testing.T) {
	const objects = 3 * streamBatch
	s := &streamServer{
		stream: func(w http.ResponseWriter, r *http.Request, n int) {
			sw := startStream(w)
			for i := range objects {
				sw.event(watch.Added, cm(fmt.Sprintf("o%d", i), strconv.Itoa(30+i)))
			}
			sw.end(strconv.Itoa(30 + objects))
			<-r.Context().Done()
		},
		count: func(w http.ResponseWriter, r *http.Request, n int) { answerCount(w, objects) },
	}
	m, rec := streamMonitor(t, s, streamMonitorOptions{})
	waitUntil(t, "sync by streaming", m.HasSynced)
	if k := s.kinds(); !slices.Equal(k, []string{reqStream}) {
		t.Fatalf("requests %q, want the one streaming list", k)
	}
	if n := len(s.requests(reqCount)); n != 1 {
		t.Errorf("the count was read %d times, want once", n)
	}
	if n := rec.upserts(); n != objects {
		t.Errorf("%d objects handed on, want %d", n, objects)
	}
}
