package graph

import "k8s.io/apimachinery/pkg/types"

// Pending is the work the graph says is unfinished, for a periodic re-check
// that makes the collector level-triggered: whatever event or queue item was
// lost, re-checking these finishes it.
type Pending struct {
	// AttemptToDelete: owners waiting for their dependents (foreground
	// deletion), and live dependents with an owner the graph cannot vouch
	// for (not observed, observed under other coordinates, observed deleted,
	// or waiting for its dependents).
	AttemptToDelete []types.UID
	// AttemptToOrphan: owners waiting for their dependents to be orphaned.
	AttemptToOrphan []types.UID
}

// Pending lists the nodes whose work is not finished. It reads the whole
// graph under the read lock: call it seldom (once per resync period).
func (g *Graph) Pending() Pending {
	g.mu.RLock()
	defer g.mu.RUnlock()
	var p Pending
	for uid, n := range g.nodes {
		if n.virtual {
			continue
		}
		if n.orphaning() {
			p.AttemptToOrphan = append(p.AttemptToOrphan, g.uidOf(uid))
		}
		if n.deletingDependents() || g.needsAttention(n) {
			p.AttemptToDelete = append(p.AttemptToDelete, g.uidOf(uid))
		}
	}
	return p
}
