package server

import (
	"encoding/json"
	"net/http"

	"github.com/kgc-dev/kgc/internal/shadow"
)

// ShadowPath is where kgc in shadow mode serves its comparison with the
// cluster's own collector.
const ShadowPath = shadow.Path

// ShadowSource is implemented by sources that can run in shadow mode.
type ShadowSource interface {
	// Shadow returns the comparison; nil when kgc is not in shadow mode.
	Shadow() *shadow.Tracker
}

// serveShadow serves the counts and the latest disagreements the query
// selects (?uid=&namespace=&name=&limit=, as the history) as a
// shadow.Page.
func (h *handler) serveShadow(w http.ResponseWriter, r *http.Request) {
	f, limit, err := parseHistoryQuery(r)
	if err != nil {
		writeError(w, err)
		return
	}
	var t *shadow.Tracker
	if s, ok := h.src.(ShadowSource); ok {
		t = s.Shadow()
	}
	if t == nil {
		writeError(w, &httpError{http.StatusNotFound, "kgc is not in shadow mode (kgc run --dry-run): it makes its writes, and its history is at " + HistoryPath})
		return
	}
	p := t.Snapshot(f)
	if limit > 0 && len(p.Disagreements) > limit {
		p.Disagreements = p.Disagreements[len(p.Disagreements)-limit:]
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	_ = json.NewEncoder(w).Encode(p)
}
