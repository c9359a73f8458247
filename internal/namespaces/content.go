package namespaces

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/kgc-dev/kgc/internal/history"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/klog/v2"
)

// podsGVR is emptied first, alone: since KEP-5080 (OrderedNamespaceDeletion,
// GA and locked on in v1.34) kube-controller-manager deletes a namespace's
// Pods, and waits until none is left, before anything else, so that a Pod
// never outlives the NetworkPolicies, Secrets and ServiceAccounts it runs
// with.
var podsGVR = schema.GroupVersionResource{Version: "v1", Resource: "pods"}

// resource is one namespaced resource to empty, with the verbs that say how.
type resource struct {
	gvr              schema.GroupVersionResource
	kind             string
	deleteCollection bool
	list             bool
}

// namespacedResources picks, from discovery's preferred namespaced
// resources, those the namespace lifecycle empties: every namespaced
// resource with the delete verb, subresources excluded, and kgc's ignored
// resources included (a namespace's Events go with it). The lists come from
// ServerPreferredNamespacedResources; the Namespaced check is repeated
// because it is what keeps every write inside the namespace. Group versions
// that do not parse are reported and skipped.
func namespacedResources(lists []*metav1.APIResourceList) ([]resource, error) {
	var out []resource
	var errs []error
	seen := map[schema.GroupVersionResource]bool{}
	for _, l := range lists {
		if l == nil {
			continue
		}
		gv, err := schema.ParseGroupVersion(l.GroupVersion)
		if err != nil {
			errs = append(errs, fmt.Errorf("couldn't parse the group version %q: %w", l.GroupVersion, err))
			continue
		}
		for _, r := range l.APIResources {
			if !r.Namespaced || strings.Contains(r.Name, "/") || !slices.Contains(r.Verbs, "delete") {
				continue
			}
			gvr := gv.WithResource(r.Name)
			if seen[gvr] {
				continue
			}
			seen[gvr] = true
			out = append(out, resource{
				gvr:              gvr,
				kind:             r.Kind,
				deleteCollection: slices.Contains(r.Verbs, "deletecollection"),
				list:             slices.Contains(r.Verbs, "list"),
			})
		}
	}
	slices.SortFunc(out, func(a, b resource) int { return strings.Compare(a.gvr.String(), b.gvr.String()) })
	return out, errors.Join(errs...)
}

// result is what emptying one resource left.
type result struct {
	remaining  int
	finalizers map[string]int
	err        error
}

// notServed reports whether err says the resource (or the verb) is not
// served: a resource that went away between discovery and the call (a CRD
// deleted, whose group discovery may keep for a while) has nothing left in
// the namespace.
func notServed(err error) bool {
	return apierrors.IsNotFound(err) || apierrors.IsMethodNotSupported(err)
}

// emptyResource deletes every object of r in namespace ns and then reads,
// with a quorum LIST, what is left.
//
// Skipping: a resource kgc's graph shows empty in ns, with a complete count
// (Config.Observed), is not deleted: its quorum LIST alone confirms it is
// empty. Should that LIST find anything (an object the watch has not
// delivered yet), the resource is deleted and listed as any other. The
// conclusion "nothing is left" always rests on the quorum LIST, never on
// the graph.
//
// Deletion: one DELETECOLLECTION where r serves it; otherwise the objects a
// quorum LIST returns, one DELETE each, guarded by the object's UID (an
// object recreated under the same name in between is not deleted on the
// strength of the old one's listing — it is found by the next pass).
// Objects already deleting are not deleted again. Every call addresses the
// namespace's path: never another namespace's objects, never a
// cluster-scoped resource (namespacedResources).
//
// What is left, and why: objects held by finalizers (counted per
// finalizer; kgc waits for whoever owns the finalizer), Pods terminating
// gracefully (waited for), and anything else — an object without
// finalizers that survived its deletion — is an error, as upstream reports
// it ("unexpected items still remain").
func (c *Controller) emptyResource(ctx context.Context, r resource, ns string) result {
	if r.list && c.cfg.Observed != nil {
		if n, complete := c.cfg.Observed(ns, r.gvr, r.kind); complete && n == 0 {
			// The graph shows the resource empty in ns: confirm with the
			// quorum LIST alone, and delete after all if it finds anything.
			items, err := c.api.ListInNamespace(ctx, r.gvr, ns)
			switch {
			case notServed(err):
				return result{}
			case err != nil:
				return result{err: err}
			case len(items) == 0:
				c.cfg.Metrics.NamespaceResourceSkipped()
				return result{}
			}
		}
	}
	return c.deleteAndConfirm(ctx, r, ns)
}

// deleteAndConfirm is emptyResource without the graph's help.
func (c *Controller) deleteAndConfirm(ctx context.Context, r resource, ns string) result {
	if r.deleteCollection {
		err := c.api.DeleteCollection(ctx, r.gvr, ns)
		c.wrote(ctx, history.Record{
			Operation: history.OpDeleteCollection, Policy: string(metav1.DeletePropagationBackground),
			Object: history.Object{APIVersion: r.gvr.GroupVersion().String(), Kind: r.kind, Namespace: ns},
			Reason: namespaceDeleting(ns) + ": every object of this resource in it is deleted at once",
		}, err)
		switch {
		case err == nil:
		case notServed(err):
			r.deleteCollection = false
		case apierrors.IsForbidden(err):
			// kgc's role grants delete but not deletecollection on this
			// resource (deploy/'s ClusterRole for the collector alone,
			// or a webhook refusing bulk deletions): the same objects
			// go one by one, each DELETE authorized on its own.
			// kube-controller-manager has no such fallback (it reports
			// the 403); docs/semantics.md.
			klog.FromContext(ctx).V(2).Info("DELETECOLLECTION forbidden; deleting one by one", logKeyNamespace, ns, "resource", r.gvr.String(), "err", err.Error())
			r.deleteCollection = false
		default:
			return result{err: err}
		}
	}
	if !r.list {
		// Neither listable nor confirmable: kube-controller-manager skips
		// such a resource too (it has no way to know what is in it).
		return result{}
	}
	if !r.deleteCollection {
		items, err := c.api.ListInNamespace(ctx, r.gvr, ns)
		if notServed(err) {
			return result{}
		}
		if err != nil {
			return result{err: err}
		}
		for i := range items {
			it := &items[i]
			if it.Namespace != ns || it.DeletionTimestamp != nil {
				continue
			}
			err := c.api.DeleteInNamespace(ctx, r.gvr, ns, it.Name, it.UID)
			c.wrote(ctx, history.Record{
				Operation: history.OpDelete, Policy: string(metav1.DeletePropagationBackground),
				Object:        history.Object{APIVersion: r.gvr.GroupVersion().String(), Kind: r.kind, Namespace: ns, Name: it.Name, UID: it.UID},
				Reason:        namespaceDeleting(ns) + " (one by one: DELETECOLLECTION is not allowed here)",
				Preconditions: history.Preconditions{UID: it.UID},
			}, err)
			if err != nil && !notServed(err) && !apierrors.IsConflict(err) {
				return result{err: err}
			}
		}
	}
	items, err := c.api.ListInNamespace(ctx, r.gvr, ns)
	if notServed(err) {
		return result{}
	}
	if err != nil {
		return result{err: err}
	}
	res := result{remaining: len(items), finalizers: map[string]int{}}
	unexplained := 0
	for i := range items {
		it := &items[i]
		for _, f := range it.Finalizers {
			res.finalizers[f]++
		}
		if len(it.Finalizers) == 0 && !(r.gvr == podsGVR && it.DeletionTimestamp != nil) {
			unexplained++
		}
	}
	if unexplained > 0 && len(res.finalizers) == 0 {
		res.err = fmt.Errorf("unexpected items still remain in namespace: %s for gvr: %v", ns, r.gvr)
	}
	return res
}

// contentParallelism bounds the resources emptied at once in one pass
// (kube-controller-manager empties them one after the other).
const contentParallelism = 4

// deleteContent empties namespace ns: discovery, then Pods alone, then —
// only once no Pod is left — every other namespaced resource. It returns
// what it found; it writes nothing but the deletions.
func (c *Controller) deleteContent(ctx context.Context, ns string) *report {
	rep := newReport()
	lists, err := c.api.NamespacedResources()
	if err != nil {
		rep.discoveryErr = err
		var gdf *discovery.ErrGroupDiscoveryFailed
		if !errors.As(err, &gdf) {
			lists = nil // nothing discovered is to be trusted
		}
	}
	resources, err := namespacedResources(lists)
	rep.parseErr = err
	add := func(r resource, res result, wrap bool) {
		if res.err != nil {
			err := res.err
			if wrap {
				err = fmt.Errorf("failed to delete pods for namespace: %s, err: %w", ns, err)
			}
			rep.contentErrs = append(rep.contentErrs, err)
		}
		if res.remaining > 0 {
			rep.remaining[r.gvr] = res.remaining
			for f, n := range res.finalizers {
				rep.finalizers[f] += n
			}
		}
	}
	rest := resources[:0:0]
	for _, r := range resources {
		if r.gvr == podsGVR {
			res := c.emptyResource(ctx, r, ns)
			add(r, res, true)
			if res.remaining > 0 {
				return rep
			}
			continue
		}
		rest = append(rest, r)
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	sem := make(chan struct{}, contentParallelism)
	for _, r := range rest {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			res := c.emptyResource(ctx, r, ns)
			mu.Lock()
			add(r, res, false)
			mu.Unlock()
		})
	}
	wg.Wait()
	return rep
}
