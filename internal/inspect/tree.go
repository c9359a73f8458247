package inspect

import (
	"context"
	"strings"

	"github.com/kgc-dev/kgc/internal/rules"
	"k8s.io/apimachinery/pkg/types"
)

// TreeNode is one object of an ownership tree.
type TreeNode struct {
	Object *Object `json:"object"`
	// Markers: LIVE, DELETING, WAITING(foreground), ORPHANING, PLACEHOLDER,
	// DANGLING, INVALID, UNRESOLVABLE, FINALIZERS=...
	Markers []string `json:"markers"`
	// Ref: for an owner, how the reference to it classifies (solid, waiting,
	// dangling, unresolvable, invalid); for a dependent, "dependent".
	Ref string `json:"ref,omitempty"`
	// Blocking: the edge has blockOwnerDeletion=true.
	Blocking bool `json:"blocking,omitempty"`
	// Repeated: already shown elsewhere in the tree (shared or cyclic);
	// not expanded again.
	Repeated   bool        `json:"repeated,omitempty"`
	Owners     []*TreeNode `json:"owners,omitempty"`
	Dependents []*TreeNode `json:"dependents,omitempty"`
}

// maxOwnerDepth bounds how far up a tree goes.
const maxOwnerDepth = 16

// BuildTree returns o with its owners (up, recursively) and dependents
// (down, recursively). Cycles terminate: an object already shown is marked
// Repeated and not expanded again.
func BuildTree(ctx context.Context, v View, o *Object) (*TreeNode, error) {
	root := &TreeNode{Object: o, Markers: markers(o)}
	up := map[types.UID]bool{o.UID: true}
	var err error
	if root.Owners, err = owners(ctx, v, o, up, 1); err != nil {
		return nil, err
	}
	down := map[types.UID]bool{o.UID: true}
	if root.Dependents, err = dependents(ctx, v, o, down); err != nil {
		return nil, err
	}
	return root, nil
}

func markers(o *Object) []string {
	var m []string
	switch {
	case o.Placeholder:
		m = append(m, "PLACEHOLDER")
	case o.DeletingDependents():
		m = append(m, "DELETING", "WAITING(foreground)")
	case o.Orphaning():
		m = append(m, "DELETING", "ORPHANING")
	case o.Deleting:
		m = append(m, "DELETING")
	default:
		m = append(m, "LIVE")
	}
	if len(o.Finalizers) > 0 {
		m = append(m, "FINALIZERS="+strings.Join(o.Finalizers, ","))
	}
	return m
}

func owners(ctx context.Context, v View, o *Object, seen map[types.UID]bool, depth int) ([]*TreeNode, error) {
	var out []*TreeNode
	for _, ref := range o.OwnerReferences {
		r, err := v.ResolveOwner(ctx, o, ref)
		if err != nil {
			return nil, err
		}
		n := &TreeNode{Ref: r.State.String(), Blocking: ref.BlockOwnerDeletion != nil && *ref.BlockOwnerDeletion}
		if r.Owner != nil {
			n.Object = r.Owner
			n.Markers = markers(r.Owner)
		} else {
			ns := ""
			if r.State == rules.Dangling {
				ns = o.Namespace
			}
			n.Object = &Object{APIVersion: ref.APIVersion, Kind: ref.Kind, Name: ref.Name, UID: ref.UID, Namespace: ns, Placeholder: true}
			n.Markers = []string{strings.ToUpper(r.State.String())}
		}
		if r.Owner != nil {
			if seen[r.Owner.UID] || depth >= maxOwnerDepth {
				n.Repeated = true
			} else {
				seen[r.Owner.UID] = true
				if n.Owners, err = owners(ctx, v, r.Owner, seen, depth+1); err != nil {
					return nil, err
				}
			}
		}
		out = append(out, n)
	}
	return out, nil
}

func dependents(ctx context.Context, v View, o *Object, seen map[types.UID]bool) ([]*TreeNode, error) {
	deps, err := v.Dependents(ctx, o)
	if err != nil {
		return nil, err
	}
	var out []*TreeNode
	for _, d := range deps {
		n := &TreeNode{Object: d, Markers: markers(d), Ref: "dependent", Blocking: d.blocks(o.UID)}
		if seen[d.UID] {
			n.Repeated = true
		} else {
			seen[d.UID] = true
			if n.Dependents, err = dependents(ctx, v, d, seen); err != nil {
				return nil, err
			}
		}
		out = append(out, n)
	}
	return out, nil
}
