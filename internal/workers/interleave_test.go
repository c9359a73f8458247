package workers

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2/ktesting"

	"github.com/kgc-dev/kgc/internal/discovery"
	"github.com/kgc-dev/kgc/internal/fakeapi"
	"github.com/kgc-dev/kgc/internal/graph"
	"github.com/kgc-dev/kgc/internal/rules"
)

// Scripted interleavings: each test puts the graph and the server in the
// states a particular schedule of watch deliveries and writes produces (the
// graph lagging the server), then drives one worker step at a time. Each
// is a schedule that once broke the contract (docs/correctness.md); the
// simulator (package sim) finds such schedules at random.

// stepper is a set of workers that is never started: the test is their
// graph builder (observe) and their worker goroutines (deleteStep,
// orphanStep).
type stepper struct {
	t   *testing.T
	srv *fakeapi.Server
	c   *Workers
	ctx context.Context
	// fresh: what observe applies appeared while kgc watched (the
	// events' graph.Event.Fresh); false: it was there at start.
	fresh bool
}

func newStepper(t *testing.T, srv *fakeapi.Server) *stepper {
	t.Helper()
	c := New(Config{Metadata: srv.Client, Mapper: fakeapi.NewMapper(), Workers: 1}, graph.New())
	t.Cleanup(func() {
		c.attemptToDelete.ShutDown()
		c.attemptToOrphan.ShutDown()
	})
	_, ctx := ktesting.NewTestContext(t)
	return &stepper{t: t, srv: srv, c: c, ctx: ctx}
}

var kindOf = map[schema.GroupVersionResource][2]string{
	fakeapi.ConfigMaps:  {"v1", "ConfigMap"},
	fakeapi.Deployments: {"apps/v1", "Deployment"},
}

// observe delivers the server's current state of an object to the graph,
// or its deletion when it is gone.
func (s *stepper) observe(gvr schema.GroupVersionResource, o *metav1.PartialObjectMetadata) {
	s.t.Helper()
	k := kindOf[gvr]
	id := rules.Identity{APIVersion: k[0], Kind: k[1], Namespace: o.Namespace, Name: o.Name, UID: o.UID}
	cur, err := s.srv.Get(gvr, o.Namespace, o.Name)
	if apierrors.IsNotFound(err) {
		s.c.apply(graph.Event{Type: graph.Delete, Object: rules.Object{Identity: id}})
		return
	}
	if err != nil {
		s.t.Fatal(err)
	}
	s.c.apply(graph.Event{Type: graph.Upsert, Fresh: s.fresh, Object: rules.Object{
		Identity: id, ResourceVersion: cur.ResourceVersion, OwnerReferences: cur.OwnerReferences,
		Finalizers: cur.Finalizers, Deleting: cur.DeletionTimestamp != nil,
	}})
}

// step runs one worker turn of plan on uid and the writes it decides, one
// after the other, and again at once while the item asks for it
// (errAgain), as the worker's queue does.
func (s *stepper) step(plan planner, uid types.UID) error {
	s.t.Helper()
	for {
		ws, err := plan(s.ctx, uid)
		if err != nil || len(ws) == 0 {
			return err
		}
		o := &outcome{left: len(ws)}
		for _, w := range ws {
			o.add(w(s.ctx), 1)
		}
		if !errors.Is(o.err, errAgain) {
			return o.err
		}
	}
}

func (s *stepper) deleteStep(uid types.UID) error { return s.step(one(s.c.planDeleteItem), uid) }
func (s *stepper) orphanStep(uid types.UID) error { return s.step(s.c.planOrphanItem, uid) }

// deleteWith deletes an object as a client would, with a policy.
func (s *stepper) deleteWith(gvr schema.GroupVersionResource, o *metav1.PartialObjectMetadata, policy metav1.DeletionPropagation) {
	s.t.Helper()
	if err := s.srv.Delete(gvr, o.Namespace, o.Name, metav1.DeleteOptions{PropagationPolicy: &policy}); err != nil {
		s.t.Fatal(err)
	}
}

func (s *stepper) mustGet(gvr schema.GroupVersionResource, o *metav1.PartialObjectMetadata) *metav1.PartialObjectMetadata {
	s.t.Helper()
	cur, err := s.srv.Get(gvr, o.Namespace, o.Name)
	if err != nil {
		s.t.Fatalf("%s/%s: %v", o.Namespace, o.Name, err)
	}
	return cur
}

func refUIDs(o *metav1.PartialObjectMetadata) []types.UID {
	var out []types.UID
	for _, r := range o.OwnerReferences {
		out = append(out, r.UID)
	}
	return out
}

// D is a dependent of O and P, both deleted with Orphan. P's worker
// removes its reference from D; O's worker then reads D at the version the
// graph still shows, which kgc already wrote to. Skipping D there removed
// O's finalizer while D still referenced O on the server; D was then
// deleted as O's dangling dependent.
func TestOrphanWaitsForDependentKGCWroteAtGraphVersion(t *testing.T) {
	srv := fakeapi.NewServer()
	s := newStepper(t, srv)
	o := srv.Create(t, fakeapi.Deployments, fakeapi.Object("a", "o", "o-uid"))
	p := srv.Create(t, fakeapi.Deployments, fakeapi.Object("a", "p", "p-uid"))
	d := srv.Create(t, fakeapi.ConfigMaps, fakeapi.Object("a", "d", "d-uid", fakeapi.DeploymentRef("o", "o-uid"), fakeapi.DeploymentRef("p", "p-uid")))
	for _, x := range []*metav1.PartialObjectMetadata{o, p} {
		s.observe(fakeapi.Deployments, x)
	}
	s.observe(fakeapi.ConfigMaps, d)
	s.deleteWith(fakeapi.Deployments, o, metav1.DeletePropagationOrphan)
	s.deleteWith(fakeapi.Deployments, p, metav1.DeletePropagationOrphan)
	s.observe(fakeapi.Deployments, o)
	s.observe(fakeapi.Deployments, p)

	if err := s.orphanStep("p-uid"); err != nil {
		t.Fatalf("P's orphan step: %v", err)
	}
	if got := refUIDs(s.mustGet(fakeapi.ConfigMaps, d)); len(got) != 1 || got[0] != "o-uid" {
		t.Fatalf("after P's step D references %v, want [o-uid]", got)
	}
	// D's new version has not reached the graph.
	if err := s.orphanStep("o-uid"); !errors.Is(err, errRetry) {
		t.Fatalf("O's orphan step with D unobserved = %v, want a retry", err)
	}
	if cur := s.mustGet(fakeapi.Deployments, o); len(cur.Finalizers) == 0 {
		t.Fatal("O's orphan finalizer was removed while D still references O")
	}
	// The graph catches up; O's next step orphans D, then O goes.
	s.observe(fakeapi.ConfigMaps, d)
	s.observe(fakeapi.Deployments, p)
	if err := s.orphanStep("o-uid"); err != nil {
		t.Fatalf("O's orphan step: %v", err)
	}
	if got := refUIDs(s.mustGet(fakeapi.ConfigMaps, d)); len(got) != 0 {
		t.Fatalf("D references %v after both owners orphaned it", got)
	}
	s.observe(fakeapi.Deployments, o)
	s.observe(fakeapi.ConfigMaps, d)
	if err := s.deleteStep("d-uid"); err != nil {
		t.Fatal(err)
	}
	s.mustGet(fakeapi.ConfigMaps, d)
}

// O deleted with Orphan, B deleted in the
// Background. The attempt-to-delete path removes B's reference from D (O
// counts as solid); O's worker then reads D at the version kgc wrote to.
func TestOrphanWaitsAfterReferenceRemoval(t *testing.T) {
	srv := fakeapi.NewServer()
	s := newStepper(t, srv)
	o := srv.Create(t, fakeapi.Deployments, fakeapi.Object("a", "o", "o-uid"))
	b := srv.Create(t, fakeapi.Deployments, fakeapi.Object("a", "b", "b-uid"))
	d := srv.Create(t, fakeapi.ConfigMaps, fakeapi.Object("a", "d", "d-uid", fakeapi.DeploymentRef("o", "o-uid"), fakeapi.DeploymentRef("b", "b-uid")))
	s.observe(fakeapi.Deployments, o)
	s.observe(fakeapi.Deployments, b)
	s.observe(fakeapi.ConfigMaps, d)
	s.deleteWith(fakeapi.Deployments, b, metav1.DeletePropagationBackground)
	s.observe(fakeapi.Deployments, b) // gone
	if err := s.deleteStep("d-uid"); err != nil {
		t.Fatal(err)
	}
	if got := refUIDs(s.mustGet(fakeapi.ConfigMaps, d)); len(got) != 1 || got[0] != "o-uid" {
		t.Fatalf("D references %v, want [o-uid]", got)
	}
	s.deleteWith(fakeapi.Deployments, o, metav1.DeletePropagationOrphan)
	s.observe(fakeapi.Deployments, o)
	if err := s.orphanStep("o-uid"); !errors.Is(err, errRetry) {
		t.Fatalf("O's orphan step with D's new version unobserved = %v, want a retry", err)
	}
	if cur := s.mustGet(fakeapi.Deployments, o); len(cur.Finalizers) == 0 {
		t.Fatal("O's orphan finalizer was removed while D still references O")
	}
}

// O is deleted with Orphan while its dependents' resource has
// never been listed (its first LIST failed). The finalizer waits for the
// list, up to UnlistedHold; past it, O goes, and a dependent that appears
// later is orphaned, not deleted.
func TestOrphanFinalizerHeldWhileResourceUnlisted(t *testing.T) {
	srv := fakeapi.NewServer()
	s := newStepper(t, srv)
	o := srv.Create(t, fakeapi.Deployments, fakeapi.Object("a", "o", "o-uid"))
	d := srv.Create(t, fakeapi.ConfigMaps, fakeapi.Object("a", "d", "d-uid", fakeapi.DeploymentRef("o", "o-uid")))
	unlisted := []discovery.Resource{{GVR: fakeapi.ConfigMaps, Kind: "ConfigMap", Namespaced: true}}
	s.c.unlisted = func() []discovery.Resource { return unlisted }
	s.deleteWith(fakeapi.Deployments, o, metav1.DeletePropagationOrphan)
	s.observe(fakeapi.Deployments, o)

	if err := s.orphanStep("o-uid"); !errors.Is(err, errRetry) {
		t.Fatalf("orphan step with configmaps unlisted = %v, want a retry", err)
	}
	if cur := s.mustGet(fakeapi.Deployments, o); len(cur.Finalizers) == 0 {
		t.Fatal("orphan finalizer removed before configmaps were ever listed")
	}
	if held, _ := s.c.Held(); len(held) != 1 || held[0].Owner.UID != "o-uid" || held[0].Finalizer != "orphan" || len(held[0].Unlisted) != 1 {
		t.Errorf("Held() = %+v, want o's orphan finalizer held for configmaps", held)
	}

	// Past the hold, the finalizer goes; the dependent, listed only now,
	// references an owner that is gone, and is orphaned.
	s.c.cfg.UnlistedHold = time.Nanosecond
	if err := s.orphanStep("o-uid"); err != nil {
		t.Fatalf("orphan step past the hold: %v", err)
	}
	s.observe(fakeapi.Deployments, o)
	if _, err := srv.Get(fakeapi.Deployments, "a", "o"); !apierrors.IsNotFound(err) {
		t.Fatalf("owner still there past the hold: %v", err)
	}
	if held, released := s.c.Held(); len(held) != 0 || len(released) != 1 || released[0].Released.IsZero() {
		t.Errorf("Held() = %+v, %+v; want nothing held, o's finalizer released", held, released)
	}
	unlisted = nil
	s.observe(fakeapi.ConfigMaps, d)
	if err := s.deleteStep("d-uid"); err != nil {
		t.Fatal(err)
	}
	if got := refUIDs(s.mustGet(fakeapi.ConfigMaps, d)); len(got) != 0 {
		t.Errorf("orphaned dependent still references %v", got)
	}
	_, deletes, _ := srv.KGCActions()
	if len(deletes) != 0 {
		t.Errorf("DELETEs %v: an orphaned dependent must never be deleted on its owner's account", deletes)
	}
}

// The foregroundDeletion finalizer waits for the list
// of every resource that could hold a blocking dependent; a cluster-scoped
// resource cannot hold a namespaced owner's dependents and does not hold it.
func TestForegroundFinalizerHeldWhileResourceUnlisted(t *testing.T) {
	srv := fakeapi.NewServer()
	s := newStepper(t, srv)
	o := srv.Create(t, fakeapi.Deployments, fakeapi.Object("a", "o", "o-uid"))
	unlisted := []discovery.Resource{{GVR: schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}, Kind: "Namespace"}}
	s.c.unlisted = func() []discovery.Resource { return unlisted }
	s.deleteWith(fakeapi.Deployments, o, metav1.DeletePropagationForeground)
	s.observe(fakeapi.Deployments, o)
	unlisted = append(unlisted, discovery.Resource{GVR: fakeapi.ConfigMaps, Kind: "ConfigMap", Namespaced: true})
	if err := s.deleteStep("o-uid"); !errors.Is(err, errRetry) {
		t.Fatalf("foreground step with configmaps unlisted = %v, want a retry", err)
	}
	if cur := s.mustGet(fakeapi.Deployments, o); len(cur.Finalizers) == 0 {
		t.Fatal("foregroundDeletion finalizer removed before configmaps were ever listed")
	}
	unlisted = unlisted[:1] // only a cluster-scoped resource is unlisted
	if err := s.deleteStep("o-uid"); err != nil {
		t.Fatal(err)
	}
	if _, err := srv.Get(fakeapi.Deployments, "a", "o"); !apierrors.IsNotFound(err) {
		t.Fatalf("foreground owner with no dependents still there: %v", err)
	}
}

// D has owners A (already deleted on the server, its deletion not
// yet in the graph) and B (in Foreground deletion, blocking). From the
// graph alone A is solid and kgc removed D's reference to B, which let B
// go while D still existed. A quorum read of A first finds it gone: D is
// garbage and is deleted, and B waits for it.
func TestMixedCaseConfirmsSolidOwner(t *testing.T) {
	srv := fakeapi.NewServer()
	s := newStepper(t, srv)
	a := srv.Create(t, fakeapi.Deployments, fakeapi.Object("a", "a", "a-uid"))
	b := srv.Create(t, fakeapi.Deployments, fakeapi.Object("a", "b", "b-uid"))
	d := srv.Create(t, fakeapi.ConfigMaps, fakeapi.Object("a", "d", "d-uid", fakeapi.DeploymentRef("a", "a-uid"), fakeapi.DeploymentRef("b", "b-uid")))
	s.observe(fakeapi.Deployments, a)
	s.observe(fakeapi.Deployments, b)
	s.observe(fakeapi.ConfigMaps, d)
	s.deleteWith(fakeapi.Deployments, a, metav1.DeletePropagationBackground) // not observed
	s.deleteWith(fakeapi.Deployments, b, metav1.DeletePropagationForeground)
	s.observe(fakeapi.Deployments, b)

	if err := s.deleteStep("d-uid"); err != nil {
		t.Fatal(err)
	}
	if _, err := srv.Get(fakeapi.ConfigMaps, "a", "d"); !apierrors.IsNotFound(err) {
		cur := s.mustGet(fakeapi.ConfigMaps, d)
		t.Fatalf("D still exists with references %v: it must be deleted, not stripped of its waiting owner", refUIDs(cur))
	}
	gets, _, patches := srv.KGCActions()
	if len(patches) != 0 {
		t.Errorf("PATCHes %v, want none", patches)
	}
	if len(gets) != 1 || gets[0].GetName() != "a" {
		t.Errorf("GETs %v, want one confirming A", gets)
	}
}

// When the solid owner is confirmed, the waiting
// reference is removed, for one GET.
func TestMixedCaseConfirmedSolidKeeps(t *testing.T) {
	srv := fakeapi.NewServer()
	s := newStepper(t, srv)
	a := srv.Create(t, fakeapi.Deployments, fakeapi.Object("a", "a", "a-uid"))
	b := srv.Create(t, fakeapi.Deployments, fakeapi.Object("a", "b", "b-uid"))
	d := srv.Create(t, fakeapi.ConfigMaps, fakeapi.Object("a", "d", "d-uid", fakeapi.DeploymentRef("a", "a-uid"), fakeapi.DeploymentRef("b", "b-uid")))
	s.observe(fakeapi.Deployments, a)
	s.observe(fakeapi.Deployments, b)
	s.observe(fakeapi.ConfigMaps, d)
	s.deleteWith(fakeapi.Deployments, b, metav1.DeletePropagationForeground)
	s.observe(fakeapi.Deployments, b)
	if err := s.deleteStep("d-uid"); err != nil {
		t.Fatal(err)
	}
	if got := refUIDs(s.mustGet(fakeapi.ConfigMaps, d)); len(got) != 1 || got[0] != "a-uid" {
		t.Errorf("D references %v, want [a-uid]", got)
	}
	if gets, _, _ := srv.KGCActions(); len(gets) != 1 {
		t.Errorf("%d GETs, want 1", len(gets))
	}
}

// A client updates D's annotations constantly, so D's DELETE,
// decided from the graph's version, meets a 409 every time. kgc re-reads D
// and, its ownerReferences and finalizers unchanged, deletes it at the
// version read; if they changed, it does not.
func TestConflictingDeleteRetriedWhenReferencesUnchanged(t *testing.T) {
	for _, tc := range []struct {
		name        string
		change      func(*metav1.PartialObjectMetadata)
		wantDeleted bool
	}{
		{"annotation changed", func(o *metav1.PartialObjectMetadata) {
			o.Annotations = map[string]string{"touched": time.Now().String()}
		}, true},
		{"new owner added", func(o *metav1.PartialObjectMetadata) {
			o.OwnerReferences = append(o.OwnerReferences, fakeapi.DeploymentRef("live", "live-uid"))
		}, false},
		{"finalizer added", func(o *metav1.PartialObjectMetadata) {
			o.Finalizers = append(o.Finalizers, metav1.FinalizerOrphanDependents)
		}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := fakeapi.NewServer()
			s := newStepper(t, srv)
			owner := srv.Create(t, fakeapi.Deployments, fakeapi.Object("a", "o", "o-uid"))
			d := srv.Create(t, fakeapi.ConfigMaps, fakeapi.Object("a", "d", "d-uid", fakeapi.DeploymentRef("o", "o-uid")))
			s.observe(fakeapi.Deployments, owner)
			s.observe(fakeapi.ConfigMaps, d)
			s.deleteWith(fakeapi.Deployments, owner, metav1.DeletePropagationBackground)
			s.observe(fakeapi.Deployments, owner)
			srv.Mu.Lock()
			cur, _ := srv.Get(fakeapi.ConfigMaps, "a", "d")
			tc.change(cur)
			if err := srv.Store(fakeapi.ConfigMaps, cur); err != nil {
				t.Fatal(err)
			}
			srv.Mu.Unlock()

			err := s.deleteStep("d-uid")
			_, getErr := srv.Get(fakeapi.ConfigMaps, "a", "d")
			if deleted := apierrors.IsNotFound(getErr); deleted != tc.wantDeleted {
				t.Fatalf("deleted = %v (step: %v), want %v", deleted, err, tc.wantDeleted)
			}
			if !tc.wantDeleted && !errors.Is(err, errRetry) {
				t.Errorf("step = %v, want a retry once the graph has the new version", err)
			}
			_, deletes, _ := srv.KGCActions()
			want := 1
			if tc.wantDeleted {
				want = 2
			}
			if len(deletes) != want {
				t.Errorf("%d DELETEs, want %d", len(deletes), want)
			}
			for _, del := range deletes {
				if p := del.DeleteOptions.Preconditions; p == nil || p.UID == nil || p.ResourceVersion == nil {
					t.Errorf("DELETE without uid and resourceVersion preconditions: %+v", del.DeleteOptions)
				}
			}
		})
	}
}

// Two owners orphaning a shared dependent at once never make
// each other's patches fail: each removes its own reference by UID.
func TestConcurrentOrphansDoNotConflict(t *testing.T) {
	srv := fakeapi.NewServer()
	s := newStepper(t, srv)
	o := srv.Create(t, fakeapi.Deployments, fakeapi.Object("a", "o", "o-uid"))
	p := srv.Create(t, fakeapi.Deployments, fakeapi.Object("a", "p", "p-uid"))
	d := srv.Create(t, fakeapi.ConfigMaps, fakeapi.Object("a", "d", "d-uid", fakeapi.DeploymentRef("o", "o-uid"), fakeapi.DeploymentRef("p", "p-uid")))
	s.observe(fakeapi.Deployments, o)
	s.observe(fakeapi.Deployments, p)
	s.observe(fakeapi.ConfigMaps, d)
	s.deleteWith(fakeapi.Deployments, o, metav1.DeletePropagationOrphan)
	s.deleteWith(fakeapi.Deployments, p, metav1.DeletePropagationOrphan)
	s.observe(fakeapi.Deployments, o)
	s.observe(fakeapi.Deployments, p)
	// Both patches are decided from D's same version and sent before
	// either lands in the graph.
	it, _ := s.c.graph.Item("d-uid")
	tg, err := s.c.target(&it)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.c.ops.RemoveOwnerReference(s.ctx, tg, "p-uid", []int{1}); err != nil {
		t.Fatalf("P's patch: %v", err)
	}
	if _, err := s.c.ops.RemoveOwnerReference(s.ctx, tg, "o-uid", []int{0}); err != nil {
		t.Fatalf("O's patch, after P's changed D: %v", err)
	}
	if got := refUIDs(s.mustGet(fakeapi.ConfigMaps, d)); len(got) != 0 {
		t.Errorf("D references %v, want none", got)
	}
}

// An object whose reference to itself blocks, deleted in the
// Foreground, does not wait for itself.
func TestForegroundSelfReference(t *testing.T) {
	srv := fakeapi.NewServer()
	s := newStepper(t, srv)
	x := srv.Create(t, fakeapi.ConfigMaps, fakeapi.Object("a", "x", "x-uid", fakeapi.ConfigMapRef("x", "x-uid")))
	s.observe(fakeapi.ConfigMaps, x)
	s.deleteWith(fakeapi.ConfigMaps, x, metav1.DeletePropagationForeground)
	s.observe(fakeapi.ConfigMaps, x)
	if n := s.c.graph.BlockingDependents("x-uid"); n != 0 {
		t.Errorf("x counts %d blocking dependents, want 0 (itself never blocks)", n)
	}
	if err := s.deleteStep("x-uid"); err != nil {
		t.Fatal(err)
	}
	if _, err := srv.Get(fakeapi.ConfigMaps, "a", "x"); !apierrors.IsNotFound(err) {
		t.Fatalf("x still there: %v", err)
	}
}

// owner ← middle ← lower ← held, every reference blocking. lower
// is deleted in the Foreground first and waits for held (which carries a
// finalizer of someone else's); then owner is deleted in the Foreground.
// There is no cycle: middle must be deleted with its blocking reference
// intact, and owner must wait for it. Upstream (and kgc before) cleared
// middle's blockOwnerDeletion and released owner at once.
func TestNoFalseCycleBreaking(t *testing.T) {
	srv := fakeapi.NewServer()
	s := newStepper(t, srv)
	owner := srv.Create(t, fakeapi.ConfigMaps, fakeapi.Object("a", "owner", "owner-uid"))
	middle := srv.Create(t, fakeapi.ConfigMaps, fakeapi.Object("a", "middle", "middle-uid", fakeapi.ConfigMapRef("owner", "owner-uid")))
	lower := srv.Create(t, fakeapi.ConfigMaps, fakeapi.Object("a", "lower", "lower-uid", fakeapi.ConfigMapRef("middle", "middle-uid")))
	heldObj := fakeapi.Object("a", "held", "held-uid", fakeapi.ConfigMapRef("lower", "lower-uid"))
	heldObj.Finalizers = []string{"example.com/keep"}
	held := srv.Create(t, fakeapi.ConfigMaps, heldObj)
	for _, o := range []*metav1.PartialObjectMetadata{owner, middle, lower, held} {
		s.observe(fakeapi.ConfigMaps, o)
	}
	s.deleteWith(fakeapi.ConfigMaps, lower, metav1.DeletePropagationForeground)
	s.observe(fakeapi.ConfigMaps, lower)
	if err := s.deleteStep("held-uid"); err != nil {
		t.Fatal(err)
	}
	s.observe(fakeapi.ConfigMaps, held) // deleting, held by its finalizer
	s.deleteWith(fakeapi.ConfigMaps, owner, metav1.DeletePropagationForeground)
	s.observe(fakeapi.ConfigMaps, owner)

	if err := s.deleteStep("middle-uid"); err != nil {
		t.Fatal(err)
	}
	cur := s.mustGet(fakeapi.ConfigMaps, middle)
	if cur.DeletionTimestamp == nil {
		t.Fatal("middle is not being deleted")
	}
	if b := cur.OwnerReferences[0].BlockOwnerDeletion; b == nil || !*b {
		t.Fatal("middle's blockOwnerDeletion was cleared: there is no cycle")
	}
	s.observe(fakeapi.ConfigMaps, middle)
	err := s.deleteStep("owner-uid")
	if err != nil && !errors.Is(err, errRetry) {
		t.Fatal(err)
	}
	if o := s.mustGet(fakeapi.ConfigMaps, owner); len(o.Finalizers) == 0 {
		t.Fatal("owner released while middle, which blocks it, still exists")
	}
}

// A real cycle (x ↔ y, both blocking): x deleted in the Foreground; y has a
// waiting owner that waits for it through x, so y's reference is unblocked
// and both go.
func TestRealCycleIsBroken(t *testing.T) {
	srv := fakeapi.NewServer()
	s := newStepper(t, srv)
	x := srv.Create(t, fakeapi.ConfigMaps, fakeapi.Object("a", "x", "x-uid", fakeapi.ConfigMapRef("y", "y-uid")))
	y := srv.Create(t, fakeapi.ConfigMaps, fakeapi.Object("a", "y", "y-uid", fakeapi.ConfigMapRef("x", "x-uid")))
	s.observe(fakeapi.ConfigMaps, x)
	s.observe(fakeapi.ConfigMaps, y)
	s.deleteWith(fakeapi.ConfigMaps, x, metav1.DeletePropagationForeground)
	s.observe(fakeapi.ConfigMaps, x)
	if err := s.deleteStep("y-uid"); err != nil {
		t.Fatal(err)
	}
	cur := s.mustGet(fakeapi.ConfigMaps, y)
	if b := cur.OwnerReferences[0].BlockOwnerDeletion; b == nil || *b {
		t.Fatal("y's reference to x still blocks: the cycle is not broken")
	}
	s.observe(fakeapi.ConfigMaps, y)
	if err := s.deleteStep("x-uid"); err != nil {
		t.Fatal(err)
	}
	s.observe(fakeapi.ConfigMaps, x)
	if err := s.deleteStep("y-uid"); err != nil {
		t.Fatal(err)
	}
	s.observe(fakeapi.ConfigMaps, y)
	if err := s.deleteStep("y-uid"); err != nil {
		t.Fatal(err)
	}
	for _, o := range []*metav1.PartialObjectMetadata{x, y} {
		if _, err := srv.Get(fakeapi.ConfigMaps, "a", o.Name); !apierrors.IsNotFound(err) {
			t.Errorf("%s still there: %v", o.Name, err)
		}
	}
}

// Only kgc's own removal of an orphan finalizer makes an owner's dangling
// references "orphaned": a client that deletes the owner again with
// another policy makes the apiserver drop the finalizer, and then the
// dependents are garbage as usual.
func TestOrphanFinalizerRemovedByOthersLeavesGarbage(t *testing.T) {
	srv := fakeapi.NewServer()
	s := newStepper(t, srv)
	o := srv.Create(t, fakeapi.Deployments, fakeapi.Object("a", "o", "o-uid"))
	d := srv.Create(t, fakeapi.ConfigMaps, fakeapi.Object("a", "d", "d-uid", fakeapi.DeploymentRef("o", "o-uid")))
	s.observe(fakeapi.Deployments, o)
	s.deleteWith(fakeapi.Deployments, o, metav1.DeletePropagationOrphan)
	s.observe(fakeapi.Deployments, o) // orphaning, as kgc sees it
	srv.SetFinalizers(t, fakeapi.Deployments, "a", "o")
	s.observe(fakeapi.Deployments, o) // gone, without kgc
	s.observe(fakeapi.ConfigMaps, d)
	if err := s.deleteStep("d-uid"); err != nil {
		t.Fatal(err)
	}
	if _, err := srv.Get(fakeapi.ConfigMaps, "a", "d"); !apierrors.IsNotFound(err) {
		t.Errorf("dependent of an owner whose orphan finalizer someone else removed: %v, want deleted", err)
	}
}

// listLandsAfterRead makes the first question "what is unlisted?" the
// moment a resource's first LIST lands in the graph: the objects are
// applied, and the resource counts as listed from then on. A worker that
// read the graph before and asks after must not take "nothing unlisted" as
// covering what it read (simulator seed 1625; the real-apiserver model
// test's seed 873744650).
func (s *stepper) listLandsAfterRead(gvr schema.GroupVersionResource, objs ...*metav1.PartialObjectMetadata) {
	landed := false
	s.c.unlisted = func() []discovery.Resource {
		if !landed {
			landed = true
			for _, o := range objs {
				s.observe(gvr, o)
			}
		}
		return nil
	}
}

// Orphan: O's worker reads O's dependents while configmaps are not listed
// yet (none in the graph); the configmaps list, with D referencing O,
// lands before the worker checks what is unlisted. The finalizer must not
// go on the dependents read before: D still references O on the server.
func TestOrphanFinalizerWaitsForListLandingAfterRead(t *testing.T) {
	srv := fakeapi.NewServer()
	s := newStepper(t, srv)
	o := srv.Create(t, fakeapi.Deployments, fakeapi.Object("a", "o", "o-uid"))
	d := srv.Create(t, fakeapi.ConfigMaps, fakeapi.Object("a", "d", "d-uid", fakeapi.DeploymentRef("o", "o-uid")))
	s.deleteWith(fakeapi.Deployments, o, metav1.DeletePropagationOrphan)
	s.observe(fakeapi.Deployments, o)
	s.listLandsAfterRead(fakeapi.ConfigMaps, d)

	err := s.orphanStep("o-uid")
	if cur, gerr := srv.Get(fakeapi.Deployments, "a", "o"); gerr != nil || !slices.Contains(cur.Finalizers, metav1.FinalizerOrphanDependents) {
		t.Fatalf("orphan step = %v: the orphan finalizer went while d, listed after the dependents were read, still references o (owner: %v, %v)", err, cur, gerr)
	}
	if !errors.Is(err, errRetry) {
		t.Fatalf("orphan step = %v, want a retry", err)
	}
	// The next turn orphans D, then removes the finalizer.
	if err := s.orphanStep("o-uid"); err != nil {
		t.Fatal(err)
	}
	if got := refUIDs(s.mustGet(fakeapi.ConfigMaps, d)); len(got) != 0 {
		t.Errorf("d still references %v", got)
	}
	if _, err := srv.Get(fakeapi.Deployments, "a", "o"); !apierrors.IsNotFound(err) {
		t.Errorf("o still there after its dependent was orphaned: %v", err)
	}
}

// Foreground: the same race for the foregroundDeletion finalizer and a
// blocking dependent.
func TestForegroundFinalizerWaitsForListLandingAfterRead(t *testing.T) {
	srv := fakeapi.NewServer()
	s := newStepper(t, srv)
	o := srv.Create(t, fakeapi.Deployments, fakeapi.Object("a", "o", "o-uid"))
	d := srv.Create(t, fakeapi.ConfigMaps, fakeapi.Object("a", "d", "d-uid", fakeapi.DeploymentRef("o", "o-uid")))
	s.deleteWith(fakeapi.Deployments, o, metav1.DeletePropagationForeground)
	s.observe(fakeapi.Deployments, o)
	s.listLandsAfterRead(fakeapi.ConfigMaps, d)

	err := s.deleteStep("o-uid")
	if cur, gerr := srv.Get(fakeapi.Deployments, "a", "o"); gerr != nil || !slices.Contains(cur.Finalizers, metav1.FinalizerDeleteDependents) {
		t.Fatalf("foreground step = %v: the foregroundDeletion finalizer went while d, listed after the dependents were read, still blocks o (owner: %v, %v)", err, cur, gerr)
	}
	if !errors.Is(err, errRetry) {
		t.Fatalf("foreground step = %v, want a retry", err)
	}
}
