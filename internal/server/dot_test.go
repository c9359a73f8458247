package server

import (
	"fmt"
	"regexp"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kgc-dev/kgc/internal/graph"
	"github.com/kgc-dev/kgc/internal/rules"
)

const dotString = `"(?:[^"\\]|\\.)*"`

// dotLine matches every line shape WriteDOT may produce; a quoted string
// that is not closed, or closed early by an unescaped quote, fails it.
var dotLine = regexp.MustCompile(`^(?:` +
	`strict digraph full \{` +
	`|  // (?:Node|Edge) definitions\.` +
	`|  (?:\d+|` + dotString + `) \[` +
	`|    [A-Za-z]+=` + dotString +
	`|  \];` +
	`|  (?:\d+|` + dotString + `) -> (?:\d+|` + dotString + `);` +
	`|\})$`)

func checkDOTSyntax(t *testing.T, doc string) {
	t.Helper()
	if !strings.HasSuffix(doc, "\n") {
		t.Errorf("DOT document does not end with a newline")
	}
	for i, line := range strings.Split(strings.TrimSuffix(doc, "\n"), "\n") {
		if !dotLine.MatchString(line) {
			t.Errorf("line %d is not valid DOT: %q", i+1, line)
		}
	}
}

// unquoteDOT reverses WriteDOT's quoting of one attribute value.
func unquoteDOT(s string) (string, error) {
	if len(s) < 2 || s[0] != '"' || s[len(s)-1] != '"' {
		return "", fmt.Errorf("not quoted: %q", s)
	}
	var b strings.Builder
	in := s[1 : len(s)-1]
	for i := 0; i < len(in); i++ {
		c := in[i]
		switch {
		case c == '"':
			return "", fmt.Errorf("unescaped quote at %d in %q", i, s)
		case c != '\\':
			b.WriteByte(c)
		case i+1 == len(in):
			return "", fmt.Errorf("dangling backslash in %q", s)
		default:
			i++
			switch in[i] {
			case 'n':
				b.WriteByte('\n')
			default:
				b.WriteByte(in[i])
			}
		}
	}
	return b.String(), nil
}

func attrs(doc string) map[string][]string {
	out := map[string][]string{}
	re := regexp.MustCompile(`(?m)^    ([A-Za-z]+)=(` + dotString + `)$`)
	for _, m := range re.FindAllStringSubmatch(doc, -1) {
		out[m[1]] = append(out[m[1]], m[2])
	}
	return out
}

func TestWriteDOTQuoting(t *testing.T) {
	nasty := []string{
		`quo"te`,
		`back\slash`,
		`both\"`,
		`trailing\`,
		"new\nline",
		`Iñtërnâtiônàlizætiøn,🐹`,
	}
	for _, name := range nasty {
		t.Run(name, func(t *testing.T) {
			var b strings.Builder
			nodes := []graph.Node{{Object: rules.Object{Identity: rules.Identity{APIVersion: "example.com/v1", Kind: `K"ind`, Namespace: name, Name: name, UID: "u"}}}}
			if err := WriteDOT(&b, nodes); err != nil {
				t.Fatal(err)
			}
			doc := b.String()
			checkDOTSyntax(t, doc)
			a := attrs(doc)
			for key, want := range map[string]string{"name": name, "namespace": name, "kind": `K"ind`, "uid": "u", "group": "example.com"} {
				if len(a[key]) != 1 {
					t.Fatalf("attribute %s: %v", key, a[key])
				}
				got, err := unquoteDOT(a[key][0])
				if err != nil || got != want {
					t.Errorf("attribute %s = %q (%v), want %q", key, got, err, want)
				}
			}
			// The label is quoted once, so Graphviz breaks its lines.
			label, err := unquoteDOT(a["label"][0])
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(label, "namespace="+name+"\n") || !strings.HasSuffix(label, "/"+name+"\n") {
				t.Errorf("label = %q, want the namespace and name verbatim", label)
			}
		})
	}
}

func TestWriteDOTEdges(t *testing.T) {
	ref := func(uid string) metav1.OwnerReference { return metav1.OwnerReference{UID: types.UID(uid)} }
	nodes := []graph.Node{
		{Object: rules.Object{Identity: rules.Identity{APIVersion: "v1", Kind: "A", Name: "a", UID: "a"}}},
		{Object: rules.Object{Identity: rules.Identity{APIVersion: "v1", Kind: "B", Name: "b", UID: "b"}, OwnerReferences: []metav1.OwnerReference{ref("a"), ref("a"), ref("outside"), ref("b")}}},
	}
	var b strings.Builder
	if err := WriteDOT(&b, nodes); err != nil {
		t.Fatal(err)
	}
	doc := b.String()
	checkDOTSyntax(t, doc)
	// One edge per distinct owner in the set (a, and b itself); none to
	// owners outside the set written.
	if got := strings.Count(doc, " -> "); got != 2 {
		t.Errorf("%d edges, want 2:\n%s", got, doc)
	}
}

// TestWriteDOTUpstreamShape compares with what kube-controller-manager
// v1.36 serves at the same path for the same two objects (its
// pkg/controller/garbagecollector/dump.go): nodes are named by quoted UID,
// the label is quoted once, a core-group kind prints as "Kind.version"
// (no trailing dot), the label lists the node's conditions, and an empty
// graph has no section comments.
func TestWriteDOTUpstreamShape(t *testing.T) {

	nodes := []graph.Node{
		{Object: rules.Object{Identity: rules.Identity{APIVersion: "apps/v1", Kind: "Deployment", Namespace: "default", Name: "web", UID: "uid-1"}}},
		{Object: rules.Object{
			Identity:        rules.Identity{APIVersion: "v1", Kind: "Pod", Namespace: "default", Name: "web-x", UID: "uid-2"},
			Deleting:        true,
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "Deployment", Name: "web", UID: "uid-1"}},
		}},
	}
	want := `strict digraph full {
  // Node definitions.
  "uid-1" [
    label="uid=uid-1\nnamespace=default\nDeployment.v1.apps/web\n"
    group="apps"
    version="v1"
    kind="Deployment"
    namespace="default"
    name="web"
    uid="uid-1"
    missing="false"
    beingDeleted="false"
    deletingDependents="false"
    virtual="false"
  ];
  "uid-2" [
    label="uid=uid-2\nnamespace=default\nPod.v1/web-x\nbeingDeleted\n"
    group=""
    version="v1"
    kind="Pod"
    namespace="default"
    name="web-x"
    uid="uid-2"
    missing="false"
    beingDeleted="true"
    deletingDependents="false"
    virtual="false"
  ];
  // Edge definitions.
  "uid-2" -> "uid-1";
}
`
	var b strings.Builder
	if err := WriteDOT(&b, nodes); err != nil {
		t.Fatal(err)
	}
	if b.String() != want {
		t.Errorf("WriteDOT =\n%s\nwant\n%s", b.String(), want)
	}
	b.Reset()
	if err := WriteDOT(&b, nil); err != nil {
		t.Fatal(err)
	}
	if got := b.String(); got != "strict digraph full {\n}\n" {
		t.Errorf("empty graph = %q", got)
	}
}
