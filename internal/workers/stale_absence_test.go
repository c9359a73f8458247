package workers

import (
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/kgc-dev/kgc/internal/fakeapi"
	"github.com/kgc-dev/kgc/internal/graph"
	"github.com/kgc-dev/kgc/internal/rules"
)

// An owner kgc saw deleted is absent from then on, unless the API's
// storage was rolled back (an etcd restore brings it back under its UID).
// While the watch of its resource was interrupted and not verified since,
// its absence, from the graph or the absent cache, is read again with a
// quorum read before a decision rests on it: once per interruption when
// the owner is still gone (and the read is no evidence of an owner never
// observed alive), every time while it is back.
func TestStaleAbsenceIsReadAgain(t *testing.T) {
	var epoch uint64
	unverified := false
	setup := func(t *testing.T) *resolverFixture {
		f := newResolverFixture()
		f.r.unverified = func(gk schema.GroupKind) (uint64, bool) {
			return epoch, unverified && gk == schema.GroupKind{Kind: "ConfigMap"}
		}
		f.r.reread = newRecentMap[rules.Coordinates, uint64](100)
		dep := rules.Object{Identity: depA, OwnerReferences: []metav1.OwnerReference{cmRef}}
		f.observe(t, ownerObj)
		f.observe(t, dep)
		f.g.Apply(graph.Event{Type: graph.Delete, Object: ownerObj}) // observed deleted: a placeholder, absent
		return f
	}
	get := getKey{fakeapi.ConfigMaps, "a", "owner"}
	fact := func(t *testing.T, f *resolverFixture) rules.Fact {
		t.Helper()
		ref := cmRef
		got, err := f.r.resolveFact(t.Context(), depA, &ref)
		if err != nil {
			t.Fatal(err)
		}
		return got
	}

	t.Run("verified: the graph's absence stands", func(t *testing.T) {
		epoch, unverified = 1, false
		f := setup(t)
		if got := fact(t, f); got.State != rules.Dangling || got.Evidence.Source != rules.SourceWatchDeletion {
			t.Fatalf("fact %+v, want dangling from the watch", got)
		}
		expectGETs(t, f)
	})
	t.Run("unverified, still gone: read again once per interruption", func(t *testing.T) {
		epoch, unverified = 1, true
		f := setup(t)
		if got := fact(t, f); got.State != rules.Dangling || got.Evidence.Source != rules.SourceConfirm {
			t.Fatalf("fact %+v, want dangling from a confirming read", got)
		}
		// Read again once: the graph's absence stands for this
		// interruption.
		if got := fact(t, f); got.State != rules.Dangling {
			t.Fatalf("fact %+v, want dangling", got)
		}
		expectGETs(t, f, get)
		epoch = 2
		fact(t, f)
		expectGETs(t, f, get, get)
	})
	t.Run("unverified, the absent cache's absence: read again", func(t *testing.T) {
		epoch, unverified = 1, true
		f := newResolverFixture()
		f.r.unverified = func(gk schema.GroupKind) (uint64, bool) { return epoch, unverified }
		f.r.reread = newRecentMap[rules.Coordinates, uint64](100)
		f.r.absent.Put(ownerObj.Identity.Coordinates(), rules.Evidence{Source: rules.SourceWatchDeletion, Reason: rules.ReasonNotFound})
		f.getter.objects[get] = fakeapi.Object("a", "owner", "owner")
		if got := fact(t, f); got.State != rules.Solid {
			t.Fatalf("fact %+v, want solid: the owner exists again", got)
		}
		expectGETs(t, f, get)
	})
	t.Run("unverified, back after a rollback: solid", func(t *testing.T) {
		epoch, unverified = 1, true
		f := setup(t)
		f.getter.objects[get] = fakeapi.Object("a", "owner", "owner")
		if got := fact(t, f); got.State != rules.Solid {
			t.Fatalf("fact %+v, want solid: the owner exists again", got)
		}
	})
	t.Run("unverified, kind no longer served: the graph's absence stands", func(t *testing.T) {
		// The owner's CRD went: the list that removed its objects
		// answered 404 and its watch stays interrupted for good. No API
		// serves the kind, so no read by name can be made, and none is
		// needed; keeping the dependent would keep it forever.
		epoch, unverified = 1, true
		f := setup(t)
		f.r.mapper = meta.NewDefaultRESTMapper(nil)
		if got := fact(t, f); got.State != rules.Dangling || got.Evidence.Source != rules.SourceWatchDeletion {
			t.Fatalf("fact %+v, want dangling from the watch", got)
		}
		expectGETs(t, f)
	})
}
