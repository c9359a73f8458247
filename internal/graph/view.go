package graph

import (
	"slices"
	"time"

	"github.com/kgc-dev/kgc/internal/rules"
	"k8s.io/apimachinery/pkg/types"
)

// Node is one node of the graph for display: the object as the graph holds
// it, whether it is a placeholder, and its observed dependents. Its states
// are the rules.Object methods (DeletingDependents, Orphaning), so the web
// view, the DOT document and the workers agree on what "in Foreground
// deletion" means. Workers decide from rules.Item (Item) instead, whose
// dependents carry what a decision needs of each.
type Node struct {
	rules.Object
	// Virtual: referenced, never observed (a placeholder). Object then
	// holds only the Identity the first reference to it gave.
	Virtual bool
	// Absent: a placeholder for an object observed deleted.
	Absent bool
	// Dependents are the UIDs of the observed objects that reference this
	// one, sorted.
	Dependents []types.UID
}

// ViewBatch is how many nodes a display reader (Nodes, NodesByUID,
// Components) copies per read-lock hold. Between batches the lock is
// released, so the graph's writer waits at most for one batch however large
// the graph is.
var ViewBatch = 256

// afterViewBatch, when set (by tests), runs after each batch with the lock
// released; viewHold, when set, is told how long each batch held the lock.
var (
	afterViewBatch func()
	viewHold       func(time.Duration)
)

// held reports a lock hold that started at start to viewHold.
func held(start time.Time) {
	if viewHold != nil {
		viewHold(time.Since(start))
	}
}

// now is time.Now when holds are measured.
func now() time.Time {
	if viewHold != nil {
		return time.Now()
	}
	return time.Time{}
}

// nodeOf copies n for display, sharing nothing a reader could change.
// Caller holds mu.
func (g *Graph) nodeOf(n *node) Node {
	v := Node{Object: g.object(n), Virtual: n.virtual, Absent: n.absent}
	if n.dependents.len() > 0 {
		v.Dependents = make([]types.UID, 0, n.dependents.len())
		for dep := range n.dependents.all() {
			v.Dependents = append(v.Dependents, g.uidOf(dep))
		}
		slices.Sort(v.Dependents)
	}
	return v
}

func batchSize() int {
	if ViewBatch < 1 {
		return 1
	}
	return ViewBatch
}

// Nodes copies every node whose identity keep accepts (every node when keep
// is nil) and returns them sorted by UID, with the number of nodes in the
// graph. It never holds the read lock for more than ViewBatch nodes: the
// writer may apply events between batches, so the result is not one
// instant's state, but each node is copied whole and appears at most once.
// keep runs with the lock held and must not call into the graph.
func (g *Graph) Nodes(keep func(*rules.Identity) bool) (out []Node, total int) {
	batch := batchSize()
	// out grows only while the lock is released, by at least a batch, so no
	// hold pays for copying what was already copied.
	if keep == nil {
		out = make([]Node, 0, g.Len()+batch)
	} else {
		out = make([]Node, 0, batch)
	}
	g.mu.RLock()
	start := now()
	n := 0
	// Ranging over a map while other goroutines modify it between steps is
	// well defined here: every step of the iteration and every write happen
	// under g.mu, so they are serialized exactly as if the modifications were
	// made in the loop body (entries removed before being reached are skipped,
	// entries added may or may not be produced).
	for _, nd := range g.nodes {
		if keep == nil {
			out = append(out, g.nodeOf(nd))
		} else if v := g.nodeOf(nd); keep(&v.Identity) {
			out = append(out, v)
		}
		n++
		if n%batch == 0 {
			held(start)
			g.mu.RUnlock()
			if afterViewBatch != nil {
				afterViewBatch()
			}
			if cap(out)-len(out) < batch {
				out = slices.Grow(out, max(batch, len(out)))
			}
			g.mu.RLock()
			start = now()
		}
	}
	total = len(g.nodes)
	held(start)
	g.mu.RUnlock()
	return sortNodes(out), total
}

// NodesByUID copies the nodes with the given UIDs that are in the graph (in
// batches of at most ViewBatch under the read lock), sorted by UID.
func (g *Graph) NodesByUID(uids []types.UID) []Node {
	batch := batchSize()
	out := make([]Node, 0, len(uids))
	for start := 0; start < len(uids); start += batch {
		end := min(start+batch, len(uids))
		g.mu.RLock()
		t0 := now()
		for _, uid := range uids[start:end] {
			if nd := g.node(uid); nd != nil {
				out = append(out, g.nodeOf(nd))
			}
		}
		held(t0)
		g.mu.RUnlock()
		if afterViewBatch != nil && end < len(uids) {
			afterViewBatch()
		}
	}
	return sortNodes(out)
}

// Components copies the connected components (through owner and dependent
// edges) containing uids, sorted by UID, walking them in batches of at most
// ViewBatch nodes per read-lock hold. UIDs not in the graph are skipped.
func (g *Graph) Components(uids []types.UID) []Node {
	seen := make(map[types.UID]bool, len(uids))
	var frontier []types.UID
	for _, u := range uids {
		if !seen[u] {
			seen[u] = true
			frontier = append(frontier, u)
		}
	}
	var out []Node
	for len(frontier) > 0 {
		vs := g.NodesByUID(frontier)
		frontier = frontier[:0]
		for i := range vs {
			v := &vs[i]
			for j := range v.OwnerReferences {
				if u := v.OwnerReferences[j].UID; !seen[u] {
					seen[u] = true
					frontier = append(frontier, u)
				}
			}
			for _, u := range v.Dependents {
				if !seen[u] {
					seen[u] = true
					frontier = append(frontier, u)
				}
			}
		}
		out = append(out, vs...)
	}
	return sortNodes(out)
}

// sortNodes sorts by UID and drops duplicates (a node the writer re-created
// mid-scan may be copied twice; either copy will do).
func sortNodes(vs []Node) []Node {
	slices.SortFunc(vs, func(a, b Node) int {
		switch {
		case a.Identity.UID < b.Identity.UID:
			return -1
		case a.Identity.UID > b.Identity.UID:
			return 1
		}
		return 0
	})
	out := vs[:0]
	for i := range vs {
		if len(out) > 0 && out[len(out)-1].Identity.UID == vs[i].Identity.UID {
			continue
		}
		out = append(out, vs[i])
	}
	return out
}
