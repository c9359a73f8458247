package shadow

import (
	"fmt"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kgc-dev/kgc/internal/graph"
	"github.com/kgc-dev/kgc/internal/history"
	"github.com/kgc-dev/kgc/internal/rules"
)

// Owner states as Diff reads them from the graph (OwnerStateOf).
const (
	// OwnerSolid: observed at the reference's coordinates, not in
	// foreground deletion and not orphaning. Nothing a garbage collector
	// does to the dependent rests on it.
	OwnerSolid = "solid"
	// OwnerOrphaning: deleting with the orphan finalizer; a collector
	// removes references to it, never deletes on its account.
	OwnerOrphaning = "orphaning"
	// OwnerWaiting: in foreground deletion.
	OwnerWaiting = "waiting"
	// OwnerAbsent: observed deleted.
	OwnerAbsent = "absent"
	// OwnerUnobserved: the graph never observed an object with that UID.
	OwnerUnobserved = "unobserved"
	// OwnerElsewhere: an object with that UID exists under other
	// coordinates (dangling for this dependent).
	OwnerElsewhere = "elsewhere"
)

// GraphReader is what Diff reads from the graph (a *graph.Graph).
type GraphReader interface {
	Object(uid types.UID) (rules.Object, bool)
	Owner(uid types.UID) (graph.OwnerView, bool)
}

// OwnerStateOf classifies, from g alone, the owner ref of a dependent in
// namespace ns.
func OwnerStateOf(g GraphReader, ns string, ref *metav1.OwnerReference) string {
	o, ok := g.Owner(ref.UID)
	switch {
	case !ok || (o.Virtual && !o.Absent):
		return OwnerUnobserved
	case !rules.Matches(o.Identity, ref, ns):
		return OwnerElsewhere
	case o.Absent:
		return OwnerAbsent
	case o.DeletingDependents:
		return OwnerWaiting
	case o.Deleting:
		if obj, ok := g.Object(ref.UID); ok && obj.Orphaning() {
			return OwnerOrphaning
		}
	}
	return OwnerSolid
}

// LostRef is an ownerReference a Change removed.
type LostRef struct {
	Owner types.UID
	// State is the owner's state in kgc's graph just before (Owner*).
	State string
	// Deleting: the object was already deleting.
	Deleting bool
}

// GC reports whether a garbage collector removes such a reference: one to
// an owner that is not solid (kube-controller-manager's collector
// removes references to owners that are gone or in foreground deletion
// from dependents a solid owner keeps, and references to orphaning
// owners), from an object not already deleting (its fate is decided; a
// reference removal landing then is one decided before, from an older
// view). A controller releasing an object from a solid owner (a
// ReplicaSet whose selector no longer matches a Pod) is not.
func (l LostRef) GC() bool { return l.State != OwnerSolid && !l.Deleting }

// Change is what one observed event did to one object, as far as a
// garbage collector is concerned.
type Change struct {
	Object history.Object
	// Deleted: the object got a deletionTimestamp, or disappeared without
	// ever being observed with one.
	Deleted bool
	// Gone: the object no longer exists.
	Gone bool
	// DeletedGC: Deleted, and the object had owner references none of
	// which was solid (or orphaning) in kgc's graph: a deletion a
	// garbage collector makes. Owners describes them.
	DeletedGC bool
	Owners    string
	// LostRefs are the references the event removed (an update).
	LostRefs []LostRef
	// Unblocked are the owners whose reference lost blockOwnerDeletion.
	Unblocked []types.UID
	// LostFinalizers are the orphan and foregroundDeletion finalizers the
	// event removed (or the object held when it disappeared).
	LostFinalizers []string
	// FinalizerGC: LostFinalizers were removed from an object already
	// deleting, and not replaced by the other one (the apiserver swaps
	// them when an object is deleted again with another policy).
	FinalizerGC bool
}

// empty reports whether c says nothing a comparison uses.
func (c *Change) empty() bool {
	return !c.Deleted && !c.Gone && len(c.LostRefs) == 0 && len(c.Unblocked) == 0 && len(c.LostFinalizers) == 0
}

// gcFinalizers are the finalizers garbage collection removes.
var gcFinalizers = []string{rules.FinalizerOrphan, rules.FinalizerForeground}

// Diff is what ev does to its object, read against g before ev is
// applied. ok is false when ev changes nothing a comparison uses (and for
// Relisted and Listed events, which name no object: deletions a relist
// finds are reported by Gone).
func Diff(g GraphReader, ev graph.Event) (c Change, ok bool) {
	if ev.Type != graph.Upsert && ev.Type != graph.Delete {
		return c, false
	}
	uid := ev.Object.Identity.UID
	old, had := g.Object(uid)
	if !had {
		// Never observed: nothing it lost can be told, and an object
		// first seen deleting (a start-up list) is no news.
		return c, false
	}
	c.Object = history.ObjectOf(old.Identity)
	cur := &ev.Object
	if ev.Type == graph.Delete {
		c.Gone = true
		c.Deleted = !old.Deleting
		for _, f := range gcFinalizers {
			if slices.Contains(old.Finalizers, f) {
				c.LostFinalizers = append(c.LostFinalizers, f)
			}
		}
		c.FinalizerGC = len(c.LostFinalizers) > 0 && old.Deleting
	} else {
		c.Deleted = cur.Deleting && !old.Deleting
		for i := range old.OwnerReferences {
			r := &old.OwnerReferences[i]
			j := slices.IndexFunc(cur.OwnerReferences, func(x metav1.OwnerReference) bool { return x.UID == r.UID })
			switch {
			case j < 0:
				if !slices.ContainsFunc(c.LostRefs, func(l LostRef) bool { return l.Owner == r.UID }) {
					c.LostRefs = append(c.LostRefs, LostRef{Owner: r.UID, State: OwnerStateOf(g, old.Identity.Namespace, r), Deleting: old.Deleting})
				}
			case isTrue(r.BlockOwnerDeletion) && !isTrue(cur.OwnerReferences[j].BlockOwnerDeletion):
				c.Unblocked = append(c.Unblocked, r.UID)
			}
		}
		added := false
		for _, f := range gcFinalizers {
			had, has := slices.Contains(old.Finalizers, f), slices.Contains(cur.Finalizers, f)
			if had && !has {
				c.LostFinalizers = append(c.LostFinalizers, f)
			}
			added = added || (!had && has)
		}
		c.FinalizerGC = len(c.LostFinalizers) > 0 && old.Deleting && !added
	}
	if c.Deleted && len(old.OwnerReferences) > 0 {
		c.DeletedGC, c.Owners = deletedGC(g, &old)
	}
	return c, !c.empty()
}

// deletedGC reports whether none of obj's owners keeps it in g (solid or
// orphaning), and describes them.
func deletedGC(g GraphReader, obj *rules.Object) (bool, string) {
	gc := true
	parts := make([]string, 0, len(obj.OwnerReferences))
	for i := range obj.OwnerReferences {
		r := &obj.OwnerReferences[i]
		s := OwnerStateOf(g, obj.Identity.Namespace, r)
		if s == OwnerSolid || s == OwnerOrphaning {
			gc = false
		}
		parts = append(parts, fmt.Sprintf("%s %s (uid %s) %s", r.Kind, r.Name, r.UID, s))
	}
	return gc, strings.Join(parts, "; ")
}

func isTrue(b *bool) bool { return b != nil && *b }
