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
	index := make(map[types.UID]int, len(nodes))
	for i, n := range nodes {
		index[n.Identity.UID] = i
	}
	var b strings.Builder
	b.WriteString("strict digraph full {\n")
	b.WriteString("  // Node definitions.\n")
	for i, n := range nodes {
		gv, _ := schema.ParseGroupVersion(n.Identity.APIVersion)
		label := fmt.Sprintf("uid=%s\nnamespace=%s\n%s.%s.%s/%s\n",
			n.Identity.UID, n.Identity.Namespace, n.Identity.Kind, gv.Version, gv.Group, n.Identity.Name)
		fmt.Fprintf(&b, "  %d [\n", i)
		attr := func(k, v string) { fmt.Fprintf(&b, "    %s=%s\n", k, quote(v)) }
		attr("label", quote(label))
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
	b.WriteString("  // Edge definitions.\n")
	for i, n := range nodes {
		seen := make(map[int]bool, len(n.Owners))
		for _, ref := range n.Owners {
			j, ok := index[ref.UID]
			if !ok || seen[j] {
				continue
			}
			seen[j] = true
			fmt.Fprintf(&b, "  %d -> %d;\n", i, j)
		}
	}
	b.WriteString("}\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// quote renders s as a DOT quoted string.
func quote(s string) string {
	r := strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`)
	return `"` + r.Replace(s) + `"`
}
