package workers

import (
	"context"
	"errors"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kgc-dev/kgc/internal/history"
	"github.com/kgc-dev/kgc/internal/rules"
)

// Shadow mode (Config.DryRun): the workers decide everything as usual and
// make no write. Each write site hands its record to shadowWrite instead
// of calling the API server; the record is logged, counted
// (kgc_shadow_decisions_total), kept in the history with outcome shadow,
// and handed to Config.Shadow, which compares it with what the cluster's
// own collector then does (package shadow).
//
// What the workers do after a write that was not made:
//   - shadowWrite returns errShadow, which the item's outcome treats as
//     success (conflictOrNil): the item is forgotten, not retried, so
//     kgc never spins on a decision nothing will carry out.
//   - Nothing that stands for kgc's own writes is recorded: the write log
//     (writes.go) forgets the object, so the next change to it — or to
//     anything its decision rests on — is decided afresh; the orphaned,
//     fgReleased and fgUncertain sets stay empty; the orphaning owner is not decided
//     again at once (errAgain), since its dependents still reference it.
//     Steps that rest on an earlier write (an owner's orphan finalizer
//     after its dependents were orphaned, a Foreground owner's finalizer
//     after its blocking dependents went) are decided once the graph
//     shows the cluster's own collector made that earlier write.
//   - A decision taken again from the same version of the object (a
//     periodic re-check, an owner's event re-queueing its dependents) is
//     not logged or counted again (shadowSeen).
var errShadow = errors.New("shadow mode: not written")

// CheckOrphaning queues an orphaning owner for a check. Shadow mode calls
// it when a dependent lost its reference to the owner: kgc wrote nothing,
// so nothing else decides the owner again (its orphan finalizer's
// removal) once the cluster's collector has orphaned its dependents.
func (w *Workers) CheckOrphaning(owner types.UID) {
	if w.started.Load() {
		w.attemptToOrphan.Add(owner)
	}
}

// shadowKey is one decision about one version of an object.
type shadowKey struct {
	uid types.UID
	rv  string
	sig string
}

// shadowWrite records rec, decided from version rv of its object, as a
// write kgc would have made, once per decision and version. It returns
// errShadow.
func (w *Workers) shadowWrite(ctx context.Context, rec *history.Record, rv string) error {
	k := shadowKey{uid: rec.Object.UID, rv: rv, sig: shadowSig(rec)}
	if w.shadowSeen.Has(k) {
		return errShadow
	}
	w.shadowSeen.Add(k)
	w.wrote(ctx, rec, errShadow)
	if w.cfg.Shadow != nil {
		w.cfg.Shadow(*rec)
	}
	return errShadow
}

// shadowSig tells decisions about one object apart.
func shadowSig(rec *history.Record) string {
	var b strings.Builder
	b.WriteString(rec.Operation)
	b.WriteByte('/')
	b.WriteString(rec.Finalizer)
	b.WriteByte('/')
	b.WriteString(rec.Policy)
	for _, o := range rec.Owners {
		if o.Removed {
			b.WriteByte('/')
			b.WriteString(string(o.UID))
		}
	}
	return b.String()
}

// Judge is shadow mode's answer to "the cluster's collector just made
// this change; does kgc decide it too?", asked before the graph applies
// the change (package shadow, Tracker.Observe). It decides the object uid
// from the graph alone — no API call, no waiting: it runs on the graph
// builder's goroutine — and if the decision is the write op (about
// detail: the owner whose reference is removed, or the finalizer) makes
// it in shadow (shadowWrite), which reaches the comparison. It catches
// decisions kgc had queued but not made yet when the change arrived; a
// decision that needs facts the graph cannot vouch for (an owner never
// observed) is left to the workers.
func (w *Workers) Judge(ctx context.Context, uid types.UID, op, detail string) {
	if !w.cfg.DryRun {
		return
	}
	it, ok := w.graph.Item(uid)
	if !ok || it.Virtual {
		return
	}
	if op == history.OpRemoveFinalizer {
		w.judgeFinalizer(ctx, &it, detail)
		return
	}
	if it.Deleting || len(it.OwnerReferences) == 0 {
		return
	}
	if op == history.OpOrphan {
		owner, ok := w.graph.Item(types.UID(detail))
		if !ok || owner.Virtual || !owner.Orphaning() {
			return
		}
		if a, _ := w.decideOrphan(&owner); a.Type != rules.OrphanDependents {
			return
		}
		if ws, err := w.orphanWrites(&owner.Object, []rules.Orphan{{Dependent: &it.Object, Indices: it.References(owner.Identity.UID)}}); err == nil {
			for _, wr := range ws {
				_ = wr(ctx)
			}
		}
		return
	}
	facts := make([]rules.Fact, len(it.OwnerReferences))
	for i := range it.OwnerReferences {
		ref := &it.OwnerReferences[i]
		o, ok := w.graph.Owner(ref.UID)
		if !ok || (o.Virtual && !o.Absent) || !rules.Matches(o.Identity, ref, it.Identity.Namespace) {
			return // the graph cannot vouch for it
		}
		facts[i] = rules.ClassifyFact(ref.UID, observed(o), w.resolver.isOrphaned)
	}
	states := rules.States(facts)
	a := w.cfg.Rules.DecideDependent(&it, states, rules.CycleCheck(uid, w.graph.WaitsFor))
	switch {
	case op == history.OpDelete && a.Type == rules.DeleteItem:
	case op == history.OpRemoveReferences && a.Type == rules.RemoveReferences:
		i := slices.IndexFunc(it.OwnerReferences, func(r metav1.OwnerReference) bool { return string(r.UID) == detail })
		if i < 0 || states[i] == rules.Solid {
			return
		}
	default:
		return
	}
	t, err := w.target(&it)
	if err != nil {
		return
	}
	a.Waiting = waitingOwners(&it, states)
	_ = w.execute(ctx, &it, t, a, why{facts: facts})
}

// judgeFinalizer is Judge for the removal of an orphan or
// foregroundDeletion finalizer: decided as the workers do, except that a
// resource not listed yet means no (the workers would hold it).
func (w *Workers) judgeFinalizer(ctx context.Context, it *rules.Item, finalizer string) {
	for _, r := range w.unlisted() {
		if it.Identity.Namespace == "" || r.Namespaced {
			return
		}
	}
	rec := history.Record{
		Operation: history.OpRemoveFinalizer, Object: history.ObjectOf(it.Identity),
		Reason: finalizerReason(finalizer, why{}), Finalizer: finalizer,
		Preconditions: history.Preconditions{UID: it.Identity.UID, Tests: testsFinalizers},
	}
	switch finalizer {
	case rules.FinalizerOrphan:
		if !it.Orphaning() {
			return
		}
		if a, uncertain := w.decideOrphan(it); a.Type != rules.RemoveOrphanFinalizer || uncertain {
			return
		}
	case rules.FinalizerForeground:
		if !it.DeletingDependents() || rules.DecideForegroundOwner(it).Type != rules.RemoveForegroundFinalizer {
			return
		}
	default:
		return
	}
	_ = w.shadowWrite(ctx, &rec, it.ResourceVersion)
}
