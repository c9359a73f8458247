package server

import (
	"embed"
	"encoding/json"
	"net/http"
	"slices"
	"strings"

	"github.com/kgc-dev/kgc/internal/rules"
)

// UIPath is where kgc serves its web view of the ownership graph.
const UIPath = "/ui"

//go:embed ui/index.html ui/app.js ui/app.css
var uiFiles embed.FS

// uiAssets maps the served names to embedded files and content types.
var uiAssets = map[string]struct{ file, contentType string }{
	UIPath:              {"ui/index.html", "text/html; charset=utf-8"},
	UIPath + "/app.js":  {"ui/app.js", "text/javascript; charset=utf-8"},
	UIPath + "/app.css": {"ui/app.css", "text/css; charset=utf-8"},
}

// uiCSP allows the page to load only what kgc itself serves.
const uiCSP = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// NamespaceCount is one entry of /ui/namespaces.
type NamespaceCount struct {
	Name  string `json:"name"`
	Count int    `json:"count"`
}

// NamespaceList is what /ui/namespaces serves: the namespaces of the nodes
// in the graph (cluster-scoped objects are not counted) and the graph's size.
type NamespaceList struct {
	Namespaces []NamespaceCount `json:"namespaces"`
	Total      int              `json:"total"`
}

func registerUI(mux *http.ServeMux, h *handler) {
	for path, a := range uiAssets {
		body, err := uiFiles.ReadFile(a.file)
		if err != nil {
			panic("kgc: embedded UI asset missing: " + a.file)
		}
		ct := a.contentType
		mux.HandleFunc("GET "+path, func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", ct)
			w.Header().Set("Content-Security-Policy", uiCSP)
			w.Header().Set("X-Content-Type-Options", "nosniff")
			w.Header().Set("Cache-Control", "no-cache")
			_, _ = w.Write(body)
		})
	}
	mux.HandleFunc("GET "+UIPath+"/{$}", func(w http.ResponseWriter, r *http.Request) {
		target := "../ui"
		if r.URL.RawQuery != "" {
			target += "?" + r.URL.RawQuery
		}
		// Relative, so that the view also works behind a path prefix.
		w.Header().Set("Location", target)
		w.WriteHeader(http.StatusMovedPermanently)
	})
	mux.HandleFunc("GET "+UIPath+"/namespaces", h.serveNamespaces)
}

func (h *handler) serveNamespaces(w http.ResponseWriter, _ *http.Request) {
	counts := map[string]int{}
	count := func(id *rules.Identity) bool {
		if id.Namespace != "" {
			counts[id.Namespace]++
		}
		return false
	}
	_, total := h.src.Graph().Nodes(count)
	out := NamespaceList{Namespaces: make([]NamespaceCount, 0, len(counts)), Total: total}
	for ns, n := range counts {
		out.Namespaces = append(out.Namespaces, NamespaceCount{ns, n})
	}
	slices.SortFunc(out.Namespaces, func(a, b NamespaceCount) int { return strings.Compare(a.Name, b.Name) })
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	_ = json.NewEncoder(w).Encode(out)
}
