package workers

import (
	"fmt"
	"reflect"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2/ktesting"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/kgc-dev/kgc/internal/breaker"
	"github.com/kgc-dev/kgc/internal/fakeapi"
	"github.com/kgc-dev/kgc/internal/graph"
	"github.com/kgc-dev/kgc/internal/rules"
)

func TestBasisOf(t *testing.T) {
	refs := func(uids ...types.UID) []metav1.OwnerReference {
		var out []metav1.OwnerReference
		for _, u := range uids {
			out = append(out, metav1.OwnerReference{APIVersion: "apps/v1", Kind: "Deployment", UID: u})
		}
		return out
	}
	fact := func(s rules.OwnerState, src rules.Source, why rules.Reason) rules.Fact {
		return rules.Fact{State: s, Evidence: rules.Evidence{Source: src, Reason: why}}
	}
	watched := fact(rules.Dangling, rules.SourceWatchDeletion, rules.ReasonNotFound)
	relisted := fact(rules.Dangling, rules.SourceRelist, rules.ReasonNotFound)
	confirmed := fact(rules.Dangling, rules.SourceConfirm, rules.ReasonOtherUID)
	got404 := fact(rules.Dangling, rules.SourceGet, rules.ReasonNotFound)
	listed := fact(rules.Dangling, rules.SourceList, rules.ReasonNotFound)
	otherUID := fact(rules.Dangling, rules.SourceGet, rules.ReasonOtherUID)
	waiting := fact(rules.Waiting, rules.SourceGraph, rules.ReasonForeground)
	kgcDeleted := func(u types.UID) bool { return u == "by-kgc" }
	owner := func(uid types.UID, never, seenGo bool) breaker.Owner {
		return breaker.Owner{UID: uid, Group: "apps", Kind: "Deployment", NeverObserved: never, DeletionObserved: seenGo}
	}
	for _, tc := range []struct {
		name  string
		refs  []metav1.OwnerReference
		facts []rules.Fact
		want  holdBasis
	}{
		{"observed deleted by someone", refs("o"), []rules.Fact{watched}, holdBasis{dangling: true, owners: []breaker.Owner{owner("o", false, true)}, restored: -1}},
		{"absent from a relist", refs("o"), []rules.Fact{relisted}, holdBasis{dangling: true, owners: []breaker.Owner{owner("o", false, false)}, restored: -1}},
		{"solid until a confirming GET", refs("o"), []rules.Fact{confirmed}, holdBasis{dangling: true, owners: []breaker.Owner{owner("o", false, false)}, restored: -1}},
		{"deleted by kgc: a cascade's inner step", refs("by-kgc"), []rules.Fact{watched}, holdBasis{dangling: true, owners: []breaker.Owner{owner("by-kgc", false, true)}, restored: -1}},
		{"never observed: GET 404", refs("o"), []rules.Fact{got404}, holdBasis{dangling: true, owners: []breaker.Owner{owner("o", true, false)}, restored: -1}},
		{"never observed: LIST", refs("o"), []rules.Fact{listed}, holdBasis{dangling: true, owners: []breaker.Owner{owner("o", true, false)}, restored: -1}},
		{"restore signature", refs("o"), []rules.Fact{otherUID}, holdBasis{dangling: true, owners: []breaker.Owner{owner("o", true, false)}, restored: 0}},
		{"restore signature on the second reference", refs("a", "b"), []rules.Fact{watched, otherUID}, holdBasis{dangling: true, owners: []breaker.Owner{owner("a", false, true), owner("b", true, false)}, restored: 1}},
		{"a waiting owner: the user's foreground cascade", refs("a", "b"), []rules.Fact{waiting, got404}, holdBasis{restored: -1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := basisOf(tc.refs, tc.facts, kgcDeleted); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("basisOf = %+v, want %+v", got, tc.want)
			}
		})
	}
}

// newHoldStepper is a stepper whose workers have a breaker and the
// restore hold.
func newHoldStepper(t *testing.T, srv *fakeapi.Server, b *breaker.Breaker, trips *[]breaker.Trip) *stepper {
	t.Helper()
	c := New(Config{Metadata: srv.Client, Mapper: fakeapi.NewMapper(), Workers: 1, Breaker: b, HoldRestored: true,
		OnTrip: func(tr breaker.Trip) { *trips = append(*trips, tr) }}, graph.New())
	t.Cleanup(func() {
		c.attemptToDelete.ShutDown()
		c.attemptToOrphan.ShutDown()
	})
	_, ctx := ktesting.NewTestContext(t)
	return &stepper{t: t, srv: srv, c: c, ctx: ctx, fresh: true}
}

// Dependents of owners that never existed: the breaker lets the limit go,
// holds the rest (no DELETE sent), and lets them go once resumed.
func TestBreakerHoldsUnobserved(t *testing.T) {
	srv := fakeapi.NewServer()
	clk := clocktesting.NewFakePassiveClock(time.Date(2026, 11, 26, 4, 0, 0, 0, time.UTC))
	b := breaker.New(breaker.Config{Window: time.Minute, UnobservedLimit: 3, Clock: clk})
	var trips []breaker.Trip
	s := newHoldStepper(t, srv, b, &trips)
	deps := decideDanglingDeps(t, srv, s, "never")
	if gone := countGone(srv, deps); gone != 3 {
		t.Fatalf("%d deleted, want the limit (3)", gone)
	}
	if len(trips) != 1 || trips[0].Signal != breaker.Unobserved {
		t.Fatalf("trips %+v, want one %s", trips, breaker.Unobserved)
	}
	// Decided again while tripped: still held, not reported again.
	for _, d := range deps[3:] {
		if err := s.deleteStep(d.UID); err != nil {
			t.Fatal(err)
		}
	}
	if gone := countGone(srv, deps); gone != 3 || len(trips) != 1 {
		t.Fatalf("%d deleted and %d trips after a second pass, want 3 and 1", gone, len(trips))
	}
	release, _, _ := b.Resume(trips[0].At)
	s.c.Resume(s.ctx, release, false)
	if got := s.queued(); len(got) != 7 {
		t.Fatalf("queued %d on resume, want the 7 held", len(got))
	}
	for _, uid := range release {
		if err := s.deleteStep(uid); err != nil {
			t.Fatal(err)
		}
	}
	if gone := countGone(srv, deps); gone != 10 {
		t.Fatalf("%d deleted after resume, want 10", gone)
	}
}

// The dependents an unobserved-owners trip holds stay held when they are
// decided again while their owners' watch is interrupted (an apiserver
// restart after the restore): the owners' absence is read again, and the
// read keeps what the absence rested on, a UID kgc never observed alive.
// Before, the read again counted as a confirmation of an observed owner,
// the holds no longer applied, and the held dependents were deleted.
func TestUnobservedTripHoldsThroughAWatchInterruption(t *testing.T) {
	srv := fakeapi.NewServer()
	b := breaker.New(breaker.Config{Window: time.Minute, UnobservedLimit: 3})
	var trips []breaker.Trip
	s := newHoldStepper(t, srv, b, &trips)
	deps := decideDanglingDeps(t, srv, s, "never")
	if gone := countGone(srv, deps); gone != 3 || len(trips) != 1 {
		t.Fatalf("%d deleted, trips %+v: want the limit (3) and one trip", gone, trips)
	}
	deployments := schema.GroupKind{Group: "apps", Kind: "Deployment"}
	s.c.resolver.unverified = func(gk schema.GroupKind) (uint64, bool) { return 1, gk == deployments }
	for _, d := range deps[3:] {
		if err := s.deleteStep(d.UID); err != nil {
			t.Fatal(err)
		}
	}
	if gone := countGone(srv, deps); gone != 3 {
		t.Fatalf("%d deleted after deciding the held again with the owners' watch interrupted, want still 3", gone)
	}
	if gets, _, _ := srv.KGCActions(); len(gets) < 7+7 {
		t.Errorf("%d owner reads in all, want each held dependent's owner read again", len(gets))
	}
}

// Owners whose deletion kgc observed are never counted, even with the
// dangling fraction on: a Background cascade (a root someone deleted, a
// middle owner kgc deleted) is people deleting, whatever its size.
func TestBreakerIgnoresObservedDeletions(t *testing.T) {
	srv := fakeapi.NewServer()
	b := breaker.New(breaker.Config{Window: time.Minute, DanglingFraction: 0.01, DanglingMinimum: 1})
	var trips []breaker.Trip
	s := newHoldStepper(t, srv, b, &trips)
	root := srv.Create(t, fakeapi.Deployments, fakeapi.Object("a", "root", "root"))
	mid := srv.Create(t, fakeapi.ConfigMaps, fakeapi.Object("a", "mid", "mid", fakeapi.DeploymentRef("root", "root")))
	s.observe(fakeapi.Deployments, root)
	s.observe(fakeapi.ConfigMaps, mid)
	var leaves []*metav1.PartialObjectMetadata
	for i := range 20 {
		l := srv.Create(t, fakeapi.ConfigMaps, fakeapi.Object("a", fmt.Sprintf("l%d", i), types.UID(fmt.Sprintf("l%d", i)), fakeapi.ConfigMapRef("mid", "mid")))
		s.observe(fakeapi.ConfigMaps, l)
		leaves = append(leaves, l)
	}
	s.deleteWith(fakeapi.Deployments, root, metav1.DeletePropagationBackground)
	s.observe(fakeapi.Deployments, root)
	if err := s.deleteStep("mid"); err != nil {
		t.Fatal(err)
	}
	s.observe(fakeapi.ConfigMaps, mid)
	for _, l := range leaves {
		if err := s.deleteStep(l.UID); err != nil {
			t.Fatal(err)
		}
	}
	if gone := countGone(srv, leaves); gone != 20 || len(trips) != 0 {
		t.Fatalf("%d of 20 leaves deleted, trips %+v: want all, no trip", gone, trips)
	}
	if c := b.Status(0, 0).Counts[breaker.Dangling]; c != 0 {
		t.Fatalf("counted %d toward the dangling fraction, want 0 (every owner was observed going)", c)
	}
}

// The same dependents as TestBreakerHoldsUnobserved, there when kgc
// started (a backlog: their owners went while no collector ran): all go,
// nothing is counted, as kube-controller-manager's collector deletes
// them at start-up.
func TestBreakerIgnoresBacklog(t *testing.T) {
	srv := fakeapi.NewServer()
	b := breaker.New(breaker.Config{Window: time.Minute, UnobservedLimit: 3})
	var trips []breaker.Trip
	s := newHoldStepper(t, srv, b, &trips)
	s.fresh = false
	deps := decideDanglingDeps(t, srv, s, "gone")
	if gone := countGone(srv, deps); gone != 10 || len(trips) != 0 {
		t.Fatalf("%d of 10 deleted, trips %+v: want all, no trip", gone, trips)
	}
}

// The same dependents as TestBreakerHoldsUnobserved, appearing while kgc
// watches, with owners of a kind whose history kgc lost: its watch is
// interrupted (not verified since), or a relist after a lost history
// completed within the window. A controller's owners created and deleted
// in such a gap are never seen, so they are not counted, and all go. Past
// the window, and with the watch verified, the owners count again and the
// breaker trips as in TestBreakerHoldsUnobserved.
func TestBreakerIgnoresOwnersMissedInAHistoryGap(t *testing.T) {
	start := time.Date(2026, 11, 26, 4, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name        string
		unverified  bool
		lostAgo     time.Duration // 0: never lost
		wantDeleted int
	}{
		{name: "watch interrupted", unverified: true, wantDeleted: 10},
		{name: "relisted within the window", lostAgo: 30 * time.Second, wantDeleted: 10},
		{name: "relisted before the window", lostAgo: 2 * time.Minute, wantDeleted: 3},
		{name: "no gap", wantDeleted: 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := fakeapi.NewServer()
			clk := clocktesting.NewFakeClock(start)
			b := breaker.New(breaker.Config{Window: time.Minute, UnobservedLimit: 3, Clock: clk})
			var trips []breaker.Trip
			s := newHoldStepper(t, srv, b, &trips)
			s.c.cfg.Clock = clk
			s.c.cfg.Unverified = func(gk schema.GroupKind) (uint64, bool) {
				return 1, tc.unverified && gk == schema.GroupKind{Group: "apps", Kind: "Deployment"}
			}
			s.c.cfg.HistoryLost = func(gk schema.GroupKind) time.Time {
				if tc.lostAgo == 0 || gk != (schema.GroupKind{Group: "apps", Kind: "Deployment"}) {
					return time.Time{}
				}
				return start.Add(-tc.lostAgo)
			}
			deps := decideDanglingDeps(t, srv, s, "gone")
			if gone := countGone(srv, deps); gone != tc.wantDeleted {
				t.Fatalf("%d of 10 deleted (trips %+v), want %d", gone, trips, tc.wantDeleted)
			}
			if tripped := len(trips) > 0; tripped != (tc.wantDeleted < 10) {
				t.Fatalf("trips %+v", trips)
			}
		})
	}
}

// The restore signature: the owner's name holds another UID, and kgc
// never saw the referenced one. Held, never counted; a relinked object is
// no longer held. The ordinary delete-and-recreate (kgc saw the old owner
// deleted) is not held.
func TestRestoreHold(t *testing.T) {
	srv := fakeapi.NewServer()
	var trips []breaker.Trip
	s := newHoldStepper(t, srv, breaker.New(breaker.Config{UnobservedLimit: 1}), &trips)
	srv.Create(t, fakeapi.Deployments, fakeapi.Object("a", "web", "new-uid"))
	var deps []*metav1.PartialObjectMetadata
	for i := range 3 {
		d := srv.Create(t, fakeapi.ConfigMaps, fakeapi.Object("a", fmt.Sprintf("d%d", i), types.UID(fmt.Sprintf("d%d", i)), fakeapi.DeploymentRef("web", "old-uid")))
		s.observe(fakeapi.ConfigMaps, d)
		deps = append(deps, d)
	}
	for _, d := range deps {
		if err := s.deleteStep(d.UID); err != nil {
			t.Fatal(err)
		}
	}
	if gone := countGone(srv, deps); gone != 0 || len(trips) != 0 {
		t.Fatalf("%d deleted, trips %v: want none (held for the restore signature, not counted)", gone, trips)
	}
	hs := s.c.RestoreHolds()
	if len(hs) != 3 || hs[0].FoundUID != "new-uid" || hs[0].Owner.UID != "old-uid" {
		t.Fatalf("restore holds %+v", hs)
	}
	// Relinked: the reference names the existing owner; no longer held.
	d0 := s.mustGet(fakeapi.ConfigMaps, deps[0])
	d0.OwnerReferences = []metav1.OwnerReference{fakeapi.DeploymentRef("web", "new-uid")}
	if err := srv.Store(fakeapi.ConfigMaps, d0); err != nil {
		t.Fatal(err)
	}
	s.observe(fakeapi.ConfigMaps, d0)
	if _, held := s.c.RestoreHeld("d0"); held {
		t.Fatal("a relinked object is still reported held")
	}
	if len(s.c.RestoreHolds()) != 2 {
		t.Fatalf("restore holds after a relink: %+v", s.c.RestoreHolds())
	}

	// Delete and recreate, observed: upstream's semantics, deleted.
	srv2 := fakeapi.NewServer()
	s2 := newHoldStepper(t, srv2, nil, &trips)
	old := srv2.Create(t, fakeapi.Deployments, fakeapi.Object("a", "web", "old-uid"))
	d := srv2.Create(t, fakeapi.ConfigMaps, fakeapi.Object("a", "d", "d", fakeapi.DeploymentRef("web", "old-uid")))
	s2.observe(fakeapi.Deployments, old)
	s2.observe(fakeapi.ConfigMaps, d)
	s2.deleteWith(fakeapi.Deployments, old, metav1.DeletePropagationBackground)
	s2.observe(fakeapi.Deployments, old)
	srv2.Create(t, fakeapi.Deployments, fakeapi.Object("a", "web", "new-uid"))
	if err := s2.deleteStep("d"); err != nil {
		t.Fatal(err)
	}
	if gone := countGone(srv2, []*metav1.PartialObjectMetadata{d}); gone != 1 {
		t.Fatal("the dependent of an owner kgc saw deleted and recreated was held")
	}
}

// decideDanglingDeps creates ten ConfigMaps d0…d9, observed as s.fresh
// says (arrived or a backlog), each naming a Deployment o<i> of UID
// <uidPrefix><i> that does not exist, and decides each once.
func decideDanglingDeps(t *testing.T, srv *fakeapi.Server, s *stepper, uidPrefix string) []*metav1.PartialObjectMetadata {
	t.Helper()
	var deps []*metav1.PartialObjectMetadata
	for i := range 10 {
		d := srv.Create(t, fakeapi.ConfigMaps, fakeapi.Object("a", fmt.Sprintf("d%d", i), types.UID(fmt.Sprintf("d%d", i)), fakeapi.DeploymentRef(fmt.Sprintf("o%d", i), types.UID(fmt.Sprintf("%s%d", uidPrefix, i)))))
		s.observe(fakeapi.ConfigMaps, d)
		deps = append(deps, d)
	}
	for _, d := range deps {
		if err := s.deleteStep(d.UID); err != nil {
			t.Fatal(err)
		}
	}
	return deps
}

func countGone(srv *fakeapi.Server, objs []*metav1.PartialObjectMetadata) int {
	n := 0
	for _, o := range objs {
		if _, err := srv.Get(fakeapi.ConfigMaps, o.Namespace, o.Name); apierrors.IsNotFound(err) {
			n++
		}
	}
	return n
}
