package workers

import (
	"context"
	"errors"
	"slices"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kgc-dev/kgc/internal/apiops"
	"github.com/kgc-dev/kgc/internal/history"
	"github.com/kgc-dev/kgc/internal/rules"
)

// why is what a decision rests on, carried from where its facts were
// gathered (the resolver: the graph, the absent cache, quorum reads) to
// the write, whose record says it. Nothing in it is looked up again
// afterwards: a record says what the write was decided from.
type why struct {
	// facts: one per ownerReference of the item (decisions about a
	// dependent; nil otherwise).
	facts []rules.Fact
	// unlisted: for a finalizer removal, the resources that were still
	// unlisted when UnlistedHold released it (nil: every resource that
	// could hold a dependent had been listed).
	unlisted []string
}

// dependentRecord is the record of a write to a dependent decided from
// w.facts; removed reports whether the write removes (or unblocks) the
// reference at index i.
func dependentRecord(op string, it *rules.Item, w why, reason string, removed func(i int) bool) history.Record {
	rec := history.Record{Operation: op, Object: history.ObjectOf(it.Identity), Reason: reason}
	if len(w.facts) == len(it.OwnerReferences) {
		rec.Owners = make([]history.Owner, len(w.facts))
		for i := range w.facts {
			r := &it.OwnerReferences[i]
			rec.Owners[i] = history.Owner{
				APIVersion: r.APIVersion, Kind: r.Kind, Name: r.Name, UID: r.UID,
				State: w.facts[i].State.String(), Removed: removed != nil && removed(i),
				Evidence: history.EvidenceOf(w.facts[i].Evidence),
			}
		}
	}
	return rec
}

// deleteReason says why a DeleteItem decision deletes it (semantics.md,
// rows 6 and 7). Constant strings: every collected object pays for it.
func deleteReason(it *rules.Item, w why, policy metav1.DeletionPropagation) string {
	waiting := slices.ContainsFunc(w.facts, func(f rules.Fact) bool { return f.State == rules.Waiting })
	switch {
	case waiting && len(it.Dependents) > 0 && policy == metav1.DeletePropagationForeground:
		return "no owner keeps it: its owners are gone or in foreground deletion, and it has dependents of its own, so it is deleted in the foreground"
	case policy == metav1.DeletePropagationOrphan:
		return "no owner keeps it: every owner is gone or in foreground deletion; deleted with the policy its own orphan finalizer asks for"
	case policy == metav1.DeletePropagationForeground:
		return "no owner keeps it: every owner is gone or in foreground deletion; deleted with the policy its own foregroundDeletion finalizer asks for"
	}
	return "no owner keeps it: every owner is gone or in foreground deletion"
}

// What patches test besides the object's UID (shared, never changed).
var (
	testsOwnerReferences = []string{"ownerReferences"}
	testsFinalizers      = []string{"finalizers"}
)

// removeReason says why a RemoveReferences decision removes references.
func removeReason(w why) string {
	if !slices.ContainsFunc(w.facts, func(f rules.Fact) bool { return f.State == rules.Solid }) {
		return "its only other owners were deleted with the orphan policy: their references are removed, and it stays"
	}
	return "a solid owner keeps it: its references to owners that are gone, in foreground deletion, or were orphaned are removed"
}

// finalizerReason says why an owner's finalizer is removed.
func finalizerReason(finalizer string, w why) string {
	s := "no dependent references it any more: every one was orphaned"
	if finalizer == rules.FinalizerForeground {
		s = "no dependent blocks it any more"
	}
	if len(w.unlisted) > 0 {
		return s + " (in the graph; --unlisted-hold passed while " + strings.Join(w.unlisted, ", ") + " had never been listed)"
	}
	return s + " (in a graph in which every resource that could hold one has been listed)"
}

// outcomeOf maps a write's error to its outcome (as kgc_operations_total
// counts it).
func outcomeOf(err error) string {
	switch {
	case err == nil:
		return history.OutcomeSuccess
	case errors.Is(err, errShadow):
		return history.OutcomeShadow
	case apiops.IsStale(err):
		return history.OutcomeConflict
	case apierrors.IsNotFound(err):
		return history.OutcomeNotFound
	}
	return history.OutcomeError
}

// wrote finishes rec, the record of one write that returned err: it counts
// the write (kgc_operations_total), logs it in one line at the default
// verbosity, and keeps it in the history ring (Config.History).
func (w *Workers) wrote(ctx context.Context, rec *history.Record, err error) {
	outcome := outcomeOf(err)
	if outcome == history.OutcomeShadow {
		w.cfg.Metrics.ShadowDecision(rec.Operation)
		err = nil // no call was made
	} else {
		w.cfg.Metrics.Operation(rec.Operation, outcome)
	}
	w.cfg.History.Finish(ctx, "Garbage collector write", rec, outcome, w.now(), err)
}

func (w *Workers) now() time.Time {
	if w.cfg.Clock != nil {
		return w.cfg.Clock.Now()
	}
	return time.Now()
}
