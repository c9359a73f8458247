package discovery

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/kgc-dev/kgc/internal/graph"
)

// Streaming lists.
//
// kube-apiserver pages a LIST from etcd (or its watch cache) at a cost per
// object that grows with the collection: a bare metadata client paging a
// million ConfigMaps took 53–72 s on the 2-core benchmark machine, and kgc
// could be useful no sooner. The same objects come in 8.7 s as one
// streaming list: a WATCH with sendInitialEvents=true (KEP-3157, the
// WatchList feature, on by default since 1.34), which sends every object
// as a synthetic ADDED event from the watch cache, then a BOOKMARK
// annotated k8s.io/initial-events-end at the resourceVersion of that
// state, and then goes on as an ordinary watch.
//
// A monitor lists so whenever its PageLister is also a StreamLister, with
// the same meaning as a paged list:
//   - The initial events carry the new list generation (as a list's pages
//     do), and the end bookmark completes the list: the Relisted sweep,
//     with the bookmark's resourceVersion as the evidence of what the list
//     did not see, then the Listed marker (S4: "listed" once the graph
//     builder applied it). Nothing before that bookmark completes it.
//   - resourceVersion "" with resourceVersionMatch=NotOlderThan asks for a
//     consistent state, as the paged list's "" does.
//   - The list gate holds the stream every streamBatch events, as it holds
//     a paged list before each page; TCP flow control holds the server.
//   - The watch resumes from the bookmark's resourceVersion, never from an
//     initial event's: those are each object's last write, in key order,
//     and resuming from one would skip what happened after it.
//   - A stream that fails before its end bookmark is a paged list that
//     failed part way: what it delivered stays (newer states of their
//     objects) and the next complete list sweeps.
//
// And it falls back to pages, which kgc always had:
//   - for good (noStream), when the server refuses a streaming list (400
//     or 422: an apiserver older than 1.27, or one with WatchList off, or
//     an aggregated API that does not know sendInitialEvents), or seems
//     to ignore it: the stream misses its deadline (below), or sends a
//     MODIFIED or DELETED event before its end bookmark (an ordinary
//     watch: kube-apiserver's initial events are all ADDED);
//   - until a paged list completes (paging), when it fails otherwise
//     (an error, a broken connection, a response that does not start
//     within streamStall, a stream that ends before its end bookmark:
//     kube-apiserver ends the watch of a client that reads too slowly, as
//     one held by the list gate may): the
//     lists are paged, so the error kgc reports and backs off on is a
//     LIST's (a conversion webhook's message; a 404, which makes the
//     resource not served), and a resource whose watch cache is
//     initializing (429 at once: WatchList does not retry) is read from
//     etcd. Once a paged list completed, the next list (after a 410)
//     streams again.
//
// The paged list stays the reference: kgc's decisions do not depend on
// how a resource was listed.
//
// The deadline. A server that ignores sendInitialEvents answers as to an
// ordinary watch from "": the objects as ADDED events, then the changes
// since, and, if it honours allowWatchBookmarks, a plain bookmark now and
// then, but never the end bookmark. A deadline that every event extends
// never ends such a stream on a resource that changes, or gets bookmarks,
// more often than the deadline; one that events do not extend at all
// would end an honest list of a big resource: kube-apiserver streams a
// million objects in 9–17 s on the 2-core benchmark machine
// (docs/scaling.md), and ten million on a loaded server in minutes. So
// before its end bookmark a streaming list runs on a budget of waiting
// time that only evidence of a list renews (the watchdog, streamDog):
//   - streamStall (15 s) of waiting for the server, renewed when the
//     response starts and by each whole batch of streamBatch (5,000)
//     initial events, and by nothing else: a single event, a plain
//     bookmark or nothing at all does not renew it. A list is thus given
//     up when it delivers fewer than 5,000 objects in 15 s of waiting: a
//     floor of 333 objects/s, which an honest server clears 170–350
//     times over (58,000–115,000 objects/s here), and which does not
//     depend on the size of the resource (ten million objects at the
//     floor take 8 hours and are not cut). The time spent at the list
//     gate and handing events on to the graph builder is not waiting.
//   - After a plain bookmark (one without the initial-events-end
//     annotation) nothing renews it: the end bookmark must come within
//     streamStall of waiting. kube-apiserver never sends a plain bookmark
//     before the end bookmark (its cacher annotates the first bookmark a
//     watch-list watcher sends; its etcd watcher queues the annotated one
//     right after its initial list, before any progress notification),
//     so one shows a server that ignores sendInitialEvents, however many
//     ADDED events follow.
//
//   - A count that events do not extend: once a stream has sent
//     streamProbeAfter (10,000) initial events, kgc asks the server how
//     many objects the resource has (a LIST with limit 1: its
//     remainingItemCount), once per list. An honest stream's initial
//     events are the objects at its resourceVersion, so a stream that
//     sends more than twice that count plus streamProbeAfter ADDED events
//     before its end bookmark is sending new objects: a server that
//     ignores sendInitialEvents and is busy enough never to stall. It is
//     given up, and the resource listed by pages for good, after at most
//     that many events, however fast they come. The margin covers an
//     honest list of a resource that shrank by half while it streamed;
//     one that shrank more is listed by pages, which is the reference.
//
// What none of these catches: a server that ignores sendInitialEvents,
// sends no bookmark and no MODIFIED or DELETED event, more than 5,000 new
// objects of the resource every 15 s, and no remainingItemCount on a
// LIST with a limit (kube-apiserver gives one). Its watch timeout (5–10
// min, asked for as timeoutSeconds) ends the stream, and the resource is
// listed by pages until a paged list completes.

// streamListerOf returns pl as a StreamLister, or nil.
func streamListerOf(pl PageLister) StreamLister {
	sl, _ := pl.(StreamLister)
	return sl
}

// streamProbeAfter is how many initial events a streaming list sends
// before kgc reads the resource's count to bound the rest (see "The
// deadline"): two batches, so that a resource of fewer objects never costs
// the extra request.
const streamProbeAfter = 2 * streamBatch

// streamCountBound returns the most ADDED events an honest streaming list
// of a resource found to have count objects sends before its end bookmark
// (see "The deadline").
func streamCountBound(count int64) int64 {
	return 2*count + streamProbeAfter
}

// streamCount reads how many objects the resource has (a LIST with limit
// 1, from etcd: the item it returns and its remainingItemCount); ok false
// when the server does not say (no remainingItemCount, a failure), and
// the stream then runs without a count bound.
func (mon *monitor) streamCount(ctx context.Context) (count int64, ok bool) {
	pctx, cancel := context.WithTimeout(ctx, streamStall)
	defer cancel()
	var pl pageListing
	page, err := mon.listPage(pctx, metav1.ListOptions{Limit: 1}, &pl)
	if err != nil {
		klog.FromContext(ctx).V(2).Info("Reading a resource's count to bound its streaming list; streaming on without that bound", "resource", mon.resource.GVR, "err", err.Error())
		return 0, false
	}
	if !page.remainingItemsSet {
		return 0, false
	}
	return int64(len(page.items)) + page.remainingItems, true
}

// streamBatch is how many initial events a streaming list hands on between
// the list gate's checks and progress updates (a paged list's page).
const streamBatch = monitorListPageSize

// streamStall is the watchdog's budget (see "The deadline" above): how
// long a streaming list may wait for its server before its response
// starts, and then for each batch of streamBatch initial events, and for
// the end bookmark after a plain bookmark. A server that honours
// sendInitialEvents answers within seconds (kube-apiserver waits at most
// 3 s for its watch cache to be fresh), sends a batch in a fraction of a
// second, and the end bookmark right after the last initial event.
const streamStall = 15 * time.Second

// errStreamStalled, errStreamNoEnd, errStreamEnded: a streaming list
// missed its deadline, or its deadline after a plain bookmark, or ended,
// before its end bookmark; errStreamNoAnswer: its response did not start.
var (
	errStreamStalled  = fmt.Errorf("the streaming list sent fewer than %d initial events in %s of waiting, and not the bookmark that ends them (sendInitialEvents ignored?)", streamBatch, streamStall)
	errStreamNoEnd    = fmt.Errorf("the streaming list sent a bookmark without the annotation that ends its initial events, and not that one within %s of waiting after it (sendInitialEvents ignored)", streamStall)
	errStreamEnded    = errors.New("the streaming list ended before the bookmark that ends its initial events")
	errStreamTooMany  = errors.New("the streaming list sent more initial events than twice the objects its resource has, and not the bookmark that ends them (sendInitialEvents ignored)")
	errStreamNoAnswer = fmt.Errorf("the streaming list was not answered within %s", streamStall)
)

// streams reports whether the next list of the monitor streams.
func (mon *monitor) streams() bool {
	return mon.stream != nil && !mon.noStream && !mon.paging
}

// streamFailed records why a streaming list did not complete: refused or
// ignored (refused) lists by pages for good, any other failure until a
// paged list completes.
func (mon *monitor) streamFailed(refused bool) {
	if refused {
		mon.noStream = true
	} else {
		mon.paging = true
	}
}

// streamRefused reports whether err is the server refusing a streaming
// list as a request it does not take (rather than failing it).
func streamRefused(err error) bool {
	return apierrors.IsBadRequest(err) || apierrors.IsInvalid(err) || apierrors.IsMethodNotSupported(err) || apierrors.IsNotAcceptable(err)
}

// streamList lists the resource as one streaming list (see above) and,
// once the list completed, follows the same stream as a watch (follow). It
// returns listed false, with the reason, when the list did not complete
// (the caller then lists by pages); otherwise the stream's end as watch
// returns it.
func (mon *monitor) streamList(ctx context.Context) (next string, events int, listed bool, err error) {
	gen := nextListGen()
	initial := !mon.everListed()
	if initial {
		mon.initialObjects.Store(0)
	}
	fresh := mon.listFresh()
	if mon.gate != nil {
		mon.gate(ctx)
		mon.touch()
	}
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// The watchdog also watches the request until its response starts:
	// kube-apiserver answers a streaming list within seconds (its wait
	// for a fresh watch cache, at most 3 s, comes before the headers),
	// but a hung aggregated API backend may never answer a watch, which
	// no request timeout ends (a long-running request). Without this the
	// monitor would stay neither synced nor failing for as long, where a
	// paged LIST gets the apiserver's 504. The wait for the client's rate
	// limiter is counted too: more than streamStall of it is a paged list
	// (through the same limiter), which is harmless.
	dog := mon.watchdog(sctx, cancel)
	defer dog.stop()
	send, timeout := true, watchTimeoutSeconds()
	dog.arm()
	body, err := mon.stream.WatchList(sctx, mon.resource.GVR, metav1.ListOptions{
		Watch: true, SendInitialEvents: &send, ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan,
		AllowWatchBookmarks: true, TimeoutSeconds: &timeout,
	})
	dog.disarm()
	dog.renew() // the response started: the first batch has a budget of its own
	if ctx.Err() == nil && dog.fired() {
		// Given up before the response started (or as it did): no sign
		// that the server ignores sendInitialEvents, so pages this once.
		if err == nil {
			_ = body.Close()
		}
		mon.streamFailed(false)
		return "", 0, false, errStreamNoAnswer
	}
	if err != nil {
		mon.streamFailed(streamRefused(err))
		return "", 0, false, err
	}
	defer body.Close()
	dec := newWatchDecoder(body, mon.apiVersion, mon.resource.Kind)

	delivered := false // an initial event reached the graph
	fail := func(err error, refused bool) (string, int, bool, error) {
		if delivered {
			mon.sweep = true // as for a paged list that failed part way
		}
		mon.streamFailed(refused)
		return "", events, false, err
	}
	batch := 0
	added, bound := int64(0), int64(-1) // bound: no count read yet, or none known
	var ev streamEvent
	for {
		dog.arm()
		err := dec.next(&ev)
		dog.disarm()
		if err != nil {
			switch {
			case ctx.Err() != nil:
				return "", events, false, ctx.Err()
			case dog.fired() && dog.final:
				return fail(errStreamNoEnd, true)
			case dog.fired():
				return fail(errStreamStalled, true)
			case errors.Is(err, io.EOF):
				// kube-apiserver also ends a watch whose client reads
				// too slowly (its buffer for the watcher full: the list
				// gate holding the stream while events arrive), so this
				// lists by pages once, not for good. A server that
				// ignores sendInitialEvents then costs a watch timeout
				// per list (a relist only follows a 410), if it is busy
				// enough never to stall.
				return fail(errStreamEnded, false)
			}
			return fail(err, false)
		}
		events++
		switch ev.typ {
		case watch.Error:
			return fail(ev.err, streamRefused(ev.err))
		case watch.Added:
			mon.observe(graph.Event{Type: graph.Upsert, Object: ev.obj, Gen: gen, Fresh: fresh})
			delivered = true
			batch++
			added++
			if bound >= 0 && added > bound {
				return fail(fmt.Errorf("%w: %d ADDED events for a resource of %d objects", errStreamTooMany, added, (bound-streamProbeAfter)/2), true)
			}
		case watch.Modified, watch.Deleted:
			// kube-apiserver sends only ADDED events before the end
			// bookmark (its cacher's initial events are its store's
			// objects, its etcd watcher's those of a LIST): this server
			// streams an ordinary watch, and on a busy resource it would
			// never stall. The event is true all the same: handed on.
			if ev.typ == watch.Modified {
				mon.observe(graph.Event{Type: graph.Upsert, Object: ev.obj, Gen: gen, Fresh: fresh})
				delivered = true
			} else {
				mon.observe(graph.Event{Type: graph.Delete, Object: ev.obj, Gen: gen, Fresh: fresh})
			}
			return fail(fmt.Errorf("the streaming list sent a %s event before the bookmark that ends its initial events (sendInitialEvents ignored)", ev.typ), true)
		}
		if ev.typ == watch.Bookmark {
			if ev.initialEnd {
				break
			}
			// Not kube-apiserver's (see "The deadline"): tolerated, but
			// the end bookmark must follow within streamStall of waiting.
			dog.finalBudget()
		}
		if batch >= streamBatch {
			dog.renew() // a whole batch: evidence of a list
			mon.handedOn(initial, batch)
			batch = 0
			if added == streamProbeAfter {
				// Once per list; the time the read takes is not waiting
				// for the stream (the watchdog is disarmed).
				if count, ok := mon.streamCount(sctx); ok {
					bound = streamCountBound(count)
				}
			}
			if mon.gate != nil {
				mon.gate(ctx)
				mon.touch()
			}
		}
	}
	dog.stop()
	mon.handedOn(initial, batch)
	if ev.rv == "" {
		// Nothing to resume the watch from, nor to date the sweep.
		return fail(fmt.Errorf("the bookmark that ends the initial events of %s has no resourceVersion", mon.resource.GVR), true)
	}
	mon.completed(gen, ev.rv)
	next, events, err = mon.follow(ev.rv, events, func(ev *streamEvent) error {
		err := dec.next(ev)
		if err != nil && ctx.Err() == nil && !errors.Is(err, io.EOF) {
			// A broken connection, as a watch's: resumed from rv (by the
			// metadata client's watch).
			return io.EOF
		}
		return err
	})
	return next, events, true, err
}

// handedOn counts n initial events handed on as a list page would.
func (mon *monitor) handedOn(initial bool, n int) {
	if initial {
		mon.initialObjects.Add(int64(n))
	}
	mon.progressed()
}

// streamDog gives a streaming list up (cancels it) when it spends its
// budget of waiting time for the server (see "The deadline" above). The
// streaming goroutine alone calls arm, disarm, renew and finalBudget, and
// reads final; the watchdog's goroutine reads only fireAt, and left for
// how long to sleep.
type streamDog struct {
	clock  clock.PassiveClock
	base   time.Time
	cancel context.CancelFunc
	// fireAt: while the streaming goroutine waits, when the budget is
	// spent, in nanoseconds since base; 0 while it does not wait.
	fireAt atomic.Int64
	// left: the budget left while it does not wait (a hint for the
	// watchdog's sleep).
	left atomic.Int64
	// The streaming goroutine's own: the budget left, when the current
	// wait began, whether renew still renews.
	budget  time.Duration
	armedAt time.Duration
	final   bool
	stalled atomic.Bool
	done    chan struct{}
	once    sync.Once
}

// watchdog starts a streamDog on the monitor's clock, with a full budget;
// cancel ends the stream.
func (mon *monitor) watchdog(ctx context.Context, cancel context.CancelFunc) *streamDog {
	d := &streamDog{clock: mon.clock, base: mon.clock.Now(), cancel: cancel, budget: streamStall, done: make(chan struct{})}
	d.left.Store(int64(streamStall))
	go func() {
		for {
			wait := time.Duration(d.left.Load())
			if at := d.fireAt.Load(); at != 0 {
				wait = time.Duration(at) - d.clock.Since(d.base)
				if wait <= 0 {
					d.give()
					return
				}
			}
			if wait <= 0 {
				// Spent while not waiting: arm gives the stream up.
				wait = streamStall
			}
			t := mon.clock.NewTimer(wait)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-d.done:
				t.Stop()
				return
			case <-t.C():
			}
		}
	}()
	return d
}

// arm: the streaming goroutine waits for the server from now on.
func (d *streamDog) arm() {
	if d.budget <= 0 {
		d.give()
		return
	}
	d.armedAt = max(1, d.clock.Since(d.base))
	d.fireAt.Store(int64(d.armedAt + d.budget))
}

// disarm: the wait that arm began is over; it is charged to the budget.
func (d *streamDog) disarm() {
	if d.armedAt == 0 {
		return
	}
	d.fireAt.Store(0)
	d.budget -= d.clock.Since(d.base) - d.armedAt
	d.armedAt = 0
	d.left.Store(int64(d.budget))
}

// renew refills the budget (not waiting), unless finalBudget was called.
func (d *streamDog) renew() {
	if !d.final {
		d.budget = streamStall
		d.left.Store(int64(d.budget))
	}
}

// finalBudget refills the budget (not waiting) for the last time.
func (d *streamDog) finalBudget() {
	d.renew()
	d.final = true
}

// give gives the stream up.
func (d *streamDog) give() {
	d.stalled.Store(true)
	d.cancel()
}

func (d *streamDog) fired() bool { return d.stalled.Load() }

func (d *streamDog) stop() { d.once.Do(func() { close(d.done) }) }
