package apiops

import (
	"context"
	"errors"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/metadata"
)

// ErrNoNamespace is returned by the namespace content operations when
// asked about the empty namespace: through the metadata client that would
// address every namespace (a DELETECOLLECTION across the cluster), which
// the namespace lifecycle must never do.
var ErrNoNamespace = errors.New("apiops: a namespace's content operation needs a namespace")

// NamespaceOps performs the namespace lifecycle's API operations (package
// namespaces): reads and writes of Namespace objects through the typed
// core/v1 client, and deletions and quorum lists of a namespace's content
// through the metadata client (bodies are never read).
type NamespaceOps struct {
	Namespaces typedcorev1.NamespaceInterface
	Metadata   metadata.Interface
	// Discovery lists the namespaced resources at their preferred versions.
	Discovery interface {
		ServerPreferredNamespacedResources() ([]*metav1.APIResourceList, error)
	}
}

// GetNamespace reads a Namespace (a quorum read).
func (o *NamespaceOps) GetNamespace(ctx context.Context, name string) (*corev1.Namespace, error) {
	return o.Namespaces.Get(ctx, name, metav1.GetOptions{})
}

// UpdateNamespaceStatus writes ns's status. ns carries the resourceVersion
// it was read at, so the write fails with a conflict if the Namespace
// changed since.
func (o *NamespaceOps) UpdateNamespaceStatus(ctx context.Context, ns *corev1.Namespace) (*corev1.Namespace, error) {
	return o.Namespaces.UpdateStatus(ctx, ns, metav1.UpdateOptions{})
}

// FinalizeNamespace writes ns's spec.finalizers through the finalize
// subresource. ns carries the resourceVersion it was read at, so the write
// fails with a conflict if the Namespace changed since.
func (o *NamespaceOps) FinalizeNamespace(ctx context.Context, ns *corev1.Namespace) (*corev1.Namespace, error) {
	return o.Namespaces.Finalize(ctx, ns, metav1.UpdateOptions{})
}

// NamespacedResources lists the namespaced resources at their preferred
// versions (partial results with a *discovery.ErrGroupDiscoveryFailed when
// some groups fail).
func (o *NamespaceOps) NamespacedResources() ([]*metav1.APIResourceList, error) {
	return o.Discovery.ServerPreferredNamespacedResources()
}

// DeleteCollection deletes every object of a namespaced resource in
// namespace ns, in the Background (the garbage collector deletes what they
// own), as kube-controller-manager's namespace controller does.
func (o *NamespaceOps) DeleteCollection(ctx context.Context, gvr schema.GroupVersionResource, ns string) error {
	if ns == "" {
		return ErrNoNamespace
	}
	background := metav1.DeletePropagationBackground
	return o.Metadata.Resource(gvr).Namespace(ns).DeleteCollection(ctx, metav1.DeleteOptions{PropagationPolicy: &background}, metav1.ListOptions{})
}

// DeleteInNamespace deletes one object of namespace ns in the Background,
// on condition that it still has uid.
func (o *NamespaceOps) DeleteInNamespace(ctx context.Context, gvr schema.GroupVersionResource, ns, name string, uid types.UID) error {
	if ns == "" {
		return ErrNoNamespace
	}
	background := metav1.DeletePropagationBackground
	return o.Metadata.Resource(gvr).Namespace(ns).Delete(ctx, name, metav1.DeleteOptions{
		PropagationPolicy: &background,
		Preconditions:     &metav1.Preconditions{UID: &uid},
	})
}

// ListInNamespace lists the metadata of every object of a namespaced
// resource in namespace ns: a consistent (quorum) read, page by page.
func (o *NamespaceOps) ListInNamespace(ctx context.Context, gvr schema.GroupVersionResource, ns string) ([]metav1.PartialObjectMetadata, error) {
	if ns == "" {
		return nil, ErrNoNamespace
	}
	var out []metav1.PartialObjectMetadata
	opts := metav1.ListOptions{Limit: 500}
	for {
		page, err := o.Metadata.Resource(gvr).Namespace(ns).List(ctx, opts)
		if err != nil {
			return nil, err
		}
		out = append(out, page.Items...)
		if page.Continue == "" {
			return out, nil
		}
		opts.Continue = page.Continue
	}
}
