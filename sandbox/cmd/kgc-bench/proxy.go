package main

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/client-go/rest"
)

// Verbs the proxy counts. LIST, WATCH and DELETECOLLECTION are told apart
// from GET and DELETE by the path (a collection, not a named object) and the
// query (watch=true; a watch with sendInitialEvents=true is client-go's
// streaming list and counts as LIST); DISCOVERY is /api, /apis, their group/version
// documents, /version and /openapi. NSLIST is a plain LIST of one
// namespace: upstream's informers and kgc's monitors list cluster-wide,
// so a collector's namespaced LIST is a lookup (kgc answers many owner lookups of one namespace with one) and
// counts per object.
const (
	verbGet              = "GET"
	verbList             = "LIST"
	verbListNamespaced   = "NSLIST"
	verbWatch            = "WATCH"
	verbCreate           = "CREATE"
	verbDelete           = "DELETE"
	verbDeleteCollection = "DELETECOLLECTION"
	verbPatch            = "PATCH"
	verbUpdate           = "UPDATE"
	verbDiscovery        = "DISCOVERY"
	verbOther            = "OTHER"
)

// perObjectVerbs are the verbs counted in "calls per collected object": the
// requests a collector spends on individual objects. LIST, WATCH and
// DISCOVERY are the fixed cost of running at all and are reported apart.
var perObjectVerbs = []string{verbGet, verbListNamespaced, verbDelete, verbPatch, verbUpdate, verbCreate, verbDeleteCollection}

// allVerbs is the order verbs are printed in.
var allVerbs = []string{verbGet, verbListNamespaced, verbDelete, verbPatch, verbUpdate, verbCreate, verbDeleteCollection, verbList, verbWatch, verbDiscovery, verbOther}

// classify returns the verb and the resource ("configmaps",
// "apps/deployments", "namespaces"; subresources as "configmaps/status") of
// a Kubernetes API request.
func classify(method string, u *url.URL) (verb, resource string) {
	segs := strings.Split(strings.Trim(u.Path, "/"), "/")
	var rest []string
	group := ""
	switch {
	case len(segs) >= 1 && (segs[0] == "version" || segs[0] == "openapi"):
		return verbDiscovery, ""
	case len(segs) >= 1 && segs[0] == "api":
		if len(segs) <= 2 {
			return verbDiscovery, ""
		}
		rest = segs[2:]
	case len(segs) >= 1 && segs[0] == "apis":
		if len(segs) <= 3 {
			return verbDiscovery, ""
		}
		group = segs[1]
		rest = segs[3:]
	default:
		return verbOther, ""
	}
	watchPath := false
	if rest[0] == "watch" { // the deprecated /watch/ prefix
		watchPath = true
		rest = rest[1:]
		if len(rest) == 0 {
			return verbWatch, ""
		}
	}
	// namespaces/{ns}/{resource}/... unless it is the namespace object itself
	// (namespaces/{name}, namespaces/{name}/status|finalize).
	namespaced := false
	if rest[0] == "namespaces" && len(rest) >= 3 && rest[2] != "status" && rest[2] != "finalize" {
		rest = rest[2:]
		namespaced = true
	}
	resource = rest[0]
	named := len(rest) >= 2
	if len(rest) >= 3 {
		resource += "/" + rest[2]
	}
	if group != "" {
		resource = group + "/" + resource
	}
	q := u.Query()
	isWatch := watchPath || q.Get("watch") == "true" || q.Get("watch") == "1"
	// client-go's informers list by streaming: a watch that starts with
	// the current state (sendInitialEvents=true). That is their LIST.
	streamingList := isWatch && q.Get("sendInitialEvents") == "true"
	switch method {
	case http.MethodGet:
		switch {
		case streamingList:
			verb = verbList
		case isWatch:
			verb = verbWatch
		case named:
			verb = verbGet
		case namespaced:
			verb = verbListNamespaced
		default:
			verb = verbList
		}
	case http.MethodPost:
		verb = verbCreate
	case http.MethodDelete:
		if named {
			verb = verbDelete
		} else {
			verb = verbDeleteCollection
		}
	case http.MethodPatch:
		verb = verbPatch
	case http.MethodPut:
		verb = verbUpdate
	default:
		verb = verbOther
	}
	return verb, resource
}

// counts are request counts by verb and by "VERB resource".
type counts struct {
	ByVerb     map[string]int64
	ByResource map[string]int64
	// ByAgent counts requests by the product of their User-Agent (what
	// precedes the first "/": the collector's binary name, or
	// kube-controller-manager, kube-scheduler, … were any of those to
	// reach the proxy, which they must not).
	ByAgent map[string]int64
	Conns   int64 // client connections accepted
}

// sub returns c - old, for the requests of a measured phase.
func (c counts) sub(old counts) counts {
	out := counts{ByVerb: map[string]int64{}, ByResource: map[string]int64{}, ByAgent: map[string]int64{}, Conns: c.Conns - old.Conns}
	for k, v := range c.ByAgent {
		if d := v - old.ByAgent[k]; d != 0 {
			out.ByAgent[k] = d
		}
	}
	for k, v := range c.ByVerb {
		if d := v - old.ByVerb[k]; d != 0 {
			out.ByVerb[k] = d
		}
	}
	for k, v := range c.ByResource {
		if d := v - old.ByResource[k]; d != 0 {
			out.ByResource[k] = d
		}
	}
	return out
}

// perObject is the number of per-object requests (perObjectVerbs).
func (c counts) perObject() int64 {
	var n int64
	for _, v := range perObjectVerbs {
		n += c.ByVerb[v]
	}
	return n
}

// resourceSummary is "VERB resource=n" pairs, largest first, for logs;
// LIST, WATCH and DISCOVERY are summed over resources.
func (c counts) resourceSummary() string {
	type kv struct {
		k string
		v int64
	}
	var all []kv
	for k, v := range c.ByResource {
		verb, _, _ := strings.Cut(k, " ")
		if verb == verbList || verb == verbWatch || verb == verbDiscovery {
			continue // one per resource: summarised below
		}
		all = append(all, kv{k, v})
	}
	for _, verb := range []string{verbList, verbWatch, verbDiscovery} {
		if n := c.ByVerb[verb]; n > 0 {
			all = append(all, kv{verb + " (all)", n})
		}
	}
	sort.Slice(all, func(i, j int) bool {
		if all[i].v != all[j].v {
			return all[i].v > all[j].v
		}
		return all[i].k < all[j].k
	})
	var b strings.Builder
	for i, e := range all {
		if i == 8 {
			fmt.Fprintf(&b, " …(+%d)", len(all)-i)
			break
		}
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s=%d", e.k, e.v)
	}
	return b.String()
}

// countingProxy is a plain-HTTP reverse proxy on loopback in front of the
// apiserver. It forwards with the control plane's (admin, TLS) credentials
// and counts every request by verb and resource.
type countingProxy struct {
	URL string // http://127.0.0.1:port

	srv *http.Server
	ln  net.Listener

	mu         sync.Mutex
	byVerb     map[string]int64
	byResource map[string]int64
	byAgent    map[string]int64
	conns      atomic.Int64
	last       atomic.Int64 // unix nanos of the last non-watch request
	// Since mark: unix nanos of the first and the last per-object request
	// (perObjectVerbs), for the reaction time and the tail of a phase.
	markFirst, markLast atomic.Int64
	// Per-object requests in flight, and since mark their integral over
	// time (request-nanoseconds), for the mean concurrency of a phase.
	flightMu    sync.Mutex
	inFlight    int64
	flightSince time.Time
	flightInteg float64
}

// flight adds d (+1 when a per-object request starts, -1 when it ends) to
// the requests in flight.
func (p *countingProxy) flight(d int64) {
	p.flightMu.Lock()
	now := time.Now()
	if !p.flightSince.IsZero() {
		p.flightInteg += float64(p.inFlight) * float64(now.Sub(p.flightSince))
	}
	p.flightSince = now
	p.inFlight += d
	p.flightMu.Unlock()
}

// meanInFlight is the mean number of per-object requests in flight between
// mark and end.
func (p *countingProxy) meanInFlight(start, end time.Time) float64 {
	p.flightMu.Lock()
	defer p.flightMu.Unlock()
	integ := p.flightInteg
	if !p.flightSince.IsZero() && end.After(p.flightSince) {
		integ += float64(p.inFlight) * float64(end.Sub(p.flightSince))
	}
	if d := end.Sub(start); d > 0 {
		return integ / float64(d)
	}
	return 0
}

func startProxy(cfg *rest.Config) (*countingProxy, error) {
	target, err := url.Parse(cfg.Host)
	if err != nil {
		return nil, fmt.Errorf("apiserver URL: %w", err)
	}
	rt, err := rest.TransportFor(cfg)
	if err != nil {
		return nil, fmt.Errorf("apiserver transport: %w", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &countingProxy{
		URL:        "http://" + ln.Addr().String(),
		ln:         ln,
		byVerb:     map[string]int64{},
		byResource: map[string]int64{},
		byAgent:    map[string]int64{},
	}
	rp := &httputil.ReverseProxy{
		Rewrite:       func(r *httputil.ProxyRequest) { r.SetURL(target); r.Out.Host = "" },
		Transport:     rt,
		FlushInterval: -1, // watches stream
		ErrorLog:      nil,
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			w.WriteHeader(http.StatusBadGateway)
		},
	}
	p.srv = &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if perObject := p.count(r); perObject {
				p.flight(1)
				defer p.flight(-1)
			}
			rp.ServeHTTP(w, r)
		}),
		ConnState: func(_ net.Conn, s http.ConnState) {
			if s == http.StateNew {
				p.conns.Add(1)
			}
		},
		ReadHeaderTimeout: 30 * time.Second,
	}
	go func() { _ = p.srv.Serve(ln) }()
	return p, nil
}

// count counts r and reports whether it is a per-object request.
func (p *countingProxy) count(r *http.Request) (perObject bool) {
	verb, res := classify(r.Method, r.URL)
	if verb != verbWatch {
		p.last.Store(time.Now().UnixNano())
	}
	perObject = slices.Contains(perObjectVerbs, verb)
	if perObject {
		now := time.Now().UnixNano()
		p.markFirst.CompareAndSwap(0, now)
		p.markLast.Store(now)
	}
	p.mu.Lock()
	p.byVerb[verb]++
	p.byResource[verb+" "+res]++
	agent, _, _ := strings.Cut(r.UserAgent(), "/")
	p.byAgent[agent]++
	p.mu.Unlock()
	return perObject
}

// mark starts a phase for firstLast.
func (p *countingProxy) mark() {
	p.markFirst.Store(0)
	p.markLast.Store(0)
	p.flightMu.Lock()
	p.flightInteg, p.flightSince = 0, time.Now()
	p.flightMu.Unlock()
}

// firstLast returns how long after start the first and the last
// per-object request since mark arrived (zero when none did).
func (p *countingProxy) firstLast(start time.Time) (first, last time.Duration) {
	if f := p.markFirst.Load(); f != 0 {
		first = time.Unix(0, f).Sub(start)
	}
	if l := p.markLast.Load(); l != 0 {
		last = time.Unix(0, l).Sub(start)
	}
	return first, last
}

// snapshot returns the counts so far.
func (p *countingProxy) snapshot() counts {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := counts{ByVerb: make(map[string]int64, len(p.byVerb)), ByResource: make(map[string]int64, len(p.byResource)), ByAgent: make(map[string]int64, len(p.byAgent)), Conns: p.conns.Load()}
	for k, v := range p.byAgent {
		out.ByAgent[k] = v
	}
	for k, v := range p.byVerb {
		out.ByVerb[k] = v
	}
	for k, v := range p.byResource {
		out.ByResource[k] = v
	}
	return out
}

// lastRequest is when the last non-watch request arrived (zero if none).
func (p *countingProxy) lastRequest() time.Time {
	n := p.last.Load()
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, n)
}

// waitQuiet waits until no non-watch request has arrived for quiet, or max
// has passed (it then returns an error, which callers may treat as a note).
func (p *countingProxy) waitQuiet(quiet, max time.Duration) error {
	deadline := time.Now().Add(max)
	for {
		if time.Since(p.lastRequest()) >= quiet {
			return nil
		}
		if time.Now().After(deadline) {
			return errors.New("collector still busy")
		}
		time.Sleep(quiet / 10)
	}
}

// close stops the proxy and closes every connection (open watches included).
func (p *countingProxy) close() {
	_ = p.srv.Close()
}
