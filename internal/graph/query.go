package graph

import (
	"fmt"
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Dependent is what an owner's check needs to know about one dependent.
type Dependent struct {
	UID                types.UID
	Blocking           bool // its reference to the owner has blockOwnerDeletion=true
	Deleting           bool
	DeletingDependents bool
}

// Item is a copy of one node, for a worker to decide from.
type Item struct {
	Object
	Virtual    bool
	Absent     bool
	Dependents []Dependent
}

// OwnerView is a copy of what the graph knows about a (possible) owner.
type OwnerView struct {
	Identity           Identity
	Virtual            bool
	Absent             bool
	Deleting           bool
	DeletingDependents bool
}

// Item returns a copy of the node with uid, with its dependents.
func (g *Graph) Item(uid types.UID) (Item, bool) {
	g.mu.RLock()
	defer g.mu.RUnlock()
	n := g.nodes[uid]
	if n == nil {
		return Item{}, false
	}
	it := Item{Object: n.Object, Virtual: n.virtual, Absent: n.absent}
	it.OwnerReferences = cloneRefs(n.OwnerReferences)
	it.Finalizers = slices.Clone(n.Finalizers)
	it.Dependents = make([]Dependent, 0, len(n.dependents))
	for depUID := range n.dependents {
		d := g.nodes[depUID]
		if d == nil {
			continue
		}
		it.Dependents = append(it.Dependents, Dependent{
			UID:                depUID,
			Blocking:           blocks(d.OwnerReferences, uid),
			Deleting:           d.Deleting,
			DeletingDependents: d.DeletingDependents(),
		})
	}
	return it, true
}

// Owner returns what the graph knows of the node with uid.
func (g *Graph) Owner(uid types.UID) (OwnerView, bool) {
	g.mu.RLock()
	defer g.mu.RUnlock()
	n := g.nodes[uid]
	if n == nil {
		return OwnerView{}, false
	}
	return OwnerView{
		Identity:           n.Identity,
		Virtual:            n.virtual,
		Absent:             n.absent,
		Deleting:           n.Deleting,
		DeletingDependents: n.DeletingDependents(),
	}, true
}

// BlockingDependents returns how many dependents of the node with uid
// block its deletion (blockOwnerDeletion=true), in constant time.
func (g *Graph) BlockingDependents(uid types.UID) int {
	g.mu.RLock()
	defer g.mu.RUnlock()
	if n := g.nodes[uid]; n != nil {
		return n.blocking
	}
	return 0
}

// Len returns the number of nodes, virtual ones included.
func (g *Graph) Len() int {
	g.mu.RLock()
	defer g.mu.RUnlock()
	return len(g.nodes)
}

// NodeView is one node for display.
type NodeView struct {
	Identity           Identity
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
	var selected map[types.UID]*node
	if len(uids) == 0 {
		selected = g.nodes
	} else {
		selected = g.component(uids)
	}
	out := make([]NodeView, 0, len(selected))
	for _, n := range selected {
		out = append(out, NodeView{
			Identity:           n.Identity,
			Virtual:            n.virtual,
			Absent:             n.absent,
			Deleting:           n.Deleting,
			DeletingDependents: n.DeletingDependents(),
			Owners:             cloneRefs(n.OwnerReferences),
		})
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
func (g *Graph) component(uids []types.UID) map[types.UID]*node {
	seen := make(map[types.UID]*node)
	stack := slices.Clone(uids)
	for len(stack) > 0 {
		uid := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if _, ok := seen[uid]; ok {
			continue
		}
		n := g.nodes[uid]
		if n == nil {
			continue
		}
		seen[uid] = n
		for i := range n.OwnerReferences {
			stack = append(stack, n.OwnerReferences[i].UID)
		}
		for dep := range n.dependents {
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
		if n.Identity.UID != uid {
			return fmt.Errorf("node keyed %s has identity uid %s", uid, n.Identity.UID)
		}
		if n.virtual {
			if len(n.dependents) == 0 {
				return fmt.Errorf("virtual node %s has no dependents", n.Identity)
			}
			if len(n.OwnerReferences) != 0 {
				return fmt.Errorf("virtual node %s has owners", n.Identity)
			}
		} else if n.absent {
			return fmt.Errorf("observed node %s is marked absent", n.Identity)
		}
		for i := range n.OwnerReferences {
			o := g.nodes[n.OwnerReferences[i].UID]
			if o == nil {
				return fmt.Errorf("owner %s of %s is not in the graph", n.OwnerReferences[i].UID, n.Identity)
			}
			if _, ok := o.dependents[uid]; !ok {
				return fmt.Errorf("owner %s does not list dependent %s", o.Identity, n.Identity)
			}
		}
		blocking := 0
		for dep := range n.dependents {
			if d := g.nodes[dep]; d != nil && blocks(d.OwnerReferences, uid) {
				blocking++
			}
		}
		if blocking != n.blocking {
			return fmt.Errorf("node %s counts %d blocking dependents, has %d", n.Identity, n.blocking, blocking)
		}
		for dep := range n.dependents {
			d := g.nodes[dep]
			if d == nil {
				return fmt.Errorf("dependent %s of %s is not in the graph", dep, n.Identity)
			}
			if d.virtual {
				return fmt.Errorf("dependent %s of %s is virtual", d.Identity, n.Identity)
			}
			if !hasRef(d.OwnerReferences, uid) {
				return fmt.Errorf("dependent %s does not reference owner %s", d.Identity, n.Identity)
			}
		}
	}
	return nil
}

// Object returns a copy of the observed object with uid; ok is false for
// unknown UIDs and placeholders.
func (g *Graph) Object(uid types.UID) (obj Object, ok bool) {
	g.mu.RLock()
	defer g.mu.RUnlock()
	n := g.nodes[uid]
	if n == nil || n.virtual {
		return Object{}, false
	}
	obj = n.Object
	obj.OwnerReferences = cloneRefs(n.OwnerReferences)
	obj.Finalizers = slices.Clone(n.Finalizers)
	return obj, true
}

// cloneRefs deep-copies references: their BlockOwnerDeletion and Controller
// are pointers, and a copy handed to a reader must not alias the graph.
func cloneRefs(refs []metav1.OwnerReference) []metav1.OwnerReference {
	if refs == nil {
		return nil
	}
	out := make([]metav1.OwnerReference, len(refs))
	for i := range refs {
		refs[i].DeepCopyInto(&out[i])
	}
	return out
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
		if n.Deleting {
			c.Deleting++
		}
		if n.DeletingDependents() {
			c.DeletingDependents++
		}
	}
	return c
}

// blocks reports whether any of refs to owner has blockOwnerDeletion=true.
// It is on the path of every foreground owner check, once per dependent, so
// it scans instead of building refsByUID's map.
func blocks(refs []metav1.OwnerReference, owner types.UID) bool {
	for i := range refs {
		if refs[i].UID == owner && refs[i].BlockOwnerDeletion != nil && *refs[i].BlockOwnerDeletion {
			return true
		}
	}
	return false
}
