package main

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"time"
)

// result is one measured cell: one scenario, one collector, one budget, one run.
type result struct {
	Scenario  string
	Collector string // upstream, kgc, or client32 for the physical limit
	Budget    string // kcm, unthrottled; direct, proxy, process for the physical limit
	Run       int

	Objects int           // objects the collector acted on (see scenario docs)
	Elapsed time.Duration // the measured phase
	Calls   counts        // the collector's requests during the measured phase

	// The populated-cluster scenario.
	Ready           time.Duration // process start → monitors synced
	Useful          time.Duration // process start → a probe cascade has completed
	Tracked         int           // objects in the cluster
	BaselineRSS     int64         // KB, peak RSS of the same collector on the empty cluster
	BaselineLiveRSS int64         // KB, its live RSS (see usage.LiveRSSKB)

	// FirstCall and LastCall: how long after the start of the measured
	// phase the first and the last per-object request reached the proxy
	// (the collector's reaction time, and with Elapsed the phase's tail).
	FirstCall, LastCall time.Duration
	// InFlight is the mean number of per-object requests in flight at the
	// proxy over the measured phase.
	InFlight float64

	// OwnerGone: on a real cluster, how long after the start of the
	// measured phase the scenario's owner was gone (the Deployment, the
	// CronJob; the Jobs of a CronJob's history; the old ReplicaSets of a
	// rollout), as the watcher saw it.
	OwnerGone time.Duration
	// Setup: on a real cluster, how long the workload took to be made
	// and running (and the collector quiet), before the measured phase.
	Setup time.Duration

	Usage usage
	Note  string

	// Incomplete: the collector did not finish the phase (a bulk
	// deletion whose kgc tripped its deletion breaker and stopped, or
	// --timeout); Left is what it left to collect then (dependents; for
	// the namespace deletion, objects left in the namespace). Elapsed is
	// then when the cell gave up. Incomplete cells are left out of every
	// table but the bulk deletions'.
	Incomplete bool
	Left       int
	// Trips are the deletion breaker trips the kgc collector logged in
	// the cell (parseTrips).
	Trips []string
}

// collected is how many of the objects the phase ended with gone: all of
// them unless it is incomplete.
func (r result) collected() int {
	if r.Incomplete {
		return max(r.Objects-r.Left, 0)
	}
	return r.Objects
}

func (r result) objectsPerSecond() float64 {
	if r.Elapsed <= 0 {
		return 0
	}
	return float64(r.collected()) / r.Elapsed.Seconds()
}

func (r result) callsPerObject() float64 {
	if r.collected() == 0 {
		return 0
	}
	return float64(r.Calls.perObject()) / float64(r.collected())
}

func (r result) verbPerObject(verb string) float64 {
	if r.Objects == 0 {
		return 0
	}
	return float64(r.Calls.ByVerb[verb]) / float64(r.Objects)
}

// rssGrowthPerObject is KB of peak RSS per tracked object over the empty baseline.
func (r result) rssGrowthPerObject() float64 {
	if r.Tracked == 0 || r.BaselineRSS == 0 {
		return math.NaN()
	}
	return float64(r.Usage.MaxRSSKB-r.BaselineRSS) / float64(r.Tracked)
}

// liveRSSGrowthPerObject is KB of live RSS per tracked object over the empty baseline.
func (r result) liveRSSGrowthPerObject() float64 {
	if r.Tracked == 0 || r.BaselineLiveRSS == 0 || r.Usage.LiveRSSKB == 0 {
		return math.NaN()
	}
	return float64(r.Usage.LiveRSSKB-r.BaselineLiveRSS) / float64(r.Tracked)
}

// median of xs (NaN for none); the mean of the middle two for an even count.
func median(xs []float64) float64 {
	var v []float64
	for _, x := range xs {
		if !math.IsNaN(x) {
			v = append(v, x)
		}
	}
	if len(v) == 0 {
		return math.NaN()
	}
	slices.Sort(v)
	n := len(v)
	if n%2 == 1 {
		return v[n/2]
	}
	return (v[n/2-1] + v[n/2]) / 2
}

// ratio is a/b, NaN when either is unknown or b is zero.
func ratio(a, b float64) float64 {
	if math.IsNaN(a) || math.IsNaN(b) || b == 0 {
		return math.NaN()
	}
	return a / b
}

// cellKey identifies the runs of one cell.
type cellKey struct{ Scenario, Collector, Budget string }

// cell gathers the runs of one cell and their medians.
type cell struct {
	runs []result
}

// medOf is c's median of f, NaN for a cell that did not run.
func medOf(c *cell, f func(result) float64) float64 {
	if c == nil {
		return math.NaN()
	}
	return c.med(f)
}

func (c cell) med(f func(result) float64) float64 {
	xs := make([]float64, len(c.runs))
	for i, r := range c.runs {
		xs[i] = f(r)
	}
	return median(xs)
}

func group(results []result) map[cellKey]*cell {
	out := map[cellKey]*cell{}
	for _, r := range results {
		k := cellKey{r.Scenario, r.Collector, r.Budget}
		if out[k] == nil {
			out[k] = &cell{}
		}
		out[k].runs = append(out[k].runs, r)
	}
	return out
}

// benchLine is a Go benchmark line for benchstat.
func benchLine(r result) string {
	name := fmt.Sprintf("BenchmarkSideBySide/%s/%s/%s", r.Scenario, r.Collector, r.Budget)
	s := fmt.Sprintf("%s \t1\t%d ns/op\t%.3f calls/object\t%.2f objects/s\t%.1f MB-peak-rss\t%.2f cpu-s",
		name, r.Elapsed.Nanoseconds(), r.callsPerObject(), r.objectsPerSecond(), float64(r.Usage.MaxRSSKB)/1024, r.Usage.CPU.Seconds())
	if r.Tracked > 0 {
		s += fmt.Sprintf("\t%.3f ready-s\t%.3f useful-s\t%d GETs\t%.3f KB-rss/object\t%.3f KB-live-rss/object", r.Ready.Seconds(), r.Useful.Seconds(), r.Calls.ByVerb[verbGet], r.rssGrowthPerObject(), r.liveRSSGrowthPerObject())
	}
	return s
}

func f1(x float64) string { return fnum(x, 1) }
func f2(x float64) string { return fnum(x, 2) }

func fnum(x float64, prec int) string {
	if math.IsNaN(x) || math.IsInf(x, 0) {
		return "–"
	}
	return fmt.Sprintf("%.*f", prec, x)
}

func fratio(x float64) string {
	if math.IsNaN(x) || math.IsInf(x, 0) {
		return "–"
	}
	return fmt.Sprintf("%.2f×", x)
}

// scenarioTitles are the table's row names, in order.
var scenarioTitles = []struct{ name, title string }{
	{"background", "Background fan-out"},
	{"foreground", "Foreground fan-out"},
	{"chain", "Foreground chain"},
	{"orphan", "Orphan"},
	{"orphan-background", "Orphan and Background sharing dependents"},
	{"sweep", "Startup sweep"},
	{"populated", "Start on a populated cluster"},
	{"limit", "Physical limit (32-way client)"},
	{scDeploymentBackground, "Deployment deleted, Background (cluster)"},
	{scDeploymentForeground, "Deployment deleted, Foreground (cluster)"},
	{scCronJob, "CronJob history limit lowered (cluster)"},
	{scCronJobDelete, "CronJob deleted (cluster)"},
	{scRollout, "Rollout storm (cluster)"},
	{scCRDDelete, "CRD deleted with its instances"},
	{scCollection, "DeleteCollection of owners"},
	{scNamespace, "Namespace deleted (cluster)"},
	{scBacklog, "Backlog at start-up"},
}

// writeTable writes the Markdown tables of the medians.
func writeTable(w io.Writer, results []result, budgets []string, machine string) {
	// Unfinished cells have no time or per-object cost to compare: they
	// are in the bulk deletions' table alone.
	g := group(slices.DeleteFunc(slices.Clone(results), func(r result) bool { return r.Incomplete }))
	runs := 0
	for _, c := range g {
		runs = max(runs, len(c.runs))
	}
	fmt.Fprintf(w, "Machine: %s. Median of %d run(s) per cell.\n\n", machine, runs)
	fmt.Fprintln(w, "| scenario | budget | objects | upstream objects/s | kgc objects/s | kgc/upstream | upstream calls/object | kgc calls/object | upstream peak RSS MB | kgc peak RSS MB | upstream CPU s | kgc CPU s |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|---|---|---|")
	for _, st := range scenarioTitles {
		if st.name == "limit" || st.name == "populated" {
			continue
		}
		for _, b := range budgets {
			u, k := g[cellKey{st.name, collectorUpstream, b}], g[cellKey{st.name, collectorKGC, b}]
			if u == nil && k == nil {
				continue
			}
			ops := func(r result) float64 { return r.objectsPerSecond() }
			cpo := func(r result) float64 { return r.callsPerObject() }
			rss := func(r result) float64 { return float64(r.Usage.MaxRSSKB) / 1024 }
			cpu := func(r result) float64 { return r.Usage.CPU.Seconds() }
			objs := medOf(u, func(r result) float64 { return float64(r.Objects) })
			if math.IsNaN(objs) {
				objs = medOf(k, func(r result) float64 { return float64(r.Objects) })
			}
			fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", st.title, b, fnum(objs, 0),
				f1(medOf(u, ops)), f1(medOf(k, ops)), fratio(ratio(medOf(k, ops), medOf(u, ops))),
				f2(medOf(u, cpo)), f2(medOf(k, cpo)), f1(medOf(u, rss)), f1(medOf(k, rss)), f1(medOf(u, cpu)), f1(medOf(k, cpu)))
		}
	}

	fmt.Fprintln(w)
	fmt.Fprintln(w, "API calls per collected object by verb (median; namespaced LIST pages are owner lookups and count per object; cluster-wide LIST, WATCH and discovery are the collectors' watching (upstream's informers, kgc's monitors), per run, not per object):")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| scenario | budget | collector | GET | namespaced LIST | DELETE | PATCH | UPDATE | CREATE (events) | LIST | WATCH | discovery | client conns |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|---|---|---|---|")
	for _, st := range scenarioTitles {
		if st.name == "limit" {
			continue
		}
		for _, b := range budgets {
			for _, coll := range []string{collectorUpstream, collectorKGC} {
				c := g[cellKey{st.name, coll, b}]
				if c == nil {
					continue
				}
				per := func(v string) string { return f2(c.med(func(r result) float64 { return r.verbPerObject(v) })) }
				abs := func(v string) string {
					return fnum(c.med(func(r result) float64 { return float64(r.Calls.ByVerb[v]) }), 0)
				}
				conns := fnum(c.med(func(r result) float64 { return float64(r.Calls.Conns) }), 0)
				fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", st.title, b, coll,
					per(verbGet), per(verbListNamespaced), per(verbDelete), per(verbPatch), per(verbUpdate), per(verbCreate), abs(verbList), abs(verbWatch), abs(verbDiscovery), conns)
			}
		}
	}

	if slices.ContainsFunc(clusterScenarios, func(sc string) bool { return hasScenario(g, sc) }) {
		fmt.Fprintln(w)
		fmt.Fprintln(w, "On a real cluster (kube-controller-manager without its garbage collector, kube-scheduler, simulated nodes whose Pods terminate about 1 s after deletion), seconds from the user's action until the owner is gone (the Deployment; the history's Jobs; the CronJob; the old ReplicaSets) and until the phase is done (the owner and everything it owned gone), and the collector's per-object calls in the phase:")
		fmt.Fprintln(w)
		fmt.Fprintln(w, "| scenario | budget | objects | upstream owner gone s | kgc owner gone s | upstream done s | kgc done s | kgc/upstream done | upstream calls | kgc calls |")
		fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|---|")
		for _, st := range scenarioTitles {
			if !slices.Contains(clusterScenarios, st.name) {
				continue
			}
			for _, b := range budgets {
				u, k := g[cellKey{st.name, collectorUpstream, b}], g[cellKey{st.name, collectorKGC, b}]
				if u == nil && k == nil {
					continue
				}
				owner := func(r result) float64 { return r.OwnerGone.Seconds() }
				done := func(r result) float64 { return r.Elapsed.Seconds() }
				calls := func(r result) float64 { return float64(r.Calls.perObject()) }
				objs := medOf(u, func(r result) float64 { return float64(r.Objects) })
				if math.IsNaN(objs) {
					objs = medOf(k, func(r result) float64 { return float64(r.Objects) })
				}
				fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", st.title, b, fnum(objs, 0),
					f2(medOf(u, owner)), f2(medOf(k, owner)), f2(medOf(u, done)), f2(medOf(k, done)), fratio(ratio(medOf(k, done), medOf(u, done))),
					fnum(medOf(u, calls), 0), fnum(medOf(k, calls), 0))
			}
		}
	}

	if hasScenario(g, "orphan") || hasScenario(g, "orphan-background") {
		fmt.Fprintln(w)
		fmt.Fprintln(w, "Orphan deletions, seconds from the deletion: until the orphaning owner is gone (what `kubectl delete --cascade=orphan` waits for) and until everything is settled (every owner gone, no dependent referring to one):")
		fmt.Fprintln(w)
		fmt.Fprintln(w, "| scenario | budget | objects | upstream owner gone s | kgc owner gone s | upstream settled s | kgc settled s |")
		fmt.Fprintln(w, "|---|---|---|---|---|---|---|")
		for _, sc := range []string{"orphan", "orphan-background"} {
			for _, b := range budgets {
				u, k := g[cellKey{sc, collectorUpstream, b}], g[cellKey{sc, collectorKGC, b}]
				if u == nil && k == nil {
					continue
				}
				owner := func(r result) float64 { return r.OwnerGone.Seconds() }
				done := func(r result) float64 { return r.Elapsed.Seconds() }
				objs := medOf(u, func(r result) float64 { return float64(r.Objects) })
				if math.IsNaN(objs) {
					objs = medOf(k, func(r result) float64 { return float64(r.Objects) })
				}
				fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %s |\n", sc, b, fnum(objs, 0),
					f2(medOf(u, owner)), f2(medOf(k, owner)), f2(medOf(u, done)), f2(medOf(k, done)))
			}
		}
	}

	writeBulkTable(w, group(results), budgets)

	if hasScenario(g, "populated") {
		fmt.Fprintln(w)
		fmt.Fprintln(w, "Start on a populated cluster (time from process start; useful = a probe Background cascade issued at sync has completed; live RSS = resident set after debug.FreeOSMemory with everything tracked):")
		fmt.Fprintln(w)
		fmt.Fprintln(w, "| budget | collector | objects | synced s | useful s | GETs until quiet | GETs/object | peak RSS MB | empty-cluster peak RSS MB | peak RSS growth KB/object | live RSS growth KB/object | CPU s |")
		fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|---|---|---|")
		for _, b := range budgets {
			for _, coll := range []string{collectorUpstream, collectorKGC} {
				c := g[cellKey{"populated", coll, b}]
				if c == nil {
					continue
				}
				m := c.med
				fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", b, coll,
					fnum(m(func(r result) float64 { return float64(r.Tracked) }), 0),
					f2(m(func(r result) float64 { return r.Ready.Seconds() })),
					f2(m(func(r result) float64 { return r.Useful.Seconds() })),
					fnum(m(func(r result) float64 { return float64(r.Calls.ByVerb[verbGet]) }), 0),
					fnum(m(func(r result) float64 { return float64(r.Calls.ByVerb[verbGet]) / float64(r.Tracked) }), 3),
					f1(m(func(r result) float64 { return float64(r.Usage.MaxRSSKB) / 1024 })),
					f1(m(func(r result) float64 { return float64(r.BaselineRSS) / 1024 })),
					f2(m(func(r result) float64 { return r.rssGrowthPerObject() })),
					f2(m(func(r result) float64 { return r.liveRSSGrowthPerObject() })),
					f1(m(func(r result) float64 { return r.Usage.CPU.Seconds() })))
			}
		}
	}

	if hasScenario(g, "limit") {
		fmt.Fprintln(w)
		ops := func(r result) float64 { return r.objectsPerSecond() }
		direct := cellMed(g, cellKey{"limit", collectorClient32, "direct"}, ops)
		proxied := cellMed(g, cellKey{"limit", collectorClient32, "proxy"}, ops)
		process := cellMed(g, cellKey{"limit", collectorClient32, "process"}, ops)
		fmt.Fprintf(w, "Physical limit: the apiserver deletes %s objects/s from an unthrottled 32-way client directly, %s objects/s through the counting proxy",
			fnum(direct, 0), fnum(proxied, 0))
		if !math.IsNaN(process) {
			fmt.Fprintf(w, ", %s objects/s through the proxy from a process of its own (as the collectors are; it used %s CPU s)",
				fnum(process, 0), f1(cellMed(g, cellKey{"limit", collectorClient32, "process"}, func(r result) float64 { return r.Usage.CPU.Seconds() })))
		}
		fmt.Fprint(w, ".")
		for _, coll := range []string{collectorUpstream, collectorKGC} {
			bg := cellMed(g, cellKey{"background", coll, "unthrottled"}, ops)
			if math.IsNaN(bg) || math.IsNaN(proxied) {
				continue
			}
			fmt.Fprintf(w, " %s, unthrottled Background fan-out: %s objects/s = %s%% of the proxied limit", coll, fnum(bg, 0), fnum(100*bg/proxied, 0))
			if per := perRunLimitRatios(g, coll, "proxy"); len(per) > 0 {
				fmt.Fprintf(w, " (run by run: median %s%%, %s%%–%s%%)", fnum(100*median(per), 0), fnum(100*slices.Min(per), 0), fnum(100*slices.Max(per), 0))
			}
			if !math.IsNaN(process) {
				fmt.Fprintf(w, ", %s%% of the own-process one", fnum(100*bg/process, 0))
				if per := perRunLimitRatios(g, coll, "process"); len(per) > 0 {
					fmt.Fprintf(w, " (run by run: median %s%%, %s%%–%s%%)", fnum(100*median(per), 0), fnum(100*slices.Min(per), 0), fnum(100*slices.Max(per), 0))
				}
			}
			fmt.Fprint(w, ".")
		}
		fmt.Fprintln(w)
	}
}

// writeBulkTable writes the bulk deletions' table: every cell, finished
// or not, with what an unfinished one left and the breaker's trips.
func writeBulkTable(w io.Writer, g map[cellKey]*cell, budgets []string) {
	if !slices.ContainsFunc(bulkScenarios, func(sc string) bool { return hasScenario(g, sc) }) {
		return
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Bulk deletions: seconds from the deletion (for the backlog, from the collector's start) until the owner is gone (the CRD; the owners) and until every dependent is (for the namespace, the namespace) — medians of the finished runs — and, for runs that did not finish, what the collector left; calls per object collected; the deletion breaker's trips as kgc logged them (signal count/limit):")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| scenario | budget | collector | objects | finished | left | owner gone s | done s | vs upstream done | objects/s | calls/object | breaker trips |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|---|---|---|")
	for _, st := range scenarioTitles {
		if !isBulkScenario(st.name) {
			continue
		}
		for _, b := range budgets {
			for _, coll := range []string{collectorUpstream, collectorKGC} {
				c := g[cellKey{st.name, coll, b}]
				if c == nil {
					continue
				}
				var fin cell
				var left []string
				var trips []string
				for _, r := range c.runs {
					if r.Incomplete {
						left = append(left, fmt.Sprint(r.Left))
					} else {
						fin.runs = append(fin.runs, r)
					}
					for _, t := range r.Trips {
						if !slices.Contains(trips, t) {
							trips = append(trips, t)
						}
					}
				}
				done := func(r result) float64 { return r.Elapsed.Seconds() }
				owner := func(r result) float64 {
					if r.OwnerGone <= 0 {
						return math.NaN()
					}
					return r.OwnerGone.Seconds()
				}
				vs := "–"
				if coll == collectorKGC {
					vs = fratio(ratio(fin.med(done), medOf(g[cellKey{st.name, collectorUpstream, b}], func(r result) float64 {
						if r.Incomplete {
							return math.NaN()
						}
						return done(r)
					})))
				}
				leftCell, tripCell := "–", "none"
				if len(left) > 0 {
					leftCell = strings.Join(left, ", ")
				}
				if len(trips) > 0 {
					tripCell = strings.Join(trips, "; ")
				}
				fmt.Fprintf(w, "| %s | %s | %s | %s | %d/%d | %s | %s | %s | %s | %s | %s | %s |\n", st.title, b, coll,
					fnum(c.med(func(r result) float64 { return float64(r.Objects) }), 0), len(fin.runs), len(c.runs), leftCell,
					f2(c.med(owner)), f2(fin.med(done)), vs,
					f1(fin.med(func(r result) float64 { return r.objectsPerSecond() })),
					f2(c.med(func(r result) float64 { return r.callsPerObject() })), tripCell)
			}
		}
	}
}

// perRunLimitRatios returns, for every run that measured both, coll's
// unthrottled Background fan-out objects/s over the limit measured via via
// (proxy, process) on the same control plane right after it. The limit swings with the load
// of the machine from one run to the next; a ratio taken within one run
// cancels most of that swing, a ratio of medians over runs does not.
func perRunLimitRatios(g map[cellKey]*cell, coll, via string) []float64 {
	bg, lim := g[cellKey{"background", coll, "unthrottled"}], g[cellKey{"limit", collectorClient32, via}]
	if bg == nil || lim == nil {
		return nil
	}
	var out []float64
	for _, b := range bg.runs {
		for _, l := range lim.runs {
			if l.Run == b.Run {
				if x := ratio(b.objectsPerSecond(), l.objectsPerSecond()); !math.IsNaN(x) {
					out = append(out, x)
				}
			}
		}
	}
	return out
}

func hasScenario(g map[cellKey]*cell, name string) bool {
	for k := range g {
		if k.Scenario == name {
			return true
		}
	}
	return false
}

func cellMed(g map[cellKey]*cell, k cellKey, f func(result) float64) float64 {
	c := g[k]
	if c == nil {
		return math.NaN()
	}
	return c.med(f)
}

// sanitize makes s usable in an object name.
func sanitize(s string) string {
	return strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-' {
			return r
		}
		return '-'
	}, strings.ToLower(s))
}
