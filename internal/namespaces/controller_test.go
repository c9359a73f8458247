package namespaces

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/kgc-dev/kgc/internal/graph"
	"github.com/kgc-dev/kgc/internal/metrics"
	"github.com/kgc-dev/kgc/internal/rules"
)

func newController(t *testing.T, api API, grace time.Duration, clk *clocktesting.FakeClock) *Controller {
	t.Helper()
	cfg := Config{API: api, AdmissionGrace: grace}
	if clk != nil {
		cfg.Clock = clk
	}
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.queue.ShutDown)
	return c
}

func condition(t *testing.T, f *fakeAPI, typ corev1.NamespaceConditionType) corev1.NamespaceCondition {
	t.Helper()
	ns, err := f.GetNamespace(context.Background(), "ns")
	if err != nil {
		t.Fatalf("namespace: %v", err)
	}
	for _, c := range ns.Status.Conditions {
		if c.Type == typ {
			return c
		}
	}
	t.Fatalf("no %s condition in %+v", typ, ns.Status.Conditions)
	return corev1.NamespaceCondition{}
}

// checkInside fails if any content call addressed another namespace.
func checkInside(t *testing.T, f *fakeAPI, ns string) {
	t.Helper()
	for _, call := range strings.Split(f.callLog(), "\n") {
		if strings.Contains(call, " -n ") && !strings.Contains(call, " -n "+ns) {
			t.Errorf("call outside namespace %s: %s", ns, call)
		}
	}
}

func TestSyncLeavesAloneWhatIsNotItsWork(t *testing.T) {
	for _, tc := range []struct {
		name  string
		setup func(f *fakeAPI)
	}{
		{"not deleting", func(f *fakeAPI) { f.ns.DeletionTimestamp = nil }},
		{"spec.finalizers empty", func(f *fakeAPI) { f.ns.Spec.Finalizers = nil }},
		{"only another finalizer", func(f *fakeAPI) { f.ns.Spec.Finalizers = []corev1.FinalizerName{"example.com/other"} }},
		{"gone", func(f *fakeAPI) { f.ns = nil }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFake("ns", FinalizerKubernetes)
			f.add(cmGVR, "ns", "a")
			tc.setup(f)
			c := newController(t, f, -1, nil)
			out := c.sync(context.Background(), "ns")
			if out.outcome != metrics.NamespaceSkipped || out.err != nil {
				t.Fatalf("outcome %+v, want skipped", out)
			}
			if f.count(cmGVR, "ns") != 1 {
				t.Error("content was deleted")
			}
			if log := f.callLog(); strings.Contains(log, "delete") || strings.Contains(log, "finalize") || strings.Contains(log, "update") {
				t.Errorf("wrote: %s", log)
			}
		})
	}
}

func TestSyncDeletesEverythingThenFinalizes(t *testing.T) {
	f := newFake("ns", FinalizerKubernetes, "example.com/other")
	f.add(podsGVR, "ns", "p")
	f.add(cmGVR, "ns", "a")
	f.add(cmGVR, "other", "keep-me")
	f.add(widgetGVR, "ns", "w1")
	f.add(widgetGVR, "ns", "w2")
	f.add(eventsGVR, "ns", "e") // ignored by the collector, deleted with the namespace
	c := newController(t, f, -1, nil)
	out := c.sync(context.Background(), "ns")
	if out.err != nil || out.outcome != metrics.NamespaceFinalized {
		t.Fatalf("outcome %+v, want finalized\n%s", out, f.callLog())
	}
	for _, gvr := range []schema.GroupVersionResource{podsGVR, cmGVR, widgetGVR, eventsGVR} {
		if n := f.count(gvr, "ns"); n != 0 {
			t.Errorf("%s: %d left", gvr.Resource, n)
		}
	}
	if f.count(cmGVR, "other") != 1 {
		t.Error("an object of another namespace was deleted")
	}
	checkInside(t, f, "ns")
	log := f.callLog()
	if !strings.Contains(log, "delete widgets -n ns w1") || !strings.Contains(log, "delete widgets -n ns w2") {
		t.Errorf("widgets (no deletecollection) not deleted one by one:\n%s", log)
	}
	// The finalize call keeps the other finalizer and carries the
	// resourceVersion of the status write just before it.
	if !strings.Contains(log, "finalize ns rv 2 finalizers [example.com/other]") {
		t.Errorf("finalize call not as expected:\n%s", log)
	}
	if strings.Index(log, "list pods") > strings.Index(log, "deletecollection configmaps") {
		t.Errorf("pods not emptied first:\n%s", log)
	}
	for _, typ := range conditionTypes {
		if c := condition(t, f, typ); c.Status != corev1.ConditionFalse || c.Reason != okConditions[typ][0] {
			t.Errorf("%s = %+v, want False %s", typ, c, okConditions[typ][0])
		}
	}
}

// DELETECOLLECTION answered 403 (RBAC grants delete but not
// deletecollection): the objects are deleted one by one instead, and the
// namespace goes; a 403 on the per-object DELETE is a content failure.
func TestDeleteCollectionForbiddenFallsBackToDeletes(t *testing.T) {
	f := newFake("ns", FinalizerKubernetes)
	f.dcForbidden = map[schema.GroupVersionResource]bool{podsGVR: true, cmGVR: true}
	f.add(podsGVR, "ns", "p")
	f.add(cmGVR, "ns", "a")
	f.add(cmGVR, "ns", "b")
	f.add(cmGVR, "other", "keep-me")
	c := newController(t, f, -1, nil)
	out := c.sync(context.Background(), "ns")
	if out.err != nil || out.outcome != metrics.NamespaceFinalized {
		t.Fatalf("outcome %+v, want finalized\n%s", out, f.callLog())
	}
	log := f.callLog()
	for _, want := range []string{"deletecollection pods -n ns", "delete pods -n ns p", "deletecollection configmaps -n ns", "delete configmaps -n ns a", "delete configmaps -n ns b"} {
		if !strings.Contains(log, want+"\n") {
			t.Errorf("no %q in:\n%s", want, log)
		}
	}
	if f.count(cmGVR, "other") != 1 {
		t.Error("an object of another namespace was deleted")
	}
	checkInside(t, f, "ns")
}

// A resource the graph shows empty (complete count) gets only its
// confirming LIST; one the graph wrongly shows empty (the watch lags) is
// deleted after all once the LIST finds objects; incomplete counts are
// not trusted.
func TestGraphSkipsEmptyResources(t *testing.T) {
	f := newFake("ns", FinalizerKubernetes)
	f.add(cmGVR, "ns", "unseen") // not in the graph yet
	f.add(eventsGVR, "ns", "e")
	c := newController(t, f, -1, nil)
	c.cfg.Observed = func(ns string, gvr schema.GroupVersionResource, kind string) (int, bool) {
		if ns != "ns" {
			t.Errorf("Observed asked about namespace %q", ns)
		}
		switch gvr {
		case podsGVR, cmGVR, widgetGVR:
			return 0, true
		}
		return 0, false // events: not monitored
	}
	out := c.sync(context.Background(), "ns")
	if out.err != nil || out.outcome != metrics.NamespaceFinalized {
		t.Fatalf("outcome %+v, want finalized\n%s", out, f.callLog())
	}
	log := f.callLog() + "\n"
	for _, want := range []string{"list pods -n ns", "list widgets -n ns", "list configmaps -n ns", "deletecollection configmaps -n ns", "deletecollection events -n ns"} {
		if !strings.Contains(log, want+"\n") {
			t.Errorf("no %q in:\n%s", want, log)
		}
	}
	for _, never := range []string{"deletecollection pods", "delete widgets"} {
		if strings.Contains(log, never) {
			t.Errorf("%q although the graph showed the resource empty:\n%s", never, log)
		}
	}
	if n := strings.Count(log, "list widgets -n ns"); n != 1 {
		t.Errorf("widgets listed %d times, want once (the confirming LIST only):\n%s", n, log)
	}
	for _, gvr := range []schema.GroupVersionResource{cmGVR, eventsGVR} {
		if n := f.count(gvr, "ns"); n != 0 {
			t.Errorf("%s: %d left", gvr.Resource, n)
		}
	}
}

func TestPodsFirst(t *testing.T) {
	f := newFake("ns", FinalizerKubernetes)
	f.add(podsGVR, "ns", "p", "example.com/hold")
	f.add(cmGVR, "ns", "a")
	c := newController(t, f, -1, nil)
	out := c.sync(context.Background(), "ns")
	if out.outcome != metrics.NamespaceWaiting || out.err != nil || out.after != c.cfg.Recheck {
		t.Fatalf("outcome %+v, want waiting", out)
	}
	if f.count(cmGVR, "ns") != 1 {
		t.Error("configmaps deleted while a pod remains")
	}
	if c := condition(t, f, corev1.NamespaceContentRemaining); c.Status != corev1.ConditionTrue || c.Message != "Some resources are remaining: pods. has 1 resource instances" {
		t.Errorf("ContentRemaining = %+v", c)
	}
	if c := condition(t, f, corev1.NamespaceFinalizersRemaining); c.Status != corev1.ConditionTrue || c.Reason != "SomeFinalizersRemain" ||
		c.Message != "Some content in the namespace has finalizers remaining: example.com/hold in 1 resource instances" {
		t.Errorf("FinalizersRemaining = %+v", c)
	}
	f.release(podsGVR, "ns")
	if out := c.sync(context.Background(), "ns"); out.outcome != metrics.NamespaceFinalized {
		t.Fatalf("after release: %+v\n%s", out, f.callLog())
	}
	if f.count(cmGVR, "ns") != 0 {
		t.Error("configmaps left")
	}
}

func TestHeldFinalizersThenReleased(t *testing.T) {
	f := newFake("ns", FinalizerKubernetes)
	f.add(cmGVR, "ns", "held", "example.com/hold")
	f.add(widgetGVR, "ns", "w", "example.com/hold", "example.com/two")
	f.add(cmGVR, "ns", "free")
	c := newController(t, f, -1, nil)
	out := c.sync(context.Background(), "ns")
	if out.outcome != metrics.NamespaceWaiting || out.remaining != 2 {
		t.Fatalf("outcome %+v, want waiting on 2", out)
	}
	if got := condition(t, f, corev1.NamespaceContentRemaining).Message; got != "Some resources are remaining: configmaps. has 1 resource instances, widgets.example.com has 1 resource instances" {
		t.Errorf("ContentRemaining message %q", got)
	}
	if got := condition(t, f, corev1.NamespaceFinalizersRemaining).Message; got != "Some content in the namespace has finalizers remaining: example.com/hold in 2 resource instances, example.com/two in 1 resource instances" {
		t.Errorf("FinalizersRemaining message %q", got)
	}
	if c := condition(t, f, corev1.NamespaceDeletionContentFailure); c.Status != corev1.ConditionFalse {
		t.Errorf("held finalizers are not a failure: %+v", c)
	}
	if strings.Contains(f.callLog(), "finalize") {
		t.Fatal("finalized with content left")
	}
	// kgc never strips the objects' finalizers: they are still there.
	objs, _ := f.ListInNamespace(context.Background(), cmGVR, "ns")
	if len(objs) != 1 || len(objs[0].Finalizers) != 1 || objs[0].DeletionTimestamp == nil {
		t.Fatalf("held object = %+v", objs)
	}
	f.release(cmGVR, "ns")
	f.release(widgetGVR, "ns")
	if out := c.sync(context.Background(), "ns"); out.outcome != metrics.NamespaceFinalized {
		t.Fatalf("after release: %+v", out)
	}
}

func TestFailuresKeepTheFinalizerAndDeleteTheRest(t *testing.T) {
	t.Run("list fails", func(t *testing.T) {
		f := newFake("ns", FinalizerKubernetes)
		f.add(cmGVR, "ns", "a")
		f.add(widgetGVR, "ns", "w")
		f.listErr[widgetGVR] = apierrors.NewInternalError(errors.New("conversion webhook for example.com/v1, Kind=Widget failed"))
		c := newController(t, f, -1, nil)
		out := c.sync(context.Background(), "ns")
		if out.outcome != metrics.NamespaceFailed || out.err == nil {
			t.Fatalf("outcome %+v, want failed", out)
		}
		if f.count(cmGVR, "ns") != 0 {
			t.Error("the rest was not deleted")
		}
		cond := condition(t, f, corev1.NamespaceDeletionContentFailure)
		if cond.Status != corev1.ConditionTrue || cond.Reason != "ContentDeletionFailed" ||
			!strings.HasPrefix(cond.Message, "Failed to delete all resource types, 1 remaining: ") || !strings.Contains(cond.Message, "conversion webhook") {
			t.Errorf("ContentFailure = %+v", cond)
		}
		if strings.Contains(f.callLog(), "finalize") {
			t.Error("finalized although a resource could not be listed")
		}
	})
	t.Run("discovery fails for a group", func(t *testing.T) {
		f := newFake("ns", FinalizerKubernetes)
		f.add(cmGVR, "ns", "a")
		f.discErr = &discovery.ErrGroupDiscoveryFailed{Groups: map[schema.GroupVersion]error{{Group: "broken.example.com", Version: "v1"}: errors.New("the server is currently unable to handle the request")}}
		c := newController(t, f, -1, nil)
		out := c.sync(context.Background(), "ns")
		if out.outcome != metrics.NamespaceFailed {
			t.Fatalf("outcome %+v, want failed", out)
		}
		if f.count(cmGVR, "ns") != 0 {
			t.Error("the rest was not deleted")
		}
		cond := condition(t, f, corev1.NamespaceDeletionDiscoveryFailure)
		if cond.Status != corev1.ConditionTrue || cond.Reason != "DiscoveryFailed" || !strings.HasPrefix(cond.Message, "Discovery failed for some groups, 1 failing: ") {
			t.Errorf("DiscoveryFailure = %+v", cond)
		}
		if strings.Contains(f.callLog(), "finalize") {
			t.Error("finalized with discovery incomplete")
		}
		// The group heals: the next pass finalizes and clears the condition.
		f.discErr = nil
		if out := c.sync(context.Background(), "ns"); out.outcome != metrics.NamespaceFinalized {
			t.Fatalf("after healing: %+v", out)
		}
	})
	t.Run("group version does not parse", func(t *testing.T) {
		f := newFake("ns", FinalizerKubernetes)
		f.resources = append(f.resources, &metav1.APIResourceList{GroupVersion: "a/b/c", APIResources: []metav1.APIResource{{Name: "x", Namespaced: true, Verbs: metav1.Verbs{"delete"}}}})
		c := newController(t, f, -1, nil)
		if out := c.sync(context.Background(), "ns"); out.outcome != metrics.NamespaceFailed {
			t.Fatalf("outcome %+v, want failed", out)
		}
		if cond := condition(t, f, corev1.NamespaceDeletionGVParsingFailure); cond.Status != corev1.ConditionTrue || cond.Reason != "GroupVersionParsingFailed" {
			t.Errorf("GVParsingFailure = %+v", cond)
		}
	})
	t.Run("finalize conflict", func(t *testing.T) {
		f := newFake("ns", FinalizerKubernetes)
		f.finalizeConflict = true
		c := newController(t, f, -1, nil)
		if out := c.sync(context.Background(), "ns"); out.outcome != metrics.NamespaceFailed || !apierrors.IsConflict(errors.Unwrap(out.err)) {
			t.Fatalf("outcome %+v, want a failed conflict", out)
		}
		if out := c.sync(context.Background(), "ns"); out.outcome != metrics.NamespaceFinalized {
			t.Fatalf("retry: %+v", out)
		}
	})
}

// An object without finalizers that survives its deletion is an error, as
// upstream reports it; a Pod terminating gracefully is waited for.
func TestUnexplainedRemains(t *testing.T) {
	f := newFake("ns", FinalizerKubernetes)
	c := newController(t, f, -1, nil)
	now := metav1.Now()
	f.objects[podsGVR] = []metav1.PartialObjectMetadata{{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p", UID: "p", DeletionTimestamp: &now}}}
	res := c.emptyResource(context.Background(), resource{gvr: podsGVR, list: true}, "ns")
	if res.err != nil || res.remaining != 1 {
		t.Errorf("terminating pod: %+v, want 1 remaining and no error", res)
	}
	f.objects[cmGVR] = []metav1.PartialObjectMetadata{{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "c", UID: "c", DeletionTimestamp: &now}}}
	res = c.emptyResource(context.Background(), resource{gvr: cmGVR, list: true}, "ns")
	if res.err == nil || !strings.Contains(res.err.Error(), "unexpected items still remain in namespace: ns for gvr: /v1, Resource=configmaps") {
		t.Errorf("configmap: %+v, want the unexpected-items error", res)
	}
}

func TestAdmissionGrace(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Now())
	f := newFake("ns", FinalizerKubernetes)
	f.add(cmGVR, "ns", "a")
	c := newController(t, f, 5*time.Second, clk)
	out := c.sync(context.Background(), "ns")
	if out.outcome != metrics.NamespaceWaiting || out.after != 5*time.Second {
		t.Fatalf("outcome %+v, want waiting 5s", out)
	}
	if f.count(cmGVR, "ns") != 0 {
		t.Error("content deletion waited for the grace period; it need not")
	}
	clk.Step(4 * time.Second)
	if out := c.sync(context.Background(), "ns"); out.outcome != metrics.NamespaceWaiting || out.after != time.Second {
		t.Fatalf("outcome %+v, want waiting 1s", out)
	}
	clk.Step(time.Second)
	if out := c.sync(context.Background(), "ns"); out.outcome != metrics.NamespaceFinalized {
		t.Fatalf("outcome %+v, want finalized", out)
	}
}

func TestNamespacedResources(t *testing.T) {
	lists := []*metav1.APIResourceList{
		{GroupVersion: "v1", APIResources: []metav1.APIResource{
			{Name: "nodes", Namespaced: false, Verbs: metav1.Verbs{"list", "delete", "deletecollection"}},
			{Name: "pods", Namespaced: true, Verbs: metav1.Verbs{"list", "delete", "deletecollection"}},
			{Name: "pods/eviction", Namespaced: true, Verbs: metav1.Verbs{"create", "delete"}},
			{Name: "bindings", Namespaced: true, Verbs: metav1.Verbs{"create"}},
		}},
		{GroupVersion: "x.io/v1", APIResources: []metav1.APIResource{{Name: "onlydelete", Namespaced: true, Verbs: metav1.Verbs{"delete"}}}},
	}
	got, err := namespacedResources(lists)
	if err != nil {
		t.Fatal(err)
	}
	want := []resource{
		{gvr: podsGVR, deleteCollection: true, list: true},
		{gvr: schema.GroupVersionResource{Group: "x.io", Version: "v1", Resource: "onlydelete"}},
	}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		t.Errorf("got %+v, want %+v", got, want)
	}
}

func TestSetConditions(t *testing.T) {
	t0 := metav1.NewTime(time.Unix(1000, 0))
	t1 := metav1.NewTime(time.Unix(2000, 0))
	var st corev1.NamespaceStatus
	rep := newReport()
	if !setConditions(&st, rep.conditions(), t0) || len(st.Conditions) != 5 {
		t.Fatalf("first set: %+v", st.Conditions)
	}
	if setConditions(&st, rep.conditions(), t1) {
		t.Error("same conditions reported a change")
	}
	rep.remaining[cmGVR] = 3
	if !setConditions(&st, rep.conditions(), t1) {
		t.Fatal("no change")
	}
	for _, c := range st.Conditions {
		wantT := t0
		if c.Type == corev1.NamespaceContentRemaining {
			wantT = t1
		}
		if !c.LastTransitionTime.Equal(&wantT) {
			t.Errorf("%s transition time %v, want %v", c.Type, c.LastTransitionTime, wantT)
		}
	}
	// A message change without a status flip keeps the transition time.
	rep.remaining[cmGVR] = 2
	t2 := metav1.NewTime(time.Unix(3000, 0))
	setConditions(&st, rep.conditions(), t2)
	for _, c := range st.Conditions {
		if c.Type == corev1.NamespaceContentRemaining && (!c.LastTransitionTime.Equal(&t1) || !strings.Contains(c.Message, "has 2 resource")) {
			t.Errorf("ContentRemaining = %+v", c)
		}
	}
}

func TestObserved(t *testing.T) {
	c := newController(t, newFake("ns"), -1, nil)
	nsObj := rules.Object{Identity: rules.Identity{APIVersion: "v1", Kind: "Namespace", Name: "ns", UID: "u1"}, Deleting: true}
	c.Observed(graph.Event{Type: graph.Upsert, Object: rules.Object{Identity: rules.Identity{APIVersion: "v1", Kind: "Namespace", Name: "live", UID: "u0"}}}, graph.Effects{})
	if c.queue.Len() != 0 {
		t.Fatal("a live namespace was queued")
	}
	c.Observed(graph.Event{Type: graph.Upsert, Object: nsObj}, graph.Effects{})
	if c.queue.Len() != 1 {
		t.Fatal("a deleting namespace was not queued")
	}
	name, _ := c.queue.Get()
	c.queue.Done(name)
	// Observed again (its own status write): not queued again.
	c.Observed(graph.Event{Type: graph.Upsert, Object: nsObj}, graph.Effects{})
	if c.queue.Len() != 0 {
		t.Fatal("queued again on an update")
	}
	// A deletion inside it queues it (after a short batch delay); one
	// elsewhere does not.
	cm := rules.Identity{APIVersion: "v1", Kind: "ConfigMap", Namespace: "elsewhere", Name: "x", UID: "x"}
	c.Observed(graph.Event{Type: graph.Delete, Object: rules.Object{Identity: cm}}, graph.Effects{Absent: []graph.Absence{{Identity: cm}}})
	cm.Namespace = "ns"
	c.Observed(graph.Event{Type: graph.Delete, Object: rules.Object{Identity: cm}}, graph.Effects{Absent: []graph.Absence{{Identity: cm}}})
	deadline := time.Now().Add(5 * time.Second)
	for c.queue.Len() == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if c.queue.Len() != 1 {
		t.Fatalf("queue length %d, want 1", c.queue.Len())
	}
	// The namespace gone: no longer tracked.
	c.Observed(graph.Event{Type: graph.Delete, Object: nsObj}, graph.Effects{Absent: []graph.Absence{{Identity: nsObj.Identity}}})
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.deleting) != 0 {
		t.Errorf("still tracked: %v", c.deleting)
	}
}
