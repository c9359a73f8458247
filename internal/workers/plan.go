package workers

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/kgc-dev/kgc/internal/history"
	"github.com/kgc-dev/kgc/internal/orphanlog"
	"github.com/kgc-dev/kgc/internal/rules"
)

// errRetry asks for a rate-limited re-check without reporting a failure.
var errRetry = errors.New("re-check later")

// errAgain asks for the item to be decided again at once: its writes
// succeeded and its next step can follow (an orphaning owner whose
// dependents were just orphaned).
var errAgain = errors.New("decide again")

// write is an API write that carries out a decision: it makes the call,
// records it, and returns the item's outcome (see conflictOrNil).
type write func(context.Context) error

// planDeleteItem checks one item: a foreground owner waiting for its
// dependents, or a live dependent that may be garbage. It returns the write
// its decision needs, if any; nothing has been written when it returns.
func (w *Workers) planDeleteItem(ctx context.Context, uid types.UID) (write, error) {
	// A foreground owner that is still blocked has nothing to do but, now
	// and then, re-check its dependents: decide that from the graph's
	// blocking count instead of copying every dependent (see
	// dependentsRecheck). An unblocked owner always takes the full path.
	if o, ok := w.graph.Owner(uid); ok && !o.Virtual && o.DeletingDependents &&
		w.graph.BlockingDependents(uid) > 0 && !w.rechecks.due(uid) {
		return nil, nil
	}
	it, ok := w.graph.Item(uid)
	if !ok || it.Virtual {
		return nil, nil
	}
	// Already written to at this version: wait for the monitor (see writeLog).
	if skip, stale := w.writes.check(uid, it.ResourceVersion); skip {
		if stale {
			return nil, errRetry
		}
		return nil, nil
	}
	var a rules.Action
	switch {
	case it.DeletingDependents():
		a = rules.DecideForegroundOwner(&it)
	case it.Deleting || len(it.OwnerReferences) == 0:
		// Being deleted by someone else, or not a dependent at all.
		return nil, nil
	default:
		// Each reference's state comes with the evidence it rests on,
		// gathered where the fact was (resolveFact); the decision carries
		// it to the write's record (why).
		facts := make([]rules.Fact, len(it.OwnerReferences))
		var errs []error
		for i := range it.OwnerReferences {
			f, err := w.resolver.resolveFact(ctx, it.Identity, &it.OwnerReferences[i])
			facts[i] = f
			switch s := f.State; {
			case errors.Is(err, errAwaitingList):
				// Parked until the owner's resource is listed, which
				// queues it again: nothing to decide or retry before.
				// The other owners are resolved then too (no GET now
				// that the answer would not be used for).
				return nil, errors.Join(errs...)
			case err != nil:
				errs = append(errs, err)
			case s == rules.Unresolvable || s == rules.Invalid:
				klog.FromContext(ctx).V(1).Info("Owner reference cannot be resolved; keeping object", "object", it.Identity.String(),
					"ownerAPIVersion", it.OwnerReferences[i].APIVersion, "ownerKind", it.OwnerReferences[i].Kind, "state", s.String())
				w.reportUnresolvable(it.Identity, &it.OwnerReferences[i], s)
			}
		}
		if err := errors.Join(errs...); err != nil {
			return nil, err
		}
		states := rules.States(facts)
		a = w.cfg.Rules.DecideDependent(&it, states, rules.CycleCheck(uid, w.graph.WaitsFor))
		if a.Type == rules.RemoveReferences && slices.Contains(states, rules.Waiting) {
			return w.planConfirmedRemoval(&it, facts, a)
		}
		if a.Type == rules.DeleteItem && w.hold(ctx, &it, facts) {
			return nil, nil
		}
		a.Waiting = waitingOwners(&it, states)
		return w.plan(ctx, &it, a, why{facts: facts})
	}
	return w.plan(ctx, &it, a, why{})
}

// planConfirmedRemoval returns the write of a RemoveReferences decision
// that removes a reference to a waiting owner because solid owners keep
// the item.
//
// Removing that reference is right only while a solid owner really keeps
// the item. If the owner is in fact gone (deleted a moment ago, its watch
// event not applied yet) or being deleted, the item is garbage and must go
// before the waiting owner's Foreground deletion may finish (S3); removing
// the reference instead releases that owner at once.
// Solid from the graph is good enough to keep an item, never for this
// irreversible write. So the write confirms each solid owner with a quorum
// GET just before the patch, and holds the owner's deletion lock (shared)
// from the GET to the patch: kgc's own DELETE of that owner (exclusive,
// deleteItem), decided concurrently by another worker, cannot land in
// between. If the confirmation changes the picture, the item is decided
// again from what it found: deleted at once when it is garbage, else
// checked again later. The mixed case is rare, and the one place a
// decision from the graph pays a GET per solid owner. Removing only
// dangling (or orphaned) references needs none of this: those owners are
// gone whatever the solid one does, and if it went too, its deletion event
// re-checks the item. What is left is upstream's window: another client
// deleting the solid owner between the GET and the patch.
func (w *Workers) planConfirmedRemoval(it *rules.Item, facts []rules.Fact, a rules.Action) (write, error) {
	t, err := w.target(it)
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context) error {
		err := w.removeConfirmed(ctx, it, t, facts, a)
		w.writes.record(it.Identity.UID, it.ResourceVersion, err)
		return conflictOrNil(err)
	}, nil
}

// waitingOwners returns the UIDs of the owners states counts as waiting,
// for DeleteItem decisions (nil otherwise).
func waitingOwners(it *rules.Item, states []rules.OwnerState) []types.UID {
	var out []types.UID
	for i, s := range states {
		if s == rules.Waiting {
			out = append(out, it.OwnerReferences[i].UID)
		}
	}
	return out
}

// plan turns a decision, and what it rests on, into the write that
// carries it out (nil when the decision needs none). It is the only caller
// of apiops for the attempt-to-delete path.
func (w *Workers) plan(ctx context.Context, it *rules.Item, a rules.Action, y why) (write, error) {
	switch a.Type {
	case rules.Keep:
		if a.Retry {
			return nil, errRetry
		}
		return nil, nil
	case rules.CheckDependents:
		for _, uid := range a.Dependents {
			w.attemptToDelete.Add(uid)
		}
		return nil, nil
	case rules.RemoveForegroundFinalizer:
		unlisted, err := w.negativeFactsReady(ctx, it.Identity, rules.FinalizerForeground)
		if err != nil {
			return nil, err
		}
		y.unlisted = unlisted
		// "No blocking dependent" was read from the graph before the
		// check: read it again now that every resource is known listed.
		if again, ok := w.graph.Item(it.Identity.UID); !ok || rules.DecideForegroundOwner(&again).Type != rules.RemoveForegroundFinalizer {
			return nil, errRetry
		}
	case rules.RemoveReferences, rules.DeleteItem:
	default:
		return nil, fmt.Errorf("unknown action %d", a.Type)
	}
	t, err := w.target(it)
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context) error {
		err := w.execute(ctx, it, t, a, y)
		w.writes.record(it.Identity.UID, it.ResourceVersion, err)
		return conflictOrNil(err)
	}, nil
}

// planOrphanItem decides for an owner being deleted with the orphan
// finalizer (rules.DecideOrphan) and returns the writes that carry the
// decision out: one ownerReference patch per dependent that still
// references it, each taking a write slot like every other write; or, once
// none does, the removal of its orphan finalizer. Nothing has been written
// to an object when it returns; before it returns a finalizer removal, it
// waits until its owner is durable in the orphan journal. After the
// patches succeed the owner is decided again at once (errAgain), and then
// finds every dependent orphaned: the write log records what each patch
// removed, so the graph need not have caught up.
//
// Each patch removes the references by the owner's UID and carries the
// dependent's uid (apiops.RemoveOwnerReference), so whatever else changed
// on the dependent meanwhile, only this owner's reference goes.
func (w *Workers) planOrphanItem(ctx context.Context, uid types.UID) ([]write, error) {
	owner, ok := w.graph.Item(uid)
	if !ok || owner.Virtual || !owner.Orphaning() {
		return nil, nil
	}
	if skip, stale := w.writes.check(uid, owner.ResourceVersion); skip {
		if stale {
			return nil, errRetry
		}
		return nil, nil
	}
	a, uncertain := w.decideOrphan(&owner)
	switch {
	case a.Type == rules.OrphanDependents:
		return w.orphanWrites(&owner.Object, a.Orphan)
	case uncertain:
		return nil, errRetry
	}
	unlisted, err := w.negativeFactsReady(ctx, owner.Identity, rules.FinalizerOrphan)
	if err != nil {
		return nil, err
	}
	// "No dependent left" was read from the graph before the check: a
	// resource's first list may have landed in between, with dependents
	// the read missed (the check then finds nothing unlisted). Read it
	// again now that every resource is known listed.
	if again, ok := w.graph.Item(uid); !ok || !again.Orphaning() {
		return nil, nil
	} else if b, uncertain := w.decideOrphan(&again); b.Type != rules.RemoveOrphanFinalizer || uncertain {
		return nil, errRetry
	}
	t, err := w.target(&owner)
	if err != nil {
		return nil, err
	}
	// The owner is written to the journal before its finalizer removal is
	// even handed to a write slot: the wait (a Lease write, up to
	// journalWait when the journal cannot be written) holds up this
	// orphan worker only, not one of the MaxWritesInFlight slots every
	// write shares (a journal outage took them all, and deletions of
	// unrelated garbage starved). If the removal then never starts
	// (shutdown), the entry stays, as after a crash: the journal errs
	// towards keeping objects.
	if !w.cfg.DryRun {
		if err := w.recordOrphaned(ctx, uid); err != nil {
			return nil, err
		}
	}
	rec := history.Record{
		Operation: history.OpRemoveFinalizer, Object: history.ObjectOf(owner.Identity),
		Reason: finalizerReason(rules.FinalizerOrphan, why{unlisted: unlisted}), Finalizer: rules.FinalizerOrphan,
		Preconditions: history.Preconditions{UID: owner.Identity.UID, Tests: testsFinalizers},
	}
	return []write{func(ctx context.Context) error {
		if w.cfg.DryRun {
			return conflictOrNil(w.shadowWrite(ctx, &rec, owner.ResourceVersion))
		}
		klog.FromContext(ctx).V(2).Info("Dependents orphaned; removing orphan finalizer", "object", owner.Identity.String())
		// Recorded before the write: the owner's deletion may reach the
		// graph, and a lagging dependent be checked, before this call
		// returns — in this process, or in the next kgc after a restart
		// (the journal: a dependent this decision missed, under the
		// unlisted hold or a lagging watch, is seen only later, and must
		// be orphaned then, not deleted as dangling). The journal's entry
		// was made durable before this write was returned (above); if it
		// could not be written, the finalizer stays and the owner is
		// retried.
		// Only kgc's own removal counts: a client that deletes the owner
		// again with another policy makes the apiserver drop the orphan
		// finalizer, and then its dependents are garbage.
		//
		// After the answer, a refusal (writeRefused) proves only that
		// this patch did not land; a timeout, a 5xx or a broken
		// connection may follow a removal that landed, and then the owner
		// may be gone through kgc's own write. So:
		//   - success, 404, or an ambiguous answer: remembered, in memory
		//     and in the journal (Confirm), whatever a later attempt
		//     meets (at worst a stale entry orphans a dependent that a
		//     later Background deletion of the owner would have
		//     collected: the journal errs towards keeping objects);
		//   - a refusal: forgotten only if no earlier attempt may have
		//     landed — this process had not remembered the owner before
		//     this attempt, and the journal's entry is the one this
		//     attempt's Record made (Withdraw). An attempt decided again
		//     on a graph that has not seen an earlier removal (its event
		//     lost, or late past the write log's TTL) is refused exactly
		//     because that removal landed; forgetting the owner then let
		//     a dependent the orphaning missed be deleted as dangling once
		//     the owner went (S2). An owner whose orphan finalizer a new
		//     Orphan request put back after kgc's removal stays
		//     remembered too: kgc did release it once.
		had := w.orphaned.Has(uid)
		w.orphaned.Add(uid)
		_, err := w.ops.ReplaceFinalizers(ctx, t, owner.Finalizers, a.Finalizers)
		if writeRefused(err) {
			if !had {
				w.orphaned.Delete(uid)
			}
			w.journal.Withdraw(uid)
		} else {
			w.journal.Confirm(uid)
		}
		w.wrote(ctx, &rec, err)
		w.writes.record(uid, owner.ResourceVersion, err)
		return conflictOrNil(err)
	}}, nil
}

// writeRefused reports whether err proves that the apiserver did not
// apply a write: it answered with a 4xx status other than 404 (a
// conflict or a failed test, an invalid or forbidden request, too many
// requests). A timeout (504 "may still be processing"), another 5xx, a
// broken connection or a cancelled context may follow a write that landed.
func writeRefused(err error) bool {
	var st apierrors.APIStatus
	if err == nil || !errors.As(err, &st) {
		return false
	}
	code := st.Status().Code
	return code >= 400 && code < 500 && code != http.StatusNotFound && code != http.StatusRequestTimeout
}

// journalWait bounds how long an orphan finalizer removal waits for its
// journal entry to be written before it gives up and is retried.
const journalWait = 30 * time.Second

// recordOrphaned records owner in the journal before its orphan finalizer
// is removed.
func (w *Workers) recordOrphaned(ctx context.Context, owner types.UID) error {
	ctx, cancel := context.WithTimeout(ctx, journalWait)
	defer cancel()
	if err := w.journal.Record(ctx, owner); err != nil {
		// The finalizer removal is not sent: an entry this Record made
		// has nothing to cover. One the journal held before stays: an
		// earlier removal of this owner, answered ambiguously (in this
		// process or another), may rest on it (Withdraw).
		w.journal.Withdraw(owner)
		return fmt.Errorf("recording the owner in the orphan journal before removing its orphan finalizer: %w", err)
	}
	return nil
}

// orphanMemory is what kgc knows of the owners it orphaned: this
// process's own record (recent, long) and the journal (durable, shorter:
// see package orphanlog), which also holds earlier processes' records.
type orphanMemory struct {
	recent  *recentSet[types.UID]
	journal *orphanlog.Journal
}

func (m orphanMemory) Has(uid types.UID) bool { return m.recent.Has(uid) || m.journal.Has(uid) }

// decideOrphan decides for an orphaning owner from the graph's
// dependents (rules.DecideOrphan). uncertain is set when a dependent's
// reference to the owner cannot be told from the graph (see below): the
// finalizer must then wait.
func (w *Workers) decideOrphan(owner *rules.Item) (a rules.Action, uncertain bool) {
	deps := make([]rules.Object, 0, len(owner.Dependents))
	for _, d := range owner.Dependents {
		dep, ok := w.graph.Object(d.UID)
		switch {
		case !ok:
		case w.writes.orphaned(dep.Identity.UID, dep.ResourceVersion, owner.Identity.UID):
			// kgc's own patch removed the reference, or found it gone.
		case w.writes.wrote(dep.Identity.UID, dep.ResourceVersion):
			// kgc wrote to this dependent at the version the graph still
			// shows, but not to remove this owner's reference (another
			// owner's orphaning, a reference removal): the graph cannot
			// tell whether the reference to this owner is still on the
			// server. The finalizer must wait until the graph shows the
			// dependent's newer version; skipping it here lost orphans.
			uncertain = true
		default:
			deps = append(deps, dep)
		}
	}
	return rules.DecideOrphan(&owner.Object, deps), uncertain
}

// orphanWrites returns one write per dependent of owner to orphan. Each
// succeeds with errAgain: the owner is decided again once all are done.
// Each write's record names the owner and how kgc knows it is orphaning:
// the graph observed it with a deletionTimestamp and the orphan finalizer,
// at its resourceVersion (monotonic, as every orphaning write needs).
func (w *Workers) orphanWrites(ownerObj *rules.Object, orphans []rules.Orphan) ([]write, error) {
	owner := ownerObj.Identity.UID
	because := history.Owner{
		APIVersion: ownerObj.Identity.APIVersion, Kind: ownerObj.Identity.Kind, Name: ownerObj.Identity.Name, UID: owner,
		State: "orphaning", Removed: true,
		Evidence: history.EvidenceOf(rules.Evidence{Source: rules.SourceGraph, Reason: rules.ReasonOrphaning, ResourceVersion: ownerObj.ResourceVersion}),
	}
	reason := fmt.Sprintf("its owner %s %s is being deleted with the orphan policy: its reference is removed, and the object stays", ownerObj.Identity.Kind, ownerObj.Identity.Name)
	ws := make([]write, 0, len(orphans))
	for _, o := range orphans {
		dep := o.Dependent
		t, err := w.target(&rules.Item{Object: *dep})
		if err != nil {
			return nil, fmt.Errorf("orphaning %s: %w", dep.Identity, err)
		}
		rec := history.Record{
			Operation: history.OpOrphan, Object: history.ObjectOf(dep.Identity), Reason: reason,
			Owners: []history.Owner{because}, Preconditions: history.Preconditions{UID: dep.Identity.UID},
		}
		ws = append(ws, func(ctx context.Context) error {
			if w.cfg.DryRun {
				// Not errAgain: the dependent still references the
				// owner, and deciding the owner again would only
				// decide these writes again.
				return conflictOrNil(w.shadowWrite(ctx, &rec, dep.ResourceVersion))
			}
			_, err := w.ops.RemoveOwnerReference(ctx, t, owner, o.Indices)
			w.wrote(ctx, &rec, err)
			// Success (or 404) proves the dependent no longer references
			// this owner: the patch removes the reference by the owner's
			// UID whatever else the object holds.
			w.writes.recordOrphan(dep.Identity.UID, dep.ResourceVersion, owner, err)
			if err = conflictOrNil(err); err != nil {
				return err
			}
			return errAgain
		})
	}
	return ws, nil
}
