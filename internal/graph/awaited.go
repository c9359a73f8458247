package graph

import "k8s.io/apimachinery/pkg/types"

// Awaited reports whether an owner's finalizer waits for the work on the
// node with uid: the node is an owner in Foreground deletion (its
// foregroundDeletion finalizer), or a dependent that blocks
// (blockOwnerDeletion) an owner in Foreground deletion. It copies nothing:
// the workers ask it for every item they queue and every write they make
// (package budget: awaited work goes first). An orphaning owner's work is
// the attempt-to-orphan queue's, all of it awaited.
func (g *Graph) Awaited(uid types.UID) bool {
	g.mu.RLock()
	defer g.mu.RUnlock()
	n := g.node(uid)
	if n == nil || n.virtual {
		return false
	}
	if n.deletingDependents() {
		return true
	}
	for i := range n.refs {
		r := &n.refs[i]
		if !r.blocking() || r.uid == n.uid {
			continue
		}
		if o := g.nodes[r.uid]; o != nil && !o.virtual && o.deletingDependents() {
			return true
		}
	}
	return false
}
