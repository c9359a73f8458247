package rules

import (
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Finalizers the apiserver adds for the Orphan and Foreground policies.
const (
	FinalizerOrphan     = metav1.FinalizerOrphanDependents // "orphan"
	FinalizerForeground = metav1.FinalizerDeleteDependents // "foregroundDeletion"
)

// Object is the metadata of one object that garbage collection reads: its
// identity, ownerReferences, finalizers and whether it is being deleted.
// It is the one object type of kgc: the graph stores it (compactly) and
// hands it out, the workers decide from it, and the inspection commands
// fill it from the API server or from a running kgc.
type Object struct {
	Identity        Identity
	ResourceVersion string
	OwnerReferences []metav1.OwnerReference
	Finalizers      []string
	Deleting        bool // deletionTimestamp is set
	// DeletionTimestamp is when the deletion was asked for, when known (nil
	// otherwise, also for some deleting objects: tests, placeholders). No
	// decision reads it; it dates stuck deletions (kgc stuck, metrics).
	DeletionTimestamp *metav1.Time
}

// DeletingDependents reports whether the object waits for its dependents:
// being deleted with the foregroundDeletion finalizer.
func (o *Object) DeletingDependents() bool { return DeletingDependents(o.Deleting, o.Finalizers) }

// Orphaning reports whether the object waits for its dependents to be
// orphaned: being deleted with the orphan finalizer.
func (o *Object) Orphaning() bool { return Orphaning(o.Deleting, o.Finalizers) }

// DeletingDependents is Object.DeletingDependents for an object stored in
// another shape (the graph's compact nodes).
func DeletingDependents(deleting bool, finalizers []string) bool {
	return deleting && slices.Contains(finalizers, FinalizerForeground)
}

// Orphaning is Object.Orphaning for an object stored in another shape.
func Orphaning(deleting bool, finalizers []string) bool {
	return deleting && slices.Contains(finalizers, FinalizerOrphan)
}

// CustomFinalizers are the finalizers no garbage collector handles: whoever
// added them must remove them.
func (o *Object) CustomFinalizers() []string {
	var out []string
	for _, f := range o.Finalizers {
		if f != FinalizerOrphan && f != FinalizerForeground {
			out = append(out, f)
		}
	}
	return out
}

// Blocks reports whether o's reference to owner keeps owner's Foreground
// deletion waiting: a reference with blockOwnerDeletion=true. An object's
// reference to itself never blocks: an object in Foreground deletion
// cannot wait for its own deletion, which is what it waits for (upstream
// counts it, and such an object stays forever; docs/semantics.md).
func (o *Object) Blocks(owner types.UID) bool {
	if o.Identity.UID == owner {
		return false
	}
	for i := range o.OwnerReferences {
		r := &o.OwnerReferences[i]
		if r.UID == owner && r.BlockOwnerDeletion != nil && *r.BlockOwnerDeletion {
			return true
		}
	}
	return false
}

// References reports the indices of o's ownerReferences that name owner
// by UID (normally one).
func (o *Object) References(owner types.UID) []int {
	var out []int
	for i := range o.OwnerReferences {
		if o.OwnerReferences[i].UID == owner {
			out = append(out, i)
		}
	}
	return out
}

// Dependent is what an owner's decision needs to know about one dependent.
type Dependent struct {
	UID                types.UID
	Blocking           bool // its reference to the owner blocks (Object.Blocks)
	Deleting           bool
	DeletingDependents bool
}

// DependentOf describes dep as a dependent of owner.
func DependentOf(dep *Object, owner types.UID) Dependent {
	return Dependent{UID: dep.Identity.UID, Blocking: dep.Blocks(owner), Deleting: dep.Deleting, DeletingDependents: dep.DeletingDependents()}
}

// Item is one object with its dependents: what every decision reads.
// Virtual and Absent are the graph's: an object known only from
// references (never observed), and one observed deleted.
type Item struct {
	Object
	Virtual bool
	Absent  bool
	// Arrived: the object appeared while kgc watched its resource (created,
	// or restored, after kgc first listed it, and its owners' resources),
	// rather than being there when kgc started, or being found by a relist
	// after kgc's watch of its resource lost the storage's history. The deletion breaker counts owners never observed
	// alive only for such objects: a backlog found at start-up is what an
	// ordinary restart or first start looks like, a burst of new objects
	// naming owners kgc never saw is what a restore looks like.
	Arrived    bool
	Dependents []Dependent
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
	return SameGroup(owner.APIVersion, ref.APIVersion)
}

// SameGroup reports whether two apiVersions name the same group; equal
// apiVersions (the common case) are decided without parsing.
func SameGroup(a, b string) bool {
	if a == b {
		return true
	}
	return GroupOf(a) == GroupOf(b)
}

// GroupOf returns the group of an apiVersion ("" for the core group's "v1"),
// without allocating: a sweep calls it for every node of the graph. It
// agrees with schema.ParseGroupVersion on every valid apiVersion.
func GroupOf(apiVersion string) string {
	group, _, ok := strings.Cut(apiVersion, "/")
	if !ok {
		return ""
	}
	return group
}
