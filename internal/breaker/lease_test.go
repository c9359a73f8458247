package breaker

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// Trips are recorded on the Lease (created without a holder when
// missing), without touching its spec; a resume writes the latest trip's
// own time; a new process restores what is not resumed.
func TestLeaseStore(t *testing.T) {
	ctx := context.Background()
	cs := fake.NewClientset()
	s := &LeaseStore{Client: cs.CoordinationV1(), Namespace: "kgc-system", Name: "kgc"}
	if st, l, err := s.Load(ctx); err != nil || l != nil || len(st.Trips) != 0 {
		t.Fatalf("Load of a missing Lease: %+v %v %v", st, l, err)
	}
	trip := Trip{Signal: Unobserved, At: t0, Count: 201, Limit: 200, Window: Duration(DefaultWindow)}
	if _, err := s.Record(ctx, []Trip{trip}); err != nil {
		t.Fatal(err)
	}
	// A holder's spec must survive the annotation writes.
	l, _ := cs.CoordinationV1().Leases("kgc-system").Get(ctx, "kgc", metav1.GetOptions{})
	holder := "kgc-0_abc"
	l.Spec = coordinationv1.LeaseSpec{HolderIdentity: &holder}
	if _, err := cs.CoordinationV1().Leases("kgc-system").Update(ctx, l, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	later := Trip{Signal: Dangling, At: t0.Add(time.Minute), Count: 1001, Limit: 1000, GraphSize: 10}
	if _, err := s.Record(ctx, []Trip{later}); err != nil {
		t.Fatal(err)
	}
	st, l, err := s.Load(ctx)
	if err != nil || len(st.Active()) != 2 || *l.Spec.HolderIdentity != holder {
		t.Fatalf("after two trips: %+v, lease %+v, %v", st, l, err)
	}
	// A new process starts tripped.
	b := New(Config{UnobservedLimit: 5})
	if got := b.Restore(st.Trips, st.Resumed); len(got) != 2 || !b.Tripped(Unobserved) || !b.Tripped(Dangling) {
		t.Fatalf("restored %v", got)
	}
	before, resumed, err := s.Resume(ctx, time.Time{})
	if err != nil || !resumed.Equal(later.At) || len(before.Active()) != 2 {
		t.Fatalf("Resume: %v %v %v", before, resumed, err)
	}
	st, _, _ = s.Load(ctx)
	if len(st.Active()) != 0 {
		t.Fatalf("active after resume: %v", st.Active())
	}
	if _, _, err := b.Resume(st.Resumed); err {
		t.Fatal("unexpected overflow")
	}
	if b.Tripped(Unobserved) || b.Tripped(Dangling) {
		t.Fatal("still tripped after the Lease's resume")
	}
	// Nothing to resume: the Lease is left alone.
	if _, resumed, err := s.Resume(ctx, time.Time{}); err != nil || !resumed.IsZero() {
		t.Fatalf("a second resume: %v %v", resumed, err)
	}
}

// Sync records a trip on the Lease as soon as it is made (a Kick, not the
// next tick: the interval is an hour here) and applies a resume written
// there; the breaker knows when the trip is durable.
func TestSyncRecordsAndResumes(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cs := fake.NewClientset()
	store := &LeaseStore{Client: cs.CoordinationV1(), Namespace: "ns", Name: "kgc"}
	b := New(Config{UnobservedLimit: 1})
	resumed := make(chan int, 1)
	s := NewSync(b, store)
	s.Interval = time.Hour
	s.OnResume = func(release []types.UID, _ []Trip, _ bool) { resumed <- len(release) }
	if err := s.Load(ctx); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); s.Run(ctx) }()

	owner := func(uid string) []Owner { return []Owner{{UID: types.UID(uid), NeverObserved: true}} }
	b.Admit(Deletion{UID: "a", Arrived: true, Owners: owner("oa")})
	v := b.Admit(Deletion{UID: "b", Arrived: true, Owners: owner("ob")})
	if !v.Tripped || b.Durable() {
		t.Fatalf("verdict %+v, durable %v: want a trip not recorded yet", v, b.Durable())
	}
	s.Kick()
	deadline := time.After(10 * time.Second)
	for !b.Durable() {
		select {
		case <-deadline:
			t.Fatal("the trip never became durable")
		case <-time.After(10 * time.Millisecond):
		}
	}
	if st, _, err := store.Load(ctx); err != nil || len(st.Active()) != 1 {
		t.Fatalf("the Lease after the record: %+v %v", st, err)
	}
	if _, _, err := store.Resume(ctx, time.Time{}); err != nil {
		t.Fatal(err)
	}
	s.Kick() // the resume is read on the next round too
	select {
	case n := <-resumed:
		if n != 1 || b.Tripped(Unobserved) {
			t.Fatalf("released %d (want 1), tripped %v", n, b.Tripped(Unobserved))
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the resume was never applied")
	}
	cancel()
	<-done
}

// An unreadable annotation, or a Lease that cannot be read, fails Load:
// the caller starts no worker rather than starting untripped.
func TestLoadFailsOnUnreadableState(t *testing.T) {
	ctx := context.Background()
	cs := fake.NewClientset(&coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "kgc",
		Annotations: map[string]string{AnnotationTrips: "{not json"}}})
	s := NewSync(New(Config{}), &LeaseStore{Client: cs.CoordinationV1(), Namespace: "ns", Name: "kgc"})
	if err := s.Load(ctx); !errors.Is(err, ErrUnreadable) {
		t.Fatalf("Load: %v, want ErrUnreadable", err)
	}
	cs.PrependReactor("get", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(coordinationv1.Resource("leases"), "kgc", errors.New("RBAC"))
	})
	if err := s.Load(ctx); !apierrors.IsForbidden(err) {
		t.Fatalf("Load: %v, want Forbidden", err)
	}
}

// Trips of one signal on different resources are kept apart on the Lease.
func TestRecordKeepsTripsPerResource(t *testing.T) {
	ctx := context.Background()
	s := &LeaseStore{Client: fake.NewClientset().CoordinationV1(), Namespace: "ns", Name: "kgc"}
	a := Trip{Signal: Vanished, Resource: "Widget.example.com", At: t0}
	b := Trip{Signal: Vanished, Resource: "Gadget.example.com", At: t0.Add(time.Second)}
	if _, err := s.Record(ctx, []Trip{a}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Record(ctx, []Trip{b}); err != nil {
		t.Fatal(err)
	}
	st, _, err := s.Load(ctx)
	if err != nil || len(st.Active()) != 2 {
		t.Fatalf("%+v %v: want both resources' trips", st, err)
	}
}

// An unreadable annotation stays as it is: a trip made meanwhile (the
// graph builder judges before the workers start) is not recorded over it,
// which would forget the trips it holds and let the next Load succeed
// without them. The trip is retried once an operator fixes it.
func TestRecordKeepsUnreadableState(t *testing.T) {
	ctx := context.Background()
	const broken = `[{"signal":"rollback","at":"2026-01-02T03:04:05Z"`
	cs := fake.NewClientset(&coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "kgc",
		Annotations: map[string]string{AnnotationTrips: broken}}})
	s := &LeaseStore{Client: cs.CoordinationV1(), Namespace: "ns", Name: "kgc"}
	if _, err := s.Record(ctx, []Trip{{Signal: Vanished, Resource: "Widget.example.com", At: t0}}); !errors.Is(err, ErrUnreadable) {
		t.Fatalf("Record over an unreadable annotation: %v, want ErrUnreadable", err)
	}
	l, err := cs.CoordinationV1().Leases("ns").Get(ctx, "kgc", metav1.GetOptions{})
	if err != nil || l.Annotations[AnnotationTrips] != broken {
		t.Fatalf("annotation %q (%v), want it untouched", l.Annotations[AnnotationTrips], err)
	}
}

// A trip that is not recorded yet when Run stops (kgc stopping, or losing
// its leadership) is recorded before Run returns, if the Lease takes a
// write within StopTimeout: the next kgc reads it and starts tripped.
// When none does, Run still returns, and the trip is not reported durable.
func TestSyncRecordsAtStop(t *testing.T) {
	for _, tc := range []struct {
		name       string
		healsAfter int // failed writes before the Lease takes one; -1: never
		want       bool
	}{
		{name: "the Lease takes a write while stopping", healsAfter: 3, want: true},
		{name: "the Lease takes no write", healsAfter: -1, want: false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cs := fake.NewClientset()
			var mu sync.Mutex
			failed, stopping := 0, false
			attempted := make(chan struct{}, 100)
			cs.PrependReactor("create", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
				mu.Lock()
				defer mu.Unlock()
				attempted <- struct{}{}
				if !stopping || tc.healsAfter < 0 || failed < tc.healsAfter {
					failed++
					return true, nil, apierrors.NewServiceUnavailable("etcd is down")
				}
				return false, nil, nil
			})
			store := &LeaseStore{Client: cs.CoordinationV1(), Namespace: "ns", Name: "kgc"}
			b := New(Config{UnobservedLimit: 1})
			s := NewSync(b, store)
			s.Interval = time.Hour
			s.StopTimeout = 3 * time.Second
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan struct{})
			go func() { defer close(done); s.Run(ctx) }()

			owner := func(uid string) []Owner { return []Owner{{UID: types.UID(uid), NeverObserved: true}} }
			b.Admit(Deletion{UID: "a", Arrived: true, Owners: owner("oa")})
			if v := b.Admit(Deletion{UID: "b", Arrived: true, Owners: owner("ob")}); !v.Tripped {
				t.Fatalf("verdict %+v: want a trip", v)
			}
			s.Kick()
			select {
			case <-attempted: // the write at the trip failed
			case <-time.After(10 * time.Second):
				t.Fatal("no attempt to record the trip")
			}
			mu.Lock()
			stopping = true
			mu.Unlock()
			cancel()
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				t.Fatal("Run did not return within its StopTimeout")
			}
			if b.Durable() != tc.want {
				t.Fatalf("durable %v after Run returned, want %v", b.Durable(), tc.want)
			}
			st, _, err := store.Load(context.Background())
			if err != nil || (len(st.Active()) == 1) != tc.want {
				t.Fatalf("the Lease after Run returned: %+v %v; want the trip recorded: %v", st, err, tc.want)
			}
		})
	}
}

// A trip another kgc records on the Lease after this one read it at start
// — the leader that lost its Lease to this one, recording while it stops
// — applies within a poll; a resume written there releases it again, and
// is not undone by the next poll.
func TestSyncAppliesTripsRecordedLater(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	store := &LeaseStore{Client: fake.NewClientset().CoordinationV1(), Namespace: "ns", Name: "kgc"}
	b := New(Config{UnobservedLimit: 5})
	s := NewSync(b, store)
	s.Interval = 10 * time.Millisecond
	restored := make(chan []Trip, 10)
	s.OnRestore = func(_ *coordinationv1.Lease, trips []Trip) { restored <- trips }
	if err := s.Load(ctx); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); s.Run(ctx) }()
	defer func() { cancel(); <-done }()

	if _, err := store.Record(ctx, []Trip{{Signal: Vanished, Resource: "Widget.example.com", At: time.Now()}}); err != nil {
		t.Fatal(err)
	}
	select {
	case trips := <-restored:
		if len(trips) != 1 || !b.Tripped(Vanished) {
			t.Fatalf("applied %+v, tripped %v: want the trip recorded by the other kgc", trips, b.Tripped(Vanished))
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a trip recorded on the Lease after the start was never applied")
	}
	if _, _, err := store.Resume(ctx, time.Time{}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for b.Tripped(Vanished) {
		if time.Now().After(deadline) {
			t.Fatal("the resume was never applied")
		}
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(100 * time.Millisecond) // polls that must not apply the resumed trip again
	if b.Tripped(Vanished) {
		t.Fatal("a resumed trip was applied again")
	}
}
