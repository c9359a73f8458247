package testenv

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"

	"k8s.io/apimachinery/pkg/types"

	"github.com/kgc-dev/kgc/internal/graphapi"
)

// GraphNode returns the node c's graph holds for uid, read through the
// collector's own graph endpoint, or nil when the graph holds none yet.
//
// Tests use it to wait until kgc has observed what they created before they
// act on it: kgc's watches of different resources are not ordered, so a
// dependent created just before its owner is deleted may still be on its
// way when kgc decides about the owner (docs/correctness.md, Known limits).
func (c *Collector) GraphNode(uid types.UID) (*graphapi.Node, error) {
	rec := httptest.NewRecorder()
	c.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/debug/controllers/garbage-collector-controller/graph?format=json&uid="+string(uid), nil))
	switch rec.Code {
	case http.StatusOK:
	case http.StatusNotFound: // not in the graph (yet)
		return nil, nil
	default:
		return nil, fmt.Errorf("graph of %s: %d %s", uid, rec.Code, rec.Body)
	}
	var g graphapi.Graph
	if err := json.Unmarshal(rec.Body.Bytes(), &g); err != nil {
		return nil, fmt.Errorf("graph of %s: %w", uid, err)
	}
	for i := range g.Nodes {
		if g.Nodes[i].UID == uid {
			return &g.Nodes[i], nil
		}
	}
	return nil, nil
}
