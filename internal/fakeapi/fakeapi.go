// Package fakeapi is the in-memory API server the collector's unit tests
// run against: client-go's fake metadata client plus the apiserver
// behaviour garbage collection depends on, a fixed discovery, a REST
// mapper and an event recorder. Only tests import it; the real-server
// tests run against kube-apiserver (module sandbox).
package fakeapi

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
	metadatafake "k8s.io/client-go/metadata/fake"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"

	"github.com/kgc-dev/kgc/internal/rules"
)

// The collector-level tests run the real pipeline (discovery, monitors,
// graph builder, workers, apiops) against client-go's fake metadata
// client.
//
// The fake's object tracker alone is too forgiving for a garbage
// collector: it ignores DELETE preconditions and propagation policies,
// never changes resourceVersions (so kgc's own patches would be invisible
// to its monitors, which drop updates with an unchanged resourceVersion)
// and never finalizes objects. Server adds, through reactors, the
// apiserver behaviour GC depends on: conditional DELETE and PATCH,
// resourceVersion bumps, deletionTimestamp + finalizers for Foreground and
// Orphan deletes, and removal once the last finalizer goes.

// Events are core/v1 Events, which the collector tests leave unmonitored.
var Events = schema.GroupVersionResource{Version: "v1", Resource: "events"}

// Server is the fake API server: Client is what the collector is given, the
// methods are what a test does as another client would.
type Server struct {
	Client *metadatafake.FakeMetadataClient
	Mu     sync.Mutex // serializes read-modify-write sequences on the tracker
	rv     atomic.Int64
}

// NewServer returns an empty Server whose Client's DELETEs and PATCHes
// behave as the apiserver's.
func NewServer() *Server {
	s := &Server{Client: metadatafake.NewSimpleMetadataClient(metadatafake.NewTestScheme())}
	s.rv.Store(100)
	s.Client.PrependReactor("delete", "*", func(a clienttesting.Action) (bool, runtime.Object, error) {
		d := a.(clienttesting.DeleteActionImpl)
		return true, nil, s.Delete(d.GetResource(), d.GetNamespace(), d.GetName(), d.DeleteOptions)
	})
	s.Client.PrependReactor("patch", "*", func(a clienttesting.Action) (bool, runtime.Object, error) {
		p := a.(clienttesting.PatchActionImpl)
		obj, err := s.Patch(p.GetResource(), p.GetNamespace(), p.GetName(), p.GetPatchType(), p.GetPatch())
		if err != nil {
			return true, nil, err
		}
		return true, obj, nil
	})
	return s
}

// NextRV returns a new resourceVersion, greater than every one before.
func (s *Server) NextRV() string { return strconv.FormatInt(s.rv.Add(1), 10) }

// Create stores a copy of o with a fresh resourceVersion and returns it.
func (s *Server) Create(t testing.TB, gvr schema.GroupVersionResource, o *metav1.PartialObjectMetadata) *metav1.PartialObjectMetadata {
	t.Helper()
	s.Mu.Lock()
	defer s.Mu.Unlock()
	o = o.DeepCopy()
	o.ResourceVersion = s.NextRV()
	if err := s.Client.Tracker().Create(gvr, o, o.Namespace); err != nil {
		t.Fatalf("creating %s %s/%s: %v", gvr.Resource, o.Namespace, o.Name, err)
	}
	return o
}

// Get returns a copy of the stored object.
func (s *Server) Get(gvr schema.GroupVersionResource, ns, name string) (*metav1.PartialObjectMetadata, error) {
	obj, err := s.Client.Tracker().Get(gvr, ns, name)
	if err != nil {
		return nil, err
	}
	return obj.(*metav1.PartialObjectMetadata).DeepCopy(), nil
}

// Store writes o back with a new resourceVersion, or removes it when it is
// being deleted and has no finalizers left. Callers hold Mu.
func (s *Server) Store(gvr schema.GroupVersionResource, o *metav1.PartialObjectMetadata) error {
	if o.DeletionTimestamp != nil && len(o.Finalizers) == 0 {
		return s.Client.Tracker().Delete(gvr, o.Namespace, o.Name)
	}
	o.ResourceVersion = s.NextRV()
	return s.Client.Tracker().Update(gvr, o, o.Namespace)
}

// SetFinalizers replaces an object's finalizers as a client other than kgc
// would.
func (s *Server) SetFinalizers(t testing.TB, gvr schema.GroupVersionResource, ns, name string, finalizers ...string) {
	t.Helper()
	s.Mu.Lock()
	defer s.Mu.Unlock()
	o, err := s.Get(gvr, ns, name)
	if err != nil {
		t.Fatal(err)
	}
	o.Finalizers = finalizers
	if err := s.Store(gvr, o); err != nil {
		t.Fatal(err)
	}
}

// Conflict is the apiserver's answer to a failed precondition.
func Conflict(gvr schema.GroupVersionResource, name, what string) error {
	return apierrors.NewConflict(gvr.GroupResource(), name, errors.New(what+" precondition failed"))
}

// Delete deletes as the apiserver does: it checks the UID and
// resourceVersion preconditions, and with the Foreground or Orphan policy
// (or finalizers already there) sets deletionTimestamp and the policy's
// finalizer instead of removing the object.
func (s *Server) Delete(gvr schema.GroupVersionResource, ns, name string, opts metav1.DeleteOptions) error {
	s.Mu.Lock()
	defer s.Mu.Unlock()
	o, err := s.Get(gvr, ns, name)
	if err != nil {
		return err
	}
	if p := opts.Preconditions; p != nil {
		if p.UID != nil && *p.UID != o.UID {
			return Conflict(gvr, name, "uid")
		}
		if p.ResourceVersion != nil && *p.ResourceVersion != o.ResourceVersion {
			return Conflict(gvr, name, "resourceVersion")
		}
	}
	policy := metav1.DeletePropagationBackground
	if opts.PropagationPolicy != nil {
		policy = *opts.PropagationPolicy
	}
	switch policy {
	case metav1.DeletePropagationForeground:
		if !slices.Contains(o.Finalizers, metav1.FinalizerDeleteDependents) {
			o.Finalizers = append(o.Finalizers, metav1.FinalizerDeleteDependents)
		}
	case metav1.DeletePropagationOrphan:
		if !slices.Contains(o.Finalizers, metav1.FinalizerOrphanDependents) {
			o.Finalizers = append(o.Finalizers, metav1.FinalizerOrphanDependents)
		}
	}
	if len(o.Finalizers) == 0 {
		return s.Client.Tracker().Delete(gvr, ns, name)
	}
	if o.DeletionTimestamp == nil {
		now := metav1.Now()
		o.DeletionTimestamp = &now
	}
	return s.Store(gvr, o)
}

// Patch applies the patches kgc sends, as the apiserver would: JSON
// patches (a failed test answers 422), strategic merge patches of
// metadata.ownerReferences keyed by uid, and JSON merge patches of
// metadata.ownerReferences and/or metadata.finalizers with metadata.uid and
// metadata.resourceVersion as preconditions. A patch touching anything but
// those metadata fields is an error.
func (s *Server) Patch(gvr schema.GroupVersionResource, ns, name string, pt types.PatchType, data []byte) (*metav1.PartialObjectMetadata, error) {
	switch pt {
	case types.MergePatchType:
	case types.JSONPatchType, types.StrategicMergePatchType:
		return s.PatchJSON(gvr, ns, name, pt, data)
	default:
		return nil, apierrors.NewBadRequest(fmt.Sprintf("unexpected patch type %s", pt))
	}
	var raw map[string]map[string]json.RawMessage
	if err := json.Unmarshal(data, &raw); err != nil {
		return nil, apierrors.NewBadRequest(err.Error())
	}
	for k, m := range raw {
		if k != "metadata" {
			return nil, apierrors.NewBadRequest("patch touches " + k)
		}
		for f := range m {
			if !slices.Contains([]string{"uid", "resourceVersion", "ownerReferences", "finalizers"}, f) {
				return nil, apierrors.NewBadRequest("patch touches metadata." + f)
			}
		}
	}
	var p struct {
		Metadata struct {
			UID             types.UID                `json:"uid"`
			ResourceVersion string                   `json:"resourceVersion"`
			OwnerReferences *[]metav1.OwnerReference `json:"ownerReferences"`
			Finalizers      *[]string                `json:"finalizers"`
		} `json:"metadata"`
	}
	if err := json.Unmarshal(data, &p); err != nil {
		return nil, apierrors.NewBadRequest(err.Error())
	}
	s.Mu.Lock()
	defer s.Mu.Unlock()
	o, err := s.Get(gvr, ns, name)
	if err != nil {
		return nil, err
	}
	if p.Metadata.UID != "" && p.Metadata.UID != o.UID {
		return nil, Conflict(gvr, name, "uid")
	}
	if p.Metadata.ResourceVersion != "" && p.Metadata.ResourceVersion != o.ResourceVersion {
		return nil, Conflict(gvr, name, "resourceVersion")
	}
	if p.Metadata.OwnerReferences != nil {
		o.OwnerReferences = *p.Metadata.OwnerReferences
	}
	if p.Metadata.Finalizers != nil {
		o.Finalizers = *p.Metadata.Finalizers
	}
	if err := s.Store(gvr, o); err != nil {
		return nil, err
	}
	return o, nil
}

// PatchJSON applies a JSON patch or a strategic merge patch to the object's
// JSON; only ownerReferences and finalizers may change.
func (s *Server) PatchJSON(gvr schema.GroupVersionResource, ns, name string, pt types.PatchType, data []byte) (*metav1.PartialObjectMetadata, error) {
	s.Mu.Lock()
	defer s.Mu.Unlock()
	o, err := s.Get(gvr, ns, name)
	if err != nil {
		return nil, err
	}
	orig, err := json.Marshal(o)
	if err != nil {
		return nil, err
	}
	var patched []byte
	if pt == types.JSONPatchType {
		p, err := jsonpatch.DecodePatch(data)
		if err != nil {
			return nil, apierrors.NewBadRequest(err.Error())
		}
		if patched, err = p.Apply(orig); err != nil {
			return nil, apierrors.NewGenericServerResponse(http.StatusUnprocessableEntity, "", schema.GroupResource{}, "", err.Error(), 0, false)
		}
	} else if patched, err = strategicpatch.StrategicMergePatch(orig, data, &metav1.PartialObjectMetadata{}); err != nil {
		return nil, apierrors.NewBadRequest(err.Error())
	}
	var n metav1.PartialObjectMetadata
	if err := json.Unmarshal(patched, &n); err != nil {
		return nil, apierrors.NewBadRequest(err.Error())
	}
	if n.UID != o.UID {
		return nil, Conflict(gvr, name, "uid")
	}
	// Compared after the same JSON round trip (timestamps lose their
	// sub-second part in it).
	want := &metav1.PartialObjectMetadata{}
	if err := json.Unmarshal(orig, want); err != nil {
		return nil, err
	}
	want.OwnerReferences, want.Finalizers = n.OwnerReferences, n.Finalizers
	if !apiequality.Semantic.DeepEqual(want, &n) {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("patch %s touches more than ownerReferences and finalizers", data))
	}
	o.OwnerReferences, o.Finalizers = n.OwnerReferences, n.Finalizers
	if err := s.Store(gvr, o); err != nil {
		return nil, err
	}
	return o, nil
}

// KGCActions returns the GETs, DELETEs and PATCHes made through Client (the
// monitors' lists and watches left out).
func (s *Server) KGCActions() (gets []clienttesting.GetActionImpl, deletes []clienttesting.DeleteActionImpl, patches []clienttesting.PatchActionImpl) {
	for _, a := range s.Client.Actions() {
		switch a := a.(type) {
		case clienttesting.GetActionImpl:
			gets = append(gets, a)
		case clienttesting.DeleteActionImpl:
			deletes = append(deletes, a)
		case clienttesting.PatchActionImpl:
			patches = append(patches, a)
		}
	}
	return gets, deletes, patches
}

// Discovery serves fixed resource lists (Lists, or Err) and counts the
// calls.
type Discovery struct {
	Mu    sync.Mutex
	Lists []*metav1.APIResourceList
	Err   error
	Calls int
}

// ServerPreferredResources returns Lists and Err.
func (d *Discovery) ServerPreferredResources() ([]*metav1.APIResourceList, error) {
	d.Mu.Lock()
	defer d.Mu.Unlock()
	d.Calls++
	return d.Lists, d.Err
}

// AllVerbs are the verbs of a resource kgc can monitor and collect.
var AllVerbs = metav1.Verbs{"create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"}

// ResourceLists are the resources of the collector tests: ConfigMaps,
// Namespaces and Events (v1), Deployments (apps/v1).
func ResourceLists() []*metav1.APIResourceList {
	return []*metav1.APIResourceList{
		{GroupVersion: "v1", APIResources: []metav1.APIResource{
			{Name: "configmaps", Kind: "ConfigMap", Namespaced: true, Verbs: AllVerbs},
			{Name: "namespaces", Kind: "Namespace", Verbs: AllVerbs},
			{Name: "events", Kind: "Event", Namespaced: true, Verbs: AllVerbs},
		}},
		{GroupVersion: "apps/v1", APIResources: []metav1.APIResource{
			{Name: "deployments", Kind: "Deployment", Namespaced: true, Verbs: AllVerbs},
			{Name: "deployments/scale", Kind: "Scale", Namespaced: true, Verbs: metav1.Verbs{"get", "patch", "update"}},
		}},
	}
}

// Warning is one event a Recorder recorded.
type Warning struct {
	Object          rules.Identity
	Reason, Message string
}

// Recorder records warnings in memory (a workers.Recorder).
type Recorder struct {
	mu       sync.Mutex
	warnings []Warning
}

// Warning records a warning.
func (r *Recorder) Warning(object rules.Identity, reason, message string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.warnings = append(r.warnings, Warning{object, reason, message})
}

// Get returns the warnings recorded so far.
func (r *Recorder) Get() []Warning {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.warnings)
}

// Object returns an object's metadata with the given references.
func Object(ns, name string, uid types.UID, refs ...metav1.OwnerReference) *metav1.PartialObjectMetadata {
	return &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: uid, OwnerReferences: refs}}
}

// DeploymentRef is a controller reference to an apps/v1 Deployment.
func DeploymentRef(name string, uid types.UID) metav1.OwnerReference {
	return metav1.OwnerReference{APIVersion: "apps/v1", Kind: "Deployment", Name: name, UID: uid, BlockOwnerDeletion: ptr.To(true), Controller: ptr.To(true)}
}

// ConfigMapRef is a blocking reference to a ConfigMap.
func ConfigMapRef(name string, uid types.UID) metav1.OwnerReference {
	return metav1.OwnerReference{APIVersion: "v1", Kind: "ConfigMap", Name: name, UID: uid, BlockOwnerDeletion: ptr.To(true)}
}

// Mapper adds the Reset a ResettableRESTMapper needs; it only counts.
type Mapper struct {
	meta.RESTMapper
	Resets atomic.Int32
}

// Reset counts the resets.
func (m *Mapper) Reset() { m.Resets.Add(1) }

// The resources ResourceLists and NewMapper know.
var (
	ConfigMaps   = schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}
	Namespaces   = schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}
	Deployments  = schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}
	ClusterRoles = schema.GroupVersionResource{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "clusterroles"}
)

// NewMapper knows core/v1 ConfigMap (namespaced) and Namespace
// (cluster-scoped), apps/v1 Deployment (namespaced; apps/v1beta2 exists
// as a group version but does not serve it) and rbac ClusterRole.
func NewMapper() *Mapper {
	m := meta.NewDefaultRESTMapper([]schema.GroupVersion{
		{Version: "v1"}, {Group: "apps", Version: "v1"}, {Group: "apps", Version: "v1beta2"}, {Group: "rbac.authorization.k8s.io", Version: "v1"},
	})
	m.Add(schema.GroupVersionKind{Version: "v1", Kind: "ConfigMap"}, meta.RESTScopeNamespace)
	m.Add(schema.GroupVersionKind{Version: "v1", Kind: "Namespace"}, meta.RESTScopeRoot)
	m.Add(schema.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"}, meta.RESTScopeNamespace)
	m.Add(schema.GroupVersionKind{Group: "apps", Version: "v1beta2", Kind: "StatefulSet"}, meta.RESTScopeNamespace)
	m.Add(schema.GroupVersionKind{Group: "rbac.authorization.k8s.io", Version: "v1", Kind: "ClusterRole"}, meta.RESTScopeRoot)
	return &Mapper{RESTMapper: m}
}
