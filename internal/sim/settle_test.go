package sim

import (
	"sync/atomic"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
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
				// Not released in the step. Either the step ended while
				// the collector still worked (what this test is for: the
				// release then lands on its own, in real time), or a
				// worker took the owner before the relist completed and
				// waits out its retry on the fake clock (nothing happens
				// until the clock moves). Absence of progress cannot be
				// polled: a bounded real-time wait tells the two apart.
				time.Sleep(200 * time.Millisecond)
				if s.Get(o) == nil {
					t.Fatalf("the step that relisted ended before the collector released the orphaned owner its relist showed\n%s", s.Trace())
				}
				s.must(s.Advance(time.Second))
				if s.Get(o) != nil {
					t.Fatalf("the orphaned owner its relist showed was not released, even after its retry\n%s", s.Trace())
				}
			}
			if l := s.Limits(); len(l) != 1 || l[0].Limit != LimitWatchLag {
				t.Fatalf("limits %v, want one %s (the dependent's reference still on its watch)\n%s", l, LimitWatchLag, s.Trace())
			}
			s.must(s.Deliver(Jobs))
			s.finish()
		})
	}
}

// A step that fires a timer ends only once the timer's reader acted. The
// workers' delaying queue waits for a retry's backoff on the fake clock;
// when Advance fires its timer, the queue's goroutine takes the tick and
// then queues the item. wakeDelay makes that goroutine slow between the
// two, every time.
func TestAdvanceSettlesRetry(t *testing.T) {
	s := newScripted(t)
	o := s.create(Obj{GR: ConfigMaps, Namespace: "a", Name: "o"})
	d := s.create(Obj{GR: ConfigMaps, Namespace: "a", Name: "d"}, s.OwnerRef(o, false))
	s.must(s.Delete(o, metav1.DeletePropagationBackground))
	var failed atomic.Bool
	s.Srv.Fault = func(c Call) error {
		if c.Actor == ActorKGC && c.Verb == "delete" && c.Name == "d" && failed.CompareAndSwap(false, true) {
			s.Srv.trace("fault: kgc's delete of d answered TooManyRequests")
			return apierrors.NewTooManyRequests("injected", 1)
		}
		return nil
	}
	s.start()
	if !failed.Load() || s.Get(d) == nil {
		t.Fatalf("the dependent's first deletion did not fail\n%s", s.Trace())
	}
	s.Clock.mu.Lock()
	s.Clock.wakeDelay = 20 * time.Millisecond
	s.Clock.mu.Unlock()
	s.must(s.Advance(time.Second)) // the retry's backoff
	if s.Get(d) != nil {
		t.Fatalf("the step that fired the retry's timer ended before the retry\n%s", s.Trace())
	}
	s.finish()
}
