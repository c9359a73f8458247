package workers

import (
	"context"
	"errors"
	"slices"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/kgc-dev/kgc/internal/apiops"
	"github.com/kgc-dev/kgc/internal/history"
	"github.com/kgc-dev/kgc/internal/metrics"
	"github.com/kgc-dev/kgc/internal/rules"
)

// removeConfirmed is planConfirmedRemoval's write: it confirms the solid
// owners under their deletion locks, then removes the references, or
// decides again from what it found. The confirmations replace the graph's
// evidence for those owners in the write's record.
func (w *Workers) removeConfirmed(ctx context.Context, it *rules.Item, t apiops.Target, facts []rules.Fact, a rules.Action) error {
	var owners []types.UID
	for i, f := range facts {
		if f.State == rules.Solid && it.OwnerReferences[i].UID != it.Identity.UID {
			owners = append(owners, it.OwnerReferences[i].UID)
		}
	}
	unlock := w.deletions.rlock(owners)
	confirmed := slices.Clone(facts)
	changed := false
	for i, f := range facts {
		if f.State != rules.Solid {
			continue
		}
		cf, err := w.resolver.confirm(ctx, it.Identity, &it.OwnerReferences[i])
		if err != nil {
			unlock()
			return err
		}
		confirmed[i] = cf
		if cf.State != f.State {
			changed = true
		}
	}
	if !changed {
		defer unlock()
		return w.execute(ctx, it, t, a, why{facts: confirmed})
	}
	unlock()
	states := rules.States(confirmed)
	a = w.cfg.Rules.DecideDependent(it, states, rules.CycleCheck(it.Identity.UID, w.graph.WaitsFor))
	if a.Type != rules.DeleteItem {
		return errRetry
	}
	if w.hold(ctx, it, confirmed) {
		return nil
	}
	a.Waiting = waitingOwners(it, states)
	return w.execute(ctx, it, t, a, why{facts: confirmed})
}

// execute makes the calls of a write decided for it, at t, and records
// each (wrote) with what the decision rests on (y).
//
// What each write rests on, and why it is fresh enough (docs/correctness.md):
//   - RemoveReferences and the cycle-breaking unblock replace the item's
//     ownerReferences only if they are still exactly the list the decision
//     read (apiops.ReplaceOwnerReferences tests it); the owners' states it
//     rests on are monotonic (dangling, waiting) or were confirmed by a
//     quorum read under the owners' deletion locks (solid; see
//     planConfirmedRemoval).
//   - RemoveForegroundFinalizer replaces the finalizers only if they are
//     still the list read; "no blocking dependent left" comes from a graph
//     in which every resource that could hold one has been listed
//     (negativeFactsReady).
//   - DeleteItem carries the item's uid and resourceVersion; on a 409 it is
//     retried only if a quorum read shows the same ownerReferences and
//     finalizers (deleteItem).
//
// Each write is also announced at V(2) before it is sent (the lines tests
// and operators grep for); its record is logged at V(0) once it returned.
func (w *Workers) execute(ctx context.Context, it *rules.Item, t apiops.Target, a rules.Action, y why) error {
	logger := klog.FromContext(ctx)
	switch a.Type {
	case rules.RemoveReferences:
		if l := logger.V(2); l.Enabled() {
			l.Info("Removing dangling and waiting owner references", "object", it.Identity.String())
		}
		rec := dependentRecord(history.OpRemoveReferences, it, y, removeReason(y), func(i int) bool { return y.facts[i].State != rules.Solid })
		rec.Preconditions = history.Preconditions{UID: it.Identity.UID, Tests: testsOwnerReferences}
		if w.cfg.DryRun {
			return w.shadowWrite(ctx, &rec, it.ResourceVersion)
		}
		_, err := w.ops.ReplaceOwnerReferences(ctx, t, it.OwnerReferences, a.Refs)
		w.wrote(ctx, &rec, err)
		return err
	case rules.RemoveForegroundFinalizer:
		if l := logger.V(2); l.Enabled() {
			l.Info("Dependents gone; removing foregroundDeletion finalizer", "object", it.Identity.String())
		}
		rec := history.Record{
			Operation: history.OpRemoveFinalizer, Object: history.ObjectOf(it.Identity),
			Reason: finalizerReason(rules.FinalizerForeground, y), Finalizer: rules.FinalizerForeground,
			Preconditions: history.Preconditions{UID: it.Identity.UID, Tests: testsFinalizers},
		}
		if w.cfg.DryRun {
			return w.shadowWrite(ctx, &rec, it.ResourceVersion)
		}
		// Once the finalizer is gone, an owner that other finalizers keep
		// is solid again: a dependent's DELETE decided while it was
		// waiting must not land after this (deleteItem checks fgReleased
		// under the same lock). Recorded before the write, forgotten if
		// it fails.
		defer w.deletions.lock(it.Identity.UID)()
		w.fgReleased.Add(it.Identity.UID)
		_, err := w.ops.ReplaceFinalizers(ctx, t, it.Finalizers, a.Finalizers)
		if err != nil && !apierrors.IsNotFound(err) {
			w.fgReleased.Delete(it.Identity.UID)
		}
		w.wrote(ctx, &rec, err)
		return err
	}
	refs := it.OwnerReferences
	if a.Unblock {
		if l := logger.V(2); l.Enabled() {
			l.Info("Clearing blockOwnerDeletion to break a cycle", "object", it.Identity.String())
		}
		rec := dependentRecord(history.OpUnblock, it, y,
			"breaking a cycle before deleting it in the foreground: blockOwnerDeletion is cleared on its references to owners in foreground deletion that wait for it through blocking references",
			func(i int) bool {
				return !equalBool(it.OwnerReferences[i].BlockOwnerDeletion, a.Refs[i].BlockOwnerDeletion)
			})
		rec.Preconditions = history.Preconditions{UID: it.Identity.UID, Tests: testsOwnerReferences}
		if w.cfg.DryRun {
			// The DELETE it precedes is decided too.
			_ = w.shadowWrite(ctx, &rec, it.ResourceVersion)
			refs = a.Refs
		} else {
			obj, err := w.ops.ReplaceOwnerReferences(ctx, t, it.OwnerReferences, a.Refs)
			w.wrote(ctx, &rec, err)
			if err != nil {
				return err
			}
			// The DELETE carries the version the patch produced, so it must
			// rest on the object as that version has it. The patch tested the
			// references only: if the object meanwhile started its own
			// deletion or changed its finalizers (a client deleted it with
			// Orphan), the policy decided from the graph's copy would replace
			// the client's (the apiserver swaps the GC finalizers on a second
			// DELETE): decide again from the graph once it has caught up
			// (found by the simulator: seed 2825 of the hold-list world).
			if obj.DeletionTimestamp != nil && !it.Deleting || !slices.Equal(obj.Finalizers, it.Finalizers) {
				return errRetry
			}
			t.ResourceVersion, refs = obj.ResourceVersion, a.Refs
		}
	}
	// Guarded: the arguments (a formatted identity) would otherwise be
	// built for every collected object even with the line disabled.
	if l := logger.V(2); l.Enabled() {
		l.Info("Deleting garbage", "object", it.Identity.String(), "policy", string(a.Policy))
	}
	rec := dependentRecord(history.OpDelete, it, y, deleteReason(it, y, a.Policy), nil)
	rec.Policy = string(a.Policy)
	return w.deleteItem(ctx, t, refs, it.Finalizers, a.Policy, a.Waiting, &rec)
}

// deleteConflictRetries bounds how often one write re-reads an object whose
// DELETE met a 409 and deletes it again.
const deleteConflictRetries = 3

// deleteItem deletes the object at t, decided from its ownerReferences refs
// and finalizers. The DELETE is conditional on t's uid and resourceVersion.
// A 409 means the object changed since the graph saw it; if a quorum read
// shows the same ownerReferences and finalizers and no deletionTimestamp,
// what changed is something the decision does not rest on (an annotation,
// a status), and the DELETE is sent again conditional on the version just
// read. An object updated every few milliseconds is thereby collected at
// once instead of waiting behind a graph that is always a version behind
// (upstream retries with the uid alone; the resourceVersion read keeps
// even the window between that read and the DELETE closed).
//
// The DELETE holds the object's deletion lock (see planConfirmedRemoval),
// and its waiting owners' locks shared: "waiting" is monotonic except for
// kgc's own removal of an owner's foregroundDeletion finalizer, which
// leaves an owner that other finalizers keep solid again. A DELETE decided
// while such an owner was waiting is therefore not sent once kgc has
// released it (the item is decided again: kept while the owner stays).
//
// Every DELETE sent is recorded (wrote) from rec, with the preconditions
// it carried.
func (w *Workers) deleteItem(ctx context.Context, t apiops.Target, refs []metav1.OwnerReference, finalizers []string, policy metav1.DeletionPropagation, waiting []types.UID, rec *history.Record) error {
	if w.cfg.DryRun {
		r := *rec
		r.Preconditions = history.Preconditions{UID: t.UID, ResourceVersion: t.ResourceVersion}
		return w.shadowWrite(ctx, &r, t.ResourceVersion)
	}
	defer w.deletions.lockSet(waiting, t.UID)()
	for _, o := range waiting {
		if w.fgReleased.Has(o) {
			return errRetry
		}
	}
	send := func() error {
		// Deletions resting on this object count once, here (hold.go).
		// Recorded before the call: its deletion may reach the graph,
		// and its dependents be decided, before the call returns.
		w.deletedByKGC.Add(t.UID)
		err := w.ops.Delete(ctx, t, policy)
		if err != nil {
			w.deletedByKGC.Delete(t.UID)
		}
		r := *rec // each DELETE its own record
		r.Preconditions = history.Preconditions{UID: t.UID, ResourceVersion: t.ResourceVersion}
		w.wrote(ctx, &r, err)
		return err
	}
	err := send()
	for range deleteConflictRetries {
		if !apierrors.IsConflict(err) {
			return err
		}
		w.cfg.Metrics.Lookup(metrics.LookupConfirm)
		cur, gerr := w.ops.Get(ctx, t.Resource, t.Namespace, t.Name)
		switch {
		case apierrors.IsNotFound(gerr):
			return gerr
		case gerr != nil:
			return err // the 409 stands: re-check from the graph
		case cur.UID != t.UID || cur.DeletionTimestamp != nil ||
			!equalRefs(cur.OwnerReferences, refs) || !slices.Equal(cur.Finalizers, finalizers):
			return err
		case cur.ResourceVersion == t.ResourceVersion:
			// Nothing moved: the 409 is not a stale version (a proxy, an
			// admission hook). Back off as for any failure.
			return err
		}
		t.ResourceVersion = cur.ResourceVersion
		err = send()
	}
	return err
}

// equalRefs reports whether two ownerReference lists are the same list.
func equalRefs(a, b []metav1.OwnerReference) bool {
	return slices.EqualFunc(a, b, func(x, y metav1.OwnerReference) bool {
		return x.UID == y.UID && x.APIVersion == y.APIVersion && x.Kind == y.Kind && x.Name == y.Name &&
			equalBool(x.Controller, y.Controller) && equalBool(x.BlockOwnerDeletion, y.BlockOwnerDeletion)
	})
}

func equalBool(a, b *bool) bool { return (a == nil) == (b == nil) && (a == nil || *a == *b) }

// conflictOrNil maps a write's error to the item's outcome: 404 means the
// object is gone (nothing left to do); a stale write (409, or a JSON patch
// whose test failed: 422) means the decision was made from a stale version
// and the item is re-checked, rate-limited, from the graph once the monitor
// delivered a newer one (writeLog holds it back until then); anything else
// is retried as a failure.
func conflictOrNil(err error) error {
	switch {
	case err == nil, apierrors.IsNotFound(err), errors.Is(err, errShadow):
		return nil
	case apiops.IsStale(err):
		return errRetry
	}
	return err
}
