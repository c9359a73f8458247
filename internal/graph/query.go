package graph

import (
	"fmt"
	"slices"

	"github.com/kgc-dev/kgc/internal/rules"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// OwnerView is a copy of what the graph knows about a (possible) owner.
type OwnerView struct {
	Identity           rules.Identity
	Virtual            bool
	Absent             bool
	Deleting           bool
	DeletingDependents bool
}

// Item returns a copy of the node with uid, with its dependents.
func (g *Graph) Item(uid types.UID) (rules.Item, bool) {
	g.mu.RLock()
	defer g.mu.RUnlock()
	n := g.node(uid)
	if n == nil {
		return rules.Item{}, false
	}
	it := rules.Item{Object: g.object(n), Virtual: n.virtual, Absent: n.absent}
	it.Dependents = make([]rules.Dependent, 0, n.dependents.len())
	for depUID := range n.dependents.all() {
		d := g.nodes[depUID]
		if d == nil {
			continue
		}
		it.Dependents = append(it.Dependents, rules.Dependent{
			UID:                g.uidOf(depUID),
			Blocking:           blocksOwner(depUID, d.refs, n.uid),
			Deleting:           d.deleting,
			DeletingDependents: d.deletingDependents(),
		})
	}
	return it, true
}

// Owner returns what the graph knows of the node with uid.
func (g *Graph) Owner(uid types.UID) (OwnerView, bool) {
	g.mu.RLock()
	defer g.mu.RUnlock()
	n := g.node(uid)
	if n == nil {
		return OwnerView{}, false
	}
	return OwnerView{
		Identity:           g.identity(n),
		Virtual:            n.virtual,
		Absent:             n.absent,
		Deleting:           n.deleting,
		DeletingDependents: n.deletingDependents(),
	}, true
}

// BlockingDependents returns how many dependents of the node with uid
// block its deletion (blockOwnerDeletion=true), in constant time.
func (g *Graph) BlockingDependents(uid types.UID) int {
	g.mu.RLock()
	defer g.mu.RUnlock()
	if n := g.node(uid); n != nil {
		return int(n.blocking)
	}
	return 0
}

// WaitsFor returns the dependents of the node with uid whose reference to
// it has blockOwnerDeletion=true (an object's reference to itself never
// blocks): those it waits for once in Foreground deletion.
func (g *Graph) WaitsFor(uid types.UID) []types.UID {
	g.mu.RLock()
	defer g.mu.RUnlock()
	n := g.node(uid)
	if n == nil || n.blocking == 0 {
		return nil
	}
	out := make([]types.UID, 0, n.blocking)
	for dep := range n.dependents.all() {
		if d := g.nodes[dep]; d != nil && blocksOwner(dep, d.refs, n.uid) {
			out = append(out, g.uidOf(dep))
		}
	}
	return out
}

// Len returns the number of nodes, virtual ones included.
func (g *Graph) Len() int {
	g.mu.RLock()
	defer g.mu.RUnlock()
	return len(g.nodes)
}

// NodeView is one node for display.
type NodeView struct {
	Identity           rules.Identity
	Virtual            bool
	Absent             bool
	Deleting           bool
	DeletingDependents bool
	Owners             []metav1.OwnerReference
}

// Snapshot copies the nodes with the given UIDs and every node connected to
// them through owner or dependent edges; with no UIDs, the whole graph.
func (g *Graph) Snapshot(uids ...types.UID) []NodeView {
	g.mu.RLock()
	defer g.mu.RUnlock()
	var selected map[key]*node
	if len(uids) == 0 {
		selected = g.nodes
	} else {
		selected = g.component(uids)
	}
	out := make([]NodeView, 0, len(selected))
	for _, n := range selected {
		out = append(out, g.nodeView(n))
	}
	slices.SortFunc(out, func(a, b NodeView) int {
		if a.Identity.UID < b.Identity.UID {
			return -1
		}
		if a.Identity.UID > b.Identity.UID {
			return 1
		}
		return 0
	})
	return out
}

// component returns the connected components containing uids. Caller holds mu.
func (g *Graph) component(uids []types.UID) map[key]*node {
	seen := make(map[key]*node)
	var stack []key
	for _, uid := range uids {
		if k, ok := g.lookup(uid); ok {
			stack = append(stack, k)
		}
	}
	for len(stack) > 0 {
		k := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if _, ok := seen[k]; ok {
			continue
		}
		n := g.nodes[k]
		if n == nil {
			continue
		}
		seen[k] = n
		for i := range n.refs {
			stack = append(stack, n.refs[i].uid)
		}
		for dep := range n.dependents.all() {
			stack = append(stack, dep)
		}
	}
	return seen
}

// CheckInvariants verifies the graph's structural invariants; tests call it
// after every step. It returns the first violation found.
func (g *Graph) CheckInvariants() error {
	g.mu.RLock()
	defer g.mu.RUnlock()
	for uid, n := range g.nodes {
		if n.uid != uid {
			return fmt.Errorf("node keyed %v has key %v", uid, n.uid)
		}
		if n.kind == nil {
			return fmt.Errorf("node %s has no kind", g.uidOf(uid))
		}
		if _, ok := g.oddUIDs[uid]; uid.hi == 0 && !ok {
			return fmt.Errorf("node with synthetic key %v has no UID", uid)
		}
		if n.virtual {
			if n.dependents.len() == 0 {
				return fmt.Errorf("virtual node %s has no dependents", g.identity(n))
			}
			if len(n.refs) != 0 || n.finalizers != nil || n.deleting {
				return fmt.Errorf("virtual node %s has owners", g.identity(n))
			}
		} else if n.absent {
			return fmt.Errorf("observed node %s is marked absent", g.identity(n))
		}
		for i := range n.refs {
			o := g.nodes[n.refs[i].uid]
			if o == nil {
				return fmt.Errorf("owner %s of %s is not in the graph", g.uidOf(n.refs[i].uid), g.identity(n))
			}
			if !o.dependents.has(uid) {
				return fmt.Errorf("owner %s does not list dependent %s", g.identity(o), g.identity(n))
			}
		}
		blocking := 0
		for dep := range n.dependents.all() {
			if d := g.nodes[dep]; d != nil && blocksOwner(dep, d.refs, uid) {
				blocking++
			}
		}
		if int32(blocking) != n.blocking {
			return fmt.Errorf("node %s counts %d blocking dependents, has %d", g.identity(n), n.blocking, blocking)
		}
		for dep := range n.dependents.all() {
			d := g.nodes[dep]
			if d == nil {
				return fmt.Errorf("dependent %s of %s is not in the graph", g.uidOf(dep), g.identity(n))
			}
			if d.virtual {
				return fmt.Errorf("dependent %s of %s is virtual", g.identity(d), g.identity(n))
			}
			if !hasRef(d.refs, uid) {
				return fmt.Errorf("dependent %s does not reference owner %s", g.identity(d), g.identity(n))
			}
		}
	}
	if len(g.odd) != len(g.oddUIDs) {
		return fmt.Errorf("%d synthetic keys, %d UIDs for them", len(g.odd), len(g.oddUIDs))
	}
	for uid, k := range g.odd {
		if g.oddUIDs[k] != uid || g.nodes[k] == nil {
			return fmt.Errorf("synthetic key of %s is stale", uid)
		}
	}
	return nil
}

// Object returns a copy of the observed object with uid; ok is false for
// unknown UIDs and placeholders.
func (g *Graph) Object(uid types.UID) (obj rules.Object, ok bool) {
	g.mu.RLock()
	defer g.mu.RUnlock()
	n := g.node(uid)
	if n == nil || n.virtual {
		return rules.Object{}, false
	}
	return g.object(n), true
}

// Counts is the graph's size by node state; a node may count in several.
type Counts struct {
	Observed, Virtual, Absent, Deleting, DeletingDependents int
}

// Counts counts nodes by state.
func (g *Graph) Counts() Counts {
	g.mu.RLock()
	defer g.mu.RUnlock()
	var c Counts
	for _, n := range g.nodes {
		switch {
		case n.absent:
			c.Absent++
		case n.virtual:
			c.Virtual++
		default:
			c.Observed++
		}
		if n.deleting {
			c.Deleting++
		}
		if n.deletingDependents() {
			c.DeletingDependents++
		}
	}
	return c
}

// nodeView copies what a NodeView shows of n. Caller holds mu.
func (g *Graph) nodeView(n *node) NodeView {
	return NodeView{
		Identity:           g.identity(n),
		Virtual:            n.virtual,
		Absent:             n.absent,
		Deleting:           n.deleting,
		DeletingDependents: n.deletingDependents(),
		Owners:             g.expandRefs(n.refs),
	}
}
