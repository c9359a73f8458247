package model

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/kgc-dev/kgc/sandbox/internal/faultproxy"
)

// delivery records, for one collector, what reached it over the network:
// how far it had been told about each resource (the highest
// resourceVersion up to which it had received that resource's changes,
// and when), which of its watch streams were open, and the writes it made
// (when each was sent and the resourceVersion it produced). It sits
// between the collector and the fault proxy, so it sees the delayed
// streams as the collector reads them.
//
// It is the evidence that tells the watch-lag limit (docs/correctness.md,
// "Known limits") from a bug: an owner's finalizer removal while a
// dependent still referred to it is excused only if, when the collector
// decided that removal, its watch of the dependent's resource had not yet
// delivered the change that gave the dependent its reference (see
// chaos.watchLag).
type delivery struct {
	collector int
	// followed matches the URL paths of the resources it follows: every
	// kind of the model, whether the fault proxy delays its watches or
	// not (an undelayed watch lags too, by its own latency).
	followed map[schema.GroupVersionResource]func(string) bool

	mu sync.Mutex
	// known: per resource, each resourceVersion up to which the
	// collector had received every change (a monitor's list's, a watch
	// event's after a streaming list's initial events), with the time it
	// was read.
	known map[schema.GroupVersionResource][]mark
	// lists: per resource, the LIST answers (their
	// resourceVersion and when they were read), of which only a
	// monitor's counts (the one a watch then resumes from).
	lists map[schema.GroupVersionResource][]mark
	// streams: per resource, the watch streams opened, with when
	// they opened and (zero while open) closed.
	streams map[schema.GroupVersionResource][]*span
	// writes: the collector's successful PATCH and PUT requests, by the
	// resourceVersion of the object they returned.
	writes map[uint64]write
	// byPath: the same writes by URL path, for an object whose removal
	// answered with a resourceVersion the watcher never saw (the last
	// finalizer went and the object with it).
	byPath map[string][]write
	// leasePuts: the collector's successful PUTs of Leases (the orphan
	// journal's, the leader's), by URL path, when each was sent.
	leasePuts map[string][]time.Time
	// announced: the collector's announcements of foregroundDeletion
	// finalizer removals (announcements).
	announced []announcement
	// undecoded counts bodies and frames it could not read.
	undecoded int
}

type mark struct {
	at time.Time
	rv uint64
}

type span struct{ open, closed time.Time }

type write struct {
	collector int
	method    string
	path      string
	sent      time.Time
	rv        uint64
}

func newDelivery(collector int, followed []kindInfo) *delivery {
	d := &delivery{
		collector: collector,
		followed:  map[schema.GroupVersionResource]func(string) bool{},
		known:     map[schema.GroupVersionResource][]mark{},
		lists:     map[schema.GroupVersionResource][]mark{},
		streams:   map[schema.GroupVersionResource][]*span{},
		writes:    map[uint64]write{},
		byPath:    map[string][]write{},
		leasePuts: map[string][]time.Time{},
	}
	for _, k := range followed {
		d.followed[k.gvr] = faultproxy.ResourcePath(k.gvr.Group, k.gvr.Version, k.gvr.Resource)
	}
	return d
}

// objectPath is the URL path of o's object, as the collector writes it.
func objectPath(o ident) string {
	base := "/apis/" + o.kind.gvr.Group + "/" + o.kind.gvr.Version
	if o.kind.gvr.Group == "" {
		base = "/api/" + o.kind.gvr.Version
	}
	if o.namespace != "" {
		base += "/namespaces/" + o.namespace
	}
	return base + "/" + o.kind.gvr.Resource + "/" + o.name
}

func (d *delivery) wrap(rt http.RoundTripper) http.RoundTripper {
	return deliveryRT{d: d, next: rt}
}

type deliveryRT struct {
	d    *delivery
	next http.RoundTripper
}

func (rt deliveryRT) RoundTrip(req *http.Request) (*http.Response, error) {
	d := rt.d
	sent := time.Now()
	resp, err := rt.next.RoundTrip(req)
	if err != nil || resp.StatusCode/100 != 2 {
		return resp, err
	}
	q := req.URL.Query()
	switch {
	case req.Method == http.MethodPatch || req.Method == http.MethodPut:
		if req.Method == http.MethodPut && strings.Contains(req.URL.Path, "/leases/") {
			// Noted whether or not its answer decodes: journalWriteBefore
			// must never miss one.
			d.mu.Lock()
			d.leasePuts[req.URL.Path] = append(d.leasePuts[req.URL.Path], sent)
			d.mu.Unlock()
		}
		body, err := readBody(resp)
		if err != nil {
			return resp, nil
		}
		_, rv, _, ok := decodeObject(resp.Header.Get("Content-Type"), body)
		if !ok {
			d.count()
			return resp, nil
		}
		w := write{collector: d.collector, method: req.Method, path: req.URL.Path, sent: sent, rv: rv}
		d.mu.Lock()
		d.writes[rv] = w
		d.byPath[w.path] = append(d.byPath[w.path], w)
		d.mu.Unlock()
	case req.Method == http.MethodGet:
		gvr, ok := d.resourceOf(req.URL.Path)
		if !ok {
			return resp, nil
		}
		if w := q.Get("watch"); w == "true" || w == "1" {
			s := &span{open: time.Now()}
			d.mu.Lock()
			d.streams[gvr] = append(d.streams[gvr], s)
			d.mu.Unlock()
			// A streaming list's initial events come in no order; a
			// legacy watch from "" or "0" sends them without the
			// bookmark that ends them, so it is not followed at all.
			initial := q.Get("sendInitialEvents") == "true"
			from := q.Get("resourceVersion")
			follow := initial || (from != "" && from != "0")
			if rv, err := strconv.ParseUint(from, 10, 64); err == nil && !initial {
				// A watch resuming from a list's resourceVersion: the
				// collector had that list when its last page came.
				d.mu.Lock()
				var last time.Time
				for _, l := range d.lists[gvr] {
					if l.rv == rv {
						last = l.at
					}
				}
				d.mu.Unlock()
				if !last.IsZero() {
					d.raiseAt(gvr, rv, last)
				}
			}
			resp.Body = &deliveryStream{d: d, gvr: gvr, span: s, rc: resp.Body, initial: initial, follow: follow,
				proto: strings.Contains(resp.Header.Get("Content-Type"), "protobuf")}
			return resp, nil
		}
		body, err := readBody(resp)
		if err != nil {
			return resp, nil
		}
		kind, rv, _, ok := decodeObject(resp.Header.Get("Content-Type"), body)
		switch {
		case !ok:
			d.count()
		case strings.HasSuffix(kind, "List"):
			// Not every LIST feeds the graph: the workers list a
			// namespace to look owners up, and a monitor probes its
			// storage with a one-item LIST before it resumes a watch.
			// A monitor's list is the one its next watch resumes from
			// (see deliveryRT's watch case), so it is only noted here.
			d.mu.Lock()
			d.lists[gvr] = append(d.lists[gvr], mark{at: time.Now(), rv: rv})
			d.mu.Unlock()
		}
	}
	return resp, nil
}

func (d *delivery) resourceOf(path string) (schema.GroupVersionResource, bool) {
	for gvr, match := range d.followed {
		if match(path) {
			return gvr, true
		}
	}
	return schema.GroupVersionResource{}, false
}

func (d *delivery) count() {
	d.mu.Lock()
	d.undecoded++
	d.mu.Unlock()
}

// raise records that the collector now knows gvr up to rv.
func (d *delivery) raise(gvr schema.GroupVersionResource, rv uint64) { d.raiseAt(gvr, rv, time.Now()) }

// raiseAt records that the collector knew gvr up to rv from time at on.
func (d *delivery) raiseAt(gvr schema.GroupVersionResource, rv uint64, at time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.known[gvr] = append(d.known[gvr], mark{at: at, rv: rv})
}

// readBody reads resp's body and puts an unread copy back.
func readBody(resp *http.Response) ([]byte, error) {
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	resp.Body = io.NopCloser(bytes.NewReader(body))
	return body, err
}

// protoPrefix starts every protobuf-encoded Kubernetes object.
var protoPrefix = []byte{0x6b, 0x38, 0x73, 0x00}

// decodeObject returns the kind, resourceVersion and annotations of an
// object or list, JSON or protobuf (the metadata client asks for
// PartialObjectMetadata, protobuf where the resource serves it).
func decodeObject(contentType string, body []byte) (kind string, rv uint64, annotations map[string]string, ok bool) {
	if rest, isProto := bytes.CutPrefix(body, protoPrefix); isProto {
		var u runtime.Unknown
		if err := u.Unmarshal(rest); err != nil {
			return "", 0, nil, false
		}
		kind = u.Kind
		var version string
		if strings.HasSuffix(kind, "List") {
			var l metav1.PartialObjectMetadataList
			if err := l.Unmarshal(u.Raw); err != nil {
				return "", 0, nil, false
			}
			version = l.ResourceVersion
		} else {
			var m metav1.PartialObjectMetadata
			if err := m.Unmarshal(u.Raw); err != nil {
				return "", 0, nil, false
			}
			version, annotations = m.ResourceVersion, m.Annotations
		}
		rv, err := strconv.ParseUint(version, 10, 64)
		return kind, rv, annotations, err == nil
	}
	var j struct {
		Kind     string `json:"kind"`
		Metadata struct {
			ResourceVersion string            `json:"resourceVersion"`
			Annotations     map[string]string `json:"annotations"`
		} `json:"metadata"`
	}
	if err := json.Unmarshal(body, &j); err != nil {
		return "", 0, nil, false
	}
	rv, err := strconv.ParseUint(j.Metadata.ResourceVersion, 10, 64)
	return j.Kind, rv, j.Metadata.Annotations, err == nil
}

// deliveryStream is a followed resource's watch stream as the collector
// reads it: each event, once its last byte is read, raises what the
// collector knows of the resource to the event's resourceVersion (after
// the initial events of a streaming list, to their closing bookmark's).
type deliveryStream struct {
	d       *delivery
	gvr     schema.GroupVersionResource
	span    *span
	rc      io.ReadCloser
	proto   bool
	initial bool // still in a streaming list's initial events
	follow  bool
	buf     []byte
	once    sync.Once
}

func (s *deliveryStream) Read(p []byte) (int, error) {
	n, err := s.rc.Read(p)
	if n > 0 && s.follow {
		s.buf = append(s.buf, p[:n]...)
		s.frames()
	}
	if err != nil {
		s.end()
	}
	return n, err
}

func (s *deliveryStream) Close() error {
	s.end()
	return s.rc.Close()
}

func (s *deliveryStream) end() {
	s.once.Do(func() {
		s.d.mu.Lock()
		s.span.closed = time.Now()
		s.d.mu.Unlock()
	})
}

// frames takes every complete event off buf.
func (s *deliveryStream) frames() {
	for {
		var frame []byte
		if s.proto {
			if len(s.buf) < 4 {
				return
			}
			size := int(binary.BigEndian.Uint32(s.buf[:4]))
			if len(s.buf) < 4+size {
				return
			}
			frame, s.buf = s.buf[4:4+size], s.buf[4+size:]
		} else {
			i := bytes.IndexByte(s.buf, '\n')
			if i < 0 {
				return
			}
			frame, s.buf = s.buf[:i], s.buf[i+1:]
			if len(bytes.TrimSpace(frame)) == 0 {
				continue
			}
		}
		s.event(frame)
	}
}

func (s *deliveryStream) event(frame []byte) {
	var typ string
	var rv uint64
	var annotations map[string]string
	if s.proto {
		if rest, ok := bytes.CutPrefix(frame, protoPrefix); ok {
			var u runtime.Unknown
			if err := u.Unmarshal(rest); err != nil {
				s.d.count()
				return
			}
			frame = u.Raw
		}
		var ev metav1.WatchEvent
		if err := ev.Unmarshal(frame); err != nil {
			s.d.count()
			return
		}
		var ok bool
		typ = ev.Type
		if _, rv, annotations, ok = decodeObject("", ev.Object.Raw); !ok {
			s.d.count()
			return
		}
	} else {
		var ev struct {
			Type   string          `json:"type"`
			Object json.RawMessage `json:"object"`
		}
		var ok bool
		if err := json.Unmarshal(frame, &ev); err != nil {
			s.d.count()
			return
		}
		typ = ev.Type
		if _, rv, annotations, ok = decodeObject("", ev.Object); !ok {
			s.d.count()
			return
		}
	}
	switch {
	case typ == "ERROR":
	case s.initial:
		if typ == "BOOKMARK" && annotations[metav1.InitialEventsAnnotationKey] == "true" {
			s.initial = false
			s.d.raise(s.gvr, rv)
		}
	default:
		s.d.raise(s.gvr, rv)
	}
}

// knownAt returns the highest resourceVersion up to which the collector had
// received gvr's changes at t (0: none yet, or gvr is not followed), and
// since when.
func (d *delivery) knownAt(gvr schema.GroupVersionResource, t time.Time) (uint64, time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	// Marks are appended in time order but for a list's, noted when the
	// watch resuming from it opened: the highest of those made by t.
	var rv uint64
	var since time.Time
	for _, m := range d.known[gvr] {
		if !m.at.After(t) && m.rv > rv {
			rv, since = m.rv, m.at
		}
	}
	return rv, since
}

// watchingAt says whether a watch stream of gvr was open at t.
func (d *delivery) watchingAt(gvr schema.GroupVersionResource, t time.Time) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, s := range d.streams[gvr] {
		if !s.open.After(t) && (s.closed.IsZero() || s.closed.After(t)) {
			return true
		}
	}
	return false
}

// removal finds the collector's write that produced the owner's state at rv
// (the finalizer's removal): by the resourceVersion it answered with, or,
// for an owner that went with it, the last write to its path sent before
// the watcher saw it go.
// exact says it was found by its resourceVersion.
func (d *delivery) removal(owner ident, at objState) (w write, exact, ok bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if w, ok := d.writes[at.rv]; ok && w.path == objectPath(owner) {
		return w, true, true
	}
	if !at.gone {
		return write{}, false, false
	}
	for _, x := range d.byPath[objectPath(owner)] {
		if x.sent.Before(at.seen) && (!ok || x.sent.After(w.sent)) {
			w, ok = x, true
		}
	}
	return w, false, ok
}

// journalWriteBefore returns when the collector sent its last successful
// write of the orphan journal's Lease (at path) before t.
//
// It dates an orphan finalizer removal's decision from above: kgc reads
// the graph for the last time, then records the owner in the journal
// (Journal.Record bumps the journal's generation and waits until a Lease
// write that began after the bump has succeeded), and only then sends the
// removal. The last successful journal write sent before the removal is
// that write or a later one, so it was sent after the decision; what the
// collector had received by then bounds what the decision saw. (A write
// sent before the decision could not date it: knowing less then proves
// nothing about the decision.)
func (d *delivery) journalWriteBefore(path string, t time.Time) (time.Time, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	var last time.Time
	for _, sent := range d.leasePuts[path] {
		if sent.Before(t) && sent.After(last) {
			last = sent
		}
	}
	return last, !last.IsZero()
}

// announceForeground is the line kgc logs at V(2) when it hands a
// foregroundDeletion finalizer's removal to its write, after the decision
// and before the request (internal/workers, execute).
const announceForeground = "Dependents gone; removing foregroundDeletion finalizer"

// announcements is a logr sink that notes when the collector announced a
// foregroundDeletion finalizer's removal, by the "object" it names, and
// passes every line on to next.
type announcements struct {
	d    *delivery
	next logr.LogSink
}

func (a announcements) Init(info logr.RuntimeInfo) { a.next.Init(info) }
func (a announcements) Enabled(level int) bool     { return level <= 2 || a.next.Enabled(level) }
func (a announcements) Error(err error, msg string, kv ...any) {
	a.next.Error(err, msg, kv...)
}
func (a announcements) WithValues(kv ...any) logr.LogSink {
	return announcements{d: a.d, next: a.next.WithValues(kv...)}
}
func (a announcements) WithName(name string) logr.LogSink {
	return announcements{d: a.d, next: a.next.WithName(name)}
}

func (a announcements) Info(level int, msg string, kv ...any) {
	if msg == announceForeground {
		for i := 0; i+1 < len(kv); i += 2 {
			if k, _ := kv[i].(string); k == "object" {
				at := time.Now()
				a.d.mu.Lock()
				a.d.announced = append(a.d.announced, announcement{at: at, object: fmt.Sprint(kv[i+1])})
				a.d.mu.Unlock()
			}
		}
	}
	if a.next.Enabled(level) {
		a.next.Info(level, msg, kv...)
	}
}

type announcement struct {
	at     time.Time
	object string // rules.Identity's String: "Kind.apiVersion ns/name (uid U)"
}

// logger returns next with the collector's announcements noted.
func (d *delivery) logger(next logr.Logger) logr.Logger {
	sink := next.GetSink()
	if sink == nil { // logr.Discard
		sink = discardSink{}
	}
	return logr.New(announcements{d: d, next: sink})
}

// discardSink drops every line.
type discardSink struct{}

func (discardSink) Init(logr.RuntimeInfo)            {}
func (discardSink) Enabled(int) bool                 { return false }
func (discardSink) Info(int, string, ...any)         {}
func (discardSink) Error(error, string, ...any)      {}
func (s discardSink) WithValues(...any) logr.LogSink { return s }
func (s discardSink) WithName(string) logr.LogSink   { return s }

// announcedBefore returns when the collector last announced, before t, the
// removal of owner's foregroundDeletion finalizer. The announcement comes
// after the decision (and before any wait for a write slot, the client's
// rate limiter or the request): it dates the decision from above, closer
// than the request's send.
func (d *delivery) announcedBefore(owner ident, t time.Time) (time.Time, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	var last time.Time
	suffix := " (uid " + string(owner.uid) + ")"
	for _, x := range d.announced {
		if strings.HasSuffix(x.object, suffix) && x.at.Before(t) && x.at.After(last) {
			last = x.at
		}
	}
	return last, !last.IsZero()
}

func (d *delivery) String() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	var parts []string
	for gvr, ms := range d.known {
		parts = append(parts, fmt.Sprintf("%s: %d rises", gvr.Resource, len(ms)))
	}
	return fmt.Sprintf("collector #%d: %d writes, %s, %d undecoded", d.collector, len(d.writes), strings.Join(parts, ", "), d.undecoded)
}
