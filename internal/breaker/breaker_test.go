package breaker

import (
	"fmt"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
)

var t0 = time.Date(2026, 11, 26, 4, 0, 0, 0, time.UTC)

// del is deletion i; counted: it rests on an owner of its own that kgc
// did not delete.
func del(i int, unobserved, counted bool, graph int) Deletion {
	d := Deletion{UID: types.UID(fmt.Sprintf("uid-%d", i)), Object: fmt.Sprintf("Pod ns/p%d", i), Unobserved: unobserved, GraphSize: graph}
	if counted {
		d.Owners = []types.UID{types.UID(fmt.Sprintf("owner-%d", i))}
	}
	return d
}

// admitUntilHeld admits deletions from..from+n and returns how many went
// before the first was held, and that verdict.
func admitUntilHeld(b *Breaker, from, n int, unobserved, counted bool, graph int) (int, Verdict) {
	for i := range n {
		if v := b.Admit(del(from+i, unobserved, counted, graph)); v.Held {
			return i, v
		}
	}
	return n, Verdict{}
}

func TestUnobservedTripsAfterLimit(t *testing.T) {
	clk := clocktesting.NewFakePassiveClock(t0)
	b := New(Config{Window: time.Minute, UnobservedLimit: 10, Clock: clk})
	went, v := admitUntilHeld(b, 0, 100, true, true, 100000)
	if went != 10 || !v.Tripped || v.Trip.Signal != Unobserved || v.Trip.Count != 11 || v.Trip.Limit != 10 {
		t.Fatalf("went %d, verdict %+v; want 10 deletions, then a trip of %s at 11 > 10", went, v, Unobserved)
	}
	// Held from then on, on that basis only; the trip is reported once.
	if v := b.Admit(del(200, true, true, 100000)); !v.Held || v.Tripped {
		t.Errorf("a later unobserved deletion: %+v, want held, not tripped again", v)
	}
	if v := b.Admit(del(201, false, true, 100000)); v.Held {
		t.Errorf("a deletion resting on an observed owner: held (%+v), want it to go", v)
	}
	if got := b.Status(0, -1).HeldTotal; got != 2 {
		t.Errorf("held %d objects, want 2", got)
	}
}

func TestWindowSlides(t *testing.T) {
	clk := clocktesting.NewFakePassiveClock(t0)
	b := New(Config{Window: time.Minute, UnobservedLimit: 10, Clock: clk})
	if went, _ := admitUntilHeld(b, 0, 10, true, false, 0); went != 10 {
		t.Fatalf("went %d, want 10", went)
	}
	// Still inside the window: the eleventh trips.
	clk.SetTime(t0.Add(59 * time.Second))
	if st := b.Status(0, 0); st.Counts[Unobserved] != 10 {
		t.Fatalf("counted %d in the window, want 10", st.Counts[Unobserved])
	}
	// Past it, the first ten no longer count: ten more go.
	clk.SetTime(t0.Add(61 * time.Second))
	if went, v := admitUntilHeld(b, 100, 11, true, false, 0); went != 10 || !v.Tripped {
		t.Fatalf("after the window: went %d (%+v), want 10 then a trip", went, v)
	}
}

func TestSameObjectCountsOnce(t *testing.T) {
	b := New(Config{Window: time.Minute, UnobservedLimit: 2, Clock: clocktesting.NewFakePassiveClock(t0)})
	for range 10 { // one object retried (a 409, a failed DELETE)
		if v := b.Admit(del(1, true, true, 0)); v.Held {
			t.Fatalf("a retried deletion was held: %+v", v)
		}
	}
	if c := b.Status(0, 0).Counts[Unobserved]; c != 1 {
		t.Fatalf("counted %d, want 1", c)
	}
}

func TestDanglingFractionAndMinimum(t *testing.T) {
	for _, tc := range []struct {
		name      string
		graph     int
		fraction  float64
		minimum   int
		wantWent  int
		countedBy bool
	}{
		{name: "the minimum wins on a small graph", graph: 100, fraction: 0.2, minimum: 50, wantWent: 50, countedBy: true},
		{name: "the fraction wins on a large graph", graph: 10000, fraction: 0.2, minimum: 50, wantWent: 2000, countedBy: true},
		{name: "deletions whose owner kgc deleted are not counted", graph: 100, fraction: 0.2, minimum: 50, wantWent: 5000, countedBy: false},
		{name: "off", graph: 100, fraction: 0, minimum: 0, wantWent: 5000, countedBy: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := New(Config{Window: time.Minute, DanglingFraction: tc.fraction, DanglingMinimum: tc.minimum, Clock: clocktesting.NewFakePassiveClock(t0)})
			went, v := admitUntilHeld(b, 0, 5000, false, tc.countedBy, tc.graph)
			if went != tc.wantWent {
				t.Fatalf("went %d before a hold (%+v), want %d", went, v, tc.wantWent)
			}
			if went < 5000 && (v.Trip.Signal != Dangling || v.Trip.GraphSize != tc.graph) {
				t.Fatalf("trip %+v, want %s with the graph's size", v.Trip, Dangling)
			}
		})
	}
}

// Dangling counts owners: the 5,000 dependents of one owner someone
// deleted count once.
func TestDanglingCountsOwners(t *testing.T) {
	b := New(Config{Window: time.Minute, DanglingFraction: 0.2, DanglingMinimum: 2, Clock: clocktesting.NewFakePassiveClock(t0)})
	for i := range 5000 {
		d := del(i, false, false, 10)
		d.Owners = []types.UID{"job", "job"}
		if v := b.Admit(d); v.Held {
			t.Fatalf("deletion %d resting on one owner held: %+v", i, v)
		}
	}
	if c := b.Status(10, 0).Counts[Dangling]; c != 1 {
		t.Fatalf("counted %d owners, want 1", c)
	}
	// Two more owners: the third distinct owner crosses the minimum of 2.
	if went, v := admitUntilHeld(b, 10000, 5, false, true, 10); went != 1 || v.Trip.Count != 3 {
		t.Fatalf("went %d (%+v), want 1 then a trip at 3 owners", went, v)
	}
}

// A tripped Dangling holds every deletion resting on a dangling owner,
// also those not counted toward it.
func TestDanglingHoldsEverything(t *testing.T) {
	b := New(Config{Window: time.Minute, DanglingFraction: 0.5, DanglingMinimum: 1, Clock: clocktesting.NewFakePassiveClock(t0)})
	if _, v := admitUntilHeld(b, 0, 10, false, true, 2); !v.Tripped {
		t.Fatal("did not trip")
	}
	if v := b.Admit(del(100, false, false, 2)); !v.Held || v.Trip.Signal != Dangling {
		t.Fatalf("an uncounted deletion after a %s trip: %+v, want held", Dangling, v)
	}
}

func TestResumeReleasesHeldOnce(t *testing.T) {
	clk := clocktesting.NewFakePassiveClock(t0)
	b := New(Config{Window: time.Minute, UnobservedLimit: 5, Clock: clk})
	went, _ := admitUntilHeld(b, 0, 100, true, false, 0)
	for i := went + 1; i < 100; i++ {
		b.Admit(del(i, true, false, 0))
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
		if v := b.Admit(Deletion{UID: uid, Unobserved: true}); v.Held {
			t.Fatalf("released %s held again: %+v", uid, v)
		}
	}
	if went, v := admitUntilHeld(b, 1000, 100, true, false, 0); went != 5 || !v.Tripped {
		t.Fatalf("after resume: went %d (%+v), want 5 then a new trip", went, v)
	}
}

func TestHeldBounded(t *testing.T) {
	b := New(Config{Window: time.Minute, UnobservedLimit: 1, MaxHeld: 3, Clock: clocktesting.NewFakePassiveClock(t0)})
	for i := range 10 {
		b.Admit(del(i, true, false, 0))
	}
	st := b.Status(0, -1)
	if st.HeldTotal != 3 || !st.Overflowed {
		t.Fatalf("held %d, overflowed %v; want 3 and true", st.HeldTotal, st.Overflowed)
	}
	// Past the bound it is still held, only not remembered.
	if v := b.Admit(del(50, true, false, 0)); !v.Held {
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
	applied := b.Restore([]Trip{old, cur}, t0.Add(-time.Hour))
	if len(applied) != 1 || applied[0].Signal != Unobserved {
		t.Fatalf("applied %v, want only the trip after the resume", applied)
	}
	if v := b.Admit(del(1, true, false, 0)); !v.Held || v.Tripped {
		t.Fatalf("after restore: %+v, want held by the restored trip", v)
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
	if errs := (Config{Window: -1, UnobservedLimit: -1, DanglingFraction: 2, DanglingMinimum: -1, MaxHeld: -1}).Validate(); len(errs) != 5 {
		t.Fatalf("got %d errors, want 5: %v", len(errs), errs)
	}
}

// The unobserved signal counts owners, not dependents: the dependents of
// one owner kgc never saw (a Background cascade a new leader took over
// midway) all go, however many; each further owner counts once, and the
// one past the limit trips it.
func TestUnobservedCountsOwnersNotDependents(t *testing.T) {
	clk := clocktesting.NewFakePassiveClock(t0)
	b := New(Config{Window: time.Minute, UnobservedLimit: 10, Clock: clk})
	one := []types.UID{"rs-taken-over"}
	for i := range 1000 {
		d := Deletion{UID: types.UID(fmt.Sprintf("pod-%d", i)), Unobserved: true, UnobservedOwners: one}
		if v := b.Admit(d); v.Held {
			t.Fatalf("dependent %d of one unobserved owner held: %+v", i, v)
		}
	}
	for i := range 20 {
		owner := types.UID(fmt.Sprintf("gone-%d", i))
		// Two dependents of each owner: the second adds nothing.
		for j := range 2 {
			v := b.Admit(Deletion{UID: types.UID(fmt.Sprintf("dep-%d-%d", i, j)), Unobserved: true, UnobservedOwners: []types.UID{owner}})
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
