package workers

import (
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clienttesting "k8s.io/client-go/testing"

	"github.com/kgc-dev/kgc/internal/fakeapi"
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
