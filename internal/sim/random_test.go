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

// The signatures of bugs the simulator once found, each fixed and
// scripted in bugs_test.go: classify names the one a failing outcome
// shows, so that a failure is reported with what it resembles, and
// TestShrinkFindsMinimalSchedule checks that shrinking keeps the bug it
// started from.
const (
	// A self reference blocked its own Foreground deletion
	// (TestForegroundSelfReferenceFinishes).
	bugSelfReference = "self reference blocks its own deletion"
	// Ghost owners after a version switch or a CRD deletion
	// (TestNoGhostAfterCRDDeletion).
	bugGhostAfterDiscoveryChange = "ghost after a discovery change"
	// Blocking references cleared where there was no cycle
	// (TestForegroundChainIsNoCycle).
	bugFalseCycle = "false cycle"
	// A waiting owner's reference removed on a solid owner the graph had
	// not seen deleted (TestStaleSolidOwnerDoesNotReleaseWaitingOwner).
	bugStaleSolidOwner = "stale solid owner"
	// A finalizer removed while a resource that could hold dependents was
	// never listed (TestOrphanFinalizerWaitsForFirstList).
	bugFinalizerBeforeFirstList = "finalizer before the first list"
	// An orphan finalizer removed on a graph that had not seen kgc's own
	// write to a dependent (TestTwoOwnersOrphanOneDependent).
	bugOrphanBeforeOwnWriteSeen = "orphan finalizer before kgc's own write was seen"
	// A dependent's DELETE decided while its owner was in Foreground
	// deletion landed after kgc released the owner, which a foreign
	// finalizer kept (TestNoDeleteAfterOwnerLeftForeground).
	bugDeleteAfterForegroundRelease = "DELETE after the owner left Foreground deletion"
)

// classify names the bug (one of the signatures above) an outcome's
// violations all belong to; "" when it passed or shows anything else.
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
			return bugSelfReference
		case out.DiscoveryChanged:
			return bugGhostAfterDiscoveryChange
		}
		return ""
	}
	bug := ""
	for _, v := range out.Violations {
		switch {
		case strings.HasSuffix(v.Detail, "which was deleted with Orphan"):
			// The consequence of an orphan finalizer removed too early
			// (classified by that violation).
			continue
		case strings.Contains(v.Detail, "cleared blockOwnerDeletion") && strings.Contains(v.Detail, "no cycle"):
			bug = bugFalseCycle
		case strings.Contains(v.Detail, "removed the blocking reference") && strings.Contains(v.Detail, "no solid owner remains"):
			bug = bugStaleSolidOwner
		case strings.Contains(v.Detail, "kgc never listed its resource"):
			bug = bugFinalizerBeforeFirstList
		case strings.HasPrefix(v.Detail, "kgc removed the orphan finalizer") && strings.Contains(v.Detail, "not yet seen its write"):
			bug = bugOrphanBeforeOwnWriteSeen
		case v.Rule == "S1" && strings.Contains(v.Detail, "deleting=true") && !strings.Contains(v.Detail, "foregroundDeletion") && !strings.Contains(v.Detail, "orphan"):
			// A dependent's DELETE decided while its owner was in
			// Foreground deletion lands after the owner's
			// foregroundDeletion finalizer went (no blocking dependent)
			// while a foreign finalizer keeps the owner.
			bug = bugDeleteAfterForegroundRelease
		default:
			return ""
		}
	}
	return bug // "" when only consequences were seen
}

// world returns the random schedules' world: small, so that thousands of
// schedules fit in the unit tests.
func world() World {
	return AllFeatures(8, 40)
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
		next, ran, failed atomic.Uint64
		mu                sync.Mutex
		wg                sync.WaitGroup
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
				if out.Failed() {
					failed.Add(1)
					// Shrink it: the minimal schedule that fails the same
					// way, with its trace and a file to replay it from.
					_, shrunk := reportShrunk(t, s, out, w, ShrinkOptions{MaxRuns: 200, MaxTime: 2 * time.Minute})
					mu.Lock()
					t.Errorf("%s\nresembles: %q\nreplay: KGC_SIM_SEED=%d go test -race -run TestRandomSchedules ./internal/sim/\ntrace of the objects involved:\n%s\nits schedule (replay it with KGC_SIM_SCHEDULE, as a file):\n%s\n%s",
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
	t.Logf("%d schedules (seeds %d..%d), %d failed, in %s; documented limits hit: %v",
		ran.Load(), base, base+n-1, failed.Load(), time.Since(start).Round(time.Millisecond), kinds)
	t.Logf("lost answers to writes that landed: %d, in %d schedules", lost.Load(), lossy.Load())
}

// documentedLimits are the kinds of Violation.Limit.
var documentedLimits = []string{LimitWatchLag, LimitUnlistedHold, LimitRestartMemory, LimitStaleCycle}
