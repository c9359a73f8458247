package inspect

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/kgc-dev/kgc/internal/rules"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestDecideVerdicts(t *testing.T) {
	c := newCluster(t)
	live := c.add(deployR, "a", "live")
	fg := c.add(deployR, "a", "fg", deleting(), finalizers(metav1.FinalizerDeleteDependents))
	gone := &Object{APIVersion: "apps/v1", Kind: "Deployment", Name: "gone", UID: "uid-gone"}

	c.add(podR, "a", "no-owners")
	c.add(podR, "a", "solid-only", owned(live, false))
	c.add(podR, "a", "solid-and-dangling", owned(live, false), owned(gone, false))
	c.add(podR, "a", "solid-and-waiting", owned(live, false), owned(fg, true))
	c.add(podR, "a", "dangling", owned(gone, false))
	c.add(podR, "a", "dangling-orphan-finalizer", owned(gone, false), finalizers(metav1.FinalizerOrphanDependents))
	c.add(podR, "a", "dangling-fg-finalizer", owned(gone, false), finalizers(metav1.FinalizerDeleteDependents))
	c.add(podR, "a", "waiting-no-deps", owned(fg, true))
	wd := c.add(rsR, "a", "waiting-with-deps", owned(fg, true))
	c.add(podR, "a", "child", owned(wd, true))
	// A dependent deleting its own dependents is no cycle (upstream
	// unblocks here, and releases fg early)...
	nocyc := c.add(rsR, "a", "waiting-no-cycle", owned(fg, true))
	c.add(podR, "a", "fg-child", owned(nocyc, true), deleting(), finalizers(metav1.FinalizerDeleteDependents))
	// ...an owner that waits for the object through blocking references
	// is: fg2 waits for waiting-cycle, which would wait for fg2.
	fg2 := &Object{APIVersion: "apps/v1", Kind: "Deployment", Name: "fg2", UID: "uid-fg2"}
	cyc := c.add(rsR, "a", "waiting-cycle", owned(fg2, true))
	c.add(deployR, "a", "fg2", deleting(), finalizers(metav1.FinalizerDeleteDependents), owned(cyc, true))
	c.add(podR, "a", "unresolvable", ref("example.com/v1", "Widget", "w", "uid-w"), owned(gone, false))
	c.add(podR, "a", "invalid-only", ref("a/b/c", "X", "x", "uid-x"))
	c.add(podR, "a", "invalid-and-dangling", ref("a/b/c", "X", "x", "uid-x"), owned(gone, false))
	c.add(podR, "a", "custom-finalizer", owned(gone, false), finalizers("example.com/keep"))
	c.add(podR, "a", "being-deleted", deleting())
	c.add(podR, "a", "held", deleting(), finalizers("example.com/keep"))
	c.add(podR, "a", "orphaning", deleting(), finalizers(metav1.FinalizerOrphanDependents))
	c.add(podR, "a", "fg-done", deleting(), finalizers(metav1.FinalizerDeleteDependents))

	v := c.view()
	ctx := context.Background()
	for _, tc := range []struct {
		name    string
		kind    string
		verdict string
		policy  string
		why     string
		unblock bool
	}{
		{"no-owners", "pod", VerdictKeep, "", "no ownerReferences", false},
		{"solid-only", "pod", VerdictKeep, "", "live owner", false},
		{"solid-and-dangling", "pod", VerdictRemoveReferences, "", "Deployment.apps/gone (dangling)", false},
		{"solid-and-waiting", "pod", VerdictRemoveReferences, "", "Deployment.apps/fg (waiting)", false},
		{"dangling", "pod", VerdictDelete, "Background", "background", false},
		{"dangling-orphan-finalizer", "pod", VerdictDelete, "Orphan", "orphan", false},
		{"dangling-fg-finalizer", "pod", VerdictDelete, "Foreground", "foregroundDeletion finalizer asks", false},
		{"waiting-no-deps", "pod", VerdictDelete, "Background", "none of its owners is alive", false},
		{"waiting-with-deps", "replicaset", VerdictDelete, "Foreground", "1 dependent(s) of its own", false},
		{"waiting-cycle", "replicaset", VerdictDelete, "Foreground", "cycle", true},
		{"waiting-no-cycle", "replicaset", VerdictDelete, "Foreground", "1 dependent(s) of its own", false},
		{"unresolvable", "pod", VerdictRetry, "", "Widget.example.com/w (unresolvable)", false},
		{"invalid-only", "pod", VerdictKeep, "", "invalid reference", false},
		{"invalid-and-dangling", "pod", VerdictKeep, "", "invalid reference", false},
		{"custom-finalizer", "pod", VerdictDelete, "Background", "example.com/keep: nothing in kgc will remove this", false},
		{"being-deleted", "pod", VerdictBeingDeleted, "", "grace period", false},
		{"held", "pod", VerdictWaitForFinalizers, "", "example.com/keep: nothing in kgc", false},
		{"orphaning", "pod", VerdictOrphanDependents, "", "orphan policy", false},
		{"fg-done", "pod", VerdictRemoveForegroundFinalizer, "", "no dependent with blockOwnerDeletion=true remains", false},
		{"fg", "deployment", VerdictWaitForDependents, "", "4 blocking dependent(s)", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o, err := v.Lookup(ctx, tc.kind, "a", tc.name)
			if err != nil {
				t.Fatal(err)
			}
			d, _, _, err := Decide(ctx, rules.Policy{}, v, o)
			if err != nil {
				t.Fatal(err)
			}
			why := strings.Join(d.Why, " | ")
			if d.Verdict != tc.verdict || d.Policy != tc.policy || d.Unblock != tc.unblock || !strings.Contains(why, tc.why) {
				t.Errorf("got %s %s unblock=%v (%s); want %s %s unblock=%v mentioning %q", d.Verdict, d.Policy, d.Unblock, why, tc.verdict, tc.policy, tc.unblock, tc.why)
			}
		})
	}
}

// TestExplainStuckForeground: a Foreground deletion stuck on a blocking
// dependent's custom finalizer, two levels down.
func TestExplainStuckForeground(t *testing.T) {
	c := newCluster(t)
	d := c.add(deployR, "a", "web", deleting(), finalizers(metav1.FinalizerDeleteDependents))
	rs := c.add(rsR, "a", "web-1", owned(d, true), deleting(), finalizers(metav1.FinalizerDeleteDependents))
	c.add(podR, "a", "web-1-x", owned(rs, true), deleting(), finalizers("example.com/keep"))
	c.add(podR, "a", "web-1-y", owned(rs, false))
	c.add(cmR, "a", "notes", owned(d, false))
	ctx := context.Background()
	v := c.view()
	e, err := Explain(ctx, rules.Policy{}, v, d)
	if err != nil {
		t.Fatal(err)
	}
	if e.Decision.Verdict != VerdictWaitForDependents {
		t.Fatalf("verdict %s", e.Decision.Verdict)
	}
	if len(e.WaitingFor) != 1 || e.WaitingFor[0].Object.Name != "web-1" {
		t.Fatalf("waiting for %+v", e.WaitingFor)
	}
	inner := e.WaitingFor[0].WaitingFor
	if len(inner) != 1 || inner[0].Object.Name != "web-1-x" || strings.Join(inner[0].UnhandledFinalizers, ",") != "example.com/keep" || inner[0].Decision.Verdict != VerdictWaitForFinalizers {
		t.Fatalf("inner wait %+v", inner)
	}
	if len(e.StuckOn) != 1 || e.StuckOn[0].Object.Name != "web-1-x" || !strings.Contains(e.StuckOn[0].Why, "example.com/keep") {
		t.Errorf("stuck on %+v", e.StuckOn)
	}
	if len(e.NonBlocking) != 1 || e.NonBlocking[0].Name != "notes" {
		t.Errorf("non-blocking %+v", e.NonBlocking)
	}
	var b bytes.Buffer
	if err := WriteExplanation(&b, e); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{"Deployment.apps/web -n a", "Verdict: wait-for-dependents", "Stuck on:\n  - Pod/web-1-x -n a: held by finalizer(s) example.com/keep", "ReplicaSet.apps/web-1", "Pod/web-1-x", "example.com/keep", "nothing in kgc will remove this; whoever owns it must", "ConfigMap/notes"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "web-1-y") {
		t.Errorf("a non-blocking dependent of the ReplicaSet is listed as blocking:\n%s", out)
	}
	if w := c.writes(); len(w) > 0 {
		t.Errorf("explain wrote: %v", w)
	}
}

func TestExplainOrphaning(t *testing.T) {
	c := newCluster(t)
	rs := c.add(rsR, "a", "rs", deleting(), finalizers(metav1.FinalizerOrphanDependents))
	c.add(podR, "a", "p1", owned(rs, true))
	c.add(podR, "a", "p2", owned(rs, false))
	e, err := Explain(context.Background(), rules.Policy{}, c.view(), rs)
	if err != nil {
		t.Fatal(err)
	}
	if e.Decision.Verdict != VerdictOrphanDependents || len(e.Orphaning) != 2 {
		t.Fatalf("%s %+v", e.Decision.Verdict, e.Orphaning)
	}
	var b bytes.Buffer
	_ = WriteExplanation(&b, e)
	if !strings.Contains(b.String(), "Pod/p1 -n a") || !strings.Contains(b.String(), "still reference it") {
		t.Errorf("output:\n%s", b.String())
	}
}

// TestExplainCycleTerminates: two objects in Foreground deletion that block
// on each other.
func TestExplainCycleTerminates(t *testing.T) {
	c := newCluster(t)
	b := true
	a := &Object{APIVersion: "v1", Kind: "ConfigMap", Namespace: "a", Name: "x", UID: "uid-x"}
	bo := &Object{APIVersion: "v1", Kind: "ConfigMap", Namespace: "a", Name: "y", UID: "uid-y"}
	_ = b
	c.add(cmR, "a", "x", owned(bo, true), deleting(), finalizers(metav1.FinalizerDeleteDependents))
	c.add(cmR, "a", "y", owned(a, true), deleting(), finalizers(metav1.FinalizerDeleteDependents))
	v := c.view()
	x, err := v.Lookup(context.Background(), "configmap", "a", "x")
	if err != nil {
		t.Fatal(err)
	}
	e, err := Explain(context.Background(), rules.Policy{}, v, x)
	if err != nil {
		t.Fatal(err)
	}
	if len(e.WaitingFor) != 1 || len(e.WaitingFor[0].WaitingFor) != 1 || !e.WaitingFor[0].WaitingFor[0].Cycle {
		js, _ := json.Marshal(e)
		t.Errorf("cycle not marked: %s", js)
	}
	tr, err := BuildTree(context.Background(), v, x)
	if err != nil {
		t.Fatal(err)
	}
	if len(tr.Dependents) != 1 || len(tr.Dependents[0].Dependents) != 1 || !tr.Dependents[0].Dependents[0].Repeated {
		t.Errorf("tree cycle not marked")
	}
	if len(tr.Owners) != 1 || len(tr.Owners[0].Owners) != 1 || !tr.Owners[0].Owners[0].Repeated {
		t.Errorf("tree owner cycle not marked")
	}
}
