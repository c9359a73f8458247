package breaker

import (
	"fmt"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
)

var t0 = time.Date(2026, 11, 26, 4, 0, 0, 0, time.UTC)

// basis is what a test deletion rests on.
type basis int

const (
	// restored: an object that appeared while kgc watched, naming an owner
	// of its own kgc never observed alive (the restore signature).
	restored basis = iota
	// backlog: the same, but the object was there when kgc started.
	backlog
	// deleted: an owner of its own whose DELETED event kgc observed.
	deleted
	// relisted: an owner of its own found gone by a relist (its deletion
	// not observed).
	relisted
)

// del is deletion i resting on basis b, in a graph of graph objects.
func del(i int, b basis, graph int) Deletion {
	o := Owner{UID: types.UID(fmt.Sprintf("owner-%d", i)), Group: "apps", Kind: "Deployment"}
	switch b {
	case restored, backlog:
		o.NeverObserved = true
	case deleted:
		o.DeletionObserved = true
	}
	return Deletion{UID: types.UID(fmt.Sprintf("uid-%d", i)), Object: fmt.Sprintf("Pod ns/p%d", i),
		Arrived: b != backlog, Owners: []Owner{o}, GraphSize: graph}
}

// admitUntilHeld admits deletions from..from+n and returns how many went
// before the first was held, and that verdict.
func admitUntilHeld(b *Breaker, from, n int, on basis, graph int) (int, Verdict) {
	for i := range n {
		if v := b.Admit(del(from+i, on, graph)); v.Held {
			return i, v
		}
	}
	return n, Verdict{}
}

func TestUnobservedTripsAfterLimit(t *testing.T) {
	clk := clocktesting.NewFakePassiveClock(t0)
	b := New(Config{Window: time.Minute, UnobservedLimit: 10, Clock: clk})
	went, v := admitUntilHeld(b, 0, 100, restored, 100000)
	if went != 10 || !v.Tripped || v.Trip.Signal != Unobserved || v.Trip.Count != 11 || v.Trip.Limit != 10 {
		t.Fatalf("went %d, verdict %+v; want 10 deletions, then a trip of %s at 11 > 10", went, v, Unobserved)
	}
	// Held from then on, on that basis only; the trip is reported once.
	if v := b.Admit(del(200, restored, 100000)); !v.Held || v.Tripped {
		t.Errorf("a later unobserved deletion: %+v, want held, not tripped again", v)
	}
	if v := b.Admit(del(201, deleted, 100000)); v.Held {
		t.Errorf("a deletion resting on an owner observed deleted: held (%+v), want it to go", v)
	}
	if got := b.Status(0, -1).HeldTotal; got != 2 {
		t.Errorf("held %d objects, want 2", got)
	}
}

// A backlog — objects already there when kgc started, whose owners went
// while no collector ran — is what a first start or a restart looks like:
// never counted, however large. Once the signal tripped on objects that
// appeared while kgc watched, the backlog resting on owners never observed
// is held too.
func TestUnobservedIgnoresBacklog(t *testing.T) {
	b := New(Config{Window: time.Minute, UnobservedLimit: 10, Clock: clocktesting.NewFakePassiveClock(t0)})
	if went, v := admitUntilHeld(b, 0, 10000, backlog, 100000); went != 10000 {
		t.Fatalf("a backlog of 10,000 was held after %d: %+v", went, v)
	}
	if c := b.Status(0, 0).Counts[Unobserved]; c != 0 {
		t.Fatalf("the backlog counted %d owners, want 0", c)
	}
	if _, v := admitUntilHeld(b, 20000, 100, restored, 100000); !v.Tripped {
		t.Fatal("objects that appeared naming owners never observed did not trip")
	}
	if v := b.Admit(del(30000, backlog, 100000)); !v.Held || v.Trip.Signal != Unobserved {
		t.Fatalf("a backlog deletion after the trip: %+v, want held by %s", v, Unobserved)
	}
}

func TestWindowSlides(t *testing.T) {
	clk := clocktesting.NewFakePassiveClock(t0)
	b := New(Config{Window: time.Minute, UnobservedLimit: 10, Clock: clk})
	if went, _ := admitUntilHeld(b, 0, 10, restored, 0); went != 10 {
		t.Fatalf("went %d, want 10", went)
	}
	// Still inside the window: the eleventh trips.
	clk.SetTime(t0.Add(59 * time.Second))
	if st := b.Status(0, 0); st.Counts[Unobserved] != 10 {
		t.Fatalf("counted %d in the window, want 10", st.Counts[Unobserved])
	}
	// Past it, the first ten no longer count: ten more go.
	clk.SetTime(t0.Add(61 * time.Second))
	if went, v := admitUntilHeld(b, 100, 11, restored, 0); went != 10 || !v.Tripped {
		t.Fatalf("after the window: went %d (%+v), want 10 then a trip", went, v)
	}
}

func TestSameObjectCountsOnce(t *testing.T) {
	b := New(Config{Window: time.Minute, UnobservedLimit: 2, Clock: clocktesting.NewFakePassiveClock(t0)})
	for range 10 { // one object retried (a 409, a failed DELETE)
		if v := b.Admit(del(1, restored, 0)); v.Held {
			t.Fatalf("a retried deletion was held: %+v", v)
		}
	}
	if c := b.Status(0, 0).Counts[Unobserved]; c != 1 {
		t.Fatalf("counted %d, want 1", c)
	}
}

// The unobserved signal counts owners, not dependents: the dependents of
// one owner kgc never saw (a Background cascade a new leader took over
// midway) all go, however many; each further owner counts once, and the
// one past the limit trips it.
func TestUnobservedCountsOwnersNotDependents(t *testing.T) {
	b := New(Config{Window: time.Minute, UnobservedLimit: 10, Clock: clocktesting.NewFakePassiveClock(t0)})
	owner := func(uid string) []Owner {
		return []Owner{{UID: types.UID(uid), Kind: "ReplicaSet", Group: "apps", NeverObserved: true}}
	}
	for i := range 1000 {
		d := Deletion{UID: types.UID(fmt.Sprintf("pod-%d", i)), Arrived: true, Owners: owner("rs-taken-over")}
		if v := b.Admit(d); v.Held {
			t.Fatalf("dependent %d of one unobserved owner held: %+v", i, v)
		}
	}
	for i := range 20 {
		// Two dependents of each owner: the second adds nothing.
		for j := range 2 {
			v := b.Admit(Deletion{UID: types.UID(fmt.Sprintf("dep-%d-%d", i, j)), Arrived: true, Owners: owner(fmt.Sprintf("gone-%d", i))})
			switch {
			case i < 9 && v.Held:
				t.Fatalf("owner %d (the %dth unobserved one) held: %+v", i, i+2, v)
			case i == 9 && j == 0:
				if !v.Tripped || v.Trip.Signal != Unobserved || v.Trip.Count != 11 || v.Trip.Limit != 10 {
					t.Fatalf("the 11th unobserved owner: %+v, want a trip at 11 > 10", v)
				}
				return
			}
		}
	}
	t.Fatal("eleven unobserved owners did not trip a limit of ten")
}

// Deletions resting on owners whose deletion kgc observed, or found gone
// by a relist, never trip anything by default, however many: a CRD, a
// DeleteCollection, a namespace, a Helm release.
func TestDefaultsNeverTripOnVolume(t *testing.T) {
	b := New(DefaultConfig())
	for _, on := range []basis{deleted, relisted, backlog} {
		if went, v := admitUntilHeld(b, int(on)*100000, 50000, on, 60000); went != 50000 {
			t.Fatalf("basis %d: held after %d of 50,000 deletions in a graph of 60,000: %+v", on, went, v)
		}
	}
}

func TestDanglingFractionAndMinimum(t *testing.T) {
	for _, tc := range []struct {
		name     string
		graph    int
		fraction float64
		minimum  int
		on       basis
		wantWent int
	}{
		{name: "the minimum wins on a small graph", graph: 100, fraction: 0.2, minimum: 50, on: relisted, wantWent: 50},
		{name: "the fraction wins on a large graph", graph: 10000, fraction: 0.2, minimum: 50, on: relisted, wantWent: 2000},
		{name: "owners observed deleted are not counted", graph: 100, fraction: 0.2, minimum: 50, on: deleted, wantWent: 5000},
		{name: "off", graph: 100, fraction: 0, minimum: 0, on: relisted, wantWent: 5000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := New(Config{Window: time.Minute, DanglingFraction: tc.fraction, DanglingMinimum: tc.minimum, Clock: clocktesting.NewFakePassiveClock(t0)})
			went, v := admitUntilHeld(b, 0, 5000, tc.on, tc.graph)
			if went != tc.wantWent {
				t.Fatalf("went %d before a hold (%+v), want %d", went, v, tc.wantWent)
			}
			if went < 5000 && (v.Trip.Signal != Dangling || v.Trip.GraphSize != tc.graph) {
				t.Fatalf("trip %+v, want %s with the graph's size", v.Trip, Dangling)
			}
		})
	}
}

// A tripped Dangling holds every deletion resting on a dangling owner,
// also those not counted toward it.
func TestDanglingHoldsEverything(t *testing.T) {
	b := New(Config{Window: time.Minute, DanglingFraction: 0.5, DanglingMinimum: 1, Clock: clocktesting.NewFakePassiveClock(t0)})
	if _, v := admitUntilHeld(b, 0, 10, relisted, 2); !v.Tripped {
		t.Fatal("did not trip")
	}
	if v := b.Admit(del(100, deleted, 2)); !v.Held || v.Trip.Signal != Dangling {
		t.Fatalf("an uncounted deletion after a %s trip: %+v, want held", Dangling, v)
	}
}

func TestVanish(t *testing.T) {
	for _, tc := range []struct {
		name string
		f    VanishFacts
		min  int
		trip bool
	}{
		{name: "unexplained, above the minimum", f: VanishFacts{Resource: "Widget.example.com", ResourceVersion: "900", Gone: 50, Unexplained: 50}, min: 10, trip: true},
		{name: "404 while served", f: VanishFacts{Resource: "Widget.example.com", NotServed: true, Gone: 50, Unexplained: 10}, min: 10, trip: true},
		{name: "below the minimum", f: VanishFacts{Resource: "Widget.example.com", Gone: 50, Unexplained: 9}, min: 10},
		{name: "its CRD being deleted", f: VanishFacts{Resource: "Widget.example.com", NotServed: true, Gone: 10000, Unexplained: 10000, ResourceRemoved: true}, min: 10},
		{name: "off", f: VanishFacts{Resource: "Widget.example.com", Gone: 50, Unexplained: 50}, min: 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := New(Config{VanishedMinimum: tc.min, Clock: clocktesting.NewFakePassiveClock(t0)})
			tr, tripped := b.Vanish(tc.f)
			if tripped != tc.trip {
				t.Fatalf("tripped %v (%+v), want %v", tripped, tr, tc.trip)
			}
			if !tc.trip {
				return
			}
			if tr.Signal != Vanished || tr.Resource != tc.f.Resource || tr.Count != tc.f.Unexplained || tr.Limit != tc.min || !tr.At.Equal(t0) {
				t.Fatalf("trip %+v", tr)
			}
			if _, again := b.Vanish(tc.f); again {
				t.Fatal("the same resource tripped twice")
			}
		})
	}
}

// A vanished resource holds the deletions resting on owners of that
// resource, and no other.
func TestVanishHoldsItsResourceOnly(t *testing.T) {
	b := New(Config{VanishedMinimum: 1, Clock: clocktesting.NewFakePassiveClock(t0)})
	if _, ok := b.Vanish(VanishFacts{Resource: "Widget.example.com", Gone: 5, Unexplained: 5}); !ok {
		t.Fatal("did not trip")
	}
	widget := Deletion{UID: "dep-1", Object: "ConfigMap ns/dep-1", Owners: []Owner{{UID: "w1", Group: "example.com", Kind: "Widget"}}}
	if v := b.Admit(widget); !v.Held || v.Trip.Signal != Vanished || v.Trip.Resource != "Widget.example.com" {
		t.Fatalf("a dependent of a vanished Widget: %+v, want held", v)
	}
	other := Deletion{UID: "dep-2", Owners: []Owner{{UID: "g1", Group: "example.com", Kind: "Gadget"}}}
	if v := b.Admit(other); v.Held {
		t.Fatalf("a dependent of a Gadget: %+v, want it to go", v)
	}
	if h, ok := b.Held("dep-1"); !ok || h.Resource != "Widget.example.com" {
		t.Fatalf("hold %+v %v", h, ok)
	}
}

func TestRollbackHoldsEverything(t *testing.T) {
	b := New(Config{Rollback: true, Clock: clocktesting.NewFakePassiveClock(t0)})
	tr, ok := b.RolledBack("ConfigMap ns/a", "was resourceVersion 120, now resourceVersion 95")
	if !ok || tr.Signal != Rollback || tr.Object != "ConfigMap ns/a" {
		t.Fatalf("trip %+v %v", tr, ok)
	}
	if _, again := b.RolledBack("ConfigMap ns/b", "…"); again {
		t.Fatal("a second piece of evidence tripped again")
	}
	for _, on := range []basis{restored, backlog, deleted, relisted} {
		if v := b.Admit(del(int(on), on, 10)); !v.Held || v.Trip.Signal != Rollback {
			t.Fatalf("basis %d after a rollback: %+v, want held", on, v)
		}
	}
	off := New(Config{Clock: clocktesting.NewFakePassiveClock(t0)})
	if _, ok := off.RolledBack("ConfigMap ns/a", "…"); ok {
		t.Fatal("tripped with the signal off")
	}
}

func TestResumeReleasesHeldOnce(t *testing.T) {
	clk := clocktesting.NewFakePassiveClock(t0)
	b := New(Config{Window: time.Minute, UnobservedLimit: 5, Clock: clk})
	went, _ := admitUntilHeld(b, 0, 100, restored, 0)
	for i := went + 1; i < 100; i++ {
		b.Admit(del(i, restored, 0))
	}
	trip := b.Status(0, 0).Trips[0]
	// A resume from before the trip does nothing.
	if rel, res, _ := b.Resume(trip.At.Add(-time.Second)); len(rel)+len(res) != 0 {
		t.Fatalf("an earlier resume released %d, resumed %v", len(rel), res)
	}
	clk.SetTime(t0.Add(time.Second))
	rel, res, over := b.Resume(trip.At)
	if len(rel) != 95 || len(res) != 1 || over {
		t.Fatalf("released %d (want 95), resumed %v, overflowed %v", len(rel), res, over)
	}
	if b.Tripped(Unobserved) {
		t.Fatal("still tripped after resume")
	}
	// The released go, uncounted; new deletions are counted from zero.
	for _, uid := range rel {
		d := del(0, restored, 0)
		d.UID = uid
		if v := b.Admit(d); v.Held {
			t.Fatalf("released %s held again: %+v", uid, v)
		}
	}
	if went, v := admitUntilHeld(b, 1000, 100, restored, 0); went != 5 || !v.Tripped {
		t.Fatalf("after resume: went %d (%+v), want 5 then a new trip", went, v)
	}
}

// A resume releases only what no trip still in force holds: a rollback
// after the resumed trip keeps everything held.
func TestResumeKeepsWhatLaterTripsHold(t *testing.T) {
	clk := clocktesting.NewFakePassiveClock(t0)
	b := New(Config{VanishedMinimum: 1, Rollback: true, Clock: clk})
	vt, _ := b.Vanish(VanishFacts{Resource: "Widget.example.com", Gone: 1, Unexplained: 1})
	b.Admit(Deletion{UID: "dep", Owners: []Owner{{UID: "w", Group: "example.com", Kind: "Widget"}}})
	clk.SetTime(t0.Add(time.Minute))
	b.RolledBack("ConfigMap ns/a", "…")
	rel, res, _ := b.Resume(vt.At)
	if len(res) != 1 || res[0].Signal != Vanished || len(rel) != 0 {
		t.Fatalf("resumed %v, released %v: want the vanish resumed, nothing released while the rollback holds", res, rel)
	}
	if v := b.Admit(Deletion{UID: "dep", Owners: []Owner{{UID: "w", Group: "example.com", Kind: "Widget"}}}); !v.Held || v.Trip.Signal != Rollback {
		t.Fatalf("%+v, want held by the rollback", v)
	}
}

func TestHeldBounded(t *testing.T) {
	b := New(Config{Window: time.Minute, UnobservedLimit: 1, MaxHeld: 3, Clock: clocktesting.NewFakePassiveClock(t0)})
	for i := range 10 {
		b.Admit(del(i, restored, 0))
	}
	st := b.Status(0, -1)
	if st.HeldTotal != 3 || !st.Overflowed {
		t.Fatalf("held %d, overflowed %v; want 3 and true", st.HeldTotal, st.Overflowed)
	}
	// Past the bound it is still held, only not remembered.
	if v := b.Admit(del(50, restored, 0)); !v.Held {
		t.Fatal("an object past the bound was let go")
	}
	_, _, over := b.Resume(t0)
	if !over {
		t.Fatal("resume did not report the overflow")
	}
}

func TestRestore(t *testing.T) {
	b := New(Config{UnobservedLimit: 5, Clock: clocktesting.NewFakePassiveClock(t0)})
	old := Trip{Signal: Dangling, At: t0.Add(-2 * time.Hour)}
	cur := Trip{Signal: Unobserved, At: t0.Add(-time.Minute)}
	widget := Trip{Signal: Vanished, Resource: "Widget.example.com", At: t0.Add(-time.Minute)}
	applied := b.Restore([]Trip{old, cur, widget}, t0.Add(-time.Hour))
	if len(applied) != 2 {
		t.Fatalf("applied %v, want only the trips after the resume", applied)
	}
	if v := b.Admit(del(1, backlog, 0)); !v.Held || v.Tripped {
		t.Fatalf("after restore: %+v, want held by the restored trip", v)
	}
	if v := b.Admit(Deletion{UID: "dep", Owners: []Owner{{UID: "w", Group: "example.com", Kind: "Widget"}}}); !v.Held || v.Trip.Signal != Vanished {
		t.Fatalf("after restore: %+v, want held by the restored vanish", v)
	}
	// Restored trips are the Lease's own: nothing to record.
	if _, _, ok := b.Unrecorded(); ok || !b.Durable() {
		t.Fatal("restored trips counted as unrecorded")
	}
}

// Every trip made is unrecorded until Recorded says its version is
// durable; a trip made while a record is written stays unrecorded.
func TestUnrecorded(t *testing.T) {
	b := New(Config{Rollback: true, VanishedMinimum: 1, Clock: clocktesting.NewFakePassiveClock(t0)})
	if _, _, ok := b.Unrecorded(); ok {
		t.Fatal("a fresh breaker has something to record")
	}
	b.RolledBack("ConfigMap ns/a", "…")
	trips, v1, ok := b.Unrecorded()
	if !ok || len(trips) != 1 || b.Durable() || !b.Status(0, 0).Unrecorded {
		t.Fatalf("after a trip: %v %v", trips, ok)
	}
	b.Vanish(VanishFacts{Resource: "Widget.example.com", Gone: 1, Unexplained: 1})
	b.Recorded(v1)
	if trips, _, ok := b.Unrecorded(); !ok || len(trips) != 2 || b.Durable() {
		t.Fatalf("a trip made during the record: %v %v", trips, ok)
	}
	_, v2, _ := b.Unrecorded()
	b.Recorded(v2)
	if !b.Durable() {
		t.Fatal("not durable after recording every trip")
	}
}

func TestStateActive(t *testing.T) {
	st, err := ParseState(map[string]string{
		AnnotationTrips:  `[{"signal":"unobserved-owners","at":"2026-11-26T04:00:00.5Z","count":201,"limit":200,"window":"10m0s"}]`,
		AnnotationResume: "2026-11-26T04:00:00.5Z",
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Trips) != 1 || time.Duration(st.Trips[0].Window) != 10*time.Minute || len(st.Active()) != 0 {
		t.Fatalf("state %+v, active %v: want one trip, resumed", st, st.Active())
	}
	if _, err := ParseState(map[string]string{AnnotationResume: "yesterday"}); err == nil {
		t.Fatal("a malformed resume time was accepted")
	}
}

func TestValidate(t *testing.T) {
	if errs := DefaultConfig().Validate(); len(errs) != 0 {
		t.Fatal(errs)
	}
	if errs := (Config{Window: -1, UnobservedLimit: -1, VanishedMinimum: -1, DanglingFraction: 2, DanglingMinimum: -1, MaxHeld: -1}).Validate(); len(errs) != 6 {
		t.Fatalf("got %d errors, want 6: %v", len(errs), errs)
	}
	d := DefaultConfig()
	if d.DanglingFraction != 0 || !d.Rollback || d.VanishedMinimum == 0 || d.UnobservedLimit == 0 {
		t.Fatalf("defaults %+v: want the dangling fraction off, the evidence signals on", d)
	}
}
