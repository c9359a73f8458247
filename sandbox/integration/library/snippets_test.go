package library

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/kgc-dev/kgc/pkg/kgc"
)

// The documentation's library snippets run here, against the package's
// API server, as a user's test would run them against envtest's; and
// TestSnippetsAreTheDocs keeps each one identical to the text the reader
// copies. hack/verify-importable.sh proves the other half: the package
// compiles from a module outside the repository, with no workspace.

// TestReadmeSnippet: the README's snippet gives cascading deletion.
func TestReadmeSnippet(t *testing.T) {
	ctx := t.Context()

	// snippet:start README.md envtest-snippet
	// cfg is the test API server's *rest.Config (envtest: cfg, err := testEnv.Start()).
	gc, err := kgc.Start(ctx, cfg, kgc.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(gc.Stop) // before the API server stops
	// snippet:end

	ns := newNamespace(t)
	cms := client.CoreV1().ConfigMaps(ns)
	owner, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "owner"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ref := metav1.OwnerReference{APIVersion: "v1", Kind: "ConfigMap", Name: owner.Name, UID: owner.UID}
	for i := range 3 {
		dep := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("dep-%d", i), OwnerReferences: []metav1.OwnerReference{ref}}}
		if _, err := cms.Create(ctx, dep, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if err := cms.Delete(ctx, owner.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	err = wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		for i := range 3 {
			if _, err := cms.Get(ctx, fmt.Sprintf("dep-%d", i), metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("the README snippet did not give cascading deletion: %v", err)
	}
}

// TestLibraryNamespaceSnippet: docs/library.md's snippet deletes a
// namespace and waits for it to be gone (kgc's namespace lifecycle).
func TestLibraryNamespaceSnippet(t *testing.T) {
	ctx := t.Context()

	// snippet:start docs/library.md envtest-namespace-snippet
	gc, err := kgc.Start(ctx, cfg, kgc.Options{NamespaceLifecycle: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(gc.Stop)

	client := kubernetes.NewForConfigOrDie(cfg)
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "doomed"}}
	if _, err := client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "content"}}
	if _, err := client.CoreV1().ConfigMaps("doomed").Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := client.CoreV1().Namespaces().Delete(ctx, "doomed", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	// kgc empties the namespace, then removes its "kubernetes" finalizer
	// (at least 5 s after the deletion; see docs/semantics.md).
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := client.CoreV1().Namespaces().Get(ctx, "doomed", metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
	if err != nil {
		t.Fatalf("namespace not deleted: %v", err)
	}
	// snippet:end
}

// TestSnippetsAreTheDocs fails when a snippet above and the documentation's
// text differ, so the text a reader copies is the one that ran.
func TestSnippetsAreTheDocs(t *testing.T) {
	_, self, _, _ := runtime.Caller(0)
	src, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	root := filepath.Join(filepath.Dir(self), "..", "..", "..")
	snippets := testSnippets(t, string(src))
	if len(snippets) != 2 {
		t.Fatalf("found %d snippets in %s, want 2", len(snippets), self)
	}
	for _, s := range snippets {
		doc, err := os.ReadFile(filepath.Join(root, s.file))
		if err != nil {
			t.Fatal(err)
		}
		want, err := docSnippet(string(doc), s.marker)
		if err != nil {
			t.Fatalf("%s: %v", s.file, err)
		}
		if s.text != want {
			t.Errorf("%s's %s differs from the code this test runs:\n--- documented\n%s\n--- tested\n%s", s.file, s.marker, want, s.text)
		}
	}
}

type snippet struct{ file, marker, text string }

// testSnippets returns the code between "// snippet:start FILE MARKER" and
// "// snippet:end" lines, with the function body's indentation removed.
func testSnippets(t *testing.T, src string) []snippet {
	var out []snippet
	var cur *snippet
	var lines []string
	for _, line := range strings.Split(src, "\n") {
		trimmed := strings.TrimSpace(line)
		switch {
		case strings.HasPrefix(trimmed, "// snippet:start "):
			f := strings.Fields(strings.TrimPrefix(trimmed, "// snippet:start "))
			if len(f) != 2 {
				t.Fatalf("bad snippet line %q", line)
			}
			cur, lines = &snippet{file: f[0], marker: f[1]}, nil
		case trimmed == "// snippet:end" && cur != nil:
			cur.text = strings.Join(lines, "\n")
			out = append(out, *cur)
			cur = nil
		case cur != nil:
			lines = append(lines, strings.TrimPrefix(line, "\t"))
		}
	}
	return out
}

// docSnippet returns the code block between <!-- MARKER:start --> and
// <!-- MARKER:end --> in a Markdown text, without its fences.
func docSnippet(doc, marker string) (string, error) {
	start, end := "<!-- "+marker+":start -->", "<!-- "+marker+":end -->"
	i, j := strings.Index(doc, start), strings.Index(doc, end)
	if i < 0 || j < i {
		return "", fmt.Errorf("no %s ... %s block", start, end)
	}
	var lines []string
	for _, line := range strings.Split(doc[i+len(start):j], "\n") {
		if strings.HasPrefix(line, "```") || strings.TrimSpace(line) == "" && len(lines) == 0 {
			continue
		}
		lines = append(lines, line)
	}
	return strings.TrimRight(strings.Join(lines, "\n"), "\n"), nil
}
