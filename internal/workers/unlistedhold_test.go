package workers

import (
	"errors"
	"testing"
	"time"

	"k8s.io/klog/v2/ktesting"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/kgc-dev/kgc/internal/discovery"
	"github.com/kgc-dev/kgc/internal/fakeapi"
	"github.com/kgc-dev/kgc/internal/graph"
	"github.com/kgc-dev/kgc/internal/rules"
)

// An owner deleted again with another policy (Orphan, then Foreground: the
// apiserver swaps the finalizers) waits its own --unlisted-hold for its new
// finalizer: the hold of the one it replaced is not carried over, or the
// new finalizer would go at once, before the resources that could hold
// blocking dependents were listed.
func TestUnlistedHoldIsPerFinalizer(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	clk := clocktesting.NewFakeClock(time.Date(2026, 11, 27, 10, 0, 0, 0, time.UTC))
	w := New(Config{Metadata: fakeapi.NewServer().Client, Mapper: fakeapi.NewMapper(), Workers: 1, Clock: clk, UnlistedHold: time.Minute}, graph.New())
	w.unlisted = func() []discovery.Resource {
		return []discovery.Resource{{GVR: fakeapi.ConfigMaps, Kind: "ConfigMap", Namespaced: true}}
	}
	owner := rules.Identity{APIVersion: "apps/v1", Kind: "Deployment", Namespace: "a", Name: "o", UID: "o-uid"}
	if _, err := w.negativeFactsReady(ctx, owner, rules.FinalizerOrphan); !errors.Is(err, errRetry) {
		t.Fatalf("orphan at the start of its hold: %v, want a retry", err)
	}
	clk.Step(50 * time.Second)
	// Deleted again, Foreground: the orphan finalizer is gone, foregroundDeletion is new.
	if _, err := w.negativeFactsReady(ctx, owner, rules.FinalizerForeground); !errors.Is(err, errRetry) {
		t.Fatalf("foregroundDeletion at the start of its own hold: %v, want a retry", err)
	}
	clk.Step(30 * time.Second) // 80 s after the orphan hold began, 30 s into the new one
	if _, err := w.negativeFactsReady(ctx, owner, rules.FinalizerForeground); !errors.Is(err, errRetry) {
		t.Fatalf("foregroundDeletion 30 s into its hold: %v, want a retry (the orphan finalizer's hold was carried over)", err)
	}
	held, _ := w.Held()
	if len(held) != 1 || held[0].Finalizer != rules.FinalizerForeground || !held[0].Since.Equal(clk.Now().Add(-30*time.Second)) {
		t.Fatalf("held %+v, want foregroundDeletion held since its own start", held)
	}
	clk.Step(31 * time.Second)
	if _, err := w.negativeFactsReady(ctx, owner, rules.FinalizerForeground); err != nil {
		t.Fatalf("foregroundDeletion past its own hold: %v, want it released", err)
	}
}
