package server

import (
	"fmt"
	"net/http"
	"slices"

	"k8s.io/apimachinery/pkg/types"

	"github.com/kgc-dev/kgc/internal/graph"
)

// GraphPath is where kube-controller-manager serves its debug graph; kgc
// serves the same document at the same path.
const GraphPath = "/debug/controllers/garbage-collector-controller/graph"

// Source is what the handler reads from a running collector.
type Source interface {
	// Ready returns nil once the collector is useful (monitors synced).
	Ready() error
	// Snapshot copies the graph, or the components containing uids.
	Snapshot(uids ...types.UID) []graph.NodeView
}

// BuildMux returns kgc's HTTP handler.
func BuildMux(src Source) *http.ServeMux {
	mux := http.NewServeMux()
	ok := func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprintln(w, "ok")
	}
	mux.HandleFunc("GET /healthz", ok)
	mux.HandleFunc("GET /livez", ok)
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		if err := src.Ready(); err != nil {
			http.Error(w, "not ready: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		ok(w, r)
	})
	mux.HandleFunc("GET "+GraphPath, func(w http.ResponseWriter, r *http.Request) {
		var uids []types.UID
		for _, u := range r.URL.Query()["uid"] {
			if u != "" && !slices.Contains(uids, types.UID(u)) {
				uids = append(uids, types.UID(u))
			}
		}
		var nodes []graph.NodeView
		if len(uids) > 0 || len(r.URL.Query()["uid"]) == 0 {
			nodes = src.Snapshot(uids...)
		}
		w.Header().Set("Content-Type", "text/vnd.graphviz; charset=utf-8")
		_ = WriteDOT(w, nodes)
	})
	return mux
}
