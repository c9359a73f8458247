package rules

import (
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// ActionType is what a check decided to do.
type ActionType int

const (
	// Keep: nothing to do; the item is not garbage (or not yet decidable).
	Keep ActionType = iota
	// RemoveReferences: patch the item's ownerReferences to Refs.
	RemoveReferences
	// DeleteItem: delete the item with Policy, after setting its
	// ownerReferences to Refs first when Unblock is set (cycle breaking).
	DeleteItem
	// RemoveForegroundFinalizer: the item's blocking dependents are gone.
	RemoveForegroundFinalizer
	// CheckDependents: the item waits for its blocking dependents; re-check them.
	CheckDependents
	// OrphanDependents: the item is being deleted with the orphan
	// finalizer; remove the references to it from the dependents in Orphan.
	OrphanDependents
	// RemoveOrphanFinalizer: no dependent references the item any more.
	RemoveOrphanFinalizer
)

// Action is a decision. Decisions are values so that tests can compare them
// and so that all API calls happen in one place (execute).
type Action struct {
	Type ActionType
	// Policy for DeleteItem.
	Policy metav1.DeletionPropagation
	// Refs: the ownerReferences to write (RemoveReferences, or DeleteItem
	// with Unblock).
	Refs    []metav1.OwnerReference
	Unblock bool
	// Finalizers to write for RemoveForegroundFinalizer.
	Finalizers []string
	// Dependents to re-check for CheckDependents.
	Dependents []types.UID
	// Retry asks for a rate-limited re-check even though the action is Keep
	// (an owner kind is not served yet).
	Retry bool
	// Waiting, for DeleteItem: the owners the decision counted as waiting
	// (set by the worker, not by the decision; see workers.deleteItem).
	Waiting []types.UID
	// Orphan, for OrphanDependents: each dependent that still references
	// the item, with the indices of those references.
	Orphan []Orphan
	// Why, for Keep: the keep-rule that vetoed a deletion, and its reason
	// (see Policy).
	Why string
}

// Orphan is one dependent to orphan: the indices of its references to the
// orphaning owner (normally one).
type Orphan struct {
	Dependent *Object
	Indices   []int
}

// DecideOrphan decides for an owner being deleted with the orphan finalizer
// (owner.Orphaning()), given its dependents as last read: every dependent
// that still references it loses those references, and the dependents
// stay; once none references it, the orphan finalizer goes and the
// apiserver deletes the owner. The caller vouches that dependents is
// complete (the workers' negativeFactsReady): "none references it"
// is a negative fact.
func DecideOrphan(owner *Object, dependents []Object) Action {
	var out []Orphan
	for i := range dependents {
		if idx := dependents[i].References(owner.Identity.UID); len(idx) > 0 {
			out = append(out, Orphan{Dependent: &dependents[i], Indices: idx})
		}
	}
	if len(out) > 0 {
		return Action{Type: OrphanDependents, Orphan: out}
	}
	return Action{Type: RemoveOrphanFinalizer, Finalizers: WithoutFinalizer(owner.Finalizers, FinalizerOrphan)}
}

// DecideForegroundOwner decides for an item that is being deleted with the
// foregroundDeletion finalizer: it may go once no dependent blocks it.
func DecideForegroundOwner(item *Item) Action {
	blocked := false
	var check []types.UID
	for _, d := range item.Dependents {
		if !d.Blocking {
			continue
		}
		blocked = true
		// A dependent that is itself deleting its dependents is driven by its
		// own foreground check; re-checking it here would only churn.
		if !d.DeletingDependents {
			check = append(check, d.UID)
		}
	}
	if !blocked {
		return Action{
			Type:       RemoveForegroundFinalizer,
			Finalizers: WithoutFinalizer(item.Finalizers, FinalizerForeground),
		}
	}
	return Action{Type: CheckDependents, Dependents: check}
}

// DecideDependent decides for a live item with ownerReferences, given the
// state of each reference (states[i] belongs to item.OwnerReferences[i]).
// onCycle reports whether an owner of the item sits on a cycle of blocking
// references through the item (see CycleCheck); nil: no cycle is known.
//
// Rules (kube-controller-manager's): a reference whose kind no API serves
// keeps the item, checked again later; an invalid reference keeps it with
// every reference as it is; any solid owner keeps the item, minus its
// dangling and waiting references; an item whose owners are all waiting or
// dangling and that has dependents of its own goes Foreground; otherwise
// it is deleted with the policy its own finalizers ask for.
//
// Cycle breaking differs from upstream's. Upstream clears every
// blockOwnerDeletion of the item as soon as one of its dependents is itself
// deleting dependents, which also fires where there is no cycle (owner ←
// middle ← lower ← held, lower already waiting for held): owner is then
// released at once while middle and lower still exist (docs/correctness.md,
// "Cycles are broken only where there is one"). kgc clears only the
// references to waiting owners that really wait for the item through
// blocking references: an owner the item reaches again by following
// blocking dependents. Elsewhere the item simply waits.
//
// Orphaned references (owners deleted with the Orphan policy) never make an
// item garbage: they are removed like dangling ones, and an item left with
// no other reason to go is kept without them.
func DecideDependent(item *Item, states []OwnerState, onCycle func(owner types.UID) bool) Action {
	var solid, waiting, dangling, unresolvable, invalid, orphaned int
	for _, s := range states {
		switch s {
		case Solid:
			solid++
		case Waiting:
			waiting++
		case Dangling:
			dangling++
		case Unresolvable:
			unresolvable++
		case Invalid:
			invalid++
		case Orphaned:
			orphaned++
		}
	}
	switch {
	case unresolvable > 0:
		// Never collect on a reference we cannot resolve; look again later.
		return Action{Type: Keep, Retry: true}
	case invalid > 0:
		// Upstream's published rule (since v1.20): an item with an
		// unresolvable reference (a cluster-scoped item naming a
		// namespaced kind; a malformed apiVersion) is not garbage
		// collected, and its references are left as they are: they are
		// its author's error, not the collector's to edit.
		return Action{Type: Keep}
	case solid > 0:
		if waiting+dangling+orphaned == 0 {
			return Action{Type: Keep}
		}
		var keep []metav1.OwnerReference
		for i, s := range states {
			if s == Solid {
				keep = append(keep, item.OwnerReferences[i])
			}
		}
		return Action{Type: RemoveReferences, Refs: keep}
	case waiting+dangling == 0:
		// Only orphaned references: the item stays, without them.
		return Action{Type: RemoveReferences}
	case waiting > 0 && len(item.Dependents) > 0:
		a := Action{Type: DeleteItem, Policy: metav1.DeletePropagationForeground}
		if onCycle == nil {
			return a
		}
		var refs []metav1.OwnerReference
		for i := range item.OwnerReferences {
			r := &item.OwnerReferences[i]
			if states[i] != Waiting || r.BlockOwnerDeletion == nil || !*r.BlockOwnerDeletion || !onCycle(r.UID) {
				continue
			}
			if refs == nil {
				refs = slices.Clone(item.OwnerReferences)
			}
			f := false
			refs[i].BlockOwnerDeletion = &f
		}
		if refs != nil {
			a.Unblock, a.Refs = true, refs
		}
		return a
	default:
		return Action{Type: DeleteItem, Policy: PolicyFromFinalizers(item.Finalizers)}
	}
}

// maxCycleSearch bounds the objects one cycle check visits. Past it the
// check reports no cycle: the item waits (and is checked again) rather
// than release an owner early on a guess.
const maxCycleSearch = 100_000

// CycleCheck returns onCycle for DecideDependent: whether owner is reachable
// from item by following blocking dependents (waitsFor returns the
// dependents of an object whose reference to it has blockOwnerDeletion set,
// other than itself). If the item is deleted in the Foreground, it waits
// for those; if owner is among them, and waits for the item through its
// reference, the wait is a cycle nobody finishes. The search runs once, on
// the first question, so items that never ask cost nothing.
func CycleCheck(item types.UID, waitsFor func(types.UID) []types.UID) func(types.UID) bool {
	var reached map[types.UID]bool
	return func(owner types.UID) bool {
		if reached == nil {
			reached = map[types.UID]bool{}
			next := []types.UID{item}
			for len(next) > 0 && len(reached) < maxCycleSearch {
				u := next[len(next)-1]
				next = next[:len(next)-1]
				for _, d := range waitsFor(u) {
					if !reached[d] {
						reached[d] = true
						next = append(next, d)
					}
				}
			}
		}
		return reached[owner]
	}
}

// PolicyFromFinalizers honours what the item's own finalizers ask for.
func PolicyFromFinalizers(finalizers []string) metav1.DeletionPropagation {
	switch {
	case slices.Contains(finalizers, FinalizerOrphan):
		return metav1.DeletePropagationOrphan
	case slices.Contains(finalizers, FinalizerForeground):
		return metav1.DeletePropagationForeground
	default:
		return metav1.DeletePropagationBackground
	}
}

// WithoutFinalizer returns a copy of finalizers without f.
func WithoutFinalizer(finalizers []string, f string) []string {
	return slices.DeleteFunc(slices.Clone(finalizers), func(x string) bool { return x == f })
}
