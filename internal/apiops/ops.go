package apiops

import (
	"context"
	"encoding/json"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/metadata"
)

// Target addresses one object version for a conditional write.
type Target struct {
	Resource        schema.GroupVersionResource
	Namespace       string
	Name            string
	UID             types.UID
	ResourceVersion string // "" means: the decision did not depend on it
}

func (t Target) String() string {
	return fmt.Sprintf("%s %s/%s (uid %s, rv %s)", t.Resource, t.Namespace, t.Name, t.UID, t.ResourceVersion)
}

// Ops performs kgc's API operations through the metadata client.
type Ops struct {
	Client metadata.Interface
}

func (o *Ops) resource(gvr schema.GroupVersionResource, ns string) metadata.ResourceInterface {
	if ns == "" {
		return o.Client.Resource(gvr)
	}
	return o.Client.Resource(gvr).Namespace(ns)
}

// Get reads one object's metadata (a quorum read).
func (o *Ops) Get(ctx context.Context, gvr schema.GroupVersionResource, ns, name string) (*metav1.PartialObjectMetadata, error) {
	return o.resource(gvr, ns).Get(ctx, name, metav1.GetOptions{})
}

// List reads one page of a resource's metadata in namespace ns (all
// namespaces, or a cluster-scoped resource, when ns is ""). Without a
// resourceVersion in opts it is a consistent read, like Get.
func (o *Ops) List(ctx context.Context, gvr schema.GroupVersionResource, ns string, opts metav1.ListOptions) (*metav1.PartialObjectMetadataList, error) {
	return o.resource(gvr, ns).List(ctx, opts)
}

// Delete deletes t with the given propagation policy, on condition that the
// object still has t's UID (and resourceVersion, when set).
func (o *Ops) Delete(ctx context.Context, t Target, policy metav1.DeletionPropagation) error {
	pre := &metav1.Preconditions{UID: &t.UID}
	if t.ResourceVersion != "" {
		pre.ResourceVersion = &t.ResourceVersion
	}
	return o.resource(t.Resource, t.Namespace).Delete(ctx, t.Name, metav1.DeleteOptions{
		Preconditions:     pre,
		PropagationPolicy: &policy,
	})
}

// metadataPatch is a JSON merge patch of metadata fields. uid and
// resourceVersion in a patch act as preconditions: the apiserver rejects the
// patch with a Conflict if they differ from the stored object.
type metadataPatch struct {
	Metadata patchedMeta `json:"metadata"`
}

type patchedMeta struct {
	UID             types.UID                `json:"uid"`
	ResourceVersion string                   `json:"resourceVersion,omitempty"`
	OwnerReferences *[]metav1.OwnerReference `json:"ownerReferences,omitempty"`
	Finalizers      *[]string                `json:"finalizers,omitempty"`
}

func (o *Ops) patch(ctx context.Context, t Target, m patchedMeta) (*metav1.PartialObjectMetadata, error) {
	m.UID, m.ResourceVersion = t.UID, t.ResourceVersion
	data, err := json.Marshal(metadataPatch{Metadata: m})
	if err != nil {
		return nil, fmt.Errorf("encoding patch for %s: %w", t, err)
	}
	return o.resource(t.Resource, t.Namespace).Patch(ctx, t.Name, types.MergePatchType, data, metav1.PatchOptions{})
}

// SetOwnerReferences replaces t's ownerReferences with refs (a merge patch
// replaces lists whole, which is why it must be conditional on t's
// resourceVersion). It returns the patched object's metadata.
func (o *Ops) SetOwnerReferences(ctx context.Context, t Target, refs []metav1.OwnerReference) (*metav1.PartialObjectMetadata, error) {
	if refs == nil {
		refs = []metav1.OwnerReference{}
	}
	return o.patch(ctx, t, patchedMeta{OwnerReferences: &refs})
}

// SetFinalizers replaces t's finalizers with finalizers.
func (o *Ops) SetFinalizers(ctx context.Context, t Target, finalizers []string) (*metav1.PartialObjectMetadata, error) {
	if finalizers == nil {
		finalizers = []string{}
	}
	return o.patch(ctx, t, patchedMeta{Finalizers: &finalizers})
}
