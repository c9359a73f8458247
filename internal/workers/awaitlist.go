package workers

import (
	"errors"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
)

// errAwaitingList is what resolving a reference returns when its owner is
// not in the graph only because the owner's resource has not finished its
// first list: the dependent has been parked (awaitList) and is checked
// again once that list is in the graph. It is no failure: the item is
// forgotten by its queue until then.
var errAwaitingList = errors.New("owner's resource is still being listed")

// awaitList parks dependents whose owner the graph has not observed while
// the owner's resource is making its first list, instead of reading the
// owner with a quorum GET.
//
// At start the workers run before every resource has been listed (as soon
// as every monitor has synced or fails, or after the sync timeout), and a
// dependent listed before its owner's resource would otherwise cost a GET
// of an owner that the list is about to bring (at a million objects,
// hundreds of GETs at start). Nothing is decided from the wait itself:
// once the resource's Listed marker is applied (Observed), its parked
// dependents are queued again and resolved from the graph, which then
// holds every owner of that resource the list saw; an owner still missing
// is read with a GET as before (it may have been created after the list,
// or be gone). Decisions resting only on positive facts (every owner
// observed deleted, or waiting) never get here: the resolver answers them
// from the graph and the absent cache first.
//
// The wait is bounded. A failing resource (its list returns errors) is
// not listing, and its owners are read with GETs as before (which may
// succeed where the LIST fails, and are retried while they fail). A list
// that makes no progress — no page for hold (--unlisted-hold) — counts as
// stalled: a timer per parked resource then queues its dependents again,
// and they are resolved with GETs.
type awaitList struct {
	// listing is the graph builder's Listing; nil turns parking off.
	listing func(schema.GroupKind) (listing bool, idle time.Duration)
	hold    time.Duration
	clock   clock.WithTicker
	// requeue queues parked dependents again.
	requeue func(types.UID)

	mu     sync.Mutex
	byGK   map[schema.GroupKind]*parkedSet
	closed bool
	stop   chan struct{} // closed by close: timers end
	timers sync.WaitGroup
}

// parkedSet holds the dependents waiting for one resource's first list.
type parkedSet struct {
	uids map[types.UID]struct{}
	done chan struct{} // closed when the set is flushed
}

func newAwaitList(listing func(schema.GroupKind) (bool, time.Duration), hold time.Duration, clk clock.WithTicker, requeue func(types.UID)) *awaitList {
	if clk == nil {
		clk = clock.RealClock{}
	}
	return &awaitList{
		listing: listing, hold: hold, clock: clk, requeue: requeue,
		byGK: make(map[schema.GroupKind]*parkedSet), stop: make(chan struct{}),
	}
}

// park parks dependent until gk's first list is in the graph, and reports
// whether it did: false when gk is not listing (not monitored, listed,
// failing) or its list is stalled. The check and the parking are one step
// under mu, and flush takes mu after the graph builder recorded the list
// as applied, so a dependent is never parked after its resource's flush.
func (a *awaitList) park(gk schema.GroupKind, dependent types.UID) bool {
	if a == nil || a.listing == nil {
		return false
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return false
	}
	listing, idle := a.listing(gk)
	if !listing || idle >= a.hold {
		return false
	}
	s := a.byGK[gk]
	if s == nil {
		s = &parkedSet{uids: make(map[types.UID]struct{}), done: make(chan struct{})}
		a.byGK[gk] = s
		a.timers.Add(1)
		go a.watchStall(gk, s, a.clock.NewTimer(a.hold-idle))
	}
	s.uids[dependent] = struct{}{}
	return true
}

// flush queues again every dependent parked for gk (its first list was
// just applied to the graph).
func (a *awaitList) flush(gk schema.GroupKind) {
	if a == nil {
		return
	}
	a.mu.Lock()
	s := a.byGK[gk]
	if s != nil {
		a.takeLocked(gk, s)
	}
	a.mu.Unlock()
	if s != nil {
		a.requeueAll(s)
	}
}

// takeLocked removes s, gk's set, so that it is flushed once. Caller holds
// mu and then calls requeueAll.
func (a *awaitList) takeLocked(gk schema.GroupKind, s *parkedSet) {
	delete(a.byGK, gk)
	close(s.done)
}

func (a *awaitList) requeueAll(s *parkedSet) {
	for uid := range s.uids {
		a.requeue(uid)
	}
}

// watchStall flushes s when gk's list has made no progress for hold (or
// is no longer listing without a flush: it started failing, or its monitor
// was replaced), checking when t fires and then as long as the list
// progresses.
func (a *awaitList) watchStall(gk schema.GroupKind, s *parkedSet, t clock.Timer) {
	defer a.timers.Done()
	for {
		select {
		case <-a.stop:
			t.Stop()
			return
		case <-s.done:
			t.Stop()
			return
		case <-t.C():
		}
		a.mu.Lock()
		if a.byGK[gk] != s {
			a.mu.Unlock()
			return
		}
		listing, idle := a.listing(gk)
		if listing && idle < a.hold {
			t = a.clock.NewTimer(a.hold - idle)
			a.mu.Unlock()
			continue
		}
		a.takeLocked(gk, s)
		a.mu.Unlock()
		a.requeueAll(s)
		return
	}
}

// parked returns how many dependents are parked (tests).
func (a *awaitList) parked() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	n := 0
	for _, s := range a.byGK {
		n += len(s.uids)
	}
	return n
}

// close ends the stall timers and parks nothing more.
func (a *awaitList) close() {
	a.mu.Lock()
	if !a.closed {
		a.closed = true
		close(a.stop)
	}
	a.mu.Unlock()
	a.timers.Wait()
}

// AwaitingList returns how many dependents wait for the first list of
// their owner's resource instead of reading the owner (awaitList).
func (w *Workers) AwaitingList() int { return w.awaiting.parked() }
