package inspect

import (
	"context"
	"fmt"
	"slices"
	"strings"

	apiequality "k8s.io/apimachinery/pkg/api/equality"

	"github.com/kgc-dev/kgc/internal/rules"
	"github.com/kgc-dev/kgc/internal/shadow"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Verdicts: what kgc does (or waits for) with an object.
const (
	// VerdictKeep: kgc leaves the object alone.
	VerdictKeep = "keep"
	// VerdictRetry: kgc keeps the object and checks again later (an owner's
	// kind is not served).
	VerdictRetry = "keep-and-retry"
	// VerdictRemoveReferences: kgc keeps the object but removes its dangling
	// and waiting ownerReferences.
	VerdictRemoveReferences = "remove-references"
	// VerdictDelete: kgc deletes the object (with Policy).
	VerdictDelete = "delete"
	// VerdictWaitForDependents: in Foreground deletion, waiting for blocking
	// dependents.
	VerdictWaitForDependents = "wait-for-dependents"
	// VerdictRemoveForegroundFinalizer: in Foreground deletion, nothing
	// blocks any more: kgc removes the foregroundDeletion finalizer.
	VerdictRemoveForegroundFinalizer = "remove-foreground-finalizer"
	// VerdictOrphanDependents: being deleted with the orphan policy: kgc
	// removes its dependents' references to it, then the orphan finalizer.
	VerdictOrphanDependents = "orphan-dependents"
	// VerdictWaitForFinalizers: being deleted; only finalizers kgc does not
	// handle hold it.
	VerdictWaitForFinalizers = "wait-for-finalizers"
	// VerdictBeingDeleted: being deleted, nothing holds it (graceful
	// deletion in progress).
	VerdictBeingDeleted = "being-deleted"
)

// OwnerInfo is one ownerReference and how it classifies.
type OwnerInfo struct {
	Reference metav1.OwnerReference `json:"reference"`
	State     string                `json:"state"`
	Reason    string                `json:"reason"`
	// ElsewhereNamespace: the UID belongs to an object in this namespace
	// (OwnerRefInvalidNamespace).
	ElsewhereNamespace string  `json:"elsewhereNamespace,omitempty"`
	Owner              *Object `json:"owner,omitempty"`
}

// Decision is kgc's verdict on one object, with reasons.
type Decision struct {
	Verdict string `json:"verdict"`
	// Policy of the deletion, for VerdictDelete.
	Policy string `json:"policy,omitempty"`
	// Unblock: kgc first clears blockOwnerDeletion on the object's
	// references (cycle breaking).
	Unblock bool `json:"unblock,omitempty"`
	// RemovedReferences: the references kgc removes (VerdictRemoveReferences).
	RemovedReferences []metav1.OwnerReference `json:"removedReferences,omitempty"`
	// KeepRule: the keep-rule that keeps the object (VerdictKeep).
	KeepRule string   `json:"keepRule,omitempty"`
	Why      []string `json:"why"`
}

// Explanation answers "why is this object (not) deleted?".
type Explanation struct {
	Object   *Object     `json:"object"`
	Owners   []OwnerInfo `json:"owners,omitempty"`
	Decision Decision    `json:"decision"`
	// UnhandledFinalizers are pending finalizers no collector handles.
	UnhandledFinalizers []string `json:"unhandledFinalizers,omitempty"`
	// WaitingFor: for an object in Foreground deletion, the blocking
	// dependents it waits for, recursively.
	WaitingFor []*Wait `json:"waitingFor,omitempty"`
	// NonBlocking: dependents kgc deletes too but does not wait for.
	NonBlocking []*Object `json:"nonBlocking,omitempty"`
	// Orphaning: for an object being deleted with the orphan policy, the
	// dependents that still reference it.
	Orphaning []*Object `json:"orphaning,omitempty"`
	// StuckOn: the objects at the bottom of WaitingFor that nothing in kgc
	// will move: held by finalizers no collector handles, or kept.
	StuckOn []Held `json:"stuckOn,omitempty"`
	// Hold: a running kgc decided to delete it and holds it instead
	// (asked with --ask-kgc or --kgc-url; HoldOf).
	Hold *Hold `json:"hold,omitempty"`
	// Shadow: a kgc in shadow mode's latest disagreements with the
	// cluster's collector about the object (explain --ask-kgc).
	Shadow []shadow.Disagreement `json:"shadowDisagreements,omitempty"`
}

// Wait is one blocking dependent of an object in Foreground deletion.
type Wait struct {
	Object   *Object  `json:"object"`
	Decision Decision `json:"decision"`
	// UnhandledFinalizers: what holds it if nothing in kgc will.
	UnhandledFinalizers []string `json:"unhandledFinalizers,omitempty"`
	WaitingFor          []*Wait  `json:"waitingFor,omitempty"`
	// Cycle: already listed above (an ownership cycle); not expanded again.
	Cycle bool `json:"cycle,omitempty"`
}

const unhandledNote = "nothing in kgc will remove this; whoever owns it must"

// Decide is kgc's verdict on o, with the reasons, from the view's state.
// It also returns o's owner classification and dependents.
func Decide(ctx context.Context, p rules.Policy, v View, o *Object) (Decision, []OwnerInfo, []*Object, error) {
	deps, err := v.Dependents(ctx, o)
	if err != nil {
		return Decision{}, nil, nil, err
	}
	var owners []OwnerInfo
	var res []Resolution
	if !o.Deleting && len(o.OwnerReferences) > 0 {
		if res, err = resolveAll(ctx, v, o); err != nil {
			return Decision{}, nil, nil, err
		}
		for i, r := range res {
			owners = append(owners, OwnerInfo{Reference: o.OwnerReferences[i], State: r.State.String(), Reason: r.Reason, ElsewhereNamespace: r.ElsewhereNamespace, Owner: r.Owner})
		}
	} else {
		for _, ref := range o.OwnerReferences {
			owners = append(owners, OwnerInfo{Reference: ref, State: "not-checked", Reason: "the object is being deleted; kgc does not look at its owners any more"})
		}
	}
	return decide(p, o, deps, res, viewWaitsFor(ctx, v, o, deps)), owners, deps, nil
}

// viewWaitsFor is graph.WaitsFor over a view: the dependents of an object
// whose reference to it blocks, other than itself. Objects are found from
// o outwards; a view that cannot answer ends the search there.
func viewWaitsFor(ctx context.Context, v View, o *Object, deps []*Object) func(types.UID) []types.UID {
	known := map[types.UID]*Object{o.UID: o}
	cached := map[types.UID][]*Object{o.UID: deps}
	return func(uid types.UID) []types.UID {
		obj := known[uid]
		if obj == nil {
			return nil
		}
		ds, ok := cached[uid]
		if !ok {
			ds, _ = v.Dependents(ctx, obj)
			cached[uid] = ds
		}
		var out []types.UID
		for _, d := range ds {
			if d.UID != uid && d.blocks(uid) {
				known[d.UID] = d
				out = append(out, d.UID)
			}
		}
		return out
	}
}

func decide(p rules.Policy, o *Object, deps []*Object, res []Resolution, waitsFor func(types.UID) []types.UID) Decision {
	item := o.item(dependentsOf(o, deps))
	custom := o.CustomFinalizers()
	var d Decision
	switch {
	case o.DeletingDependents():
		a := rules.DecideForegroundOwner(&item)
		if a.Type == rules.RemoveForegroundFinalizer {
			d.Verdict = VerdictRemoveForegroundFinalizer
			d.Why = append(d.Why, "it is being deleted in the foreground and no dependent with blockOwnerDeletion=true remains: kgc removes the foregroundDeletion finalizer")
		} else {
			n := 0
			for _, dd := range item.Dependents {
				if dd.Blocking {
					n++
				}
			}
			d.Verdict = VerdictWaitForDependents
			d.Why = append(d.Why, fmt.Sprintf("it is being deleted in the foreground: the apiserver keeps it until kgc removes the foregroundDeletion finalizer, which kgc does once none of its %d blocking dependent(s) (blockOwnerDeletion=true) remains", n))
		}
	case o.Orphaning():
		objs := make([]rules.Object, len(deps))
		for i, dep := range deps {
			objs[i] = dep.object()
		}
		oo := o.object()
		switch a := rules.DecideOrphan(&oo, objs); a.Type {
		case rules.OrphanDependents:
			d.Verdict = VerdictOrphanDependents
			d.Why = append(d.Why, fmt.Sprintf("it is being deleted with the orphan policy: kgc removes the reference to it from its %d dependent(s), then the orphan finalizer; the dependents stay", len(a.Orphan)))
		default:
			d.Verdict = VerdictOrphanDependents
			d.Why = append(d.Why, "it is being deleted with the orphan policy and no dependent references it any more: kgc removes the orphan finalizer")
		}
	case o.Deleting && len(custom) > 0:
		d.Verdict = VerdictWaitForFinalizers
		d.Why = append(d.Why, fmt.Sprintf("it is being deleted and waits only for finalizer(s) %s: %s", strings.Join(custom, ", "), unhandledNote))
	case o.Deleting:
		d.Verdict = VerdictBeingDeleted
		d.Why = append(d.Why, "it is being deleted (deletionTimestamp set, no finalizer pending): the apiserver removes it when its grace period ends; kgc has nothing to do")
	case len(o.OwnerReferences) == 0:
		d.Verdict = VerdictKeep
		d.Why = append(d.Why, "it has no ownerReferences: it is not anyone's dependent, so kgc never deletes it; it goes only when someone deletes it")
	default:
		a := p.DecideDependent(&item, states(res), rules.CycleCheck(o.UID, waitsFor))
		d.DecideDependent(o, res, a, len(deps))
	}
	switch d.Verdict {
	case VerdictDelete, VerdictRemoveReferences, VerdictRemoveForegroundFinalizer, VerdictOrphanDependents:
		d.Why = append(d.Why, "kgc does this as soon as it processes the object; if it does not happen, check that a garbage collector (kgc, or kube-controller-manager's) is running and ready")
	}
	if !o.Deleting && len(custom) > 0 {
		d.Why = append(d.Why, fmt.Sprintf("once deleted, it waits for finalizer(s) %s: %s", strings.Join(custom, ", "), unhandledNote))
	}
	return d
}

func (d *Decision) DecideDependent(o *Object, res []Resolution, a rules.Action, ndeps int) {
	describe := func(want ...rules.OwnerState) []string {
		var out []string
		for i, r := range res {
			for _, s := range want {
				if r.State == s {
					ref := o.OwnerReferences[i]
					out = append(out, fmt.Sprintf("%s/%s (%s)", kindGroup(ref.APIVersion, ref.Kind), ref.Name, r.State))
				}
			}
		}
		return out
	}
	switch a.Type {
	case rules.Keep:
		if a.Retry {
			d.Verdict = VerdictRetry
			d.Why = append(d.Why, fmt.Sprintf("kgc keeps it and checks again later: it never collects an object on a reference it cannot resolve: %s", strings.Join(describe(rules.Unresolvable), ", ")))
			return
		}
		d.Verdict = VerdictKeep
		if a.Why != "" {
			d.KeepRule = a.Why
			d.Why = append(d.Why, "kgc keeps it, although none of its owners is alive, by keep-rule "+a.Why)
		} else if s := describe(rules.Invalid); len(s) > 0 {
			d.Why = append(d.Why, fmt.Sprintf("kgc never collects it, and leaves all its references as they are, while it has an invalid reference: %s", strings.Join(s, ", ")))
		} else if s := describe(rules.Solid); len(s) > 0 {
			d.Why = append(d.Why, fmt.Sprintf("kgc keeps it: it has a live owner: %s", strings.Join(s, ", ")))
		}
	case rules.RemoveReferences:
		d.Verdict = VerdictRemoveReferences
		// The references kgc writes are the ones it keeps; every other
		// entry goes, even one sharing its UID with a kept entry (the same
		// owner named under a wrong name is dangling).
		kept := slices.Clone(a.Refs)
		for _, r := range o.OwnerReferences {
			if i := slices.IndexFunc(kept, func(k metav1.OwnerReference) bool { return apiequality.Semantic.DeepEqual(k, r) }); i >= 0 {
				kept = slices.Delete(kept, i, i+1)
				continue
			}
			d.RemovedReferences = append(d.RemovedReferences, r)
		}
		d.Why = append(d.Why, fmt.Sprintf("kgc keeps it: it has a live owner: %s; it removes the references to owners that are gone or being deleted: %s",
			strings.Join(describe(rules.Solid), ", "), strings.Join(describe(rules.Dangling, rules.Waiting), ", ")))
	case rules.DeleteItem:
		d.Verdict = VerdictDelete
		d.Policy = string(a.Policy)
		d.Unblock = a.Unblock
		d.Why = append(d.Why, fmt.Sprintf("none of its owners is alive: %s", strings.Join(describe(rules.Dangling, rules.Waiting), ", ")))
		switch {
		case a.Policy == metav1.DeletePropagationForeground && len(describe(rules.Waiting)) > 0 && ndeps > 0:
			d.Why = append(d.Why, fmt.Sprintf("kgc deletes it in the foreground: an owner is being deleted in the foreground and it has %d dependent(s) of its own, which go first", ndeps))
		case a.Policy == metav1.DeletePropagationOrphan:
			d.Why = append(d.Why, "kgc deletes it with the orphan policy, as its own orphan finalizer asks: its dependents stay")
		case a.Policy == metav1.DeletePropagationForeground:
			d.Why = append(d.Why, "kgc deletes it in the foreground, as its own foregroundDeletion finalizer asks")
		default:
			d.Why = append(d.Why, "kgc deletes it in the background")
		}
		if a.Unblock {
			d.Why = append(d.Why, "first it clears blockOwnerDeletion on its references: one of its dependents is itself waiting for its dependents (breaking an ownership cycle)")
		}
	}
}

// Explain answers "why is this object (not) deleted?".
func Explain(ctx context.Context, p rules.Policy, v View, o *Object) (*Explanation, error) {
	d, owners, deps, err := Decide(ctx, p, v, o)
	if err != nil {
		return nil, err
	}
	e := &Explanation{Object: o, Owners: owners, Decision: d, UnhandledFinalizers: o.CustomFinalizers()}
	switch {
	case o.DeletingDependents():
		seen := map[types.UID]bool{o.UID: true}
		for _, dep := range deps {
			if !dep.blocks(o.UID) {
				e.NonBlocking = append(e.NonBlocking, dep)
				continue
			}
			w, err := waitFor(ctx, p, v, dep, seen)
			if err != nil {
				return nil, err
			}
			e.WaitingFor = append(e.WaitingFor, w)
		}
		e.StuckOn = stuckOn(e.WaitingFor, nil)
	case o.Orphaning():
		for _, dep := range deps {
			for _, r := range dep.OwnerReferences {
				if r.UID == o.UID {
					e.Orphaning = append(e.Orphaning, dep)
					break
				}
			}
		}
	}
	return e, nil
}

func waitFor(ctx context.Context, p rules.Policy, v View, o *Object, seen map[types.UID]bool) (*Wait, error) {
	w := &Wait{Object: o, UnhandledFinalizers: o.CustomFinalizers()}
	if seen[o.UID] {
		w.Cycle = true
		return w, nil
	}
	seen[o.UID] = true
	d, _, deps, err := Decide(ctx, p, v, o)
	if err != nil {
		return nil, err
	}
	w.Decision = d
	if o.DeletingDependents() {
		for _, dep := range deps {
			if !dep.blocks(o.UID) {
				continue
			}
			c, err := waitFor(ctx, p, v, dep, seen)
			if err != nil {
				return nil, err
			}
			w.WaitingFor = append(w.WaitingFor, c)
		}
	}
	return w, nil
}

// stuckOn collects the waits nothing in kgc will resolve.
func stuckOn(ws []*Wait, out []Held) []Held {
	for _, w := range ws {
		switch {
		case w.Cycle:
		case len(w.UnhandledFinalizers) > 0 && w.Object.Deleting:
			out = append(out, Held{Object: w.Object, Why: "held by finalizer(s) " + strings.Join(w.UnhandledFinalizers, ", ") + ": " + unhandledNote})
		case w.Decision.Verdict == VerdictKeep || w.Decision.Verdict == VerdictRetry:
			out = append(out, Held{Object: w.Object, Why: strings.Join(w.Decision.Why, "; ")})
		}
		out = stuckOn(w.WaitingFor, out)
	}
	return out
}
