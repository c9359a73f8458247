package server

import (
	"encoding/json"
	"io/fs"
	"net/http"
	"regexp"
	"strings"
	"testing"

	"github.com/kgc-dev/kgc/internal/graph"
)

func TestUIServesPageAndAssets(t *testing.T) {
	mux := BuildMux(&fakeSource{g: richGraph(t)}, Options{})
	for _, tc := range []struct{ path, ct, contains string }{
		{"/ui", "text/html; charset=utf-8", `<script src="ui/app.js">`},
		{"/ui/app.js", "text/javascript; charset=utf-8", "garbage-collector-controller/graph"},
		{"/ui/app.css", "text/css; charset=utf-8", ".state-waitingForDependents"},
	} {
		res, body := serve(t, mux, http.MethodGet, tc.path)
		if res.StatusCode != http.StatusOK {
			t.Errorf("%s: status %d", tc.path, res.StatusCode)
			continue
		}
		if got := res.Header.Get("Content-Type"); got != tc.ct {
			t.Errorf("%s: Content-Type %q, want %q", tc.path, got, tc.ct)
		}
		if csp := res.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'none'") || !strings.Contains(csp, "connect-src 'self'") {
			t.Errorf("%s: Content-Security-Policy %q", tc.path, csp)
		}
		if res.Header.Get("X-Content-Type-Options") != "nosniff" {
			t.Errorf("%s: no nosniff", tc.path)
		}
		if !strings.Contains(body, tc.contains) {
			t.Errorf("%s does not contain %q", tc.path, tc.contains)
		}
	}
	res, _ := serve(t, mux, http.MethodGet, "/ui/?namespace=x")
	if res.StatusCode != http.StatusMovedPermanently || res.Header.Get("Location") != "../ui?namespace=x" {
		t.Errorf("/ui/ = %d to %q, want a redirect to ../ui keeping the query", res.StatusCode, res.Header.Get("Location"))
	}
	for _, path := range []string{"/ui/nope.js", "/ui/app.js/x"} {
		if res, _ := serve(t, mux, http.MethodGet, path); res.StatusCode != http.StatusNotFound {
			t.Errorf("%s: status %d, want 404", path, res.StatusCode)
		}
	}
}

// The assets are self-contained: no CDN, no fonts or scripts from elsewhere.
func TestUIAssetsHaveNoExternalURLs(t *testing.T) {
	url := regexp.MustCompile(`(?i)(?:https?:)?//[a-z0-9.-]+\.[a-z]{2,}`)
	imports := regexp.MustCompile(`(?i)@import|\burl\(\s*['"]?(?:https?:|//)`)
	n := 0
	err := fs.WalkDir(uiFiles, "ui", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		n++
		b, err := uiFiles.ReadFile(path)
		if err != nil {
			return err
		}
		if m := url.FindAllString(string(b), -1); len(m) > 0 {
			t.Errorf("%s references other hosts: %q", path, m)
		}
		if m := imports.FindAllString(string(b), -1); len(m) > 0 {
			t.Errorf("%s imports external resources: %q", path, m)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n != len(uiAssets) {
		t.Errorf("%d embedded files, %d served", n, len(uiAssets))
	}
	// Every asset the page names is served (relative to /ui).
	page, err := uiFiles.ReadFile("ui/index.html")
	if err != nil {
		t.Fatal(err)
	}
	refs := regexp.MustCompile(`(?:src|href)="([^"]*)"`).FindAllStringSubmatch(string(page), -1)
	if len(refs) < 3 {
		t.Fatalf("index.html names %d assets", len(refs))
	}
	for _, m := range refs {
		if strings.HasPrefix(m[1], "data:") {
			continue
		}
		if _, ok := uiAssets["/"+m[1]]; !ok {
			t.Errorf("index.html refers to %s, which is not served", m[1])
		}
	}
}

func TestUINamespaces(t *testing.T) {
	res, body := serve(t, BuildMux(&fakeSource{g: richGraph(t)}, Options{}), http.MethodGet, "/ui/namespaces")
	if res.StatusCode != http.StatusOK || res.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("%d %s", res.StatusCode, res.Header.Get("Content-Type"))
	}
	var got NamespaceList
	if err := json.Unmarshal([]byte(body), &got); err != nil {
		t.Fatal(err)
	}
	want := NamespaceList{Total: 10, Namespaces: []NamespaceCount{{"default", 6}, {"other", 3}}}
	if got.Total != want.Total || len(got.Namespaces) != 2 || got.Namespaces[0] != want.Namespaces[0] || got.Namespaces[1] != want.Namespaces[1] {
		t.Errorf("%+v, want %+v", got, want)
	}
	res, body = serve(t, BuildMux(&fakeSource{g: graph.New()}, Options{}), http.MethodGet, "/ui/namespaces")
	if res.StatusCode != http.StatusOK || strings.TrimSpace(body) != `{"namespaces":[],"total":0}` {
		t.Errorf("empty graph: %d %s", res.StatusCode, body)
	}
}

// The web view's stuck filter asks the graph endpoint for the stuck
// objects' components (the query TestStuckReportFromGraph checks).
func TestUIStuckFilter(t *testing.T) {
	mux := BuildMux(&fakeSource{g: richGraph(t)}, Options{})
	_, page := serve(t, mux, http.MethodGet, "/ui")
	_, js := serve(t, mux, http.MethodGet, "/ui/app.js")
	if !strings.Contains(page, `id="stuck"`) || !strings.Contains(js, "'&deletingFor=' + STUCK_AFTER_S + 's'") {
		t.Errorf("the web view has no stuck filter on ?deletingFor=")
	}
	if res, _ := serve(t, mux, http.MethodGet, GraphPath+"?format=json&deletingFor=300s"); res.StatusCode != http.StatusOK {
		t.Errorf("?deletingFor=300s: status %d", res.StatusCode)
	}
}
