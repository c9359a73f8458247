package graph_test

import (
	"slices"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kgc-dev/kgc/internal/graph"
	"github.com/kgc-dev/kgc/internal/rules"
)

func deletedAt(t time.Time) objOpt {
	return func(o *rules.Object) { o.DeletionTimestamp = &metav1.Time{Time: t} }
}

// The deleting index follows every way a node starts or stops deleting,
// and DeletingSince answers from it, oldest first.
func TestDeletingSince(t *testing.T) {
	t0 := time.Unix(1700000000, 0)
	g := graph.New()
	apply := func(ev graph.Event) {
		t.Helper()
		g.Apply(ev)
		if err := g.CheckInvariants(); err != nil {
			t.Fatal(err)
		}
	}
	since := func(at time.Time) []types.UID {
		uids, _ := g.DeletingSince(at)
		return uids
	}
	apply(upsert(obj("owner", rv("1"))))
	apply(upsert(obj("a", rv("1"), owners(ref("owner")), deleting("example.com/f"), deletedAt(t0.Add(2*time.Second)))))
	apply(upsert(obj("b", rv("1"), deleting("example.com/f"), deletedAt(t0))))
	apply(upsert(obj("c", rv("1"), deleting("example.com/f"))))                    // no timestamp: not listed
	apply(upsert(obj("owner", rv("2"), deleting(), deletedAt(t0.Add(time.Hour))))) // too recent
	if got, n := g.DeletingSince(t0.Add(time.Minute)); !slices.Equal(got, []types.UID{"b", "a"}) || n != 4 {
		t.Errorf("DeletingSince = %v, %d deleting; want [b a], 4", got, n)
	}
	if o, _ := g.Object("a"); o.DeletionTimestamp == nil || !o.DeletionTimestamp.Time.Equal(t0.Add(2*time.Second)) {
		t.Errorf("Object(a).DeletionTimestamp = %v", o.DeletionTimestamp)
	}
	apply(upsert(obj("b", rv("2")))) // no longer deleting (a finalizer removed before the timestamp... or a test)
	apply(del(obj("owner")))         // becomes an absent placeholder: a still references it
	apply(del(obj("a")))
	if got := since(t0.Add(2 * time.Hour)); len(got) != 0 {
		t.Errorf("DeletingSince after the deletions = %v", got)
	}
	if _, n := g.DeletingSince(t0); n != 1 {
		t.Errorf("%d nodes indexed as deleting, want 1 (c)", n)
	}
}
