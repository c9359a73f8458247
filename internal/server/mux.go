package server

import (
	"fmt"
	"io"
	"net/http"
	"net/http/pprof"
	"strings"

	"github.com/kgc-dev/kgc/internal/graph"
)

// GraphPath is where kube-controller-manager serves its debug graph; kgc
// serves the same document at the same path.
const GraphPath = "/debug/controllers/garbage-collector-controller/graph"

// Source is what the handler reads from a running collector.
type Source interface {
	// Ready returns nil once the collector is useful (monitors synced).
	Ready() error
	// Graph returns the collector's graph. The handler reads it only through
	// its display readers (graph.Graph.Nodes, NodesByUID, Components), which
	// hold the graph's lock for at most graph.ViewBatch nodes at a time.
	Graph() *graph.Graph
}

// Check is one line of /readyz?verbose.
type Check struct {
	Name string
	Err  error // nil: passing
	// Informational checks are shown but do not decide readiness.
	Informational bool
}

// Checker is implemented by sources that can detail their readiness.
type Checker interface {
	Checks() []Check
}

// Options adds optional endpoints.
type Options struct {
	// Metrics serves /metrics when set.
	Metrics http.Handler
	// Profiling serves /debug/pprof/.
	Profiling bool
}

type handler struct {
	src Source
}

// BuildMux returns kgc's HTTP handler.
func BuildMux(src Source, opts Options) *http.ServeMux {
	mux := http.NewServeMux()
	if opts.Metrics != nil {
		mux.Handle("GET /metrics", opts.Metrics)
	}
	if opts.Profiling {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	ok := func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprintln(w, "ok")
	}
	mux.HandleFunc("GET /healthz", ok)
	mux.HandleFunc("GET /livez", ok)
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		readyErr := src.Ready()
		if _, verbose := r.URL.Query()["verbose"]; verbose {
			writeVerbose(w, readyErr, src)
			return
		}
		if readyErr != nil {
			http.Error(w, "not ready: "+readyErr.Error(), http.StatusServiceUnavailable)
			return
		}
		ok(w, r)
	})
	h := &handler{src: src}
	mux.HandleFunc("GET "+GraphPath, h.serveGraph)
	mux.HandleFunc("GET "+HistoryPath, h.serveHistory)
	mux.HandleFunc("GET "+HoldsPath, h.serveHolds)
	mux.HandleFunc("GET "+ShadowPath, h.serveShadow)
	registerUI(mux, h)
	return mux
}

// writeVerbose writes readiness the way Kubernetes components do: one
// [+]/[-] line per check, then the verdict.
func writeVerbose(w http.ResponseWriter, readyErr error, src Source) {
	var b strings.Builder
	if readyErr != nil {
		fmt.Fprintf(&b, "[-]synced failed: %v\n", readyErr)
	} else {
		b.WriteString("[+]synced ok\n")
	}
	if c, ok := src.(Checker); ok {
		for _, check := range c.Checks() {
			suffix := ""
			if check.Informational {
				suffix = " (informational)"
			}
			if check.Err != nil {
				fmt.Fprintf(&b, "[-]%s failed: %v%s\n", check.Name, check.Err, suffix)
			} else {
				fmt.Fprintf(&b, "[+]%s ok%s\n", check.Name, suffix)
			}
		}
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	if readyErr != nil {
		w.WriteHeader(http.StatusServiceUnavailable)
		b.WriteString("readyz check failed\n")
	} else {
		b.WriteString("readyz check passed\n")
	}
	_, _ = io.WriteString(w, b.String())
}
