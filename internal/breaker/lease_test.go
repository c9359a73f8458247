package breaker

import (
	"context"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
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

// Sync records a trip on the Lease and applies a resume written there.
func TestSyncRecordsAndResumes(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cs := fake.NewClientset()
	store := &LeaseStore{Client: cs.CoordinationV1(), Namespace: "ns", Name: "kgc"}
	b := New(Config{UnobservedLimit: 1})
	tripped := make(chan Trip, 1)
	resumed := make(chan int, 1)
	s := &Sync{Breaker: b, Store: store, Interval: 10 * time.Millisecond, Tripped: tripped,
		OnResume: func(release []types.UID, _ []Trip, _ bool) { resumed <- len(release) }}
	s.Start(ctx)
	done := make(chan struct{})
	go func() { defer close(done); s.Run(ctx) }()

	b.Admit(Deletion{UID: "a", Unobserved: true})
	v := b.Admit(Deletion{UID: "b", Unobserved: true})
	if !v.Tripped {
		t.Fatal("did not trip")
	}
	tripped <- v.Trip
	deadline := time.After(10 * time.Second)
	for {
		st, _, err := store.Load(ctx)
		if err == nil && len(st.Active()) == 1 {
			break
		}
		select {
		case <-deadline:
			t.Fatal("the trip never reached the Lease")
		case <-time.After(10 * time.Millisecond):
		}
	}
	if _, _, err := store.Resume(ctx, time.Time{}); err != nil {
		t.Fatal(err)
	}
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
