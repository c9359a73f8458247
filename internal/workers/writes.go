package workers

import (
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kgc-dev/kgc/internal/apiops"
)

// writeLog remembers, per object, the version the graph showed when kgc last
// wrote to it, until the graph observes something newer. The zero value is
// ready to use.
//
// Why: an item is often checked again before its monitor delivers the
// effect of kgc's own write (a foreground owner re-checks its blocking
// dependents on every change; a chain level is queued by its owner's
// transition and by its owner's check). Deciding again from the same,
// now known-stale version could only repeat the write, which is at best a
// wasted call (a 404, or a 409 from the resourceVersion precondition).
// Skipping is safe because:
//   - a write that succeeded (or found the object gone) changed the object,
//     so its monitor will deliver a newer version or the deletion, and
//     that event re-queues whatever needs re-checking;
//   - a write rejected with 409 proves the graph's version is stale; the
//     check is retried (rate-limited) without a call until the graph shows
//     a newer version.
//
// Entries expire (writeLogTTL) so that a lost watch event costs at most one
// delayed re-check, never a stuck item; entries for objects the graph never
// shows again are pruned by age.
type writeLog struct {
	mu      sync.Mutex
	entries map[types.UID]writeEntry
	adds    int
	now     func() time.Time // tests
}

type writeEntry struct {
	rv       string // the graph's resourceVersion the write was decided from
	conflict bool   // the write was rejected as stale (409)
	at       time.Time
	// gone: the write found the object gone (404). orphanedFrom: the write
	// removed the reference to this owner (see orphaned).
	gone         bool
	orphanedFrom types.UID
}

const (
	writeLogTTL         = time.Minute
	writeLogConflictTTL = 5 * time.Second
	writeLogPruneEvery  = 1024
)

func (w *writeLog) clock() time.Time {
	if w.now != nil {
		return w.now()
	}
	return time.Now()
}

// check reports whether a write to uid decided from resourceVersion rv is
// already done (skip) or known stale (stale: retry later without a call).
func (w *writeLog) check(uid types.UID, rv string) (skip, stale bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	e, ok := w.entries[uid]
	if !ok {
		return false, false
	}
	ttl := writeLogTTL
	if e.conflict {
		ttl = writeLogConflictTTL
	}
	if e.rv != rv || w.clock().Sub(e.at) > ttl {
		delete(w.entries, uid)
		return false, false
	}
	return true, e.conflict
}

// wrote reports whether kgc wrote to uid at resourceVersion rv and the
// graph has not shown the object's newer version yet (check's skip).
func (w *writeLog) wrote(uid types.UID, rv string) bool {
	skip, _ := w.check(uid, rv)
	return skip
}

// record notes the outcome of a write to uid decided from resourceVersion rv.
// Outcomes other than success, 404 and 409 (a timeout, a 500) say nothing
// about the object and are not recorded.
func (w *writeLog) record(uid types.UID, rv string, err error) {
	w.recordOrphan(uid, rv, "", err)
}

// recordOrphan is record for a write that removed the reference to owner
// (an orphaning patch).
func (w *writeLog) recordOrphan(uid types.UID, rv string, owner types.UID, err error) {
	e := writeEntry{orphanedFrom: owner, gone: apierrors.IsNotFound(err)}
	switch {
	case err == nil, apierrors.IsNotFound(err):
	case apiops.IsStale(err):
		e.conflict = true
	default:
		w.forget(uid)
		return
	}
	e.rv = rv
	w.mu.Lock()
	defer w.mu.Unlock()
	now := w.clock()
	e.at = now
	if w.entries == nil {
		w.entries = make(map[types.UID]writeEntry)
	}
	w.entries[uid] = e
	w.adds++
	if w.adds%writeLogPruneEvery == 0 {
		for k, old := range w.entries {
			if now.Sub(old.at) > writeLogTTL {
				delete(w.entries, k)
			}
		}
	}
}

// orphaned reports whether kgc's last write to uid, decided from
// resourceVersion rv, proved that uid no longer references owner: it
// removed that very reference, or found the object gone. Any other write
// (another owner's orphaning, a reference removal) leaves the question
// open until the graph shows the object's newer version.
func (w *writeLog) orphaned(uid types.UID, rv string, owner types.UID) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	e, ok := w.entries[uid]
	return ok && e.rv == rv && !e.conflict && (e.gone || e.orphanedFrom == owner)
}

func (w *writeLog) forget(uid types.UID) {
	w.mu.Lock()
	delete(w.entries, uid)
	w.mu.Unlock()
}

// len returns the number of entries (tests).
func (w *writeLog) len() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.entries)
}

// dependentsRecheck spaces out a blocked foreground owner's re-checks of
// its blocking dependents. The graph queues every dependent when the owner
// starts deleting them and re-queues the owner whenever a blocking
// dependent goes, so re-queueing all of them on each of those owner checks
// (O(dependents) each, O(dependents²) per cascade) only churns; once per
// dependentsRecheckEvery per owner is kept as a safety net. The zero value
// is ready to use.
type dependentsRecheck struct {
	mu   sync.Mutex
	last map[types.UID]time.Time
	adds int
	now  func() time.Time // nil: time.Now
}

const dependentsRecheckEvery = 10 * time.Second

// due reports whether the owner's dependents should be re-checked now,
// and if so remembers that they were.
func (d *dependentsRecheck) due(owner types.UID) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	now := time.Now()
	if d.now != nil {
		now = d.now()
	}
	if t, ok := d.last[owner]; ok && now.Sub(t) < dependentsRecheckEvery {
		return false
	}
	if d.last == nil {
		d.last = make(map[types.UID]time.Time)
	}
	d.last[owner] = now
	d.adds++
	if d.adds%writeLogPruneEvery == 0 {
		for k, t := range d.last {
			if now.Sub(t) > dependentsRecheckEvery {
				delete(d.last, k)
			}
		}
	}
	return true
}
