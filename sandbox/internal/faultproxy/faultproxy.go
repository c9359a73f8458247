// Package faultproxy is a fault-injecting HTTP transport for tests that put
// a client (kgc) in front of a real kube-apiserver: install it with
// rest.Config.WrapTransport (or Wrap) and it sits between the client and
// the network.
//
// It can
//
//   - fail a seeded, reproducible fraction of writes (DELETE and PATCH)
//     with an injected status (409 Conflict, 500, 503 without Retry-After so
//     client-go does not retry on its own), and fail chosen requests a fixed
//     number of times first ("stubborn" objects, to observe backoff);
//   - cut every open watch stream (the client sees the stream end) and hold
//     new watch requests until released, as during a network partition;
//   - hold back the events of chosen resources' watch streams by a seeded
//     delay while other streams flow, so that one resource's watch lags
//     another's (DelayWatches);
//   - make chosen resources unreadable: their LIST, WATCH and GET requests
//     answer an injected 5xx until healed, and their open watch streams are
//     cut so that their clients relist into the failure (FailReads);
//   - make chosen resources answer as if they held no object: their LISTs
//     and WATCHes are sent with a label selector nothing matches (a real,
//     empty answer at the server's current resourceVersion), and their
//     clients are made to relist into it (EmptyLists);
//   - serve chosen resources' LISTs in small pages and fail the pages
//     after the first, and break their streaming lists (a WATCH with
//     sendInitialEvents) after as many events, as a list that fails part
//     way (PageLists);
//   - notice a watch that the apiserver answers with 410 Gone ("too old
//     resource version"), whether as the HTTP status or as an ERROR event
//     inside the stream;
//   - record every request with its outcome and time.
package faultproxy

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math/rand"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Config configures a Transport. The zero value injects nothing.
type Config struct {
	// Seed seeds the write-fault decisions; the same seed and the same
	// sequence of writes give the same faults.
	Seed int64
	// WriteFailureRate is the fraction (0..1) of eligible writes that fail.
	WriteFailureRate float64
	// Codes are the statuses injected on a failing write, chosen at random
	// (409, 500 and 503 are understood). Default: 409 and 500.
	Codes []int
	// Eligible selects the writes faults may be injected on; nil means all
	// DELETE and PATCH requests.
	Eligible func(r *http.Request) bool
	// Stubborn returns how many attempts at the write r must fail before
	// the random faults apply to it (counted per method and path). Nil
	// means none.
	Stubborn func(r *http.Request) int
}

// Request is one recorded request.
type Request struct {
	Method string
	Path   string
	Query  url.Values
	// Watch is set for watch requests (watch=true).
	Watch bool
	// Start is when the request was sent (after any hold), End when its
	// response headers arrived.
	Start, End time.Time
	// Status is the response status (0 when the request failed).
	Status int
	// Injected is set when the response was made up by the transport.
	Injected bool
	// Err is the transport error, if any.
	Err string
}

// IsWrite reports whether the request is a DELETE or a PATCH.
func (r Request) IsWrite() bool { return r.Method == http.MethodDelete || r.Method == http.MethodPatch }

// Gone is one watch that the apiserver answered with 410 Gone.
type Gone struct {
	Path  string
	Query url.Values
	At    time.Time
	// InStream is set when the 410 came as a watch ERROR event rather
	// than as the response status.
	InStream bool
}

// Transport injects faults; see the package documentation. Use Wrap to
// install it around a client's transport.
type Transport struct {
	cfg Config

	mu       sync.Mutex
	rng      *rand.Rand
	attempts map[string]int // method+path → attempts so far
	requests []Request
	gone     []Gone
	watches  map[*watchBody]struct{}
	hold     chan struct{} // non-nil while watches are held; closed on release
	cuts     int
	// delayRng draws watch delays; separate from rng so that delays do not
	// shift the write faults a seed gives.
	delayRng *rand.Rand
	delays   map[int]delayRule
	fails    map[int]failRule
	pages    map[int]pageRule
	empties  map[int]emptyRule
	relists  map[int]*relistRule
	nextRule int
}

// emptyRule makes matching reads of a collection see no object.
type emptyRule struct {
	match func(path string) bool
}

// relistRule answers the next left plain watches of matching collections
// 410 Gone.
type relistRule struct {
	match func(path string) bool
	left  int
}

// pageRule pages matching LISTs and fails their later pages.
type pageRule struct {
	match func(path string) bool
	limit int
	code  int
}

// delayRule holds back the events of matching watch streams.
type delayRule struct {
	match    func(path string) bool
	min, max time.Duration
}

// failRule makes matching reads fail.
type failRule struct {
	match func(path string) bool
	code  int
}

// New returns a Transport with cfg.
func New(cfg Config) *Transport {
	if len(cfg.Codes) == 0 {
		cfg.Codes = []int{http.StatusConflict, http.StatusInternalServerError}
	}
	return &Transport{
		cfg:      cfg,
		rng:      rand.New(rand.NewSource(cfg.Seed)),
		attempts: map[string]int{},
		watches:  map[*watchBody]struct{}{},
		delayRng: rand.New(rand.NewSource(cfg.Seed ^ 0x5deece66d)),
		delays:   map[int]delayRule{},
		fails:    map[int]failRule{},
		pages:    map[int]pageRule{},
		empties:  map[int]emptyRule{},
		relists:  map[int]*relistRule{},
	}
}

// Wrap returns rt wrapped by the transport; it has the signature of
// rest.Config.WrapTransport.
func (t *Transport) Wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripper{t: t, next: rt}
}

type roundTripper struct {
	t    *Transport
	next http.RoundTripper
}

func isWatch(q url.Values) bool {
	w := q.Get("watch")
	return w == "true" || w == "1"
}

func (rt roundTripper) RoundTrip(req *http.Request) (*http.Response, error) {
	t := rt.t
	q := req.URL.Query()
	watch := isWatch(q)
	if watch {
		if err := t.waitHold(req); err != nil {
			return nil, err
		}
	}
	code := 0
	if req.Method == http.MethodGet {
		req, q, code = t.empty(req, q, watch)
	}
	if code == 0 && !watch && req.Method == http.MethodGet {
		req, q, code = t.page(req, q)
	}
	rec := Request{Method: req.Method, Path: req.URL.Path, Query: q, Watch: watch, Start: time.Now()}

	if code == 0 {
		code = t.decide(req)
	}
	if code != 0 {
		if req.Body != nil {
			req.Body.Close()
		}
		rec.End, rec.Status, rec.Injected = time.Now(), code, true
		t.record(rec)
		return injected(req, code), nil
	}

	resp, err := rt.next.RoundTrip(req)
	rec.End = time.Now()
	if err != nil {
		rec.Err = err.Error()
		t.record(rec)
		return nil, err
	}
	rec.Status = resp.StatusCode
	t.record(rec)
	if !watch {
		return resp, nil
	}
	if resp.StatusCode == http.StatusGone {
		t.addGone(Gone{Path: req.URL.Path, Query: q, At: rec.End})
		return resp, nil
	}
	if resp.StatusCode != http.StatusOK {
		return resp, nil
	}
	resp.Body = t.track(resp.Body, req.URL.Path, q)
	if q.Get("sendInitialEvents") == "true" {
		if rule := t.pageRule(req.URL.Path); rule != nil && rule.code != 0 {
			resp.Body = &streamBreaker{rc: resp.Body, left: rule.limit}
		}
	}
	return resp, nil
}

// streamBreaker passes the first left events of a watch stream (protobuf
// frames, or JSON lines) and then fails the stream, as a connection that
// broke in the middle of a streaming list.
type streamBreaker struct {
	rc   io.ReadCloser
	br   *bufio.Reader
	left int
	buf  []byte // the rest of the current event
}

// errStreamBroken is what a broken stream's reader gets.
var errStreamBroken = fmt.Errorf("faultproxy: streaming list broken: %w", io.ErrUnexpectedEOF)

func (s *streamBreaker) Read(p []byte) (int, error) {
	if s.br == nil {
		s.br = bufio.NewReader(s.rc)
	}
	if len(s.buf) == 0 {
		if s.left <= 0 {
			return 0, errStreamBroken
		}
		first, err := s.br.Peek(1)
		if err != nil {
			return 0, err
		}
		if first[0] == '{' {
			if s.buf, err = s.br.ReadBytes('\n'); err != nil {
				return 0, err
			}
		} else {
			var size [4]byte
			if _, err := io.ReadFull(s.br, size[:]); err != nil {
				return 0, err
			}
			s.buf = make([]byte, 4+binary.BigEndian.Uint32(size[:]))
			copy(s.buf, size[:])
			if _, err := io.ReadFull(s.br, s.buf[4:]); err != nil {
				return 0, err
			}
		}
		s.left--
	}
	n := copy(p, s.buf)
	s.buf = s.buf[n:]
	return n, nil
}

func (s *streamBreaker) Close() error { return s.rc.Close() }

// decide returns the status to inject on req, or 0 to pass it through.
func (t *Transport) decide(req *http.Request) int {
	if req.Method == http.MethodGet {
		t.mu.Lock()
		defer t.mu.Unlock()
		for _, f := range t.fails {
			if f.match(req.URL.Path) {
				return f.code
			}
		}
		return 0
	}
	if req.Method != http.MethodDelete && req.Method != http.MethodPatch {
		return 0
	}
	if t.cfg.Eligible != nil && !t.cfg.Eligible(req) {
		return 0
	}
	stubborn := 0
	if t.cfg.Stubborn != nil {
		stubborn = t.cfg.Stubborn(req)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	key := req.Method + " " + req.URL.Path
	t.attempts[key]++
	if t.attempts[key] <= stubborn {
		return t.cfg.Codes[t.rng.Intn(len(t.cfg.Codes))]
	}
	if t.cfg.WriteFailureRate > 0 && t.rng.Float64() < t.cfg.WriteFailureRate {
		return t.cfg.Codes[t.rng.Intn(len(t.cfg.Codes))]
	}
	return 0
}

// injected makes up an apiserver-style error response.
func injected(req *http.Request, code int) *http.Response {
	status := metav1.Status{
		TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"},
		Status:   metav1.StatusFailure,
		Code:     int32(code),
		Message:  fmt.Sprintf("faultproxy: injected %d", code),
	}
	switch code {
	case http.StatusNotFound:
		status.Reason = metav1.StatusReasonNotFound
		status.Message = "faultproxy: injected 404: the server could not find the requested resource"
	case http.StatusGone:
		status.Reason = metav1.StatusReasonExpired
		status.Message = "faultproxy: injected 410: too old resource version"
	case http.StatusConflict:
		status.Reason = metav1.StatusReasonConflict
		status.Message = "faultproxy: injected conflict: the object has been modified; please apply your changes to the latest version and try again"
	case http.StatusServiceUnavailable:
		status.Reason = metav1.StatusReasonServiceUnavailable
	default:
		status.Reason = metav1.StatusReasonInternalError
	}
	body, _ := json.Marshal(status)
	return &http.Response{
		Status:        fmt.Sprintf("%d %s", code, http.StatusText(code)),
		StatusCode:    code,
		Proto:         "HTTP/1.1",
		ProtoMajor:    1,
		ProtoMinor:    1,
		Header:        http.Header{"Content-Type": []string{"application/json"}},
		Body:          io.NopCloser(bytes.NewReader(body)),
		ContentLength: int64(len(body)),
		Request:       req,
	}
}

func (t *Transport) record(r Request) {
	t.mu.Lock()
	t.requests = append(t.requests, r)
	t.mu.Unlock()
}

func (t *Transport) addGone(g Gone) {
	t.mu.Lock()
	t.gone = append(t.gone, g)
	t.mu.Unlock()
}

// Requests returns every request recorded so far, in the order their
// responses arrived.
func (t *Transport) Requests() []Request {
	t.mu.Lock()
	defer t.mu.Unlock()
	return slices.Clone(t.requests)
}

// Gone returns the watches answered with 410 Gone so far.
func (t *Transport) Gone() []Gone {
	t.mu.Lock()
	defer t.mu.Unlock()
	return slices.Clone(t.gone)
}

// OpenWatches returns how many watch streams are open.
func (t *Transport) OpenWatches() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.watches)
}

// HoldWatches makes new watch requests wait (until ReleaseWatches or their
// context ends) and cuts the open watch streams: their readers see the
// stream end as if the server had closed it. It returns how many streams
// were cut.
func (t *Transport) HoldWatches() int {
	t.mu.Lock()
	if t.hold == nil {
		t.hold = make(chan struct{})
	}
	open := make([]*watchBody, 0, len(t.watches))
	for w := range t.watches {
		open = append(open, w)
	}
	t.cuts++
	t.mu.Unlock()
	for _, w := range open {
		w.cut()
	}
	return len(open)
}

// ReleaseWatches lets held and new watch requests through.
func (t *Transport) ReleaseWatches() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.hold != nil {
		close(t.hold)
		t.hold = nil
	}
}

// HeldWatches is true between HoldWatches and ReleaseWatches.
func (t *Transport) HeldWatches() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.hold != nil
}

func (t *Transport) waitHold(req *http.Request) error {
	t.mu.Lock()
	hold := t.hold
	t.mu.Unlock()
	if hold == nil {
		return nil
	}
	select {
	case <-hold:
		return nil
	case <-req.Context().Done():
		return req.Context().Err()
	}
}

// DelayWatches holds back the events of every watch stream opened from now
// on whose URL path matches: each piece of the stream reaches the client a
// delay drawn from [min, max] (seeded by Config.Seed) after it left the
// server, and never before the piece ahead of it, so a stream's order is
// kept while it lags the streams of other resources. Streams already open
// are not affected (cut them with HoldWatches to apply it at once). The
// returned func removes the rule for streams opened after it is called.
func (t *Transport) DelayWatches(match func(path string) bool, min, max time.Duration) (undo func()) {
	if max < min {
		max = min
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	id := t.nextRule
	t.nextRule++
	t.delays[id] = delayRule{match: match, min: min, max: max}
	return func() {
		t.mu.Lock()
		defer t.mu.Unlock()
		delete(t.delays, id)
	}
}

// delayFor returns the delay rule for a stream on path, if one matches.
func (t *Transport) delayFor(path string) (delayRule, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	// Lowest id first: the choice must not depend on map order.
	best, found := -1, false
	for id, d := range t.delays {
		if d.match(path) && (!found || id < best) {
			best, found = id, true
		}
	}
	return t.delays[best], found
}

// drawDelay draws one delay of d.
func (t *Transport) drawDelay(d delayRule) time.Duration {
	if d.max <= d.min {
		return d.min
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return d.min + time.Duration(t.delayRng.Int63n(int64(d.max-d.min)+1))
}

// FailReads makes every GET whose URL path matches — LIST, WATCH and GET
// of a resource — answer code (say 503, without Retry-After so client-go
// does not retry on its own) until heal is called, as for a resource whose
// conversion webhook or APIService is down. Open watch streams on matching
// paths are cut so that their clients relist into the failure. Discovery
// is not affected unless match says so: the resource stays served.
func (t *Transport) FailReads(match func(path string) bool, code int) (heal func()) {
	t.mu.Lock()
	id := t.nextRule
	t.nextRule++
	t.fails[id] = failRule{match: match, code: code}
	var open []*watchBody
	for w := range t.watches {
		if match(w.path) {
			open = append(open, w)
		}
	}
	t.mu.Unlock()
	for _, w := range open {
		w.cut()
	}
	return func() {
		t.mu.Lock()
		defer t.mu.Unlock()
		delete(t.fails, id)
	}
}

// emptySelector is a label selector no object matches.
const emptySelector = "faultproxy.kgc.test/never-matches=true"

// EmptyLists makes every LIST and WATCH of a collection whose URL path
// matches answer as if the resource held no object, until heal: the
// request goes to the server with a label selector nothing matches, so
// the answer is the server's own (an empty list, an empty streaming list
// with its end bookmark, a watch that sees nothing), at its current
// resourceVersion. Open watch streams on matching paths are cut, and the
// next plain watch of the resource (not a streaming list) is answered 410
// Gone, so that its client lists again into the empty answer: an API that
// suddenly answers an empty list for a resource that has objects. GETs of
// single objects are not affected. heal does the same cut and 410, so
// that the client lists again what is there.
func (t *Transport) EmptyLists(match func(path string) bool) (heal func()) {
	t.mu.Lock()
	id := t.nextRule
	t.nextRule++
	t.empties[id] = emptyRule{match: match}
	t.mu.Unlock()
	t.forceRelist(match)
	return func() {
		t.mu.Lock()
		delete(t.empties, id)
		t.mu.Unlock()
		t.forceRelist(match)
	}
}

// forceRelist answers the next plain watch of a collection match selects
// 410 Gone, and cuts the open watch streams on matching paths.
func (t *Transport) forceRelist(match func(path string) bool) {
	t.mu.Lock()
	id := t.nextRule
	t.nextRule++
	t.relists[id] = &relistRule{match: match, left: 1}
	var open []*watchBody
	for w := range t.watches {
		if match(w.path) {
			open = append(open, w)
		}
	}
	t.mu.Unlock()
	for _, w := range open {
		w.cut()
	}
}

// empty applies the relist and empty-list rules to the read req of a
// collection: 410 for a plain watch that must relist, or the request to
// send with the selector that matches nothing.
func (t *Transport) empty(req *http.Request, q url.Values, watch bool) (*http.Request, url.Values, int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if watch && q.Get("sendInitialEvents") != "true" {
		for id, r := range t.relists {
			if r.match(req.URL.Path) && isCollection(req.URL.Path, r.match) {
				if r.left--; r.left <= 0 {
					delete(t.relists, id)
				}
				return req, q, http.StatusGone
			}
		}
	}
	for _, r := range t.empties {
		if !r.match(req.URL.Path) || !isCollection(req.URL.Path, r.match) {
			continue
		}
		q = maps.Clone(q)
		sel := emptySelector
		if cur := q.Get("labelSelector"); cur != "" {
			sel = cur + "," + sel
		}
		q.Set("labelSelector", sel)
		req = req.Clone(req.Context())
		req.URL.RawQuery = q.Encode()
		return req, q, 0
	}
	return req, q, 0
}

// isCollection reports whether path addresses the collection match
// selects, not one of its objects (whose parent path is the collection).
func isCollection(path string, match func(string) bool) bool {
	i := strings.LastIndexByte(path, '/')
	return i > 0 && !match(path[:i])
}

// PageLists makes the LISTs of matching paths be served in pages of at
// most limit objects (the request's limit is lowered to it), and, if code
// is not 0, answers every page after the first (a request with a continue
// token) with code, and breaks every streaming list (a WATCH with
// sendInitialEvents=true) after its first limit events, until undo: a
// list that fails part way, after its client saw its first objects. GETs
// of single objects are not affected.
func (t *Transport) PageLists(match func(path string) bool, limit, code int) (undo func()) {
	t.mu.Lock()
	defer t.mu.Unlock()
	id := t.nextRule
	t.nextRule++
	t.pages[id] = pageRule{match: match, limit: limit, code: code}
	return func() {
		t.mu.Lock()
		defer t.mu.Unlock()
		delete(t.pages, id)
	}
}

// page applies the first page rule matching the LIST req: it returns the
// request to send (with its limit lowered) and its query, or the status
// to answer instead.
func (t *Transport) page(req *http.Request, q url.Values) (*http.Request, url.Values, int) {
	rule := t.pageRule(req.URL.Path)
	if rule == nil {
		return req, q, 0
	}
	if q.Get("continue") != "" && rule.code != 0 {
		return req, q, rule.code
	}
	if l, err := strconv.Atoi(q.Get("limit")); err == nil && l > 0 && l <= rule.limit {
		return req, q, 0
	}
	q = maps.Clone(q)
	q.Set("limit", strconv.Itoa(rule.limit))
	req = req.Clone(req.Context())
	req.URL.RawQuery = q.Encode()
	return req, q, 0
}

// pageRule returns the first page rule matching path, or nil.
func (t *Transport) pageRule(path string) *pageRule {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, r := range t.pages {
		if r.match(path) {
			return &r
		}
	}
	return nil
}

// ResourcePath returns a matcher for the URL paths of one resource: its
// collection (cluster-wide or in any namespace) and its objects and
// subresources. The group is "" for the core API.
func ResourcePath(group, version, resource string) func(path string) bool {
	base := "/apis/" + group + "/" + version + "/"
	if group == "" {
		base = "/api/" + version + "/"
	}
	return func(path string) bool {
		rest, ok := strings.CutPrefix(path, base)
		if !ok {
			return false
		}
		parts := strings.Split(rest, "/")
		if len(parts) >= 3 && parts[0] == "namespaces" {
			parts = parts[2:]
		}
		return parts[0] == resource
	}
}

// tooOld is in the message of both 410 answers to a watch: the watch
// cache's "too old resource version: X (Y)" and etcd's "The resourceVersion
// for the provided watch is too old." It is plain text in JSON and in
// protobuf streams alike.
var tooOld = []byte("too old")

// watchBody is an open watch stream. It scans what passes for a 410 error
// event, can be cut, and, when a delay rule matched its path as it opened,
// holds back what it reads.
type watchBody struct {
	t     *Transport
	rc    io.ReadCloser
	path  string
	query url.Values

	mu      sync.Mutex
	isCut   bool
	tail    []byte // the last bytes read, for a match across reads
	seen    bool   // a 410 was recorded for this stream
	removed bool

	// Delayed streams only: a pump goroutine reads rc into queue, each
	// piece stamped with when it may be handed out; Read hands them out.
	delayed  bool
	queue    []piece
	notify   chan struct{} // signalled when a piece is queued
	cutCh    chan struct{} // closed when the stream is cut
	cutOnce  sync.Once
	leftover []byte // the unread rest of the head piece
}

// piece is a part of a delayed stream, or its end (err set).
type piece struct {
	data    []byte
	err     error
	release time.Time
}

func (t *Transport) track(rc io.ReadCloser, path string, q url.Values) io.ReadCloser {
	w := &watchBody{t: t, rc: rc, path: path, query: q, cutCh: make(chan struct{})}
	t.mu.Lock()
	t.watches[w] = struct{}{}
	t.mu.Unlock()
	if rule, ok := t.delayFor(path); ok {
		w.delayed = true
		w.notify = make(chan struct{}, 1)
		go w.pump(rule)
	}
	return w
}

// scan records a 410 seen in the stream's bytes (once per stream).
func (w *watchBody) scan(b []byte) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(b) == 0 || w.seen {
		return
	}
	buf := append(w.tail, b...)
	if bytes.Contains(buf, tooOld) {
		w.seen = true
		w.t.addGone(Gone{Path: w.path, Query: w.query, At: time.Now(), InStream: true})
	}
	keep := len(tooOld) - 1
	if len(buf) > keep {
		buf = buf[len(buf)-keep:]
	}
	w.tail = append(w.tail[:0], buf...)
}

// pump reads the server's stream as fast as it comes, so that the delay of
// a piece does not add to the next one's, and queues each piece with its
// release time. It ends with the stream (its end or error is queued too).
func (w *watchBody) pump(rule delayRule) {
	buf := make([]byte, 32<<10)
	var last time.Time
	for {
		n, err := w.rc.Read(buf)
		if n > 0 || err != nil {
			w.scan(buf[:n])
			release := time.Now().Add(w.t.drawDelay(rule))
			if release.Before(last) {
				release = last // never overtake the piece ahead
			}
			last = release
			w.mu.Lock()
			if n > 0 {
				w.queue = append(w.queue, piece{data: bytes.Clone(buf[:n]), release: release})
			}
			if err != nil {
				w.queue = append(w.queue, piece{err: err, release: release})
			}
			w.mu.Unlock()
			select {
			case w.notify <- struct{}{}:
			default:
			}
		}
		if err != nil {
			return
		}
	}
}

func (w *watchBody) Read(p []byte) (int, error) {
	if w.delayed {
		return w.readDelayed(p)
	}
	n, err := w.rc.Read(p)
	w.scan(p[:n])
	w.mu.Lock()
	cut := w.isCut
	w.mu.Unlock()
	if cut {
		// However the cut surfaced (a read on a closed body), the reader
		// sees the clean end of a stream the server closed.
		w.forget()
		return 0, io.EOF
	}
	if err != nil {
		w.forget()
	}
	return n, err
}

// readDelayed hands out the queued pieces once their release time has come.
func (w *watchBody) readDelayed(p []byte) (int, error) {
	for {
		w.mu.Lock()
		if w.isCut {
			w.mu.Unlock()
			w.forget()
			return 0, io.EOF
		}
		if len(w.leftover) > 0 {
			n := copy(p, w.leftover)
			w.leftover = w.leftover[n:]
			w.mu.Unlock()
			return n, nil
		}
		if len(w.queue) == 0 {
			w.mu.Unlock()
			select {
			case <-w.notify:
			case <-w.cutCh:
			}
			continue
		}
		head := w.queue[0]
		if wait := time.Until(head.release); wait > 0 {
			w.mu.Unlock()
			timer := time.NewTimer(wait)
			select {
			case <-timer.C:
			case <-w.cutCh:
				timer.Stop()
			}
			continue
		}
		w.queue = w.queue[1:]
		if head.err != nil {
			w.mu.Unlock()
			w.forget()
			return 0, head.err
		}
		n := copy(p, head.data)
		w.leftover = head.data[n:]
		w.mu.Unlock()
		return n, nil
	}
}

func (w *watchBody) Close() error {
	w.forget()
	if w.delayed {
		// A Read blocked on the queue returns instead of waiting forever.
		w.mu.Lock()
		w.isCut = true
		w.mu.Unlock()
	}
	w.cutOnce.Do(func() { close(w.cutCh) })
	return w.rc.Close()
}

// cut ends the stream: the next (or pending) Read returns io.EOF.
func (w *watchBody) cut() {
	w.mu.Lock()
	w.isCut = true
	w.mu.Unlock()
	w.cutOnce.Do(func() { close(w.cutCh) })
	w.forget()
	// Unblocks a Read waiting for the next event (and ends a pump).
	_ = w.rc.Close()
}

func (w *watchBody) forget() {
	w.mu.Lock()
	removed := w.removed
	w.removed = true
	w.mu.Unlock()
	if removed {
		return
	}
	w.t.mu.Lock()
	delete(w.t.watches, w)
	w.t.mu.Unlock()
}

// Writes returns the recorded writes (DELETE and PATCH).
func (t *Transport) Writes() []Request {
	var out []Request
	for _, r := range t.Requests() {
		if r.IsWrite() {
			out = append(out, r)
		}
	}
	return out
}

// String summarizes the transport's activity for logs.
func (t *Transport) String() string {
	reqs := t.Requests()
	var writes, injectedN, watches int
	for _, r := range reqs {
		if r.IsWrite() {
			writes++
		}
		if r.Injected {
			injectedN++
		}
		if r.Watch {
			watches++
		}
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return fmt.Sprintf("%d requests (%d writes, %d injected faults, %d watches), %d watch cuts, %d answered 410",
		len(reqs), writes, injectedN, watches, t.cuts, len(t.gone))
}

// HasPrefix reports whether r's path is under one of prefixes; a helper
// for Config.Eligible.
func HasPrefix(r *http.Request, prefixes ...string) bool {
	for _, p := range prefixes {
		if strings.HasPrefix(r.URL.Path, p) {
			return true
		}
	}
	return false
}
