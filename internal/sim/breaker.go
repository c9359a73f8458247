package sim

import (
	"context"
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/kgc-dev/kgc/internal/breaker"
)

// The deletion breaker in the simulator.
//
// The simulated world has no fault the breaker exists for: no rollback of
// the store (resourceVersions, UIDs and deletionTimestamps are monotonic)
// and no API answering wrongly (a LIST answers what the store holds, or
// 404 for a deleted CRD-like resource, or an error). So with the breaker
// on (Sim.Breaker), every trip is a violation (RuleBreaker): the random
// schedules measure how precise its signals are against ordinary
// operation, under every interleaving they draw.
//
// kube-apiserver deletes a CRD's instances only once the CRD is being
// deleted, and answers its LIST 404 only once the CRD is gone: kgc reads
// the CRD's deletion as the explanation of its instances' going
// (graph.Vanish.CRD). A Sim with the breaker therefore models the two
// CRD-like resources' CustomResourceDefinitions as objects of a resource
// kgc monitors (CRDs): Unserve marks the CRD deleting (the
// customresourcecleanup finalizer), deletes the instances, then the CRD;
// Serve creates a new CRD of the same name. They are no owner or
// dependent of anything, and the random schedules never touch them
// otherwise.

// RuleBreaker is the rule a trip of the deletion breaker breaks in the
// simulator (Violation.Rule).
const RuleBreaker = "breaker"

// CRDs is the resource of CustomResourceDefinitions (modeled only in a
// Sim with the breaker; see above).
var CRDs = schema.GroupResource{Group: "apiextensions.k8s.io", Resource: "customresourcedefinitions"}

// crdFinalizer is the finalizer kube-apiserver's CRD cleanup keeps on a
// CRD while it deletes the instances.
const crdFinalizer = "customresourcecleanup.apiextensions.k8s.io"

// crdNames are the CRDs of the CRD-like resources: <plural>.<group>.
var crdNames = map[schema.GroupResource]string{Widgets: "widgets.example.com", Gadgets: "gadgets.gadgets.example.org"}

// SetBreaker runs every collector Start starts with a deletion breaker of
// cfg (its clock the Sim's), reports every trip as a violation, and
// models the CRD-like resources' CRDs (ModelCRDs). Call it before the
// first Start and before objects are created.
func (s *Sim) SetBreaker(cfg breaker.Config) {
	cfg.Clock = s.Clock
	s.Breaker = &cfg
	s.crdReadFailed = map[string]bool{}
	inner := s.Srv.Fault
	s.Srv.Fault = func(c Call) error {
		err := inner(c)
		if c.Actor == ActorKGC && c.Verb == "get" && c.Resource == CRDs {
			s.mu.Lock()
			s.crdReadFailed[c.Name] = err != nil
			s.mu.Unlock()
		}
		return err
	}
	s.ModelCRDs()
}

// ModelCRDs models the CRD-like resources' CRDs as objects of a resource
// kgc monitors (see above). Call it before the first Start and before
// objects are created; calling it again does nothing.
func (s *Sim) ModelCRDs() {
	s.Srv.mu.Lock()
	if s.Srv.modelsCRDs() {
		s.Srv.mu.Unlock()
		return
	}
	s.Srv.kinds[CRDs] = &resource{Kind: &Kind{Group: CRDs.Group, Resource: CRDs.Resource, Kind: "CustomResourceDefinition",
		Versions: []string{"v1"}, Preferred: "v1"}, served: true}
	s.Srv.mu.Unlock()
	s.mapper.Reset()
	for _, gr := range []schema.GroupResource{Widgets, Gadgets} {
		s.createCRD(gr)
	}
}

// modelsCRDs reports whether the CRD-like resources have CRD objects.
func (s *Server) modelsCRDs() bool { return s.kinds[CRDs] != nil }

// createCRD creates gr's CRD if it is modeled and does not exist.
func (s *Sim) createCRD(gr schema.GroupResource) {
	s.Srv.mu.Lock()
	exists := !s.Srv.modelsCRDs() || s.Srv.objects[objKey{gr: CRDs, name: crdNames[gr]}] != nil
	s.Srv.mu.Unlock()
	if exists {
		return
	}
	if _, err := s.Srv.Create(CRDs, metav1.ObjectMeta{Name: crdNames[gr]}); err != nil {
		panic(err) // the CRD resource is always served
	}
}

// deleteCRD starts (done false: the CRD is marked deleting, kept by the
// cleanup finalizer) or ends (done true: the CRD goes) the deletion of
// gr's CRD, if it is modeled and exists. Caller holds s.Srv.mu.
func (s *Sim) deleteCRD(gr schema.GroupResource, done bool) {
	k := objKey{gr: CRDs, name: crdNames[gr]}
	cur := s.Srv.objects[k]
	if !s.Srv.modelsCRDs() || cur == nil {
		return
	}
	m := cur.DeepCopy()
	if done {
		m.Finalizers = slices.DeleteFunc(m.Finalizers, func(f string) bool { return f == crdFinalizer })
	} else if m.DeletionTimestamp == nil {
		m.DeletionTimestamp = &metav1.Time{Time: s.Clock.Now()}
		m.Finalizers = append(m.Finalizers, crdFinalizer)
	}
	s.Srv.put(ActorClient, k, m, false)
}

// newBreaker returns the breaker of a collector Start starts (nil without
// one).
func (s *Sim) newBreaker() *breaker.Breaker {
	if s.Breaker == nil {
		return nil
	}
	return breaker.New(*s.Breaker)
}

// resumeBreaker resumes every trip of the running collector's breaker, as
// an operator does once the cause is understood (Heal, and Quiesce, for
// trips after the heal), and reports whether it resumed any: the objects
// held are decided again, and what the reference model owes must then be
// done (L1), which checks that a resume releases everything it held.
func (s *Sim) resumeBreaker() bool {
	if s.coll == nil || s.coll.Breaker() == nil {
		return false
	}
	release, resumed, overflowed := s.coll.Breaker().Resume(s.Clock.Now())
	if len(resumed) == 0 {
		return false
	}
	s.Srv.trace("breaker resumed: %d trips, %d held objects released", len(resumed), len(release))
	s.coll.ResumeHeld(context.Background(), release, overflowed)
	return true
}

// LimitVanishInWatchGap: vanished-resource tripped on a resource whose
// objects clients really deleted, every one of them, while kgc's watch of
// it was down (the watch expired before delivering their DELETED
// events), outside a CRD's deletion: a complete list that finds none of
// a resource's objects, with none of their deletions seen coming, is
// what an API answering wrongly looks like, and kgc cannot tell the two
// apart (docs/correctness.md, "Known limits"; at the default minimum it
// takes 10 such objects).
const LimitVanishInWatchGap = "vanish-in-watch-gap"

// LimitVanishUnconfirmed: vanished-resource tripped on a CRD's resource
// whose CRD the graph held alive (its monitor lagging behind the
// resource's) while kgc's quorum read of the CRD, which would have shown
// it deleted, failed (an injected 429 or 500, every attempt): a read that
// fails explains nothing, and the trip holds more, never deletes more
// (docs/correctness.md, "Holds").
const LimitVanishUnconfirmed = "vanish-unconfirmed"

// tripped reports a trip of the breaker: no fault it exists for is ever
// injected, so every trip is a violation, or an instance of
// LimitVanishInWatchGap or LimitVanishUnconfirmed.
func (s *Sim) tripped(t breaker.Trip) {
	limit := ""
	switch {
	case t.Signal != breaker.Vanished:
	case s.vanishInWatchGap(t.Resource):
		limit = LimitVanishInWatchGap
	case s.vanishUnconfirmed(t.Resource):
		limit = LimitVanishUnconfirmed
	}
	s.Srv.violateLimit(RuleBreaker, limit, "the deletion breaker tripped (%s %s on %s): %s", t.Signal, t.Resource, t.Object, t.Because())
}

// vanishUnconfirmed reports whether kgc's last read of the CRD of the
// resource a vanished-resource trip names failed (LimitVanishUnconfirmed).
func (s *Sim) vanishUnconfirmed(resource string) bool {
	s.Srv.mu.Lock()
	var name string
	for gr, r := range s.Srv.kinds {
		if breaker.ResourceName(r.Group, r.Kind.Kind) == resource {
			name = crdNames[gr]
		}
	}
	s.Srv.mu.Unlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	return name != "" && s.crdReadFailed[name]
}

// vanishInWatchGap reports whether the resource a vanished-resource trip
// names ("Kind.group") holds no object in the store, and its CRD, if it
// has one, is alive and not deleting: clients deleted every object, and
// no CRD deletion explains it (see LimitVanishInWatchGap).
func (s *Sim) vanishInWatchGap(resource string) bool {
	s.Srv.mu.Lock()
	defer s.Srv.mu.Unlock()
	var gr schema.GroupResource
	found := false
	for g, r := range s.Srv.kinds {
		if breaker.ResourceName(r.Group, r.Kind.Kind) == resource {
			gr, found = g, true
		}
	}
	if !found {
		return false
	}
	for k := range s.Srv.objects {
		if k.gr == gr {
			return false
		}
	}
	if name, ok := crdNames[gr]; ok && s.Srv.modelsCRDs() {
		crd := s.Srv.objects[objKey{gr: CRDs, name: name}]
		return crd != nil && crd.DeletionTimestamp == nil
	}
	return true
}
