package inspect

import (
	"context"
	"errors"
	"fmt"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kgc-dev/kgc/internal/rules"
)

// Finalizers the collector handles; any other finalizer is someone else's.
const (
	FinalizerOrphan     = rules.FinalizerOrphan
	FinalizerForeground = rules.FinalizerForeground
)

// Object is the metadata of one object, as a View sees it.
type Object struct {
	APIVersion      string    `json:"apiVersion"`
	Kind            string    `json:"kind"`
	Namespace       string    `json:"namespace,omitempty"`
	Name            string    `json:"name"`
	UID             types.UID `json:"uid"`
	ResourceVersion string    `json:"resourceVersion,omitempty"`
	Deleting        bool      `json:"deleting,omitempty"`
	// DeletionTimestamp: when its deletion was asked for (nil when not
	// deleting, or not known).
	DeletionTimestamp *metav1.Time            `json:"deletionTimestamp,omitempty"`
	Finalizers        []string                `json:"finalizers,omitempty"`
	OwnerReferences   []metav1.OwnerReference `json:"ownerReferences,omitempty"`
	// Placeholder: known only because something references it (a running
	// kgc's graph has never observed it).
	Placeholder bool `json:"placeholder,omitempty"`
}

// String renders the object kubectl-style: kind.group/name, plus namespace.
func (o *Object) String() string {
	s := kindGroup(o.APIVersion, o.Kind) + "/" + o.Name
	if o.Namespace != "" {
		s += " -n " + o.Namespace
	}
	return s
}

// Ref renders the object as "kind.group/name" without the namespace.
func (o *Object) Ref() string { return kindGroup(o.APIVersion, o.Kind) + "/" + o.Name }

func kindGroup(apiVersion, kind string) string {
	gv, _ := schema.ParseGroupVersion(apiVersion)
	if gv.Group == "" {
		return kind
	}
	return kind + "." + gv.Group
}

// DeletingDependents: in Foreground deletion (rules.Object.DeletingDependents).
func (o *Object) DeletingDependents() bool {
	obj := o.object()
	return obj.DeletingDependents()
}

// Orphaning: being deleted with the orphan finalizer (rules.Object.Orphaning).
func (o *Object) Orphaning() bool {
	obj := o.object()
	return obj.Orphaning()
}

// CustomFinalizers are the finalizers no collector handles: whoever added
// them must remove them.
func (o *Object) CustomFinalizers() []string {
	obj := o.object()
	return obj.CustomFinalizers()
}

// blocks reports whether o's reference to owner keeps owner's Foreground
// deletion waiting (rules.Object.Blocks).
func (o *Object) blocks(owner types.UID) bool {
	obj := o.object()
	return obj.Blocks(owner)
}

// object is o as kgc's rules read it.
func (o *Object) object() rules.Object {
	return rules.Object{
		Identity:        o.identity(),
		ResourceVersion: o.ResourceVersion,
		OwnerReferences: o.OwnerReferences,
		Finalizers:      o.Finalizers,
		Deleting:        o.Deleting,

		DeletionTimestamp: o.DeletionTimestamp,
	}
}

func (o *Object) identity() rules.Identity {
	return rules.Identity{APIVersion: o.APIVersion, Kind: o.Kind, Namespace: o.Namespace, Name: o.Name, UID: o.UID}
}

// found describes o as found at a reference's coordinates.
func (o *Object) found() rules.Found {
	obj := o.object()
	return rules.FoundObject(&obj)
}

func (o *Object) item(deps []rules.Dependent) rules.Item {
	return rules.Item{Object: o.object(), Dependents: deps}
}

func dependentsOf(owner *Object, deps []*Object) []rules.Dependent {
	out := make([]rules.Dependent, 0, len(deps))
	for _, d := range deps {
		obj := d.object()
		out = append(out, rules.DependentOf(&obj, owner.UID))
	}
	return out
}

// Resolution is how one ownerReference of a dependent classifies.
type Resolution struct {
	State rules.OwnerState
	// Owner is the object the reference resolves to (nil unless the state
	// is solid or waiting).
	Owner *Object
	// Reason says why, in plain words.
	Reason string
	// ElsewhereNamespace is set when the state is dangling because the UID
	// belongs to an object in another namespace (kgc records a Warning event
	// OwnerRefInvalidNamespace on the dependent).
	ElsewhereNamespace string
}

// View is read-only access to the objects and their ownership.
type View interface {
	// Lookup finds the object a user names: kind is what the user typed
	// (kind, resource, short name, optionally .group).
	Lookup(ctx context.Context, kind, namespace, name string) (*Object, error)
	// ResolveOwner classifies one ownerReference of dependent.
	ResolveOwner(ctx context.Context, dependent *Object, ref metav1.OwnerReference) (Resolution, error)
	// Dependents returns the objects whose ownerReferences name owner.
	Dependents(ctx context.Context, owner *Object) ([]*Object, error)
}

// ErrNotFound is returned (wrapped) when the named object does not exist.
var ErrNotFound = errors.New("not found")

// ErrUnknownKind is returned (wrapped) when no API serves the named kind.
var ErrUnknownKind = errors.New("unknown kind")

// ParseTarget splits the command-line form of an object: "KIND/NAME", or
// "KIND" "NAME" as two arguments.
func ParseTarget(args []string) (kind, name string, err error) {
	switch len(args) {
	case 1:
		k, n, ok := strings.Cut(args[0], "/")
		if !ok || k == "" || n == "" || strings.Contains(n, "/") {
			return "", "", fmt.Errorf("want KIND/NAME (e.g. deployment/web), got %q", args[0])
		}
		return k, n, nil
	case 2:
		if strings.Contains(args[0], "/") || strings.Contains(args[1], "/") || args[0] == "" || args[1] == "" {
			return "", "", fmt.Errorf("want KIND/NAME or KIND NAME, got %q", strings.Join(args, " "))
		}
		return args[0], args[1], nil
	}
	return "", "", fmt.Errorf("want exactly one object: KIND/NAME or KIND NAME, got %d arguments", len(args))
}

// resolveAll classifies every ownerReference of o.
func resolveAll(ctx context.Context, v View, o *Object) ([]Resolution, error) {
	out := make([]Resolution, len(o.OwnerReferences))
	for i, ref := range o.OwnerReferences {
		r, err := v.ResolveOwner(ctx, o, ref)
		if err != nil {
			return nil, fmt.Errorf("resolving owner %s/%s of %s: %w", kindGroup(ref.APIVersion, ref.Kind), ref.Name, o, err)
		}
		out[i] = r
	}
	return out, nil
}

// resolution renders a classification by kgc's rules (rules.Locate,
// rules.Classify) in plain words, for the reference ref of a dependent
// whose owner would be in namespace ns. owner is what was found at the
// reference's coordinates (nil: nothing); err is the mapping error of
// ReasonKindUnknown.
func resolution(s rules.OwnerState, why rules.Reason, ref metav1.OwnerReference, ns string, owner *Object, err error) Resolution {
	res := Resolution{State: s}
	if s == rules.Solid || s == rules.Waiting {
		res.Owner = owner
	}
	what := kindGroup(ref.APIVersion, ref.Kind)
	switch why {
	case rules.ReasonExists:
		res.Reason = "the owner exists"
	case rules.ReasonOrphaning:
		res.Reason = "the owner exists; it is being deleted with the orphan policy, so kgc will remove this reference instead of deleting the object"
	case rules.ReasonDeleting:
		res.Reason = "the owner exists (being deleted, but not in the foreground: it counts as alive until it is gone)"
	case rules.ReasonForeground:
		res.Reason = "the owner is being deleted in the foreground and waits for its dependents"
	case rules.ReasonNotFound:
		res.Reason = fmt.Sprintf("no %s named %q exists%s", what, ref.Name, inNamespace(ns))
	case rules.ReasonOtherUID:
		res.Reason = fmt.Sprintf("%s %q%s is a different object (uid %s; the reference names uid %s)", what, ref.Name, inNamespace(ns), owner.UID, ref.UID)
	case rules.ReasonKindNotServed:
		res.Reason = fmt.Sprintf("no API serves kind %s (%s); kgc keeps the object and checks again later", ref.Kind, ref.APIVersion)
	case rules.ReasonKindUnknown:
		res.Reason = fmt.Sprintf("kind %s (%s) cannot be resolved now: %v", ref.Kind, ref.APIVersion, err)
	case rules.ReasonMalformedAPIVersion:
		res.Reason = fmt.Sprintf("the reference's apiVersion %q is malformed; kgc never collects the object and leaves its references as they are", ref.APIVersion)
	case rules.ReasonClusterScopedDependent:
		res.Reason = fmt.Sprintf("a cluster-scoped object cannot be owned by a namespaced %s; kgc never collects it, leaves its references as they are, and records a Warning event OwnerRefInvalidNamespace", ref.Kind)
	}
	return res
}

func states(rs []Resolution) []rules.OwnerState {
	out := make([]rules.OwnerState, len(rs))
	for i, r := range rs {
		out[i] = r.State
	}
	return out
}
