package inspect

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/metadata"

	"github.com/kgc-dev/kgc/internal/discovery"
	"github.com/kgc-dev/kgc/internal/graphapi"
	"github.com/kgc-dev/kgc/internal/rules"
)

// Defaults for LiveView's bounds.
const (
	DefaultPageSize   = 500
	DefaultMaxObjects = 200000
)

// LiveView reads object metadata straight from the API server: GET for
// objects and owners, paginated metadata LISTs to find dependents. It never
// writes. It caches what it lists for its lifetime (one command), so a
// View answers from one consistent-enough reading of the cluster.
type LiveView struct {
	mapper    meta.RESTMapper
	client    metadata.Interface
	resources []discovery.Resource
	// PageSize is the LIST page size; MaxObjects bounds how many objects
	// one command lists in total (an error past it, not a silent cut).
	PageSize   int64
	MaxObjects int

	listed  map[listKey][]*Object
	total   int
	byOwner map[types.UID][]*Object
	seen    map[types.UID]bool
	// scopes already indexed: namespace, or allNamespaces.
	indexed map[string]bool
	// Warnings: resources that could not be listed; their objects are
	// missing from the answers.
	Warnings []string
	// unlisted: the same resources, for the stuck report.
	unlisted []graphapi.Resource
	// objects indexed so far, each once.
	objects []*Object
}

type listKey struct {
	gvr schema.GroupVersionResource
	ns  string
}

const allNamespaces = "\x00all"

var errTooMany = errors.New("too many objects")

// NewLiveView returns a View over the API server. mapper resolves kinds
// (wrap it in a shortcut expander for short names); resources are the
// deletable resources whose objects may be dependents.
func NewLiveView(mapper meta.RESTMapper, client metadata.Interface, resources []discovery.Resource) *LiveView {
	rs := slices.Clone(resources)
	slices.SortFunc(rs, func(a, b discovery.Resource) int { return strings.Compare(a.GVR.String(), b.GVR.String()) })
	return &LiveView{
		mapper: mapper, client: client, resources: rs,
		PageSize: DefaultPageSize, MaxObjects: DefaultMaxObjects,
		listed: map[listKey][]*Object{}, byOwner: map[types.UID][]*Object{},
		seen: map[types.UID]bool{}, indexed: map[string]bool{},
	}
}

// KindMapping resolves what a user typed as a kind: a resource (plural,
// singular or short name), optionally with .version.group or .group, or a
// Kind, optionally with .group.
func KindMapping(mapper meta.RESTMapper, arg string) (*meta.RESTMapping, error) {
	var gvk schema.GroupVersionKind
	var err error
	gvr, gr := schema.ParseResourceArg(strings.ToLower(arg))
	if gvr != nil {
		gvk, err = mapper.KindFor(*gvr)
	}
	if gvr == nil || err != nil {
		gvk, err = mapper.KindFor(gr.WithVersion(""))
	}
	if err != nil {
		// Kind.group, case as typed ("ReplicaSet.apps").
		gk := schema.ParseGroupKind(arg)
		if m, kerr := mapper.RESTMapping(gk); kerr == nil {
			return m, nil
		}
		if meta.IsNoMatchError(err) {
			return nil, fmt.Errorf("%w: the server doesn't have a resource type %q", ErrUnknownKind, arg)
		}
		return nil, fmt.Errorf("resolving kind %q: %w", arg, err)
	}
	m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		return nil, fmt.Errorf("resolving kind %q: %w", arg, err)
	}
	return m, nil
}

func fromMeta(m *metav1.PartialObjectMetadata, apiVersion, kind string) *Object {
	return &Object{
		APIVersion: apiVersion, Kind: kind,
		Namespace: m.Namespace, Name: m.Name, UID: m.UID,
		ResourceVersion: m.ResourceVersion,
		Deleting:        m.DeletionTimestamp != nil,
		Finalizers:      slices.Clone(m.Finalizers),

		DeletionTimestamp: m.DeletionTimestamp.DeepCopy(),
		OwnerReferences:   slices.Clone(m.OwnerReferences),
	}
}

// Lookup implements View.
func (v *LiveView) Lookup(ctx context.Context, kind, namespace, name string) (*Object, error) {
	m, err := KindMapping(v.mapper, kind)
	if err != nil {
		return nil, err
	}
	ns := namespace
	if m.Scope.Name() != meta.RESTScopeNameNamespace {
		ns = ""
	}
	obj, err := v.get(ctx, m, ns, name)
	if apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("%s %q %w%s", m.Resource.GroupResource(), name, ErrNotFound, inNamespace(ns))
	}
	if err != nil {
		return nil, fmt.Errorf("getting %s %q: %w", m.Resource.GroupResource(), name, err)
	}
	return obj, nil
}

func (v *LiveView) get(ctx context.Context, m *meta.RESTMapping, ns, name string) (*Object, error) {
	r := v.client.Resource(m.Resource)
	var pm *metav1.PartialObjectMetadata
	var err error
	if ns == "" {
		pm, err = r.Get(ctx, name, metav1.GetOptions{})
	} else {
		pm, err = r.Namespace(ns).Get(ctx, name, metav1.GetOptions{})
	}
	if err != nil {
		return nil, err
	}
	return fromMeta(pm, m.GroupVersionKind.GroupVersion().String(), m.GroupVersionKind.Kind), nil
}

// ResolveOwner implements View: it gathers the facts from the API server
// and classifies them with kgc's rules.
func (v *LiveView) ResolveOwner(ctx context.Context, dep *Object, ref metav1.OwnerReference) (Resolution, error) {
	m, err := rules.OwnerMapping(v.mapper, ref.APIVersion, ref.Kind)
	c, s, why, done := rules.Locate(dep.identity(), &ref, m, err)
	if done {
		return resolution(s, why, ref, "", nil, err), nil
	}
	owner, err := v.get(ctx, m, c.Namespace, ref.Name)
	var f rules.Found
	switch {
	case apierrors.IsNotFound(err):
	case err != nil:
		return Resolution{}, fmt.Errorf("looking up owner %s %q: %w", m.Resource.GroupResource(), ref.Name, err)
	default:
		f = owner.found()
	}
	s, why = rules.Classify(ref.UID, f, nil)
	res := resolution(s, why, ref, c.Namespace, owner, nil)
	if s == rules.Dangling {
		v.elsewhere(ctx, m, ref.UID, c.Namespace, &res)
	}
	return res, nil
}

func inNamespace(ns string) string {
	if ns == "" {
		return ""
	}
	return fmt.Sprintf(" in namespace %q", ns)
}

// elsewhere looks for the UID under other coordinates of the same resource.
func (v *LiveView) elsewhere(ctx context.Context, m *meta.RESTMapping, uid types.UID, ns string, res *Resolution) {
	list, err := v.list(ctx, discovery.Resource{GVR: m.Resource, Kind: m.GroupVersionKind.Kind, Namespaced: m.Scope.Name() == meta.RESTScopeNameNamespace}, allNamespaces)
	if err != nil {
		return
	}
	for _, o := range list {
		if o.UID != uid {
			continue
		}
		if o.Namespace != ns && ns != "" {
			res.ElsewhereNamespace = o.Namespace
			res.Reason += fmt.Sprintf("; the UID belongs to %s in namespace %q, but a namespaced owner must be in its dependent's namespace (kgc records a Warning event OwnerRefInvalidNamespace)", o.Ref(), o.Namespace)
		} else {
			res.Reason += fmt.Sprintf("; the UID belongs to %s, which the reference does not name", o)
		}
		return
	}
}

// list returns every object of r in ns (allNamespaces for all), paginated.
func (v *LiveView) list(ctx context.Context, r discovery.Resource, ns string) ([]*Object, error) {
	if !r.Namespaced {
		ns = ""
	}
	key := listKey{r.GVR, ns}
	if l, ok := v.listed[key]; ok {
		return l, nil
	}
	if ns != allNamespaces && ns != "" {
		if all, ok := v.listed[listKey{r.GVR, allNamespaces}]; ok {
			var out []*Object
			for _, o := range all {
				if o.Namespace == ns {
					out = append(out, o)
				}
			}
			return out, nil
		}
	}
	ri := v.client.Resource(r.GVR)
	var lister interface {
		List(context.Context, metav1.ListOptions) (*metav1.PartialObjectMetadataList, error)
	} = ri
	if ns != "" && ns != allNamespaces {
		lister = ri.Namespace(ns)
	}
	var out []*Object
	opts := metav1.ListOptions{Limit: v.PageSize}
	for {
		l, err := lister.List(ctx, opts)
		if err != nil {
			return nil, fmt.Errorf("listing %s: %w", r.GVR.GroupResource(), err)
		}
		for i := range l.Items {
			out = append(out, fromMeta(&l.Items[i], r.APIVersion(), r.Kind))
		}
		v.total += len(l.Items)
		if v.MaxObjects > 0 && v.total > v.MaxObjects {
			return nil, fmt.Errorf("%w: more than %d objects to list; ask the running kgc instead (--ask-kgc)", errTooMany, v.MaxObjects)
		}
		if l.Continue == "" {
			break
		}
		opts.Continue = l.Continue
	}
	v.listed[key] = out
	return out, nil
}

// index lists every deletable resource in scope (a namespace, "" for the
// cluster-scoped ones, allNamespaces) and indexes objects by owner UID.
func (v *LiveView) index(ctx context.Context, scope string) error {
	if v.indexed[scope] || (scope != "" && v.indexed[allNamespaces]) {
		return nil
	}
	for _, r := range v.resources {
		if r.Namespaced == (scope == "") {
			continue
		}
		l, err := v.list(ctx, r, scope)
		if errors.Is(err, errTooMany) || ctx.Err() != nil {
			return err
		}
		if err != nil {
			// One broken resource (an unavailable aggregated API, a failing
			// conversion webhook) must not hide everything else.
			v.Warnings = append(v.Warnings, err.Error())
			if !slices.ContainsFunc(v.unlisted, func(u graphapi.Resource) bool { return u.Resource == gvrString(r.GVR) }) {
				v.unlisted = append(v.unlisted, graphapi.Resource{Resource: gvrString(r.GVR), Namespaced: r.Namespaced, Error: err.Error()})
			}
			continue
		}
		for _, o := range l {
			if v.seen[o.UID] {
				continue // the same object served by two resources
			}
			v.seen[o.UID] = true
			v.objects = append(v.objects, o)
			for _, ref := range o.OwnerReferences {
				v.byOwner[ref.UID] = append(v.byOwner[ref.UID], o)
			}
		}
	}
	v.indexed[scope] = true
	return nil
}

// Dependents implements View: the dependents of a namespaced owner live in
// its namespace (cluster-scoped objects naming it are listed too, so that
// their invalid references show); those of a cluster-scoped owner anywhere.
func (v *LiveView) Dependents(ctx context.Context, owner *Object) ([]*Object, error) {
	if err := v.index(ctx, ""); err != nil {
		return nil, err
	}
	scope := owner.Namespace
	if scope == "" {
		scope = allNamespaces
	}
	if err := v.index(ctx, scope); err != nil {
		return nil, err
	}
	var out []*Object
	for _, d := range v.byOwner[owner.UID] {
		if owner.Namespace == "" || d.Namespace == "" || d.Namespace == owner.Namespace {
			out = append(out, d)
		}
	}
	sortObjects(out)
	return out, nil
}

func sortObjects(os []*Object) {
	slices.SortFunc(os, func(a, b *Object) int {
		if c := strings.Compare(a.Namespace, b.Namespace); c != 0 {
			return c
		}
		if c := strings.Compare(kindGroup(a.APIVersion, a.Kind), kindGroup(b.APIVersion, b.Kind)); c != 0 {
			return c
		}
		if c := strings.Compare(a.Name, b.Name); c != 0 {
			return c
		}
		return strings.Compare(string(a.UID), string(b.UID))
	})
}

// DeletingSince implements StuckSource: it lists every deletable resource
// in every namespace (bounded by MaxObjects).
func (v *LiveView) DeletingSince(ctx context.Context, t time.Time) ([]*Object, error) {
	if err := v.index(ctx, ""); err != nil {
		return nil, err
	}
	if err := v.index(ctx, allNamespaces); err != nil {
		return nil, err
	}
	return deletingSince(v.objects, t), nil
}

// Unlisted implements StuckSource: the resources whose LIST failed.
func (v *LiveView) Unlisted() []graphapi.Resource { return slices.Clone(v.unlisted) }

// gvrString renders a resource as kgc's monitors name it:
// group/version/resource, version/resource in the core group.
func gvrString(gvr schema.GroupVersionResource) string {
	if gvr.Group == "" {
		return gvr.Version + "/" + gvr.Resource
	}
	return gvr.Group + "/" + gvr.Version + "/" + gvr.Resource
}
