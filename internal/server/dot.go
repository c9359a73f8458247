package server

import (
	"fmt"
	"io"
	"strings"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kgc-dev/kgc/internal/graph"
)

// WriteDOT renders nodes as a Graphviz digraph in the shape of
// kube-controller-manager's debug graph: one node per object with its
// coordinates and state as attributes, one edge from each dependent to each
// of its owners.
func WriteDOT(w io.Writer, nodes []graph.NodeView) error {
	var b strings.Builder
	b.WriteString("strict digraph full {\n")
	if len(nodes) > 0 {
		present := make(map[types.UID]bool, len(nodes))
		for _, n := range nodes {
			present[n.Identity.UID] = true
		}
		b.WriteString("  // Node definitions.\n")
		for _, n := range nodes {
			writeDOTNode(&b, n)
		}
		b.WriteString("  // Edge definitions.\n")
		for _, n := range nodes {
			seen := make(map[types.UID]bool, len(n.Owners))
			for _, ref := range n.Owners {
				if !present[ref.UID] || seen[ref.UID] {
					continue
				}
				seen[ref.UID] = true
				fmt.Fprintf(&b, "  %s -> %s;\n", quote(string(n.Identity.UID)), quote(string(ref.UID)))
			}
		}
	}
	b.WriteString("}\n")
	_, err := io.WriteString(w, b.String())
	return err
}

func writeDOTNode(b *strings.Builder, n graph.NodeView) {
	gv, _ := schema.ParseGroupVersion(n.Identity.APIVersion)
	kind := n.Identity.Kind + "." + gv.Version
	if gv.Group != "" {
		kind += "." + gv.Group
	}
	label := fmt.Sprintf("uid=%s\nnamespace=%s\n%s/%s\n", n.Identity.UID, n.Identity.Namespace, kind, n.Identity.Name)
	for _, c := range []struct {
		name string
		on   bool
	}{{"missing", n.Absent}, {"beingDeleted", n.Deleting}, {"deletingDependents", n.DeletingDependents}, {"virtual", n.Virtual}} {
		if c.on {
			label += c.name + "\n"
		}
	}
	fmt.Fprintf(b, "  %s [\n", quote(string(n.Identity.UID)))
	attr := func(k, v string) { fmt.Fprintf(b, "    %s=%s\n", k, quote(v)) }
	attr("label", label)
	attr("group", gv.Group)
	attr("version", gv.Version)
	attr("kind", n.Identity.Kind)
	attr("namespace", n.Identity.Namespace)
	attr("name", n.Identity.Name)
	attr("uid", string(n.Identity.UID))
	attr("missing", fmt.Sprint(n.Absent))
	attr("beingDeleted", fmt.Sprint(n.Deleting))
	attr("deletingDependents", fmt.Sprint(n.DeletingDependents))
	attr("virtual", fmt.Sprint(n.Virtual))
	b.WriteString("  ];\n")
}

// quote renders s as a DOT quoted string.
func quote(s string) string {
	r := strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`)
	return `"` + r.Replace(s) + `"`
}
