package discovery

import (
	"strings"
	"sync"

	"github.com/kgc-dev/kgc/internal/rules"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// leanObject converts one listed or watched object of a monitor's resource
// (apiVersion, kind) into what the graph keeps: exactly the metadata kgc
// decides from (identity, resourceVersion for preconditions, owner
// references, finalizers, deletion), nothing else. The strings that repeat
// across objects (namespaces, owner apiVersions and kinds, finalizers) are
// interned, and the two *bool values of owner references are shared, so
// the decoded object can be dropped as soon as it is converted: the graph
// is the only copy kgc keeps of an object.
func leanObject(pom *metav1.PartialObjectMetadata, apiVersion, kind string) rules.Object {
	o := rules.Object{
		Identity: rules.Identity{
			APIVersion: apiVersion, Kind: kind,
			Namespace: interned.get(pom.Namespace), Name: pom.Name, UID: pom.UID,
		},
		ResourceVersion: pom.ResourceVersion,
		Deleting:        pom.DeletionTimestamp != nil,
	}
	if pom.DeletionTimestamp != nil {
		// A copy: the decoded object is dropped once converted.
		ts := *pom.DeletionTimestamp
		o.DeletionTimestamp = &ts
	}
	if len(pom.OwnerReferences) > 0 {
		o.OwnerReferences = make([]metav1.OwnerReference, len(pom.OwnerReferences))
		for i := range pom.OwnerReferences {
			in, out := &pom.OwnerReferences[i], &o.OwnerReferences[i]
			out.APIVersion = interned.get(in.APIVersion)
			out.Kind = interned.get(in.Kind)
			out.Name, out.UID = in.Name, in.UID
			out.Controller = sharedBool(in.Controller)
			out.BlockOwnerDeletion = sharedBool(in.BlockOwnerDeletion)
		}
	}
	if len(pom.Finalizers) > 0 {
		o.Finalizers = make([]string, len(pom.Finalizers))
		for i, f := range pom.Finalizers {
			o.Finalizers[i] = interned.get(f)
		}
	}
	return o
}

var trueValue, falseValue = true, false

// sharedBool replaces a decoded *bool by one of two shared pointers. Graph
// objects are never mutated in place, so sharing is safe.
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

// getBytes is get for the bytes of a string: a string already interned is
// found without allocating.
func (in *interner) getBytes(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	in.mu.RLock()
	v, ok := in.m[string(b)]
	in.mu.RUnlock()
	if ok {
		return v
	}
	return in.get(string(b))
}
