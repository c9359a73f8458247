package discovery

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/metadata"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/kgc-dev/kgc/internal/graph"
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
	// pages, gate and shard: see SetPageLister, SetListGate and SetShard.
	pages PageLister
	gate  func(context.Context)
	shard *Shard
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
	// crdMu guards crdBacked and crdLive (not mu: the CRD monitor's
	// goroutine writes them, and Sync waits for monitors to end while it
	// holds mu).
	crdMu sync.Mutex
	// crdBacked holds the resources a CRD was observed to serve (by the
	// CRD monitor, from the CRDs' names). Only their objects are removed
	// when they vanish: see prove.
	crdBacked map[schema.GroupResource]bool
	// crdLive counts, per resource, the observations of its CRD alive
	// (not being deleted): a LIST of the resource that answered 404
	// before the latest one is out of date (see monitor.servedAgain).
	crdLive map[schema.GroupResource]uint64
	// listedMu guards listed: the group kinds a list of which completed
	// in this process (graph.Event.Fresh). Its own lock, as crdMu: the
	// monitors' goroutines write it.
	listedMu sync.Mutex
	listed   map[schema.GroupKind]bool
	// relisted (under listedMu): per group and kind, when a list last
	// completed after an earlier one in this process (HistoryLost).
	relisted map[schema.GroupKind]time.Time
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

// NewMonitors returns a manager whose monitors call observe for each event.
// observe must not block for long: it runs on the monitor's goroutine.
func NewMonitors(client metadata.Interface, observe func(graph.Event)) *Monitors {
	return &Monitors{
		client: client, observe: observe, clock: clock.RealClock{},
		running: make(map[schema.GroupVersionResource]*monitor),
		started: make(map[schema.GroupKind]bool),
		provers: make(map[schema.GroupKind]*prover),

		crdBacked: make(map[schema.GroupResource]bool),
		crdLive:   make(map[schema.GroupResource]uint64),
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
		resource:     r,
		apiVersion:   r.APIVersion(),
		res:          m.client.Resource(r.GVR).Namespace(metav1.NamespaceAll),
		observe:      m.shard.filter(m.observe),
		pages:        m.pages,
		gate:         m.gate,
		stream:       streamListerOf(m.pages),
		sweep:        m.started[r.GroupKind()],
		fresh:        m.wasListed(r.GroupKind()),
		noteListed:   func() { m.noteListed(r.GroupKind()) },
		noteRelisted: func() { m.noteRelisted(r.GroupKind()) },
		crdSeq:       func() uint64 { return m.crdLiveSeq(r.GVR.GroupResource()) },
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
				// Before the graph sees the event: a decision that sees
				// the CRD sees its resource unlisted if it must be.
				m.noteCRD(ev.Object.Identity.Name, !ev.Object.Deleting)
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

// Handlers returns the number of monitor goroutines still running; once
// Sync or Stop returns it equals Len unless one leaked.
func (m *Monitors) Handlers() int {
	return int(m.loops.Load())
}

// Len returns the number of running monitors.
func (m *Monitors) Len() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.running)
}
