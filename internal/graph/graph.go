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
	// blocking counts the dependents whose reference to this node has
	// blockOwnerDeletion=true, so that a foreground owner's check knows
	// whether it is blocked without visiting every dependent.
	blocking int
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

func (g *Graph) upsert(obj *Object, eff *Effects) {
	uid := obj.Identity.UID
	n := g.nodes[uid]
	var old []metav1.OwnerReference
	wasDeletingDependents := false
	if n == nil {
		n = &node{}
		g.nodes[uid] = n
	} else if !n.virtual {
		old = n.OwnerReferences
		wasDeletingDependents = n.DeletingDependents()
	}
	n.Object = *obj
	n.virtual, n.absent = false, false
	cur := obj.OwnerReferences

	// Reference lists are short (one or two entries): scanning them is
	// cheaper than building a map per event (BenchmarkApply*).
	for i := range old {
		ownerUID := old[i].UID
		if !firstRef(old, i) {
			continue // a duplicate reference to an owner already handled
		}
		blocking := blocks(old, ownerUID)
		if !hasRef(cur, ownerUID) {
			g.unlink(uid, ownerUID, blocking, eff)
			continue
		}
		nowBlocking := blocks(cur, ownerUID)
		if blocking == nowBlocking {
			continue
		}
		o := g.nodes[ownerUID]
		if o == nil {
			continue
		}
		if nowBlocking {
			o.blocking++
			continue
		}
		o.blocking--
		// A dependent that stops blocking may release a foreground owner.
		if o.DeletingDependents() {
			eff.addDelete(ownerUID)
		}
	}
	for i := range cur {
		if !firstRef(cur, i) || hasRef(old, cur[i].UID) {
			continue
		}
		g.link(obj.Identity, &cur[i], blocks(cur, cur[i].UID))
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

// firstRef reports whether refs[i] is the first reference in refs to its owner.
func firstRef(refs []metav1.OwnerReference, i int) bool {
	for j := range i {
		if refs[j].UID == refs[i].UID {
			return false
		}
	}
	return true
}

// hasRef reports whether refs reference owner.
func hasRef(refs []metav1.OwnerReference, owner types.UID) bool {
	for i := range refs {
		if refs[i].UID == owner {
			return true
		}
	}
	return false
}

// link records dependent as a dependent of ref's owner, creating a virtual
// owner when the UID is unknown.
func (g *Graph) link(dependent Identity, ref *metav1.OwnerReference, blocking bool) {
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
	if blocking {
		o.blocking++
	}
}

func (g *Graph) unlink(dependent, ownerUID types.UID, blocking bool, eff *Effects) {
	o := g.nodes[ownerUID]
	if o == nil {
		return
	}
	delete(o.dependents, dependent)
	if blocking {
		o.blocking--
	}
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
	return sameGroup(owner.APIVersion, ref.APIVersion)
}

// sameGroup reports whether two apiVersions name the same group; equal
// apiVersions (the common case) are decided without parsing.
func sameGroup(a, b string) bool {
	if a == b {
		return true
	}
	return (Identity{APIVersion: a}).GroupKind().Group == (Identity{APIVersion: b}).GroupKind().Group
}

func (g *Graph) remove(obj *Object, eff *Effects) {
	uid := obj.Identity.UID
	n := g.nodes[uid]
	if n == nil || n.virtual {
		return
	}
	eff.Absent = append(eff.Absent, n.Identity)
	for i, refs := 0, n.OwnerReferences; i < len(refs); i++ {
		if firstRef(refs, i) {
			g.unlink(uid, refs[i].UID, blocks(refs, refs[i].UID), eff)
		}
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
