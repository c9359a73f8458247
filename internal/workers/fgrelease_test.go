package workers

import (
	"errors"
	"slices"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/klog/v2/ktesting"

	"github.com/kgc-dev/kgc/internal/fakeapi"
	"github.com/kgc-dev/kgc/internal/graph"
	"github.com/kgc-dev/kgc/internal/metrics"
)

// The removal of an owner's foregroundDeletion finalizer, answered in each
// of the three ways that matter (the patch landed but its answer was lost;
// the answer was lost and the patch did not land; the apiserver refused
// it), and the DELETE of a dependent decided while the owner waited.

// lostAnswer is the apiserver's answer to a write whose handler timed out:
// the write may still land.
func lostAnswer() error {
	return apierrors.NewTimeoutError("the server was unable to return a response in the time allotted, but may still be processing the request", 0)
}

// newMeteredStepper returns a stepper whose workers count their owner lookups on
// reg.
func newMeteredStepper(t *testing.T, srv *fakeapi.Server) (*stepper, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg, metrics.Sources{
		Graph:             func() metrics.GraphCounts { return metrics.GraphCounts{} },
		Monitors:          func() []metrics.MonitorState { return nil },
		DiscoveryFailures: func() []string { return nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	c := New(Config{Metadata: srv.Client, Mapper: fakeapi.NewMapper(), Workers: 1, Metrics: m}, graph.New())
	t.Cleanup(func() {
		c.attemptToDelete.ShutDown()
		c.attemptToOrphan.ShutDown()
	})
	_, ctx := ktesting.NewTestContext(t)
	return &stepper{t: t, srv: srv, c: c, ctx: ctx}, reg
}

// confirmLookups returns kgc_owner_lookup_requests_total{verb="confirm"}.
func confirmLookups(t *testing.T, reg *prometheus.Registry) float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != "kgc_owner_lookup_requests_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "verb" && l.GetValue() == metrics.LookupConfirm {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	t.Fatal("no kgc_owner_lookup_requests_total{verb=\"confirm\"}")
	return 0
}

// answerFinalizerPatchOnce makes the next finalizer patch of a deployment
// fail with answer, after applying it to the server if land is set; later
// patches go through.
func answerFinalizerPatchOnce(srv *fakeapi.Server, land bool, answer error) {
	done := false
	srv.Client.PrependReactor("patch", "deployments", func(a clienttesting.Action) (bool, runtime.Object, error) {
		if done {
			return false, nil, nil
		}
		done = true
		if land {
			p := a.(clienttesting.PatchActionImpl)
			if _, err := srv.Patch(p.GetResource(), p.GetNamespace(), p.GetName(), p.GetPatchType(), p.GetPatch()); err != nil {
				return true, nil, err
			}
		}
		return true, nil, answer
	})
}

// ownerGets returns how many GETs kgc sent for the deployment name.
func ownerGets(srv *fakeapi.Server, name string) int {
	gets, _, _ := srv.KGCActions()
	n := 0
	for _, g := range gets {
		if g.GetResource() == fakeapi.Deployments && g.GetName() == name {
			n++
		}
	}
	return n
}

// waitingOwnerWithDecidedDependent creates O, which carries a finalizer
// of its own, and its dependent D (not blocking), deletes O Foreground,
// shows both to the graph, and returns D's DELETE decided while O waits.
func waitingOwnerWithDecidedDependent(t *testing.T, s *stepper, srv *fakeapi.Server) (o, d *metav1.PartialObjectMetadata, wd write) {
	t.Helper()
	o = srv.Create(t, fakeapi.Deployments, fakeapi.Object("a", "o", "o-uid"))
	srv.SetFinalizers(t, fakeapi.Deployments, "a", "o", "example.com/keep")
	ref := fakeapi.DeploymentRef("o", "o-uid")
	ref.BlockOwnerDeletion = nil
	d = srv.Create(t, fakeapi.ConfigMaps, fakeapi.Object("a", "d", "d-uid", ref))
	s.deleteWith(fakeapi.Deployments, o, metav1.DeletePropagationForeground)
	s.observe(fakeapi.Deployments, o)
	s.observe(fakeapi.ConfigMaps, d)
	wd, err := s.c.planDeleteItem(s.ctx, "d-uid")
	if err != nil || wd == nil {
		t.Fatalf("D: no DELETE decided while its owner waits: %v", err)
	}
	return o, d, wd
}

// deletedNames returns the names kgc sent a DELETE for.
func deletedNames(srv *fakeapi.Server) []string {
	_, deletes, _ := srv.KGCActions()
	var out []string
	for _, d := range deletes {
		out = append(out, d.GetName())
	}
	return out
}

// (1) O, deleted Foreground, also carries a finalizer of its own; its
// dependent D (not blocking) is decided for deletion while O waits. kgc
// then removes O's foregroundDeletion finalizer; the patch lands but its
// answer is lost. O, kept by its other finalizer, is solid again: D's
// DELETE decided while O waited must not be sent (S1). (Before kgc
// confirmed such an owner with a GET, the DELETE was sent.)
func TestForegroundReleaseAnsweredAmbiguouslyStillStopsDependentDeletes(t *testing.T) {
	srv := fakeapi.NewServer()
	s, reg := newMeteredStepper(t, srv)
	o, d, wd := waitingOwnerWithDecidedDependent(t, s, srv)
	answerFinalizerPatchOnce(srv, true, lostAnswer())
	wo, err := s.c.planDeleteItem(s.ctx, "o-uid")
	if err != nil || wo == nil {
		t.Fatalf("O: no finalizer removal decided: %v", err)
	}
	if err := wo(s.ctx); !apierrors.IsTimeout(err) {
		t.Fatalf("O's finalizer removal: %v, want the lost answer", err)
	}
	if cur := s.mustGet(fakeapi.Deployments, o); slices.Contains(cur.Finalizers, metav1.FinalizerDeleteDependents) {
		t.Fatalf("the foregroundDeletion finalizer is still there (the test's premise): %v", cur.Finalizers)
	}
	if err := wd(s.ctx); !errors.Is(err, errRetry) {
		t.Errorf("D's DELETE: %v, want errRetry (decided again)", err)
	}
	if deletes := deletedNames(srv); len(deletes) != 0 {
		t.Fatalf("DELETE %v sent for a dependent of an owner that is solid again (its foregroundDeletion finalizer released by kgc, answered ambiguously)", deletes)
	}
	if n := ownerGets(srv, "o"); n != 1 {
		t.Errorf("%d GETs of O, want 1 (the confirmation)", n)
	}
	if n := confirmLookups(t, reg); n != 1 {
		t.Errorf("confirm lookups %v, want 1", n)
	}
	if !s.c.fgReleased.Has("o-uid") || s.c.fgUncertain.Has("o-uid") {
		t.Errorf("O released %v, uncertain %v: want released, not uncertain (the GET found it solid)", s.c.fgReleased.Has("o-uid"), s.c.fgUncertain.Has("o-uid"))
	}
	// D decided again once the graph has O's update: O keeps it.
	s.observe(fakeapi.Deployments, o)
	if err := s.deleteStep("d-uid"); err != nil {
		t.Fatal(err)
	}
	s.mustGet(fakeapi.ConfigMaps, d)
	if deletes := deletedNames(srv); len(deletes) != 0 {
		t.Fatalf("DELETE %v sent for a dependent its solid owner keeps", deletes)
	}
}

// (2) The same, but the answer is lost and the patch did not land: O still
// waits. The dependents are blocking (O waits for them): kgc's graph did
// not show them yet when it decided O's finalizer (a lagging watch). Their
// DELETEs must go out — refusing them until O's release is settled would
// never end, since O waits for them — after one confirming GET of O in
// all: the first DELETE's confirmation settles O for the next.
func TestForegroundReleaseAnsweredAmbiguouslyNotLandedDeletesDependents(t *testing.T) {
	srv := fakeapi.NewServer()
	s, reg := newMeteredStepper(t, srv)
	o := srv.Create(t, fakeapi.Deployments, fakeapi.Object("a", "o", "o-uid"))
	srv.SetFinalizers(t, fakeapi.Deployments, "a", "o", "example.com/keep")
	d1 := srv.Create(t, fakeapi.ConfigMaps, fakeapi.Object("a", "d1", "d1-uid", fakeapi.DeploymentRef("o", "o-uid")))
	d2 := srv.Create(t, fakeapi.ConfigMaps, fakeapi.Object("a", "d2", "d2-uid", fakeapi.DeploymentRef("o", "o-uid")))
	s.deleteWith(fakeapi.Deployments, o, metav1.DeletePropagationForeground)
	s.observe(fakeapi.Deployments, o) // D1's and D2's events are still on their watch

	answerFinalizerPatchOnce(srv, false, lostAnswer())
	if err := s.deleteStep("o-uid"); !apierrors.IsTimeout(err) {
		t.Fatalf("O's step: %v, want the lost answer", err)
	}
	if cur := s.mustGet(fakeapi.Deployments, o); !slices.Contains(cur.Finalizers, metav1.FinalizerDeleteDependents) {
		t.Fatalf("the foregroundDeletion finalizer is gone (the test's premise): %v", cur.Finalizers)
	}
	if s.c.fgReleased.Has("o-uid") || !s.c.fgUncertain.Has("o-uid") {
		t.Errorf("O released %v, uncertain %v after an ambiguous answer: want uncertain only", s.c.fgReleased.Has("o-uid"), s.c.fgUncertain.Has("o-uid"))
	}
	s.observe(fakeapi.ConfigMaps, d1)
	s.observe(fakeapi.ConfigMaps, d2)
	for _, uid := range []string{"d1-uid", "d2-uid"} {
		if err := s.deleteStep(types.UID(uid)); err != nil {
			t.Fatalf("%s: %v", uid, err)
		}
	}
	if got := deletedNames(srv); !slices.Equal(got, []string{"d1", "d2"}) {
		t.Fatalf("DELETEs %v, want d1 and d2: the blocking dependents of an owner still waiting must go", got)
	}
	if n := ownerGets(srv, "o"); n != 1 {
		t.Errorf("%d GETs of O, want 1 (one confirmation settles O)", n)
	}
	if n := confirmLookups(t, reg); n != 1 {
		t.Errorf("confirm lookups %v, want 1", n)
	}
	if s.c.fgUncertain.Has("o-uid") {
		t.Error("O still uncertain after a GET found it waiting")
	}
	// And the cascade ends: O's finalizer goes once its dependents are gone.
	s.observe(fakeapi.ConfigMaps, d1)
	s.observe(fakeapi.ConfigMaps, d2)
	if err := s.deleteStep("o-uid"); err != nil {
		t.Fatal(err)
	}
	if cur := s.mustGet(fakeapi.Deployments, o); slices.Contains(cur.Finalizers, metav1.FinalizerDeleteDependents) {
		t.Fatalf("O still carries foregroundDeletion after its dependents went: %v", cur.Finalizers)
	}
	if !s.c.fgReleased.Has("o-uid") {
		t.Error("O's successful release was not recorded")
	}
}

// (3) A removal the apiserver refused (409) did not land: O still waits,
// and D's DELETE decided while it waits goes out as before, without a
// GET.
func TestForegroundReleaseRefusedDeletesDependentWithoutRead(t *testing.T) {
	srv := fakeapi.NewServer()
	s, reg := newMeteredStepper(t, srv)
	_, _, wd := waitingOwnerWithDecidedDependent(t, s, srv)
	answerFinalizerPatchOnce(srv, false, fakeapi.Conflict(fakeapi.Deployments, "o", "finalizers"))
	wo, err := s.c.planDeleteItem(s.ctx, "o-uid")
	if err != nil || wo == nil {
		t.Fatalf("O: no finalizer removal decided: %v", err)
	}
	if err := wo(s.ctx); !apierrors.IsConflict(err) && !errors.Is(err, errRetry) {
		t.Fatalf("O's finalizer removal: %v, want the conflict", err)
	}
	if s.c.fgReleased.Has("o-uid") || s.c.fgUncertain.Has("o-uid") {
		t.Fatalf("O released %v, uncertain %v after a refusal: want neither", s.c.fgReleased.Has("o-uid"), s.c.fgUncertain.Has("o-uid"))
	}
	if err := wd(s.ctx); err != nil {
		t.Fatalf("D's DELETE: %v", err)
	}
	if got := deletedNames(srv); !slices.Equal(got, []string{"d"}) {
		t.Fatalf("DELETEs %v, want d", got)
	}
	if n := ownerGets(srv, "o"); n != 0 {
		t.Errorf("%d GETs of O, want none after a refusal", n)
	}
	if n := confirmLookups(t, reg); n != 0 {
		t.Errorf("confirm lookups %v, want 0", n)
	}
}

// (4) The answer is lost, the patch landed, and O, with no other
// finalizer, went: D's DELETE decided while O waited is not sent as
// decided (its policy and the breaker rest on O waiting); D is decided
// again with O gone, and deleted.
func TestForegroundReleaseAnsweredAmbiguouslyOwnerGone(t *testing.T) {
	srv := fakeapi.NewServer()
	s, reg := newMeteredStepper(t, srv)
	o := srv.Create(t, fakeapi.Deployments, fakeapi.Object("a", "o", "o-uid"))
	ref := fakeapi.DeploymentRef("o", "o-uid")
	ref.BlockOwnerDeletion = nil
	d := srv.Create(t, fakeapi.ConfigMaps, fakeapi.Object("a", "d", "d-uid", ref))
	s.deleteWith(fakeapi.Deployments, o, metav1.DeletePropagationForeground)
	s.observe(fakeapi.Deployments, o)
	s.observe(fakeapi.ConfigMaps, d)

	wd, err := s.c.planDeleteItem(s.ctx, "d-uid")
	if err != nil || wd == nil {
		t.Fatalf("D: no DELETE decided while its owner waits: %v", err)
	}
	answerFinalizerPatchOnce(srv, true, lostAnswer())
	wo, err := s.c.planDeleteItem(s.ctx, "o-uid")
	if err != nil || wo == nil {
		t.Fatalf("O: no finalizer removal decided: %v", err)
	}
	_ = wo(s.ctx)
	if _, err := srv.Get(fakeapi.Deployments, "a", "o"); !apierrors.IsNotFound(err) {
		t.Fatalf("O is not gone (the test's premise): %v", err)
	}
	if err := wd(s.ctx); !errors.Is(err, errRetry) {
		t.Errorf("D's DELETE: %v, want errRetry (decided again)", err)
	}
	if deletes := deletedNames(srv); len(deletes) != 0 {
		t.Fatalf("DELETE %v sent as decided while O waited", deletes)
	}
	if s.c.fgUncertain.Has("o-uid") {
		t.Error("O still uncertain after a GET found it gone")
	}
	s.observe(fakeapi.Deployments, o)
	if err := s.deleteStep("d-uid"); err != nil {
		t.Fatal(err)
	}
	if got := deletedNames(srv); !slices.Equal(got, []string{"d"}) {
		t.Fatalf("DELETEs %v, want d (its owner is gone)", got)
	}
	if n := confirmLookups(t, reg); n != 1 {
		t.Errorf("confirm lookups %v, want 1", n)
	}
}

// (5) A refusal after an ambiguous answer leaves O uncertain: the refusal
// proves only that its own patch did not land (the earlier one may have,
// and be why the finalizer test failed).
func TestForegroundReleaseRefusalKeepsEarlierUncertainty(t *testing.T) {
	srv := fakeapi.NewServer()
	s, _ := newMeteredStepper(t, srv)
	o := srv.Create(t, fakeapi.Deployments, fakeapi.Object("a", "o", "o-uid"))
	srv.SetFinalizers(t, fakeapi.Deployments, "a", "o", "example.com/keep")
	s.deleteWith(fakeapi.Deployments, o, metav1.DeletePropagationForeground)
	s.observe(fakeapi.Deployments, o)

	answerFinalizerPatchOnce(srv, false, lostAnswer())
	if err := s.deleteStep("o-uid"); !apierrors.IsTimeout(err) {
		t.Fatalf("O's first step: %v, want the lost answer", err)
	}
	answerFinalizerPatchOnce(srv, false, fakeapi.Conflict(fakeapi.Deployments, "o", "finalizers"))
	if err := s.deleteStep("o-uid"); err != nil && !errors.Is(err, errRetry) {
		t.Fatalf("O's second step: %v", err)
	}
	if s.c.fgReleased.Has("o-uid") || !s.c.fgUncertain.Has("o-uid") {
		t.Fatalf("O released %v, uncertain %v: want uncertain only", s.c.fgReleased.Has("o-uid"), s.c.fgUncertain.Has("o-uid"))
	}
}

// (6) A refusal after a release that landed leaves O released: O's
// finalizer removal succeeds, its event is not observed yet, so the next
// re-check decides the removal again on the stale graph and its patch is
// refused (the finalizer test fails: the first patch removed it). D's
// DELETE, decided while O waited, must still not be sent: O is solid,
// kept by its other finalizer (S1). Forgetting the release on that
// refusal let it through (found by the simulator, seed 7168:
// TestForegroundReleaseRefusalKeepsDependent in internal/sim).
func TestForegroundReleaseRefusalKeepsEarlierRelease(t *testing.T) {
	srv := fakeapi.NewServer()
	s, _ := newMeteredStepper(t, srv)
	_, _, wd := waitingOwnerWithDecidedDependent(t, s, srv)
	wo, err := s.c.planDeleteItem(s.ctx, "o-uid")
	if err != nil || wo == nil {
		t.Fatalf("O: no finalizer removal decided: %v", err)
	}
	if err := wo(s.ctx); err != nil {
		t.Fatalf("O's finalizer removal: %v", err)
	}
	// The graph has not seen the removal: once the write log's entry
	// expires (a lost event costs at most that), the same removal is
	// decided again, and the apiserver refuses it.
	s.c.writes.forget("o-uid")
	answerFinalizerPatchOnce(srv, false, fakeapi.Conflict(fakeapi.Deployments, "o", "finalizers"))
	wo, err = s.c.planDeleteItem(s.ctx, "o-uid")
	if err != nil || wo == nil {
		t.Fatalf("O: no second finalizer removal decided on the stale graph: %v", err)
	}
	if err := wo(s.ctx); !apierrors.IsConflict(err) && !errors.Is(err, errRetry) {
		t.Fatalf("O's second finalizer removal: %v, want the conflict", err)
	}
	if !s.c.fgReleased.Has("o-uid") {
		t.Fatal("O's release forgotten after a refusal of a later attempt")
	}
	if err := wd(s.ctx); !errors.Is(err, errRetry) {
		t.Errorf("D's DELETE: %v, want errRetry (O is released)", err)
	}
	if deletes := deletedNames(srv); len(deletes) != 0 {
		t.Fatalf("DELETE %v sent while O exists and is no longer in Foreground deletion (S1)", deletes)
	}
}

// (7) A client deletes O Foreground again after kgc released it (a
// foreign finalizer keeps O): the apiserver puts foregroundDeletion back,
// at a resourceVersion newer than kgc's release. That is a new request,
// and kgc carries it out as one: it deletes O's dependents (D, decided
// before, and D2, blocking, created after the release) and releases O
// again. Taking the first release as final refused their DELETEs for
// good, and D2 and O waited for each other. A DELETE decided while O
// waited the first time (before the release) is still not sent as
// decided: the release came after it; D is decided again.
func TestForegroundDeleteAfterReleaseIsANewRequest(t *testing.T) {
	srv := fakeapi.NewServer()
	s, _ := newMeteredStepper(t, srv)
	o, d, wOld := waitingOwnerWithDecidedDependent(t, s, srv)
	if err := s.deleteStep("o-uid"); err != nil {
		t.Fatalf("O's first release: %v", err)
	}
	if cur := s.mustGet(fakeapi.Deployments, o); slices.Contains(cur.Finalizers, metav1.FinalizerDeleteDependents) {
		t.Fatalf("O still waits after its first release (the test's premise): %v", cur.Finalizers)
	}
	s.observe(fakeapi.Deployments, o)

	// A new blocking dependent, and a second Foreground DELETE of O.
	d2 := srv.Create(t, fakeapi.ConfigMaps, fakeapi.Object("a", "d2", "d2-uid", fakeapi.DeploymentRef("o", "o-uid")))
	s.observe(fakeapi.ConfigMaps, d2)
	s.deleteWith(fakeapi.Deployments, o, metav1.DeletePropagationForeground)
	again := s.mustGet(fakeapi.Deployments, o)
	if !slices.Contains(again.Finalizers, metav1.FinalizerDeleteDependents) {
		t.Fatalf("the second Foreground DELETE did not put foregroundDeletion back (the test's premise): %v", again.Finalizers)
	}
	s.observe(fakeapi.Deployments, o)

	if err := wOld(s.ctx); !errors.Is(err, errRetry) {
		t.Errorf("the DELETE decided before the first release: %v, want errRetry (decided again)", err)
	}
	if deletes := deletedNames(srv); len(deletes) != 0 {
		t.Fatalf("DELETE %v sent as decided before kgc's release", deletes)
	}
	if err := s.deleteStep("o-uid"); err != nil && !errors.Is(err, errRetry) {
		t.Fatalf("O: %v", err)
	}
	for _, uid := range []types.UID{"d-uid", "d2-uid"} {
		if err := s.deleteStep(uid); err != nil {
			t.Fatalf("%s: %v", uid, err)
		}
	}
	if got := deletedNames(srv); !slices.Equal(got, []string{"d", "d2"}) {
		t.Fatalf("DELETEs %v, want d and d2: the dependents of an owner deleted Foreground again after kgc released it must go", got)
	}
	s.observe(fakeapi.ConfigMaps, d)
	s.observe(fakeapi.ConfigMaps, d2)
	if err := s.deleteStep("o-uid"); err != nil {
		t.Fatalf("O's second release: %v", err)
	}
	if cur := s.mustGet(fakeapi.Deployments, o); slices.Contains(cur.Finalizers, metav1.FinalizerDeleteDependents) {
		t.Fatalf("O still waits after its dependents went: %v", cur.Finalizers)
	}
	// The second release is final for what was decided before it.
	if !s.c.releasedAfter("o-uid", again.ResourceVersion) {
		t.Error("a decision that read O waiting before the second release is not refused")
	}
}

// (8) The release of the new request is settled like the first: O,
// released once, deleted Foreground again; D's DELETE is decided while O
// waits for the second time; kgc's second release lands but its answer is
// lost. The first release is no reason to take the second as settled
// (the decision came after it): O is uncertain, and D's DELETE reads O
// first, finds it solid, and is not sent (S1).
func TestForegroundSecondReleaseAnsweredAmbiguouslyStopsDependentDeletes(t *testing.T) {
	srv := fakeapi.NewServer()
	s, reg := newMeteredStepper(t, srv)
	o, d, _ := waitingOwnerWithDecidedDependent(t, s, srv)
	if err := s.deleteStep("o-uid"); err != nil {
		t.Fatalf("O's first release: %v", err)
	}
	s.observe(fakeapi.Deployments, o)
	s.deleteWith(fakeapi.Deployments, o, metav1.DeletePropagationForeground)
	s.observe(fakeapi.Deployments, o)
	wd, err := s.c.planDeleteItem(s.ctx, "d-uid")
	if err != nil || wd == nil {
		t.Fatalf("D: no DELETE decided while O waits again: %v", err)
	}
	answerFinalizerPatchOnce(srv, true, lostAnswer())
	if err := s.deleteStep("o-uid"); !apierrors.IsTimeout(err) {
		t.Fatalf("O's second release: %v, want the lost answer", err)
	}
	if cur := s.mustGet(fakeapi.Deployments, o); slices.Contains(cur.Finalizers, metav1.FinalizerDeleteDependents) {
		t.Fatalf("the second release did not land (the test's premise): %v", cur.Finalizers)
	}
	if !s.c.fgUncertain.Has("o-uid") {
		t.Error("O not uncertain after its second release was answered ambiguously")
	}
	if err := wd(s.ctx); !errors.Is(err, errRetry) {
		t.Errorf("D's DELETE: %v, want errRetry (O read solid)", err)
	}
	if deletes := deletedNames(srv); len(deletes) != 0 {
		t.Fatalf("DELETE %v sent while O exists and is no longer in Foreground deletion (S1)", deletes)
	}
	if n := confirmLookups(t, reg); n != 1 {
		t.Errorf("confirm lookups %v, want 1", n)
	}
	s.observe(fakeapi.Deployments, o)
	if err := s.deleteStep("d-uid"); err != nil {
		t.Fatal(err)
	}
	s.mustGet(fakeapi.ConfigMaps, d)
	if deletes := deletedNames(srv); len(deletes) != 0 {
		t.Fatalf("DELETE %v sent for a dependent its solid owner keeps", deletes)
	}
}

// The release records keep the latest version a release is known to have
// landed by; an owner found gone is released for good, whatever version
// a decision read it waiting at.
func TestReleaseRecordsKeepTheLatest(t *testing.T) {
	s, _ := newMeteredStepper(t, fakeapi.NewServer())
	w := s.c
	w.markReleased("o", "120")
	w.markReleased("o", "110") // an older read: the record stays
	if !w.releasedAfter("o", "115") || w.releasedAfter("o", "121") {
		t.Errorf("released after 115 %v (want true), after 121 %v (want false)", w.releasedAfter("o", "115"), w.releasedAfter("o", "121"))
	}
	w.markReleased("o", releasedForGood)
	w.markReleased("o", "200")
	if !w.releasedAfter("o", "1000") || !w.releasedAfter("o", "") {
		t.Error("an owner released for good is not released for every read")
	}
	if w.releasedAfter("p", "1") {
		t.Error("an owner never released is released")
	}
	w.markReleased("q", "abc") // a version that does not compare
	if !w.releasedAfter("q", "999") {
		t.Error("a release at a version that does not compare does not hold every read")
	}
}
