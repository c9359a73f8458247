package sim

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"
)

// Shrinking: a failing schedule is reduced to a minimal one that still
// fails the same way (delta debugging, Zeller's ddmin, over the schedule's
// actions: client writes, watch deliveries, clock advances, restarts and
// injected faults), so that a failure prints a trace of a handful of steps
// instead of a hundred.
//
// A candidate is a subsequence of the schedule, replayed from scratch
// (Replay). Actions on objects the candidate never creates do nothing and
// references to them are dropped, so every subsequence is a valid
// schedule. A candidate fails the same way when it breaks one of the
// properties the original broke, with the same kind of violation
// (Signature: the rule and the violation's wording with objects, UIDs and
// numbers left out). After ddmin, each remaining ownerReference of a
// create or a set-refs is dropped in turn where the failure survives it.
//
// The search is deterministic: the candidates and their order depend only
// on the schedule and on which candidates failed. A replay repeats its
// outcome almost always but not always (package doc, "Determinism"), so a
// candidate that failed by chance may be kept (the result is then still a
// failing schedule, only less likely to repeat: Confirmed says whether a
// last replay failed again) and one that passed by chance may be dropped
// (the result is then less small). It is bounded by a number of replays
// and by wall time.

// ShrinkOptions bounds a shrink.
type ShrinkOptions struct {
	// MaxRuns bounds the replays; default 200.
	MaxRuns int
	// MaxTime bounds the wall time; default 2 minutes.
	MaxTime time.Duration
	// Logf, when set, receives the shrink's progress.
	Logf func(format string, args ...any)
}

// ShrinkResult is a shrink's outcome.
type ShrinkResult struct {
	Seed uint64
	// Original is the schedule that failed; Actions the smallest one found
	// that fails the same way (as it took effect: Sim.Actions).
	Original, Actions []Action
	// Outcome and Sim are those of the replay of Actions that failed.
	Outcome *Outcome
	Sim     *Sim
	// Signatures are the failure's kinds the shrink kept (Signature).
	Signatures []string
	// Runs counts the replays; Exhausted says the bounds stopped the
	// shrink before it was done (the result is smaller, not minimal).
	Runs      int
	Exhausted bool
	// Confirmed says whether one more replay of Actions failed the same
	// way.
	Confirmed bool
	Elapsed   time.Duration
}

// String is the shrunk schedule's report: the seed, the schedule in its
// replayable text form, and the trace of its failing replay.
func (r *ShrinkResult) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "minimal schedule: %d of %d actions (%d replays in %s, exhausted=%v, confirmed by a last replay=%v); failure: %s\n",
		len(r.Actions), len(r.Original), r.Runs, r.Elapsed.Round(time.Millisecond), r.Exhausted, r.Confirmed, r.Outcome)
	b.WriteString(FormatSchedule(r.Seed, r.Actions))
	b.WriteString("trace of its replay:\n")
	b.WriteString(r.Sim.Trace())
	return b.String()
}

var (
	objectRE = regexp.MustCompile(`[\w.-]*/?[\w.-]*\[[^\]]*\]`)
	numberRE = regexp.MustCompile(`\d+`)
)

// Signature names the kind of a violation (or of owed work, rule "L1"):
// its rule and wording, without the objects, UIDs and numbers it names.
func Signature(rule, detail string) string {
	d := objectRE.ReplaceAllString(detail, "X")
	d = numberRE.ReplaceAllString(d, "#")
	return rule + ": " + d
}

// Signatures returns the kinds of an outcome's failures; a harness error
// is "error".
func (o *Outcome) Signatures() []string {
	var out []string
	add := func(s string) {
		if !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	for _, v := range o.Violations {
		add(Signature(v.Rule, v.Detail))
	}
	for _, w := range o.Owed {
		_, what, _ := strings.Cut(w, ": ")
		add(Signature("L1", what))
	}
	if o.Err != nil {
		add("error")
	}
	slices.Sort(out)
	return out
}

// Shrink reduces a failing schedule (actions, run from seed in world w,
// whose outcome was failure) to a minimal one that fails the same way.
func Shrink(seed uint64, actions []Action, w World, failure *Outcome, opt ShrinkOptions) *ShrinkResult {
	if opt.MaxRuns == 0 {
		opt.MaxRuns = 200
	}
	if opt.MaxTime == 0 {
		opt.MaxTime = 2 * time.Minute
	}
	logf := opt.Logf
	if logf == nil {
		logf = func(string, ...any) {}
	}
	start := time.Now()
	res := &ShrinkResult{Seed: seed, Original: slices.Clone(actions), Signatures: failure.Signatures()}
	want := res.Signatures
	// A harness error (a collector that never quiesced) is kept only
	// when it is all the original showed.
	if len(want) > 1 {
		want = slices.DeleteFunc(slices.Clone(want), func(s string) bool { return s == "error" })
	}
	same := func(o *Outcome) bool {
		for _, s := range o.Signatures() {
			if slices.Contains(want, s) {
				return true
			}
		}
		return false
	}
	budget := func() bool {
		if res.Runs >= opt.MaxRuns || time.Since(start) >= opt.MaxTime {
			res.Exhausted = true
			return false
		}
		return true
	}
	tried := map[string]bool{}
	// test replays cand; when it fails the same way, it becomes the
	// current schedule, as it took effect (cut at the first violation,
	// without the actions that found no object).
	cur := slices.Clone(actions)
	test := func(cand []Action) bool {
		key := FormatSchedule(seed, cand)
		if tried[key] || !budget() {
			return false
		}
		tried[key] = true
		res.Runs++
		s, out := Replay(seed, cand, w)
		if !same(out) {
			return false
		}
		cur = s.Actions()
		res.Outcome, res.Sim = out, s
		logf("shrink: %d actions fail (%s)", len(cur), strings.Join(out.Signatures(), "; "))
		return true
	}
	// The original schedule, replayed: the shrink starts from what it
	// repeats (and from its actions as they took effect).
	if !test(cur) {
		// It did not repeat: shrink anyway, from the original.
		logf("shrink: the original schedule did not fail again on its first replay")
		cur = slices.Clone(actions)
	}

	// ddmin, complements only: remove one of n chunks; on success go on
	// with n-1 chunks of what is left, else split finer.
	n := 2
	for len(cur) >= 2 && !res.Exhausted {
		chunks := split(cur, n)
		reduced := false
		for i := range chunks {
			cand := make([]Action, 0, len(cur))
			for j, c := range chunks {
				if j != i {
					cand = append(cand, c...)
				}
			}
			if test(cand) {
				n = max(n-1, 2)
				reduced = true
				break
			}
			if res.Exhausted {
				break
			}
		}
		if !reduced {
			if n >= len(cur) {
				break
			}
			n = min(2*n, len(cur))
		}
	}
	// Drop single ownerReferences the failure does not need.
	for i := 0; i < len(cur) && !res.Exhausted; i++ {
		for r := 0; r < len(cur[i].Refs) && !res.Exhausted; r++ {
			cand := slices.Clone(cur)
			cand[i].Refs = slices.Delete(slices.Clone(cand[i].Refs), r, r+1)
			if cand[i].Op == OpCreate && len(cand[i].Refs) == 0 {
				cand[i].Refs = nil
			}
			if test(cand) {
				r--
			}
		}
	}
	res.Actions = cur
	if res.Outcome == nil {
		// Nothing failed again: report the original failure.
		res.Outcome = failure
		s, _ := Replay(seed, cur, w)
		res.Sim = s
		res.Runs++
	} else {
		_, again := Replay(seed, cur, w)
		res.Runs++
		res.Confirmed = same(again)
	}
	res.Elapsed = time.Since(start)
	return res
}

// split cuts s into n chunks of nearly equal length.
func split(s []Action, n int) [][]Action {
	var out [][]Action
	for i := range n {
		lo, hi := i*len(s)/n, (i+1)*len(s)/n
		if hi > lo {
			out = append(out, s[lo:hi])
		}
	}
	return out
}
