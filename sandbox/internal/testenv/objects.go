package testenv

import (
	"context"
	"fmt"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	utilrand "k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/util/retry"
)

// NamespaceName returns a fresh namespace name for the test named
// testName: "it-", the name without its "Test" prefix, lowercased, other
// characters than letters and digits turned into '-', cut to 40 characters,
// and a random suffix.
func NamespaceName(testName string) string {
	base := strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
			return r
		}
		return '-'
	}, strings.ToLower(strings.TrimPrefix(testName, "Test")))
	if len(base) > 40 {
		base = base[:40]
	}
	return strings.Trim("it-"+base, "-") + "-" + utilrand.String(5)
}

// DeleteNamespace deletes the namespace with opts and then finalizes it by
// hand: the sandbox runs no namespace controller. A namespace gone before
// it is finalized is not an error.
func DeleteNamespace(ctx context.Context, kube kubernetes.Interface, name string, opts metav1.DeleteOptions) error {
	if err := kube.CoreV1().Namespaces().Delete(ctx, name, opts); err != nil {
		return fmt.Errorf("delete namespace %s: %w", name, err)
	}
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n, err := kube.CoreV1().Namespaces().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		n.Spec.Finalizers = nil
		_, err = kube.CoreV1().Namespaces().Finalize(ctx, n, metav1.UpdateOptions{})
		return err
	})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("finalize namespace %s: %w", name, err)
	}
	return nil
}

// RandomUID returns a UID no object has: a reference with it names an owner
// that never existed.
func RandomUID() types.UID {
	return types.UID(fmt.Sprintf("00000000-0000-4000-8000-%012s", utilrand.String(12)))
}

// OwnerRef returns an ownerReference with the given blockOwnerDeletion.
func OwnerRef(apiVersion, kind, name string, uid types.UID, block bool) metav1.OwnerReference {
	return metav1.OwnerReference{APIVersion: apiVersion, Kind: kind, Name: name, UID: uid, BlockOwnerDeletion: &block}
}

// GetMeta returns the metadata of the object named name with the given uid,
// or nil (and no error) when it is gone: not found, or replaced by a
// namesake with another UID.
func GetMeta(ctx context.Context, r metadata.ResourceInterface, name string, uid types.UID) (*metav1.PartialObjectMetadata, error) {
	m, err := r.Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if m.UID != uid {
		return nil, nil
	}
	return m, nil
}

// HasCondition reports whether u's status.conditions has a condition of
// type typ with the given status (an Established CRD: "Established",
// "True").
func HasCondition(u *unstructured.Unstructured, typ, status string) bool {
	conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	for _, c := range conds {
		if c, ok := c.(map[string]any); ok && c["type"] == typ && c["status"] == status {
			return true
		}
	}
	return false
}

// CRDGVR is the resource of CustomResourceDefinitions.
var CRDGVR = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// CRD returns a CustomResourceDefinition (named resource.group) serving
// kind as resource in group at versions, the first of which is the storage
// version; its schema keeps any field.
func CRD(group, resource, kind string, namespaced bool, versions ...string) *unstructured.Unstructured {
	scope := "Cluster"
	if namespaced {
		scope = "Namespaced"
	}
	var vs []any
	for i, v := range versions {
		vs = append(vs, map[string]any{
			"name": v, "served": true, "storage": i == 0,
			"schema": map[string]any{"openAPIV3Schema": map[string]any{
				"type": "object", "x-kubernetes-preserve-unknown-fields": true,
			}},
		})
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apiextensions.k8s.io/v1",
		"kind":       "CustomResourceDefinition",
		"metadata":   map[string]any{"name": resource + "." + group},
		"spec": map[string]any{
			"group": group,
			"scope": scope,
			"names": map[string]any{
				"plural": resource, "singular": strings.ToLower(kind), "kind": kind, "listKind": kind + "List",
			},
			"versions": vs,
		},
	}}
}

// UnavailableAPIService is an aggregated APIService for group/version whose
// backing Service does not exist: the aggregator reports it unavailable
// and discovery of its group fails (a broken aggregated API).
func UnavailableAPIService(group, version string) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apiregistration.k8s.io/v1",
		"kind":       "APIService",
		"metadata":   map[string]any{"name": version + "." + group},
		"spec": map[string]any{
			"group": group, "version": version,
			"service":               map[string]any{"namespace": "default", "name": "kgc-no-such-apiservice", "port": int64(443)},
			"groupPriorityMinimum":  int64(1000),
			"versionPriority":       int64(15),
			"insecureSkipTLSVerify": true,
		},
	}}
}
