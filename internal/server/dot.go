package server

import (
	"bufio"
	"fmt"
	"io"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kgc-dev/kgc/internal/graph"
)

// WriteDOT renders nodes as a Graphviz digraph in the shape of
// kube-controller-manager's debug graph: one node per object with its
// coordinates and state as attributes, one edge from each dependent to each
// of its owners.
func WriteDOT(w io.Writer, nodes []graph.Node) error {
	b := bufio.NewWriterSize(w, 64<<10)
	b.WriteString("strict digraph full {\n")
	if len(nodes) > 0 {
		present := make(map[types.UID]bool, len(nodes))
		for i := range nodes {
			present[nodes[i].Identity.UID] = true
		}
		b.WriteString("  // Node definitions.\n")
		for i := range nodes {
			writeDOTNode(b, &nodes[i])
		}
		b.WriteString("  // Edge definitions.\n")
		for i := range nodes {
			n := &nodes[i]
			seen := make(map[types.UID]bool, len(n.OwnerReferences))
			for _, ref := range n.OwnerReferences {
				if !present[ref.UID] || seen[ref.UID] {
					continue
				}
				seen[ref.UID] = true
				b.WriteString("  ")
				writeQuoted(b, string(n.Identity.UID))
				b.WriteString(" -> ")
				writeQuoted(b, string(ref.UID))
				b.WriteString(";\n")
			}
		}
	}
	b.WriteString("}\n")
	return b.Flush()
}

func writeDOTNode(b *bufio.Writer, n *graph.Node) {
	gv, _ := schema.ParseGroupVersion(n.Identity.APIVersion)
	kind := n.Identity.Kind + "." + gv.Version
	if gv.Group != "" {
		kind += "." + gv.Group
	}
	label := fmt.Sprintf("uid=%s\nnamespace=%s\n%s/%s\n", n.Identity.UID, n.Identity.Namespace, kind, n.Identity.Name)
	for _, c := range []struct {
		name string
		on   bool
	}{{"missing", n.Absent}, {"beingDeleted", n.Deleting}, {"deletingDependents", n.DeletingDependents()}, {"virtual", n.Virtual}} {
		if c.on {
			label += c.name + "\n"
		}
	}
	b.WriteString("  ")
	writeQuoted(b, string(n.Identity.UID))
	b.WriteString(" [\n")
	attr := func(k, v string) {
		b.WriteString("    ")
		b.WriteString(k)
		b.WriteByte('=')
		writeQuoted(b, v)
		b.WriteByte('\n')
	}
	attr("label", label)
	attr("group", gv.Group)
	attr("version", gv.Version)
	attr("kind", n.Identity.Kind)
	attr("namespace", n.Identity.Namespace)
	attr("name", n.Identity.Name)
	attr("uid", string(n.Identity.UID))
	attr("missing", strconv.FormatBool(n.Absent))
	attr("beingDeleted", strconv.FormatBool(n.Deleting))
	attr("deletingDependents", strconv.FormatBool(n.DeletingDependents()))
	attr("virtual", strconv.FormatBool(n.Virtual))
	b.WriteString("  ];\n")
}

var dotEscaper = strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`)

// writeQuoted writes s as a DOT quoted string.
func writeQuoted(b *bufio.Writer, s string) {
	b.WriteByte('"')
	_, _ = dotEscaper.WriteString(b, s)
	b.WriteByte('"')
}
