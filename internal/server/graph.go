package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"mime"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kgc-dev/kgc/internal/graph"
	"github.com/kgc-dev/kgc/internal/graphapi"
	"github.com/kgc-dev/kgc/internal/rules"
)

// graphQuery is a parsed request for the graph endpoint.
type graphQuery struct {
	json bool
	uids []types.UID
	// object is set for ?kind=&name=[&namespace=][&apiVersion=].
	object *objectRef
	// namespace is set for a namespace view (no kind/name).
	namespace  string
	inNS       bool
	rawUIDOnly bool // only ?uid= (possibly all empty): upstream's query
	// deletingFor is set for ?deletingFor=DURATION: the components of the
	// objects deleting for at least that long (stuck deletions).
	deletingFor *time.Duration
}

type objectRef struct {
	group, apiVersion, kind, namespace, name string
}

func (o *objectRef) String() string {
	s := o.kind
	if o.apiVersion != "" {
		s += "." + o.apiVersion
	}
	if o.namespace != "" {
		return s + " " + o.namespace + "/" + o.name
	}
	return s + " " + o.name
}

func (o *objectRef) matches(id *rules.Identity) bool {
	if id.Name != o.name || id.Namespace != o.namespace || !strings.EqualFold(id.Kind, o.kind) {
		return false
	}
	return o.apiVersion == "" || id.GroupKind().Group == o.group
}

type httpError struct {
	code int
	msg  string
}

func (e *httpError) Error() string { return e.msg }

func badRequest(format string, args ...any) error {
	return &httpError{http.StatusBadRequest, fmt.Sprintf(format, args...)}
}

func parseGraphQuery(r *http.Request) (*graphQuery, error) {
	return parseGraphValues(r.URL.Query(), r.Header.Values("Accept"))
}

func parseGraphValues(q url.Values, accept []string) (*graphQuery, error) {
	gq := &graphQuery{}
	switch f := q.Get("format"); f {
	case "json":
		gq.json = true
	case "dot":
	case "":
		gq.json = acceptsJSON(accept)
	default:
		return nil, badRequest("unknown format %q: use format=dot or format=json", f)
	}
	for _, u := range q["uid"] {
		if u != "" && !slices.Contains(gq.uids, types.UID(u)) {
			gq.uids = append(gq.uids, types.UID(u))
		}
	}
	kind, name, apiVersion := q.Get("kind"), q.Get("name"), q.Get("apiVersion")
	ns, hasNS := q["namespace"]
	if v, ok := q[graphapi.DeletingForQuery]; ok {
		d, err := time.ParseDuration(v[0])
		if err != nil || d < 0 || len(v) != 1 {
			return nil, badRequest("%s wants one non-negative duration, like 5m", graphapi.DeletingForQuery)
		}
		if kind != "" || hasNS || len(q["uid"]) > 0 {
			return nil, badRequest("%s selects the stuck objects' components: give no uid, kind, name or namespace with it", graphapi.DeletingForQuery)
		}
		gq.deletingFor = &d
		return gq, nil
	}
	switch {
	case (kind == "") != (name == ""):
		return nil, badRequest("kind and name go together: give both to select an object (and namespace for a namespaced one)")
	case apiVersion != "" && kind == "":
		return nil, badRequest("apiVersion selects an object: give kind and name too")
	case kind != "":
		gv, err := schema.ParseGroupVersion(apiVersion)
		if err != nil {
			return nil, badRequest("bad apiVersion %q: %v", apiVersion, err)
		}
		gq.object = &objectRef{group: gv.Group, apiVersion: apiVersion, kind: kind, name: name, namespace: q.Get("namespace")}
	case hasNS:
		if len(q["uid"]) > 0 {
			return nil, badRequest("namespace filters the whole graph; uid selects objects' components: give one or the other")
		}
		if len(ns) != 1 || ns[0] == "" {
			return nil, badRequest("namespace needs exactly one non-empty value")
		}
		gq.namespace, gq.inNS = ns[0], true
	}
	gq.rawUIDOnly = gq.object == nil && !gq.inNS && len(q["uid"]) > 0
	return gq, nil
}

// acceptsJSON reports whether an Accept header prefers JSON to anything else.
func acceptsJSON(values []string) bool {
	for _, v := range values {
		for _, part := range strings.Split(v, ",") {
			mt, _, err := mime.ParseMediaType(strings.TrimSpace(part))
			if err != nil {
				continue
			}
			switch mt {
			case "application/json":
				return true
			case "text/vnd.graphviz", "text/plain", "*/*", "text/*":
				return false
			}
		}
	}
	return false
}

// selectNodes answers q from g through its batched readers: the whole
// graph, a namespace with its direct neighbours, or the components of the
// selected objects.
func selectNodes(g *graph.Graph, q *graphQuery) (nodes []graph.Node, total int, err error) {
	switch {
	case q.rawUIDOnly && len(q.uids) == 0:
		return nil, g.Len(), nil // upstream: ?uid= with no value selects nothing
	case q.deletingFor != nil:
		uids, _ := g.DeletingSince(time.Now().Add(-*q.deletingFor))
		if len(uids) == 0 {
			return nil, g.Len(), nil
		}
		return g.Components(uids), g.Len(), nil
	case q.inNS:
		ns := q.namespace
		nodes, total = g.Nodes(func(id *rules.Identity) bool { return id.Namespace == ns })
		have := make(map[types.UID]bool, len(nodes))
		for i := range nodes {
			have[nodes[i].Identity.UID] = true
		}
		var extra []types.UID
		add := func(u types.UID) {
			if !have[u] {
				have[u] = true
				extra = append(extra, u)
			}
		}
		for i := range nodes {
			for _, ref := range nodes[i].OwnerReferences {
				add(ref.UID)
			}
			for _, d := range nodes[i].Dependents {
				add(d)
			}
		}
		if len(extra) > 0 {
			nodes = append(nodes, g.NodesByUID(extra)...)
			slices.SortFunc(nodes, func(a, b graph.Node) int { return strings.Compare(string(a.Identity.UID), string(b.Identity.UID)) })
		}
		return nodes, total, nil
	case q.object != nil || len(q.uids) > 0:
		roots := slices.Clone(q.uids)
		var missing []string
		if len(q.uids) > 0 {
			found := g.NodesByUID(q.uids)
			if len(found) < len(q.uids) {
				have := map[types.UID]bool{}
				for i := range found {
					have[found[i].Identity.UID] = true
				}
				for _, u := range q.uids {
					if !have[u] {
						missing = append(missing, "uid "+string(u))
					}
				}
			}
		}
		if q.object != nil {
			o := q.object
			matches, _ := g.Nodes(o.matches)
			if len(matches) == 0 {
				missing = append(missing, o.String())
			}
			for i := range matches {
				roots = append(roots, matches[i].Identity.UID)
			}
		}
		// Upstream serves ?uid= of unknown objects in DOT as if they were not
		// asked for; keep that, and report unknown objects everywhere else.
		if len(missing) > 0 && !(q.rawUIDOnly && !q.json) {
			return nil, 0, &httpError{http.StatusNotFound, "not in kgc's graph: " + strings.Join(missing, ", ") +
				" (kgc tracks objects of deletable resources and the owners they reference)"}
		}
		return g.Components(roots), g.Len(), nil
	default:
		nodes, total = g.Nodes(nil)
		return nodes, total, nil
	}
}

func (h *handler) serveGraph(w http.ResponseWriter, r *http.Request) {
	q, err := parseGraphQuery(r)
	if err != nil {
		writeError(w, err)
		return
	}
	nodes, total, err := selectNodes(h.src.Graph(), q)
	if err != nil {
		writeError(w, err)
		return
	}
	if !q.json {
		w.Header().Set("Content-Type", "text/vnd.graphviz; charset=utf-8")
		_ = WriteDOT(w, nodes)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	g := toAPI(nodes, total, h.src.Ready() == nil)
	g.Unlisted = unlisted(h.src)
	_ = json.NewEncoder(w).Encode(g)
}

// Unlister is implemented by sources that know which monitored resources
// have never been listed completely.
type Unlister interface {
	Unlisted() []graphapi.Resource
}

func unlisted(src Source) []graphapi.Resource {
	if u, ok := src.(Unlister); ok {
		return u.Unlisted()
	}
	return nil
}

// Fetcher answers queries of the graph endpoint (its query string) from
// src in-process, as the endpoint answers them in JSON: the View kgc
// builds over its own graph (inspect.NewGraphView) for its stuck metrics.
func Fetcher(src Source) func(context.Context, url.Values) (*graphapi.Graph, error) {
	return func(_ context.Context, v url.Values) (*graphapi.Graph, error) {
		q, err := parseGraphValues(v, nil)
		if err != nil {
			return nil, err
		}
		nodes, total, err := selectNodes(src.Graph(), q)
		if err != nil {
			return nil, err
		}
		g := toAPI(nodes, total, src.Ready() == nil)
		g.Unlisted = unlisted(src)
		return &g, nil
	}
}

func writeError(w http.ResponseWriter, err error) {
	code := http.StatusInternalServerError
	var he *httpError
	if errors.As(err, &he) {
		code = he.code
	}
	http.Error(w, err.Error(), code)
}

// State classifies a node for display; see the graphapi.State* constants.
func State(n *graph.Node) string {
	switch {
	case n.Virtual && n.Absent:
		return graphapi.StateAbsent
	case n.Virtual:
		return graphapi.StatePlaceholder
	case n.DeletingDependents():
		return graphapi.StateWaitingForDependents
	case n.Orphaning():
		return graphapi.StateOrphaning
	case n.Deleting:
		return graphapi.StateDeleting
	default:
		return graphapi.StateLive
	}
}

// toAPI converts nodes to the JSON wire format.
func toAPI(nodes []graph.Node, total int, synced bool) graphapi.Graph {
	out := graphapi.Graph{Nodes: make([]graphapi.Node, len(nodes)), Total: total, Synced: synced}
	for i := range nodes {
		n := &nodes[i]
		out.Nodes[i] = graphapi.Node{
			UID:             n.Identity.UID,
			APIVersion:      n.Identity.APIVersion,
			Kind:            n.Identity.Kind,
			Namespace:       n.Identity.Namespace,
			Name:            n.Identity.Name,
			State:           State(n),
			Finalizers:      n.Finalizers,
			OwnerReferences: n.OwnerReferences,
			Dependents:      n.Dependents,

			DeletionTimestamp: n.DeletionTimestamp,
		}
	}
	return out
}
