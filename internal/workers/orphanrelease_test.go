package workers

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kgc-dev/kgc/internal/fakeapi"
	"github.com/kgc-dev/kgc/internal/orphanlog"
)

// The removal of an owner's orphan finalizer that may have landed, and a
// later attempt for the same owner that is refused or cannot record its
// journal entry: what the later attempt learns says nothing about the
// earlier one, so the owner stays remembered as orphaned, in memory and in
// the journal (a dependent the orphaning missed, seen after the owner
// went, must be orphaned, not deleted as dangling: S2).

// flushJournal makes the journal write what it holds now: a Record
// returns once a write holding every change made before it landed.
func flushJournal(t *testing.T, s *stepper) {
	t.Helper()
	ctx, cancel := context.WithTimeout(s.ctx, 10*time.Second)
	defer cancel()
	if err := s.c.journal.Record(ctx, "flush-uid"); err != nil {
		t.Fatalf("flushing the journal: %v", err)
	}
}

// orphanedNotDeleted decides dependent d and checks that its reference to
// the owner was removed and that no DELETE was sent.
func orphanedNotDeleted(t *testing.T, s *stepper, d *metav1.PartialObjectMetadata) {
	t.Helper()
	if err := s.deleteStep(d.UID); err != nil && !errors.Is(err, errRetry) {
		t.Fatalf("%s: %v", d.Name, err)
	}
	if deletes := deletedNames(s.srv); len(deletes) != 0 {
		t.Fatalf("DELETEs %v: a dependent of an owner kgc orphaned was deleted as dangling (S2)", deletes)
	}
	if got := refUIDs(s.mustGet(fakeapi.ConfigMaps, d)); len(got) != 0 {
		t.Errorf("%s still references %v", d.Name, got)
	}
}

// O, kept by a foreign finalizer, is deleted with Orphan. Its dependents
// D1 and D2 are still on their watch, so kgc's graph shows none and O's
// orphan finalizer goes. The graph does not see that patch before the
// write log's entry expires, so the removal is decided again and the
// apiserver refuses it (the finalizer test fails: the first patch removed
// it). kgc must still remember O as orphaned: once the foreign finalizer
// goes, D1 (seen by this kgc) and D2 (seen only by the next kgc, after a
// restart) are orphaned, not deleted as dangling. Forgetting O on the
// refusal, in memory and in the journal, lost both.
func TestOrphanReleaseRefusalKeepsEarlierRelease(t *testing.T) {
	srv := fakeapi.NewServer()
	store := &orphanlog.MemoryStore{}
	s := newJournaledStepper(t, srv, store)
	o := srv.Create(t, fakeapi.Deployments, fakeapi.Object("a", "o", "o-uid"))
	srv.SetFinalizers(t, fakeapi.Deployments, "a", "o", "example.com/keep")
	d1 := srv.Create(t, fakeapi.ConfigMaps, fakeapi.Object("a", "d1", "d1-uid", fakeapi.DeploymentRef("o", "o-uid")))
	d2 := srv.Create(t, fakeapi.ConfigMaps, fakeapi.Object("a", "d2", "d2-uid", fakeapi.DeploymentRef("o", "o-uid")))
	s.deleteWith(fakeapi.Deployments, o, metav1.DeletePropagationOrphan)
	s.observe(fakeapi.Deployments, o) // D1's and D2's events are still on their watch

	if err := s.orphanStep("o-uid"); err != nil {
		t.Fatalf("O's orphan finalizer removal: %v", err)
	}
	if cur := s.mustGet(fakeapi.Deployments, o); slices.Contains(cur.Finalizers, metav1.FinalizerOrphanDependents) {
		t.Fatalf("the orphan finalizer is still there (the test's premise): %v", cur.Finalizers)
	}
	// The graph has not seen the removal: once the write log's entry
	// expires (a lost event costs at most that), the same removal is
	// decided again on the stale graph, and the apiserver refuses it.
	s.c.writes.forget("o-uid")
	if err := s.orphanStep("o-uid"); err != nil && !errors.Is(err, errRetry) {
		t.Fatalf("O's second orphan finalizer removal: %v, want a refusal", err)
	}
	if _, _, patches := srv.KGCActions(); len(patches) != 2 {
		t.Fatalf("%d patches, want 2 (the test's premise: the removal was decided again and refused)", len(patches))
	}
	if !s.c.orphaned.Has("o-uid") || !s.c.journal.Has("o-uid") {
		t.Errorf("after a refusal of a later attempt, O is remembered in memory %v, in the journal %v: want both",
			s.c.orphaned.Has("o-uid"), s.c.journal.Has("o-uid"))
	}

	// The foreign finalizer goes, and so does O.
	srv.SetFinalizers(t, fakeapi.Deployments, "a", "o")
	s.observe(fakeapi.Deployments, o)
	s.observe(fakeapi.ConfigMaps, d1) // late
	orphanedNotDeleted(t, s, d1)

	// A restart: the next kgc sees D2, and only the journal tells it O
	// went with Orphan.
	flushJournal(t, s)
	next := newJournaledStepper(t, srv, store)
	next.observe(fakeapi.ConfigMaps, d2)
	orphanedNotDeleted(t, next, d2)
}

// O is deleted with Orphan; its dependent D is still on its watch. kgc
// removes O's orphan finalizer; the patch lands but its answer is lost (a
// timeout), so O stays recorded, and O is gone. The graph, which has not
// seen that yet, has kgc decide the removal again, and this time the
// journal cannot be written. The failed write must not erase the entry
// the first removal rests on: a kgc started later, which sees D, must
// orphan it.
func TestOrphanJournalWriteFailureKeepsEarlierEntry(t *testing.T) {
	srv := fakeapi.NewServer()
	store := &orphanlog.MemoryStore{}
	s := newJournaledStepper(t, srv, store)
	o := srv.Create(t, fakeapi.Deployments, fakeapi.Object("a", "o", "o-uid"))
	d := srv.Create(t, fakeapi.ConfigMaps, fakeapi.Object("a", "d", "d-uid", fakeapi.DeploymentRef("o", "o-uid")))
	s.deleteWith(fakeapi.Deployments, o, metav1.DeletePropagationOrphan)
	s.observe(fakeapi.Deployments, o)

	answerFinalizerPatchOnce(srv, true, lostAnswer())
	if err := s.orphanStep("o-uid"); !apierrors.IsTimeout(err) {
		t.Fatalf("O's orphan finalizer removal: %v, want the lost answer", err)
	}
	if _, err := srv.Get(fakeapi.Deployments, "a", "o"); !apierrors.IsNotFound(err) {
		t.Fatalf("O is not gone (the test's premise): %v", err)
	}
	if _, ok := store.Entries()["o-uid"]; !ok {
		t.Fatal("O is not in the journal after its finalizer went")
	}

	// Decided again on the stale graph; the journal's Lease cannot be
	// written now.
	store.SetFail(errors.New("etcdserver: request timed out"))
	ctx, cancel := context.WithTimeout(s.ctx, 200*time.Millisecond)
	ws, err := s.c.planOrphanItem(ctx, "o-uid")
	cancel()
	if err == nil || len(ws) != 0 {
		t.Fatalf("planOrphanItem = %d writes, %v; want no write and the journal's error", len(ws), err)
	}
	store.SetFail(nil)
	flushJournal(t, s)
	if _, ok := store.Entries()["o-uid"]; !ok {
		t.Error("a failed journal write erased the entry an earlier removal, answered ambiguously, rests on")
	}

	// A restart: the next kgc sees D after O went.
	next := newJournaledStepper(t, srv, store)
	next.observe(fakeapi.ConfigMaps, d)
	orphanedNotDeleted(t, next, d)
}

// The first and only attempt refused forgets the owner again, in memory
// and in the journal (durably): no removal of kgc's landed, and a later
// Background deletion of the owner makes its dependents garbage as usual.
func TestOrphanReleaseRefusedFirstAttemptForgetsDurably(t *testing.T) {
	srv := fakeapi.NewServer()
	store := &orphanlog.MemoryStore{}
	s := newJournaledStepper(t, srv, store)
	o := srv.Create(t, fakeapi.Deployments, fakeapi.Object("a", "o", "o-uid"))
	s.deleteWith(fakeapi.Deployments, o, metav1.DeletePropagationOrphan)
	s.observe(fakeapi.Deployments, o)
	answerFinalizerPatchOnce(srv, false, fakeapi.Conflict(fakeapi.Deployments, "o", "finalizers"))
	if err := s.orphanStep("o-uid"); err != nil && !errors.Is(err, errRetry) {
		t.Fatalf("orphan step: %v", err)
	}
	if s.c.orphaned.Has("o-uid") || s.c.journal.Has("o-uid") {
		t.Fatalf("O remembered in memory %v, in the journal %v after the refusal of kgc's only attempt: want neither",
			s.c.orphaned.Has("o-uid"), s.c.journal.Has("o-uid"))
	}
	flushJournal(t, s)
	if _, ok := store.Entries()[types.UID("o-uid")]; ok {
		t.Error("the journal's Lease still holds O")
	}
}
