package apiops

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
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

	// noSMP remembers resources that answered a strategic merge patch with
	// 415 (custom resources do not take them), so that each pays for the
	// refusal once.
	noSMP sync.Map // schema.GroupVersionResource -> struct{}
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

// Patches.
//
// A patch that removes ownerReferences or finalizers rests on the list it
// read: kgc decided from the graph's copy of that list, and the patch must
// not apply to any other. kgc therefore sends a JSON patch (RFC 6902) that
// tests metadata.uid and the whole list before replacing it: the apiserver
// applies it only if the object is the one decided about and the list is
// exactly what kgc read, and answers 422 otherwise (IsStale). Unlike a
// resourceVersion precondition, such a patch still applies when another
// client changed something else meanwhile (an annotation updated every few
// milliseconds would otherwise starve every write with 409s), and unlike a
// merge patch without a resourceVersion it never replaces a list kgc did
// not read. A resource that does not accept JSON patches (415) gets a merge
// patch guarded by metadata.uid and metadata.resourceVersion instead, and
// only when the decision has a resourceVersion to guard it with.

// jsonPatchOp is one RFC 6902 operation.
type jsonPatchOp struct {
	Op    string `json:"op"`
	Path  string `json:"path"`
	Value any    `json:"value,omitempty"`
}

// metadataPatch is the merge-patch fallback.
type metadataPatch struct {
	Metadata patchedMeta `json:"metadata"`
}

type patchedMeta struct {
	UID             types.UID                `json:"uid"`
	ResourceVersion string                   `json:"resourceVersion"`
	OwnerReferences *[]metav1.OwnerReference `json:"ownerReferences,omitempty"`
	Finalizers      *[]string                `json:"finalizers,omitempty"`
}

// ErrNoPrecondition is returned for a write kgc refuses to send because
// nothing would guard it: a merge patch (the fallback for resources without
// JSON patch) replaces a list whole, and without a resourceVersion it would
// replace whatever list the object has now.
var ErrNoPrecondition = errors.New("no resourceVersion to guard a merge patch with")

// IsStale reports whether a write was rejected because the object is not
// in the state the decision read: a failed precondition (409) or a failed
// JSON-patch test (422).
func IsStale(err error) bool {
	return apierrors.IsConflict(err) || apierrors.ReasonForError(err) == metav1.StatusReasonInvalid
}

// replaceList replaces the list at metadata.<field> of t, which must be
// exactly from, with to.
func (o *Ops) replaceList(ctx context.Context, t Target, field string, from, to any, merge patchedMeta) (*metav1.PartialObjectMetadata, error) {
	ops := []jsonPatchOp{
		{Op: "test", Path: "/metadata/uid", Value: t.UID},
		{Op: "test", Path: "/metadata/" + field, Value: from},
		{Op: "replace", Path: "/metadata/" + field, Value: to},
	}
	data, err := json.Marshal(ops)
	if err != nil {
		return nil, fmt.Errorf("encoding patch for %s: %w", t, err)
	}
	res := o.resource(t.Resource, t.Namespace)
	obj, err := res.Patch(ctx, t.Name, types.JSONPatchType, data, metav1.PatchOptions{})
	if !apierrors.IsUnsupportedMediaType(err) {
		return obj, err
	}
	if t.ResourceVersion == "" {
		return nil, fmt.Errorf("patching %s: %w", t, ErrNoPrecondition)
	}
	merge.UID, merge.ResourceVersion = t.UID, t.ResourceVersion
	if data, err = json.Marshal(metadataPatch{Metadata: merge}); err != nil {
		return nil, fmt.Errorf("encoding patch for %s: %w", t, err)
	}
	return res.Patch(ctx, t.Name, types.MergePatchType, data, metav1.PatchOptions{})
}

// ReplaceOwnerReferences replaces t's ownerReferences, which must be exactly
// from (what the decision read), with to. It returns the patched object's
// metadata.
func (o *Ops) ReplaceOwnerReferences(ctx context.Context, t Target, from, to []metav1.OwnerReference) (*metav1.PartialObjectMetadata, error) {
	from, to = nonNil(from), nonNil(to)
	return o.replaceList(ctx, t, "ownerReferences", from, to, patchedMeta{OwnerReferences: &to})
}

// ReplaceFinalizers replaces t's finalizers, which must be exactly from,
// with to.
func (o *Ops) ReplaceFinalizers(ctx context.Context, t Target, from, to []string) (*metav1.PartialObjectMetadata, error) {
	from, to = nonNil(from), nonNil(to)
	return o.replaceList(ctx, t, "finalizers", from, to, patchedMeta{Finalizers: &to})
}

// RemoveOwnerReference removes the ownerReference to owner from t, wherever
// it sits in the list and whatever else the object has: orphaning rests on
// nothing but the reference itself, so the write is keyed by the owner's
// UID, not by the object's resourceVersion or list (two owners orphaning a
// shared dependent at once must not make each other's patches fail).
// indices are where the decision saw references to owner (a list may name
// one owner twice); they are only used by the fallback for resources that
// take no strategic merge patch (custom resources), which tests that each
// entry is owner's before removing it.
//
// The strategic merge patch carries metadata.uid, which the apiserver
// checks against the object's (409 on a mismatch). It is a no-op for an
// object that no longer has the reference.
func (o *Ops) RemoveOwnerReference(ctx context.Context, t Target, owner types.UID, indices []int) (*metav1.PartialObjectMetadata, error) {
	res := o.resource(t.Resource, t.Namespace)
	if _, no := o.noSMP.Load(t.Resource); !no {
		data, err := json.Marshal(map[string]any{"metadata": map[string]any{
			"uid":             t.UID,
			"ownerReferences": []map[string]any{{"$patch": "delete", "uid": owner}},
		}})
		if err != nil {
			return nil, fmt.Errorf("encoding patch for %s: %w", t, err)
		}
		obj, err := res.Patch(ctx, t.Name, types.StrategicMergePatchType, data, metav1.PatchOptions{})
		if !apierrors.IsUnsupportedMediaType(err) {
			return obj, err
		}
		o.noSMP.Store(t.Resource, struct{}{})
	}
	ops := []jsonPatchOp{{Op: "test", Path: "/metadata/uid", Value: t.UID}}
	// From the last index down, so that each removal leaves the indices
	// before it in place.
	for _, i := range slices.Backward(slices.Sorted(slices.Values(indices))) {
		path := fmt.Sprintf("/metadata/ownerReferences/%d", i)
		ops = append(ops, jsonPatchOp{Op: "test", Path: path + "/uid", Value: owner}, jsonPatchOp{Op: "remove", Path: path})
	}
	data, err := json.Marshal(ops)
	if err != nil {
		return nil, fmt.Errorf("encoding patch for %s: %w", t, err)
	}
	return res.Patch(ctx, t.Name, types.JSONPatchType, data, metav1.PatchOptions{})
}

// nonNil makes an empty list encode as [] rather than null.
func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}
