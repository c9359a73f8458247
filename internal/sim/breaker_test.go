package sim

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"testing"

	"github.com/kgc-dev/kgc/internal/breaker"
)

// breakerConfig is the breaker the simulator runs with: rollback on, and
// vanished-resource at its most sensitive (one object gone unexplained
// trips it), so that the schedules measure what each signal rests on
// rather than its threshold.
func breakerConfig() breaker.Config {
	return breaker.Config{Rollback: true, VanishedMinimum: 1}
}

// A CRD is deleted while kgc's watch of its instances is down: the
// instances' DELETED events are dropped with the watch, the relist answers
// 404, and the CRD's own events (deleting, then gone) are still on the
// CRD monitor's stream. The graph then holds the CRD alive, and the
// instances look gone unexplained; a quorum read of the CRD says it is
// gone. Nothing trips.
func TestBreakerCRDDeletedWhileCRDWatchLags(t *testing.T) {
	s := newScripted(t)
	s.SetBreaker(breakerConfig())
	o := s.create(Obj{GR: Gadgets, Name: "o"})
	s.create(Obj{GR: Gadgets, Name: "d"}, s.OwnerRef(o, false))
	s.start()
	s.Unserve(Gadgets, true)
	s.must(s.Expire(Gadgets))
	s.finish()
}

// The same, with the CRD created again under its name before kgc lists
// its instances again: the list is empty (not 404), the graph holds the
// old CRD alive, and a quorum read finds a CRD of that name with another
// UID: the old one, which served the instances, is gone. Nothing trips.
func TestBreakerCRDRecreatedWhileCRDWatchLags(t *testing.T) {
	s := newScripted(t)
	s.SetBreaker(breakerConfig())
	o := s.create(Obj{GR: Gadgets, Name: "o"})
	s.create(Obj{GR: Gadgets, Name: "d"}, s.OwnerRef(o, false))
	s.start()
	s.Unserve(Gadgets, true)
	s.Serve(Gadgets)
	s.must(s.Expire(Gadgets))
	s.finish()
}

// At start-up, the resources' first lists end at different times. A
// dependent created after its own resource's list (it arrives while kgc
// watches) whose owner was created and deleted before the first list of
// the owner's resource has an owner kgc never observed alive, and yet
// nothing was restored: the owner went before kgc could see it, as a
// backlog's owners did. Such owners are not the restore signature; here
// two of them, with the signal's limit at one, trip nothing.
func TestBreakerOwnerGoneBeforeItsResourceWasFirstListed(t *testing.T) {
	s := newScripted(t)
	cfg := breakerConfig()
	cfg.UnobservedLimit = 1
	s.SetBreaker(cfg)
	s.HoldLists(Deployments, true) // the owners' first list waits
	s.start()
	var deps []Obj
	for _, name := range []string{"x", "y"} {
		owner := s.create(Obj{GR: Deployments, Namespace: "a", Name: name})
		deps = append(deps, s.create(Obj{GR: ConfigMaps, Namespace: "a", Name: name + "-dep"}, s.OwnerRef(owner, false)))
		s.must(s.Delete(owner, metav1.DeletePropagationBackground))
		s.must(s.Deliver(ConfigMaps)) // the dependent arrives
	}
	s.HoldLists(Deployments, false)
	s.must(s.Settle())
	s.finish()
	for _, d := range deps {
		if s.Get(d) != nil {
			t.Fatalf("%s/%s not collected\ntrace:\n%s", d.Namespace, d.Name, s.Trace())
		}
	}
}
