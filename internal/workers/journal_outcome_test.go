package workers

import (
	"context"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/klog/v2/ktesting"

	"github.com/kgc-dev/kgc/internal/fakeapi"
	"github.com/kgc-dev/kgc/internal/graph"
	"github.com/kgc-dev/kgc/internal/orphanlog"
)

// An orphan finalizer removal whose answer is lost (the apiserver applied
// the patch, and then its answer timed out: 504 "may still be
// processing", or the connection broke) must not make kgc forget that it
// orphaned the owner: the owner may be gone through kgc's own write, and
// a dependent seen only later (a lagging watch, an unlisted resource) must
// then be orphaned, not deleted as dangling. Forgetting is right only when
// the apiserver definitely refused the write (a conflict).
func TestOrphanFinalizerRemovalAnsweredAmbiguouslyIsRemembered(t *testing.T) {
	srv := fakeapi.NewServer()
	store := &orphanlog.MemoryStore{}
	s := newJournaledStepper(t, srv, store)
	o := srv.Create(t, fakeapi.Deployments, fakeapi.Object("a", "o", "o-uid"))
	d := srv.Create(t, fakeapi.ConfigMaps, fakeapi.Object("a", "d", "d-uid", fakeapi.DeploymentRef("o", "o-uid")))
	s.deleteWith(fakeapi.Deployments, o, metav1.DeletePropagationOrphan)
	s.observe(fakeapi.Deployments, o) // D's event is still on its watch

	// The finalizer patch lands, its answer does not.
	srv.Client.PrependReactor("patch", "deployments", func(a clienttesting.Action) (bool, runtime.Object, error) {
		p := a.(clienttesting.PatchActionImpl)
		if _, err := srv.Patch(p.GetResource(), p.GetNamespace(), p.GetName(), p.GetPatchType(), p.GetPatch()); err != nil {
			return true, nil, err
		}
		return true, nil, apierrors.NewTimeoutError("the server was unable to return a response in the time allotted, but may still be processing the request", 0)
	})
	if err := s.orphanStep("o-uid"); err == nil {
		t.Fatal("the orphan step reported no error although the patch's answer was lost")
	}
	if _, err := srv.Get(fakeapi.Deployments, "a", "o"); !apierrors.IsNotFound(err) {
		t.Fatalf("the patch did not land (the test's premise): %v", err)
	}
	s.observe(fakeapi.Deployments, o) // the owner's deletion
	s.observe(fakeapi.ConfigMaps, d)  // and then, late, the dependent
	if err := s.deleteStep("d-uid"); err != nil {
		t.Fatal(err)
	}
	if _, deletes, _ := srv.KGCActions(); len(deletes) != 0 {
		t.Fatalf("DELETEs %v: kgc deleted a dependent of an owner its own (ambiguously answered) finalizer removal orphaned", deletes)
	}
	if got := refUIDs(s.mustGet(fakeapi.ConfigMaps, d)); len(got) != 0 {
		t.Errorf("the dependent still references %v", got)
	}
	if !s.c.journal.Has("o-uid") {
		t.Error("the journal forgot the owner")
	}
}

// A finalizer removal the apiserver refused (the owner changed: a conflict)
// is forgotten again: the owner did not go through kgc's write.
func TestOrphanFinalizerRemovalRefusedIsForgotten(t *testing.T) {
	srv := fakeapi.NewServer()
	store := &orphanlog.MemoryStore{}
	s := newJournaledStepper(t, srv, store)
	o := srv.Create(t, fakeapi.Deployments, fakeapi.Object("a", "o", "o-uid"))
	s.deleteWith(fakeapi.Deployments, o, metav1.DeletePropagationOrphan)
	s.observe(fakeapi.Deployments, o)
	srv.Client.PrependReactor("patch", "deployments", func(clienttesting.Action) (bool, runtime.Object, error) {
		return true, nil, fakeapi.Conflict(fakeapi.Deployments, "o", "finalizers")
	})
	if err := s.orphanStep("o-uid"); err != nil && err != errRetry {
		t.Fatalf("orphan step: %v", err)
	}
	if s.c.journal.Has("o-uid") || s.c.orphaned.Has("o-uid") {
		t.Error("an owner whose finalizer removal was refused is still remembered as orphaned by kgc")
	}
}

// blockingStore is a journal store whose writes hang (an apiserver that
// does not answer the Lease update) until release is closed.
type blockingStore struct {
	*orphanlog.MemoryStore
	release chan struct{}
}

func (b *blockingStore) Save(ctx context.Context, e map[types.UID]time.Time, v string) (string, error) {
	select {
	case <-b.release:
	case <-ctx.Done():
		return "", ctx.Err()
	}
	return b.MemoryStore.Save(ctx, e, v)
}

// An orphan finalizer removal waiting for its journal entry must not hold
// one of the MaxWritesInFlight slots that every write shares: with the
// journal's Lease unwritable (an apiserver not answering, a Role without
// create), owners waiting to lose their orphan finalizer took every slot
// for up to 30 s each, again and again, and the deletion of unrelated
// garbage starved.
func TestJournalWaitHoldsNoWriteSlot(t *testing.T) {
	srv := fakeapi.NewServer()
	store := &blockingStore{MemoryStore: &orphanlog.MemoryStore{}, release: make(chan struct{})}
	j := orphanlog.New(orphanlog.Config{Store: store})
	_, ctx := ktesting.NewTestContext(t)
	if err := j.Load(ctx); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(ctx)
	jdone := make(chan struct{})
	go func() { defer close(jdone); j.Run(ctx) }()
	c := New(Config{Metadata: srv.Client, Mapper: fakeapi.NewMapper(), Workers: 1, MaxWritesInFlight: 1, Journal: j}, graph.New())
	s := &stepper{t: t, srv: srv, c: c, ctx: ctx}
	o := srv.Create(t, fakeapi.Deployments, fakeapi.Object("a", "o", "o-uid"))
	s.deleteWith(fakeapi.Deployments, o, metav1.DeletePropagationOrphan)
	g := srv.Create(t, fakeapi.ConfigMaps, fakeapi.Object("a", "g", "g-uid", fakeapi.DeploymentRef("ghost", "ghost-uid")))
	s.observe(fakeapi.Deployments, o)
	c.Start(ctx, ctx)
	defer func() {
		close(store.release)
		cancel()
		c.Stop()
		<-jdone
	}()
	// O's turn comes first and waits for the journal; then G's.
	deadline := time.Now().Add(10 * time.Second)
	for c.journal.Len() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the orphan finalizer removal never recorded its owner")
		}
		time.Sleep(10 * time.Millisecond)
	}
	s.observe(fakeapi.Deployments, fakeapi.Object("a", "ghost", "ghost-uid")) // the ghost owner: known absent
	s.observe(fakeapi.ConfigMaps, g)
	for {
		if _, err := srv.Get(fakeapi.ConfigMaps, "a", "g"); apierrors.IsNotFound(err) {
			break
		}
		if time.Now().After(deadline) {
			n, limit := c.WritesInFlight()
			t.Fatalf("garbage not deleted while an orphan finalizer removal waits for the journal (writes in flight %d of %d)", n, limit)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
