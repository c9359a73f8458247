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
	"sync"
	"sync/atomic"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/metadata"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/kgc-dev/kgc/internal/graph"
	"github.com/kgc-dev/kgc/internal/rules"
)

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
	// noteRelisted records that a list completed after an earlier one in
	// this process (Monitors.HistoryLost).
	noteRelisted func()
	// crdSeq returns how many times the resource's CRD was observed
	// alive (Monitors.crdLiveSeq); notServedSeq (guarded by mu) is what
	// it returned when the last list, which answered 404, started.
	crdSeq func() uint64
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

	mu           sync.Mutex
	synced       bool      // a list completed (a 404 counts: see Status.Synced)
	served       bool      // the last list did not answer 404
	notServedSeq uint64    // crdSeq when that list (answering 404) started
	progress     uint64    // successful list pages, watch starts and watch events
	progressAt   time.Time // when the monitor started or last progressed
	lastErr      error     // the last list or watch error
	errAt        uint64    // progress when lastErr happened
	unverified   bool
	verifyGen    uint32
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
	var crdSeq uint64
	if mon.crdSeq != nil {
		crdSeq = mon.crdSeq()
	}
	initial := !mon.everListed()
	if initial {
		mon.initialObjects.Store(0)
	}
	fresh := mon.listFresh()
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
			// Not served, as of the CRD observations made before this
			// list started (servedAgain), before the Listed marker can
			// make the resource count as listed.
			mon.mu.Lock()
			mon.served, mon.notServedSeq = false, crdSeq
			mon.mu.Unlock()
			if mon.fresh && mon.noteRelisted != nil {
				mon.noteRelisted() // as in completed
			}
			mon.listed(gen)
			mon.mu.Lock()
			mon.synced = true
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
			mon.observe(graph.Event{Type: graph.Upsert, Object: page.items[i], Gen: gen, Fresh: fresh})
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
	mon.mu.Lock()
	mon.served = true // before the marker: see servedAgain
	mon.mu.Unlock()
	if mon.fresh && mon.noteRelisted != nil {
		// Listed before in this process: by this monitor, whose watch
		// lost the history, or by one this one replaces (the resource
		// left discovery and came back, unwatched in between).
		mon.noteRelisted()
	}
	mon.listed(gen)
	mon.mu.Lock()
	mon.synced = true
	mon.mu.Unlock()
}

// listFresh reports whether the objects of a list starting now appeared
// while kgc watched (graph.Event.Fresh): the resource was listed before in
// this process (by this monitor or one it replaces), and this monitor has
// not: a list after one of its own follows a watch that lost the storage's
// history, and what it finds may have been created at any time in that
// gap, as a backlog at start may, while an owner it names lived and went
// unseen in the same gap. The first list of a monitor that replaces
// another (the resource left discovery and came back: its CRD deleted and
// created again) finds objects created since the resource came back,
// which kgc saw happen.
func (mon *monitor) listFresh() bool {
	return mon.fresh && !mon.everListed()
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
