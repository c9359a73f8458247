package discovery

import (
	"strings"
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"

	"github.com/kgc-dev/kgc/internal/graph"
)

// Meta is what a monitor's informer stores per object: exactly the metadata
// kgc decides from (identity, resourceVersion for preconditions, owner
// references, finalizers, deletion), nothing else. A stored
// PartialObjectMetadata costs ~290 bytes of struct alone (ObjectMeta has
// room for labels, annotations, managedFields, timestamps, generateName…);
// a Meta is 128. At 100k objects the informer stores are most of kgc's
// memory, so this is where it pays to be lean.
//
// Meta implements metav1.Object (the informer keys objects and compares
// resourceVersions through it) and runtime.Object. Setters of fields it
// does not keep do nothing.
type Meta struct {
	Namespace         string
	Name              string
	UID               types.UID
	ResourceVersion   string
	OwnerReferences   []metav1.OwnerReference
	Finalizers        []string
	DeletionTimestamp *metav1.Time
}

var (
	_ metav1.Object  = (*Meta)(nil)
	_ runtime.Object = (*Meta)(nil)
)

// leanMetadata is the monitors' informer transform: it turns each listed or
// watched PartialObjectMetadata into a Meta, with the strings that repeat
// across objects (namespaces, owner apiVersions and kinds, finalizers)
// interned. It is idempotent, as informer transforms must be.
func leanMetadata(obj any) (any, error) {
	pom, ok := obj.(*metav1.PartialObjectMetadata)
	if !ok {
		return obj, nil
	}
	m := &Meta{
		Namespace:         interned.get(pom.Namespace),
		Name:              pom.Name,
		UID:               pom.UID,
		ResourceVersion:   pom.ResourceVersion,
		DeletionTimestamp: pom.DeletionTimestamp,
	}
	if len(pom.OwnerReferences) > 0 {
		m.OwnerReferences = make([]metav1.OwnerReference, len(pom.OwnerReferences))
		for i := range pom.OwnerReferences {
			in, out := &pom.OwnerReferences[i], &m.OwnerReferences[i]
			out.APIVersion = interned.get(in.APIVersion)
			out.Kind = interned.get(in.Kind)
			out.Name, out.UID = in.Name, in.UID
			out.Controller = sharedBool(in.Controller)
			out.BlockOwnerDeletion = sharedBool(in.BlockOwnerDeletion)
		}
	}
	if len(pom.Finalizers) > 0 {
		m.Finalizers = make([]string, len(pom.Finalizers))
		for i, f := range pom.Finalizers {
			m.Finalizers[i] = interned.get(f)
		}
	}
	return m, nil
}

var trueValue, falseValue = true, false

// sharedBool replaces a decoded *bool by one of two shared pointers. Stored
// objects are never mutated (informer contract), so sharing is safe.
func sharedBool(b *bool) *bool {
	switch {
	case b == nil:
		return nil
	case *b:
		return &trueValue
	default:
		return &falseValue
	}
}

// toGraphEvent converts what an informer hands a handler into a graph
// event for an object of the given apiVersion and kind.
func toGraphEvent(t graph.EventType, obj any, apiVersion, kind string) (graph.Event, bool) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	if pom, ok := obj.(*metav1.PartialObjectMetadata); ok {
		// Not transformed (only when a transform failed to apply).
		lean, _ := leanMetadata(pom)
		obj = lean
	}
	m, ok := obj.(*Meta)
	if !ok {
		return graph.Event{}, false
	}
	return graph.Event{Type: t, Object: graph.Object{
		Identity: graph.Identity{
			APIVersion: apiVersion, Kind: kind,
			Namespace: m.Namespace, Name: m.Name, UID: m.UID,
		},
		ResourceVersion: m.ResourceVersion,
		OwnerReferences: m.OwnerReferences,
		Finalizers:      m.Finalizers,
		Deleting:        m.DeletionTimestamp != nil,
	}}, true
}

// sameVersion reports whether an update's old and new objects have the same
// resourceVersion (a resync or relist that changed nothing).
func sameVersion(oldObj, newObj any) bool {
	o, ok1 := oldObj.(metav1.Object)
	n, ok2 := newObj.(metav1.Object)
	return ok1 && ok2 && o.GetResourceVersion() == n.GetResourceVersion()
}

// replaced reports whether an update's new object is another object than
// its old one: same namespace and name, other UID. That happens when a
// relist finds an object deleted and re-created while the watch was down;
// the informer reports it as an update, but for kgc the old object is gone
// (and its dependents may be garbage).
func replaced(oldObj, newObj any) bool {
	o, ok1 := oldObj.(metav1.Object)
	n, ok2 := newObj.(metav1.Object)
	return ok1 && ok2 && o.GetUID() != n.GetUID()
}

// interner deduplicates strings that repeat across objects. It is bounded:
// past maxInterned distinct strings, new ones are returned as they are
// (correct, just not shared), so hostile input cannot grow it.
type interner struct {
	mu sync.RWMutex
	m  map[string]string
}

const maxInterned = 1 << 14

// interned is shared by every monitor of the process: its content is
// immutable strings, so sharing it between collectors changes nothing but
// memory.
var interned = &interner{m: make(map[string]string)}

func (in *interner) get(s string) string {
	if s == "" {
		return ""
	}
	in.mu.RLock()
	v, ok := in.m[s]
	in.mu.RUnlock()
	if ok {
		return v
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	if v, ok := in.m[s]; ok {
		return v
	}
	if len(in.m) >= maxInterned {
		return s
	}
	s = strings.Clone(s) // do not pin the decoder's buffer
	in.m[s] = s
	return s
}

// --- metav1.Object ---------------------------------------------------------

func (m *Meta) GetNamespace() string                { return m.Namespace }
func (m *Meta) SetNamespace(ns string)              { m.Namespace = ns }
func (m *Meta) GetName() string                     { return m.Name }
func (m *Meta) SetName(name string)                 { m.Name = name }
func (m *Meta) GetGenerateName() string             { return "" }
func (m *Meta) SetGenerateName(string)              {}
func (m *Meta) GetUID() types.UID                   { return m.UID }
func (m *Meta) SetUID(uid types.UID)                { m.UID = uid }
func (m *Meta) GetResourceVersion() string          { return m.ResourceVersion }
func (m *Meta) SetResourceVersion(rv string)        { m.ResourceVersion = rv }
func (m *Meta) GetGeneration() int64                { return 0 }
func (m *Meta) SetGeneration(int64)                 {}
func (m *Meta) GetSelfLink() string                 { return "" }
func (m *Meta) SetSelfLink(string)                  {}
func (m *Meta) GetCreationTimestamp() metav1.Time   { return metav1.Time{} }
func (m *Meta) SetCreationTimestamp(metav1.Time)    {}
func (m *Meta) GetDeletionTimestamp() *metav1.Time  { return m.DeletionTimestamp }
func (m *Meta) SetDeletionTimestamp(t *metav1.Time) { m.DeletionTimestamp = t }
func (m *Meta) GetDeletionGracePeriodSeconds() *int64 {
	return nil
}
func (m *Meta) SetDeletionGracePeriodSeconds(*int64)          {}
func (m *Meta) GetLabels() map[string]string                  { return nil }
func (m *Meta) SetLabels(map[string]string)                   {}
func (m *Meta) GetAnnotations() map[string]string             { return nil }
func (m *Meta) SetAnnotations(map[string]string)              {}
func (m *Meta) GetFinalizers() []string                       { return m.Finalizers }
func (m *Meta) SetFinalizers(f []string)                      { m.Finalizers = f }
func (m *Meta) GetOwnerReferences() []metav1.OwnerReference   { return m.OwnerReferences }
func (m *Meta) SetOwnerReferences(r []metav1.OwnerReference)  { m.OwnerReferences = r }
func (m *Meta) GetManagedFields() []metav1.ManagedFieldsEntry { return nil }
func (m *Meta) SetManagedFields([]metav1.ManagedFieldsEntry)  {}

// --- runtime.Object --------------------------------------------------------

// GetObjectKind returns an empty kind: a Meta's kind is its monitor's.
func (m *Meta) GetObjectKind() schema.ObjectKind { return schema.EmptyObjectKind }

// DeepCopyObject returns a deep copy.
func (m *Meta) DeepCopyObject() runtime.Object {
	out := *m
	if m.OwnerReferences != nil {
		out.OwnerReferences = make([]metav1.OwnerReference, len(m.OwnerReferences))
		for i := range m.OwnerReferences {
			m.OwnerReferences[i].DeepCopyInto(&out.OwnerReferences[i])
		}
	}
	out.Finalizers = append([]string(nil), m.Finalizers...)
	if m.DeletionTimestamp != nil {
		out.DeletionTimestamp = m.DeletionTimestamp.DeepCopy()
	}
	return &out
}
