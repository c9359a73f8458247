package conventions

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// repoRoot is the repository's root: both modules, the docs and the
// scripts are below it.
const repoRoot = "../.."

// trackerText matches what a comment, a string or a document says when it
// points at a tracker or at how the work was organised instead of stating
// the reason: "issue 14", "item 7b", "deliverable 3", "stop 2", "the
// reviewer", "the lead". Upstream issues are cited as owner/repo#N or
// kubernetes#N, which this leaves alone.
var trackerText = regexp.MustCompile(`\b(?:[Ii]ssue #?\d+|[Ii]tem \d+[a-z]?\b|[Dd]eliverable \d+|[Ss]top \d+\b|[Rr]eviewer'?s?\b|[Cc]ode review|the lead\b)`)

// trackerName matches a test's or a file's name that says how it was
// written instead of what it tests ("preview" is not "review").
var trackerName = regexp.MustCompile(`(?i)(?:^|[^p])review|issue_?\d|item_?\d|deliverable`)

// TestNoTrackerReferences fails on a comment, string literal, test name or
// file name of a .go file, or a line of a Markdown file, that cites a
// tracker or the way the work was organised.
func TestNoTrackerReferences(t *testing.T) {
	var failed []string
	err := filepath.WalkDir(repoRoot, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(repoRoot, path)
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			name := d.Name()
			if rel != "." && (strings.HasPrefix(name, ".") || name == "vendor" || name == "node_modules") {
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasPrefix(rel, "internal/conventions/") {
			return nil // the patterns' own examples
		}
		isGo := strings.HasSuffix(rel, ".go")
		if !isGo && !strings.HasSuffix(rel, ".md") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		var found []string
		if isGo {
			found = trackerReferencesInGo(rel, src)
		} else {
			found = trackerReferencesInText(rel, src)
		}
		failed = append(failed, found...)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range failed {
		t.Errorf("%s: state the reason instead of citing a tracker or how the work was organised", f)
	}
}

// trackerReferencesInGo returns "file:line: text" for each tracker
// reference in a Go file's comments, string literals, test function names
// and name.
func trackerReferencesInGo(rel string, src []byte) []string {
	var found []string
	if m := trackerName.FindString(filepath.Base(rel)); m != "" {
		found = append(found, rel+": file name says "+m)
	}
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, rel, src, parser.ParseComments|parser.SkipObjectResolution)
	if err != nil {
		// Not Go a compiler reads (a fixture, say): its text is checked.
		return append(found, trackerReferencesInText(rel, src)...)
	}
	report := func(pos token.Pos, text string) {
		for _, m := range trackerText.FindAllString(text, -1) {
			found = append(found, rel+":"+itoa(fset.Position(pos).Line)+": "+m)
		}
	}
	for _, cg := range f.Comments {
		for _, c := range cg.List {
			report(c.Pos(), c.Text)
		}
	}
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.BasicLit:
			if n.Kind == token.STRING {
				report(n.Pos(), n.Value)
			}
		case *ast.FuncDecl:
			if n.Recv == nil && strings.HasSuffix(rel, "_test.go") && isTestName(n.Name.Name) {
				if m := trackerName.FindString(n.Name.Name); m != "" {
					found = append(found, rel+":"+itoa(fset.Position(n.Pos()).Line)+": test name "+n.Name.Name)
				}
			}
		}
		return true
	})
	return found
}

// trackerReferencesInText returns "file:line: text" for each tracker
// reference in a text file.
func trackerReferencesInText(rel string, src []byte) []string {
	var found []string
	for i, line := range strings.Split(string(src), "\n") {
		for _, m := range trackerText.FindAllString(line, -1) {
			found = append(found, rel+":"+itoa(i+1)+": "+m)
		}
	}
	return found
}

func isTestName(name string) bool {
	for _, p := range []string{"Test", "Benchmark", "Fuzz", "Example"} {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}

func itoa(i int) string { return strconv.Itoa(i) }

// TestTrackerPatterns pins what the patterns catch and what they leave
// alone.
func TestTrackerPatterns(t *testing.T) {
	for text, want := range map[string]bool{
		"(issue 14, item 7b)":                         true,
		"issue 3's targets":                           true,
		"Issue #19":                                   true,
		"deliverable 3":                               true,
		"stop 2 of the plan":                          true,
		"(The reviewer's case)":                       true,
		"the lead chose to ignore it":                 true,
		"kubernetes#65200, rook#4274":                 false,
		"the leader collects":                         false,
		"one item in ten":                             false,
		"SelfSubjectAccessReviews":                    false,
		"the queue hands out an item whose writes":    false,
		"a Deployment of 1,000 Pods; stop the writes": false,
	} {
		if got := trackerText.MatchString(text); got != want {
			t.Errorf("trackerText matches %q: %v, want %v", text, got, want)
		}
	}
	for name, want := range map[string]bool{
		"review_park_test.go":                      true,
		"streamreview_test.go":                     true,
		"TestIssue14Item2FinalizerBeforeFirstList": true,
		"interleave_test.go":                       false,
		"TestForegroundChainIsNoCycle":             false,
		"TestPreviewMatchesDeletion":               false,
	} {
		if got := trackerName.MatchString(name); got != want {
			t.Errorf("trackerName matches %q: %v, want %v", name, got, want)
		}
	}
}
