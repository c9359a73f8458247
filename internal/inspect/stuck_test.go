package inspect

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clienttesting "k8s.io/client-go/testing"

	"github.com/kgc-dev/kgc/internal/discovery"
	"github.com/kgc-dev/kgc/internal/rules"
)

const keepFinalizer = "example.com/keep"

// deletedAt marks an object deleting since t.
func deletedAt(t time.Time) objOpt {
	return func(m *metav1.PartialObjectMetadata) {
		ts := metav1.NewTime(t)
		m.DeletionTimestamp = &ts
	}
}

var (
	stuckNow = time.Unix(1700000000, 0).Add(10 * time.Minute)
	longAgo  = stuckNow.Add(-10 * time.Minute)
	recently = stuckNow.Add(-time.Minute)
)

// stuckCluster holds one stuck deletion of each root cause that needs no
// unlisted resource, plus objects that are not stuck.
func stuckCluster(t testing.TB) *cluster {
	c := newCluster(t)
	fg := finalizers(FinalizerForeground)
	// finalizer: a custom finalizer holds it.
	c.add(cmR, "a", "fin", deletedAt(longAgo), finalizers(keepFinalizer))
	// dependent_finalizer: a Foreground owner, its blocking dependent (in
	// Foreground deletion itself), and that one's, held by a finalizer.
	owner := c.add(cmR, "a", "fg-owner", deletedAt(longAgo.Add(time.Second)), fg)
	mid := c.add(rsR, "a", "fg-mid", deletedAt(longAgo.Add(2*time.Second)), fg, owned(owner, true))
	c.add(podR, "a", "fg-held", deletedAt(longAgo.Add(3*time.Second)), finalizers(keepFinalizer), owned(mid, true))
	// unresolvable_owner_kind: the blocking dependent has another owner
	// whose kind nothing serves.
	unk := c.add(cmR, "a", "unk-owner", deletedAt(longAgo), fg)
	c.add(cmR, "a", "unk-dep", owned(unk, true), ref("nothing.example.com/v1", "Nothing", "x", "uid-nothing"))
	// invalid_reference: a cluster-scoped blocking dependent names it.
	inv := c.add(cmR, "a", "inv-owner", deletedAt(longAgo), fg)
	c.add(crR, "", "inv-dep", owned(inv, true))
	// collector_pending: nothing blocks it; kgc removes its finalizer.
	c.add(cmR, "a", "pending", deletedAt(longAgo), fg)
	// graceful_deletion: no finalizer at all.
	c.add(podR, "b", "graceful", deletedAt(longAgo))
	// Not stuck: too recent, not deleting, or with a non-blocking
	// dependent only.
	c.add(cmR, "a", "recent", deletedAt(recently), finalizers(keepFinalizer))
	c.add(cmR, "a", "live", finalizers(keepFinalizer))
	return c
}

func stuckByName(r *StuckReport) map[string]StuckObject {
	out := map[string]StuckObject{}
	for _, g := range r.Groups {
		for _, s := range g.Objects {
			if s.Reason != g.Reason {
				panic("object in the wrong group")
			}
			out[s.Object.Name] = s
		}
	}
	return out
}

func chainNames(s StuckObject) []string {
	var out []string
	for _, o := range s.Chain {
		out = append(out, o.Name)
	}
	return out
}

func TestStuckRootCauses(t *testing.T) {
	c := stuckCluster(t)
	r, err := Stuck(context.Background(), rules.Policy{}, c.view(), StuckOptions{OlderThan: 5 * time.Minute, Now: stuckNow})
	if err != nil {
		t.Fatal(err)
	}
	got := stuckByName(r)
	for _, tc := range []struct {
		name, reason string
		chain        []string
		finalizers   []string
	}{
		{name: "fin", reason: StuckFinalizer, finalizers: []string{keepFinalizer}},
		{name: "fg-held", reason: StuckFinalizer, finalizers: []string{keepFinalizer}},
		{name: "fg-owner", reason: StuckDependentFinalizer, chain: []string{"fg-owner", "fg-mid", "fg-held"}, finalizers: []string{keepFinalizer}},
		{name: "fg-mid", reason: StuckDependentFinalizer, chain: []string{"fg-mid", "fg-held"}, finalizers: []string{keepFinalizer}},
		{name: "unk-owner", reason: StuckUnresolvableOwner, chain: []string{"unk-owner", "unk-dep"}},
		{name: "inv-owner", reason: StuckInvalidReference, chain: []string{"inv-owner", "inv-dep"}},
		{name: "pending", reason: StuckPending},
		{name: "graceful", reason: StuckGraceful},
	} {
		s, ok := got[tc.name]
		if !ok {
			t.Errorf("%s: not reported stuck", tc.name)
			continue
		}
		delete(got, tc.name)
		if s.Reason != tc.reason {
			t.Errorf("%s: reason %s, want %s (%s)", tc.name, s.Reason, tc.reason, s.Detail)
		}
		if !slices.Equal(chainNames(s), tc.chain) {
			t.Errorf("%s: chain %v, want %v", tc.name, chainNames(s), tc.chain)
		}
		if !slices.Equal(s.Finalizers, tc.finalizers) {
			t.Errorf("%s: finalizers %v, want %v", tc.name, s.Finalizers, tc.finalizers)
		}
		if s.AgeSeconds < 590 || s.AgeSeconds > 600 {
			t.Errorf("%s: age %ds, want about 600s", tc.name, s.AgeSeconds)
		}
	}
	for name, s := range got {
		t.Errorf("%s: reported stuck (%s), but it is not", name, s.Reason)
	}
	if r.Total != 8 || r.OldestSeconds != 600 {
		t.Errorf("total %d, oldest %ds; want 8, 600s", r.Total, r.OldestSeconds)
	}
	// Groups come in the order of StuckReasons.
	var order []string
	for _, g := range r.Groups {
		order = append(order, g.Reason)
	}
	if !slices.IsSortedFunc(order, func(a, b string) int { return slices.Index(StuckReasons, a) - slices.Index(StuckReasons, b) }) {
		t.Errorf("groups in order %v", order)
	}
	if len(c.writes()) > 0 {
		t.Errorf("stuck wrote: %v", c.writes())
	}

	var b bytes.Buffer
	if err := WriteStuck(&b, r); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	t.Logf("\n%s", out)
	for _, want := range []string{
		"8 deletion(s) stuck for longer than 5m0s",
		"DEPENDENT_FINALIZER (2)",
		"ConfigMap/fg-owner      9m59s  ConfigMap/fg-owner → ReplicaSet.apps/fg-mid → Pod/fg-held (finalizer example.com/keep)",
		"ConfigMap/unk-owner",
		"ConfigMap/unk-owner → ConfigMap/unk-dep (owner kind not served)",
		"ConfigMap/inv-owner → ClusterRole.rbac.authorization.k8s.io/inv-dep (invalid owner reference)",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q", want)
		}
	}
}

func TestStuckNamespaceAndThreshold(t *testing.T) {
	c := stuckCluster(t)
	r, err := Stuck(context.Background(), rules.Policy{}, c.view(), StuckOptions{OlderThan: 30 * time.Second, Namespace: "a", Now: stuckNow})
	if err != nil {
		t.Fatal(err)
	}
	got := stuckByName(r)
	if _, ok := got["graceful"]; ok {
		t.Errorf("an object of namespace b is reported with -n a")
	}
	if s, ok := got["recent"]; !ok || s.Reason != StuckFinalizer {
		t.Errorf("recent: %+v, want it reported with a 30s threshold", s)
	}
	if _, ok := got["inv-dep"]; ok {
		t.Errorf("a live object is reported")
	}
}

// A keep-rule that keeps the blocking dependent is named as the cause.
func TestStuckKeepRule(t *testing.T) {
	c := newCluster(t)
	owner := c.add(cmR, "a", "owner", deletedAt(longAgo), finalizers(FinalizerForeground))
	c.add(cmR, "a", "precious", owned(owner, true))
	p := rules.Policy{Keep: []rules.KeepRule{{Name: "precious", Keeps: func(o *rules.Object) string {
		if o.Identity.Name == "precious" {
			return "it is precious"
		}
		return ""
	}}}}
	r, err := Stuck(context.Background(), p, c.view(), StuckOptions{OlderThan: time.Minute, Now: stuckNow})
	if err != nil {
		t.Fatal(err)
	}
	if s := stuckByName(r)["owner"]; s.Reason != StuckKeepRule || !slices.Equal(chainNames(s), []string{"owner", "precious"}) {
		t.Errorf("owner: %+v, want keep_rule through precious", s)
	}
	// Without the rule kgc deletes the dependent: pending, not stuck on it.
	r, err = Stuck(context.Background(), rules.Policy{}, c.view(), StuckOptions{OlderThan: time.Minute, Now: stuckNow})
	if err != nil {
		t.Fatal(err)
	}
	if s := stuckByName(r)["owner"]; s.Reason != StuckPending {
		t.Errorf("owner without the keep-rule: %+v, want collector_pending", s)
	}
}

// A resource whose LIST fails holds the orphan and foregroundDeletion
// finalizers of the owners whose dependents it could hold (namespaced
// owners: namespaced resources only), as kgc's workers do.
func TestStuckFailingMonitor(t *testing.T) {
	widgetR := discovery.Resource{GVR: schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "widgets"}, Kind: "Widget", Namespaced: true}
	c := newCluster(t)
	c.client.PrependReactor("list", "widgets", func(clienttesting.Action) (bool, runtime.Object, error) {
		return true, nil, errors.New("conversion webhook for example.com/v1, Kind=Widget failed")
	})
	c.add(cmR, "a", "fg", deletedAt(longAgo), finalizers(FinalizerForeground))
	c.add(cmR, "a", "orphaning", deletedAt(longAgo), finalizers(FinalizerOrphan))
	c.add(cmR, "a", "fin", deletedAt(longAgo), finalizers(keepFinalizer))
	v := NewLiveView(testMapper(), c.client, append(slices.Clone(allResource), widgetR))
	r, err := Stuck(context.Background(), rules.Policy{}, v, StuckOptions{OlderThan: time.Minute, Now: stuckNow})
	if err != nil {
		t.Fatal(err)
	}
	got := stuckByName(r)
	for _, name := range []string{"fg", "orphaning"} {
		if s := got[name]; s.Reason != StuckUnlisted || !slices.Equal(s.Resources, []string{"example.com/v1/widgets"}) {
			t.Errorf("%s: %+v, want failing_monitor naming example.com/v1/widgets", name, s)
		}
	}
	if s := got["fin"]; s.Reason != StuckFinalizer {
		t.Errorf("fin: %+v, want finalizer", s)
	}
	if len(r.Unlisted) != 1 || r.Unlisted[0].Resource != "example.com/v1/widgets" || !strings.Contains(r.Unlisted[0].Error, "conversion webhook") {
		t.Errorf("unlisted: %+v", r.Unlisted)
	}
}
