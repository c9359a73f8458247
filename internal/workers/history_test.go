package workers

import (
	"context"
	"fmt"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2/ktesting"

	"github.com/kgc-dev/kgc/internal/fakeapi"
	"github.com/kgc-dev/kgc/internal/graph"
	"github.com/kgc-dev/kgc/internal/history"
	"github.com/kgc-dev/kgc/internal/metrics"
	"github.com/kgc-dev/kgc/internal/rules"
)

// Evidence threading: each kind of decision records the fact it rests on
// as the resolver gathered it (source and resourceVersion), and each write
// its policy, preconditions and outcome. Every test fails when the evidence
// recorded is not the one the decision was made from.

// newHistoryStepper is a stepper whose workers keep a history.
func newHistoryStepper(t *testing.T, srv *fakeapi.Server) (*stepper, *history.Ring) {
	t.Helper()
	ring := history.NewRing(100)
	c := New(Config{Metadata: srv.Client, Mapper: fakeapi.NewMapper(), Workers: 1, History: ring}, graph.New())
	t.Cleanup(func() {
		c.attemptToDelete.ShutDown()
		c.attemptToOrphan.ShutDown()
	})
	_, ctx := ktesting.NewTestContext(t)
	return &stepper{t: t, srv: srv, c: c, ctx: ctx}, ring
}

// identity is o's identity as the stepper observes it.
func identity(gvr schema.GroupVersionResource, o *metav1.PartialObjectMetadata) rules.Identity {
	k := kindOf[gvr]
	return rules.Identity{APIVersion: k[0], Kind: k[1], Namespace: o.Namespace, Name: o.Name, UID: o.UID}
}

// records returns the ring's records about the object with uid.
func records(t *testing.T, ring *history.Ring, uid types.UID) []history.Record {
	t.Helper()
	all, _ := ring.Query(history.Filter{})
	var out []history.Record
	for _, r := range all {
		if r.Object.UID == uid {
			out = append(out, r)
		}
	}
	return out
}

// only returns the one record about uid.
func only(t *testing.T, ring *history.Ring, uid types.UID) history.Record {
	t.Helper()
	recs := records(t, ring, uid)
	if len(recs) != 1 {
		t.Fatalf("%d records about %s, want 1: %+v", len(recs), uid, recs)
	}
	return recs[0]
}

type wantOwner struct {
	uid     types.UID
	state   string
	source  string
	reason  string
	rv      string
	removed bool
}

func checkOwners(t *testing.T, rec history.Record, want ...wantOwner) {
	t.Helper()
	if len(rec.Owners) != len(want) {
		t.Fatalf("%s record has %d owners, want %d: %+v", rec.Operation, len(rec.Owners), len(want), rec.Owners)
	}
	for i, w := range want {
		o := rec.Owners[i]
		got := wantOwner{o.UID, o.State, o.Evidence.Source, o.Evidence.Reason, o.Evidence.ResourceVersion, o.Removed}
		if got != w {
			t.Errorf("%s record, owner %d:\n got %+v\nwant %+v", rec.Operation, i, got, w)
		}
	}
}

func checkRecord(t *testing.T, rec history.Record, op, outcome, policy string, pre history.Preconditions) {
	t.Helper()
	if rec.Operation != op || rec.Outcome != outcome || rec.Policy != policy {
		t.Errorf("record: operation %q outcome %q policy %q, want %q %q %q", rec.Operation, rec.Outcome, rec.Policy, op, outcome, policy)
	}
	if fmt.Sprint(rec.Preconditions) != fmt.Sprint(pre) {
		t.Errorf("record preconditions %v, want %v", rec.Preconditions, pre)
	}
	if rec.Seq == 0 || rec.Time.IsZero() || rec.Reason == "" {
		t.Errorf("record without seq, time or reason: %+v", rec)
	}
}

// The owner's deletion was observed by its watch: the record names the
// DELETED event's resourceVersion.
func TestHistoryOwnerObservedDeleted(t *testing.T) {
	srv := fakeapi.NewServer()
	s, ring := newHistoryStepper(t, srv)
	o := srv.Create(t, fakeapi.Deployments, fakeapi.Object("a", "o", "o-uid"))
	d := srv.Create(t, fakeapi.ConfigMaps, fakeapi.Object("a", "d", "d-uid", fakeapi.DeploymentRef("o", "o-uid")))
	s.observe(fakeapi.Deployments, o)
	s.observe(fakeapi.ConfigMaps, d)
	s.deleteWith(fakeapi.Deployments, o, metav1.DeletePropagationBackground)
	s.c.apply(graph.Event{Type: graph.Delete, Object: rules.Object{Identity: identity(fakeapi.Deployments, o), ResourceVersion: "4242"}})
	if err := s.deleteStep("d-uid"); err != nil {
		t.Fatal(err)
	}
	rec := only(t, ring, "d-uid")
	checkRecord(t, rec, history.OpDelete, history.OutcomeSuccess, string(metav1.DeletePropagationBackground),
		history.Preconditions{UID: "d-uid", ResourceVersion: d.ResourceVersion})
	checkOwners(t, rec, wantOwner{"o-uid", "dangling", "watch-deletion", "not-found", "4242", false})
	if got := rec.Summarized().Owners[0].Evidence.Summary; got != "observed deleted at resourceVersion 4242 (watch)" {
		t.Errorf("summary %q", got)
	}
	if rec.Object != history.ObjectOf(identity(fakeapi.ConfigMaps, d)) {
		t.Errorf("record object %+v", rec.Object)
	}

	// The absent cache keeps the evidence: a dependent that appears after
	// the owner's placeholder went still gets the deletion's
	// resourceVersion, not a lookup's.
	s.observe(fakeapi.ConfigMaps, d) // gone: the placeholder goes with it
	late := srv.Create(t, fakeapi.ConfigMaps, fakeapi.Object("a", "late", "late-uid", fakeapi.DeploymentRef("o", "o-uid")))
	s.observe(fakeapi.ConfigMaps, late)
	if err := s.deleteStep("late-uid"); err != nil {
		t.Fatal(err)
	}
	checkOwners(t, only(t, ring, "late-uid"), wantOwner{"o-uid", "dangling", "watch-deletion", "not-found", "4242", false})
}

// The owner disappeared while its watch was down: the relist that no
// longer holds it is the evidence, at the LIST's resourceVersion.
func TestHistoryOwnerAbsentFromRelist(t *testing.T) {
	srv := fakeapi.NewServer()
	s, ring := newHistoryStepper(t, srv)
	o := srv.Create(t, fakeapi.Deployments, fakeapi.Object("a", "o", "o-uid"))
	d := srv.Create(t, fakeapi.ConfigMaps, fakeapi.Object("a", "d", "d-uid", fakeapi.DeploymentRef("o", "o-uid")))
	s.c.apply(graph.Event{Type: graph.Upsert, Object: rules.Object{Identity: identity(fakeapi.Deployments, o), ResourceVersion: o.ResourceVersion}, Gen: 1})
	s.observe(fakeapi.ConfigMaps, d)
	s.deleteWith(fakeapi.Deployments, o, metav1.DeletePropagationBackground)
	s.c.apply(graph.Event{Type: graph.Relisted, Object: rules.Object{Identity: rules.Identity{APIVersion: "apps/v1", Kind: "Deployment"}, ResourceVersion: "5000"}, Gen: 2})
	if err := s.deleteStep("d-uid"); err != nil {
		t.Fatal(err)
	}
	rec := only(t, ring, "d-uid")
	checkRecord(t, rec, history.OpDelete, history.OutcomeSuccess, string(metav1.DeletePropagationBackground),
		history.Preconditions{UID: "d-uid", ResourceVersion: d.ResourceVersion})
	checkOwners(t, rec, wantOwner{"o-uid", "dangling", "relist", "not-found", "5000", false})
}

// An owner kgc never observed is looked up: a 404, or another object
// with the name, is the evidence.
func TestHistoryOwnerLookedUp(t *testing.T) {
	for _, tc := range []struct {
		name   string
		other  bool
		reason string
	}{
		{"404", false, "not-found"},
		{"other uid", true, "other-uid"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := fakeapi.NewServer()
			s, ring := newHistoryStepper(t, srv)
			if tc.other {
				srv.Create(t, fakeapi.Deployments, fakeapi.Object("a", "o", "new-uid"))
			}
			d := srv.Create(t, fakeapi.ConfigMaps, fakeapi.Object("a", "d", "d-uid", fakeapi.DeploymentRef("o", "o-uid")))
			s.observe(fakeapi.ConfigMaps, d)
			if err := s.deleteStep("d-uid"); err != nil {
				t.Fatal(err)
			}
			rec := only(t, ring, "d-uid")
			checkRecord(t, rec, history.OpDelete, history.OutcomeSuccess, string(metav1.DeletePropagationBackground),
				history.Preconditions{UID: "d-uid", ResourceVersion: d.ResourceVersion})
			want := wantOwner{"o-uid", "dangling", "get", tc.reason, "", false}
			if tc.other {
				want.rv = rec.Owners[0].Evidence.ResourceVersion // the found object's
				if want.rv == "" || rec.Owners[0].Evidence.FoundUID != "new-uid" {
					t.Errorf("other-uid evidence without the found object: %+v", rec.Owners[0].Evidence)
				}
			}
			checkOwners(t, rec, want)
		})
	}
}

// A shared LIST answers lookups: its resourceVersion is the evidence.
func TestHistoryOwnerAbsentFromLIST(t *testing.T) {
	f := newResolverFixture()
	api := newLaneAPI()
	api.put(&metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "there", UID: "there"}})
	f.r.get, f.r.list = api.get, func(ctx context.Context, gvr schema.GroupVersionResource, ns string, opts metav1.ListOptions) (*metav1.PartialObjectMetadataList, error) {
		l, err := api.list(ctx, gvr, ns, opts)
		if err == nil {
			l.ResourceVersion = "777"
		}
		return l, err
	}
	round := map[rules.Coordinates]*flight{}
	for _, name := range []string{"gone-1", "gone-2", "there"} {
		round[rules.Coordinates{Kind: "ConfigMap", Namespace: "a", Name: name, UID: types.UID(name)}] = &flight{done: make(chan struct{})}
	}
	f.r.serveRound(context.Background(), fakeapi.ConfigMaps, &lane{}, round)
	if api.lists.Load() != 1 {
		t.Fatalf("%d LISTs, want 1", api.lists.Load())
	}
	for c, fl := range round {
		want := rules.Fact{State: rules.Dangling, Evidence: rules.Evidence{Source: rules.SourceList, Reason: rules.ReasonNotFound, ResourceVersion: "777"}}
		if c.Name == "there" {
			want = rules.Fact{State: rules.Solid, Evidence: rules.Evidence{Source: rules.SourceList, Reason: rules.ReasonExists, ResourceVersion: "777"}}
		}
		if fl.fact != want {
			t.Errorf("%s: %+v, want %+v", c.Name, fl.fact, want)
		}
		if e, ok := f.r.absent.Get(c); ok != (c.Name != "there") || (ok && e != want.Evidence) {
			t.Errorf("%s: absent cache holds %+v (%v), want the LIST's evidence", c.Name, e, ok)
		}
	}
}

// A solid owner keeps the object; its reference to a waiting owner goes.
// The solid owner was confirmed by a GET just before the patch: that, not
// the graph, is its evidence.
func TestHistoryRemoveReferencesConfirmed(t *testing.T) {
	srv := fakeapi.NewServer()
	s, ring := newHistoryStepper(t, srv)
	keep := srv.Create(t, fakeapi.Deployments, fakeapi.Object("a", "keep", "keep-uid"))
	wait := srv.Create(t, fakeapi.Deployments, fakeapi.Object("a", "wait", "wait-uid"))
	d := srv.Create(t, fakeapi.ConfigMaps, fakeapi.Object("a", "d", "d-uid", fakeapi.DeploymentRef("keep", "keep-uid"), fakeapi.DeploymentRef("wait", "wait-uid")))
	s.observe(fakeapi.Deployments, keep)
	s.observe(fakeapi.ConfigMaps, d)
	s.deleteWith(fakeapi.Deployments, wait, metav1.DeletePropagationForeground)
	wait = s.mustGet(fakeapi.Deployments, wait)
	s.observe(fakeapi.Deployments, wait)
	if err := s.deleteStep("d-uid"); err != nil {
		t.Fatal(err)
	}
	rec := only(t, ring, "d-uid")
	checkRecord(t, rec, history.OpRemoveReferences, history.OutcomeSuccess, "",
		history.Preconditions{UID: "d-uid", Tests: []string{"ownerReferences"}})
	checkOwners(t, rec,
		wantOwner{"keep-uid", "solid", "confirm", "exists", keep.ResourceVersion, false},
		wantOwner{"wait-uid", "waiting", "graph", "foreground", wait.ResourceVersion, true},
	)
}

// Orphaning: the dependent's record names the orphaning owner as the graph
// observed it; the owner's finalizer removal follows with its own record.
func TestHistoryOrphan(t *testing.T) {
	srv := fakeapi.NewServer()
	s, ring := newHistoryStepper(t, srv)
	o := srv.Create(t, fakeapi.Deployments, fakeapi.Object("a", "o", "o-uid"))
	d := srv.Create(t, fakeapi.ConfigMaps, fakeapi.Object("a", "d", "d-uid", fakeapi.DeploymentRef("o", "o-uid")))
	s.observe(fakeapi.Deployments, o)
	s.observe(fakeapi.ConfigMaps, d)
	s.deleteWith(fakeapi.Deployments, o, metav1.DeletePropagationOrphan)
	o = s.mustGet(fakeapi.Deployments, o)
	s.observe(fakeapi.Deployments, o)
	if err := s.orphanStep("o-uid"); err != nil {
		t.Fatal(err)
	}
	rec := only(t, ring, "d-uid")
	checkRecord(t, rec, history.OpOrphan, history.OutcomeSuccess, "", history.Preconditions{UID: "d-uid"})
	checkOwners(t, rec, wantOwner{"o-uid", "orphaning", "graph", "orphaning", o.ResourceVersion, true})
	fin := only(t, ring, "o-uid")
	checkRecord(t, fin, history.OpRemoveFinalizer, history.OutcomeSuccess, "",
		history.Preconditions{UID: "o-uid", Tests: []string{"finalizers"}})
	if fin.Finalizer != rules.FinalizerOrphan || len(fin.Owners) != 0 || !strings.Contains(fin.Reason, "every one was orphaned") {
		t.Errorf("orphan finalizer record: %+v", fin)
	}
}

// Foreground: the waiting owner's dependent is deleted on the strength of
// the owner observed waiting; once it is gone, the owner's finalizer goes.
func TestHistoryForeground(t *testing.T) {
	srv := fakeapi.NewServer()
	s, ring := newHistoryStepper(t, srv)
	o := srv.Create(t, fakeapi.Deployments, fakeapi.Object("a", "o", "o-uid"))
	d := srv.Create(t, fakeapi.ConfigMaps, fakeapi.Object("a", "d", "d-uid", fakeapi.DeploymentRef("o", "o-uid")))
	s.observe(fakeapi.Deployments, o)
	s.observe(fakeapi.ConfigMaps, d)
	s.deleteWith(fakeapi.Deployments, o, metav1.DeletePropagationForeground)
	o = s.mustGet(fakeapi.Deployments, o)
	s.observe(fakeapi.Deployments, o)
	if err := s.deleteStep("d-uid"); err != nil {
		t.Fatal(err)
	}
	rec := only(t, ring, "d-uid")
	checkRecord(t, rec, history.OpDelete, history.OutcomeSuccess, string(metav1.DeletePropagationBackground),
		history.Preconditions{UID: "d-uid", ResourceVersion: d.ResourceVersion})
	checkOwners(t, rec, wantOwner{"o-uid", "waiting", "graph", "foreground", o.ResourceVersion, false})

	s.observe(fakeapi.ConfigMaps, d) // gone
	if err := s.deleteStep("o-uid"); err != nil {
		t.Fatal(err)
	}
	fin := only(t, ring, "o-uid")
	checkRecord(t, fin, history.OpRemoveFinalizer, history.OutcomeSuccess, "",
		history.Preconditions{UID: "o-uid", Tests: []string{"finalizers"}})
	if fin.Finalizer != rules.FinalizerForeground || !strings.Contains(fin.Reason, "no dependent blocks it") {
		t.Errorf("foreground finalizer record: %+v", fin)
	}
}

// A DELETE that meets a 409 and is sent again: one record per DELETE,
// each with the resourceVersion it carried.
func TestHistoryDeleteRetriedAfterConflict(t *testing.T) {
	srv := fakeapi.NewServer()
	s, ring := newHistoryStepper(t, srv)
	d := srv.Create(t, fakeapi.ConfigMaps, fakeapi.Object("a", "d", "d-uid", fakeapi.DeploymentRef("o", "o-uid")))
	s.observe(fakeapi.ConfigMaps, d)
	// Another client touches the object: the graph's version is stale.
	srv.SetFinalizers(t, fakeapi.ConfigMaps, "a", "d")
	cur := s.mustGet(fakeapi.ConfigMaps, d)
	if err := s.deleteStep("d-uid"); err != nil {
		t.Fatal(err)
	}
	recs := records(t, ring, "d-uid")
	if len(recs) != 2 {
		t.Fatalf("%d records, want 2 (the 409 and the retry): %+v", len(recs), recs)
	}
	checkRecord(t, recs[0], history.OpDelete, history.OutcomeConflict, string(metav1.DeletePropagationBackground),
		history.Preconditions{UID: "d-uid", ResourceVersion: d.ResourceVersion})
	if recs[0].Error == "" {
		t.Error("conflict recorded without its error")
	}
	checkRecord(t, recs[1], history.OpDelete, history.OutcomeSuccess, string(metav1.DeletePropagationBackground),
		history.Preconditions{UID: "d-uid", ResourceVersion: cur.ResourceVersion})
	for _, r := range recs {
		checkOwners(t, r, wantOwner{"o-uid", "dangling", "get", "not-found", "", false})
	}
}

// Cycle breaking: the unblock patch records which references it clears.
func TestHistoryUnblock(t *testing.T) {
	srv := fakeapi.NewServer()
	s, ring := newHistoryStepper(t, srv)
	// a ⇄ b, both blocking; a is deleted Foreground, b has dependents (a).
	a := srv.Create(t, fakeapi.ConfigMaps, fakeapi.Object("a", "a", "a-uid", fakeapi.ConfigMapRef("b", "b-uid")))
	b := srv.Create(t, fakeapi.ConfigMaps, fakeapi.Object("a", "b", "b-uid", fakeapi.ConfigMapRef("a", "a-uid")))
	s.observe(fakeapi.ConfigMaps, a)
	s.observe(fakeapi.ConfigMaps, b)
	s.deleteWith(fakeapi.ConfigMaps, a, metav1.DeletePropagationForeground)
	a = s.mustGet(fakeapi.ConfigMaps, a)
	s.observe(fakeapi.ConfigMaps, a)
	if err := s.deleteStep("b-uid"); err != nil {
		t.Fatal(err)
	}
	recs := records(t, ring, "b-uid")
	if len(recs) != 2 || recs[0].Operation != history.OpUnblock || recs[1].Operation != history.OpDelete {
		t.Fatalf("records %+v, want an unblock, then a delete", recs)
	}
	checkOwners(t, recs[0], wantOwner{"a-uid", "waiting", "graph", "foreground", a.ResourceVersion, true})
	if recs[1].Policy != string(metav1.DeletePropagationForeground) || recs[1].Preconditions.ResourceVersion == b.ResourceVersion {
		t.Errorf("delete after unblock: %+v (want Foreground at the patched version)", recs[1])
	}
}

// The history's operation and outcome names are kgc_operations_total's
// labels.
func TestHistoryNamesAreMetricLabels(t *testing.T) {
	for _, p := range [][2]string{
		{history.OpDelete, metrics.OpDelete}, {history.OpRemoveReferences, metrics.OpRemoveRefs},
		{history.OpUnblock, metrics.OpUnblockRefs}, {history.OpOrphan, metrics.OpOrphan},
		{history.OpRemoveFinalizer, metrics.OpRemoveFinalizer},
		{history.OutcomeSuccess, metrics.OutcomeSuccess}, {history.OutcomeConflict, metrics.OutcomeConflict},
		{history.OutcomeNotFound, metrics.OutcomeNotFound}, {history.OutcomeError, metrics.OutcomeError},
	} {
		if p[0] != p[1] {
			t.Errorf("history %q != metrics %q", p[0], p[1])
		}
	}
}
