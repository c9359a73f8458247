package workers

import (
	"context"
	"errors"
	"slices"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/resourceversion"
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
//     finalizers (deleteItem). Its waiting owners are waiting unless kgc
//     released them after the decision read them (releasedAfter); one
//     whose release was answered ambiguously is read first
//     (confirmStillWaiting).
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
		// under the same lock, which this write holds exclusively from
		// before the patch until its answer is settled). The release is
		// recorded with the resourceVersion it left the owner at, settled
		// by the answer:
		//   - success: released at the version the patch produced;
		//   - 404 (the owner is gone): released for good (UIDs are never
		//     reused);
		//   - a refusal (writeRefused: a 4xx other than 404/408) proves
		//     the patch did not land: nothing is recorded;
		//   - any other failure (504 "may still be processing", another
		//     5xx, a broken connection, a cancelled context) may follow
		//     a patch that landed, or one that did not. Recording the owner
		//     released would make a blocking dependent's DELETE wait for
		//     an owner that waits for it (a deadlock, if the patch did
		//     not land); recording nothing would let a DELETE decided
		//     while the owner waited land after the owner became solid
		//     (S1, if it did). The owner is marked uncertain instead, and
		//     the next DELETE resting on it waiting reads it first
		//     (confirmStillWaiting).
		// A refusal leaves what an earlier attempt established as it was
		// (its release, or its uncertainty): it says nothing about that
		// attempt, and a failed finalizer test may be its very effect. An
		// attempt decided again on a graph that has not seen the earlier
		// release yet (its event lost, or late past the write log's TTL)
		// is refused exactly so; forgetting the release then let a
		// dependent's DELETE decided while the owner waited land on an
		// owner kgc had made solid (S1; found by the simulator, seed
		// 7168). Likewise an ambiguous answer to an attempt decided before
		// a release that landed (released) leaves the owner released, not
		// uncertain.
		// A client's second Foreground DELETE of an owner kgc released
		// puts foregroundDeletion back, at a resourceVersion newer than
		// the release: a new request. Decisions that read the owner
		// waiting at such a version rest on that request, not on the
		// first one, and go on (releasedAfter); the release of the new
		// request is settled like the first — the first release says
		// nothing about it (taking the first release as final refused the
		// dependents' DELETEs for good, and a blocking one and the owner
		// waited for each other).
		owner := it.Identity.UID
		defer w.deletions.lock(owner)()
		released := w.releasedAfter(owner, it.ResourceVersion)
		obj, err := w.ops.ReplaceFinalizers(ctx, t, it.Finalizers, a.Finalizers)
		switch {
		case err == nil:
			at := releasedForGood
			if obj != nil && obj.ResourceVersion != "" {
				at = obj.ResourceVersion
			}
			w.markReleased(owner, at)
			w.fgUncertain.Delete(owner)
		case apierrors.IsNotFound(err):
			w.markReleased(owner, releasedForGood)
			w.fgUncertain.Delete(owner)
		case writeRefused(err):
		default:
			if !released {
				w.fgUncertain.Add(owner)
			}
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
	return w.deleteItem(ctx, it.Identity, t, refs, it.Finalizers, a.Policy, waitingAt(it, a.Waiting, y.facts), &rec)
}

// waitingOwner is an owner a DELETE decision counted as waiting, and the
// resourceVersion it was read waiting at ("" when not known).
type waitingOwner struct {
	uid types.UID
	rv  string
}

// waitingAt pairs the waiting owners of a decision with the
// resourceVersions their facts were read at (facts are it's references'
// facts, in order).
func waitingAt(it *rules.Item, waiting []types.UID, facts []rules.Fact) []waitingOwner {
	out := make([]waitingOwner, len(waiting))
	for i, uid := range waiting {
		out[i].uid = uid
		if j := slices.IndexFunc(it.OwnerReferences, func(r metav1.OwnerReference) bool { return r.UID == uid }); j >= 0 && j < len(facts) {
			out[i].rv = facts[j].Evidence.ResourceVersion
		}
	}
	return out
}

// releasedForGood is the release version of an owner whose release found
// it gone (or left a version kgc did not learn): every decision that read
// it waiting counts as made before the release.
const releasedForGood = "gone"

// markReleased records that kgc's release of owner is known to have
// landed by resourceVersion rv (the version its patch produced, or a later
// one a read found it solid at; releasedForGood for an owner gone),
// keeping a later record.
func (w *Workers) markReleased(owner types.UID, rv string) {
	if prev, ok := w.fgReleased.Get(owner); ok && rv != releasedForGood && !newerRV(rv, prev) {
		return
	}
	w.fgReleased.Put(owner, rv)
}

// releasedAfter reports whether kgc released owner (removed its
// foregroundDeletion finalizer) after the owner was read waiting at
// resourceVersion rv: a decision resting on that read must not be acted
// on. A read at a version newer than every release kgc made of the owner
// shows foregroundDeletion put back by a later Foreground DELETE (a new
// request) and is not refused.
//
// Why the comparison is sound: the resourceVersions of one object are
// ordered (kube-apiserver's are the etcd revisions of its writes, and
// compare as integers: k8s.io/apimachinery/pkg/util/resourceversion). A
// release recorded at version R is the version kgc's patch produced (or a
// later one a quorum read found the owner solid at), at which the owner
// had no foregroundDeletion. An owner read waiting at a version below R
// was read before that release; one read waiting above R had the
// finalizer back after it, which only a client's DELETE puts there (the
// apiserver refuses a new finalizer on a deleting object otherwise). A
// version that does not compare (empty, not an integer, releasedForGood)
// counts as read before the release: kgc then waits, as it did before,
// and never deletes on it.
func (w *Workers) releasedAfter(owner types.UID, rv string) bool {
	at, ok := w.fgReleased.Get(owner)
	return ok && !newerRV(rv, at)
}

// newerRV reports whether resourceVersion a of an object is later than b;
// false when either does not compare.
func newerRV(a, b string) bool {
	c, err := resourceversion.CompareResourceVersion(a, b)
	return err == nil && c > 0
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
// released it (the item is decided again: kept while the owner stays),
// unless the decision read the owner waiting at a version newer than that
// release: a later Foreground DELETE put foregroundDeletion back, and the
// decision rests on that new request (releasedAfter).
// A waiting owner whose release was answered ambiguously (fgUncertain)
// may or may not have been released: it is read first
// (confirmStillWaiting).
//
// Every DELETE sent is recorded (wrote) from rec, with the preconditions
// it carried.
func (w *Workers) deleteItem(ctx context.Context, dependent rules.Identity, t apiops.Target, refs []metav1.OwnerReference, finalizers []string, policy metav1.DeletionPropagation, waiting []waitingOwner, rec *history.Record) error {
	if w.cfg.DryRun {
		r := *rec
		r.Preconditions = history.Preconditions{UID: t.UID, ResourceVersion: t.ResourceVersion}
		return w.shadowWrite(ctx, &r, t.ResourceVersion)
	}
	owners := make([]types.UID, len(waiting))
	for i, o := range waiting {
		owners[i] = o.uid
	}
	defer w.deletions.lockSet(owners, t.UID)()
	for _, o := range waiting {
		if w.releasedAfter(o.uid, o.rv) {
			return errRetry
		}
	}
	for _, o := range waiting {
		if w.fgUncertain.Has(o.uid) {
			if err := w.confirmStillWaiting(ctx, dependent, refs, o.uid, rec); err != nil {
				return err
			}
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

// confirmStillWaiting reads owner, a waiting owner of dependent (named
// in refs) whose foregroundDeletion finalizer removal was answered
// ambiguously, with a quorum GET, and returns nil if it is still waiting:
// the removal did not land, and the DELETE decided while it waited may be
// sent. Otherwise it returns errRetry, and the dependent is decided again
// from what the owner now is. The caller holds owner's deletion lock
// (shared) and dependent's (exclusive).
//
// Why the GET is fresh enough: it is sent after the ambiguous removal
// returned, and under owner's deletion lock, which kgc's own removal
// takes exclusively; so no removal by kgc can land between the GET and
// the DELETE, and the removal that was answered ambiguously was sent
// before the GET. foregroundDeletion is never added back once removed, so
// an owner read with it has not lost it before the GET. What the GET cannot
// see is a removal still being processed by the apiserver when it reads
// (its answer, a 504, was sent while the handler's write was still in
// flight to etcd): a window of an etcd commit, past the read. Closing
// that would take a write to the owner; the window is the same as for any
// confirmation read (docs/correctness.md, "Known limits").
//
// What it found:
//   - still waiting (same UID, deletionTimestamp, foregroundDeletion):
//     the removal did not land; the owner is no longer uncertain (a
//     retried removal marks it again, under the exclusive lock);
//   - solid (same UID, no foregroundDeletion): the removal landed — or
//     the finalizer went otherwise; either way it is not waiting, and
//     will not be again but through a new Foreground DELETE: released as
//     of the version read, for every DELETE decided from an earlier read
//     too (releasedAfter);
//   - gone (404, or another UID): nothing of it can be released any more
//     (UIDs are never reused), so it is no longer uncertain; the DELETE
//     would not break S1, but it was decided, and its policy chosen, from
//     the owner waiting (Foreground for an object with dependents, never
//     held by the deletion breaker), so the dependent is decided again
//     with the owner gone;
//   - anything else (the GET failed, the owner's kind no longer maps):
//     still uncertain, and the dependent is retried.
//
// The read replaces the decision's evidence for owner in the DELETE's
// record (rec).
func (w *Workers) confirmStillWaiting(ctx context.Context, dependent rules.Identity, refs []metav1.OwnerReference, owner types.UID, rec *history.Record) error {
	i := slices.IndexFunc(refs, func(r metav1.OwnerReference) bool { return r.UID == owner })
	if i < 0 {
		return errRetry // not a reference of refs: the decision is not this item's
	}
	f, err := w.resolver.confirm(ctx, dependent, &refs[i]) // counted as LookupConfirm
	if err != nil {
		return err
	}
	switch f.State {
	case rules.Waiting:
		w.fgUncertain.Delete(owner)
		for j := range rec.Owners {
			if rec.Owners[j].UID == owner {
				rec.Owners[j].Evidence = history.EvidenceOf(f.Evidence)
			}
		}
		return nil
	case rules.Solid:
		w.markReleased(owner, f.Evidence.ResourceVersion)
		w.fgUncertain.Delete(owner)
	case rules.Dangling, rules.Orphaned:
		w.fgUncertain.Delete(owner)
	default:
		return errRetry
	}
	klog.FromContext(ctx).V(2).Info("Owner whose release was answered ambiguously is no longer waiting; deciding again",
		"object", dependent.String(), "owner", owner, "state", f.State.String())
	return errRetry
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
