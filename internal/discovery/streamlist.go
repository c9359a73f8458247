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
//     to ignore it: the stream sends nothing for streamStall before its
//     end bookmark (a server that ignores it answers with the objects as
//     ADDED events and no bookmark), or a MODIFIED or DELETED event
//     before it (an ordinary watch: kube-apiserver's initial events are
//     all ADDED);
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

// streamListerOf returns pl as a StreamLister, or nil.
func streamListerOf(pl PageLister) StreamLister {
	sl, _ := pl.(StreamLister)
	return sl
}

// streamBatch is how many initial events a streaming list hands on between
// the list gate's checks and progress updates (a paged list's page).
const streamBatch = monitorListPageSize

// streamStall is how long a streaming list may receive nothing before its
// end bookmark (the time spent at the list gate not counted) before it is
// given up as ignored: a server that honours sendInitialEvents sends the
// first event, or an error, within seconds (kube-apiserver waits at most 3
// s for its watch cache to be fresh), and the bookmark right after the
// last initial event.
const streamStall = 15 * time.Second

// errStreamStalled, errStreamEnded: a streaming list stalled, or ended,
// before its end bookmark; errStreamNoAnswer: its response did not start.
var (
	errStreamStalled  = fmt.Errorf("the streaming list sent nothing for %s before the bookmark that ends its initial events (sendInitialEvents ignored?)", streamStall)
	errStreamEnded    = errors.New("the streaming list ended before the bookmark that ends its initial events")
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
	var ev streamEvent
	for {
		dog.arm()
		err := dec.next(&ev)
		dog.disarm()
		if err != nil {
			switch {
			case ctx.Err() != nil:
				return "", events, false, ctx.Err()
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
			mon.observe(graph.Event{Type: graph.Upsert, Object: ev.obj, Gen: gen, Fresh: mon.fresh})
			delivered = true
			batch++
		case watch.Modified, watch.Deleted:
			// kube-apiserver sends only ADDED events before the end
			// bookmark (its cacher's initial events are its store's
			// objects, its etcd watcher's those of a LIST): this server
			// streams an ordinary watch, and on a busy resource it would
			// never stall. The event is true all the same: handed on.
			if ev.typ == watch.Modified {
				mon.observe(graph.Event{Type: graph.Upsert, Object: ev.obj, Gen: gen, Fresh: mon.fresh})
				delivered = true
			} else {
				mon.observe(graph.Event{Type: graph.Delete, Object: ev.obj, Gen: gen, Fresh: mon.fresh})
			}
			return fail(fmt.Errorf("the streaming list sent a %s event before the bookmark that ends its initial events (sendInitialEvents ignored)", ev.typ), true)
		}
		if ev.typ == watch.Bookmark && ev.initialEnd {
			break
		}
		if batch >= streamBatch {
			mon.handedOn(initial, batch)
			batch = 0
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

// streamDog gives a streaming list up (cancels it) when it waits for the
// server for streamStall in one go.
type streamDog struct {
	clock   clock.PassiveClock
	base    time.Time
	waiting atomic.Int64 // when the wait began, in nanoseconds since base; 0: not waiting
	stalled atomic.Bool
	done    chan struct{}
	once    sync.Once
}

// watchdog starts a streamDog on the monitor's clock; cancel ends the
// stream.
func (mon *monitor) watchdog(ctx context.Context, cancel context.CancelFunc) *streamDog {
	d := &streamDog{clock: mon.clock, base: mon.clock.Now(), done: make(chan struct{})}
	go func() {
		wait := streamStall
		for {
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
			wait = streamStall
			if since := d.waiting.Load(); since != 0 {
				waited := mon.clock.Since(d.base) - time.Duration(since)
				if waited >= streamStall {
					d.stalled.Store(true)
					cancel()
					return
				}
				wait = streamStall - waited
			}
		}
	}()
	return d
}

func (d *streamDog) arm() {
	d.waiting.Store(max(1, int64(d.clock.Since(d.base))))
}

func (d *streamDog) disarm() { d.waiting.Store(0) }

func (d *streamDog) fired() bool { return d.stalled.Load() }

func (d *streamDog) stop() { d.once.Do(func() { close(d.done) }) }
