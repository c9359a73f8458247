package rules

import "k8s.io/apimachinery/pkg/types"

// Policy is the configurable part of the rules: the zero value is
// kube-controller-manager's rules exactly. The collector (collector.Config)
// and the inspection commands (explain, preview) take the same Policy, so a
// rule added here applies to what kgc does and to what it says it would do
// alike (internal/workers/equivalence_test.go runs one table through all
// three). A new keep-rule is a KeepRule in a file of this package, plus the
// flag or option that puts it in the Policy.
type Policy struct {
	// Keep lists the keep-rules in force, checked in order.
	Keep []KeepRule
}

// KeepRule vetoes collecting an object: kgc never deletes an object a
// keep-rule keeps, whatever its owners' state (it still removes references
// to owners that are gone, and orphans it when its owner is deleted with
// Orphan). An object kept this way that blocks a Foreground owner keeps
// that owner waiting, as a finalizer would.
type KeepRule struct {
	// Name identifies the rule in explanations and logs.
	Name string
	// Keeps returns why o must not be collected, or "" when it may be.
	Keeps func(o *Object) string
}

// DecideDependent is the package's DecideDependent under the policy: a
// deletion a keep-rule vetoes becomes Keep, with the rule's reason in Why.
func (p Policy) DecideDependent(item *Item, states []OwnerState, onCycle func(owner types.UID) bool) Action {
	a := DecideDependent(item, states, onCycle)
	if a.Type != DeleteItem {
		return a
	}
	for _, r := range p.Keep {
		if why := r.Keeps(&item.Object); why != "" {
			return Action{Type: Keep, Why: r.Name + ": " + why}
		}
	}
	return a
}
