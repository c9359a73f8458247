package workers

import (
	"context"
	"errors"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2/ktesting"

	"github.com/kgc-dev/kgc/internal/fakeapi"
	"github.com/kgc-dev/kgc/internal/graph"
	"github.com/kgc-dev/kgc/internal/orphanlog"
)

// newJournaledStepper is newStepper with an orphan journal on store,
// loaded and running, as the collector starts it.
func newJournaledStepper(t *testing.T, srv *fakeapi.Server, store orphanlog.Store) *stepper {
	t.Helper()
	j := orphanlog.New(orphanlog.Config{Store: store})
	_, ctx := ktesting.NewTestContext(t)
	if err := j.Load(ctx); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); j.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	c := New(Config{Metadata: srv.Client, Mapper: fakeapi.NewMapper(), Workers: 1, Journal: j}, graph.New())
	t.Cleanup(func() {
		c.attemptToDelete.ShutDown()
		c.attemptToOrphan.ShutDown()
	})
	return &stepper{t: t, srv: srv, c: c, ctx: ctx}
}

// The journal of orphaned owners (the restart limit): O is
// deleted with Orphan; kgc's graph shows no dependent (D's event is still
// on its watch), so O's finalizer goes. kgc restarts before it sees D. The
// next kgc finds D referencing an owner that is gone; it must orphan D,
// not delete it as dangling. Upstream, and kgc before the journal, deleted
// D. The finalizer removal also waits until the journal's entry is
// written: with the store failing, O keeps its finalizer.
func TestOrphanJournalSurvivesRestart(t *testing.T) {
	srv := fakeapi.NewServer()
	store := &orphanlog.MemoryStore{}
	first := newJournaledStepper(t, srv, store)
	o := srv.Create(t, fakeapi.Deployments, fakeapi.Object("a", "o", "o-uid"))
	d := srv.Create(t, fakeapi.ConfigMaps, fakeapi.Object("a", "d", "d-uid", fakeapi.DeploymentRef("o", "o-uid")))
	first.deleteWith(fakeapi.Deployments, o, metav1.DeletePropagationOrphan)
	first.observe(fakeapi.Deployments, o) // D is never observed by the first kgc

	store.SetFail(errors.New("etcdserver: request timed out"))
	// The entry is written before the removal is handed to a write slot
	// (planOrphanItem): with the journal failing, no write is decided.
	ctx, cancel := context.WithTimeout(first.ctx, 200*time.Millisecond)
	defer cancel()
	if ws, err := first.c.planOrphanItem(ctx, "o-uid"); err == nil || len(ws) != 0 {
		t.Fatalf("planOrphanItem = %d writes, %v; want no write and the journal's error", len(ws), err)
	}
	if cur := first.mustGet(fakeapi.Deployments, o); len(cur.Finalizers) == 0 {
		t.Fatal("orphan finalizer removed without a journal entry")
	}
	store.SetFail(nil)
	if err := first.orphanStep("o-uid"); err != nil {
		t.Fatalf("orphan step: %v", err)
	}
	if _, err := srv.Get(fakeapi.Deployments, "a", "o"); !apierrors.IsNotFound(err) {
		t.Fatalf("owner still there: %v", err)
	}
	if _, ok := store.Entries()["o-uid"]; !ok {
		t.Fatal("the owner is not in the journal after its finalizer went")
	}

	// A restart: a new kgc, with a new graph, on the same journal.
	second := newJournaledStepper(t, srv, store)
	second.observe(fakeapi.ConfigMaps, d)
	if err := second.deleteStep("d-uid"); err != nil {
		t.Fatal(err)
	}
	if got := refUIDs(second.mustGet(fakeapi.ConfigMaps, d)); len(got) != 0 {
		t.Errorf("the dependent still references %v", got)
	}
	if _, deletes, _ := srv.KGCActions(); len(deletes) != 0 {
		t.Errorf("DELETEs %v: the restarted kgc deleted a dependent of an owner an earlier kgc orphaned", deletes)
	}
}
