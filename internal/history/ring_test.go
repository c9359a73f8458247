package history

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

func rec(ns, name string, uid types.UID, owners ...types.UID) *Record {
	r := &Record{Operation: OpDelete, Object: Object{APIVersion: "v1", Kind: "ConfigMap", Namespace: ns, Name: name, UID: uid}, Outcome: OutcomeSuccess}
	for _, o := range owners {
		r.Owners = append(r.Owners, Owner{APIVersion: "v1", Kind: "ConfigMap", Name: "o", UID: o, State: "dangling"})
	}
	return r
}

func seqs(recs []Record) []uint64 {
	out := make([]uint64, len(recs))
	for i := range recs {
		out[i] = recs[i].Seq
	}
	return out
}

func TestRingKeepsTheLastSizeRecords(t *testing.T) {
	r := NewRing(3)
	if got, dropped := r.Query(Filter{}); len(got) != 0 || dropped != 0 {
		t.Fatalf("empty ring: %v, dropped %d", got, dropped)
	}
	for i := range 5 {
		if seq := r.Add(rec("a", fmt.Sprint(i), types.UID(fmt.Sprint("u", i)))); seq != uint64(i+1) {
			t.Fatalf("Add #%d returned seq %d", i, seq)
		}
	}
	got, dropped := r.Query(Filter{})
	if fmt.Sprint(seqs(got)) != "[3 4 5]" || dropped != 2 {
		t.Fatalf("after 5 adds to a ring of 3: seqs %v, dropped %d; want [3 4 5], 2", seqs(got), dropped)
	}
	if got[0].Object.Name != "2" || got[2].Object.Name != "4" {
		t.Fatalf("records out of order: %+v", got)
	}
}

func TestRingFilter(t *testing.T) {
	r := NewRing(10)
	r.Add(rec("a", "x", "ux", "owner-1"))
	r.Add(rec("b", "x", "ux2", "owner-2"))
	r.Add(rec("a", "y", "uy", "owner-1", "owner-3"))
	r.Add(rec("", "x", "cluster-x"))
	for _, tc := range []struct {
		f    Filter
		want string
	}{
		{Filter{}, "[1 2 3 4]"},
		{Filter{UID: "ux"}, "[1]"},
		{Filter{UID: "owner-1"}, "[1 3]"}, // writes resting on that owner
		{Filter{UID: "owner-3"}, "[3]"},
		{Filter{Namespace: "a"}, "[1 3]"},
		{Filter{Name: "x"}, "[1 2 4]"},
		{Filter{Namespace: "b", Name: "x"}, "[2]"},
		{Filter{Namespace: "a", Name: "x", UID: "owner-1"}, "[1]"},
		{Filter{Namespace: "a", UID: "owner-2"}, "[]"},
		{Filter{UID: "nobody"}, "[]"},
	} {
		got, _ := r.Query(tc.f)
		if fmt.Sprint(seqs(got)) != tc.want {
			t.Errorf("Query(%+v) = %v, want %s", tc.f, seqs(got), tc.want)
		}
	}
}

func TestNilRingKeepsNothing(t *testing.T) {
	r := NewRing(0)
	if r != nil || NewRing(-1) != nil {
		t.Fatal("a ring of size <= 0 is not nil")
	}
	if seq := r.Add(rec("a", "x", "u")); seq != 0 {
		t.Fatalf("nil ring numbered a record: %d", seq)
	}
	if got, _ := r.Query(Filter{}); got != nil || r.Size() != 0 {
		t.Fatalf("nil ring: %v, size %d", got, r.Size())
	}
}

// Writers and readers at once (run with -race): every record is numbered
// once, and readers see whole records in order.
func TestRingConcurrent(t *testing.T) {
	r := NewRing(64)
	const writers, each = 8, 500
	var wg sync.WaitGroup
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				r.Add(rec("ns", fmt.Sprint(w), types.UID(fmt.Sprint(w, "-", i))))
			}
		}()
	}
	stop := make(chan struct{})
	var readers sync.WaitGroup
	readers.Add(1)
	go func() {
		defer readers.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			got, _ := r.Query(Filter{Namespace: "ns"})
			for i := 1; i < len(got); i++ {
				if got[i].Seq != got[i-1].Seq+1 {
					t.Errorf("records out of order: %d after %d", got[i].Seq, got[i-1].Seq)
					return
				}
			}
		}
	}()
	wg.Wait()
	close(stop)
	readers.Wait()
	got, dropped := r.Query(Filter{})
	if len(got) != 64 || dropped != writers*each-64 || got[63].Seq != writers*each {
		t.Fatalf("after %d adds: %d records, dropped %d, last seq %d", writers*each, len(got), dropped, got[len(got)-1].Seq)
	}
}

func TestBecause(t *testing.T) {
	r := Record{Operation: OpDelete, Reason: "no owner keeps it", Owners: []Owner{
		{Kind: "ReplicaSet", Name: "web", UID: "rs-1", State: "dangling", Evidence: Evidence{Summary: "observed deleted at resourceVersion 42 (watch)"}},
		{Kind: "Deployment", Name: "app", UID: "d-1", State: "waiting", Evidence: Evidence{Summary: "observed at resourceVersion 7 (foreground)"}},
	}}
	want := "no owner keeps it; owner ReplicaSet web (uid rs-1) was observed deleted at resourceVersion 42 (watch); " +
		"owner Deployment app (uid d-1) was in foreground deletion: observed at resourceVersion 7 (foreground)"
	if got := r.Because(); got != want {
		t.Errorf("Because() =\n%s\nwant\n%s", got, want)
	}
}

// BenchmarkRingAdd is the cost every write pays: one record into a full
// ring.
func BenchmarkRingAdd(b *testing.B) {
	r := NewRing(10000)
	proto := rec("ns", "dep", "0b9b3c1e-7d1a-4a43-9c1f-000000000001", "0b9b3c1e-7d1a-4a43-9c1f-000000000002")
	proto.Time = time.Now()
	b.ReportAllocs()
	for b.Loop() {
		x := *proto
		r.Add(&x)
	}
}

// BenchmarkRingAddParallel: every write slot adding at once.
func BenchmarkRingAddParallel(b *testing.B) {
	r := NewRing(10000)
	proto := rec("ns", "dep", "0b9b3c1e-7d1a-4a43-9c1f-000000000001", "0b9b3c1e-7d1a-4a43-9c1f-000000000002")
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			x := *proto
			r.Add(&x)
		}
	})
}

// BenchmarkRingQuery: a filtered read of a full ring (what the endpoint
// and kgc explain do).
func BenchmarkRingQuery(b *testing.B) {
	r := NewRing(10000)
	for i := range 10000 {
		r.Add(rec("ns", fmt.Sprint("dep-", i), types.UID(fmt.Sprint("u-", i))))
	}
	b.ReportAllocs()
	for b.Loop() {
		if got, _ := r.Query(Filter{Namespace: "ns", Name: "dep-5000"}); len(got) != 1 {
			b.Fatal(len(got))
		}
	}
}
