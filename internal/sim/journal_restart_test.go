package sim

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kgc-dev/kgc/internal/collector"
)

// A dependent of two owners, both deleted with Orphan, whose event is still
// on its resource's watch when the first owner (in another resource) is
// released (the watch-lag limit); the collector is then restarted before
// it has seen the dependent. The next collector lists the dependent with
// one reference to an owner that is gone and one to an owner still
// orphaning, and must orphan it from both, not delete it as dangling once
// the second owner's reference is gone: it can only know that the gone
// owner was orphaned from the orphan journal.
//
// Without the journal (OrphanStore nil, as the real-apiserver model test
// ran its collectors before), a dependent whose only reference is to the
// released owner is deleted as dangling by the next collector: the S2
// violation that test once reported as unexplained (there, the second
// owner's orphaning removed its reference first, leaving the dangling one
// alone; which of the two the next collector handles first is a race of
// its work queue, so the case without the journal keeps one owner).
func TestWatchLagRestartOrphansFromJournal(t *testing.T) {
	for _, journal := range []bool{true, false} {
		name := "journal"
		if !journal {
			name = "no journal"
		}
		t.Run(name, func(t *testing.T) {
			s := newScripted(t)
			if !journal {
				s.Configure = func(c *collector.Config) { c.OrphanStore = nil }
			}
			w := s.create(Obj{GR: Widgets, Namespace: "a", Name: "w"})
			c := s.create(Obj{GR: ReplicaSets, Namespace: "a", Name: "c"})
			s.start()
			// The dependent's creation and c's deletion wait on the
			// ReplicaSets watch, in that order.
			refs := []metav1.OwnerReference{s.OwnerRef(w, false)}
			if journal {
				refs = append(refs, s.OwnerRef(c, true))
			}
			d := s.create(Obj{GR: ReplicaSets, Namespace: "a", Name: "d"}, refs...)
			s.must(s.Delete(c, metav1.DeletePropagationOrphan))
			s.must(s.Delete(w, metav1.DeletePropagationOrphan))
			// w's deletion is delivered first: kgc knows no dependent of
			// w and releases it.
			s.must(s.Deliver(Widgets))
			s.advanceBy(time.Second)
			if s.Get(w) != nil {
				t.Fatalf("w's orphan finalizer is still there: the limit did not show\n%s", s.Trace())
			}
			s.wantLimits(LimitWatchLag + " S2")
			s.must(s.Restart())
			s.must(s.Settle())
			s.Heal()
			s.must(s.Quiesce(time.Hour))
			m := s.Get(d)
			v := s.Violations()
			if journal {
				s.verify()
				if m == nil || len(m.OwnerReferences) != 0 {
					t.Fatalf("the dependent was not orphaned by the restarted collector: %v\n%s", m, s.Trace())
				}
				return
			}
			if m != nil || len(v) != 1 || v[0].Rule != "S2" {
				t.Fatalf("without the journal, want the dependent deleted as dangling (one S2 violation), got %v, violations %v\n%s", m, v, s.Trace())
			}
		})
	}
}
