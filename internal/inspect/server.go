package inspect

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kgc-dev/kgc/internal/graphapi"
	"github.com/kgc-dev/kgc/internal/rules"
)

// GraphPath is where kgc serves its ownership graph.
const GraphPath = "/debug/controllers/garbage-collector-controller/graph"

// ErrNoJSONGraph is returned (wrapped) when the server does not answer the
// graph endpoint with JSON (a kgc without the JSON form, or not a kgc).
var ErrNoJSONGraph = errors.New("the server does not serve the ownership graph as JSON")

// ErrBadJSONGraph is returned (wrapped) when the graph endpoint answers
// JSON that does not decode as a graph (broken, or cut at maxGraphBytes):
// a fault of the server or of what stands between, where ErrNoJSONGraph
// is an older kgc that cannot answer.
var ErrBadJSONGraph = errors.New("the server's ownership graph JSON does not decode")

// maxGraphBytes bounds one graph response.
const maxGraphBytes = 512 << 20

// ServerView reads a running kgc's ownership graph (graphapi JSON). It sees
// what kgc sees, including placeholders, but not kinds no API serves: kgc
// itself decides those with the API server.
type ServerView struct {
	base   *url.URL
	client *http.Client
	// Mapper, when set, resolves what users type as kinds (short names,
	// resources); without it kinds match by Kind or simple plurals.
	Mapper meta.RESTMapper

	// Fetch, when set, answers graph queries instead of HTTP (kgc itself,
	// reading its own graph for its metrics).
	Fetch func(ctx context.Context, q url.Values) (*graphapi.Graph, error)

	nodes    map[types.UID]*graphapi.Node
	fetched  map[types.UID]bool
	unlisted []graphapi.Resource
	// Synced is false if any graph read was taken before kgc had synced.
	Synced bool
}

// NewGraphView returns a View over graphs fetch answers in the form of the
// graph endpoint (q as its query string).
func NewGraphView(fetch func(ctx context.Context, q url.Values) (*graphapi.Graph, error)) *ServerView {
	return &ServerView{Fetch: fetch, nodes: map[types.UID]*graphapi.Node{}, fetched: map[types.UID]bool{}, Synced: true}
}

// NewServerView returns a View over the kgc serving at base (e.g.
// http://127.0.0.1:10257).
func NewServerView(base string, client *http.Client) (*ServerView, error) {
	u, err := url.Parse(base)
	if err != nil || u.Scheme == "" || u.Host == "" {
		return nil, fmt.Errorf("kgc URL %q: want a URL like https://host:port or http://127.0.0.1:port", base)
	}
	if client == nil {
		client = http.DefaultClient
	}
	return &ServerView{base: u, client: client, nodes: map[types.UID]*graphapi.Node{}, fetched: map[types.UID]bool{}, Synced: true}, nil
}

func (s *ServerView) fetch(ctx context.Context, q url.Values) (*graphapi.Graph, error) {
	if s.Fetch != nil {
		g, err := s.Fetch(ctx, q)
		if err != nil {
			return nil, err
		}
		s.record(g)
		return g, nil
	}
	q.Set("format", "json")
	u, body, err := s.getJSON(ctx, GraphPath, q, maxGraphBytes, ErrNoJSONGraph)
	if err != nil {
		return nil, err
	}
	var g graphapi.Graph
	if err := json.Unmarshal(body, &g); err != nil {
		return nil, fmt.Errorf("%w: decoding %s: %w", ErrBadJSONGraph, u, err)
	}
	s.record(&g)
	return &g, nil
}

// getJSON GETs path with query q from the kgc at s.base and returns the
// URL asked and the body (at most limit bytes) of a 200 JSON answer.
// notJSON is wrapped when kgc answers 200 with something else (an older
// kgc, or a proxy's page).
func (s *ServerView) getJSON(ctx context.Context, path string, q url.Values, limit int64, notJSON error) (string, []byte, error) {
	u := *s.base
	u.Path = strings.TrimSuffix(u.Path, "/") + path
	u.RawQuery = q.Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return "", nil, err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := s.client.Do(req)
	if err != nil {
		return "", nil, fmt.Errorf("asking kgc: %w", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, limit))
	if err != nil {
		return "", nil, fmt.Errorf("reading %s: %w", u.String(), err)
	}
	if resp.StatusCode != http.StatusOK {
		return "", nil, &httpError{url: u.String(), code: resp.StatusCode, status: resp.Status, body: strings.TrimSpace(string(body))}
	}
	if mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type")); mt != "application/json" {
		return "", nil, fmt.Errorf("%w (GET %s answered %q)", notJSON, u.String(), resp.Header.Get("Content-Type"))
	}
	return u.String(), body, nil
}

// httpError is a kgc answer other than 200.
type httpError struct {
	url, status, body string
	code              int
}

func (e *httpError) Error() string { return fmt.Sprintf("GET %s: %s: %s", e.url, e.status, e.body) }

// record keeps what a graph read brought.
func (s *ServerView) record(g *graphapi.Graph) {
	s.unlisted = g.Unlisted
	if !g.Synced {
		s.Synced = false
	}
	for i := range g.Nodes {
		n := g.Nodes[i]
		if old, ok := s.nodes[n.UID]; ok && isPlaceholder(&n) && !isPlaceholder(old) {
			continue
		}
		s.nodes[n.UID] = &n
	}
}

func isPlaceholder(n *graphapi.Node) bool {
	return n.State == graphapi.StatePlaceholder || n.State == graphapi.StateAbsent
}

// component makes sure the connected component of uid has been read.
func (s *ServerView) component(ctx context.Context, uid types.UID) error {
	if s.fetched[uid] {
		return nil
	}
	g, err := s.fetch(ctx, url.Values{"uid": {string(uid)}})
	if err != nil {
		return err
	}
	for _, n := range g.Nodes {
		s.fetched[n.UID] = true
	}
	s.fetched[uid] = true
	return nil
}

func nodeObject(n *graphapi.Node) *Object {
	o := &Object{
		APIVersion: n.APIVersion, Kind: n.Kind, Namespace: n.Namespace, Name: n.Name, UID: n.UID,
		Finalizers: slices.Clone(n.Finalizers), OwnerReferences: slices.Clone(n.OwnerReferences),
		Placeholder: isPlaceholder(n),

		DeletionTimestamp: n.DeletionTimestamp.DeepCopy(),
	}
	switch n.State {
	case graphapi.StateDeleting, graphapi.StateWaitingForDependents, graphapi.StateOrphaning:
		o.Deleting = true
	}
	// A graph taken from a kgc that reports the state but trims finalizers
	// still classifies right.
	if n.State == graphapi.StateWaitingForDependents && !slices.Contains(o.Finalizers, FinalizerForeground) {
		o.Finalizers = append(o.Finalizers, FinalizerForeground)
	}
	if n.State == graphapi.StateOrphaning && !slices.Contains(o.Finalizers, FinalizerOrphan) {
		o.Finalizers = append(o.Finalizers, FinalizerOrphan)
	}
	return o
}

// builtinShortNames are kubectl's short names of built-in resources, for
// --kgc-url without a cluster to ask (with one, the RESTMapper knows them all,
// CRDs' included).
var builtinShortNames = map[string]string{
	"cm": "configmaps", "cs": "componentstatuses", "csr": "certificatesigningrequests",
	"crd": "customresourcedefinitions", "crds": "customresourcedefinitions", "cj": "cronjobs",
	"deploy": "deployments", "ds": "daemonsets", "ep": "endpoints", "ev": "events",
	"hpa": "horizontalpodautoscalers", "ing": "ingresses", "limits": "limitranges",
	"netpol": "networkpolicies", "no": "nodes", "ns": "namespaces",
	"pdb": "poddisruptionbudgets", "po": "pods", "pc": "priorityclasses",
	"pv": "persistentvolumes", "pvc": "persistentvolumeclaims", "quota": "resourcequotas",
	"rc": "replicationcontrollers", "rs": "replicasets", "sa": "serviceaccounts",
	"sc": "storageclasses", "sts": "statefulsets", "svc": "services",
}

// kindMatcher reports whether a node's kind is what the user typed.
func (s *ServerView) kindMatcher(arg string) (func(apiVersion, kind string) bool, error) {
	if s.Mapper != nil {
		m, err := KindMapping(s.Mapper, arg)
		if err != nil {
			return nil, err
		}
		gk := m.GroupVersionKind.GroupKind()
		return func(apiVersion, kind string) bool {
			gv, _ := schema.ParseGroupVersion(apiVersion)
			return gv.Group == gk.Group && kind == gk.Kind
		}, nil
	}
	name, group, _ := strings.Cut(strings.ToLower(arg), ".")
	if i := strings.LastIndex(group, "."); group != "" && i >= 0 && strings.HasPrefix(group, "v") {
		// "deployments.v1.apps": drop the version.
		_, group, _ = strings.Cut(group, ".")
	}
	if full, ok := builtinShortNames[name]; ok && group == "" {
		name = full
	}
	return func(apiVersion, kind string) bool {
		gv, _ := schema.ParseGroupVersion(apiVersion)
		if group != "" && gv.Group != group {
			return false
		}
		k := strings.ToLower(kind)
		plural := k + "s"
		switch {
		case strings.HasSuffix(k, "s"), strings.HasSuffix(k, "x"), strings.HasSuffix(k, "ch"), strings.HasSuffix(k, "sh"):
			plural = k + "es"
		case strings.HasSuffix(k, "y") && !strings.ContainsAny(k[len(k)-2:len(k)-1], "aeiou"):
			plural = k[:len(k)-1] + "ies"
		}
		return name == k || name == plural
	}, nil
}

// Lookup implements View.
func (s *ServerView) Lookup(ctx context.Context, kind, namespace, name string) (*Object, error) {
	match, err := s.kindMatcher(kind)
	if err != nil {
		return nil, err
	}
	find := func(g *graphapi.Graph) []*graphapi.Node {
		var out []*graphapi.Node
		for i := range g.Nodes {
			n := &g.Nodes[i]
			if n.Name == name && !isPlaceholder(n) && match(n.APIVersion, n.Kind) && (n.Namespace == "" || n.Namespace == namespace) {
				out = append(out, n)
			}
		}
		return out
	}
	var found []*graphapi.Node
	g, err := s.fetch(ctx, url.Values{"kind": {kind}, "name": {name}, "namespace": {namespace}})
	switch {
	case errors.Is(err, ErrNoJSONGraph), errors.Is(err, ErrBadJSONGraph):
		return nil, err
	case err == nil:
		found = find(g)
	}
	// Another error may be a filter this kgc does not understand: the
	// unfiltered graph says.
	if len(found) == 0 {
		// The filter may not know this spelling of the kind: look at all.
		if g, err = s.fetch(ctx, url.Values{}); err != nil {
			return nil, err
		}
		found = find(g)
	}
	switch len(found) {
	case 0:
		return nil, fmt.Errorf("%s %q %w in kgc's graph%s", kind, name, ErrNotFound, inNamespace(namespace))
	case 1:
	default:
		// Prefer the namespaced object in the namespace asked for.
		slices.SortFunc(found, func(a, b *graphapi.Node) int { return strings.Compare(b.Namespace, a.Namespace) })
	}
	n := found[0]
	if err := s.component(ctx, n.UID); err != nil {
		return nil, err
	}
	return nodeObject(s.nodes[n.UID]), nil
}

// ResolveOwner implements View: it gathers the facts from kgc's graph
// instead of the API server and classifies them with kgc's rules. The
// graph vouches for an owner it observed at the reference's coordinates;
// for anything else the collector reads the API server before acting, and
// this view says what that read would rest on.
func (s *ServerView) ResolveOwner(ctx context.Context, dep *Object, ref metav1.OwnerReference) (Resolution, error) {
	if _, err := schema.ParseGroupVersion(ref.APIVersion); err != nil {
		return resolution(rules.Invalid, rules.ReasonMalformedAPIVersion, ref, "", nil, nil), nil
	}
	if err := s.component(ctx, ref.UID); err != nil {
		return Resolution{}, err
	}
	n, ok := s.nodes[ref.UID]
	switch {
	case !ok || n.State == graphapi.StateAbsent:
		res := resolution(rules.Dangling, rules.ReasonNotFound, ref, dep.Namespace, nil, nil)
		res.Reason = fmt.Sprintf("kgc knows no live object with uid %s (%s %q does not exist)", ref.UID, kindGroup(ref.APIVersion, ref.Kind), ref.Name)
		return res, nil
	case n.State == graphapi.StatePlaceholder && s.Mapper != nil:
		// The graph has never observed the owner: kgc maps its kind
		// before looking it up, and keeps the dependent if none is served.
		m, err := rules.OwnerMapping(s.Mapper, ref.APIVersion, ref.Kind)
		if _, st, why, done := rules.Locate(dep.identity(), &ref, m, err); done {
			return resolution(st, why, ref, "", nil, err), nil
		}
		fallthrough
	case n.State == graphapi.StatePlaceholder:
		res := resolution(rules.Dangling, rules.ReasonNotFound, ref, dep.Namespace, nil, nil)
		res.Reason = fmt.Sprintf("kgc has never observed %s %q (a placeholder): it looks the owner up before acting, and treats it as dangling if it is not there (or keeps the object if no API serves the kind)", kindGroup(ref.APIVersion, ref.Kind), ref.Name)
		return res, nil
	}
	// The observed object's scope is its kind's scope.
	if _, st, why, done := rules.Scope(dep.identity(), n.Namespace != ""); done {
		return resolution(st, why, ref, "", nil, nil), nil
	}
	owner := nodeObject(n)
	if !rules.Matches(owner.identity(), &ref, dep.Namespace) {
		// The UID is at other coordinates than the reference names:
		// nothing with that UID is at the reference's.
		st, why := rules.Classify(ref.UID, rules.Found{}, nil)
		res := resolution(st, why, ref, dep.Namespace, nil, nil)
		res.Reason = fmt.Sprintf("no %s named %q%s has uid %s", kindGroup(ref.APIVersion, ref.Kind), ref.Name, inNamespace(dep.Namespace), ref.UID)
		if n.Namespace != "" && n.Namespace != dep.Namespace {
			res.ElsewhereNamespace = n.Namespace
			res.Reason += fmt.Sprintf("; the UID belongs to %s in namespace %q, but a namespaced owner must be in its dependent's namespace (kgc records a Warning event OwnerRefInvalidNamespace)", owner.Ref(), n.Namespace)
		} else {
			res.Reason += fmt.Sprintf("; the UID belongs to %s, which the reference does not name", owner)
		}
		return res, nil
	}
	st, why := rules.Classify(ref.UID, owner.found(), nil)
	return resolution(st, why, ref, dep.Namespace, owner, nil), nil
}

// Dependents implements View.
func (s *ServerView) Dependents(ctx context.Context, owner *Object) ([]*Object, error) {
	if err := s.component(ctx, owner.UID); err != nil {
		return nil, err
	}
	n, ok := s.nodes[owner.UID]
	if !ok {
		return nil, nil
	}
	var out []*Object
	for _, uid := range n.Dependents {
		if err := s.component(ctx, uid); err != nil {
			return nil, err
		}
		if d, ok := s.nodes[uid]; ok && !isPlaceholder(d) {
			out = append(out, nodeObject(d))
		}
	}
	sortObjects(out)
	return out, nil
}

// DeletingSince implements StuckSource: one graph read of the components
// of the objects deleting since t (a kgc that does not know the filter
// answers with its whole graph, which holds them too).
func (s *ServerView) DeletingSince(ctx context.Context, t time.Time) ([]*Object, error) {
	d := max(time.Since(t), 0)
	g, err := s.fetch(ctx, url.Values{graphapi.DeletingForQuery: {d.String()}})
	if err != nil {
		return nil, err
	}
	// Whole components: nothing more to read for any of these nodes.
	objs := make([]*Object, 0, len(g.Nodes))
	for i := range g.Nodes {
		s.fetched[g.Nodes[i].UID] = true
		if n := s.nodes[g.Nodes[i].UID]; n != nil && !isPlaceholder(n) {
			objs = append(objs, nodeObject(n))
		}
	}
	return deletingSince(objs, t), nil
}

// Unlisted implements StuckSource: the resources kgc has never listed, as
// of its last graph read.
func (s *ServerView) Unlisted() []graphapi.Resource { return slices.Clone(s.unlisted) }
