package sim

import (
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Scripted schedules of collectors that list by streaming (stream.go).

// newStreaming starts a scripted simulation whose collectors stream.
func newStreaming(t *testing.T) *scripted {
	s := newScripted(t)
	s.Streaming = true
	return s
}

// wantStreamed fails unless the complete streaming lists of gr served so
// far held want objects each.
func (s *scripted) wantStreamed(gr schema.GroupResource, want ...int) {
	s.t.Helper()
	if got := s.Srv.StreamedLists(gr); !slices.Equal(got, want) {
		s.t.Fatalf("complete streaming lists of %s: %v objects, want %v\n%s", gr, got, want, s.Trace())
	}
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
	gone, d := ghostOwner(s)
	s.FailStream(ClusterRoles, StreamEOF, 3)
	s.HoldLists(ClusterRoles, true)
	s.start() // a, b, c reach the graph; the stream waits
	s.wantStreamed(ClusterRoles)
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
	gone, d := ghostOwner(s)
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
	s.wantStreamed(ClusterRoles, 2)
	s.must(s.Delete(o, metav1.DeletePropagationBackground))
	s.must(s.Expire(ClusterRoles)) // the deletion's event goes with the watch
	s.wantStreamed(ClusterRoles, 2, 1)
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
	if got := s.count("kgc's streaming list of widgets.example.com: refused"); got != 1 {
		t.Fatalf("refused streaming lists of widgets: %d, want 1\n%s", got, s.Trace())
	}
	s.wantStreamed(Widgets) // none: the relist is paged
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
			if got := s.count("kgc's streaming list of widgets.example.com: 1 of 2 objects"); got != 1 {
				t.Fatalf("failed streaming lists of widgets: %d, want 1\n%s", got, s.Trace())
			}
			s.wantStreamed(Widgets) // the paged list completed it
			s.must(s.Expire(Widgets))
			s.wantStreamed(Widgets, 1) // the relist streams again
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
	s.wantStreamed(Widgets) // the relist is paged
	s.must(s.Delete(o, metav1.DeletePropagationForeground))
	s.finish()
	if s.Get(d) != nil || s.Get(o) != nil {
		t.Fatalf("the Foreground cascade did not finish\n%s", s.Trace())
	}
}

// TestOrphanFinalizerWaitsForFirstList with a collector that streams: the
// dependents' resource fails its first list (FailLists answers the
// streaming list and then the paged fallback with 429), so the workers
// start on a graph that never listed it. The owner's orphan finalizer must
// wait for that list.
func TestStreamingFinalizerBeforeFirstList(t *testing.T) {
	s := newStreaming(t)
	o := s.create(Obj{GR: ConfigMaps, Namespace: "a", Name: "o"})
	d := s.create(Obj{GR: Widgets, Namespace: "a", Name: "d"}, s.OwnerRef(o, true))
	s.must(s.Delete(o, metav1.DeletePropagationOrphan))
	s.FailLists(Widgets, 1)
	s.start()
	if got := s.count("kgc's streaming list of widgets.example.com: TooManyRequests"); got != 1 {
		t.Fatalf("the first streaming list of widgets did not fail (%d)\n%s", got, s.Trace())
	}
	s.finish()
	if m := s.Get(d); m == nil || len(m.OwnerReferences) != 0 {
		t.Fatalf("the dependent of an owner deleted with Orphan was not orphaned: %v\n%s", m, s.Trace())
	}
}

// TestNoGhostAfterCRDDeletion with a collector that streams: a CRD-like
// resource is deleted while discovery still shows it, and its watch
// expires before the instance's DELETED event was delivered. The relist's
// streaming list answers 404, and so does the paged list after it, which
// empties the resource in the graph: the owner's Foreground deletion
// finishes.
func TestStreamingGhostAfterCRDDeletion(t *testing.T) {
	s := newStreaming(t)
	o := s.create(Obj{GR: ClusterRoles, Name: "o"})
	s.create(Obj{GR: Gadgets, Name: "d"}, s.OwnerRef(o, true))
	s.start()
	s.wantStreamed(Gadgets, 1)
	s.Unserve(Gadgets, true)
	s.must(s.Expire(Gadgets))
	if got := s.count("kgc's streaming list of gadgets.gadgets.example.org: NotFound"); got == 0 {
		t.Fatalf("the relist of the deleted resource did not stream into a 404\n%s", s.Trace())
	}
	s.must(s.Delete(o, metav1.DeletePropagationForeground))
	s.finish()
	if s.Get(o) != nil {
		t.Fatalf("the owner's Foreground deletion did not finish\n%s", s.Trace())
	}
}
