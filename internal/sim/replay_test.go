package sim

import (
	"os"
	"testing"
)

// TestReplay measures how deterministic schedules are: it runs seeds
// 1..KGC_SIM_REPLAY twice each, one at a time, and reports how many
// produced the same trace (steps and every state change) both times. It
// is a measurement, not a check: see the package doc for what remains
// nondeterministic.
func TestReplay(t *testing.T) {
	if os.Getenv("KGC_SIM_REPLAY") == "" {
		t.Skip("set KGC_SIM_REPLAY=<seeds> to measure replay determinism")
	}
	n := envInt(t, "KGC_SIM_REPLAY", 0)
	w := world()
	same, sameOutcome := 0, 0
	for seed := uint64(1); seed <= n; seed++ {
		a, oa := RunRandom(seed, w)
		b, ob := RunRandom(seed, w)
		if a.Trace() == b.Trace() {
			same++
		} else {
			t.Logf("seed %d: traces differ", seed)
		}
		if oa.String() == ob.String() {
			sameOutcome++
		}
	}
	t.Logf("%d of %d seeds replayed the same trace, %d the same outcome", same, n, sameOutcome)
}
