package graph

import (
	"slices"

	"github.com/kgc-dev/kgc/internal/rules"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The graph is the only copy kgc keeps of every object it tracks (the
// monitors keep none), so at 100k objects its node layout is kgc's memory:
// a node is 112 bytes and a reference 48, against 176 and 80 for the
// Object and metav1.OwnerReference they hold. Readers get Objects and
// OwnerReferences built from them (query.go, view.go).

// kind is an apiVersion and kind, shared by every node and reference that
// names it (see Graph.kindOf).
type kind struct {
	apiVersion, kind string
}

// optBool is a *bool without the pointer: unset, false or true.
type optBool uint8

const (
	unset optBool = iota
	isFalse
	isTrue
)

func optBoolOf(b *bool) optBool {
	switch {
	case b == nil:
		return unset
	case *b:
		return isTrue
	default:
		return isFalse
	}
}

// ptr returns a fresh *bool (nil when unset): a reader may change what it
// is handed without changing the graph.
func (b optBool) ptr() *bool {
	if b == unset {
		return nil
	}
	v := b == isTrue
	return &v
}

// ownerRef is a compact metav1.OwnerReference.
type ownerRef struct {
	kind       *kind
	name       string
	uid        key
	controller optBool
	block      optBool
}

func (r *ownerRef) blocking() bool { return r.block == isTrue }

// expandRefs returns refs as metav1.OwnerReferences. Caller holds mu.
func (g *Graph) expandRefs(refs []ownerRef) []metav1.OwnerReference {
	if refs == nil {
		return nil
	}
	out := make([]metav1.OwnerReference, len(refs))
	for i := range refs {
		r := &refs[i]
		out[i] = metav1.OwnerReference{
			APIVersion: r.kind.apiVersion, Kind: r.kind.kind, Name: r.name, UID: g.uidOf(r.uid),
			Controller: r.controller.ptr(), BlockOwnerDeletion: r.block.ptr(),
		}
	}
	return out
}

type node struct {
	kind       *kind
	ns         *string // the namespace, shared (Graph.namespaceOf); nil for cluster-scoped objects
	name       string
	uid        key    // the node's key in Graph.nodes
	rv         rvCode // see Graph.rvOf
	refs       []ownerRef
	finalizers *[]string // shared by every node with the same list (see finalizersOf)
	dependents *depSet
	// blocking counts the dependents whose reference to this node has
	// blockOwnerDeletion=true, so that a foreground owner's check knows
	// whether it is blocked without visiting every dependent.
	blocking int32
	// gen is the list generation of the last upsert (see Event.Gen).
	gen      uint32
	deleting bool // deletionTimestamp is set
	// virtual: referenced, not observed. Identity then comes from the first
	// reference that named the UID and is only a guess.
	virtual bool
	// absent: a virtual node for an object observed deleted; rv is then
	// the resourceVersion the deletion was observed at, and goneBy how
	// (rules.SourceWatchDeletion or rules.SourceRelist): the evidence the
	// workers' records carry.
	absent bool
	goneBy rules.Source
	// oddRV: the resourceVersion is not a canonical decimal number; it is
	// in Graph.oddRVs (rv is 0).
	oddRV bool
	// arrived: first observed from a fresh event (Event.Fresh), not from
	// the first list of its resource: it appeared while kgc watched.
	arrived bool
}

// identity returns n's identity. Caller holds mu.
func (g *Graph) identity(n *node) rules.Identity {
	return rules.Identity{APIVersion: n.kind.apiVersion, Kind: n.kind.kind, Namespace: n.namespace(), Name: n.name, UID: g.uidOf(n.uid)}
}

// object returns a copy of what the node holds of its object, sharing
// nothing a reader could change. Caller holds mu.
func (g *Graph) object(n *node) rules.Object {
	rv := g.rvOf(n)
	if n.virtual {
		rv = "" // an absent node's is its deletion's, not an object's
	}
	o := rules.Object{
		Identity:        g.identity(n),
		ResourceVersion: rv,
		OwnerReferences: g.expandRefs(n.refs),
		Finalizers:      slices.Clone(n.finalizerList()),
		Deleting:        n.deleting,
	}
	if n.deleting {
		if t := g.deleting[n.uid]; !t.IsZero() {
			o.DeletionTimestamp = &metav1.Time{Time: t}
		}
	}
	return o
}

// namespace returns the node's namespace ("" for a cluster-scoped object).
func (n *node) namespace() string {
	if n.ns == nil {
		return ""
	}
	return *n.ns
}

// maxNamespaces bounds the namespaces a graph shares, as maxKinds bounds
// kinds: past it, a node's namespace is its own (correct, not shared).
const maxNamespaces = 1 << 16

// namespaceOf returns the shared *string for ns (nil for ""): a node holds
// 8 bytes instead of a 16-byte string header. Caller holds mu for writing.
func (g *Graph) namespaceOf(ns string) *string {
	if ns == "" {
		return nil
	}
	if p := g.namespaces[ns]; p != nil {
		return p
	}
	p := new(string)
	*p = ns
	if len(g.namespaces) < maxNamespaces {
		g.namespaces[ns] = p
	}
	return p
}

// deletingDependents: see Object.DeletingDependents.
func (n *node) deletingDependents() bool {
	return rules.DeletingDependents(n.deleting, n.finalizerList())
}

// orphaning: see Object.Orphaning.
func (n *node) orphaning() bool {
	return rules.Orphaning(n.deleting, n.finalizerList())
}

// finalizerList returns the node's finalizers (shared: not to be changed).
func (n *node) finalizerList() []string {
	if n.finalizers == nil {
		return nil
	}
	return *n.finalizers
}

// maxFinalizerLists bounds the finalizer lists a graph shares, as maxKinds
// bounds kinds.
const maxFinalizerLists = 4096

// finalizersOf returns the shared list equal to f (nil for none). Objects
// carry few distinct lists (none, most of them), so one copy of each is
// kept, and a node holds a pointer instead of a slice. Caller holds mu for
// writing.
func (g *Graph) finalizersOf(f []string) *[]string {
	if len(f) == 0 {
		return nil
	}
	// The key is the names joined with NUL (which names cannot contain),
	// built on the stack: looking up m[string(b)] does not allocate.
	var buf [256]byte
	key := buf[:0]
	for i, name := range f {
		if i > 0 {
			key = append(key, 0)
		}
		key = append(key, name...)
	}
	if p := g.finalizers[string(key)]; p != nil {
		return p
	}
	p := new([]string) // (not &f: that would move f to the heap on every call)
	*p = f
	if len(g.finalizers) < maxFinalizerLists {
		g.finalizers[string(key)] = p
	}
	return p
}

// maxKinds bounds the kinds a graph shares: references may name any
// apiVersion and kind, so hostile input must not grow the table without
// limit. Past it, new kinds are allocated per use (correct, not shared).
const maxKinds = 4096

// kindOf returns the shared *kind for apiVersion and kind. Caller holds mu
// for writing.
func (g *Graph) kindOf(apiVersion, k string) *kind {
	if p := g.kinds[kind{apiVersion, k}]; p != nil {
		return p
	}
	p := &kind{apiVersion, k}
	if len(g.kinds) < maxKinds {
		g.kinds[*p] = p
	}
	return p
}

// compactRefs converts references, sharing the name strings the graph
// already holds for equal values: each owner's name that of the owner's
// node (a placeholder's comes from the first reference to it). Caller holds
// mu for writing, and links every reference it returns (keyFor).
func (g *Graph) compactRefs(refs []metav1.OwnerReference) []ownerRef {
	if len(refs) == 0 {
		return nil
	}
	out := make([]ownerRef, len(refs))
	for i := range refs {
		in, r := &refs[i], &out[i]
		r.kind = g.kindOf(in.APIVersion, in.Kind)
		r.name, r.uid = in.Name, g.keyFor(in.UID)
		r.controller, r.block = optBoolOf(in.Controller), optBoolOf(in.BlockOwnerDeletion)
		if o := g.nodes[r.uid]; o != nil && r.name == o.name {
			r.name = o.name
		}
	}
	return out
}

// firstRef reports whether refs[i] is the first reference in refs to its owner.
func firstRef(refs []ownerRef, i int) bool {
	for j := range i {
		if refs[j].uid == refs[i].uid {
			return false
		}
	}
	return true
}

// hasRef reports whether refs reference owner.
func hasRef(refs []ownerRef, owner key) bool {
	for i := range refs {
		if refs[i].uid == owner {
			return true
		}
	}
	return false
}

// blocks reports whether any of refs to owner has blockOwnerDeletion=true.
// It is on the path of every foreground owner check, once per dependent,
// so it scans.
func blocks(refs []ownerRef, owner key) bool {
	for i := range refs {
		if refs[i].uid == owner && refs[i].blocking() {
			return true
		}
	}
	return false
}

// blocksOwner reports whether dependent's refs block owner. An object's
// reference to itself never blocks: an object in Foreground deletion
// cannot wait for its own deletion, which is what waits (upstream counts
// it, and such an object stays forever).
func blocksOwner(dependent key, refs []ownerRef, owner key) bool {
	return dependent != owner && blocks(refs, owner)
}

// matches is Matches for a node and a compact reference.
func matches(o *node, ref *ownerRef, ns string) bool {
	if o.uid != ref.uid || o.name != ref.name || o.kind.kind != ref.kind.kind {
		return false
	}
	if ons := o.namespace(); ons != "" && ons != ns {
		return false
	}
	return o.kind == ref.kind || rules.SameGroup(o.kind.apiVersion, ref.kind.apiVersion)
}
