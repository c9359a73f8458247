package sim

import (
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
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
const knownBugsOpen = false

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

// knownBug names the issue 14 item an outcome's violations all belong to,
// while those bugs are open on this branch (and KGC_SIM_ALL is not set);
// "" when the outcome passed or shows anything else.
func knownBug(out *Outcome) string {
	if !knownBugsOpen || os.Getenv("KGC_SIM_ALL") != "" {
		return ""
	}
	return classify(out)
}

// classify names the known bug (issue 14 item, or a new finding) an
// outcome's violations all belong to; "" when it passed or shows anything
// else.
func classify(out *Outcome) string {
	if out.Err != nil || !out.Failed() {
		return ""
	}
	if len(out.Owed) > 0 {
		selfRef := true
		for _, w := range out.Owed {
			selfRef = selfRef && strings.HasSuffix(w, "(it references itself)")
		}
		switch {
		case len(out.Violations) > 0:
		case selfRef:
			return "7a" // a self reference blocks its own Foreground deletion
		case out.DiscoveryChanged:
			return "4" // ghost owners after a version switch or a CRD deletion
		}
		return ""
	}
	item := ""
	for _, v := range out.Violations {
		switch {
		case strings.HasSuffix(v.Detail, "which was deleted with Orphan"):
			// The consequence of an orphan finalizer removed too early
			// (classified by that violation).
			continue
		case strings.Contains(v.Detail, "cleared blockOwnerDeletion") && strings.Contains(v.Detail, "no cycle"):
			item = "7b"
		case strings.Contains(v.Detail, "removed the blocking reference") && strings.Contains(v.Detail, "no solid owner remains"):
			item = "3"
		case strings.Contains(v.Detail, "kgc never listed its resource"):
			item = "2"
		case strings.HasPrefix(v.Detail, "kgc removed the orphan finalizer") && strings.Contains(v.Detail, "not yet seen its write"):
			item = "1"
		case v.Rule == "S1" && strings.Contains(v.Detail, "deleting=true") && !strings.Contains(v.Detail, "foregroundDeletion") && !strings.Contains(v.Detail, "orphan"):
			// Not in issue 14: a dependent's DELETE decided while its
			// owner was in Foreground deletion lands after the owner's
			// foregroundDeletion finalizer went (no blocking dependent)
			// while a foreign finalizer keeps the owner. Reported as F1.
			item = "F1 (new)"
		default:
			return ""
		}
	}
	return item // "" when only consequences were seen
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

// Schedule counts of TestRandomSchedules: the CI budget (go test ./...:
// 68 s with -race on a busy 2-core machine, the package 90 s; see doc.go)
// and -short. make soak-sim
// runs many more (KGC_SIM_SCHEDULES).
const (
	ciSchedules    = 1000
	shortSchedules = 100
)

// TestRandomSchedules runs random schedules, each from its own seed:
// KGC_SIM_SEED replays one, KGC_SIM_SCHEDULES sets how many (default
// ciSchedules, shortSchedules with -short), KGC_SIM_BASE the first seed
// (default 1).
//
// It is strict: every safety violation and every piece of work owed at
// quiescence fails it, whether or not a replay repeats it. A violation
// that is an instance of a documented limit (Violation.Limit: the server
// model classifies it at the write, from the facts that define the limit)
// is no failure; the test counts them by kind and logs one seed of each.
func TestRandomSchedules(t *testing.T) {
	w := world()
	if v := os.Getenv("KGC_SIM_SEED"); v != "" {
		seed := envInt(t, "KGC_SIM_SEED", 0)
		s, out := RunRandom(seed, w)
		t.Logf("seed %d: %d steps, documented limits hit: %v\ntrace:\n%s\nschedule:\n%s", seed, out.Steps, out.Limits, s.Trace(), FormatSchedule(seed, s.Actions()))
		if out.Failed() {
			if os.Getenv("KGC_SIM_SHRINK") != "" {
				_, shrunk := reportShrunk(t, s, out, w, ShrinkOptions{Logf: t.Logf})
				t.Logf("%s", shrunk)
			}
			t.Fatalf("%s", out)
		}
		return
	}
	n := envInt(t, "KGC_SIM_SCHEDULES", ciSchedules)
	if testing.Short() && os.Getenv("KGC_SIM_SCHEDULES") == "" {
		n = shortSchedules
	}
	base := envInt(t, "KGC_SIM_BASE", 1)
	maxFail := envInt(t, "KGC_SIM_MAXFAIL", 5) // stop after this many failed schedules
	start := time.Now()
	var (
		next, ran, failed, known atomic.Uint64
		mu                       sync.Mutex
		wg                       sync.WaitGroup
		// limits: schedules that hit each documented limit (kind and
		// rule), and the first seed that did.
		limits    = map[string]int{}
		limitSeed = map[string]uint64{}
	)
	// lossy: schedules in which an answer to a write that landed was
	// lost; lost: those answers.
	var lossy, lost atomic.Uint64
	next.Store(base)
	// Schedules spend much of their time waiting for quiescence: run more
	// of them than there are CPUs.
	par := 4 * runtime.GOMAXPROCS(0)
	for range par {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				seed := next.Add(1) - 1
				if seed >= base+n || failed.Load() >= maxFail {
					return
				}
				s, out := RunRandom(seed, w)
				ran.Add(1)
				if out.LostAnswers > 0 {
					lossy.Add(1)
					lost.Add(uint64(out.LostAnswers))
				}
				mu.Lock()
				hit := map[string]bool{}
				for _, l := range out.Limits {
					k := l.Limit + " (" + l.Rule + ")"
					if !slices.Contains(documentedLimits, l.Limit) {
						t.Errorf("seed %d: violation classified as an unknown limit %q: %v", seed, l.Limit, l)
					}
					if !hit[k] {
						hit[k] = true
						limits[k]++
						if limitSeed[k] == 0 || seed < limitSeed[k] {
							limitSeed[k] = seed
						}
					}
				}
				mu.Unlock()
				if item := knownBug(out); item != "" {
					known.Add(1)
					mu.Lock()
					t.Logf("seed %d hit a known bug (issue 14 item %s; see the package doc): %s", seed, item, out)
					mu.Unlock()
					continue
				}
				if out.Failed() {
					failed.Add(1)
					// Shrink it: the minimal schedule that fails the same
					// way, with its trace and a file to replay it from.
					_, shrunk := reportShrunk(t, s, out, w, ShrinkOptions{MaxRuns: 200, MaxTime: 2 * time.Minute})
					mu.Lock()
					t.Errorf("%s\nclassified as: %q\nreplay: KGC_SIM_SEED=%d go test -race -run TestRandomSchedules ./internal/sim/\ntrace of the objects involved:\n%s\nits schedule (replay it with KGC_SIM_SCHEDULE, as a file):\n%s\n%s",
						out, classify(out), seed, s.Trace(out.Focus()...), FormatSchedule(seed, s.Actions()), shrunk)
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	var kinds []string
	for k, c := range limits {
		kinds = append(kinds, fmt.Sprintf("%s: %d schedules (first seed %d)", k, c, limitSeed[k]))
	}
	slices.Sort(kinds)
	t.Logf("%d schedules (seeds %d..%d), %d failed, %d hit known bugs, in %s; documented limits hit: %v",
		ran.Load(), base, base+n-1, failed.Load(), known.Load(), time.Since(start).Round(time.Millisecond), kinds)
	t.Logf("lost answers to writes that landed: %d, in %d schedules", lost.Load(), lossy.Load())
}

// documentedLimits are the kinds of Violation.Limit.
var documentedLimits = []string{LimitWatchLag, LimitUnlistedHold, LimitRestartMemory, LimitStaleCycle}
