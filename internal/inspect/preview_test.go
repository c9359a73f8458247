package inspect

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/kgc-dev/kgc/internal/rules"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// stepsString renders steps as "level:op:name" for comparison.
func stepsString(p *Preview) string {
	var s []string
	for _, st := range p.Steps {
		x := fmt.Sprintf("%d:%s:%s", st.Level, st.Op, st.Object.Name)
		if st.Policy != "" {
			x += "(" + st.Policy + ")"
		}
		s = append(s, x)
	}
	return strings.Join(s, " ")
}

func names(os []*Object) string {
	var s []string
	for _, o := range os {
		s = append(s, o.Name)
	}
	return strings.Join(s, ",")
}

func heldNames(hs []Held) string {
	var s []string
	for _, h := range hs {
		s = append(s, h.Object.Name)
	}
	return strings.Join(s, ",")
}

// chain builds deployment d -> replicaset rs -> pods p1, p2 (blocking), a
// pod p3 with a second, live owner cm, and any extra options for p2.
func chain(t *testing.T, p2opts ...objOpt) *cluster {
	c := newCluster(t)
	d := c.add(deployR, "a", "d")
	rs := c.add(rsR, "a", "rs", owned(d, true))
	cm := c.add(cmR, "a", "cm")
	c.add(podR, "a", "p1", owned(rs, true))
	c.add(podR, "a", "p2", append([]objOpt{owned(rs, true)}, p2opts...)...)
	c.add(podR, "a", "p3", owned(rs, true), owned(cm, false))
	return c
}

func TestPreviewOrder(t *testing.T) {
	for _, tc := range []struct {
		name     string
		p2       []objOpt
		policy   metav1.DeletionPropagation
		steps    string
		deleted  string
		orphaned string
		blocked  string
		kept     string
	}{
		{
			name: "background", policy: metav1.DeletePropagationBackground,
			steps:    "0:delete:d(Background) 0:deleted:d 1:delete:rs(Background) 1:deleted:rs 2:delete:p1(Background) 2:deleted:p1 2:delete:p2(Background) 2:deleted:p2 2:remove-reference:p3",
			deleted:  "d,rs,p1,p2",
			orphaned: "p3", kept: "p3",
		},
		{
			name: "foreground", policy: metav1.DeletePropagationForeground,
			steps:    "0:delete:d(Foreground) 1:delete:rs(Foreground) 2:delete:p1(Background) 2:deleted:p1 2:delete:p2(Background) 2:deleted:p2 2:remove-reference:p3 3:remove-finalizer:rs 3:deleted:rs 4:remove-finalizer:d 4:deleted:d",
			deleted:  "p1,p2,rs,d",
			orphaned: "p3", kept: "p3",
		},
		{
			name: "orphan", policy: metav1.DeletePropagationOrphan,
			steps:    "0:delete:d(Orphan) 1:orphan:rs 1:remove-finalizer:d 1:deleted:d",
			deleted:  "d",
			orphaned: "rs", kept: "rs,p1,p2,p3",
		},
		{
			name: "foreground blocked by a custom finalizer", policy: metav1.DeletePropagationForeground,
			p2:       []objOpt{finalizers("example.com/keep")},
			steps:    "0:delete:d(Foreground) 1:delete:rs(Foreground) 2:delete:p1(Background) 2:deleted:p1 2:delete:p2(Background) 2:remove-reference:p3",
			deleted:  "p1",
			orphaned: "p3", blocked: "d,rs,p2", kept: "p3",
		},
		{
			name: "background with a custom finalizer deep down", policy: metav1.DeletePropagationBackground,
			p2:       []objOpt{finalizers("example.com/keep")},
			steps:    "0:delete:d(Background) 0:deleted:d 1:delete:rs(Background) 1:deleted:rs 2:delete:p1(Background) 2:deleted:p1 2:delete:p2(Background) 2:remove-reference:p3",
			deleted:  "d,rs,p1",
			orphaned: "p3", blocked: "p2", kept: "p3",
		},
		{
			name: "a dependent asking for orphan", policy: metav1.DeletePropagationBackground,
			p2:       []objOpt{finalizers(metav1.FinalizerOrphanDependents)},
			steps:    "0:delete:d(Background) 0:deleted:d 1:delete:rs(Background) 1:deleted:rs 2:delete:p1(Background) 2:deleted:p1 2:delete:p2(Orphan) 2:remove-reference:p3 3:remove-finalizer:p2 3:deleted:p2",
			deleted:  "d,rs,p1,p2",
			orphaned: "p3", kept: "p3",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := chain(t, tc.p2...)
			v := c.view()
			d, err := v.Lookup(context.Background(), "deployment", "a", "d")
			if err != nil {
				t.Fatal(err)
			}
			p, err := PreviewDelete(context.Background(), rules.Policy{}, v, d, tc.policy)
			if err != nil {
				t.Fatal(err)
			}
			if got := stepsString(p); got != tc.steps {
				t.Errorf("steps:\n got %s\nwant %s", got, tc.steps)
			}
			if got := names(p.Deleted); got != tc.deleted {
				t.Errorf("deleted %s, want %s", got, tc.deleted)
			}
			if got := names(p.Orphaned); got != tc.orphaned {
				t.Errorf("orphaned %s, want %s", got, tc.orphaned)
			}
			if got := heldNames(p.Blocked); got != tc.blocked {
				t.Errorf("blocked %s, want %s", got, tc.blocked)
			}
			if got := heldNames(p.Kept); got != tc.kept {
				t.Errorf("kept %s, want %s", got, tc.kept)
			}
			var b bytes.Buffer
			if err := WritePreview(&b, p); err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(b.String(), "nothing was changed") {
				t.Errorf("output:\n%s", b.String())
			}
			if tc.blocked != "" && !strings.Contains(b.String(), "Blocked") {
				t.Errorf("output lacks the blocked objects:\n%s", b.String())
			}
			if w := c.writes(); len(w) > 0 {
				t.Errorf("preview wrote: %v", w)
			}
		})
	}
}

// TestPreviewCycle: a foreground deletion into an ownership cycle of
// blocking references terminates and unblocks like kgc.
func TestPreviewCycle(t *testing.T) {
	c := newCluster(t)
	x := &Object{APIVersion: "v1", Kind: "ConfigMap", Namespace: "a", Name: "x", UID: "uid-x"}
	y := &Object{APIVersion: "v1", Kind: "ConfigMap", Namespace: "a", Name: "y", UID: "uid-y"}
	c.add(cmR, "a", "x", owned(y, true))
	c.add(cmR, "a", "y", owned(x, true))
	v := c.view()
	xo, err := v.Lookup(context.Background(), "configmap", "a", "x")
	if err != nil {
		t.Fatal(err)
	}
	p, err := PreviewDelete(context.Background(), rules.Policy{}, v, xo, metav1.DeletePropagationForeground)
	if err != nil {
		t.Fatal(err)
	}
	want := "0:delete:x(Foreground) 1:unblock:y 1:delete:y(Foreground) 2:remove-finalizer:x 2:deleted:x 3:remove-finalizer:y 3:deleted:y"
	if got := stepsString(p); got != want {
		t.Errorf("steps:\n got %s\nwant %s", got, want)
	}
	if names(p.Deleted) != "x,y" {
		t.Errorf("deleted %s", names(p.Deleted))
	}
}

func TestPreviewRejectsUnknownPolicy(t *testing.T) {
	c := newCluster(t)
	o := c.add(cmR, "a", "x")
	if _, err := PreviewDelete(context.Background(), rules.Policy{}, c.view(), o, "Sideways"); err == nil {
		t.Error("want an error")
	}
}

// TestPreviewRedeleteChangesPolicy: deleting an object already in
// Foreground deletion with an explicit background policy makes the
// apiserver drop the foregroundDeletion finalizer: it goes at once.
func TestPreviewRedeleteChangesPolicy(t *testing.T) {
	c := newCluster(t)
	d := c.add(deployR, "a", "d", deleting(), finalizers(metav1.FinalizerDeleteDependents, "example.com/other"))
	c.add(rsR, "a", "rs", owned(d, true))
	v := c.view()
	p, err := PreviewDelete(context.Background(), rules.Policy{}, v, d, metav1.DeletePropagationBackground)
	if err != nil {
		t.Fatal(err)
	}
	// d keeps its custom finalizer, so it stays, but it no longer waits:
	// rs is solidly owned by an object that is merely being deleted.
	if got := stepsString(p); got != "0:delete:d(Background)" || heldNames(p.Blocked) != "d" || heldNames(p.Kept) != "rs" {
		t.Errorf("steps %s, blocked %s, kept %s", got, heldNames(p.Blocked), heldNames(p.Kept))
	}
	c2 := newCluster(t)
	d2 := c2.add(deployR, "a", "d", deleting(), finalizers(metav1.FinalizerDeleteDependents))
	c2.add(rsR, "a", "rs", owned(d2, true))
	p, err = PreviewDelete(context.Background(), rules.Policy{}, c2.view(), d2, metav1.DeletePropagationBackground)
	if err != nil {
		t.Fatal(err)
	}
	if got := stepsString(p); got != "0:delete:d(Background) 0:deleted:d 1:delete:rs(Background) 1:deleted:rs" {
		t.Errorf("steps %s", got)
	}
}
