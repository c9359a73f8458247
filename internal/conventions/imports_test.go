package conventions

import (
	"errors"
	"go/build"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

const (
	modulePath   = "github.com/kgc-dev/kgc"
	architecture = "docs/architecture.md"
)

// TestImportsMatchArchitecture holds every package of the root module to
// the row of docs/architecture.md's package table that names it: the
// package imports (outside its tests) exactly the module's packages that
// the row's last column lists. A new import, a dropped one, a new package
// or a removed one changes that page in the same commit.
func TestImportsMatchArchitecture(t *testing.T) {
	allowed := architectureTable(t)
	actual := moduleImports(t)
	for pkg, imports := range actual {
		may, ok := allowed[pkg]
		if !ok {
			t.Errorf("%s is not in %s's package table: add a row with its role and what it may import", pkg, architecture)
			continue
		}
		for _, imp := range imports {
			if !slices.Contains(may, imp) {
				t.Errorf("%s imports %s, which %s does not allow it: change the code, or the page (and say why)", pkg, imp, architecture)
			}
		}
		for _, imp := range may {
			if !slices.Contains(imports, imp) {
				t.Errorf("%s no longer imports %s: remove it from %s's row in %s", pkg, imp, pkg, architecture)
			}
		}
	}
	for pkg := range allowed {
		if _, ok := actual[pkg]; !ok {
			t.Errorf("%s lists %s, which is not a package of the module", architecture, pkg)
		}
	}
}

// tableRow is a row of the package table: | `path` | role | `a`, `b` |.
var (
	tableRow = regexp.MustCompile("^\\| `((?:cmd|internal|pkg|hack)/[^`]+)` \\|(.*)\\|(.*)\\|\\s*$")
	quoted   = regexp.MustCompile("`([^`]+)`")
)

// architectureTable returns, for each package the page's table lists, the
// packages it may import, as paths relative to the module. The table names
// internal packages without "internal/".
func architectureTable(t *testing.T) map[string][]string {
	t.Helper()
	src, err := os.ReadFile(filepath.Join(repoRoot, architecture))
	if err != nil {
		t.Fatal(err)
	}
	table := map[string][]string{}
	for _, line := range strings.Split(string(src), "\n") {
		m := tableRow.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		if _, dup := table[m[1]]; dup {
			t.Errorf("%s lists %s twice", architecture, m[1])
		}
		may := []string{}
		for _, q := range quoted.FindAllStringSubmatch(m[3], -1) {
			p := q[1]
			if !strings.Contains(p, "/") {
				p = "internal/" + p
			}
			may = append(may, p)
		}
		table[m[1]] = may
	}
	if len(table) == 0 {
		t.Fatalf("no package table found in %s", architecture)
	}
	return table
}

// moduleImports returns, for each package of the root module, the module's
// packages its non-test files import, as paths relative to the module.
func moduleImports(t *testing.T) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	err := filepath.WalkDir(repoRoot, func(path string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(repoRoot, path)
		rel = filepath.ToSlash(rel)
		if rel != "." && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" || d.Name() == "vendor") {
			return filepath.SkipDir
		}
		if rel != "." {
			if _, err := os.Stat(filepath.Join(path, "go.mod")); err == nil {
				return filepath.SkipDir // another module (sandbox)
			}
		}
		p, err := build.ImportDir(path, 0)
		if err != nil {
			var noGo *build.NoGoError
			if errors.As(err, &noGo) {
				return nil
			}
			return err
		}
		imports := []string{}
		for _, imp := range p.Imports {
			if r, ok := strings.CutPrefix(imp, modulePath+"/"); ok {
				imports = append(imports, r)
			}
		}
		out[rel] = imports
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}
