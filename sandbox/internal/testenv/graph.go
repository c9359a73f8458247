package testenv

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/metadata"

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

// ObservedDependent reports whether no decision of c about owner can miss
// the dependent named name (uid) of r: c's graph holds it with its
// reference to owner, or the API server says it no longer has one (it is
// gone, or the reference was removed). When it reports false, it says what
// is missing.
//
// A test that asserts the order a Foreground or Orphan deletion promises
// waits for this before deleting the owner: kgc's watches of different
// resources are not ordered, and the order holds only for the dependents
// kgc has seen when it decides (docs/correctness.md, Known limits).
func (c *Collector) ObservedDependent(ctx context.Context, r metadata.ResourceInterface, name string, uid, owner types.UID) (bool, string, error) {
	refersToOwner := func(refs []metav1.OwnerReference) bool {
		return slices.ContainsFunc(refs, func(ref metav1.OwnerReference) bool { return ref.UID == owner })
	}
	n, err := c.GraphNode(uid)
	if err != nil {
		return false, "", err
	}
	if n != nil && refersToOwner(n.OwnerReferences) {
		return true, "", nil
	}
	m, err := GetMeta(ctx, r, name, uid)
	if err != nil {
		return false, "", err
	}
	if m != nil && refersToOwner(m.OwnerReferences) {
		return false, fmt.Sprintf("%s (uid %s) references %s, and kgc's graph does not have that yet (graph node: %+v)", name, uid, owner, n), nil
	}
	return true, "", nil
}
