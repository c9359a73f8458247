package workers

import (
	"context"
	"slices"
	"time"

	"k8s.io/klog/v2"

	"github.com/kgc-dev/kgc/internal/metrics"
	"github.com/kgc-dev/kgc/internal/rules"
)

// negativeFactsReady decides whether owner's finalizer (orphan or
// foregroundDeletion) may be removed now on the strength of a negative fact
// read from the graph: "no dependent references it any more" (orphan) or
// "no dependent blocks it any more" (foregroundDeletion). It returns nil
// when it may, errRetry when the removal must wait; unlisted names the
// resources still unlisted when the hold released it (for the write's
// record).
//
// A negative fact read from the graph is true only if the graph holds
// every object that could be such a dependent, which it does once every
// resource that could hold one has been listed: a LIST that fails (a
// conversion webhook down, a 429, a timeout) leaves its objects out, and
// removing the finalizer then releases the owner before dependents kgc has
// never seen (orphans deleted, Foreground owners gone first). Only the resources that could hold a dependent count: a
// namespaced owner's dependents are namespaced (a cluster-scoped object
// naming a namespaced owner is never collected on its account).
//
// Waiting for every resource forever would be upstream's old stall
// (kubernetes#101078) for owners, so the wait is bounded per owner by
// UnlistedHold. Past it the finalizer is removed, which the rest of kgc
// makes safe for Orphan: the owner is recorded as orphaned (kgc records
// every owner whose orphan finalizer it removes), and a
// dependent found later that references it is orphaned, not deleted
// (OwnerState Orphaned). For foregroundDeletion the dependents found later
// are still deleted, only after their owner. Decisions resting only on
// positive facts (an owner observed or read absent) never come here.
func (w *Workers) negativeFactsReady(ctx context.Context, owner rules.Identity, finalizer string) (unlisted []string, err error) {
	for _, r := range w.unlisted() {
		if owner.Namespace != "" && !r.Namespaced {
			continue
		}
		unlisted = append(unlisted, r.GVR.String())
	}
	if len(unlisted) == 0 {
		w.holds.Delete(owner.UID)
		return nil, nil
	}
	// The hold runs on Config.Clock (the simulator's fake clock), like the
	// queues' backoff that brings the owner back here.
	now := w.now()
	v, _ := w.holds.LoadOrStore(owner.UID, HeldFinalizer{Owner: owner, Finalizer: finalizer, Since: now})
	h := v.(HeldFinalizer)
	if h.Finalizer != finalizer {
		// A second DELETE with another policy swapped the owner's
		// finalizer: the new one waits its own hold, or it would go at
		// once on the time the old one waited.
		h = HeldFinalizer{Owner: owner, Finalizer: finalizer, Since: now}
	}
	h.Unlisted = unlisted
	w.holds.Store(owner.UID, h)
	logger := klog.FromContext(ctx)
	if held := now.Sub(h.Since); held < w.cfg.UnlistedHold {
		w.cfg.Metrics.FinalizerUnlisted(finalizer, metrics.UnlistedHeld)
		logger.V(1).Info("Holding finalizer until every resource that could hold dependents is listed",
			"object", owner.String(), "finalizer", finalizer, "unlisted", unlisted, "heldFor", held.Round(time.Second).String())
		return nil, errRetry
	}
	w.holds.Delete(owner.UID)
	w.releasedMu.Lock()
	h.Released = now
	w.released = append(w.released, h)
	if len(w.released) > maxReleasedRecord {
		w.released = slices.Delete(w.released, 0, len(w.released)-maxReleasedRecord)
	}
	w.releasedMu.Unlock()
	w.cfg.Metrics.FinalizerUnlisted(finalizer, metrics.UnlistedReleased)
	logger.Info("Removing finalizer although some resources were never listed; dependents found there later are handled as the owner's policy asked",
		"object", owner.String(), "finalizer", finalizer, "unlisted", unlisted, "hold", w.cfg.UnlistedHold.String())
	return unlisted, nil
}

// HeldFinalizer is an owner whose orphan or foregroundDeletion finalizer
// waits (or waited) for resources that have not been listed.
type HeldFinalizer struct {
	Owner     rules.Identity
	Finalizer string
	// Unlisted are the resources, as group/version/resource, that were not
	// listed at the last check.
	Unlisted []string
	// Since is when the removal was first held back; Released, when it was
	// removed anyway (zero while held).
	Since, Released time.Time
}

// maxReleasedRecord bounds the finalizers removed before every resource
// was listed that Held reports.
const maxReleasedRecord = 32

// Held reports the finalizers held back now for unlisted resources, and the
// last ones removed anyway once UnlistedHold passed (oldest first).
func (w *Workers) Held() (held, released []HeldFinalizer) {
	w.holds.Range(func(_, v any) bool {
		held = append(held, v.(HeldFinalizer))
		return true
	})
	slices.SortFunc(held, func(a, b HeldFinalizer) int { return a.Since.Compare(b.Since) })
	w.releasedMu.Lock()
	released = slices.Clone(w.released)
	w.releasedMu.Unlock()
	return held, released
}
