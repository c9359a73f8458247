package graph

import (
	"slices"
	"strings"
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

// node is one object in the graph. It is kept small: at 100k objects every
// byte counts (see BenchmarkApply and the memory test in discovery). The
// apiVersion/kind pair is interned per graph; strings and ownerReferences
// share their backing memory with the informer's stored object.
type node struct {
	typ        *typeInfo
	namespace  string
	name       string
	uid        types.UID
	rv         string
	refs       []metav1.OwnerReference
	finalizers []string
	flags      nodeFlags
	dependents *depSet // nil: no dependents
}

type nodeFlags uint8

const (
	flagDeleting nodeFlags = 1 << iota
	// flagVirtual: referenced, not observed. Identity then comes from the
	// first reference that named the UID and is only a guess.
	flagVirtual
	// flagAbsent: a virtual node for an object observed deleted.
	flagAbsent
)

func (n *node) deleting() bool { return n.flags&flagDeleting != 0 }
func (n *node) virtual() bool  { return n.flags&flagVirtual != 0 }
func (n *node) absent() bool   { return n.flags&flagAbsent != 0 }

func (n *node) deletingDependents() bool {
	return n.deleting() && slices.Contains(n.finalizers, FinalizerForeground)
}

func (n *node) orphaning() bool {
	return n.deleting() && slices.Contains(n.finalizers, FinalizerOrphan)
}

func (n *node) identity() Identity {
	return Identity{APIVersion: n.typ.apiVersion, Kind: n.typ.kind, Namespace: n.namespace, Name: n.name, UID: n.uid}
}

// object returns the node's object; refs and finalizers alias the node's.
func (n *node) object() Object {
	return Object{Identity: n.identity(), ResourceVersion: n.rv, OwnerReferences: n.refs, Finalizers: n.finalizers, Deleting: n.deleting()}
}

func (n *node) numDependents() int {
	if n.dependents == nil {
		return 0
	}
	return n.dependents.len()
}

// typeInfo is an interned apiVersion/kind pair.
type typeInfo struct{ apiVersion, kind string }

// depSet is a node's dependents: a slice while small (most owners have a
// handful), a map once large (a foreground owner of 20k dependents loses
// them one by one).
type depSet struct {
	small []types.UID
	big   map[types.UID]struct{}
}

const depSetSmall = 16

func (d *depSet) len() int {
	if d.big != nil {
		return len(d.big)
	}
	return len(d.small)
}

func (d *depSet) has(uid types.UID) bool {
	if d.big != nil {
		_, ok := d.big[uid]
		return ok
	}
	return slices.Contains(d.small, uid)
}

func (d *depSet) add(uid types.UID) {
	switch {
	case d.big != nil:
		d.big[uid] = struct{}{}
	case slices.Contains(d.small, uid):
	case len(d.small) < depSetSmall:
		d.small = append(d.small, uid)
	default:
		d.big = make(map[types.UID]struct{}, 2*depSetSmall)
		for _, u := range d.small {
			d.big[u] = struct{}{}
		}
		d.big[uid] = struct{}{}
		d.small = nil
	}
}

func (d *depSet) remove(uid types.UID) {
	if d.big != nil {
		delete(d.big, uid)
		return
	}
	if i := slices.Index(d.small, uid); i >= 0 {
		last := len(d.small) - 1
		d.small[i] = d.small[last]
		d.small[last] = ""
		d.small = d.small[:last]
	}
}

// each calls f for every dependent until f returns false.
func (d *depSet) each(f func(types.UID) bool) {
	if d == nil {
		return
	}
	if d.big != nil {
		for u := range d.big {
			if !f(u) {
				return
			}
		}
		return
	}
	for _, u := range d.small {
		if !f(u) {
			return
		}
	}
}

// Graph is the ownership graph. See the package doc for the concurrency contract.
type Graph struct {
	mu    sync.RWMutex
	nodes map[types.UID]*node
	// types interns apiVersion/kind pairs; only the writer touches it.
	types map[typeInfo]*typeInfo
}

// New returns an empty graph.
func New() *Graph {
	return &Graph{nodes: make(map[types.UID]*node), types: make(map[typeInfo]*typeInfo)}
}

func (g *Graph) typeOf(apiVersion, kind string) *typeInfo {
	k := typeInfo{apiVersion, kind}
	if t := g.types[k]; t != nil {
		return t
	}
	t := &typeInfo{strings.Clone(apiVersion), strings.Clone(kind)}
	g.types[*t] = t
	return t
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
	} else if !n.virtual() {
		old = n.refs
		wasDeletingDependents = n.deletingDependents()
	}
	n.typ = g.typeOf(obj.Identity.APIVersion, obj.Identity.Kind)
	n.namespace, n.name, n.uid = obj.Identity.Namespace, obj.Identity.Name, uid
	n.rv, n.refs, n.finalizers = obj.ResourceVersion, obj.OwnerReferences, obj.Finalizers
	n.flags = 0
	if obj.Deleting {
		n.flags |= flagDeleting
	}
	cur := obj.OwnerReferences

	// Owners this node no longer references, or references differently.
	// Reference lists are short (one or two entries): scanning them beats
	// building maps.
	for i := range old {
		ownerUID := old[i].UID
		if firstRef(old, i) != i {
			continue // a duplicate reference to the same owner
		}
		blocking := blocks(old, ownerUID)
		if !hasRef(cur, ownerUID) {
			g.unlink(uid, ownerUID, blocking, eff)
			continue
		}
		// A dependent that stops blocking may release a foreground owner.
		if blocking && !blocks(cur, ownerUID) {
			if o := g.nodes[ownerUID]; o != nil && o.deletingDependents() {
				eff.addDelete(ownerUID)
			}
		}
	}
	for i := range cur {
		if hasRef(old, cur[i].UID) {
			continue
		}
		g.link(n, &cur[i])
	}

	if n.orphaning() {
		eff.AttemptToOrphan = append(eff.AttemptToOrphan, uid)
	}
	if n.deletingDependents() {
		eff.addDelete(uid)
		if !wasDeletingDependents && n.numDependents() > 0 {
			eff.CascadeStarted = append(eff.CascadeStarted, uid)
			n.dependents.each(func(dep types.UID) bool { eff.addDelete(dep); return true })
		}
	}
	if g.needsAttention(n) {
		eff.addDelete(uid)
	}
}

// firstRef returns the index of the first reference in refs to refs[i]'s owner.
func firstRef(refs []metav1.OwnerReference, i int) int {
	for j := range i {
		if refs[j].UID == refs[i].UID {
			return j
		}
	}
	return i
}

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
func (g *Graph) link(dependent *node, ref *metav1.OwnerReference) {
	o := g.nodes[ref.UID]
	if o == nil {
		// Guess: a namespaced owner in the dependent's namespace. Only used for
		// display until the owner is observed or verified.
		o = &node{
			typ:       g.typeOf(ref.APIVersion, ref.Kind),
			namespace: dependent.namespace, name: ref.Name, uid: ref.UID,
			flags: flagVirtual,
		}
		g.nodes[ref.UID] = o
	}
	if o.dependents == nil {
		o.dependents = &depSet{}
	}
	o.dependents.add(dependent.uid)
}

func (g *Graph) unlink(dependent, ownerUID types.UID, blocking bool, eff *Effects) {
	o := g.nodes[ownerUID]
	if o == nil {
		return
	}
	if o.dependents != nil {
		o.dependents.remove(dependent)
		if o.dependents.len() == 0 {
			o.dependents = nil
		}
	}
	if o.numDependents() == 0 && (o.absent() || o.deletingDependents()) {
		eff.CascadeDone = append(eff.CascadeDone, ownerUID)
	}
	if o.virtual() && o.numDependents() == 0 {
		delete(g.nodes, ownerUID)
		return
	}
	if blocking && o.deletingDependents() {
		eff.addDelete(ownerUID)
	}
}

// needsAttention reports whether a live node has an owner reference the graph
// cannot vouch for: an owner not observed, observed under other coordinates,
// or waiting for its dependents to be deleted.
func (g *Graph) needsAttention(n *node) bool {
	if n.virtual() || n.deleting() || len(n.refs) == 0 {
		return false
	}
	for i := range n.refs {
		ref := &n.refs[i]
		o := g.nodes[ref.UID]
		if o == nil || o.virtual() || !matchesNode(o, ref, n.namespace) || o.deletingDependents() {
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

// matchesNode is Matches for a node, without building its Identity.
func matchesNode(o *node, ref *metav1.OwnerReference, ns string) bool {
	if o.uid != ref.UID || o.name != ref.Name || o.typ.kind != ref.Kind {
		return false
	}
	if o.namespace != "" && o.namespace != ns {
		return false
	}
	return sameGroup(o.typ.apiVersion, ref.APIVersion)
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
	if n == nil || n.virtual() {
		return
	}
	eff.Absent = append(eff.Absent, n.identity())
	for i := range n.refs {
		if firstRef(n.refs, i) != i {
			continue
		}
		g.unlink(uid, n.refs[i].UID, blocks(n.refs, n.refs[i].UID), eff)
	}
	if n.numDependents() == 0 {
		delete(g.nodes, uid)
		return
	}
	// Keep a placeholder so the dependents' edges stay consistent; they are
	// re-checked now that their owner is gone.
	n.rv, n.refs, n.finalizers = "", nil, nil
	n.flags = flagVirtual | flagAbsent
	eff.CascadeStarted = append(eff.CascadeStarted, uid)
	n.dependents.each(func(dep types.UID) bool { eff.addDelete(dep); return true })
}
