package inspect

import (
	"context"
	"fmt"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kgc-dev/kgc/internal/rules"
)

// Step operations of a preview.
const (
	OpDelete          = "delete"           // a DELETE (by you at level 0, by kgc after)
	OpDeleted         = "deleted"          // the object is gone
	OpRemoveFinalizer = "remove-finalizer" // kgc removes foregroundDeletion or orphan
	OpOrphan          = "orphan"           // kgc removes the reference to an orphaning owner
	OpRemoveReference = "remove-reference" // kgc removes a dangling/waiting reference of a kept object
	OpUnblock         = "unblock"          // kgc clears blockOwnerDeletion (cycle breaking)
)

// Step is one thing that happens during the simulated deletion. Steps of
// one level happen in any order, after every step of the level before.
type Step struct {
	Level  int     `json:"level"`
	Op     string  `json:"op"`
	Object *Object `json:"object"`
	Policy string  `json:"policy,omitempty"`
	Detail string  `json:"detail,omitempty"`
}

// Held is an object that stays, and why.
type Held struct {
	Object *Object `json:"object"`
	Why    string  `json:"why"`
}

// Preview answers "what will deleting this remove?".
type Preview struct {
	Target *Object `json:"target"`
	Policy string  `json:"policy"`
	Steps  []Step  `json:"steps"`
	// Deleted: gone once everything settles, in the order they go.
	Deleted []*Object `json:"deleted"`
	// Orphaned: stay, but lose their references to objects of this
	// deletion (the orphan policy, or a kept object's dangling reference).
	Orphaned []*Object `json:"orphaned"`
	// Blocked: stay in deletion (deletionTimestamp set), and why.
	Blocked []Held `json:"blocked"`
	// Kept: dependents that stay untouched, and why.
	Kept []Held `json:"kept"`
}

type simObject struct {
	obj   *Object // mutable copy
	orig  *Object
	gone  bool
	order int
	// static resolutions of references to owners outside the simulation
	static map[types.UID]Resolution
	lost   bool
}

type simulation struct {
	v       View
	rules   rules.Policy
	objs    map[types.UID]*simObject
	order   []types.UID
	steps   []Step
	deleted []*Object
	// byOwner indexes objects by the owner UIDs they reference; references
	// only ever disappear, so an index may hold stale entries, which
	// liveDependents filters.
	byOwner map[types.UID][]*simObject
}

// maxPreviewObjects bounds a preview's closure.
const maxPreviewObjects = 100000

// PreviewDelete simulates `DELETE target` with policy from the current
// state, with the apiserver's and kgc's semantics. It only reads.
func PreviewDelete(ctx context.Context, p rules.Policy, v View, target *Object, policy metav1.DeletionPropagation) (*Preview, error) {
	switch policy {
	case metav1.DeletePropagationBackground, metav1.DeletePropagationForeground, metav1.DeletePropagationOrphan:
	default:
		return nil, fmt.Errorf("unknown cascade %q: want background, foreground or orphan", policy)
	}
	s := &simulation{v: v, rules: p, objs: map[types.UID]*simObject{}}
	if err := s.load(ctx, target); err != nil {
		return nil, err
	}
	s.reindex()
	t := s.objs[target.UID]
	s.apiDelete(0, t, policy, "you delete it")
	for level := 1; level <= 4*len(s.objs)+8; level++ {
		if !s.round(level) {
			break
		}
	}
	return s.result(target, policy), nil
}

func cloneObject(o *Object) *Object {
	c := *o
	c.Finalizers = slices.Clone(o.Finalizers)
	c.OwnerReferences = slices.Clone(o.OwnerReferences)
	for i := range c.OwnerReferences {
		if b := c.OwnerReferences[i].BlockOwnerDeletion; b != nil {
			v := *b
			c.OwnerReferences[i].BlockOwnerDeletion = &v
		}
	}
	return &c
}

// load reads the target and its transitive dependents, and classifies the
// references that point outside of them once.
func (s *simulation) load(ctx context.Context, target *Object) error {
	queue := []*Object{target}
	for len(queue) > 0 {
		o := queue[0]
		queue = queue[1:]
		if _, ok := s.objs[o.UID]; ok {
			continue
		}
		if len(s.objs) >= maxPreviewObjects {
			return fmt.Errorf("more than %d objects depend on %s", maxPreviewObjects, target)
		}
		s.objs[o.UID] = &simObject{obj: cloneObject(o), orig: o, order: len(s.order)}
		s.order = append(s.order, o.UID)
		deps, err := s.v.Dependents(ctx, o)
		if err != nil {
			return err
		}
		queue = append(queue, deps...)
	}
	for _, uid := range s.order {
		so := s.objs[uid]
		so.static = map[types.UID]Resolution{}
		if so.obj.Deleting {
			continue
		}
		for _, ref := range so.obj.OwnerReferences {
			if owner, inside := s.objs[ref.UID]; inside {
				if sameCoordinates(so.obj, ref, owner.obj) {
					continue // follows the simulation
				}
				// Other coordinates: let the view classify it (dangling,
				// invalid, ...).
				r, err := s.v.ResolveOwner(ctx, so.obj, ref)
				if err != nil {
					return err
				}
				if (r.State == rules.Solid || r.State == rules.Waiting) && r.Owner != nil && r.Owner.UID == ref.UID {
					continue // follows the simulation
				}
				so.static[ref.UID] = r
				continue
			}
			r, err := s.v.ResolveOwner(ctx, so.obj, ref)
			if err != nil {
				return err
			}
			so.static[ref.UID] = r
		}
	}
	return nil
}

func (s *simulation) step(level int, op string, so *simObject, policy, detail string) {
	s.steps = append(s.steps, Step{Level: level, Op: op, Object: so.orig, Policy: policy, Detail: detail})
}

// apiDelete is the apiserver's answer to DELETE with policy.
func (s *simulation) apiDelete(level int, so *simObject, policy metav1.DeletionPropagation, why string) {
	o := so.obj
	s.step(level, OpDelete, so, string(policy), why)
	// With an explicit policy the apiserver drops both collector
	// finalizers and adds back the one the policy asks for (also on an
	// object already being deleted).
	o.Finalizers = slices.DeleteFunc(o.Finalizers, func(f string) bool { return f == FinalizerOrphan || f == FinalizerForeground })
	switch policy {
	case metav1.DeletePropagationOrphan:
		o.Finalizers = withFinalizer(o.Finalizers, FinalizerOrphan)
	case metav1.DeletePropagationForeground:
		o.Finalizers = withFinalizer(o.Finalizers, FinalizerForeground)
	}
	o.Deleting = true
	s.maybeGone(level, so)
}

func withFinalizer(fs []string, f string) []string {
	if slices.Contains(fs, f) {
		return fs
	}
	return append(fs, f)
}

func (s *simulation) maybeGone(level int, so *simObject) {
	if so.obj.Deleting && len(so.obj.Finalizers) == 0 && !so.gone {
		so.gone = true
		s.step(level, OpDeleted, so, "", "")
		s.deleted = append(s.deleted, so.orig)
	}
}

// sameCoordinates reports whether ref, a reference of dep, names owner
// exactly: group, kind, name, and the namespace rules of the owner's scope.
func sameCoordinates(dep *Object, ref metav1.OwnerReference, owner *Object) bool {
	gv, err := schema.ParseGroupVersion(ref.APIVersion)
	if err != nil {
		return false
	}
	ogv, _ := schema.ParseGroupVersion(owner.APIVersion)
	if gv.Group != ogv.Group || ref.Kind != owner.Kind || ref.Name != owner.Name || ref.UID != owner.UID {
		return false
	}
	return owner.Namespace == "" || owner.Namespace == dep.Namespace
}

// reindex rebuilds the owner UID -> dependents index from the current
// references.
func (s *simulation) reindex() {
	s.byOwner = map[types.UID][]*simObject{}
	for _, du := range s.order {
		d := s.objs[du]
		for _, r := range d.obj.OwnerReferences {
			if l := s.byOwner[r.UID]; r.UID == du || len(l) > 0 && l[len(l)-1] == d {
				continue // self-reference, or a second reference to one owner
			}
			s.byOwner[r.UID] = append(s.byOwner[r.UID], d)
		}
	}
}

// liveDependents of uid in the simulation's current state.
func (s *simulation) liveDependents(uid types.UID) []*simObject {
	var out []*simObject
	for _, d := range s.byOwner[uid] {
		if d.gone {
			continue
		}
		if slices.ContainsFunc(d.obj.OwnerReferences, func(r metav1.OwnerReference) bool { return r.UID == uid }) {
			out = append(out, d)
		}
	}
	return out
}

func (s *simulation) graphDependents(uid types.UID) []rules.Dependent {
	var out []rules.Dependent
	for _, d := range s.liveDependents(uid) {
		out = append(out, rules.Dependent{UID: d.obj.UID, Blocking: d.obj.blocks(uid), Deleting: d.obj.Deleting, DeletingDependents: d.obj.DeletingDependents()})
	}
	return out
}

// waitsFor is graph.WaitsFor in the simulation's current state.
func (s *simulation) waitsFor(uid types.UID) []types.UID {
	var out []types.UID
	for _, d := range s.liveDependents(uid) {
		if d.obj.UID != uid && d.obj.blocks(uid) {
			out = append(out, d.obj.UID)
		}
	}
	return out
}

// state of one reference in the simulation's current state, by kgc's rules.
func (s *simulation) state(so *simObject, ref metav1.OwnerReference) rules.OwnerState {
	if r, ok := so.static[ref.UID]; ok {
		return r.State
	}
	var f rules.Found
	if owner := s.objs[ref.UID]; owner != nil && !owner.gone {
		f = owner.obj.found()
	}
	st, _ := rules.Classify(ref.UID, f, nil)
	return st
}

type action struct {
	so *simObject
	a  rules.Action
}

// round runs one level of kgc's work on the state the level starts from.
// It reports whether anything changed.
func (s *simulation) round(level int) bool {
	var acts []action
	for _, uid := range s.order {
		so := s.objs[uid]
		o := so.obj
		if so.gone {
			continue
		}
		switch {
		case o.DeletingDependents():
			it := o.item(s.graphDependents(uid))
			if a := rules.DecideForegroundOwner(&it); a.Type == rules.RemoveForegroundFinalizer {
				acts = append(acts, action{so: so, a: a})
			}
		case o.Orphaning():
			var deps []rules.Object
			for _, d := range s.liveDependents(uid) {
				deps = append(deps, d.obj.object())
			}
			acts = append(acts, action{so: so, a: rules.DecideOrphan(&rules.Object{Identity: o.identity(), Finalizers: o.Finalizers, Deleting: true}, deps)})
		case o.Deleting || len(o.OwnerReferences) == 0:
		default:
			states := make([]rules.OwnerState, len(o.OwnerReferences))
			for i, ref := range o.OwnerReferences {
				states[i] = s.state(so, ref)
			}
			it := o.item(s.graphDependents(uid))
			a := s.rules.DecideDependent(&it, states, rules.CycleCheck(uid, s.waitsFor))
			if a.Type == rules.RemoveReferences || a.Type == rules.DeleteItem {
				acts = append(acts, action{so: so, a: a})
			}
		}
	}
	for _, act := range acts {
		so, o := act.so, act.so.obj
		switch {
		case act.a.Type == rules.OrphanDependents:
			// kgc patches every dependent, then (deciding again at once)
			// removes the finalizer: one level.
			for _, or := range act.a.Orphan {
				d := s.objs[or.Dependent.Identity.UID]
				d.obj.OwnerReferences = slices.DeleteFunc(d.obj.OwnerReferences, func(r metav1.OwnerReference) bool { return r.UID == o.UID })
				d.lost = true
				s.step(level, OpOrphan, d, "", "reference to "+so.orig.Ref()+" removed")
			}
			fallthrough
		case act.a.Type == rules.RemoveOrphanFinalizer:
			o.Finalizers = rules.WithoutFinalizer(o.Finalizers, FinalizerOrphan)
			s.step(level, OpRemoveFinalizer, so, "", FinalizerOrphan)
			s.maybeGone(level, so)
		case act.a.Type == rules.RemoveForegroundFinalizer:
			o.Finalizers = act.a.Finalizers
			s.step(level, OpRemoveFinalizer, so, "", FinalizerForeground)
			s.maybeGone(level, so)
		case act.a.Type == rules.RemoveReferences:
			var removed []string
			for _, r := range o.OwnerReferences {
				if !slices.ContainsFunc(act.a.Refs, func(k metav1.OwnerReference) bool { return k.UID == r.UID }) {
					removed = append(removed, kindGroup(r.APIVersion, r.Kind)+"/"+r.Name)
				}
			}
			o.OwnerReferences = slices.Clone(act.a.Refs)
			so.lost = true
			s.step(level, OpRemoveReference, so, "", "kept by a live owner; reference(s) to "+strings.Join(removed, ", ")+" removed")
		case act.a.Type == rules.DeleteItem:
			if act.a.Unblock {
				o.OwnerReferences = cloneObject(&Object{OwnerReferences: act.a.Refs}).OwnerReferences
				s.step(level, OpUnblock, so, "", "blockOwnerDeletion cleared to break a cycle")
			}
			s.apiDelete(level, so, act.a.Policy, "kgc: no owner is alive")
		}
	}
	return len(acts) > 0
}

func (s *simulation) result(target *Object, policy metav1.DeletionPropagation) *Preview {
	p := &Preview{Target: target, Policy: string(policy), Steps: s.steps, Deleted: s.deleted}
	for _, uid := range s.order {
		so := s.objs[uid]
		if so.gone {
			continue
		}
		o := so.obj
		if so.lost {
			p.Orphaned = append(p.Orphaned, so.orig)
		}
		switch {
		case o.DeletingDependents():
			var ws []string
			for _, d := range s.liveDependents(uid) {
				if d.obj.blocks(uid) {
					ws = append(ws, d.orig.String())
				}
			}
			why := "waits for blocking dependent(s) " + strings.Join(ws, ", ")
			if c := o.CustomFinalizers(); len(c) > 0 {
				why += "; and for finalizer(s) " + strings.Join(c, ", ") + ": " + unhandledNote
			}
			p.Blocked = append(p.Blocked, Held{Object: so.orig, Why: why})
		case o.Deleting && len(o.CustomFinalizers()) > 0:
			p.Blocked = append(p.Blocked, Held{Object: so.orig, Why: "held by finalizer(s) " + strings.Join(o.CustomFinalizers(), ", ") + ": " + unhandledNote})
		case o.Deleting:
			p.Blocked = append(p.Blocked, Held{Object: so.orig, Why: "held by finalizer(s) " + strings.Join(o.Finalizers, ", ")})
		default:
			p.Kept = append(p.Kept, Held{Object: so.orig, Why: s.keptWhy(so)})
		}
	}
	if p.Deleted == nil {
		p.Deleted = []*Object{}
	}
	if p.Orphaned == nil {
		p.Orphaned = []*Object{}
	}
	return p
}

func (s *simulation) keptWhy(so *simObject) string {
	if len(so.obj.OwnerReferences) > 0 {
		states := make([]rules.OwnerState, len(so.obj.OwnerReferences))
		for i, ref := range so.obj.OwnerReferences {
			states[i] = s.state(so, ref)
		}
		it := so.obj.item(s.graphDependents(so.obj.UID))
		if a := s.rules.DecideDependent(&it, states, nil); a.Why != "" {
			return "kept by keep-rule " + a.Why
		}
	}
	var solid, other []string
	for _, ref := range so.obj.OwnerReferences {
		name := kindGroup(ref.APIVersion, ref.Kind) + "/" + ref.Name
		switch st := s.state(so, ref); st {
		case rules.Solid:
			solid = append(solid, name)
		default:
			other = append(other, name+" ("+st.String()+")")
		}
	}
	switch {
	case len(solid) > 0:
		return "has a live owner: " + strings.Join(solid, ", ")
	case len(so.obj.OwnerReferences) == 0:
		return "no owner references left"
	}
	return "kgc keeps it: " + strings.Join(other, ", ")
}
