package workers

import (
	"sync"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2/ktesting"

	"github.com/kgc-dev/kgc/internal/fakeapi"
	"github.com/kgc-dev/kgc/internal/graph"
	"github.com/kgc-dev/kgc/internal/history"
	"github.com/kgc-dev/kgc/internal/rules"
)

// shadowStepper is a stepper whose workers run in shadow mode and hand
// their decisions to got.
type shadowStepper struct {
	*stepper
	ring *history.Ring
	mu   sync.Mutex
	got  []history.Record
}

func newShadowStepper(t *testing.T, srv *fakeapi.Server) *shadowStepper {
	t.Helper()
	s := &shadowStepper{ring: history.NewRing(100)}
	c := New(Config{Metadata: srv.Client, Mapper: fakeapi.NewMapper(), Workers: 1, History: s.ring, DryRun: true,
		Shadow: func(r history.Record) {
			s.mu.Lock()
			defer s.mu.Unlock()
			s.got = append(s.got, r)
		}}, graph.New())
	t.Cleanup(func() {
		c.attemptToDelete.ShutDown()
		c.attemptToOrphan.ShutDown()
	})
	_, ctx := ktesting.NewTestContext(t)
	s.stepper = &stepper{t: t, srv: srv, c: c, ctx: ctx}
	return s
}

// decisions returns the operations decided so far, as "op uid".
func (s *shadowStepper) decisions() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for _, r := range s.got {
		out = append(out, r.Operation+" "+string(r.Object.UID))
	}
	return out
}

func (s *shadowStepper) wantDecisions(want ...string) {
	s.t.Helper()
	got := s.decisions()
	if len(got) != len(want) {
		s.t.Fatalf("decisions %q, want %q", got, want)
	}
	for i := range got {
		if got[i] != want[i] {
			s.t.Fatalf("decisions %q, want %q", got, want)
		}
	}
}

// noWrites fails unless kgc sent no DELETE and no patch.
func (s *shadowStepper) noWrites() {
	s.t.Helper()
	_, deletes, patches := s.srv.KGCActions()
	if len(deletes)+len(patches) > 0 {
		s.t.Fatalf("shadow mode wrote: %d deletes, %d patches", len(deletes), len(patches))
	}
	if n := s.c.writes.len(); n != 0 {
		t := s.t
		t.Fatalf("shadow mode left %d write-log entries: the next check would skip the object", n)
	}
}

// A Background dependent: the DELETE is decided, recorded with outcome
// shadow, not sent; the item is forgotten (no retry); deciding it again
// from the same version records nothing new; a newer version of the
// object is decided afresh.
func TestShadowBackgroundDecidesOnceAndWritesNothing(t *testing.T) {
	srv := fakeapi.NewServer()
	s := newShadowStepper(t, srv)
	o := srv.Create(t, fakeapi.Deployments, fakeapi.Object("a", "o", "o-uid"))
	d := srv.Create(t, fakeapi.ConfigMaps, fakeapi.Object("a", "d", "d-uid", fakeapi.DeploymentRef("o", "o-uid")))
	s.observe(fakeapi.Deployments, o)
	s.observe(fakeapi.ConfigMaps, d)
	s.deleteWith(fakeapi.Deployments, o, metav1.DeletePropagationBackground)
	s.observe(fakeapi.Deployments, o)

	for range 3 {
		if err := s.deleteStep("d-uid"); err != nil {
			t.Fatalf("a shadow decision must end the item's turn cleanly (no retry), got %v", err)
		}
	}
	s.wantDecisions("delete d-uid")
	s.noWrites()
	s.mustGet(fakeapi.ConfigMaps, d)
	rec := only(t, s.ring, "d-uid")
	checkRecord(t, rec, history.OpDelete, history.OutcomeShadow, string(metav1.DeletePropagationBackground),
		history.Preconditions{UID: "d-uid", ResourceVersion: d.ResourceVersion})
	if rec.Error != "" {
		t.Errorf("a shadow record has no error, got %q", rec.Error)
	}

	// Someone changes D (a label): its new version is decided again.
	srv.SetFinalizers(t, fakeapi.ConfigMaps, "a", "d", "example.com/keep")
	s.observe(fakeapi.ConfigMaps, d)
	if err := s.deleteStep("d-uid"); err != nil {
		t.Fatal(err)
	}
	s.wantDecisions("delete d-uid", "delete d-uid")
	s.noWrites()
}

// Orphan: each dependent's orphaning is decided once, and the owner is
// not decided again at once (its dependents still reference it: that
// would spin). Once the cluster's collector has orphaned them, the
// owner's finalizer removal is decided.
func TestShadowOrphanDoesNotSpin(t *testing.T) {
	srv := fakeapi.NewServer()
	s := newShadowStepper(t, srv)
	o := srv.Create(t, fakeapi.Deployments, fakeapi.Object("a", "o", "o-uid"))
	d1 := srv.Create(t, fakeapi.ConfigMaps, fakeapi.Object("a", "d1", "d1-uid", fakeapi.DeploymentRef("o", "o-uid")))
	d2 := srv.Create(t, fakeapi.ConfigMaps, fakeapi.Object("a", "d2", "d2-uid", fakeapi.DeploymentRef("o", "o-uid")))
	s.observe(fakeapi.Deployments, o)
	s.observe(fakeapi.ConfigMaps, d1)
	s.observe(fakeapi.ConfigMaps, d2)
	s.deleteWith(fakeapi.Deployments, o, metav1.DeletePropagationOrphan)
	s.observe(fakeapi.Deployments, o)

	for range 2 {
		if err := s.orphanStep("o-uid"); err != nil {
			t.Fatal(err)
		}
	}
	s.wantDecisions("orphan_dependent d1-uid", "orphan_dependent d2-uid")
	s.noWrites()
	if cur := s.mustGet(fakeapi.Deployments, o); len(cur.Finalizers) != 1 {
		t.Fatalf("owner finalizers %v", cur.Finalizers)
	}
	if s.c.orphaned.Has("o-uid") {
		t.Fatal("shadow mode recorded the owner as orphaned by kgc")
	}
	// The finalizer waits while one dependent still references the owner.
	for _, d := range []*metav1.PartialObjectMetadata{d1, d2} {
		cur := s.mustGet(fakeapi.ConfigMaps, d)
		cur.OwnerReferences = nil
		srv.Mu.Lock()
		if err := srv.Store(fakeapi.ConfigMaps, cur); err != nil {
			t.Fatal(err)
		}
		srv.Mu.Unlock()
		s.observe(fakeapi.ConfigMaps, d)
		if err := s.orphanStep("o-uid"); err != nil {
			t.Fatal(err)
		}
	}
	s.wantDecisions("orphan_dependent d1-uid", "orphan_dependent d2-uid", "remove_finalizer o-uid")
	s.noWrites()
}

// Foreground: the dependent's DELETE is decided; the owner's finalizer
// only once the dependent is gone (the cluster's collector deleted it).
func TestShadowForeground(t *testing.T) {
	srv := fakeapi.NewServer()
	s := newShadowStepper(t, srv)
	o := srv.Create(t, fakeapi.Deployments, fakeapi.Object("a", "o", "o-uid"))
	d := srv.Create(t, fakeapi.ConfigMaps, fakeapi.Object("a", "d", "d-uid", fakeapi.DeploymentRef("o", "o-uid")))
	s.observe(fakeapi.Deployments, o)
	s.observe(fakeapi.ConfigMaps, d)
	s.deleteWith(fakeapi.Deployments, o, metav1.DeletePropagationForeground)
	s.observe(fakeapi.Deployments, o)
	if err := s.deleteStep("o-uid"); err != nil {
		t.Fatal(err)
	}
	if err := s.deleteStep("d-uid"); err != nil {
		t.Fatal(err)
	}
	s.wantDecisions("delete d-uid")
	if err := srv.Delete(fakeapi.ConfigMaps, "a", "d", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	s.observe(fakeapi.ConfigMaps, d)
	if err := s.deleteStep("o-uid"); err != nil {
		t.Fatal(err)
	}
	s.wantDecisions("delete d-uid", "remove_finalizer o-uid")
	if s.c.fgReleased.Has("o-uid") {
		t.Fatal("shadow mode recorded a foreground release")
	}
	s.noWrites()
}

// Judge decides from the graph as it is, before the change the cluster's
// collector made is applied: a decision kgc had not made yet is made
// then; one its rules do not make is not.
func TestShadowJudge(t *testing.T) {
	srv := fakeapi.NewServer()
	s := newShadowStepper(t, srv)
	o := srv.Create(t, fakeapi.Deployments, fakeapi.Object("a", "o", "o-uid"))
	keep := srv.Create(t, fakeapi.Deployments, fakeapi.Object("a", "keep", "keep-uid"))
	d := srv.Create(t, fakeapi.ConfigMaps, fakeapi.Object("a", "d", "d-uid", fakeapi.DeploymentRef("o", "o-uid")))
	k := srv.Create(t, fakeapi.ConfigMaps, fakeapi.Object("a", "k", "k-uid", fakeapi.DeploymentRef("keep", "keep-uid")))
	for _, x := range []*metav1.PartialObjectMetadata{o, keep} {
		s.observe(fakeapi.Deployments, x)
	}
	s.observe(fakeapi.ConfigMaps, d)
	s.observe(fakeapi.ConfigMaps, k)
	s.deleteWith(fakeapi.Deployments, o, metav1.DeletePropagationBackground)
	s.observe(fakeapi.Deployments, o)

	s.c.Judge(s.ctx, "k-uid", history.OpDelete, "") // its owner is solid
	s.c.Judge(s.ctx, "d-uid", history.OpRemoveFinalizer, rules.FinalizerOrphan)
	s.wantDecisions()
	s.c.Judge(s.ctx, "d-uid", history.OpDelete, "")
	s.wantDecisions("delete d-uid")
	s.noWrites()

	// Outside shadow mode Judge does nothing.
	real := newStepper(t, srv)
	real.observe(fakeapi.ConfigMaps, d)
	real.c.Judge(real.ctx, types.UID("d-uid"), history.OpDelete, "")
	if _, deletes, _ := srv.KGCActions(); len(deletes) != 0 {
		t.Fatal("Judge wrote outside shadow mode")
	}
}
