package sim

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/kgc-dev/kgc/internal/collector"
)

// TestScheduleText checks that a random schedule's text form reads back
// as the same schedule.
func TestScheduleText(t *testing.T) {
	for _, seed := range []uint64{1, 2, 3} {
		s, out := RunRandom(seed, world())
		acts := s.Actions()
		if len(acts) == 0 {
			t.Fatalf("seed %d: no actions recorded (%s)", seed, out)
		}
		text := FormatSchedule(seed, acts)
		gotSeed, got, err := ParseSchedule(text)
		if err != nil {
			t.Fatalf("seed %d: %v\n%s", seed, err, text)
		}
		if gotSeed != seed || FormatSchedule(gotSeed, got) != text {
			t.Fatalf("seed %d: the schedule does not read back:\n%s\nread back as:\n%s", seed, text, FormatSchedule(gotSeed, got))
		}
	}
	// A trace's step numbers and comments are ignored.
	_, got, err := ParseSchedule("seed 7\n  3 create replicasets.apps a/o3 refs=configmaps:o1!,widgets.example.com:o2@v2 # uid o3-3\n\ndelete configmaps a/o1 policy=none\n")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"create replicasets.apps a/o3 refs=configmaps:o1!,widgets.example.com:o2@v2", "delete configmaps a/o1 policy=none"}
	var lines []string
	for _, a := range got {
		lines = append(lines, a.String())
	}
	if !slices.Equal(lines, want) {
		t.Fatalf("got %q, want %q", lines, want)
	}
}

// TestReplaySchedule replays a schedule file (KGC_SIM_SCHEDULE), as a
// failure's report prints it, and fails when the schedule does.
func TestReplaySchedule(t *testing.T) {
	path := os.Getenv("KGC_SIM_SCHEDULE")
	if path == "" {
		t.Skip("set KGC_SIM_SCHEDULE=<file> to replay a schedule")
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	seed, acts, err := ParseSchedule(string(data))
	if err != nil {
		t.Fatal(err)
	}
	s, out := Replay(seed, acts, world())
	t.Logf("seed %d, %d actions\ntrace:\n%s", seed, len(acts), s.Trace())
	if out.Failed() {
		t.Fatalf("%s", out)
	}
}

// reportShrunk shrinks a failing schedule and returns the report: the
// shrunk schedule, written to a file for KGC_SIM_SCHEDULE, and its trace.
func reportShrunk(t *testing.T, s *Sim, out *Outcome, w World, opt ShrinkOptions) (*ShrinkResult, string) {
	t.Helper()
	r := Shrink(out.Seed, s.Actions(), w, out, opt)
	path := filepath.Join(os.TempDir(), fmt.Sprintf("kgc-sim-seed-%d.schedule", out.Seed))
	replay := "(could not write the schedule file)"
	if err := os.WriteFile(path, []byte(FormatSchedule(r.Seed, r.Actions)), 0o644); err == nil {
		replay = fmt.Sprintf("KGC_SIM_SCHEDULE=%s go test -race -run '^TestReplaySchedule$' -v ./internal/sim/", path)
	}
	return r, fmt.Sprintf("%s\nreplay the minimal schedule: %s", r, replay)
}

// TestShrinkFindsMinimalSchedule switches a fix off — an owner's orphan or
// foregroundDeletion finalizer removed while a resource that could hold
// its dependents was never listed (TestOrphanFinalizerWaitsForFirstList);
// the fix holds it for --unlisted-hold, which this test sets to a
// nanosecond — searches
// random schedules for one that breaks the contract, shrinks it, and checks
// that the shrunk schedule is shorter and still fails the same way.
func TestShrinkFindsMinimalSchedule(t *testing.T) {
	w := world()
	w.Configure = func(c *collector.Config) { c.UnlistedHold = time.Nanosecond }
	// The search: batches of seeds run in parallel; the lowest failing
	// seed of the first batch with a failure is taken, so the choice does
	// not depend on which schedule finishes first.
	par := 4 * runtime.GOMAXPROCS(0)
	const maxSeeds = 600
	type found struct {
		s   *Sim
		out *Outcome
	}
	var fail *found
	searched := 0
	for base := uint64(1); fail == nil && searched < maxSeeds; base += uint64(par) {
		res := make([]*found, par)
		var wg sync.WaitGroup
		for i := range par {
			wg.Add(1)
			go func() {
				defer wg.Done()
				s, out := RunRandom(base+uint64(i), w)
				if classify(out) == bugFinalizerBeforeFirstList {
					res[i] = &found{s, out}
				}
			}()
		}
		wg.Wait()
		searched += par
		for _, f := range res {
			if f != nil {
				fail = f
				break
			}
		}
	}
	if fail == nil {
		t.Fatalf("no schedule of seeds 1..%d failed with the unlisted hold off: the simulator no longer finds %q", searched, bugFinalizerBeforeFirstList)
	}
	t.Logf("searched %d seeds; seed %d fails: %s", searched, fail.out.Seed, fail.out)
	r, report := reportShrunk(t, fail.s, fail.out, w, ShrinkOptions{MaxRuns: 150, MaxTime: 90 * time.Second, Logf: t.Logf})
	t.Logf("%s", report)
	if r.Outcome == fail.out {
		t.Fatalf("no replay of the failing schedule failed again")
	}
	if len(r.Actions) >= len(r.Original) {
		t.Errorf("the shrunk schedule has %d actions, the original %d", len(r.Actions), len(r.Original))
	}
	if !r.Outcome.Failed() {
		t.Errorf("the shrunk schedule passed")
	}
	// Shrinking to the same bug: its signature.
	if got := classify(r.Outcome); got != bugFinalizerBeforeFirstList {
		t.Errorf("the shrunk schedule fails as %q (%s), want %q", got, r.Outcome, bugFinalizerBeforeFirstList)
	}
	t.Logf("shrunk %d → %d actions (%.0f%%) in %d replays, %s", len(r.Original), len(r.Actions),
		100*float64(len(r.Actions))/float64(len(r.Original)), r.Runs, r.Elapsed.Round(time.Millisecond))
}
