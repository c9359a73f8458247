package server

import (
	"encoding/json"
	"net/http"
	"strconv"

	"k8s.io/apimachinery/pkg/types"

	"github.com/kgc-dev/kgc/internal/history"
)

// HistoryPath is where kgc serves the record of its writes.
const HistoryPath = history.Path

// HistorySource is implemented by sources that keep a write history.
type HistorySource interface {
	// History returns the ring of records; nil when the history is off.
	History() *history.Ring
}

// historyParams are the query parameters the history endpoint takes.
var historyParams = map[string]bool{"uid": true, "namespace": true, "name": true, "limit": true}

// parseHistoryQuery reads ?uid=&namespace=&name=&limit=: each at most
// once; limit a positive number (the newest records).
func parseHistoryQuery(r *http.Request) (f history.Filter, limit int, err error) {
	q := r.URL.Query()
	for k, v := range q {
		if !historyParams[k] {
			return f, 0, badRequest("unknown parameter %q: the history takes uid, namespace, name and limit", k)
		}
		if len(v) != 1 {
			return f, 0, badRequest("%s given %d times: give it at most once", k, len(v))
		}
	}
	f = history.Filter{UID: types.UID(q.Get("uid")), Namespace: q.Get("namespace"), Name: q.Get("name")}
	if s, ok := q["limit"]; ok {
		n, err := strconv.Atoi(s[0])
		if err != nil || n <= 0 {
			return f, 0, badRequest("limit %q: want a positive number of records", s[0])
		}
		limit = n
	}
	return f, limit, nil
}

// serveHistory serves the records the query selects, oldest first, as a
// history.Page.
func (h *handler) serveHistory(w http.ResponseWriter, r *http.Request) {
	f, limit, err := parseHistoryQuery(r)
	if err != nil {
		writeError(w, err)
		return
	}
	var ring *history.Ring
	if hs, ok := h.src.(HistorySource); ok {
		ring = hs.History()
	}
	if ring == nil {
		writeError(w, &httpError{http.StatusNotFound, "kgc keeps no write history (--write-history-size=0); every write is still logged"})
		return
	}
	recs, dropped := ring.Query(f)
	if limit > 0 && len(recs) > limit {
		recs = recs[len(recs)-limit:]
	}
	for i := range recs {
		recs[i] = recs[i].Summarized()
	}
	if recs == nil {
		recs = []history.Record{}
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	_ = json.NewEncoder(w).Encode(history.Page{Records: recs, Size: ring.Size(), Dropped: dropped})
}
