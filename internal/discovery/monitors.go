package discovery

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/metadata"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/kgc-dev/kgc/internal/graph"
	"github.com/kgc-dev/kgc/internal/rules"
)

// Monitors runs one list-and-watch loop per resource and feeds every
// observation to a single callback, in order per resource.
//
// A monitor keeps nothing per object: each listed or watched object is
// converted at once (leanObject) and handed to observe, whose graph is the
// only copy kgc keeps. An informer would keep a second copy in its store,
// only to diff a relist against it; here a relist instead tags its upserts
// with a fresh list generation and ends with a Relisted event, on which
// the graph removes the resource's nodes the list did not see. At 100k
// objects that halves kgc's memory, and the initial list is converted page
// by page instead of being held whole.
//
// A resource is its group and kind for the graph (graph.Relisted): at most
// one monitor runs per group and kind, so that one monitor's relist never
// sweeps what another one listed. When a resource vanishes from discovery
// (its CRD was deleted: the apiserver deleted every instance first, but the
// stopped monitor may not have delivered their delete events), its objects
// are removed from the graph once that is proven: no version of the group
// and kind is served any more and a LIST of it answers 404 (see prove). A
// resource kept because its group failed discovery is never swept.
type Monitors struct {
	client  metadata.Interface
	observe func(graph.Event)
	// pages and gate: see SetPageLister and SetListGate.
	pages PageLister
	gate  func(context.Context)
	clock clock.WithTicker // backoff; real unless SetClock

	mu      sync.Mutex
	running map[schema.GroupVersionResource]*monitor
	// started holds every group and kind a monitor was ever started for:
	// the first list of a resource never seen before has nothing to sweep,
	// and that of a resource seen before (a restart, a new preferred
	// version) sweeps what earlier monitors recorded.
	started map[schema.GroupKind]bool
	// provers run for resources that vanished from discovery, until their
	// LIST answers 404 or a monitor of their group and kind starts again.
	provers map[schema.GroupKind]*prover
	// proving counts the provers' goroutines (Stop waits for them).
	proving sync.WaitGroup
	// crdMu guards crdBacked (not mu: the CRD monitor's goroutine writes
	// it, and Sync waits for monitors to end while it holds mu).
	crdMu sync.Mutex
	// crdBacked holds the resources a CRD was observed to serve (by the
	// CRD monitor, from the CRDs' names). Only their objects are removed
	// when they vanish: see prove.
	crdBacked map[schema.GroupResource]bool
	// listedMu guards listed: the group kinds a list of which completed
	// in this process (graph.Event.Fresh). Its own lock, as crdMu: the
	// monitors' goroutines write it.
	listedMu sync.Mutex
	listed   map[schema.GroupKind]bool
	// watchMu guards watches: per group and kind, the interruptions of
	// its watch and whether the last one was verified since
	// (Unverified). Its own lock: the monitors' goroutines and the graph
	// builder's write it, the workers read it.
	watchMu sync.Mutex
	watches map[schema.GroupKind]*watchState
	// loops counts monitor goroutines that have not returned (a test hook
	// for leaks: it must equal the number of monitors).
	loops atomic.Int64
}

type monitor struct {
	resource   Resource
	apiVersion string
	res        metadata.ResourceInterface
	observe    func(graph.Event)
	// pages, when set, reads list pages raw (listPage); gate, when set,
	// is called before each page is requested (Monitors.SetListGate).
	pages PageLister
	gate  func(context.Context)
	// stream, when set (the PageLister is also a StreamLister), lists by
	// streaming first (streamList). noStream: the server refused or
	// ignored a streaming list of this resource, which is listed by pages
	// from then on; paging: a streaming list failed otherwise, and the
	// resource is listed by pages until one completes (a LIST reports
	// the error).
	stream           StreamLister
	noStream, paging bool
	// sweep: relists (and, for a restarted resource or after a first list
	// that failed part way, the first list) end with a Relisted event.
	sweep bool
	// fresh: a list of the resource completed in this process (this
	// monitor's or an earlier one's), so what it observes from now on
	// appeared while kgc watched (graph.Event.Fresh). noteListed records
	// that for the monitors that replace this one.
	fresh      bool
	noteListed func()
	// reconnecting: the last watch failed; before resuming from its
	// resourceVersion, the monitor checks that the storage did not go
	// back (storageWentBack).
	reconnecting bool
	// onInterrupt and onVerify tell the Monitors that the monitor's watch
	// was interrupted, and that the resource was verified since
	// (Monitors.Unverified). unverified and verifyGen (guarded by mu):
	// an interruption awaits verification; the generation of the first
	// list completed since, whose Listed marker, once applied, verifies
	// (0: none yet).
	onInterrupt, onVerify func()
	gen                   uint32 // the list generation of the last list
	// listGen: the generation of the last complete list, whose Listed
	// marker was handed on; appliedGen: the last one the graph builder
	// applied (Unlisted). firstGen: the generation of the first complete
	// list; firstApplied: its marker was applied (Listing: the first list
	// is in the graph).
	listGen, appliedGen, firstGen atomic.Uint32
	firstApplied                  atomic.Bool
	cancel                        context.CancelFunc
	done                          chan struct{}
	clock                         clock.WithTicker

	// initialObjects counts the objects the monitor's lists delivered
	// until its first complete list (that list's attempt only: a failed
	// attempt's count is dropped when the next one starts); Progress.
	initialObjects atomic.Int64

	mu         sync.Mutex
	synced     bool      // a list completed (a 404 counts: see Status.Synced)
	served     bool      // the last list did not answer 404
	progress   uint64    // successful list pages, watch starts and watch events
	progressAt time.Time // when the monitor started or last progressed
	lastErr    error     // the last list or watch error
	errAt      uint64    // progress when lastErr happened
	unverified bool
	verifyGen  uint32
}

// watchState is what Unverified reports of one group and kind.
type watchState struct {
	epoch      uint64
	unverified bool
}

// status reads the monitor's state. An error counts until the monitor makes
// progress after it: a list page, a watch opened, a watch event or bookmark.
func (mon *monitor) status() Status {
	mon.mu.Lock()
	defer mon.mu.Unlock()
	st := Status{Synced: mon.synced, NotServed: mon.synced && !mon.served}
	if mon.lastErr != nil && mon.progress == mon.errAt {
		st.LastError = mon.lastErr
	}
	return st
}

func (mon *monitor) progressed() {
	now := mon.clock.Now()
	mon.mu.Lock()
	mon.progress++
	mon.progressAt = now
	mon.mu.Unlock()
}

// touch restarts the idle time Listing reports without counting progress
// (which would also clear a pending error).
func (mon *monitor) touch() {
	now := mon.clock.Now()
	mon.mu.Lock()
	mon.progressAt = now
	mon.mu.Unlock()
}

func (mon *monitor) failed(err error) {
	mon.mu.Lock()
	mon.lastErr, mon.errAt = err, mon.progress
	mon.mu.Unlock()
}

// Status is one monitor's state.
type Status struct {
	// Synced: the monitor delivered a complete list of its resource at
	// least once. A LIST answering 404 counts as complete and empty: the
	// resource is not served (kube-apiserver keeps a deleted CRD's group in
	// discovery for minutes while its lists answer 404), so it holds no
	// object, and it must hold back no decision that waits for every
	// resource to be listed (design S4).
	Synced bool
	// NotServed: the monitor's last LIST answered 404. The monitor lists
	// again with backoff (no watch) until the resource is served again.
	NotServed bool
	// LastError is the monitor's last list or watch error, if it has made
	// no progress since (while it is set and unchanged, the resource is
	// failing: it cannot be listed or watched).
	LastError error
}

// Failing reports whether the monitor's list or watch fails: it has an
// error and made no progress since. A synced monitor can fail too (a
// conversion webhook that breaks later); its cache is then stale.
func (s Status) Failing() bool { return s.LastError != nil }

// Monitor states, as State reports them.
const (
	StateSynced  = "synced"
	StateSyncing = "syncing"
	StateFailing = "failing"
)

// State names the monitor's state: failing (its list or watch fails),
// synced, or syncing (initial list in progress).
func (s Status) State() string {
	switch {
	case s.Failing():
		return StateFailing
	case s.Synced:
		return StateSynced
	default:
		return StateSyncing
	}
}

// NewMonitors returns a manager whose monitors call observe for each event.
// observe must not block for long: it runs on the monitor's goroutine.
func NewMonitors(client metadata.Interface, observe func(graph.Event)) *Monitors {
	return &Monitors{
		client: client, observe: observe, clock: clock.RealClock{},
		running: make(map[schema.GroupVersionResource]*monitor),
		started: make(map[schema.GroupKind]bool),
		provers: make(map[schema.GroupKind]*prover),

		crdBacked: make(map[schema.GroupResource]bool),
		listed:    make(map[schema.GroupKind]bool),
		watches:   make(map[schema.GroupKind]*watchState),
	}
}

// SetPageLister makes the monitors started from now on read their list
// pages through pl (raw, decoded by decodePage) instead of the metadata
// client's List. Watches still use the metadata client. Call it before the
// first Sync.
func (m *Monitors) SetPageLister(pl PageLister) {
	m.mu.Lock()
	m.pages = pl
	m.mu.Unlock()
}

// SetListGate makes the monitors started from now on call gate before they
// request each list page. The graph builder's gate waits while its queue
// holds more than about a page of events: a list then goes no faster than
// the graph takes it, instead of queueing a whole resource's objects (at a
// million objects, hundreds of MB of queued events). Watch events are
// never gated. gate must return once ctx is done.
func (m *Monitors) SetListGate(gate func(context.Context)) {
	m.mu.Lock()
	m.gate = gate
	m.mu.Unlock()
}

// crdResource is the resource of CustomResourceDefinitions.
var crdResource = schema.GroupResource{Group: "apiextensions.k8s.io", Resource: "customresourcedefinitions"}

// noteCRD records the resource a CRD named <plural>.<group> serves.
func (m *Monitors) noteCRD(name string) {
	plural, group, ok := strings.Cut(name, ".")
	if !ok {
		return
	}
	m.crdMu.Lock()
	m.crdBacked[schema.GroupResource{Group: group, Resource: plural}] = true
	m.crdMu.Unlock()
}

func (m *Monitors) wasCRDBacked(gr schema.GroupResource) bool {
	m.crdMu.Lock()
	defer m.crdMu.Unlock()
	return m.crdBacked[gr]
}

// CRDBacked reports whether a CRD was observed to serve gr (its objects
// vanish with it when it is deleted).
func (m *Monitors) CRDBacked(gr schema.GroupResource) bool { return m.wasCRDBacked(gr) }

// noteListed records that a list of gk completed (graph.Event.Fresh).
func (m *Monitors) noteListed(gk schema.GroupKind) {
	m.listedMu.Lock()
	m.listed[gk] = true
	m.listedMu.Unlock()
}

// Unverified reports whether the watch of gk was interrupted (an error, a
// 410, a 404, an end well before its timeout) and the resource not
// verified since, and the interruption's number (it grows with each one).
// Verified: the watch resumed and delivered an event or bookmark (the
// storage's history goes on from where kgc was), or a complete list made
// since was applied to the graph. Until then, an absence the graph holds
// for an object of gk may have been undone under kgc: etcd restored from
// a snapshot brings back objects kgc saw deleted, under their UIDs, and
// kgc learns it only when it lists again (graph.Regression). The workers
// read such an absence again before resting a decision on it.
func (m *Monitors) Unverified(gk schema.GroupKind) (epoch uint64, unverified bool) {
	m.watchMu.Lock()
	defer m.watchMu.Unlock()
	w := m.watches[gk]
	if w == nil || !w.unverified {
		return 0, false
	}
	return w.epoch, true
}

// watchInterrupted and watchVerified record a monitor's interruption and
// verification (Unverified).
func (m *Monitors) watchInterrupted(gk schema.GroupKind) {
	m.watchMu.Lock()
	defer m.watchMu.Unlock()
	w := m.watches[gk]
	if w == nil {
		w = &watchState{}
		m.watches[gk] = w
	}
	w.epoch++
	w.unverified = true
}

func (m *Monitors) watchVerified(gk schema.GroupKind) {
	m.watchMu.Lock()
	defer m.watchMu.Unlock()
	if w := m.watches[gk]; w != nil {
		w.unverified = false
	}
}

func (m *Monitors) wasListed(gk schema.GroupKind) bool {
	m.listedMu.Lock()
	defer m.listedMu.Unlock()
	return m.listed[gk]
}

// Sync makes the running monitors match want: it starts monitors for new
// resources and stops those for resources no longer wanted, except where
// keep says a resource's absence is not to be trusted (its group failed
// discovery) and no other version of its group and kind is wanted. A Kind
// change for a running GVR restarts its monitor.
//
// A stopped monitor's group and kind that no wanted resource serves any
// more has vanished: a prover removes its objects from the graph once a
// LIST of it answers 404 (see prove). A new preferred version of a group
// and kind needs none: the new monitor's first list sweeps the objects
// the old one recorded and the list no longer has.
func (m *Monitors) Sync(ctx context.Context, want map[schema.GroupVersionResource]Resource, keep func(schema.GroupVersionResource) bool) (added, removed int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	logger := klog.FromContext(ctx)
	want = onePerGroupKind(ctx, want)
	wanted := make(map[schema.GroupKind]bool, len(want))
	for _, r := range want {
		wanted[r.GroupKind()] = true
	}
	for gvr, mon := range m.running {
		r, ok := want[gvr]
		if ok && r == mon.resource {
			continue
		}
		gk := mon.resource.GroupKind()
		if !ok && !wanted[gk] && keep != nil && keep(gvr) {
			continue
		}
		m.stopLocked(gvr, mon)
		removed++
		logger.V(2).Info("Stopped monitor", "resource", gvr.String())
		if !wanted[gk] {
			m.startProver(ctx, mon.resource)
		}
	}
	for gvr, r := range want {
		if _, ok := m.running[gvr]; ok {
			continue
		}
		// The prover's sweep must not follow the new monitor's first
		// upserts: cancelled here, under mu, it can no longer emit it.
		m.stopProver(r.GroupKind())
		mon, err := m.start(ctx, r)
		if err != nil {
			logger.Error(err, "Cannot start monitor", "resource", gvr.String())
			continue
		}
		m.running[gvr] = mon
		added++
		logger.V(2).Info("Started monitor", "resource", gvr.String())
	}
	return added, removed
}

// onePerGroupKind returns want with at most one resource per group and
// kind (the graph sweeps by group and kind: two monitors of one would sweep
// each other's objects). Discovery serves one version per group and the
// apiserver rejects CRDs whose kinds collide, so this only ever drops an
// aggregated API's duplicate, deterministically (the smallest GVR stays).
func onePerGroupKind(ctx context.Context, want map[schema.GroupVersionResource]Resource) map[schema.GroupVersionResource]Resource {
	byGK := make(map[schema.GroupKind]schema.GroupVersionResource, len(want))
	dup := false
	for gvr, r := range want {
		gk := r.GroupKind()
		if cur, ok := byGK[gk]; ok {
			dup = true
			if cur.String() < gvr.String() {
				continue
			}
		}
		byGK[gk] = gvr
	}
	if !dup {
		return want
	}
	out := make(map[schema.GroupVersionResource]Resource, len(byGK))
	for _, gvr := range byGK {
		out[gvr] = want[gvr]
	}
	for gvr := range want {
		if _, ok := out[gvr]; !ok {
			klog.FromContext(ctx).Info("Not monitoring a resource whose group and kind another resource serves", "resource", gvr.String(), "kind", want[gvr].Kind)
		}
	}
	return out
}

func (m *Monitors) start(ctx context.Context, r Resource) (*monitor, error) {
	mctx, cancel := context.WithCancel(ctx)
	mon := &monitor{
		resource:   r,
		apiVersion: r.APIVersion(),
		res:        m.client.Resource(r.GVR).Namespace(metav1.NamespaceAll),
		observe:    benchmarkShardFilter(m.observe),
		pages:      m.pages,
		gate:       m.gate,
		stream:     streamListerOf(m.pages),
		sweep:      m.started[r.GroupKind()],
		fresh:      m.wasListed(r.GroupKind()),
		noteListed: func() { m.noteListed(r.GroupKind()) },
		// A monitor replacing one whose interruption was not verified
		// yet verifies with its first list.
		unverified:  m.isUnverified(r.GroupKind()),
		onInterrupt: func() { m.watchInterrupted(r.GroupKind()) },
		onVerify:    func() { m.watchVerified(r.GroupKind()) },
		cancel:      cancel,
		done:        make(chan struct{}),
		clock:       m.clock,
		progressAt:  m.clock.Now(),
	}
	m.started[r.GroupKind()] = true
	if r.GVR.GroupResource() == crdResource {
		// Only this monitor pays for the check.
		mon.observe = func(ev graph.Event) {
			if ev.Type == graph.Upsert {
				m.noteCRD(ev.Object.Identity.Name)
			}
			m.observe(ev)
		}
	}
	m.loops.Add(1)
	go func() {
		defer close(mon.done)
		defer m.loops.Add(-1)
		mon.run(mctx)
	}()
	return mon, nil
}

func (m *Monitors) isUnverified(gk schema.GroupKind) bool {
	_, u := m.Unverified(gk)
	return u
}

// Timing of the monitors' loops. Failed lists and watches back off from
// monitorBackoffInitial to monitorBackoffMax (with jitter), like client-go's
// reflector; watches ask the server to end them after a random time
// between monitorWatchTimeout and twice that, so that connections are
// rebalanced across apiservers.
const (
	monitorBackoffInitial = 800 * time.Millisecond
	monitorBackoffMax     = 30 * time.Second
	monitorWatchTimeout   = 5 * time.Minute
)

// monitorListPageSize is the page size of the monitors' LISTs. Every page
// is a request under kgc's client budget (kube-controller-manager's: 40
// QPS): client-go's reflector pages by 500, which makes 100k objects 200
// requests, 5 s, before kgc is useful. Pages are converted as they arrive,
// so the size only bounds what one response holds in memory.
const monitorListPageSize = 5000

// listGens numbers lists across all monitors of the process (see
// graph.Event.Gen). A restarted monitor must not reuse the generation of
// the monitor it replaces, or its sweep would keep what that one saw.
var listGens atomic.Uint32

func nextListGen() uint32 {
	for {
		if g := listGens.Add(1); g != 0 {
			return g
		}
	}
}

// monitorNotServedMax caps the backoff between the lists of a resource
// whose LIST answers 404: such a list is cheap, and a CRD created again
// under the same name (a new CRD is no change the rediscoverer restarts
// monitors for) is then monitored within seconds.
const monitorNotServedMax = 5 * time.Second

func newNotServedBackoff() wait.Backoff {
	b := newMonitorBackoff()
	b.Cap = monitorNotServedMax
	return b
}

func newMonitorBackoff() wait.Backoff {
	return wait.Backoff{Duration: monitorBackoffInitial, Factor: 2, Jitter: 0.5, Steps: math.MaxInt32, Cap: monitorBackoffMax}
}

// sleep waits d or until ctx is done, and reports whether ctx is still live.
func sleep(ctx context.Context, clk clock.Clock, d time.Duration) bool {
	t := clk.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C():
		return true
	}
}

// run lists the resource, then watches it from the list's resourceVersion,
// and lists again when the watch cannot resume (410 Gone: the version was
// compacted). Errors are recorded for Status and retried with backoff.
func (mon *monitor) run(ctx context.Context) {
	logger := klog.FromContext(ctx).WithValues("resource", mon.resource.GVR.String())
	backoff := newMonitorBackoff()
	retry := func(err error, what string) bool {
		mon.failed(err)
		d := backoff.Step()
		logger.Error(err, "Monitor failed; retrying", "op", what, "after", d.Round(time.Millisecond).String())
		return sleep(ctx, mon.clock, d)
	}
	// notServed paces the lists of a resource whose LIST answers 404: it
	// has nothing to watch, and is listed again until it is served again
	// (a CRD recreated under the same name while discovery still lists it).
	notServed := newNotServedBackoff()
	rv, ok := "", true
	for ctx.Err() == nil {
		if rv == "" && mon.streams() {
			start := mon.clock.Now()
			next, events, listed, err := mon.streamList(ctx)
			if ctx.Err() != nil {
				return
			}
			if listed {
				// The list completed and its stream went on as a watch:
				// it ended as a watch ends.
				backoff, notServed = newMonitorBackoff(), newNotServedBackoff()
				if rv, ok = mon.watched(ctx, logger, start, next, events, err, &backoff, &notServed, retry); !ok {
					return
				}
				continue
			}
			// Listed by pages at once: a LIST reports why the resource
			// cannot be read (a conversion webhook's error, a 404), and
			// pages are what kgc did before streaming.
			if mon.noStream {
				logger.Info("The server does not stream lists of this resource; listing it by pages", "err", fmt.Sprint(err))
			} else {
				logger.V(2).Info("Streaming list failed; listing by pages", "err", fmt.Sprint(err))
			}
		}
		if rv == "" {
			var err error
			var served bool
			if rv, served, err = mon.list(ctx); err != nil {
				if ctx.Err() != nil || !retry(err, "list") {
					return
				}
				continue
			}
			backoff = newMonitorBackoff()
			if !served {
				logger.V(2).Info("Resource not served (its list answers 404): listed as empty")
				if !sleep(ctx, mon.clock, notServed.Step()) {
					return
				}
				rv = ""
				continue
			}
			notServed = newNotServedBackoff()
		}
		if mon.reconnecting {
			mon.reconnecting = false
			if mon.storageWentBack(ctx, logger, rv) {
				rv = ""
				continue
			}
		}
		start := mon.clock.Now()
		next, events, err := mon.watch(ctx, rv)
		if rv, ok = mon.watched(ctx, logger, start, next, events, err, &backoff, &notServed, retry); !ok {
			return
		}
	}
}

// storageWentBack reports whether a consistent read of the resource now
// answers a resourceVersion older than rv, the one its watch resumes from:
// kube-apiserver's resourceVersions are the revisions of its storage, which
// only grow, so the storage was rolled back (an etcd restore without a
// revision bump) while the watch was down. The watch would then resume
// quietly (kube-apiserver holds a watch from a future revision until it
// gets there), and skip every change of the restored history up to rv; a
// list instead shows the objects as they are, and the graph reports the
// ones whose history went back (graph.Regression). Any failure of the
// read answers false: the watch's own errors tell.
func (mon *monitor) storageWentBack(ctx context.Context, logger klog.Logger, rv string) bool {
	was, err := strconv.ParseUint(rv, 10, 64)
	if err != nil {
		return false
	}
	l, err := mon.res.List(ctx, metav1.ListOptions{Limit: 1})
	if err != nil {
		return false
	}
	now, err := strconv.ParseUint(l.ResourceVersion, 10, 64)
	if err != nil || now >= was {
		return false
	}
	logger.Info("The resource's storage went back: a consistent read answers an older resourceVersion than the watch had reached; listing again", "was", rv, "now", l.ResourceVersion)
	return true
}

// watched handles the end of a watch that started at start, saw events
// events, and returned next and err (see watch): it returns the
// resourceVersion to go on from ("" to list again), after backing off as
// the ending calls for, and false once ctx is done.
func (mon *monitor) watched(ctx context.Context, logger klog.Logger, start time.Time, next string, events int, err error, backoff, notServed *wait.Backoff, retry func(error, string) bool) (string, bool) {
	if ctx.Err() != nil {
		return "", false
	}
	// Anything but a watch that ran until its timeout is an interruption:
	// the server (or its storage) may have changed under it (Unverified).
	if err != nil || next == "" || mon.clock.Since(start) < monitorWatchTimeout*9/10 {
		mon.interrupt()
	}
	switch {
	case errors.Is(err, errWatchNotServed):
		logger.V(2).Info("Resource not served (its watch answers 404); listing again")
		if !sleep(ctx, mon.clock, notServed.Step()) {
			return "", false
		}
	case err != nil:
		if !retry(err, "watch") {
			return "", false
		}
		// The server may have come back on other storage.
		mon.reconnecting = true
	case next == "":
		logger.V(2).Info("Watch expired; listing again")
	case events == 0 && mon.clock.Since(start) < time.Second:
		// A watch the server ends at once, again and again, would
		// otherwise spin.
		if !sleep(ctx, mon.clock, backoff.Step()) {
			return "", false
		}
	default:
		*backoff = newMonitorBackoff()
	}
	return next, true
}

// interrupt records that the monitor's watch was interrupted: the
// resource is unverified until a watch resumed from where this one was
// delivers an event, or a list completed since is applied (Unverified).
func (mon *monitor) interrupt() {
	mon.mu.Lock()
	mon.unverified, mon.verifyGen = true, 0
	mon.mu.Unlock()
	if mon.onInterrupt != nil {
		mon.onInterrupt()
	}
}

// verify records that the resource was verified since its last
// interruption, if gen is the generation that verifies it (resumed: 0,
// an event of a watch resumed with no list since the interruption; else
// the generation of the list whose Listed marker was applied).
func (mon *monitor) verify(gen uint32) {
	mon.mu.Lock()
	ok := mon.unverified && mon.verifyGen == gen
	if ok {
		mon.unverified = false
	}
	mon.mu.Unlock()
	if ok && mon.onVerify != nil {
		mon.onVerify()
	}
}

// list lists the resource page by page, hands each object to observe as
// it arrives, and returns the list's resourceVersion. A list that fails
// part way leaves the pages already delivered: they are newer states of
// their objects, which is all the graph ever assumes; only the Relisted
// event that removes what the list did not see waits for a complete list.
//
// A LIST answering 404 NotFound is a complete, empty list (served is
// false): the resource is not served, so no object of it exists for the
// API, and every node the graph holds of it is removed as deleted. This is
// the answer kube-apiserver gives for a deleted CRD's resource, which it
// may keep in discovery for minutes after it deleted every instance.
func (mon *monitor) list(ctx context.Context) (rv string, served bool, err error) {
	gen := nextListGen()
	// resourceVersion "" asks for the latest state. The reflector would ask
	// for "any" ("0"), which a resource whose watch cache cannot initialize
	// (a CRD whose conversion webhook is down) answers with 429 +
	// Retry-After, retried by the REST client for many seconds before
	// anyone sees an error; "" is served from etcd then, and returns the
	// real error (the webhook failure) at once. When the cache is ready, ""
	// is served from it (consistent reads from cache), so the cost is small.
	opts := metav1.ListOptions{Limit: monitorListPageSize}
	initial := !mon.everListed()
	if initial {
		mon.initialObjects.Store(0)
	}
	delivered := false // a page of this list reached the graph
	var pl pageListing
	defer pl.release()
	for {
		if mon.gate != nil {
			mon.gate(ctx)
			// Held back by the graph builder, not by the apiserver: the
			// list is not stalled (Listing's idle time).
			mon.touch()
		}
		page, err := mon.listPage(ctx, opts, &pl)
		if apierrors.IsNotFound(err) {
			// A fresh generation no upsert carries: the sweep removes every
			// node of the resource, pages of this list included (the
			// resource vanished while it was listed). Always swept: even a
			// first list may have delivered pages before the 404.
			gen := nextListGen()
			mon.progressed()
			mon.gen = gen
			mon.observe(graph.Event{Type: graph.Relisted, Object: rules.Object{Identity: rules.Identity{APIVersion: mon.apiVersion, Kind: mon.resource.Kind}}, Gen: gen, Resource: mon.resource.GVR.Resource})
			mon.sweep = true
			mon.listed(gen)
			mon.mu.Lock()
			mon.synced, mon.served = true, false
			mon.mu.Unlock()
			return "", false, nil
		}
		if err != nil {
			if delivered {
				// This list failed part way: the pages it delivered may hold
				// objects that are gone by the time a list completes, and
				// no watch will ever tell (it starts after that list).
				// The next complete list sweeps them, even a first one.
				mon.sweep = true
			}
			return "", false, err
		}
		delivered = delivered || len(page.items) > 0
		for i := range page.items {
			mon.observe(graph.Event{Type: graph.Upsert, Object: page.items[i], Gen: gen, Fresh: mon.fresh})
			page.items[i] = rules.Object{} // let the page go as it is handed on
		}
		if initial {
			mon.initialObjects.Add(int64(len(page.items)))
		}
		mon.progressed()
		if page.continueToken == "" {
			mon.paging = false // the next list may stream again
			mon.completed(gen, page.resourceVersion)
			return page.resourceVersion, true, nil
		}
		opts.Continue = page.continueToken
	}
}

// completed ends a complete list of generation gen at resourceVersion
// rv (a LIST's last page, or a streaming list's end bookmark): the sweep
// of what the list did not see, when it sweeps, dated at rv (the evidence
// of the deletions it finds), then the Listed marker.
func (mon *monitor) completed(gen uint32, rv string) {
	mon.gen = gen
	if mon.sweep {
		mon.observe(graph.Event{Type: graph.Relisted, Object: rules.Object{Identity: rules.Identity{APIVersion: mon.apiVersion, Kind: mon.resource.Kind}, ResourceVersion: rv}, Gen: gen, Resource: mon.resource.GVR.Resource})
	}
	mon.sweep = true
	mon.listed(gen)
	mon.mu.Lock()
	mon.synced, mon.served = true, true
	mon.mu.Unlock()
}

// pageListing is what one list reuses from page to page: the response
// body's buffer and the decoded page's items.
type pageListing struct {
	body bytes.Buffer
	page listPage
}

// release drops the buffers at the end of a list: a monitor watches far
// longer than it lists.
func (pl *pageListing) release() { *pl = pageListing{} }

// listPage reads one page of the resource: through the PageLister when the
// monitors have one (decodePage: no per-object garbage), through the
// metadata client otherwise (converting each object with leanObject). The
// page returned is pl's, valid until the next call.
func (mon *monitor) listPage(ctx context.Context, opts metav1.ListOptions, pl *pageListing) (*listPage, error) {
	if mon.pages != nil {
		if err := mon.pages.ListPage(ctx, mon.resource.GVR, opts, &pl.body); err != nil {
			return nil, err
		}
		if err := decodePage(pl.body.Bytes(), mon.apiVersion, mon.resource.Kind, &pl.page); err != nil {
			return nil, fmt.Errorf("list of %s: %w", mon.resource.GVR, err)
		}
		return &pl.page, nil
	}
	l, err := mon.res.List(ctx, opts)
	if err != nil {
		return nil, err
	}
	p := &pl.page
	p.reset()
	for i := range l.Items {
		p.items = append(p.items, leanObject(&l.Items[i], mon.apiVersion, mon.resource.Kind))
		l.Items[i] = metav1.PartialObjectMetadata{} // let the page go as it is converted
	}
	p.resourceVersion, p.continueToken = l.ResourceVersion, l.Continue
	if l.RemainingItemCount != nil {
		p.remainingItemsSet, p.remainingItems = true, *l.RemainingItemCount
	}
	return p, nil
}

// everListed reports whether a list of the monitor ever completed.
func (mon *monitor) everListed() bool {
	mon.mu.Lock()
	defer mon.mu.Unlock()
	return mon.synced
}

// listed ends a complete list of generation gen: a Listed marker follows
// the list's events, and the resource counts as listed (Unlisted) once the
// graph builder applied it (Monitors.Applied), not merely once the monitor
// handed the events on: a decision that read the graph in between would
// miss what the list found. listGen (and firstGen) are set first, so
// that the marker can never be applied before its monitor knows it.
func (mon *monitor) listed(gen uint32) {
	if !mon.fresh {
		mon.fresh = true
		if mon.noteListed != nil {
			mon.noteListed()
		}
	}
	mon.mu.Lock()
	if mon.unverified && mon.verifyGen == 0 {
		mon.verifyGen = gen
	}
	mon.mu.Unlock()
	mon.firstGen.CompareAndSwap(0, gen)
	mon.listGen.Store(gen)
	mon.observe(graph.Event{Type: graph.Listed, Object: rules.Object{Identity: rules.Identity{APIVersion: mon.apiVersion, Kind: mon.resource.Kind}}, Gen: gen})
}

// watch watches the resource from rv and hands each event to observe. It
// returns the resourceVersion to resume from ("" to list again: rv is too
// old or too new for the server) and how many events it saw. A watch that
// ends without an error (its timeout, a server restart) is resumed.
func (mon *monitor) watch(ctx context.Context, rv string) (next string, events int, err error) {
	timeout := watchTimeoutSeconds()
	w, err := mon.res.Watch(ctx, metav1.ListOptions{ResourceVersion: rv, AllowWatchBookmarks: true, TimeoutSeconds: &timeout})
	if err != nil {
		switch {
		case mustRelist(err):
			return "", 0, nil
		case apierrors.IsNotFound(err):
			return "", 0, errWatchNotServed
		}
		return rv, 0, err
	}
	defer w.Stop()
	mon.progressed()
	return mon.follow(rv, 0, func(ev *streamEvent) error {
		var we watch.Event
		var ok bool
		select {
		case <-ctx.Done():
			return io.EOF
		case we, ok = <-w.ResultChan():
		}
		if !ok {
			return io.EOF
		}
		*ev = streamEvent{typ: we.Type}
		if we.Type == watch.Error {
			ev.err = apierrors.FromObject(we.Object)
			return nil
		}
		pom, isMeta := we.Object.(*metav1.PartialObjectMetadata)
		if !isMeta {
			return fmt.Errorf("watch of %s: unexpected %T in a %s event", mon.resource.GVR, we.Object, we.Type)
		}
		ev.rv = pom.ResourceVersion
		if we.Type != watch.Bookmark {
			ev.obj = leanObject(pom, mon.apiVersion, mon.resource.Kind)
		}
		return nil
	})
}

// watchTimeoutSeconds is a watch's timeout: the server ends it after a
// random time between monitorWatchTimeout and twice that.
func watchTimeoutSeconds() int64 {
	return int64(monitorWatchTimeout.Seconds() * (1 + rand.Float64()))
}

// follow hands each event next reads to observe, from a watch that has
// seen events events and is at resourceVersion rv, until next returns
// io.EOF (the watch ended: resumed from the resourceVersion returned), an
// error (returned), or an Error event (410 Gone or a version too new:
// "", to list again; 404: errWatchNotServed).
func (mon *monitor) follow(rv string, events int, next func(*streamEvent) error) (string, int, error) {
	var ev streamEvent
	for {
		if err := next(&ev); err != nil {
			if errors.Is(err, io.EOF) {
				return rv, events, nil
			}
			return rv, events, err
		}
		switch ev.typ {
		case watch.Error:
			switch {
			case mustRelist(ev.err):
				return "", events, nil
			case apierrors.IsNotFound(ev.err):
				return "", events, errWatchNotServed
			}
			return rv, events, ev.err
		case watch.Added, watch.Modified:
			mon.observe(graph.Event{Type: graph.Upsert, Object: ev.obj, Gen: mon.gen, Fresh: mon.fresh})
		case watch.Deleted:
			mon.observe(graph.Event{Type: graph.Delete, Object: ev.obj, Gen: mon.gen, Fresh: mon.fresh})
		}
		if events == 0 {
			// The storage's history goes on from rv: a watch resumed
			// after an interruption, with no list since, is verified.
			mon.verify(0)
		}
		if ev.rv != "" {
			rv = ev.rv
		}
		events++
		mon.progressed()
	}
}

// mustRelist reports whether a watch error means the watch cannot resume
// from its resourceVersion: compacted (410 Gone / Expired), or newer than
// the server has (an apiserver restarted onto a lagging etcd member).
func mustRelist(err error) bool {
	return apierrors.IsResourceExpired(err) || apierrors.IsGone(err) ||
		apierrors.HasStatusCause(err, metav1.CauseTypeResourceVersionTooLarge)
}

// errWatchNotServed is what watch returns when the server answers the
// watch with 404: the resource is no longer served (a CRD deleted while
// the watch was down). run lists it again, paced like a LIST answering
// 404, and that list decides: a LIST answering 404 empties the resource in
// the graph. Retrying the watch instead kept the deleted CRD's instances
// in the graph until discovery dropped the resource, and for good when
// that was not proven gone (found by the simulator: seed 13784).
var errWatchNotServed = errors.New("watch answered 404: resource not served")

// stopLocked stops the monitor and waits until its goroutine has ended, so
// that a resource that comes and goes (a CRD deleted and recreated) leaves
// nothing behind.
func (m *Monitors) stopLocked(gvr schema.GroupVersionResource, mon *monitor) {
	mon.cancel()
	<-mon.done
	delete(m.running, gvr)
}

// RestartFailing restarts the monitors of the resources match selects that
// are failing and never synced, or not served (their LIST answered 404),
// and returns how many it restarted. A fresh monitor lists at once instead
// of waiting out the backoff of the old one, so a resource that was just
// fixed (a CRD's conversion webhook repaired, an APIService's backend back,
// a deleted CRD created again under its name) is collected right away.
// Other monitors that synced are left alone: they resume their watch, or
// relist, on their own.
func (m *Monitors) RestartFailing(ctx context.Context, match func(schema.GroupVersionResource) bool) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := 0
	for gvr, mon := range m.running {
		st := mon.status()
		if (st.Synced || !st.Failing()) && !st.NotServed || !match(gvr) {
			continue
		}
		m.stopLocked(gvr, mon)
		fresh, err := m.start(ctx, mon.resource)
		if err != nil {
			klog.FromContext(ctx).Error(err, "Cannot restart monitor", "resource", gvr.String())
			continue
		}
		m.running[gvr] = fresh
		n++
		klog.FromContext(ctx).V(2).Info("Restarted failing monitor", "resource", gvr.String())
	}
	return n
}

// RestartAll restarts every running monitor: each lists its resource again
// (its sweep removes what the list does not see) and watches from there.
// It returns how many it restarted. What the graph holds is then what the
// API holds, whatever the watches missed: after the API's storage was
// rolled back, a watch may resume quietly past every change of the
// restored history (see storageWentBack).
func (m *Monitors) RestartAll(ctx context.Context) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := 0
	for gvr, mon := range m.running {
		m.stopLocked(gvr, mon)
		fresh, err := m.start(ctx, mon.resource)
		if err != nil {
			klog.FromContext(ctx).Error(err, "Cannot restart monitor", "resource", gvr.String())
			continue
		}
		m.running[gvr] = fresh
		n++
	}
	return n
}

// Stop stops every monitor and prover and waits for them to end.
func (m *Monitors) Stop() {
	m.mu.Lock()
	for gvr, mon := range m.running {
		m.stopLocked(gvr, mon)
	}
	for gk := range m.provers {
		m.stopProver(gk)
	}
	m.mu.Unlock()
	// Outside mu: a prover takes mu to emit its sweep.
	m.proving.Wait()
}

// A prover proves that a resource which vanished from discovery holds no
// object any more, and then removes its objects from the graph.
type prover struct {
	cancel context.CancelFunc
}

// startProver starts proving that r's group and kind are gone. Caller
// holds mu.
func (m *Monitors) startProver(ctx context.Context, r Resource) {
	gk := r.GroupKind()
	m.stopProver(gk)
	pctx, cancel := context.WithCancel(ctx)
	p := &prover{cancel: cancel}
	m.provers[gk] = p
	m.proving.Add(1)
	go func() {
		defer m.proving.Done()
		m.prove(pctx, r, p)
	}()
}

// stopProver cancels the prover of gk, if any. Caller holds mu: a prover
// emits only under mu and with its context live, so once this returns it
// emits nothing.
func (m *Monitors) stopProver(gk schema.GroupKind) {
	if p := m.provers[gk]; p != nil {
		p.cancel()
		delete(m.provers, gk)
	}
}

// prove lists r (one item) with backoff until the LIST answers 404, and
// then, if a CRD served r, removes every node of r's group and kind from
// the graph as deleted: a Relisted event with a generation no upsert
// carries. It gives up when its context ends: a monitor of the group and
// kind started again (its first list sweeps instead), or the monitors
// stopped.
//
// Only a CRD's resource is swept: an aggregated API whose APIService was
// removed may still hold its objects in its own server, and serve them
// again under the same UIDs when it is registered again; its nodes stay,
// as upstream's collector leaves them (their dependents are kept).
//
// Why this proof is enough. Sync starts a prover only when no wanted
// resource has r's group and kind (no version of it is served, and its
// group did not fail discovery), and cancels it, under mu, before a
// monitor of that group and kind starts, so its sweep is ordered before
// anything a new monitor delivers. The 404 is the apiserver's own answer
// that no object of the resource exists; for a deleted CRD it is true in
// storage too: the apiserver deletes every instance before it lets the CRD
// go (the customresourcecleanup finalizer), so their UIDs never come back,
// and a CRD created again under the name serves new objects with new UIDs.
// A LIST that succeeds (the resource is still served, discovery lagged or
// flapped) or fails otherwise (an aggregated API that is unavailable)
// proves nothing: the prover tries again.
func (m *Monitors) prove(ctx context.Context, r Resource, p *prover) {
	logger := klog.FromContext(ctx).WithValues("resource", r.GVR.String())
	res := m.client.Resource(r.GVR).Namespace(metav1.NamespaceAll)
	backoff := newMonitorBackoff()
	for {
		_, err := res.List(ctx, metav1.ListOptions{Limit: 1})
		if ctx.Err() != nil {
			return
		}
		if apierrors.IsNotFound(err) && !m.wasCRDBacked(r.GVR.GroupResource()) {
			logger.V(2).Info("Resource gone (its list answers 404), but no CRD served it: its objects stay in the graph")
			m.mu.Lock()
			if m.provers[r.GroupKind()] == p {
				delete(m.provers, r.GroupKind())
			}
			m.mu.Unlock()
			return
		}
		if apierrors.IsNotFound(err) {
			m.mu.Lock()
			if ctx.Err() == nil {
				m.observe(graph.Event{Type: graph.Relisted, Object: rules.Object{Identity: rules.Identity{APIVersion: r.APIVersion(), Kind: r.Kind}}, Gen: nextListGen(), Resource: r.GVR.Resource})
				if m.provers[r.GroupKind()] == p {
					delete(m.provers, r.GroupKind())
				}
				logger.V(2).Info("Resource gone (its list answers 404): its objects are removed from the graph")
			}
			m.mu.Unlock()
			return
		}
		logger.V(4).Info("Vanished resource still answers its list; checking again later", "err", fmt.Sprint(err))
		if !sleep(ctx, m.clock, backoff.Step()) {
			return
		}
	}
}

// Proving returns the group kinds whose vanished resources are being
// proven gone (a test hook).
func (m *Monitors) Proving() []schema.GroupKind {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]schema.GroupKind, 0, len(m.provers))
	for gk := range m.provers {
		out = append(out, gk)
	}
	return out
}

// Status reports, per running monitor, whether it has delivered its initial
// list and its current list/watch error, if any.
func (m *Monitors) Status() map[schema.GroupVersionResource]Status {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make(map[schema.GroupVersionResource]Status, len(m.running))
	for gvr, mon := range m.running {
		out[gvr] = mon.status()
	}
	return out
}

// Handlers returns the number of monitor goroutines still running; once
// Sync or Stop returns it equals Len unless one leaked.
func (m *Monitors) Handlers() int {
	return int(m.loops.Load())
}

// Settled reports whether every running monitor either delivered its
// initial list or is failing (its list or watch returned an error; the
// monitor keeps retrying it with backoff).
func (m *Monitors) Settled() bool {
	for _, st := range m.Status() {
		if !st.Synced && !st.Failing() {
			return false
		}
	}
	return true
}

// HasSynced reports whether every running monitor delivered its initial list.
func (m *Monitors) HasSynced() bool {
	for _, st := range m.Status() {
		if !st.Synced {
			return false
		}
	}
	return true
}

// Len returns the number of running monitors.
func (m *Monitors) Len() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.running)
}

// Unlisted returns the monitored resources whose monitor has not delivered
// a complete list yet: their objects may be missing from the graph, so no
// negative fact ("no dependent left") may be concluded while they could
// hold one.
//
// A resource counts as listed once the graph builder has applied the
// Listed marker of its monitor's last complete list (Applied): only then
// does the graph hold what that list saw. A relist in progress does not
// make a listed resource unlisted again.
func (m *Monitors) Unlisted() []Resource {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []Resource
	for _, mon := range m.running {
		if !mon.isListed() {
			out = append(out, mon.resource)
		}
	}
	return out
}

// isListed reports whether the graph builder applied the Listed marker of
// the monitor's last complete list (see Unlisted).
func (mon *monitor) isListed() bool {
	g := mon.listGen.Load()
	return g != 0 && mon.appliedGen.Load() == g
}

// Listing reports whether the resource of gk is being listed for the first
// time: a monitor of it runs, none of its complete lists has been applied
// to the graph yet (not even the first, while a relist is handed on:
// Unlisted is stricter), and it is not failing. idle is how long its
// list has made no progress (no page arrived since the monitor started or
// its last page); it is zero once the list is complete and only its
// events wait in the graph builder's queue. A resource nobody monitors, a
// listed one, and a failing one are not listing.
//
// The workers ask this about an owner the graph has not observed: while
// its resource is listing, the list will bring the owner (or prove by its
// Listed marker that the graph holds all there is), so a quorum read of
// the owner would be wasted.
func (m *Monitors) Listing(gk schema.GroupKind) (listing bool, idle time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, mon := range m.running {
		if mon.resource.Kind != gk.Kind || mon.resource.GVR.Group != gk.Group {
			continue
		}
		if mon.isListed() || mon.firstApplied.Load() {
			// Listed, or relisting after a first list that is in the
			// graph: not a first list (and the first list's marker may
			// have been applied only after a later list completed).
			return false, 0
		}
		mon.mu.Lock()
		failing := mon.lastErr != nil && mon.progress == mon.errAt
		synced, at := mon.synced, mon.progressAt
		mon.mu.Unlock()
		switch {
		case failing:
			return false, 0
		case synced && mon.listGen.Load() != 0:
			// Complete and handed on: waiting for the graph builder only.
			return true, 0
		}
		return true, m.clock.Since(at)
	}
	return false, 0
}

// Progress reports how far the first lists have come: monitors whose
// complete list the graph builder applied (listed, as Unlisted counts
// them) out of all running monitors (total), and the objects the monitors
// received from their lists until each one's first complete list
// (objects).
func (m *Monitors) Progress() (listed, total int, objects int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, mon := range m.running {
		total++
		if mon.isListed() {
			listed++
		}
		objects += mon.initialObjects.Load()
	}
	return listed, total, objects
}

// Applied records that the graph builder applied the Listed marker of list
// generation gen (unique across monitors).
func (m *Monitors) Applied(gen uint32) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, mon := range m.running {
		first, last := mon.firstGen.Load() == gen, mon.listGen.Load() == gen
		if first {
			mon.firstApplied.Store(true)
		}
		if last {
			mon.appliedGen.Store(gen)
			mon.verify(gen)
		}
		if first || last {
			return
		}
	}
}
