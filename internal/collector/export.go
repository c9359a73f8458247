package collector

import (
	"k8s.io/apimachinery/pkg/types"

	"github.com/kgc-dev/kgc/internal/graph"
)

// DecideDependent is decideDependent for read-only callers (the inspection
// commands): what kgc does with a live item whose ownerReferences classify
// as states. It has no side effects.
func DecideDependent(item *graph.Item, states []OwnerState, onCycle func(owner types.UID) bool) Action {
	return decideDependent(item, states, onCycle)
}

// DecideForegroundOwner is decideForegroundOwner for read-only callers: what
// kgc does with an item in Foreground deletion, given its dependents.
func DecideForegroundOwner(item *graph.Item) Action {
	return decideForegroundOwner(item)
}
