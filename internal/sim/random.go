package sim

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/kgc-dev/kgc/internal/breaker"
	"github.com/kgc-dev/kgc/internal/collector"
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
	HoldLists   bool // resources whose LIST pages are held (a first list not finished)
	// Streaming: each collector started lists by streaming or by pages
	// (drawn per start), and streaming lists fail (FailStream).
	Streaming bool
	// LostAnswers: collector writes that land are answered with a
	// timeout, a 5xx or a broken connection (drawn per schedule).
	LostAnswers bool
	// Configure, when set, adjusts every collector's config (Sim.Configure):
	// a test that switches a fix off through a config knob.
	Configure func(*collector.Config)
	// Breaker, when set, runs every collector with the deletion breaker
	// (Sim.SetBreaker): every trip is a violation.
	Breaker *breaker.Config
}

// AllFeatures is a World with every feature on.
func AllFeatures(objects, steps int) World {
	return World{Objects: objects, Steps: steps, Faults: true, LostAnswers: true, LateStart: true, MultiOrphan: true,
		Annotator: true, Cycles: true, Restarts: true, Discovery: true, Expiry: true, Down: true, HoldLists: true,
		Streaming: true}
}

// Outcome is one random schedule's result.
type Outcome struct {
	Seed       uint64
	Violations []Violation
	// Limits are the instances of documented limits the schedule hit
	// (Violation.Limit): not failures.
	Limits []Violation
	Owed   []string // L1: work left at quiescence
	Err    error    // the harness failed (a collector that never quiesced)
	Steps  int
	// DiscoveryChanged: the schedule switched a preferred version or
	// deleted a CRD-like resource.
	DiscoveryChanged bool
	// LostAnswers: how many answers to the collector's writes that landed
	// were lost (Sim.LostAnswerRate).
	LostAnswers int
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
	annotate objKey
	hasAnnot bool
	nameSeq  int
}

var objectGRs = []schema.GroupResource{ConfigMaps, Deployments, ReplicaSets, Jobs, ClusterRoles, Widgets, Gadgets}

// RunRandom runs one random schedule drawn from seed and returns the
// simulation (for its trace and its schedule, Actions) and the outcome.
// The collector is stopped.
func RunRandom(seed uint64, w World) (*Sim, *Outcome) {
	s := &rs{Sim: newSim(seed, w), w: w}
	out := &Outcome{Seed: seed}
	out.Err = s.run()
	s.finish(out)
	return s.Sim, out
}

func newSim(seed uint64, w World) *Sim {
	s := New(seed)
	s.Configure = w.Configure
	if w.Breaker != nil {
		s.SetBreaker(*w.Breaker)
	}
	if w.Discovery {
		// A CRD-like resource deleted and served again is a CRD deleted
		// and created again, which kgc watches.
		s.ModelCRDs()
	}
	return s
}

// finish stops the collector and fills in the outcome.
func (s *Sim) finish(out *Outcome) {
	if err := s.Stop(); err != nil && out.Err == nil {
		out.Err = err
	}
	out.Violations = s.Violations()
	out.Limits = s.Limits()
	if out.Err == nil && len(out.Violations) == 0 {
		out.Owed = s.Check()
	}
	s.mu.Lock()
	out.Steps = len(s.steps)
	out.LostAnswers = s.lostAnswers
	for _, st := range s.steps {
		if strings.Contains(st, "preferred version") || strings.Contains(st, "deleted (still in discovery") {
			out.DiscoveryChanged = true
		}
	}
	s.mu.Unlock()
}

func (s *rs) chance(p float64) bool { return s.rng.Float64() < p }

// live returns the stored objects, optionally only those not deleting.
func (s *rs) live(notDeleting bool) []Object {
	objs, _ := s.Srv.Snapshot()
	// CRDs (modeled with the breaker) are nobody's owner or dependent.
	objs = slices.DeleteFunc(objs, func(o Object) bool { return o.Kind.GR() == CRDs })
	if !notDeleting {
		return objs
	}
	return slices.DeleteFunc(objs, func(o Object) bool { return o.Meta.DeletionTimestamp != nil })
}

// on returns an action of op on o.
func on(op string, o Object) Action {
	return Action{Op: op, GR: o.Kind.GR(), Namespace: o.Meta.Namespace, Name: o.Meta.Name}
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
	var refs []RefSpec
	var uids []string
	for range nrefs {
		o := cands[s.rng.IntN(len(cands))]
		if slices.Contains(uids, string(o.Meta.UID)) {
			continue
		}
		uids = append(uids, string(o.Meta.UID))
		ref := RefSpec{GR: o.Kind.GR(), Name: o.Meta.Name, Block: s.chance(0.5)}
		if len(o.Kind.Versions) > 1 && s.chance(0.3) {
			if v := o.Kind.Versions[s.rng.IntN(len(o.Kind.Versions))]; v != o.Kind.Preferred {
				ref.Version = v
			}
		}
		refs = append(refs, ref)
	}
	var fins []string
	if s.chance(0.12) {
		fins = []string{Finalizer}
	}
	s.nameSeq++
	a := Action{Op: OpCreate, GR: gr, Namespace: ns, Name: fmt.Sprintf("o%d", s.nameSeq), Finalizers: fins, Refs: refs}
	if err := s.Apply(a); err != nil {
		return err
	}
	if _, ok := s.handleOf(a.key()); !ok {
		return nil // the resource is not served right now
	}
	if s.w.Cycles && s.chance(0.04) {
		self := Action{Op: OpSetRefs, GR: gr, Namespace: ns, Name: a.Name,
			Refs: append(slices.Clone(refs), RefSpec{GR: gr, Name: a.Name, Block: true})}
		return s.Apply(self)
	}
	return nil
}

func (s *rs) randomPolicy() metav1.DeletionPropagation {
	return []metav1.DeletionPropagation{"", metav1.DeletePropagationBackground, metav1.DeletePropagationForeground, metav1.DeletePropagationOrphan}[s.rng.IntN(4)]
}

// deleteRandom deletes a live object; without MultiOrphan, an object is
// never deleted with Orphan while another owner of one of its dependents
// is orphaning (TestTwoOwnersOrphanOneDependent's schedule).
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
	a := on(OpDelete, o)
	a.Policy = p
	return s.Apply(a)
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
	a := on(OpSetRefs, o)
	a.Refs = s.refSpecs(refs)
	return s.Apply(a)
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
	return s.Apply(on(OpUnhold, held[s.rng.IntN(len(held))]))
}

func (s *rs) run() error {
	if s.w.Faults && s.chance(0.5) {
		if err := s.Apply(Action{Op: OpFaults, Rate: []float64{0.02, 0.1, 0.25}[s.rng.IntN(3)]}); err != nil {
			return err
		}
	}
	if s.w.LostAnswers {
		if rate := lostAnswerRate(s.Seed); rate > 0 {
			if err := s.Apply(Action{Op: OpLostAnswers, Rate: rate}); err != nil {
				return err
			}
		}
	}
	for range s.w.Objects {
		if err := s.createRandom(); err != nil {
			return err
		}
	}
	if s.w.Annotator && s.chance(0.4) {
		if objs := s.live(true); len(objs) > 0 {
			s.annotate, s.hasAnnot = on(OpAnnotate, objs[s.rng.IntN(len(objs))]).key(), true
		}
	}
	if s.w.LateStart && s.chance(0.3) {
		for range 1 + s.rng.IntN(3) {
			if err := s.deleteRandom(); err != nil {
				return err
			}
		}
		if s.chance(0.5) {
			gr := objectGRs[s.rng.IntN(len(objectGRs))]
			if err := s.Apply(Action{Op: OpFailLists, GR: gr, N: 1 + s.rng.IntN(2)}); err != nil {
				return err
			}
		}
	}
	if s.w.HoldLists && s.chance(0.2) {
		// A first list that does not finish: the collector starts with a
		// resource listing (its dependents park, negative facts wait).
		gr := objectGRs[s.rng.IntN(len(objectGRs))]
		if err := s.Apply(Action{Op: OpHoldList, GR: gr, Hold: true}); err != nil {
			return err
		}
	}
	stream := s.drawStream()
	if stream && s.chance(0.4) {
		// A first streaming list that fails (the monitor falls back to
		// pages).
		if err := s.failStream(); err != nil {
			return err
		}
	}
	if err := s.Apply(Action{Op: OpStart, Stream: stream}); err != nil {
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
	return s.heal()
}

// heal ends a schedule: a collector runs (a shrunk schedule may have left
// out its start), every fault heals, and the simulation runs to
// quiescence.
func (s *Sim) heal() error {
	if s.coll == nil {
		s.Step("start collector (the schedule has none running; %s)", s.listsBy())
		if err := s.Start(); err != nil {
			return err
		}
		if err := s.Settle(); err != nil {
			return err
		}
	}
	s.Heal()
	return s.Quiesce(2 * time.Hour)
}

// lostAnswerRate draws the rate of lost answers of a schedule (0 for half
// of them) from its own stream of the seed, so that a seed's other draws,
// and the schedules seeds named before this fault existed, stay as they
// were.
func lostAnswerRate(seed uint64) float64 {
	r := rand.New(rand.NewPCG(seed, 0x6c6f7374616e7377)) // "lostansw"
	if r.Float64() < 0.5 {
		return 0
	}
	return []float64{0.05, 0.15, 0.3}[r.IntN(3)]
}

// drawStream draws whether a collector being started lists by streaming.
func (s *rs) drawStream() bool { return s.w.Streaming && s.chance(0.5) }

// failStream makes the next streaming list of a resource fail in one of
// the ways StreamFaults names, after up to 4 of its objects (the pages of
// the collector's paged lists hold 3).
func (s *rs) failStream() error {
	gr := objectGRs[s.rng.IntN(len(objectGRs))]
	f := StreamFaults[s.rng.IntN(len(StreamFaults))]
	return s.Apply(Action{Op: OpFailStream, GR: gr, Fault: f, N: s.rng.IntN(5)})
}

// deliverAll delivers every pending event as DeliverAll does, one action
// each.
func (s *rs) deliverAll() error {
	for range 10000 {
		p := s.Srv.Pending()
		if len(p) == 0 {
			return nil
		}
		if err := s.Apply(Action{Op: OpDeliver, GR: p[s.rng.IntN(len(p))]}); err != nil {
			return err
		}
	}
	return errors.New("watch events keep coming")
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
			return s.Apply(Action{Op: OpDeliver, GR: p[s.rng.IntN(len(p))]})
		}},
		{4, s.deliverAll},
		{12, s.deleteRandom},
		{6, s.createRandom},
		{5, s.removeFinalizer},
		{5, s.editRefs},
		{8, func() error {
			return s.Apply(Action{Op: OpAdvance, D: []time.Duration{time.Millisecond, time.Second, 30 * time.Second}[s.rng.IntN(3)]})
		}},
	}
	if s.hasAnnot {
		choices = append(choices, choice{10, func() error {
			return s.Apply(Action{Op: OpAnnotate, GR: s.annotate.gr, Namespace: s.annotate.namespace, Name: s.annotate.name})
		}})
	}
	if s.w.Expiry {
		choices = append(choices, choice{3, func() error {
			return s.Apply(Action{Op: OpExpire, GR: objectGRs[s.rng.IntN(len(objectGRs))]})
		}})
	}
	if s.w.Restarts {
		choices = append(choices, choice{1, func() error { return s.Apply(Action{Op: OpRestart, Stream: s.drawStream()}) }})
	}
	if s.w.Down {
		choices = append(choices, choice{2, func() error {
			gr := objectGRs[s.rng.IntN(len(objectGRs))]
			return s.Apply(Action{Op: OpDown, GR: gr, Down: s.chance(0.6)})
		}})
	}
	if s.w.HoldLists {
		// Holding has an effect on a resource's next LIST: after a
		// restart, an expired watch, a CRD served again.
		choices = append(choices, choice{2, func() error {
			gr := objectGRs[s.rng.IntN(len(objectGRs))]
			return s.Apply(Action{Op: OpHoldList, GR: gr, Hold: s.chance(0.5)})
		}})
		// Time passing in one step, so that --unlisted-hold (1m) expires
		// within a schedule: a held finalizer released, a stalled list's
		// parked dependents read.
		choices = append(choices, choice{2, func() error {
			return s.Apply(Action{Op: OpJump, D: []time.Duration{40 * time.Second, 90 * time.Second}[s.rng.IntN(2)]})
		}})
	}
	if s.w.Streaming {
		// Has an effect on a resource's next streaming list: after a
		// restart, an expired watch, a CRD served again.
		choices = append(choices, choice{2, s.failStream})
	}
	if s.w.Discovery {
		choices = append(choices, choice{2, func() error {
			switch s.rng.IntN(4) {
			case 0:
				return s.Apply(Action{Op: OpVersion, GR: Widgets, Version: []string{"v1", "v2"}[s.rng.IntN(2)]})
			case 1:
				// As kube-apiserver does after a CRD is deleted: the
				// resource stays in discovery while its LIST answers 404
				// (it leaves discovery at the next heal). The sim has no
				// CRD objects, so a resource leaving discovery at once
				// looks to kgc like a vanished aggregated API, whose
				// objects kgc keeps (discovery.Monitors: only resources a
				// CRD served are swept when they vanish).
				return s.Apply(Action{Op: OpUnserve, GR: Gadgets})
			default:
				return s.Apply(Action{Op: OpServe, GR: Gadgets})
			}
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
