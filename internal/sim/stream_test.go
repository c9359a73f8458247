package sim

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Scripted schedules of collectors that list by streaming (stream.go).

// newStreaming starts a scripted simulation whose collectors stream.
func newStreaming(t *testing.T) *scripted {
	s := newScripted(t)
	s.Streaming = true
	return s
}

// count returns how many lines of the trace contain sub.
func (s *scripted) count(sub string) int {
	return strings.Count(s.Trace(), sub)
}

// The streaming analogue of TestPartialFirstListLeavesNoGhost: a first
// streaming list delivers its first objects and is held; an owner among
// them is deleted; the stream then ends without its end bookmark, and the
// paged list the monitor falls back to completes without the owner. That
// paged list is the monitor's first complete one, and no watch reports
// the deletion (the watch starts after it): unless it sweeps what the
// stream delivered, the owner stays in the graph as a ghost and its
// dependent is never collected (L1).
func TestPartialFirstStreamLeavesNoGhost(t *testing.T) {
	s := newStreaming(t)
	var gone Obj
	for _, name := range []string{"a", "b", "c", "d"} {
		o := s.create(Obj{GR: ClusterRoles, Name: name})
		if name == "b" {
			gone = o
		}
	}
	d := s.create(Obj{GR: ConfigMaps, Namespace: "a", Name: "d"}, s.OwnerRef(gone, false))
	s.FailStream(ClusterRoles, StreamEOF, 3)
	s.HoldLists(ClusterRoles, true)
	s.start() // a, b, c reach the graph; the stream waits
	if n := s.count("kgc's streaming list of clusterroles.rbac.authorization.k8s.io: held after 3 objects"); n != 1 {
		t.Fatalf("the first streaming list was not held after its first 3 objects (%d)\n%s", n, s.Trace())
	}
	s.must(s.Delete(gone, metav1.DeletePropagationBackground))
	s.HoldLists(ClusterRoles, false) // the stream ends; the paged list completes
	s.must(s.Settle())
	if s.Get(d) == nil {
		// Not yet an error, but the schedule no longer tests the sweep.
		t.Logf("the dependent went before the schedule healed")
	}
	s.finish()
	if s.Get(d) != nil {
		t.Fatalf("the dependent of an owner deleted while its resource's first streaming list was held survives\n%s", s.Trace())
	}
}

// The same with the fallback failing part way: a first streaming list
// ends after 3 objects, the paged list after it fails at its second page,
// an owner among the streamed objects is deleted, and the retried paged
// list completes without it.
func TestPartialFirstStreamThenPartialPagesLeavesNoGhost(t *testing.T) {
	s := newStreaming(t)
	var gone Obj
	for _, name := range []string{"a", "b", "c", "d"} {
		o := s.create(Obj{GR: ClusterRoles, Name: name})
		if name == "b" {
			gone = o
		}
	}
	d := s.create(Obj{GR: ConfigMaps, Namespace: "a", Name: "d"}, s.OwnerRef(gone, false))
	s.FailStream(ClusterRoles, StreamEOF, 3)
	s.FailListPages(ClusterRoles, 1)
	s.start()
	s.must(s.Delete(gone, metav1.DeletePropagationBackground))
	s.finish()
	if s.Get(d) != nil {
		t.Fatalf("the dependent of an owner deleted while its resource's first list was retried survives\n%s", s.Trace())
	}
}

// A relist after the watch expired streams, and its end bookmark dates the
// sweep: an owner deleted while the watch was down (its DELETED event
// dropped with the expired watch) is removed from the graph, and its
// dependent collected.
func TestStreamedRelistSweepsDeletedOwner(t *testing.T) {
	s := newStreaming(t)
	o := s.create(Obj{GR: ClusterRoles, Name: "o"})
	s.create(Obj{GR: ClusterRoles, Name: "p"})
	d := s.create(Obj{GR: ConfigMaps, Namespace: "a", Name: "d"}, s.OwnerRef(o, false))
	s.start()
	const listed = "kgc's streaming list of clusterroles.rbac.authorization.k8s.io: "
	if n := s.count(listed); n != 1 {
		t.Fatalf("the first list of clusterroles was not one streaming list (%d)\n%s", n, s.Trace())
	}
	s.must(s.Delete(o, metav1.DeletePropagationBackground))
	s.must(s.Expire(ClusterRoles)) // the deletion's event goes with the watch
	if n := s.count(listed + "1 objects, then its end bookmark"); n != 1 {
		t.Fatalf("the relist after the watch expired was not a streaming list of the one object left (%d)\n%s", n, s.Trace())
	}
	if s.count("delivered to kgc's clusterroles") != 0 {
		t.Fatalf("an event of clusterroles reached the collector by the watch\n%s", s.Trace())
	}
	s.advanceBy(time.Second)
	if s.Get(d) != nil {
		t.Fatalf("the dependent of an owner the streamed relist did not find survives\n%s", s.Trace())
	}
	s.finish()
}

// A server that refuses streaming lists (422) is listed by pages from
// then on: the relist after an expired watch does not stream again.
func TestRefusedStreamListsByPagesForGood(t *testing.T) {
	s := newStreaming(t)
	o := s.create(Obj{GR: Widgets, Namespace: "a", Name: "o"})
	d := s.create(Obj{GR: ConfigMaps, Namespace: "a", Name: "d"}, s.OwnerRef(o, false))
	s.FailStream(Widgets, StreamRefused, 0)
	s.start()
	s.must(s.Expire(Widgets))
	const streamed = "kgc's streaming list of widgets.example.com: "
	if got := s.count(streamed); got != 1 {
		t.Fatalf("streaming lists of widgets: %d, want the one refused\n%s", got, s.Trace())
	}
	s.must(s.Delete(o, metav1.DeletePropagationBackground))
	s.finish()
	if s.Get(d) != nil {
		t.Fatalf("the dependent of a deleted owner survives\n%s", s.Trace())
	}
}

// Each stream fault that is not a refusal makes the monitor list by
// pages until a paged list completes: the relist after an expired watch
// streams again. The fault comes after the stream delivered an owner that
// is deleted before the relist.
func TestFailedStreamStreamsAgainAfterPagedList(t *testing.T) {
	for _, f := range []StreamFault{StreamEOF, StreamBroken, StreamError} {
		t.Run(string(f), func(t *testing.T) {
			s := newStreaming(t)
			o := s.create(Obj{GR: Widgets, Namespace: "a", Name: "o"})
			s.create(Obj{GR: Widgets, Namespace: "a", Name: "p"})
			d := s.create(Obj{GR: ConfigMaps, Namespace: "a", Name: "d"}, s.OwnerRef(o, false))
			s.FailStream(Widgets, f, 1)
			s.start()
			s.must(s.Delete(o, metav1.DeletePropagationBackground))
			s.must(s.Expire(Widgets))
			const streamed = "kgc's streaming list of widgets.example.com: "
			if got, want := s.count(streamed), 2; got != want {
				t.Fatalf("streaming lists of widgets: %d, want %d (the failed one, then the relist)\n%s", got, want, s.Trace())
			}
			s.finish()
			if s.Get(d) != nil {
				t.Fatalf("the dependent of a deleted owner survives\n%s", s.Trace())
			}
		})
	}
}

// A streaming list held part way longer than the collector's stall
// watchdog (15 s of fake time) is given up, and the resource is listed by
// pages for good; its paged list, held too, then completes once released.
func TestHeldStreamStallsToPages(t *testing.T) {
	s := newStreaming(t)
	o := s.create(Obj{GR: Widgets, Namespace: "a", Name: "o"})
	d := s.create(Obj{GR: ConfigMaps, Namespace: "a", Name: "d"}, s.OwnerRef(o, true))
	s.HoldLists(Widgets, true)
	s.start()
	s.advanceBy(20 * time.Second)
	if s.count("kgc's streaming list of widgets.example.com: given up while held") != 1 || s.count("kgc's list of widgets.example.com: page held") != 1 {
		t.Fatalf("the held stream was not given up for a held paged list\n%s", s.Trace())
	}
	s.HoldLists(Widgets, false)
	s.must(s.Settle())
	s.must(s.Expire(Widgets))
	if got := s.count("kgc's streaming list of widgets.example.com: 1 objects"); got != 1 {
		t.Fatalf("a stalled stream did not make the resource list by pages for good (%d streaming lists)\n%s", got, s.Trace())
	}
	s.must(s.Delete(o, metav1.DeletePropagationForeground))
	s.finish()
	if s.Get(d) != nil || s.Get(o) != nil {
		t.Fatalf("the Foreground cascade did not finish\n%s", s.Trace())
	}
}
