package sim

import (
	"fmt"
	"slices"
	"sort"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// The reference model: the garbage-collection semantics of
// kube-controller-manager v1.36, written independently of kgc, as a
// function from a server state to the work a collector still owes it. At
// quiescence a correct collector has left none (L1): the final state is a
// fixpoint of the semantics.

// Object is one stored object, as the reference model reads it.
type Object struct {
	Kind Kind
	Meta metav1.ObjectMeta
}

// Snapshot returns the stored objects and the kinds served, sorted.
func (s *Server) Snapshot() ([]Object, []Kind) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var objs []Object
	for k, m := range s.objects {
		objs = append(objs, Object{Kind: *s.kinds[k.gr].Kind, Meta: *m.DeepCopy()})
	}
	sort.Slice(objs, func(i, j int) bool { return objs[i].Meta.UID < objs[j].Meta.UID })
	var kinds []Kind
	for _, r := range s.kinds {
		if r.served && !r.list404 {
			kinds = append(kinds, *r.Kind)
		}
	}
	return objs, kinds
}

type refState int

const (
	refSolid refState = iota
	refWaiting
	refDangling
	refKeep // unresolvable kind, or a cluster-scoped dependent naming a namespaced owner
)

// OwedWork lists what the semantics still asks of a collector in a state:
// empty at a fixpoint.
func OwedWork(objs []Object, kinds []Kind) []string {
	type coord struct {
		group, kind, ns, name string
	}
	byCoord := map[coord]*Object{}
	for i := range objs {
		o := &objs[i]
		byCoord[coord{o.Kind.Group, o.Kind.Kind, o.Meta.Namespace, o.Meta.Name}] = o
	}
	kindOf := func(group, kind string) (Kind, bool) {
		for _, k := range kinds {
			if k.Group == group && k.Kind == kind {
				return k, true
			}
		}
		return Kind{}, false
	}
	state := func(dep *Object, ref metav1.OwnerReference) refState {
		gv, err := schema.ParseGroupVersion(ref.APIVersion)
		if err != nil {
			return refKeep
		}
		k, ok := kindOf(gv.Group, ref.Kind)
		if !ok || !slices.Contains(k.Versions, gv.Version) {
			return refKeep
		}
		ns := ""
		if k.Namespaced {
			if dep.Meta.Namespace == "" {
				return refKeep
			}
			ns = dep.Meta.Namespace
		}
		o := byCoord[coord{k.Group, k.Kind, ns, ref.Name}]
		switch {
		case o == nil || o.Meta.UID != ref.UID:
			return refDangling
		case foreground(&o.Meta):
			return refWaiting
		default:
			return refSolid
		}
	}
	blocking := map[string]bool{} // owners with a blocking dependent
	for i := range objs {
		for _, ref := range objs[i].Meta.OwnerReferences {
			// A reference to itself blocks nothing: a cycle of length one
			// must not keep a Foreground deletion forever.
			if ref.BlockOwnerDeletion != nil && *ref.BlockOwnerDeletion && ref.UID != objs[i].Meta.UID {
				blocking[string(ref.UID)] = true
			}
		}
	}
	var owed []string
	for i := range objs {
		o := &objs[i]
		m := &o.Meta
		name := fmt.Sprintf("%s %s/%s[%s]", o.Kind.Resource, m.Namespace, m.Name, m.UID)
		if m.DeletionTimestamp != nil {
			if slices.Contains(m.Finalizers, metav1.FinalizerOrphanDependents) {
				owed = append(owed, name+": orphan its dependents and remove the orphan finalizer")
			}
			if slices.Contains(m.Finalizers, metav1.FinalizerDeleteDependents) && !blocking[string(m.UID)] {
				self := ""
				if slices.ContainsFunc(m.OwnerReferences, func(r metav1.OwnerReference) bool { return r.UID == m.UID }) {
					self = " (it references itself)"
				}
				owed = append(owed, name+": no blocking dependent left; remove the foregroundDeletion finalizer"+self)
			}
			continue
		}
		if len(m.OwnerReferences) == 0 {
			continue
		}
		var solid, other, keep bool
		for _, ref := range m.OwnerReferences {
			switch state(o, ref) {
			case refSolid:
				solid = true
			case refKeep:
				keep = true
			default:
				other = true
			}
		}
		switch {
		case keep:
		case solid && other:
			owed = append(owed, name+": remove its dangling and waiting ownerReferences")
		case !solid:
			owed = append(owed, name+": every owner is gone or waiting; delete it")
		}
	}
	return owed
}
