package namespaces

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
)

// fakeAPI is an in-memory API server for the namespace lifecycle: one
// Namespace, objects of namespaced resources, faults per resource, and a
// log of every call.
type fakeAPI struct {
	mu        sync.Mutex
	ns        *corev1.Namespace
	rv        int
	resources []*metav1.APIResourceList
	discErr   error
	objects   map[schema.GroupVersionResource][]metav1.PartialObjectMetadata
	listErr   map[schema.GroupVersionResource]error
	// dcForbidden answers DELETECOLLECTION with 403 (delete is allowed).
	dcForbidden      map[schema.GroupVersionResource]bool
	finalizeConflict bool
	calls            []string
	nextUID          int
}

func newFake(nsName string, finalizers ...corev1.FinalizerName) *fakeAPI {
	now := metav1.Now()
	f := &fakeAPI{
		ns: &corev1.Namespace{
			ObjectMeta: metav1.ObjectMeta{Name: nsName, UID: "ns-uid", ResourceVersion: "1", DeletionTimestamp: &now},
			Spec:       corev1.NamespaceSpec{Finalizers: finalizers},
			Status:     corev1.NamespaceStatus{Phase: corev1.NamespaceTerminating},
		},
		rv:      1,
		objects: map[schema.GroupVersionResource][]metav1.PartialObjectMetadata{},
		listErr: map[schema.GroupVersionResource]error{},
		resources: []*metav1.APIResourceList{
			{GroupVersion: "v1", APIResources: []metav1.APIResource{
				{Name: "pods", Namespaced: true, Kind: "Pod", Verbs: metav1.Verbs{"list", "watch", "delete", "deletecollection"}},
				{Name: "pods/status", Namespaced: true, Kind: "Pod", Verbs: metav1.Verbs{"get", "patch"}},
				{Name: "configmaps", Namespaced: true, Kind: "ConfigMap", Verbs: metav1.Verbs{"list", "watch", "delete", "deletecollection"}},
				{Name: "events", Namespaced: true, Kind: "Event", Verbs: metav1.Verbs{"list", "watch", "delete", "deletecollection"}},
				{Name: "bindings", Namespaced: true, Kind: "Binding", Verbs: metav1.Verbs{"create"}},
			}},
			{GroupVersion: "example.com/v1", APIResources: []metav1.APIResource{
				// No deletecollection: deleted one by one.
				{Name: "widgets", Namespaced: true, Kind: "Widget", Verbs: metav1.Verbs{"list", "watch", "delete"}},
			}},
		},
	}
	return f
}

var (
	cmGVR     = schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}
	widgetGVR = schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "widgets"}
	eventsGVR = schema.GroupVersionResource{Version: "v1", Resource: "events"}
)

func (f *fakeAPI) add(gvr schema.GroupVersionResource, ns, name string, finalizers ...string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.nextUID++
	f.objects[gvr] = append(f.objects[gvr], metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{
		Namespace: ns, Name: name, UID: types.UID(fmt.Sprintf("uid-%d", f.nextUID)), Finalizers: finalizers,
	}})
}

// release removes every finalizer of the objects of gvr in ns; deleting
// ones without finalizers go.
func (f *fakeAPI) release(gvr schema.GroupVersionResource, ns string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var keep []metav1.PartialObjectMetadata
	for _, o := range f.objects[gvr] {
		if o.Namespace == ns {
			o.Finalizers = nil
			if o.DeletionTimestamp != nil {
				continue
			}
		}
		keep = append(keep, o)
	}
	f.objects[gvr] = keep
}

func (f *fakeAPI) count(gvr schema.GroupVersionResource, ns string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, o := range f.objects[gvr] {
		if o.Namespace == ns {
			n++
		}
	}
	return n
}

func (f *fakeAPI) log(format string, args ...any) {
	f.calls = append(f.calls, fmt.Sprintf(format, args...))
}

func (f *fakeAPI) GetNamespace(_ context.Context, name string) (*corev1.Namespace, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.log("get namespace %s", name)
	if f.ns == nil || f.ns.Name != name {
		return nil, apierrors.NewNotFound(schema.GroupResource{Resource: "namespaces"}, name)
	}
	return f.ns.DeepCopy(), nil
}

func (f *fakeAPI) write(ns *corev1.Namespace, what string) (*corev1.Namespace, error) {
	if f.ns == nil {
		return nil, apierrors.NewNotFound(schema.GroupResource{Resource: "namespaces"}, ns.Name)
	}
	if ns.ResourceVersion != f.ns.ResourceVersion {
		return nil, apierrors.NewConflict(schema.GroupResource{Resource: "namespaces"}, ns.Name, fmt.Errorf("rv %s, have %s", ns.ResourceVersion, f.ns.ResourceVersion))
	}
	f.rv++
	out := ns.DeepCopy()
	out.ResourceVersion = fmt.Sprint(f.rv)
	if what == "status" {
		out.Spec = f.ns.Spec
	} else {
		out.Status = f.ns.Status
	}
	f.ns = out
	if what == "finalize" && len(out.Spec.Finalizers) == 0 && len(out.Finalizers) == 0 {
		f.ns = nil // the apiserver deletes it
	}
	return out.DeepCopy(), nil
}

func (f *fakeAPI) UpdateNamespaceStatus(_ context.Context, ns *corev1.Namespace) (*corev1.Namespace, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.log("update status %s rv %s", ns.Name, ns.ResourceVersion)
	return f.write(ns, "status")
}

func (f *fakeAPI) FinalizeNamespace(_ context.Context, ns *corev1.Namespace) (*corev1.Namespace, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.log("finalize %s rv %s finalizers %v", ns.Name, ns.ResourceVersion, ns.Spec.Finalizers)
	if f.finalizeConflict {
		f.finalizeConflict = false
		return nil, apierrors.NewConflict(schema.GroupResource{Resource: "namespaces"}, ns.Name, fmt.Errorf("changed"))
	}
	return f.write(ns, "finalize")
}

func (f *fakeAPI) NamespacedResources() ([]*metav1.APIResourceList, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.resources, f.discErr
}

func (f *fakeAPI) deleteOne(o *metav1.PartialObjectMetadata) (gone bool) {
	if len(o.Finalizers) == 0 {
		return true
	}
	if o.DeletionTimestamp == nil {
		now := metav1.Now()
		o.DeletionTimestamp = &now
	}
	return false
}

func (f *fakeAPI) DeleteCollection(_ context.Context, gvr schema.GroupVersionResource, ns string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.log("deletecollection %s -n %s", gvr.Resource, ns)
	if f.dcForbidden[gvr] {
		return apierrors.NewForbidden(gvr.GroupResource(), "", fmt.Errorf("cannot deletecollection"))
	}
	if err := f.listErr[gvr]; err != nil {
		return err
	}
	var keep []metav1.PartialObjectMetadata
	for _, o := range f.objects[gvr] {
		if o.Namespace == ns && f.deleteOne(&o) {
			continue
		}
		keep = append(keep, o)
	}
	f.objects[gvr] = keep
	return nil
}

func (f *fakeAPI) DeleteInNamespace(_ context.Context, gvr schema.GroupVersionResource, ns, name string, uid types.UID) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.log("delete %s -n %s %s", gvr.Resource, ns, name)
	objs := f.objects[gvr]
	for i := range objs {
		o := &objs[i]
		if o.Namespace != ns || o.Name != name {
			continue
		}
		if o.UID != uid {
			return apierrors.NewConflict(gvr.GroupResource(), name, fmt.Errorf("uid precondition"))
		}
		if f.deleteOne(o) {
			f.objects[gvr] = slices.Delete(objs, i, i+1)
		}
		return nil
	}
	return apierrors.NewNotFound(gvr.GroupResource(), name)
}

func (f *fakeAPI) ListInNamespace(_ context.Context, gvr schema.GroupVersionResource, ns string) ([]metav1.PartialObjectMetadata, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.log("list %s -n %s", gvr.Resource, ns)
	if err := f.listErr[gvr]; err != nil {
		return nil, err
	}
	var out []metav1.PartialObjectMetadata
	for _, o := range f.objects[gvr] {
		if o.Namespace == ns {
			out = append(out, o)
		}
	}
	return out, nil
}

func (f *fakeAPI) callLog() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return strings.Join(f.calls, "\n")
}
