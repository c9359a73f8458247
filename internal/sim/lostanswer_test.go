package sim

import (
	"slices"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Scripted schedules of kgc's releases of an owner (its orphan or
// foregroundDeletion finalizer removed) that a later attempt, or a client,
// meets again: an attempt decided on a graph that has not seen the first
// removal (refused), a removal whose answer is lost after it landed, and a
// second Foreground DELETE after kgc's release.

// loseAnswerOnce makes the next answer to the collector's write verb of
// gr's object name a lost one (a timeout), once; the write itself lands.
func (s *scripted) loseAnswerOnce(verb string, gr schema.GroupResource, name string) {
	done := false
	s.Srv.LostAnswer = func(c Call) error {
		if done || c.Actor != ActorKGC || c.Verb != verb || c.Resource != gr || c.Name != name {
			return nil
		}
		done = true
		return apierrors.NewTimeoutError("the server was unable to return a response in the time allotted, but may still be processing the request", 0)
	}
}

// orphanWithLaggingDependent starts a collector, creates O (held by a
// foreign finalizer) and its dependent D, whose event waits on the
// ConfigMaps watch, deletes O with Orphan and delivers that: kgc's graph
// shows O without dependents, and O's orphan finalizer goes (the watch-lag
// limit). The event of that removal is not delivered.
func orphanWithLaggingDependent(t *testing.T) (s *scripted, o, d Obj) {
	s = newScripted(t)
	s.start()
	o, err := s.Create(Deployments, "a", "o", []string{Finalizer})
	s.must(err)
	s.must(s.Deliver(Deployments))
	d = s.create(Obj{GR: ConfigMaps, Namespace: "a", Name: "d"}, s.OwnerRef(o, false))
	s.must(s.Delete(o, metav1.DeletePropagationOrphan))
	s.must(s.Deliver(Deployments))
	if m := s.Get(o); m == nil || slices.Contains(m.Finalizers, metav1.FinalizerOrphanDependents) {
		t.Fatalf("the owner's orphan finalizer did not go: %v\n%s", m, s.Trace())
	}
	s.wantLimits(LimitWatchLag + " S2")
	return s, o, d
}

// The refused re-release: the graph does not see kgc's removal of O's
// orphan finalizer before the write log's entry expires; the periodic
// re-check decides the removal again, and the apiserver refuses it (its
// finalizer test fails). kgc must still remember O as orphaned: once the
// foreign finalizer goes, D, seen late, is orphaned. Forgetting O on the
// refusal (memory and journal) had D deleted as dangling (S2).
func TestOrphanRefusedReleaseKeepsLaggingDependent(t *testing.T) {
	s, o, d := orphanWithLaggingDependent(t)
	s.must(s.Jump(90 * time.Second))
	if n := s.count("kgc: patch deployments a/o refused"); n == 0 {
		t.Fatalf("the removal was not decided again and refused (the test's premise)\n%s", s.Trace())
	}
	s.must(s.Patch(o, "remove foreign finalizer", map[string]any{"finalizers": []string{}}))
	s.finish()
	s.wantLimits(LimitWatchLag + " S2")
	if s.Get(o) != nil {
		t.Fatalf("the owner is still there\n%s", s.Trace())
	}
	if m := s.Get(d); m == nil || len(m.OwnerReferences) != 0 {
		t.Fatalf("the dependent was not orphaned: %v\n%s", m, s.Trace())
	}
}

// The same with a restart before D is seen: only the journal tells the
// next collector that O went with Orphan. (Another owner orphaned before
// the restart has the journal written with what it holds then.)
func TestOrphanRefusedReleaseKeepsLaggingDependentAcrossRestart(t *testing.T) {
	s, o, d := orphanWithLaggingDependent(t)
	s.must(s.Jump(90 * time.Second))
	if n := s.count("kgc: patch deployments a/o refused"); n == 0 {
		t.Fatalf("the removal was not decided again and refused (the test's premise)\n%s", s.Trace())
	}
	p := s.create(Obj{GR: Jobs, Namespace: "a", Name: "p"})
	s.must(s.Delete(p, metav1.DeletePropagationOrphan))
	s.must(s.Deliver(Jobs))
	s.must(s.Deliver(Jobs))
	if s.Get(p) != nil {
		t.Fatalf("the other owner was not orphaned\n%s", s.Trace())
	}
	s.must(s.Patch(o, "remove foreign finalizer", map[string]any{"finalizers": []string{}}))
	s.must(s.Restart())
	s.must(s.Settle())
	s.finish()
	s.wantLimits(LimitWatchLag + " S2")
	if _, ok := s.Journal.Entries()[o.UID]; !ok {
		t.Fatalf("the orphaned owner is not in the journal's store\n%s", s.Trace())
	}
	if m := s.Get(d); m == nil || len(m.OwnerReferences) != 0 {
		t.Fatalf("the dependent was not orphaned by the restarted collector: %v\n%s", m, s.Trace())
	}
}

// A lost answer to the orphan finalizer removal itself: the patch lands,
// its answer is a timeout. kgc keeps O remembered (it may be gone through
// kgc's own write): D, seen after O went and after a restart, is orphaned.
func TestOrphanReleaseAnswerLostKeepsLaggingDependent(t *testing.T) {
	s := newScripted(t)
	s.start()
	o := s.create(Obj{GR: Deployments, Namespace: "a", Name: "o"})
	s.must(s.Deliver(Deployments))
	d := s.create(Obj{GR: ConfigMaps, Namespace: "a", Name: "d"}, s.OwnerRef(o, false))
	s.loseAnswerOnce("patch", Deployments, "o")
	s.must(s.Delete(o, metav1.DeletePropagationOrphan))
	s.must(s.Deliver(Deployments))
	if s.Get(o) != nil {
		t.Fatalf("the owner's orphan finalizer did not go\n%s", s.Trace())
	}
	if s.count("landed; its answer lost") != 1 {
		t.Fatalf("no lost answer (the test's premise)\n%s", s.Trace())
	}
	s.must(s.Restart())
	s.must(s.Settle())
	s.finish()
	s.wantLimits(LimitWatchLag + " S2")
	if m := s.Get(d); m == nil || len(m.OwnerReferences) != 0 {
		t.Fatalf("the dependent was not orphaned: %v\n%s", m, s.Trace())
	}
}

// A lost answer to a DELETE kgc sent: the dependent is gone, kgc retries
// and finds it so; nothing else changes (the cascade finishes).
func TestDeleteAnswerLost(t *testing.T) {
	s := newScripted(t)
	o := s.create(Obj{GR: Deployments, Namespace: "a", Name: "o"})
	d := s.create(Obj{GR: ReplicaSets, Namespace: "a", Name: "d"}, s.OwnerRef(o, true))
	e := s.create(Obj{GR: ConfigMaps, Namespace: "a", Name: "e"}, s.OwnerRef(d, true))
	s.start()
	s.loseAnswerOnce("delete", ReplicaSets, "d")
	s.must(s.Delete(o, metav1.DeletePropagationForeground))
	s.finish()
	if s.count("landed; its answer lost") != 1 {
		t.Fatalf("no lost answer (the test's premise)\n%s", s.Trace())
	}
	if s.Get(o) != nil || s.Get(d) != nil || s.Get(e) != nil {
		t.Fatalf("the cascade did not finish\n%s", s.Trace())
	}
}

// A client deletes O Foreground again after kgc released it (a foreign
// finalizer keeps O), with a new blocking dependent D: foregroundDeletion
// is back at a resourceVersion newer than kgc's release, a new request.
// kgc deletes D and releases O again. Taking the first release as final
// left D's DELETE refused and O waiting for D (L1: owed work at the end).
func TestSecondForegroundDeleteAfterRelease(t *testing.T) {
	s := newScripted(t)
	o, err := s.Create(Deployments, "a", "o", []string{Finalizer})
	s.must(err)
	s.start()
	s.must(s.Delete(o, metav1.DeletePropagationForeground))
	s.must(s.DeliverAll())
	if m := s.Get(o); m == nil || !slices.Equal(m.Finalizers, []string{Finalizer}) {
		t.Fatalf("the owner was not released: %v\n%s", m, s.Trace())
	}
	d := s.create(Obj{GR: ConfigMaps, Namespace: "a", Name: "d"}, s.OwnerRef(o, true))
	s.must(s.DeliverAll())
	s.must(s.Delete(o, metav1.DeletePropagationForeground))
	if m := s.Get(o); m == nil || !slices.Contains(m.Finalizers, metav1.FinalizerDeleteDependents) {
		t.Fatalf("the second Foreground DELETE did not put foregroundDeletion back (the test's premise): %v\n%s", m, s.Trace())
	}
	s.must(s.DeliverAll())
	s.advanceBy(time.Minute)
	if s.Get(d) != nil {
		t.Fatalf("the blocking dependent of an owner deleted Foreground again is still there\n%s", s.Trace())
	}
	if m := s.Get(o); m == nil || !slices.Equal(m.Finalizers, []string{Finalizer}) {
		t.Fatalf("the owner was not released again: %v\n%s", m, s.Trace())
	}
	s.finish()
	if !strings.Contains(s.Trace(), "kgc: removed configmaps a/d") {
		t.Fatalf("kgc did not delete the dependent\n%s", s.Trace())
	}
}
