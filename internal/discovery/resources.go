package discovery

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
)

// Resource is one deletable resource at its preferred version.
type Resource struct {
	GVR        schema.GroupVersionResource
	Kind       string
	Namespaced bool
}

// APIVersion returns the resource's group/version string.
func (r Resource) APIVersion() string { return r.GVR.GroupVersion().String() }

// DefaultIgnored are the resources kgc does not monitor unless told
// otherwise: events are numerous, short-lived and never owners.
func DefaultIgnored() []schema.GroupResource {
	return []schema.GroupResource{
		{Group: "", Resource: "events"},
		{Group: "events.k8s.io", Resource: "events"},
	}
}

// ParseGroupResources parses "resource.group" or "resource" (core) entries.
func ParseGroupResources(specs []string) ([]schema.GroupResource, error) {
	var out []schema.GroupResource
	var errs []error
	for _, s := range specs {
		s = strings.TrimSpace(s)
		if s == "" {
			continue
		}
		gr := schema.ParseGroupResource(s)
		if gr.Resource == "" || strings.Contains(s, "/") {
			errs = append(errs, fmt.Errorf("invalid resource %q: want resource or resource.group", s))
			continue
		}
		out = append(out, gr)
	}
	return out, errors.Join(errs...)
}

// Discovery is the subset of the discovery client kgc uses.
type Discovery interface {
	ServerPreferredResources() ([]*metav1.APIResourceList, error)
}

// Deletable returns the resources whose verbs include list, watch and
// delete, at their preferred version, minus ignored ones. When some API
// groups fail discovery it returns what it found, the failed group versions,
// and a non-nil error: callers keep monitoring the failed groups' resources
// rather than treating them as gone.
func Deletable(dc Discovery, ignored map[schema.GroupResource]struct{}) (map[schema.GroupVersionResource]Resource, map[schema.GroupVersion]error, error) {
	lists, err := dc.ServerPreferredResources()
	var failed map[schema.GroupVersion]error
	if err != nil {
		var gdf *discovery.ErrGroupDiscoveryFailed
		if !errors.As(err, &gdf) {
			return nil, nil, fmt.Errorf("discovering server resources: %w", err)
		}
		failed = gdf.Groups
	}
	out := make(map[schema.GroupVersionResource]Resource)
	for _, list := range lists {
		if list == nil {
			continue
		}
		gv, perr := schema.ParseGroupVersion(list.GroupVersion)
		if perr != nil {
			continue
		}
		for _, r := range list.APIResources {
			if strings.Contains(r.Name, "/") {
				continue // subresource
			}
			if !hasVerbs(r.Verbs, "list", "watch", "delete") {
				continue
			}
			if _, skip := ignored[schema.GroupResource{Group: gv.Group, Resource: r.Name}]; skip {
				continue
			}
			gvr := gv.WithResource(r.Name)
			out[gvr] = Resource{GVR: gvr, Kind: r.Kind, Namespaced: r.Namespaced}
		}
	}
	return out, failed, err
}

func hasVerbs(verbs metav1.Verbs, want ...string) bool {
	for _, w := range want {
		if !slices.Contains(verbs, w) {
			return false
		}
	}
	return true
}

// GroupKind returns the resource's group and kind: what the graph knows it
// by (any served version lists the same objects).
func (r Resource) GroupKind() schema.GroupKind {
	return schema.GroupKind{Group: r.GVR.Group, Kind: r.Kind}
}
