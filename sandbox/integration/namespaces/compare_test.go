package namespaces

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
)

// This file is the comparison harness: a scenario runs on both sides at
// once (same namespace, object and group names), stops at checkpoints
// where it waits for the namespace's conditions to be what the scenario
// expects — one expectation for both sides, unless a known difference
// says otherwise for kube-controller-manager — and records the conditions
// (type, status, reason, message) and the states of the objects it names.
// Once both sides are done, the two records are compared checkpoint by
// checkpoint: any difference fails, except a known difference, which must
// still be there (a known difference that vanished fails too, so that its
// entry in docs/semantics.md is removed with it).

// cond is a condition as recorded: LastTransitionTime is left out.
type cond struct {
	Status  corev1.ConditionStatus
	Reason  string
	Message string
}

func (c cond) String() string { return fmt.Sprintf("%s/%s %q", c.Status, c.Reason, c.Message) }

// conds are a namespace's conditions by type; nil when the namespace is
// gone.
type conds map[corev1.NamespaceConditionType]cond

func (c conds) String() string {
	if c == nil {
		return "(namespace gone)"
	}
	var b strings.Builder
	for _, t := range slices.Sorted(maps.Keys(c)) {
		fmt.Fprintf(&b, "\n\t\t%s: %s", t, c[t])
	}
	return b.String()
}

// want is what one condition must be. Message is matched exactly unless
// Contains is set: then it must start with Prefix and contain each of
// Contains (for messages that quote the apiserver's errors; the two sides'
// messages are still compared exactly).
type want struct {
	Status   corev1.ConditionStatus
	Reason   string
	Message  string
	Prefix   string
	Contains []string
}

func (w want) match(c cond) bool {
	if c.Status != w.Status || c.Reason != w.Reason {
		return false
	}
	if w.Contains == nil {
		return c.Message == w.Message
	}
	if !strings.HasPrefix(c.Message, w.Prefix) {
		return false
	}
	for _, s := range w.Contains {
		if !strings.Contains(c.Message, s) {
			return false
		}
	}
	return true
}

type wants map[corev1.NamespaceConditionType]want

// allOK is the five conditions with nothing wrong: the False "all good"
// reasons and messages both implementations write.
func allOK() wants {
	return wants{
		corev1.NamespaceDeletionDiscoveryFailure: {Status: corev1.ConditionFalse, Reason: "ResourcesDiscovered", Message: "All resources successfully discovered"},
		corev1.NamespaceDeletionGVParsingFailure: {Status: corev1.ConditionFalse, Reason: "ParsedGroupVersions", Message: "All legacy kube types successfully parsed"},
		corev1.NamespaceDeletionContentFailure:   {Status: corev1.ConditionFalse, Reason: "ContentDeleted", Message: "All content successfully deleted, may be waiting on finalization"},
		corev1.NamespaceContentRemaining:         {Status: corev1.ConditionFalse, Reason: "ContentRemoved", Message: "All content successfully removed"},
		corev1.NamespaceFinalizersRemaining:      {Status: corev1.ConditionFalse, Reason: "ContentHasNoFinalizers", Message: "All content-preserving finalizers finished"},
	}
}

// with returns a copy of w with the given conditions replaced.
func (w wants) with(more wants) wants {
	out := maps.Clone(w)
	maps.Copy(out, more)
	return out
}

func (w wants) match(c conds) bool {
	if c == nil || len(c) != len(w) {
		return false
	}
	for t, x := range w {
		got, ok := c[t]
		if !ok || !x.match(got) {
			return false
		}
	}
	return true
}

// obj names an object whose state a checkpoint records.
type obj struct {
	gvr       schema.GroupVersionResource
	namespace string
	name      string
}

func (o obj) String() string { return o.gvr.Resource + " " + o.namespace + "/" + o.name }

// expect is one checkpoint of a scenario.
type expect struct {
	label string
	// namespace is the namespace whose conditions are awaited; gone means
	// waiting for it to be gone instead.
	namespace string
	gone      bool
	// timeout replaces waitTimeout for this checkpoint.
	timeout time.Duration
	conds   wants
	// upstream replaces conditions of conds for the kcm side: known,
	// deliberate differences, each documented in docs/semantics.md
	// ("Namespace lifecycle"). why says which.
	upstream wants
	why      string
	// objects are the states both sides must show at the checkpoint
	// ("present", "deleting [finalizers]", "gone").
	objects map[obj]string
}

// point is a checkpoint as one side reached it.
type point struct {
	expect
	conds  conds
	states map[obj]string
}

// record is what one side went through.
type record struct {
	side   *side
	points []point
	notes  []string
}

func (r *record) logf(t *testing.T, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	r.notes = append(r.notes, msg)
	t.Log(msg)
}

// checkpoint waits until e is reached on r's side, checks the objects'
// states and records what it saw.
func (r *record) checkpoint(t *testing.T, e expect) {
	t.Helper()
	s := r.side
	w := e.conds
	if s == kcmSide && e.upstream != nil {
		w = w.with(e.upstream)
	}
	var last conds
	timeout := waitTimeout
	if e.timeout > 0 {
		timeout = e.timeout
	}
	err := wait.PollUntilContextTimeout(context.Background(), pollInterval, timeout, true, func(context.Context) (bool, error) {
		last = s.conditions(t, e.namespace)
		if e.gone {
			return last == nil, nil
		}
		return w.match(last), nil
	})
	if err != nil {
		if e.gone {
			t.Fatalf("%s: %s: namespace %s still there after %s; conditions:%s", s.name, e.label, e.namespace, timeout, last)
		}
		t.Fatalf("%s: %s: namespace %s's conditions are, after %s:%s", s.name, e.label, e.namespace, timeout, last)
	}
	p := point{expect: e, conds: last, states: map[obj]string{}}
	for o, want := range e.objects {
		got := s.state(t, o.gvr, o.namespace, o.name)
		p.states[o] = got
		if got != want {
			t.Errorf("%s: %s: %s is %s, want %s", s.name, e.label, o, got, want)
		}
	}
	r.points = append(r.points, p)
}

// compareSides runs scenario on both sides in parallel, then compares
// their records.
func compareSides(t *testing.T, scenario func(t *testing.T, r *record)) {
	recs := make([]*record, len(sides))
	t.Run("sides", func(t *testing.T) {
		for i, s := range sides {
			recs[i] = &record{side: s}
			t.Run(s.name, func(t *testing.T) {
				t.Parallel()
				scenario(t, recs[i])
			})
		}
	})
	if t.Failed() {
		return
	}
	compareRecords(t, recs[0], recs[1])
}

// compareRecords compares kgc's record with kube-controller-manager's.
func compareRecords(t *testing.T, a, b *record) {
	t.Helper()
	if len(a.points) != len(b.points) {
		t.Fatalf("%s reached %d checkpoints, %s %d", a.side.name, len(a.points), b.side.name, len(b.points))
	}
	for i := range a.points {
		pa, pb := a.points[i], b.points[i]
		label := pa.label
		for _, typ := range slices.Sorted(maps.Keys(unionKeys(pa.conds, pb.conds))) {
			ca, cb := pa.conds[typ], pb.conds[typ]
			_, known := pa.upstream[typ]
			switch {
			case ca != cb && !known:
				t.Errorf("%s: %s differs:\n\t%s: %s\n\t%s: %s", label, typ, a.side.name, ca, b.side.name, cb)
			case ca == cb && known:
				t.Errorf("%s: %s is the same on both sides (%s), but is marked as a known difference (%s): remove the mark and its entry in docs/semantics.md", label, typ, ca, pa.why)
			case known:
				t.Logf("%s: %s: known difference (%s):\n\t%s: %s\n\t%s: %s", label, typ, pa.why, a.side.name, ca, b.side.name, cb)
			}
		}
		for o, sa := range pa.states {
			if sb := pb.states[o]; sa != sb {
				t.Errorf("%s: %s: %s on %s, %s on %s", label, o, sa, a.side.name, sb, b.side.name)
			}
		}
	}
}

func unionKeys(a, b conds) map[corev1.NamespaceConditionType]bool {
	out := map[corev1.NamespaceConditionType]bool{}
	for k := range a {
		out[k] = true
	}
	for k := range b {
		out[k] = true
	}
	return out
}
