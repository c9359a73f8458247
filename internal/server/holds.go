package server

import (
	"encoding/json"
	"net/http"
	"strconv"

	"github.com/kgc-dev/kgc/internal/breaker"
)

// HoldsPath is where kgc serves what it holds (breaker.Report).
const HoldsPath = breaker.Path

// HoldsSource is implemented by sources that hold deletions (the circuit
// breaker, the restore-signature hold).
type HoldsSource interface {
	// Holds returns the report with at most limit held objects of each
	// kind (negative: all).
	Holds(limit int) breaker.Report
}

// serveHolds serves the Report as JSON; ?limit= bounds the objects
// listed (default 1000).
func (h *handler) serveHolds(w http.ResponseWriter, r *http.Request) {
	limit := 1000
	for k, v := range r.URL.Query() {
		if k != "limit" || len(v) != 1 {
			writeError(w, badRequest("the holds take one parameter, limit, at most once"))
			return
		}
		n, err := strconv.Atoi(v[0])
		if err != nil || n <= 0 {
			writeError(w, badRequest("limit %q: want a positive number of objects", v[0]))
			return
		}
		limit = n
	}
	hs, ok := h.src.(HoldsSource)
	if !ok {
		http.Error(w, "this collector holds nothing", http.StatusNotFound)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(hs.Holds(limit))
}
