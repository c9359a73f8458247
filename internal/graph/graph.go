package graph

import (
	"slices"
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Finalizers the apiserver adds for the Orphan and Foreground policies.
const (
	FinalizerOrphan     = metav1.FinalizerOrphanDependents // "orphan"
	FinalizerForeground = metav1.FinalizerDeleteDependents // "foregroundDeletion"
)

// Object is what the graph keeps of an observed object: its identity and the
// metadata the collector decides from. Nothing else (labels, annotations,
// managedFields, bodies) is ever stored.
type Object struct {
	Identity        Identity
	ResourceVersion string
	OwnerReferences []metav1.OwnerReference
	Finalizers      []string
	Deleting        bool // deletionTimestamp is set
}

// DeletingDependents reports whether the object waits for its dependents:
// being deleted with the foregroundDeletion finalizer.
func (o *Object) DeletingDependents() bool {
	return o.Deleting && slices.Contains(o.Finalizers, FinalizerForeground)
}

// Orphaning reports whether the object waits for its dependents to be
// orphaned: being deleted with the orphan finalizer.
func (o *Object) Orphaning() bool {
	return o.Deleting && slices.Contains(o.Finalizers, FinalizerOrphan)
}

// EventType says what an informer observed.
type EventType int

const (
	// Upsert is an add or an update: the object exists in this state.
	Upsert EventType = iota
	// Delete is the object's deletion (or its disappearance on relist).
	Delete
)

// Event is one informer observation, in the order the informer saw it.
type Event struct {
	Type   EventType
	Object Object
}

// Effects are what applying an event asks the collector to do next.
type Effects struct {
	// AttemptToDelete lists nodes whose owners or dependents changed in a way
	// that may make them (or let them become) garbage.
	AttemptToDelete []types.UID
	// AttemptToOrphan lists owners being deleted with the orphan finalizer.
	AttemptToOrphan []types.UID
	// Absent lists identities observed deleted: they never come back (UIDs
	// are unique), so the collector may remember them as absent owners.
	Absent []Identity
	// CascadeStarted lists owners that, with dependents, were observed
	// deleted or started deleting their dependents; CascadeDone lists such
	// owners whose last dependent just went. (For metrics.)
	CascadeStarted []types.UID
	CascadeDone    []types.UID
}

func (e *Effects) addDelete(uid types.UID) { e.AttemptToDelete = append(e.AttemptToDelete, uid) }

type node struct {
	Object
	// virtual: referenced, not observed. Identity then comes from the first
	// reference that named the UID and is only a guess.
	virtual bool
	// absent: a virtual node for an object observed deleted.
	absent     bool
	dependents map[types.UID]struct{}
}

// Graph is the ownership graph. See the package doc for the concurrency contract.
type Graph struct {
	mu    sync.RWMutex
	nodes map[types.UID]*node
}

// New returns an empty graph.
func New() *Graph {
	return &Graph{nodes: make(map[types.UID]*node)}
}

// Apply applies one informer event and returns its effects.
func (g *Graph) Apply(ev Event) Effects {
	g.mu.Lock()
	defer g.mu.Unlock()
	var eff Effects
	switch ev.Type {
	case Upsert:
		g.upsert(&ev.Object, &eff)
	case Delete:
		g.remove(&ev.Object, &eff)
	}
	return eff
}

// refsByUID collapses duplicate references to one entry per owner UID; a UID
// counts as blocking when any of its references blocks.
func refsByUID(refs []metav1.OwnerReference) map[types.UID]bool {
	if len(refs) == 0 {
		return nil
	}
	m := make(map[types.UID]bool, len(refs))
	for i := range refs {
		b := refs[i].BlockOwnerDeletion != nil && *refs[i].BlockOwnerDeletion
		m[refs[i].UID] = m[refs[i].UID] || b
	}
	return m
}

func (g *Graph) upsert(obj *Object, eff *Effects) {
	uid := obj.Identity.UID
	n := g.nodes[uid]
	var old map[types.UID]bool
	wasDeletingDependents := false
	if n == nil {
		n = &node{}
		g.nodes[uid] = n
	} else if !n.virtual {
		old = refsByUID(n.OwnerReferences)
		wasDeletingDependents = n.DeletingDependents()
	}
	n.Object = *obj
	n.virtual, n.absent = false, false
	cur := refsByUID(obj.OwnerReferences)

	for ownerUID, blocking := range old {
		nowBlocking, still := cur[ownerUID]
		if !still {
			g.unlink(uid, ownerUID, blocking, eff)
			continue
		}
		// A dependent that stops blocking may release a foreground owner.
		if blocking && !nowBlocking {
			if o := g.nodes[ownerUID]; o != nil && o.DeletingDependents() {
				eff.addDelete(ownerUID)
			}
		}
	}
	for i := range obj.OwnerReferences {
		ref := &obj.OwnerReferences[i]
		if _, had := old[ref.UID]; had {
			continue
		}
		g.link(obj.Identity, ref)
	}

	if n.Orphaning() {
		eff.AttemptToOrphan = append(eff.AttemptToOrphan, uid)
	}
	if n.DeletingDependents() {
		eff.addDelete(uid)
		if !wasDeletingDependents && len(n.dependents) > 0 {
			eff.CascadeStarted = append(eff.CascadeStarted, uid)
			for dep := range n.dependents {
				eff.addDelete(dep)
			}
		}
	}
	if g.needsAttention(n) {
		eff.addDelete(uid)
	}
}

// link records dependent as a dependent of ref's owner, creating a virtual
// owner when the UID is unknown.
func (g *Graph) link(dependent Identity, ref *metav1.OwnerReference) {
	o := g.nodes[ref.UID]
	if o == nil {
		o = &node{virtual: true}
		// Guess: a namespaced owner in the dependent's namespace. Only used for
		// display until the owner is observed or verified.
		o.Identity = Identity{APIVersion: ref.APIVersion, Kind: ref.Kind, Namespace: dependent.Namespace, Name: ref.Name, UID: ref.UID}
		g.nodes[ref.UID] = o
	}
	if o.dependents == nil {
		o.dependents = make(map[types.UID]struct{})
	}
	o.dependents[dependent.UID] = struct{}{}
}

func (g *Graph) unlink(dependent, ownerUID types.UID, blocking bool, eff *Effects) {
	o := g.nodes[ownerUID]
	if o == nil {
		return
	}
	delete(o.dependents, dependent)
	if len(o.dependents) == 0 && (o.absent || o.DeletingDependents()) {
		eff.CascadeDone = append(eff.CascadeDone, ownerUID)
	}
	if o.virtual && len(o.dependents) == 0 {
		delete(g.nodes, ownerUID)
		return
	}
	if blocking && o.DeletingDependents() {
		eff.addDelete(ownerUID)
	}
}

// needsAttention reports whether a live node has an owner reference the graph
// cannot vouch for: an owner not observed, observed under other coordinates,
// or waiting for its dependents to be deleted.
func (g *Graph) needsAttention(n *node) bool {
	if n.virtual || n.Deleting || len(n.OwnerReferences) == 0 {
		return false
	}
	for i := range n.OwnerReferences {
		ref := &n.OwnerReferences[i]
		o := g.nodes[ref.UID]
		if o == nil || o.virtual || !Matches(o.Identity, ref, n.Identity.Namespace) || o.DeletingDependents() {
			return true
		}
	}
	return false
}

// Matches reports whether the observed owner identity is the object ref names
// when seen from a dependent in namespace ns: same group, kind and name, and
// either cluster-scoped or in ns.
func Matches(owner Identity, ref *metav1.OwnerReference, ns string) bool {
	if owner.UID != ref.UID || owner.Name != ref.Name || owner.Kind != ref.Kind {
		return false
	}
	if owner.Namespace != "" && owner.Namespace != ns {
		return false
	}
	return owner.GroupKind().Group == (Identity{APIVersion: ref.APIVersion}).GroupKind().Group
}

func (g *Graph) remove(obj *Object, eff *Effects) {
	uid := obj.Identity.UID
	n := g.nodes[uid]
	if n == nil || n.virtual {
		return
	}
	eff.Absent = append(eff.Absent, n.Identity)
	for ownerUID, blocking := range refsByUID(n.OwnerReferences) {
		g.unlink(uid, ownerUID, blocking, eff)
	}
	if len(n.dependents) == 0 {
		delete(g.nodes, uid)
		return
	}
	// Keep a placeholder so the dependents' edges stay consistent; they are
	// re-checked now that their owner is gone.
	n.Object = Object{Identity: n.Identity}
	n.virtual, n.absent = true, true
	eff.CascadeStarted = append(eff.CascadeStarted, uid)
	for dep := range n.dependents {
		eff.addDelete(dep)
	}
}
