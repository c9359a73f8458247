package rules

import (
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
)

// Identity is where an object lives: enough to address it in the API.
type Identity struct {
	APIVersion string // group/version as observed or as referenced
	Kind       string
	Namespace  string // "" for cluster-scoped objects
	Name       string
	UID        types.UID
}

// GroupKind returns the identity's group and kind (the version is not part of
// an object's identity: any served version addresses the same object).
func (id Identity) GroupKind() schema.GroupKind {
	gv, _ := schema.ParseGroupVersion(id.APIVersion)
	return schema.GroupKind{Group: gv.Group, Kind: id.Kind}
}

// String renders the identity for logs.
func (id Identity) String() string {
	var b strings.Builder
	b.WriteString(id.Kind)
	b.WriteByte('.')
	b.WriteString(id.APIVersion)
	b.WriteByte(' ')
	if id.Namespace != "" {
		b.WriteString(id.Namespace)
		b.WriteByte('/')
	}
	b.WriteString(id.Name)
	fmt.Fprintf(&b, " (uid %s)", id.UID)
	return b.String()
}

// Coordinates identify an owner as a reference names it, after the owner's
// scope is known: a namespaced owner is looked up in the dependent's
// namespace, a cluster-scoped one with Namespace "". Two coordinates are the
// same object only if every field matches.
type Coordinates struct {
	Group     string
	Kind      string
	Namespace string
	Name      string
	UID       types.UID
}

// Coordinates returns the identity's coordinates.
func (id Identity) Coordinates() Coordinates {
	gk := id.GroupKind()
	return Coordinates{Group: gk.Group, Kind: gk.Kind, Namespace: id.Namespace, Name: id.Name, UID: id.UID}
}

func (c Coordinates) String() string {
	ns := c.Namespace
	if ns == "" {
		ns = "<cluster>"
	}
	return fmt.Sprintf("%s.%s %s/%s (uid %s)", c.Kind, c.Group, ns, c.Name, c.UID)
}
