package sim

import (
	"fmt"
	"slices"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// World sizes and the features a random schedule may use.
type World struct {
	Objects int // initial objects
	Steps   int // scheduler steps before healing
	// Features a schedule may draw; zero value: none of the optional ones.
	Faults      bool // 429/500 on collector calls
	LateStart   bool // deletions before the collector starts, first LISTs failing
	MultiOrphan bool // several owners of one dependent deleted with Orphan
	Annotator   bool // a client patching one object all the time
	Cycles      bool // self references
	Restarts    bool
	Discovery   bool // version switches, CRD-like resources deleted and recreated
	Expiry      bool // watches dropped with 410
	Down        bool // resources whose LIST fails for a long time
}

// AllFeatures is a World with every feature on.
func AllFeatures(objects, steps int) World {
	return World{Objects: objects, Steps: steps, Faults: true, LateStart: true, MultiOrphan: true,
		Annotator: true, Cycles: true, Restarts: true, Discovery: true, Expiry: true, Down: true}
}

// Outcome is one random schedule's result.
type Outcome struct {
	Seed       uint64
	Violations []Violation
	Owed       []string // L1: work left at quiescence
	Err        error    // the harness failed (a collector that never quiesced)
	Steps      int
	// DiscoveryChanged: the schedule switched a preferred version or
	// deleted a CRD-like resource.
	DiscoveryChanged bool
}

// Failed reports whether the schedule broke the contract or the harness.
func (o *Outcome) Failed() bool { return len(o.Violations) > 0 || len(o.Owed) > 0 || o.Err != nil }

// Focus returns the UIDs named in the outcome's violations and owed work,
// for a trace restricted to the objects involved.
func (o *Outcome) Focus() []string {
	var out []string
	add := func(s string) {
		for _, f := range strings.FieldsFunc(s, func(r rune) bool { return r == '[' || r == ']' || r == ' ' }) {
			if strings.Count(f, "-") == 1 && !slices.Contains(out, f) && len(f) < 40 {
				out = append(out, f)
			}
		}
	}
	for _, v := range o.Violations {
		add(v.Detail)
	}
	for _, w := range o.Owed {
		add(w)
	}
	return out
}

func (o *Outcome) String() string {
	return fmt.Sprintf("seed %d: violations %v; owed work %v; err %v", o.Seed, o.Violations, o.Owed, o.Err)
}

type rs struct {
	*Sim
	w        World
	annotate Obj
	hasAnnot bool
	nameSeq  int
}

var objectGRs = []schema.GroupResource{ConfigMaps, Deployments, ReplicaSets, Jobs, ClusterRoles, Widgets, Gadgets}

// RunRandom runs one random schedule drawn from seed and returns the
// simulation (for its trace) and the outcome. The collector is stopped.
func RunRandom(seed uint64, w World) (*Sim, *Outcome) {
	s := &rs{Sim: New(seed), w: w}
	out := &Outcome{Seed: seed}
	out.Err = s.run()
	if err := s.Stop(); err != nil && out.Err == nil {
		out.Err = err
	}
	out.Violations = s.Violations()
	if out.Err == nil && len(out.Violations) == 0 {
		out.Owed = s.Check()
	}
	out.Steps = len(s.steps)
	for _, st := range s.steps {
		if strings.Contains(st, "preferred version") || strings.Contains(st, "deleted (still in discovery") {
			out.DiscoveryChanged = true
		}
	}
	return s.Sim, out
}

func (s *rs) chance(p float64) bool { return s.rng.Float64() < p }

// live returns the stored objects, optionally only those not deleting.
func (s *rs) live(notDeleting bool) []Object {
	objs, _ := s.Srv.Snapshot()
	if !notDeleting {
		return objs
	}
	return slices.DeleteFunc(objs, func(o Object) bool { return o.Meta.DeletionTimestamp != nil })
}

func handle(o Object) Obj {
	return Obj{GR: o.Kind.GR(), Namespace: o.Meta.Namespace, Name: o.Meta.Name, UID: o.Meta.UID}
}

// createRandom creates one object with up to two owners among the live
// ones, as the scope rules allow.
func (s *rs) createRandom() error {
	gr := objectGRs[s.rng.IntN(len(objectGRs))]
	k := s.Srv.KindOf(gr)
	ns := ""
	if k.Namespaced {
		ns = []string{"a", "b"}[s.rng.IntN(2)]
	}
	var cands []Object
	for _, o := range s.live(true) {
		if !o.Kind.Namespaced || (k.Namespaced && o.Meta.Namespace == ns) {
			cands = append(cands, o)
		}
	}
	nrefs := 0
	if len(cands) > 0 {
		nrefs = []int{0, 1, 1, 1, 2, 2}[s.rng.IntN(6)]
	}
	var refs []metav1.OwnerReference
	for range nrefs {
		o := cands[s.rng.IntN(len(cands))]
		if slices.ContainsFunc(refs, func(r metav1.OwnerReference) bool { return r.UID == o.Meta.UID }) {
			continue
		}
		ref := Ref(&o.Kind, &o.Meta, s.chance(0.5))
		if len(o.Kind.Versions) > 1 && s.chance(0.3) {
			ref.APIVersion = schema.GroupVersion{Group: o.Kind.Group, Version: o.Kind.Versions[s.rng.IntN(len(o.Kind.Versions))]}.String()
		}
		refs = append(refs, ref)
	}
	var fins []string
	if s.chance(0.12) {
		fins = []string{Finalizer}
	}
	s.nameSeq++
	o, err := s.Create(gr, ns, fmt.Sprintf("o%d", s.nameSeq), fins, refs...)
	if err != nil {
		return nil // the resource is not served right now
	}
	if s.w.Cycles && s.chance(0.04) {
		return s.Patch(o, "self reference", map[string]any{"ownerReferences": append(refs, s.OwnerRef(o, true))})
	}
	return nil
}

func (s *rs) randomPolicy() metav1.DeletionPropagation {
	return []metav1.DeletionPropagation{"", metav1.DeletePropagationBackground, metav1.DeletePropagationForeground, metav1.DeletePropagationOrphan}[s.rng.IntN(4)]
}

// deleteRandom deletes a live object; without MultiOrphan, an object is
// never deleted with Orphan while another owner of one of its dependents
// is orphaning (issue 14 item 1).
func (s *rs) deleteRandom() error {
	objs := s.live(true)
	if len(objs) == 0 {
		return nil
	}
	o := objs[s.rng.IntN(len(objs))]
	p := s.randomPolicy()
	if o.Kind.DefaultOrphan && p == "" {
		p = metav1.DeletePropagationOrphan
	}
	if !s.w.MultiOrphan && p == metav1.DeletePropagationOrphan && s.sharesDependentWithOrphaning(o) {
		p = metav1.DeletePropagationBackground
	}
	return s.Delete(handle(o), p)
}

func (s *rs) sharesDependentWithOrphaning(owner Object) bool {
	all := s.live(false)
	orphaning := map[string]bool{}
	for _, o := range all {
		if o.Meta.DeletionTimestamp != nil {
			orphaning[string(o.Meta.UID)] = true // any deleting owner counts: keep it simple
		}
	}
	for _, d := range all {
		mine, other := false, false
		for _, r := range d.Meta.OwnerReferences {
			if r.UID == owner.Meta.UID {
				mine = true
			} else if orphaning[string(r.UID)] || len(d.Meta.OwnerReferences) > 1 {
				other = true
			}
		}
		if mine && other {
			return true
		}
	}
	return false
}

func (s *rs) editRefs() error {
	objs := s.live(true)
	if len(objs) == 0 {
		return nil
	}
	o := objs[s.rng.IntN(len(objs))]
	refs := slices.Clone(o.Meta.OwnerReferences)
	if len(refs) > 0 && s.chance(0.5) {
		i := s.rng.IntN(len(refs))
		refs = slices.Delete(refs, i, i+1)
	} else {
		var cands []Object
		for _, c := range objs {
			if c.Meta.UID != o.Meta.UID && (!c.Kind.Namespaced || (o.Kind.Namespaced && c.Meta.Namespace == o.Meta.Namespace)) &&
				!slices.ContainsFunc(refs, func(r metav1.OwnerReference) bool { return r.UID == c.Meta.UID }) {
				cands = append(cands, c)
			}
		}
		if len(cands) == 0 {
			return nil
		}
		c := cands[s.rng.IntN(len(cands))]
		refs = append(refs, Ref(&c.Kind, &c.Meta, s.chance(0.5)))
	}
	if refs == nil {
		refs = []metav1.OwnerReference{}
	}
	return s.Patch(handle(o), "set ownerReferences "+refsString(refs), map[string]any{"ownerReferences": refs})
}

func (s *rs) removeFinalizer() error {
	var held []Object
	for _, o := range s.live(false) {
		if slices.Contains(o.Meta.Finalizers, Finalizer) {
			held = append(held, o)
		}
	}
	if len(held) == 0 {
		return nil
	}
	o := held[s.rng.IntN(len(held))]
	fins := slices.DeleteFunc(slices.Clone(o.Meta.Finalizers), func(f string) bool { return f == Finalizer })
	if fins == nil {
		fins = []string{}
	}
	return s.Patch(handle(o), "remove foreign finalizer", map[string]any{"finalizers": fins})
}

func (s *rs) run() error {
	if s.w.Faults && s.chance(0.5) {
		s.FaultRate = []float64{0.02, 0.1, 0.25}[s.rng.IntN(3)]
	}
	for range s.w.Objects {
		if err := s.createRandom(); err != nil {
			return err
		}
	}
	if s.w.Annotator && s.chance(0.4) {
		if objs := s.live(true); len(objs) > 0 {
			s.annotate, s.hasAnnot = handle(objs[s.rng.IntN(len(objs))]), true
		}
	}
	if s.w.LateStart && s.chance(0.3) {
		for range 1 + s.rng.IntN(3) {
			if err := s.deleteRandom(); err != nil {
				return err
			}
		}
		if s.chance(0.5) {
			s.FailLists(objectGRs[s.rng.IntN(len(objectGRs))], 1+s.rng.IntN(2))
		}
	}
	if err := s.Start(); err != nil {
		return err
	}
	if err := s.Settle(); err != nil {
		return err
	}
	for range s.w.Steps {
		if err := s.step(); err != nil {
			return err
		}
		if err := s.Settle(); err != nil {
			return err
		}
		if len(s.Violations()) > 0 {
			return nil
		}
	}
	s.Heal()
	return s.Quiesce(2 * time.Hour)
}

// step draws one scheduler step.
func (s *rs) step() error {
	type choice struct {
		weight int
		do     func() error
	}
	choices := []choice{
		{30, func() error {
			p := s.Srv.Pending()
			if len(p) == 0 {
				return nil
			}
			return s.Deliver(p[s.rng.IntN(len(p))])
		}},
		{4, s.DeliverAll},
		{12, s.deleteRandom},
		{6, s.createRandom},
		{5, s.removeFinalizer},
		{5, s.editRefs},
		{8, func() error {
			return s.Advance([]time.Duration{time.Millisecond, time.Second, 30 * time.Second}[s.rng.IntN(3)])
		}},
	}
	if s.hasAnnot {
		choices = append(choices, choice{10, func() error { return s.Annotate(s.annotate) }})
	}
	if s.w.Expiry {
		choices = append(choices, choice{3, func() error { return s.Expire(objectGRs[s.rng.IntN(len(objectGRs))]) }})
	}
	if s.w.Restarts {
		choices = append(choices, choice{1, func() error { s.Step("restart collector"); return s.Restart() }})
	}
	if s.w.Down {
		choices = append(choices, choice{2, func() error {
			gr := objectGRs[s.rng.IntN(len(objectGRs))]
			s.SetDown(gr, s.chance(0.6))
			return nil
		}})
	}
	if s.w.Discovery {
		choices = append(choices, choice{2, func() error {
			switch s.rng.IntN(4) {
			case 0:
				s.SwitchVersion(Widgets, []string{"v1", "v2"}[s.rng.IntN(2)])
			case 1:
				// As kube-apiserver does after a CRD is deleted: the
				// resource stays in discovery while its LIST answers 404
				// (it leaves discovery at the next heal). The sim has no
				// CRD objects, so a resource leaving discovery at once
				// looks to kgc like a vanished aggregated API, whose
				// objects kgc keeps (discovery.Monitors: only resources a
				// CRD served are swept when they vanish).
				s.Unserve(Gadgets, true)
			default:
				s.Serve(Gadgets)
			}
			return nil
		}})
	}
	total := 0
	for _, c := range choices {
		total += c.weight
	}
	n := s.rng.IntN(total)
	for _, c := range choices {
		if n < c.weight {
			return c.do()
		}
		n -= c.weight
	}
	return nil
}
