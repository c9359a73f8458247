package workers

import (
	"cmp"
	"context"
	"slices"
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/kgc-dev/kgc/internal/breaker"
	"github.com/kgc-dev/kgc/internal/rules"
)

// Holds: deletions kgc decided and does not make (docs/semantics.md,
// "Holds").
//
// A DeleteItem decision that rests on a dangling owner passes two checks
// before its write is planned:
//
//  1. The restore signature (Config.HoldRestored): an owner reference
//     whose UID kgc never observed alive, while a quorum read found
//     another object (another UID) at the reference's kind, namespace and
//     name. That is what a dependent restored from a backup looks like:
//     its owner was restored too, under a new UID. The object is held
//     until an operator relinks it (`kgc relink`) or deletes it; it is
//     never counted by the breaker (it is not about to be deleted).
//  2. The breaker (Config.Breaker), which counts the deletion and may
//     hold it (package breaker).
//
// What is never held: a deletion with an owner in foreground deletion
// (Waiting) among its owners. The user asked for that cascade, and its
// owner waits for the object (S3): holding it would stall the owner's
// deletion. So a held object never blocks anything but its own
// collection: no owner waits for it (its only owners are gone), orphaning
// never waits for a deletion, and its own dependents are kept by it, as
// they would be by any live owner. The namespace lifecycle deletes what it
// deletes itself, without asking.
//
// Held objects are forgotten by the queue and queued again when resumed
// (Resume), when they change (a relink), or by the periodic re-check.

// holdBasis is what a DeleteItem decision rests on, as the holds see it.
type holdBasis struct {
	// dangling: it rests on a dangling owner and on no waiting one.
	dangling bool
	// owners: the dangling owners, as the breaker counts and holds them.
	owners []breaker.Owner
	// restored: the index of a reference with the restore signature; -1
	// if none.
	restored int
}

// basisOf classifies a DeleteItem decision from its facts (one per
// reference of refs). deletedByKGC reports owners kgc itself deleted.
func basisOf(refs []metav1.OwnerReference, facts []rules.Fact, deletedByKGC func(types.UID) bool) holdBasis {
	b := holdBasis{restored: -1}
	if len(facts) != len(refs) || slices.ContainsFunc(facts, func(f rules.Fact) bool { return f.State == rules.Waiting }) {
		return b
	}
	for i, f := range facts {
		if f.State != rules.Dangling {
			continue
		}
		b.dangling = true
		o := breaker.Owner{UID: refs[i].UID, Group: rules.GroupOf(refs[i].APIVersion), Kind: refs[i].Kind,
			NeverObserved:    unobserved(f.Evidence),
			DeletionObserved: f.Evidence.Source == rules.SourceWatchDeletion || deletedByKGC != nil && deletedByKGC(refs[i].UID)}
		if o.NeverObserved && f.Evidence.Reason == rules.ReasonOtherUID && b.restored < 0 {
			b.restored = i
		}
		b.owners = append(b.owners, o)
	}
	return b
}

// unobserved reports whether a dangling fact is about an owner kgc never
// observed alive. Observed: the graph saw that UID and then its deletion
// (a watch event, or a relist without it), or showed it solid just before
// a confirming GET. Unobserved: a quorum GET or LIST found nothing, or
// another object, for a UID the graph never held (the resolver reads only
// owners the graph does not hold; the absent cache keeps the source of
// the fact that put an owner there).
func unobserved(e rules.Evidence) bool {
	return !observedSource(e.Source)
}

// historyGap reports whether kgc's history of gk has a gap in which an
// owner of that kind could have been created and deleted unseen: its
// watch is interrupted and not verified since (Unverified), or a relist
// after a lost history completed within the breaker's window
// (HistoryLost). An owner never observed alive is evidence of a restore
// only where kgc's history of its kind is unbroken: there, an owner that
// existed when its dependent was created was seen, by the list that
// started the history or by an event; in a gap (a watch down for longer
// than the storage keeps history, then a 410 and a relist) a controller's
// short-lived owner goes unseen as a matter of course. The window bounds
// how long after a gap a dependent created in it is still decided on: a
// dependent first found by a relist of its own resource is no arrival at
// all (graph.Event.Fresh), so only a decision delayed past the window
// (a retry, a queue that long) can still count such an owner.
func (w *Workers) historyGap(gk schema.GroupKind) bool {
	if w.cfg.Unverified != nil {
		if _, unverified := w.cfg.Unverified(gk); unverified {
			return true
		}
	}
	if w.cfg.HistoryLost == nil {
		return false
	}
	lost := w.cfg.HistoryLost(gk)
	return !lost.IsZero() && w.now().Sub(lost) < w.cfg.Breaker.Config().Window
}

// RestoreHold is one object held for the restore signature.
type RestoreHold = breaker.Restored

// restoreHolds remembers the objects held for the restore signature
// (bounded: past max they are held all the same, only not listed).
type restoreHolds struct {
	mu  sync.Mutex
	max int
	m   map[types.UID]RestoreHold
}

func (r *restoreHolds) put(h RestoreHold) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.m == nil {
		r.m = map[types.UID]RestoreHold{}
	}
	if old, ok := r.m[h.UID]; ok {
		h.Since = old.Since
	} else if len(r.m) >= r.max {
		return
	}
	r.m[h.UID] = h
}

func (r *restoreHolds) get(uid types.UID) (RestoreHold, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	h, ok := r.m[uid]
	return h, ok
}

func (r *restoreHolds) forget(uid types.UID) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.m, uid)
}

// hold decides whether the DeleteItem decision about it, resting on
// facts, is held (true: plan no write). It records the hold and says so.
func (w *Workers) hold(ctx context.Context, it *rules.Item, facts []rules.Fact) bool {
	if !w.cfg.HoldRestored && w.cfg.Breaker == nil {
		return false
	}
	b := basisOf(it.OwnerReferences, facts, w.deletedByKGC.Has)
	if !b.dangling {
		return false
	}
	logger := klog.FromContext(ctx)
	if w.cfg.HoldRestored && b.restored >= 0 {
		ref := it.OwnerReferences[b.restored]
		e := facts[b.restored].Evidence
		_, known := w.restored.get(it.Identity.UID)
		w.restored.put(RestoreHold{APIVersion: it.Identity.APIVersion, Kind: it.Identity.Kind, Namespace: it.Identity.Namespace,
			Name: it.Identity.Name, UID: it.Identity.UID, Owner: ref, FoundUID: e.FoundUID, Evidence: e.String(), Since: w.now()})
		if !known {
			logger.Info("Holding a dependent whose owner looks restored: its owner reference names a UID kgc never observed, and another object has that kind and name; relink it with kgc relink, or delete it",
				"object", it.Identity.String(), "ownerKind", ref.Kind, "ownerName", ref.Name, "ownerUID", ref.UID, "foundUID", e.FoundUID)
		}
		return true
	}
	if w.cfg.Breaker == nil {
		return false
	}
	for i := range b.owners {
		if o := &b.owners[i]; o.NeverObserved {
			o.HistoryGap = w.historyGap(schema.GroupKind{Group: o.Group, Kind: o.Kind})
		}
	}
	v := w.cfg.Breaker.Admit(breaker.Deletion{UID: it.Identity.UID, Object: it.Identity.String(),
		Arrived: it.Arrived, Owners: b.owners, GraphSize: w.graph.Len()})
	if !v.Held {
		return false
	}
	if v.Tripped {
		logger.Error(nil, "Deletion circuit breaker tripped: holding deletions on this basis until an operator resumes",
			"signal", v.Trip.Signal, "count", v.Trip.Count, "limit", v.Trip.Limit, "window", v.Trip.Window.String(), "object", it.Identity.String(), "because", v.Trip.Because())
		if w.cfg.OnTrip != nil {
			w.cfg.OnTrip(v.Trip)
		}
	} else if l := logger.V(2); l.Enabled() {
		l.Info("Deletion held by the circuit breaker", "object", it.Identity.String(), "signal", v.Trip.Signal)
	}
	return true
}

// Resume queues the objects a resumed breaker released, or, when it held
// more than it remembered, re-checks everything unfinished.
func (w *Workers) Resume(ctx context.Context, release []types.UID, overflowed bool) {
	for _, uid := range release {
		w.attemptToDelete.Add(uid)
	}
	if overflowed {
		w.Recheck(ctx)
	}
}

// ForgetAbsences forgets every owner the workers remember as absent (the
// absent cache), so that each is looked up again: once the API's storage
// was rolled back, an owner observed deleted may exist again, under the
// same UID, and only the graph (which the relists correct) or a quorum
// read may say otherwise.
func (w *Workers) ForgetAbsences() { w.resolver.absent.Clear() }

// forgetHold drops a gone object from the holds.
func (w *Workers) forgetHold(uid types.UID) {
	w.restored.forget(uid)
	if w.cfg.Breaker != nil {
		w.cfg.Breaker.Forget(uid)
	}
}

// RestoreHolds returns the objects held for the restore signature that are
// still held: each is still in the graph with the reference it was held
// for (one relinked or deleted meanwhile is forgotten).
func (w *Workers) RestoreHolds() []RestoreHold {
	w.restored.mu.Lock()
	hs := make([]RestoreHold, 0, len(w.restored.m))
	for _, h := range w.restored.m {
		hs = append(hs, h)
	}
	w.restored.mu.Unlock()
	out := hs[:0]
	for _, h := range hs {
		if w.stillHeld(h) {
			out = append(out, h)
		} else {
			w.restored.forget(h.UID)
		}
	}
	slices.SortFunc(out, func(a, b RestoreHold) int {
		if c := a.Since.Compare(b.Since); c != 0 {
			return c
		}
		return cmp.Compare(a.UID, b.UID)
	})
	return out
}

// RestoreHeld returns the restore hold on uid, if it is still held.
func (w *Workers) RestoreHeld(uid types.UID) (RestoreHold, bool) {
	h, ok := w.restored.get(uid)
	if !ok || !w.stillHeld(h) {
		return RestoreHold{}, false
	}
	return h, true
}

func (w *Workers) stillHeld(h RestoreHold) bool {
	obj, ok := w.graph.Object(h.UID)
	return ok && !obj.Deleting && len(obj.References(h.Owner.UID)) > 0
}
