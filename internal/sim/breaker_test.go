package sim

import (
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
