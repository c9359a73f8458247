package sim

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"slices"
	"sort"
	"strconv"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/kgc-dev/kgc/internal/discovery"
)

// The collector's lists, as kgc makes them in production: raw pages
// (discovery.PageLister) and, for a collector that streams, streaming
// lists (discovery.StreamLister: a WATCH with sendInitialEvents).
//
// A streaming list's body is built when it is requested, from the store
// as it is then (kube-apiserver's watch cache at the request's
// resourceVersion): one ADDED event per object of the resource, in the
// order of the paged LIST, then a BOOKMARK at the server's resourceVersion
// annotated k8s.io/initial-events-end, then the end of the body — a
// legitimate server behaviour, a watch may end any time — after which the
// collector resumes with the server's ordinary watch from the bookmark's
// resourceVersion, whose events the scheduler delivers. The body is JSON
// (a sequence of {"type","object"}), as kube-apiserver sends it to a
// client that does not ask for protobuf.
//
// The bookkeeping the checks rest on (Server.seen, Server.listed) follows
// what the collector is served, as for a paged list: an initial event
// counts as seen once the body's bytes that hold it were read, and the
// resource as listed once the end bookmark's were. A stream that ends
// before its bookmark leaves the resource unlisted.
//
// Faults, as for a LIST: an injected fault of the call (FaultRate, verb
// "watchlist"), a deleted CRD (404), a resource down (503), FailLists
// (429, not consumed: the paged list the collector falls back to takes
// it, so that FailLists counts the collector's attempts to list), and
// FailListPages (the stream breaks after its first listPageCap events,
// not consumed either: the paged fallback fails part way too). A held
// resource (HoldLists) holds the stream part way: after its first
// listPageCap initial events (or before the bookmark, with fewer objects)
// the body's reader waits until the scheduler releases the resource, as a
// server whose watch cache is slow to send would; the collector's stall
// watchdog (discovery.streamStall, on the fake clock) may give it up
// first, and the collector then lists by pages for good. And the stream
// faults of FailStream, each for the next streaming list of a resource.

// StreamFault is a fault of a resource's next streaming list (FailStream).
type StreamFault string

// Stream faults.
const (
	// StreamRefused: the WATCH is refused with 422 Invalid, as by a server
	// with the WatchList feature off (the collector lists by pages for
	// good).
	StreamRefused StreamFault = "refuse"
	// StreamEOF: the body ends after k initial events, without the end
	// bookmark (kube-apiserver ending a slow watcher's watch).
	StreamEOF StreamFault = "eof"
	// StreamBroken: the body breaks after k initial events, inside the
	// next event's JSON, with a read error that is not io.EOF (a
	// connection reset).
	StreamBroken StreamFault = "break"
	// StreamError: an ERROR event (a 500 Status) after k initial events,
	// then the end of the body.
	StreamError StreamFault = "error"
)

// StreamFaults lists every StreamFault.
var StreamFaults = []StreamFault{StreamRefused, StreamEOF, StreamBroken, StreamError}

// streamFault is a resource's pending stream fault.
type streamFault struct {
	fault StreamFault
	after int // initial events served before it
}

// FailStream makes the collector's next streaming list of gr fail with
// fault after k initial events (k is ignored by StreamRefused); a list
// with fewer objects fails after all of them, before its bookmark.
func (s *Server) FailStream(gr schema.GroupResource, fault StreamFault, k int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.kinds[gr].stream = &streamFault{fault: fault, after: k}
}

// StreamedLists returns, for each streaming list of gr whose end bookmark
// the collectors were served, in order, how many objects it held.
func (s *Server) StreamedLists(gr schema.GroupResource) []int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.streamed[gr])
}

// Lister returns the PageLister and StreamLister of the collector's lists.
func (s *Server) Lister() *Lister { return &Lister{s: s} }

// Lister serves the collector's lists: raw pages (ListPage, the paged LIST
// encoded as JSON) and streaming lists (WatchList).
type Lister struct{ s *Server }

var (
	_ discovery.PageLister   = (*Lister)(nil)
	_ discovery.StreamLister = (*Lister)(nil)
)

// ListPage implements discovery.PageLister with the server's paged LIST.
func (l *Lister) ListPage(ctx context.Context, gvr schema.GroupVersionResource, opts metav1.ListOptions, buf *bytes.Buffer) error {
	page, err := l.s.list(ctx, ActorKGC, gvr, "", opts)
	if err != nil {
		return err
	}
	for i := range page.Items {
		page.Items[i].TypeMeta = partialMeta
	}
	buf.Reset()
	return json.NewEncoder(buf).Encode(page)
}

// partialMeta is the type of the objects of a metadata-only answer.
var partialMeta = metav1.TypeMeta{APIVersion: "meta.k8s.io/v1", Kind: "PartialObjectMetadata"}

// WatchList implements discovery.StreamLister: see the file's comment.
func (l *Lister) WatchList(ctx context.Context, gvr schema.GroupVersionResource, opts metav1.ListOptions) (io.ReadCloser, error) {
	s := l.s
	gr := gvr.GroupResource()
	if opts.SendInitialEvents == nil || !*opts.SendInitialEvents || !opts.Watch {
		return nil, apierrors.NewBadRequest("sim: WatchList serves streaming lists only")
	}
	s.mu.Lock()
	if r := s.kinds[gr]; r != nil {
		// The monitor is listing: not at rest until its paged fallback
		// fails, its list is held, or it watches (Server.settled).
		r.listFailed = false
	}
	s.mu.Unlock()
	if err := s.fault(ActorKGC, "watchlist", gvr, ""); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	r, err := s.kind(gvr)
	if err != nil {
		s.trace("kgc's streaming list of %s: %s", gr, apierrors.ReasonForError(err))
		return nil, err
	}
	switch {
	case r.down:
		s.trace("kgc's streaming list of %s: ServiceUnavailable (resource down)", gr)
		return nil, apierrors.NewServiceUnavailable("conversion webhook unavailable")
	case r.failLists > 0:
		// Not consumed: the collector's paged fallback takes it.
		s.trace("kgc's streaming list of %s: TooManyRequests (injected)", gr)
		return nil, apierrors.NewTooManyRequests("injected", 1)
	}
	var items []metav1.ObjectMeta
	for k, m := range s.objects {
		if k.gr == gr {
			items = append(items, *m.DeepCopy())
		}
	}
	sort.Slice(items, func(i, j int) bool {
		if items[i].Namespace != items[j].Namespace {
			return items[i].Namespace < items[j].Namespace
		}
		return items[i].Name < items[j].Name
	})
	n := len(items)
	fault, after := StreamFault(""), n
	switch {
	case r.stream != nil:
		fault, after = r.stream.fault, min(r.stream.after, n)
		r.stream = nil
	case r.failPages > 0 && n > listPageCap:
		// Not consumed: the collector's paged fallback fails part way too.
		fault, after = StreamBroken, listPageCap
	}
	if fault == StreamRefused {
		s.trace("kgc's streaming list of %s: refused, Invalid (injected)", gr)
		return nil, apierrors.NewInvalid(schema.GroupKind{Group: "meta.k8s.io", Kind: "ListOptions"}, "",
			field.ErrorList{field.Forbidden(field.NewPath("sendInitialEvents"), "sendInitialEvents is forbidden for watch unless the WatchList feature gate is enabled (injected)")})
	}
	rv := strconv.FormatInt(s.rv, 10)
	b := &streamBody{s: s, ctx: ctx, gr: gr}
	for i := range after {
		if i == min(listPageCap, n) {
			b.chunks = append(b.chunks, streamChunk{hold: true})
		}
		m := items[i]
		b.chunks = append(b.chunks, streamChunk{data: encodeEvent(watch.Added, &metav1.PartialObjectMetadata{TypeMeta: partialMeta, ObjectMeta: m}), seen: &m})
	}
	if after == min(listPageCap, n) {
		b.chunks = append(b.chunks, streamChunk{hold: true})
	}
	b.err = io.EOF
	switch fault {
	case "":
		bm := &metav1.PartialObjectMetadata{TypeMeta: partialMeta, ObjectMeta: metav1.ObjectMeta{
			ResourceVersion: rv, Annotations: map[string]string{metav1.InitialEventsAnnotationKey: "true"},
		}}
		// Not traced: the monitors list at once when they start, in an
		// order the Go scheduler picks (StreamedLists counts them).
		b.chunks = append(b.chunks, streamChunk{data: encodeEvent(watch.Bookmark, bm), listed: true})
	case StreamEOF:
		s.trace("kgc's streaming list of %s: %d of %d objects, then the body ends without the end bookmark (injected)", gr, after, n)
	case StreamBroken:
		// Inside the next event: a JSON value cut short, then a read error.
		next := encodeEvent(watch.Added, &metav1.PartialObjectMetadata{TypeMeta: partialMeta, ObjectMeta: metav1.ObjectMeta{Name: "cut"}})
		b.chunks = append(b.chunks, streamChunk{data: next[:len(next)/2]})
		b.err = errConnReset
		s.trace("kgc's streaming list of %s: %d of %d objects, then the body breaks mid-event (injected)", gr, after, n)
	case StreamError:
		st := apierrors.NewInternalError(errors.New("injected: streaming list failed")).ErrStatus
		st.APIVersion, st.Kind = "v1", "Status"
		b.chunks = append(b.chunks, streamChunk{data: encodeEvent(watch.Error, &st)})
		s.trace("kgc's streaming list of %s: %d of %d objects, then an ERROR event, InternalError (injected)", gr, after, n)
	}
	return b, nil
}

// errConnReset is the read error of a broken stream.
var errConnReset = errors.New("sim: read: connection reset by peer (injected)")

// encodeEvent returns a watch event as kube-apiserver's JSON stream holds
// it.
func encodeEvent(typ watch.EventType, obj any) []byte {
	data, err := json.Marshal(struct {
		Type   watch.EventType `json:"type"`
		Object any             `json:"object"`
	}{typ, obj})
	if err != nil {
		panic(err) // metadata always encodes
	}
	return append(data, '\n')
}

// streamChunk is one piece of a streaming list's body: an event's bytes,
// with the bookkeeping its being served implies (seen: an initial event's
// object; listed: the end bookmark), or the point where a held resource's
// stream waits (hold).
type streamChunk struct {
	data   []byte
	seen   *metav1.ObjectMeta
	listed bool
	hold   bool
}

// streamBody is a streaming list's response body.
type streamBody struct {
	s      *Server
	ctx    context.Context
	gr     schema.GroupResource
	chunks []streamChunk
	next   int
	cur    []byte
	err    error // what Read returns after the last chunk
	served int   // initial events served

	mu     sync.Mutex
	closed bool
}

// Read implements io.Reader: each chunk's bookkeeping is done when its
// first byte is served.
func (b *streamBody) Read(p []byte) (int, error) {
	for len(b.cur) == 0 {
		b.mu.Lock()
		closed := b.closed
		b.mu.Unlock()
		if closed {
			return 0, errors.New("sim: read on a closed body")
		}
		if b.next >= len(b.chunks) {
			return 0, b.err
		}
		c := b.chunks[b.next]
		b.next++
		if c.hold {
			if err := b.hold(); err != nil {
				return 0, err
			}
			continue
		}
		b.s.mu.Lock()
		if c.seen != nil {
			b.s.listServed(b.gr, c.seen)
			b.served++
		}
		if c.listed {
			if r := b.s.kinds[b.gr]; r != nil {
				r.listFailed = false
			}
			b.s.listed[b.gr] = true
			b.s.streamed[b.gr] = append(b.s.streamed[b.gr], b.served)
		}
		b.s.mu.Unlock()
		b.cur = c.data
	}
	n := copy(p, b.cur)
	b.cur = b.cur[n:]
	return n, nil
}

// hold waits, while the resource's collector lists are held (HoldLists),
// until the scheduler releases them or the stream's context ends (the
// collector stopped, or its stall watchdog gave the stream up). The
// monitor is at rest meanwhile (Server.settled).
func (b *streamBody) hold() error {
	s := b.s
	s.mu.Lock()
	r := s.kinds[b.gr]
	if r == nil || !r.holdList {
		s.mu.Unlock()
		return nil
	}
	ch := r.release
	r.heldLists++
	r.listFailed = false
	s.mu.Unlock()
	s.trace("kgc's streaming list of %s: held after %d objects", b.gr, b.served)
	select {
	case <-ch:
	case <-b.ctx.Done():
	}
	s.mu.Lock()
	r.heldLists--
	s.mu.Unlock()
	if err := b.ctx.Err(); err != nil {
		s.trace("kgc's streaming list of %s: given up while held (%v)", b.gr, err)
		return err
	}
	return nil
}

// Close implements io.Closer.
func (b *streamBody) Close() error {
	b.mu.Lock()
	b.closed = true
	b.mu.Unlock()
	return nil
}
