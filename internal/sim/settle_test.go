package sim

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// A step ends only once the collector did all the step's work. Expire
// hands the monitor the 410 that ends its watch; the monitor then stops
// the watch, relists, and the workers act on what the relist shows. A
// monitor slow between taking the 410 and stopping its watch (a loaded
// machine descheduling it there) still had a live watch, so the monitor
// looked at rest, and Settle ended the step before the relist: the
// collector then decided on the relist during the next step, and its write
// could land after that step delivered a dependent's reference the
// decision had not seen (an S2 violation that no replay repeated, the
// soak's seeds 4155747, 4455353, 4517591, 4810736, 4996574). stopDelay
// makes the monitor that slow every time.
func TestExpireSettlesRelist(t *testing.T) {
	for _, streaming := range []bool{false, true} {
		name := "pages"
		if streaming {
			name = "stream"
		}
		t.Run(name, func(t *testing.T) {
			s := newScripted(t)
			s.Streaming = streaming
			s.Srv.stopDelay = 20 * time.Millisecond
			o := s.create(Obj{GR: ClusterRoles, Name: "o"})
			s.start()
			s.create(Obj{GR: Jobs, Namespace: "a", Name: "d"}, s.OwnerRef(o, false))
			s.must(s.Delete(o, metav1.DeletePropagationOrphan))
			s.must(s.Expire(ClusterRoles)) // the deletion's event goes with the watch
			if s.Get(o) != nil {
				t.Fatalf("the step that relisted ended before the collector released the orphaned owner its relist showed\n%s", s.Trace())
			}
			if l := s.Limits(); len(l) != 1 || l[0].Limit != LimitWatchLag {
				t.Fatalf("limits %v, want one %s (the dependent's reference still on its watch)\n%s", l, LimitWatchLag, s.Trace())
			}
			s.must(s.Deliver(Jobs))
			s.finish()
		})
	}
}
