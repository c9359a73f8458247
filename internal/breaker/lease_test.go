package breaker

import (
	"context"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
