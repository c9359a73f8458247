package rules

import (
	"errors"
	"fmt"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
)

// OwnerState classifies one ownerReference of an item.
type OwnerState int

const (
	// Solid: the owner exists under the referenced coordinates and is not
	// waiting for foreground deletion of its dependents.
	Solid OwnerState = iota
	// Waiting: the owner exists and is being deleted in the foreground.
	Waiting
	// Dangling: no object with that UID exists at those coordinates.
	Dangling
	// Unresolvable: no API serves the referenced kind (yet). Never dangling;
	// the item is kept and re-checked later.
	Unresolvable
	// Invalid: a reference that can never resolve — a cluster-scoped item
	// naming a namespaced owner kind, or a malformed apiVersion. The item is
	// never collected on its account.
	Invalid
	// Orphaned: the owner is gone and was deleted with the Orphan policy
	// (kgc removed its orphan finalizer). Its dependents are orphaned,
	// never collected on its account (S2): the reference is removed. A
	// dependent kgc could not reach before the owner went (its resource
	// was not listed yet, its watch lagged) is still orphaned this way.
	Orphaned
)

func (s OwnerState) String() string {
	switch s {
	case Solid:
		return "solid"
	case Waiting:
		return "waiting"
	case Dangling:
		return "dangling"
	case Unresolvable:
		return "unresolvable"
	case Invalid:
		return "invalid"
	case Orphaned:
		return "orphaned"
	}
	return "unknown"
}

// Reason says why a reference classified as it did: the fact the state
// rests on. The inspection commands render it; the collector logs it.
type Reason int

const (
	// ReasonExists (Solid): the owner exists and is not being deleted.
	ReasonExists Reason = iota
	// ReasonOrphaning (Solid): the owner is being deleted with the orphan
	// finalizer; the reference will be removed, the dependent stays.
	ReasonOrphaning
	// ReasonDeleting (Solid): the owner is being deleted, but not in the
	// foreground: it counts as alive until it is gone.
	ReasonDeleting
	// ReasonForeground (Waiting): the owner is in Foreground deletion.
	ReasonForeground
	// ReasonNotFound (Dangling, Orphaned): nothing exists at the
	// reference's coordinates.
	ReasonNotFound
	// ReasonOtherUID (Dangling, Orphaned): another object (another UID)
	// exists at the reference's coordinates.
	ReasonOtherUID
	// ReasonKindNotServed (Unresolvable): no API serves the kind.
	ReasonKindNotServed
	// ReasonKindUnknown (Unresolvable): the kind could not be mapped now
	// (discovery failed); decided again later.
	ReasonKindUnknown
	// ReasonMalformedAPIVersion (Invalid): the apiVersion does not parse.
	ReasonMalformedAPIVersion
	// ReasonClusterScopedDependent (Invalid): a cluster-scoped dependent
	// names a namespaced kind, which has no object it could mean.
	ReasonClusterScopedDependent
)

// ErrMalformedAPIVersion marks a reference whose apiVersion does not parse.
var ErrMalformedAPIVersion = errors.New("malformed apiVersion in owner reference")

// OwnerMapping maps a reference's kind to a resource: the referenced
// version if it is served, else any served version of the same group and
// kind (every served version addresses the same objects). Upstream maps
// the referenced version only, and keeps a dependent whose reference names
// a version no longer served forever (docs/semantics.md).
func OwnerMapping(mapper meta.RESTMapper, apiVersion, kind string) (*meta.RESTMapping, error) {
	gv, err := schema.ParseGroupVersion(apiVersion)
	if err != nil {
		return nil, fmt.Errorf("%w: %q: %w", ErrMalformedAPIVersion, apiVersion, err)
	}
	gk := schema.GroupKind{Group: gv.Group, Kind: kind}
	m, err := mapper.RESTMapping(gk, gv.Version)
	if meta.IsNoMatchError(err) {
		m, err = mapper.RESTMapping(gk)
	}
	return m, err
}

// Locate finds where ref's owner must be, seen from dependent, given
// OwnerMapping's answer (m, mapErr): the owner's coordinates, or a state
// settled without looking (done): Invalid or Unresolvable. A namespaced
// owner lives in its dependent's namespace; a cluster-scoped dependent
// cannot have one (upstream's rule since v1.20: the reference is
// unresolvable and the dependent is never collected on it).
func Locate(dependent Identity, ref *metav1.OwnerReference, m *meta.RESTMapping, mapErr error) (c Coordinates, s OwnerState, why Reason, done bool) {
	switch {
	case errors.Is(mapErr, ErrMalformedAPIVersion):
		return c, Invalid, ReasonMalformedAPIVersion, true
	case meta.IsNoMatchError(mapErr):
		return c, Unresolvable, ReasonKindNotServed, true
	case mapErr != nil:
		return c, Unresolvable, ReasonKindUnknown, true
	}
	ns, s, why, done := Scope(dependent, m.Scope.Name() == meta.RESTScopeNameNamespace)
	if done {
		return c, s, why, true
	}
	return Coordinates{Group: m.GroupVersionKind.Group, Kind: ref.Kind, Namespace: ns, Name: ref.Name, UID: ref.UID}, 0, 0, false
}

// Scope returns the namespace a reference's owner must be in, given
// whether its kind is namespaced, or Invalid for a cluster-scoped
// dependent naming a namespaced kind.
func Scope(dependent Identity, namespacedKind bool) (ns string, s OwnerState, why Reason, done bool) {
	if !namespacedKind {
		return "", 0, 0, false
	}
	if dependent.Namespace == "" {
		return "", Invalid, ReasonClusterScopedDependent, true
	}
	return dependent.Namespace, 0, 0, false
}

// Found is what a read of a reference's coordinates found there, from a
// quorum GET, the graph, or a running kgc.
type Found struct {
	// Exists: an object is at the coordinates (false: 404, or an object
	// observed deleted there).
	Exists bool
	// UID of the object found.
	UID                types.UID
	Deleting           bool
	DeletingDependents bool
	Orphaning          bool
	// Source and ResourceVersion say where and when it was found, for the
	// Evidence (ClassifyFact); Classify ignores them.
	Source          Source
	ResourceVersion string
}

// FoundObject describes o as found at a reference's coordinates.
func FoundObject(o *Object) Found {
	return Found{Exists: true, UID: o.Identity.UID, Deleting: o.Deleting, DeletingDependents: o.DeletingDependents(), Orphaning: o.Orphaning()}
}

// Classify is the state of a reference to the owner with UID owner,
// given what was found at the reference's coordinates. orphaned reports
// whether kgc removed the orphan finalizer of the owner with a given UID
// (nil: it never did): such an owner's dependents are orphaned, never
// collected on its account.
func Classify(owner types.UID, f Found, orphaned func(types.UID) bool) (OwnerState, Reason) {
	switch {
	case !f.Exists || f.UID != owner:
		why := ReasonNotFound
		if f.Exists {
			why = ReasonOtherUID
		}
		if orphaned != nil && orphaned(owner) {
			return Orphaned, why
		}
		return Dangling, why
	case f.DeletingDependents:
		return Waiting, ReasonForeground
	case f.Orphaning:
		return Solid, ReasonOrphaning
	case f.Deleting:
		return Solid, ReasonDeleting
	}
	return Solid, ReasonExists
}
