package workers

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2/ktesting"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/kgc-dev/kgc/internal/fakeapi"
	"github.com/kgc-dev/kgc/internal/graph"
	"github.com/kgc-dev/kgc/internal/rules"
)

// Interleavings of the start-up parking (awaitlist.go) in which a parked
// dependent could be deleted wrongly or left parked forever.

var deploymentsGK = schema.GroupKind{Group: "apps", Kind: "Deployment"}

// fakeListing is the graph builder's Listing for a stepper: which group
// and kinds are making their first list, how long each has been idle, and
// a hook run inside the call (with awaitList's lock held when called from
// park: the hook must not apply a Listed marker synchronously).
type fakeListing struct {
	mu      sync.Mutex
	listing map[schema.GroupKind]bool
	idle    time.Duration
	hook    func(gk schema.GroupKind) (listing bool, override bool)
	calls   int
}

func (l *fakeListing) Listing(gk schema.GroupKind) (bool, time.Duration) {
	l.mu.Lock()
	l.calls++
	hook := l.hook
	l.mu.Unlock()
	if hook != nil {
		if v, ok := hook(gk); ok {
			return v, 0
		}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.listing[gk], l.idle
}

func (l *fakeListing) set(gk schema.GroupKind, v bool) {
	l.mu.Lock()
	l.listing[gk] = v
	l.mu.Unlock()
}

// newParkStepper is newStepper with a Listing (and a fake clock for the
// stall timers).
func newParkStepper(t *testing.T, srv *fakeapi.Server, clk *clocktesting.FakeClock) (*stepper, *fakeListing) {
	t.Helper()
	l := &fakeListing{listing: map[schema.GroupKind]bool{}}
	cfg := Config{Metadata: srv.Client, Mapper: fakeapi.NewMapper(), Workers: 1, Listing: l.Listing, UnlistedHold: time.Minute}
	if clk != nil {
		cfg.Clock = clk
	}
	c := New(cfg, graph.New())
	t.Cleanup(func() {
		c.awaiting.close()
		c.attemptToDelete.ShutDown()
		c.attemptToOrphan.ShutDown()
	})
	_, ctx := ktesting.NewTestContext(t)
	return &stepper{t: t, srv: srv, c: c, ctx: ctx}, l
}

// listed applies the Listed marker of the deployments' list.
func (s *stepper) listed() {
	s.c.apply(graph.Event{Type: graph.Listed, Object: rules.Object{Identity: rules.Identity{APIVersion: "apps/v1", Kind: "Deployment"}}})
}

// queued drains the attempt-to-delete queue (without blocking).
func (s *stepper) queued() []types.UID {
	var out []types.UID
	for s.c.attemptToDelete.Len() > 0 {
		uid, _ := s.c.attemptToDelete.Get()
		s.c.attemptToDelete.Done(uid)
		s.c.attemptToDelete.Forget(uid)
		out = append(out, uid)
	}
	slices.Sort(out)
	return out
}

func (s *stepper) gets() []string {
	gets, _, _ := s.srv.KGCActions()
	var out []string
	for _, g := range gets {
		out = append(out, g.GetName())
	}
	return out
}

func (s *stepper) writes() int {
	_, deletes, patches := s.srv.KGCActions()
	return len(deletes) + len(patches)
}

// A dependent parked for its owner's list; the owner is deleted while it
// waits, before its resource's list reaches it. After the list the owner
// is still missing from the graph: it is read (404) and the dependent
// collected — not before, and not never.
func TestParkedDependentOwnerDeletedBeforeItsList(t *testing.T) {
	srv := fakeapi.NewServer()
	s, l := newParkStepper(t, srv, nil)
	a := srv.Create(t, fakeapi.Deployments, fakeapi.Object("a", "web", "web-uid"))
	d := srv.Create(t, fakeapi.ConfigMaps, fakeapi.Object("a", "dep", "dep-uid", fakeapi.DeploymentRef("web", "web-uid")))
	l.set(deploymentsGK, true)
	s.observe(fakeapi.ConfigMaps, d)

	if err := s.deleteStep("dep-uid"); err != nil {
		t.Fatal(err)
	}
	if g := s.gets(); len(g) != 0 || s.writes() != 0 || s.c.awaiting.parked() != 1 {
		t.Fatalf("while deployments list: GETs %v, %d writes, %d parked; want none, none, 1", g, s.writes(), s.c.awaiting.parked())
	}
	s.deleteWith(fakeapi.Deployments, a, metav1.DeletePropagationBackground)
	// The list completes without web; its marker is applied.
	l.set(deploymentsGK, false)
	s.listed()
	if q := s.queued(); !slices.Equal(q, []types.UID{"dep-uid"}) {
		t.Fatalf("queued after the list: %v, want dep-uid", q)
	}
	if err := s.deleteStep("dep-uid"); err != nil {
		t.Fatal(err)
	}
	if _, err := srv.Get(fakeapi.ConfigMaps, "a", "dep"); !apierrors.IsNotFound(err) {
		t.Errorf("dep of a deleted owner: %v, want collected", err)
	}
	if g := s.gets(); !slices.Equal(g, []string{"web"}) {
		t.Errorf("GETs %v, want one of web", g)
	}
}

// The same, but the list brings the owner and its deletion is observed
// after the list: the dependent is kept after the list (no GET), then
// collected from the observed deletion.
func TestParkedDependentOwnerDeletedAfterItsList(t *testing.T) {
	srv := fakeapi.NewServer()
	s, l := newParkStepper(t, srv, nil)
	a := srv.Create(t, fakeapi.Deployments, fakeapi.Object("a", "web", "web-uid"))
	d := srv.Create(t, fakeapi.ConfigMaps, fakeapi.Object("a", "dep", "dep-uid", fakeapi.DeploymentRef("web", "web-uid")))
	l.set(deploymentsGK, true)
	s.observe(fakeapi.ConfigMaps, d)
	if err := s.deleteStep("dep-uid"); err != nil {
		t.Fatal(err)
	}
	s.observe(fakeapi.Deployments, a)
	l.set(deploymentsGK, false)
	s.listed()
	if q := s.queued(); !slices.Equal(q, []types.UID{"dep-uid"}) {
		t.Fatalf("queued after the list: %v, want dep-uid", q)
	}
	if err := s.deleteStep("dep-uid"); err != nil {
		t.Fatal(err)
	}
	s.mustGet(fakeapi.ConfigMaps, d)
	s.deleteWith(fakeapi.Deployments, a, metav1.DeletePropagationBackground)
	s.observe(fakeapi.Deployments, a)
	if err := s.deleteStep("dep-uid"); err != nil {
		t.Fatal(err)
	}
	if _, err := srv.Get(fakeapi.ConfigMaps, "a", "dep"); !apierrors.IsNotFound(err) {
		t.Errorf("dep of a deleted owner: %v, want collected", err)
	}
	if g := s.gets(); len(g) != 0 {
		t.Errorf("GETs %v, want none", g)
	}
}

// A dependent with one owner observed deleted (dangling) and one whose
// resource is listing: nothing is written while it is parked (the other
// owner may well exist: S1), and once the list brings that owner the
// dangling reference is removed and the dependent stays. Both reference
// orders.
func TestParkedDependentWithADanglingOwner(t *testing.T) {
	for _, deployFirst := range []bool{false, true} {
		t.Run(map[bool]string{false: "dangling-first", true: "listing-first"}[deployFirst], func(t *testing.T) {
			srv := fakeapi.NewServer()
			s, l := newParkStepper(t, srv, nil)
			a := srv.Create(t, fakeapi.Deployments, fakeapi.Object("a", "web", "web-uid"))
			b := srv.Create(t, fakeapi.ConfigMaps, fakeapi.Object("a", "owner", "owner-uid"))
			refs := []metav1.OwnerReference{fakeapi.ConfigMapRef("owner", "owner-uid"), fakeapi.DeploymentRef("web", "web-uid")}
			if deployFirst {
				slices.Reverse(refs)
			}
			d := srv.Create(t, fakeapi.ConfigMaps, fakeapi.Object("a", "dep", "dep-uid", refs...))
			l.set(deploymentsGK, true)
			s.observe(fakeapi.ConfigMaps, b)
			s.observe(fakeapi.ConfigMaps, d)
			s.deleteWith(fakeapi.ConfigMaps, b, metav1.DeletePropagationBackground)
			s.observe(fakeapi.ConfigMaps, b) // observed deleted: dangling

			if err := s.deleteStep("dep-uid"); err != nil {
				t.Fatal(err)
			}
			if g := s.gets(); len(g) != 0 || s.writes() != 0 {
				t.Fatalf("while deployments list: GETs %v, %d writes; want none", g, s.writes())
			}
			if n := s.c.awaiting.parked(); n != 1 {
				t.Fatalf("%d parked, want 1", n)
			}
			s.observe(fakeapi.Deployments, a)
			l.set(deploymentsGK, false)
			s.listed()
			if q := s.queued(); !slices.Equal(q, []types.UID{"dep-uid"}) {
				t.Fatalf("queued after the list: %v, want dep-uid", q)
			}
			if err := s.deleteStep("dep-uid"); err != nil {
				t.Fatal(err)
			}
			if got := refUIDs(s.mustGet(fakeapi.ConfigMaps, d)); !slices.Equal(got, []types.UID{"web-uid"}) {
				t.Errorf("dep references %v, want only web-uid", got)
			}
			if g := s.gets(); len(g) != 0 {
				t.Errorf("GETs %v, want none", g)
			}
		})
	}
}

// The list lands (objects and marker) between the resolver's look at the
// graph and its question "is the resource listing?": the resolver must
// look at the graph again (no GET, nothing parked).
func TestListAppliedBetweenGraphReadAndPark(t *testing.T) {
	srv := fakeapi.NewServer()
	s, l := newParkStepper(t, srv, nil)
	a := srv.Create(t, fakeapi.Deployments, fakeapi.Object("a", "web", "web-uid"))
	d := srv.Create(t, fakeapi.ConfigMaps, fakeapi.Object("a", "dep", "dep-uid", fakeapi.DeploymentRef("web", "web-uid")))
	s.observe(fakeapi.ConfigMaps, d)
	landed := false
	l.hook = func(gk schema.GroupKind) (bool, bool) {
		if gk != deploymentsGK || landed {
			return false, false
		}
		landed = true
		s.observe(fakeapi.Deployments, a) // an upsert: no awaitList lock
		return false, true                // the marker is applied: listed
	}
	if err := s.deleteStep("dep-uid"); err != nil {
		t.Fatal(err)
	}
	s.listed() // the marker's flush, after the resolver's question
	if !landed {
		t.Fatal("the resolver never asked whether deployments list")
	}
	if g := s.gets(); len(g) != 0 || s.writes() != 0 || s.c.awaiting.parked() != 0 || len(s.queued()) != 0 {
		t.Errorf("GETs %v, %d writes, %d parked; want none", g, s.writes(), s.c.awaiting.parked())
	}
}

// The marker is applied concurrently with park: Listing answered "listing"
// and the graph builder applies the marker before park has registered the
// dependent. The flush must find it (it waits for awaitList's lock).
func TestListedMarkerRacingPark(t *testing.T) {
	srv := fakeapi.NewServer()
	s, l := newParkStepper(t, srv, nil)
	a := srv.Create(t, fakeapi.Deployments, fakeapi.Object("a", "web", "web-uid"))
	d := srv.Create(t, fakeapi.ConfigMaps, fakeapi.Object("a", "dep", "dep-uid", fakeapi.DeploymentRef("web", "web-uid")))
	s.observe(fakeapi.ConfigMaps, d)
	var builder sync.WaitGroup
	started := make(chan struct{})
	l.hook = func(gk schema.GroupKind) (bool, bool) {
		if gk != deploymentsGK {
			return false, false
		}
		l.hook = nil
		builder.Add(1)
		go func() { // the graph builder
			defer builder.Done()
			close(started)
			s.observe(fakeapi.Deployments, a)
			s.listed() // Applied, then the sink's flush
		}()
		<-started
		time.Sleep(20 * time.Millisecond) // let the builder reach the flush
		return true, true
	}
	if err := s.deleteStep("dep-uid"); err != nil {
		t.Fatal(err)
	}
	builder.Wait()
	if q := s.queued(); !slices.Equal(q, []types.UID{"dep-uid"}) {
		t.Fatalf("queued after the racing marker: %v, want dep-uid (lost: parked forever)", q)
	}
	if n := s.c.awaiting.parked(); n != 0 {
		t.Errorf("%d still parked", n)
	}
	if err := s.deleteStep("dep-uid"); err != nil {
		t.Fatal(err)
	}
	s.mustGet(fakeapi.ConfigMaps, d)
}

// A CRD version switch: the old monitor's marker is applied after the new
// monitor started its first list. The parked dependent is queued, parks
// again (no GET), and is resolved from the graph on the new monitor's
// marker.
func TestParkedAcrossMonitorReplacement(t *testing.T) {
	srv := fakeapi.NewServer()
	s, l := newParkStepper(t, srv, nil)
	a := srv.Create(t, fakeapi.Deployments, fakeapi.Object("a", "web", "web-uid"))
	d := srv.Create(t, fakeapi.ConfigMaps, fakeapi.Object("a", "dep", "dep-uid", fakeapi.DeploymentRef("web", "web-uid")))
	l.set(deploymentsGK, true)
	s.observe(fakeapi.ConfigMaps, d)
	if err := s.deleteStep("dep-uid"); err != nil {
		t.Fatal(err)
	}
	s.listed() // the old monitor's marker; the new one still lists
	if q := s.queued(); !slices.Equal(q, []types.UID{"dep-uid"}) {
		t.Fatalf("queued: %v, want dep-uid", q)
	}
	if err := s.deleteStep("dep-uid"); err != nil {
		t.Fatal(err)
	}
	if g := s.gets(); len(g) != 0 || s.c.awaiting.parked() != 1 {
		t.Fatalf("GETs %v, %d parked; want none, 1", g, s.c.awaiting.parked())
	}
	s.observe(fakeapi.Deployments, a)
	l.set(deploymentsGK, false)
	s.listed()
	if q := s.queued(); !slices.Equal(q, []types.UID{"dep-uid"}) {
		t.Fatalf("queued: %v, want dep-uid", q)
	}
	if err := s.deleteStep("dep-uid"); err != nil {
		t.Fatal(err)
	}
	s.mustGet(fakeapi.ConfigMaps, d)
	if g := s.gets(); len(g) != 0 || s.writes() != 0 {
		t.Errorf("GETs %v, %d writes; want none", g, s.writes())
	}
}

// The owner's resource stops listing without a marker (its monitor is
// removed: the CRD left discovery; or it starts failing): the parked
// dependent is queued again within the hold, and its owner read.
func TestParkedResourceRemovedWithoutMarker(t *testing.T) {
	for _, ownerGone := range []bool{false, true} {
		t.Run(map[bool]string{false: "owner-exists", true: "owner-gone"}[ownerGone], func(t *testing.T) {
			srv := fakeapi.NewServer()
			clk := clocktesting.NewFakeClock(time.Now())
			s, l := newParkStepper(t, srv, clk)
			a := srv.Create(t, fakeapi.Deployments, fakeapi.Object("a", "web", "web-uid"))
			d := srv.Create(t, fakeapi.ConfigMaps, fakeapi.Object("a", "dep", "dep-uid", fakeapi.DeploymentRef("web", "web-uid")))
			l.set(deploymentsGK, true)
			s.observe(fakeapi.ConfigMaps, d)
			if err := s.deleteStep("dep-uid"); err != nil {
				t.Fatal(err)
			}
			if n := s.c.awaiting.parked(); n != 1 {
				t.Fatalf("%d parked, want 1", n)
			}
			l.set(deploymentsGK, false) // removed: no marker will come
			if ownerGone {
				s.deleteWith(fakeapi.Deployments, a, metav1.DeletePropagationBackground)
			}
			waitFor(t, "the stall timer", clk.HasWaiters)
			clk.Step(time.Minute)
			waitFor(t, "the parked dependent to be queued again", func() bool { return s.c.attemptToDelete.Len() == 1 })
			if q := s.queued(); !slices.Equal(q, []types.UID{"dep-uid"}) {
				t.Fatalf("queued: %v, want dep-uid", q)
			}
			if err := s.deleteStep("dep-uid"); err != nil {
				t.Fatal(err)
			}
			_, err := srv.Get(fakeapi.ConfigMaps, "a", "dep")
			if ownerGone != apierrors.IsNotFound(err) {
				t.Errorf("dep: %v; owner gone: %v", err, ownerGone)
			}
			if g := s.gets(); !slices.Equal(g, []string{"web"}) {
				t.Errorf("GETs %v, want one of web", g)
			}
		})
	}
}

// Parked state is in memory only; a restarted collector (new workers on
// the graph the monitors rebuild) finds the dependent again in its
// start-up re-check (the owner is a placeholder: needs attention).
func TestParkedDependentFoundAgainByRecheck(t *testing.T) {
	srv := fakeapi.NewServer()
	s, l := newParkStepper(t, srv, nil)
	d := srv.Create(t, fakeapi.ConfigMaps, fakeapi.Object("a", "dep", "dep-uid", fakeapi.DeploymentRef("web", "web-uid")))
	l.set(deploymentsGK, true)
	s.observe(fakeapi.ConfigMaps, d)
	if err := s.deleteStep("dep-uid"); err != nil {
		t.Fatal(err)
	}
	restarted := New(Config{Metadata: srv.Client, Mapper: fakeapi.NewMapper(), Workers: 1}, s.c.graph)
	defer restarted.attemptToDelete.ShutDown()
	defer restarted.attemptToOrphan.ShutDown()
	restarted.Recheck(context.Background())
	if n := restarted.attemptToDelete.Len(); n != 1 {
		t.Errorf("%d queued by the restarted workers' re-check, want 1 (dep)", n)
	}
}

// A blocking dependent parked for another owner's resource keeps its
// Foreground owner waiting (S3), and is deleted once its other owner is
// found gone; only then may the owner's finalizer go (L1).
func TestParkedBlockingDependentHoldsForegroundOwner(t *testing.T) {
	srv := fakeapi.NewServer()
	s, l := newParkStepper(t, srv, nil)
	fg := srv.Create(t, fakeapi.ConfigMaps, fakeapi.Object("a", "fg", "fg-uid"))
	d := srv.Create(t, fakeapi.ConfigMaps, fakeapi.Object("a", "dep", "dep-uid", fakeapi.ConfigMapRef("fg", "fg-uid"), fakeapi.DeploymentRef("ghost", "ghost-uid")))
	l.set(deploymentsGK, true)
	s.observe(fakeapi.ConfigMaps, fg)
	s.observe(fakeapi.ConfigMaps, d)
	s.deleteWith(fakeapi.ConfigMaps, fg, metav1.DeletePropagationForeground)
	s.observe(fakeapi.ConfigMaps, fg)
	for range 2 {
		if err := s.deleteStep("dep-uid"); err != nil {
			t.Fatal(err)
		}
		_ = s.deleteStep("fg-uid")
	}
	if !slices.Contains(s.mustGet(fakeapi.ConfigMaps, fg).Finalizers, metav1.FinalizerDeleteDependents) {
		t.Fatal("fg released while its blocking dependent is parked")
	}
	s.mustGet(fakeapi.ConfigMaps, d)
	l.set(deploymentsGK, false)
	s.listed()
	if err := s.deleteStep("dep-uid"); err != nil {
		t.Fatal(err)
	}
	if _, err := srv.Get(fakeapi.ConfigMaps, "a", "dep"); !apierrors.IsNotFound(err) {
		t.Fatalf("dep: %v, want deleted (fg waiting, ghost gone)", err)
	}
	s.observe(fakeapi.ConfigMaps, d)
	if err := s.deleteStep("fg-uid"); err != nil {
		t.Fatal(err)
	}
	if _, err := srv.Get(fakeapi.ConfigMaps, "a", "fg"); !apierrors.IsNotFound(err) {
		t.Errorf("fg: %v, want gone once its dependent went", err)
	}
}
