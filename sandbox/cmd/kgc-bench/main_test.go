package main

import (
	"bytes"
	"math"
	"net/url"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// TestMain lets the test binary serve as the collector child of the smoke
// test, as the kgc-bench binary does for itself. The control plane runs in
// a process of its own, built without -race (see inProcessControlPlane).
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == "--role=collector" {
		os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
	}
	inProcessControlPlane = false
	os.Exit(m.Run())
}

func TestClassify(t *testing.T) {
	for _, tc := range []struct {
		method, url, verb, resource string
	}{
		{"GET", "/api/v1/namespaces/ns/configmaps/a", verbGet, "configmaps"},
		{"GET", "/api/v1/namespaces/ns/configmaps", verbListNamespaced, "configmaps"},
		{"GET", "/api/v1/namespaces/ns/configmaps?limit=500", verbListNamespaced, "configmaps"},
		{"GET", "/api/v1/configmaps?limit=500&resourceVersion=0", verbList, "configmaps"},
		{"GET", "/api/v1/configmaps?allowWatchBookmarks=true&watch=true", verbWatch, "configmaps"},
		{"GET", "/api/v1/namespaces/ns/configmaps?fieldSelector=metadata.name%3Da&watch=1", verbWatch, "configmaps"},
		{"GET", "/api/v1/watch/namespaces/ns/configmaps", verbWatch, "configmaps"},
		{"GET", "/api/v1/configmaps?allowWatchBookmarks=true&resourceVersionMatch=NotOlderThan&sendInitialEvents=true&watch=true", verbList, "configmaps"},
		{"GET", "/apis/apps/v1/namespaces/ns/deployments/d", verbGet, "apps/deployments"},
		{"GET", "/apis/apps/v1/deployments?watch=true", verbWatch, "apps/deployments"},
		{"GET", "/apis/apps/v1/namespaces/ns/deployments/d/scale", verbGet, "apps/deployments/scale"},
		{"DELETE", "/api/v1/namespaces/ns/configmaps/a", verbDelete, "configmaps"},
		{"DELETE", "/api/v1/namespaces/ns/configmaps", verbDeleteCollection, "configmaps"},
		{"PATCH", "/api/v1/namespaces/ns/configmaps/a", verbPatch, "configmaps"},
		{"PUT", "/api/v1/namespaces/ns/configmaps/a", verbUpdate, "configmaps"},
		{"POST", "/api/v1/namespaces/ns/events", verbCreate, "events"},
		{"POST", "/apis/events.k8s.io/v1/namespaces/ns/events", verbCreate, "events.k8s.io/events"},
		{"GET", "/api/v1/namespaces/ns", verbGet, "namespaces"},
		{"GET", "/api/v1/namespaces", verbList, "namespaces"},
		{"PUT", "/api/v1/namespaces/ns/finalize", verbUpdate, "namespaces/finalize"},
		{"PATCH", "/api/v1/namespaces/ns/status", verbPatch, "namespaces/status"},
		{"GET", "/api/v1/nodes/n1", verbGet, "nodes"},
		{"GET", "/api", verbDiscovery, ""},
		{"GET", "/api/v1", verbDiscovery, ""},
		{"GET", "/apis", verbDiscovery, ""},
		{"GET", "/apis/apps", verbDiscovery, ""},
		{"GET", "/apis/apps/v1", verbDiscovery, ""},
		{"GET", "/version", verbDiscovery, ""},
		{"GET", "/openapi/v3", verbDiscovery, ""},
		{"GET", "/healthz", verbOther, ""},
		{"OPTIONS", "/api/v1/namespaces/ns/configmaps/a", verbOther, "configmaps"},
	} {
		u, err := url.Parse(tc.url)
		if err != nil {
			t.Fatal(err)
		}
		verb, res := classify(tc.method, u)
		if verb != tc.verb || res != tc.resource {
			t.Errorf("classify(%s %s) = %s %q, want %s %q", tc.method, tc.url, verb, res, tc.verb, tc.resource)
		}
	}
}

func TestMedianAndRatio(t *testing.T) {
	for _, tc := range []struct {
		xs   []float64
		want float64
	}{
		{[]float64{3}, 3},
		{[]float64{5, 1, 3}, 3},
		{[]float64{4, 1, 3, 2}, 2.5},
		{[]float64{1, math.NaN(), 9}, 5},
	} {
		if got := median(tc.xs); got != tc.want {
			t.Errorf("median(%v) = %v, want %v", tc.xs, got, tc.want)
		}
	}
	if got := median(nil); !math.IsNaN(got) {
		t.Errorf("median(nil) = %v, want NaN", got)
	}
	if got := ratio(90, 45); got != 2 {
		t.Errorf("ratio(90, 45) = %v", got)
	}
	for _, bad := range [][2]float64{{1, 0}, {math.NaN(), 1}, {1, math.NaN()}} {
		if got := ratio(bad[0], bad[1]); !math.IsNaN(got) {
			t.Errorf("ratio(%v, %v) = %v, want NaN", bad[0], bad[1], got)
		}
	}
}

func TestResultMath(t *testing.T) {
	r := result{
		Objects: 1000,
		Elapsed: 4 * time.Second,
		Calls: counts{ByVerb: map[string]int64{
			verbGet: 500, verbDelete: 1000, verbPatch: 20, verbList: 40, verbWatch: 40, verbDiscovery: 30,
		}},
		Tracked: 4000, BaselineRSS: 50_000, BaselineLiveRSS: 30_000,
		Usage: usage{MaxRSSKB: 60_000, LiveRSSKB: 32_000},
	}
	if got := r.objectsPerSecond(); got != 250 {
		t.Errorf("objects/s = %v, want 250", got)
	}
	// LIST, WATCH and discovery are not per-object calls.
	if got := r.callsPerObject(); got != 1.52 {
		t.Errorf("calls/object = %v, want 1.52", got)
	}
	if got := r.verbPerObject(verbGet); got != 0.5 {
		t.Errorf("GET/object = %v, want 0.5", got)
	}
	if got := r.rssGrowthPerObject(); got != 2.5 {
		t.Errorf("RSS growth = %v KB/object, want 2.5", got)
	}
	if got := r.liveRSSGrowthPerObject(); got != 0.5 {
		t.Errorf("live RSS growth = %v KB/object, want 0.5", got)
	}
	line := benchLine(result{Scenario: "background", Collector: "kgc", Budget: "kcm", Objects: 10, Elapsed: time.Second, Usage: usage{MaxRSSKB: 2048}})
	want := "BenchmarkSideBySide/background/kgc/kcm \t1\t1000000000 ns/op\t0.000 calls/object\t10.00 objects/s\t2.0 MB-peak-rss\t0.00 cpu-s"
	if line != want {
		t.Errorf("benchLine:\n got %q\nwant %q", line, want)
	}
}

func TestCountsSub(t *testing.T) {
	before := counts{ByVerb: map[string]int64{verbGet: 3, verbWatch: 2}, ByResource: map[string]int64{"GET configmaps": 3}, Conns: 4}
	after := counts{ByVerb: map[string]int64{verbGet: 10, verbWatch: 2, verbDelete: 5}, ByResource: map[string]int64{"GET configmaps": 10, "DELETE configmaps": 5}, Conns: 6}
	d := after.sub(before)
	if d.ByVerb[verbGet] != 7 || d.ByVerb[verbDelete] != 5 || d.Conns != 2 {
		t.Errorf("sub = %+v", d)
	}
	if _, ok := d.ByVerb[verbWatch]; ok {
		t.Errorf("unchanged verbs should be dropped: %+v", d.ByVerb)
	}
	if got := d.perObject(); got != 12 {
		t.Errorf("perObject = %d, want 12", got)
	}
}

func TestParseStatusKB(t *testing.T) {
	status := "Name:\tx\nVmPeak:\t  99999 kB\nVmHWM:\t   12345 kB\nVmRSS:\t 100 kB\n"
	if got, err := parseStatusKB(status, "VmHWM"); err != nil || got != 12345 {
		t.Errorf("VmHWM = %d, %v; want 12345", got, err)
	}
	if got, err := parseStatusKB(status, "VmRSS"); err != nil || got != 100 {
		t.Errorf("VmRSS = %d, %v; want 100", got, err)
	}
	if _, err := parseStatusKB("Name:\tx\n", "VmHWM"); err == nil {
		t.Error("no VmHWM: no error")
	}
}

func TestWriteTable(t *testing.T) {
	mk := func(coll string, run int, secs float64) result {
		return result{Scenario: "background", Collector: coll, Budget: "kcm", Run: run, Objects: 100,
			Elapsed: time.Duration(secs * float64(time.Second)), Calls: counts{ByVerb: map[string]int64{verbDelete: 100}}}
	}
	rs := []result{mk("upstream", 0, 10), mk("kgc", 0, 4), mk("upstream", 1, 8), mk("kgc", 1, 5), mk("upstream", 2, 9), mk("kgc", 2, 100)}
	var b bytes.Buffer
	writeTable(&b, rs, []string{"kcm"}, "test machine")
	// Medians: upstream 9 s → 11.1 objects/s, kgc 5 s → 20.0 objects/s.
	if !strings.Contains(b.String(), "| Background fan-out | kcm | 100 | 11.1 | 20.0 | 1.80× | 1.00 | 1.00 |") {
		t.Errorf("table:\n%s", b.String())
	}
}

func TestUsageErrors(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run([]string{"--scenarios", "nope"}, nil, &out, &errb); code != 2 || !strings.Contains(errb.String(), `unknown scenario "nope"`) {
		t.Errorf("code %d, stderr %q", code, errb.String())
	}
	errb.Reset()
	if code := run([]string{"--budgets", "kcm,fast"}, nil, &out, &errb); code != 2 || !strings.Contains(errb.String(), `unknown budget "fast"`) {
		t.Errorf("code %d, stderr %q", code, errb.String())
	}
}

// TestSmoke runs the background scenario with tiny sizes for both
// collectors, end to end: control plane, proxy, child processes.
func TestSmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a control plane")
	}
	var out, errb bytes.Buffer
	md := t.TempDir() + "/table.md"
	code := run([]string{"--scenarios", "background,limit", "--budgets", "unthrottled", "--runs", "1",
		"--fan-owners", "2", "--fan-dependents", "10", "--limit", "50", "--timeout", "2m", "--markdown", md}, nil, &out, &errb)
	t.Logf("stdout:\n%s\nstderr:\n%s", out.String(), errb.String())
	if code != 0 {
		t.Fatalf("exit code %d", code)
	}
	for _, want := range []string{
		"BenchmarkSideBySide/background/upstream/unthrottled \t1\t",
		"BenchmarkSideBySide/background/kgc/unthrottled \t1\t",
		"BenchmarkSideBySide/limit/client32/process \t1\t",
		"BenchmarkSideBySide/limit/client32/proxy \t1\t",
		"BenchmarkSideBySide/limit/client32/direct \t1\t",
		"from a process of its own",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q", want)
		}
	}
	// Upstream GETs each owner before deleting a dependent: one GET and one
	// DELETE per dependent. Whatever kgc does, it DELETEs each one once.
	// Columns: GET, namespaced LIST, DELETE, ...
	if got := verbRow(out.String(), "Background fan-out", "unthrottled", "upstream"); len(got) < 3 || got[0] != "1.00" || got[2] != "1.00" {
		t.Errorf("upstream GET, namespaced LIST, DELETE per object = %v, want 1.00, _, 1.00", got)
	}
	if got := verbRow(out.String(), "Background fan-out", "unthrottled", "kgc"); len(got) < 3 || got[2] != "1.00" {
		t.Errorf("kgc GET, namespaced LIST, DELETE per object = %v, want DELETE 1.00", got)
	}
	b, err := os.ReadFile(md)
	if err != nil || !strings.Contains(string(b), "Machine: ") {
		t.Errorf("markdown file: %v\n%s", err, b)
	}
}

// TestBulkSmoke runs the bulk deletions that need no real cluster with
// tiny sizes (far below any breaker threshold) for both collectors, end
// to end: the CRD, the DeleteCollection, the backlog.
func TestBulkSmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("starts control planes")
	}
	var out, errb bytes.Buffer
	code := run([]string{"--scenarios", "crd-delete,collection,backlog", "--budgets", "unthrottled", "--runs", "1",
		"--crd-instances", "20", "--collection-owners", "20", "--backlog", "20", "--timeout", "2m"}, nil, &out, &errb)
	t.Logf("stdout:\n%s\nstderr:\n%s", out.String(), errb.String())
	if code != 0 {
		t.Fatalf("exit code %d", code)
	}
	for _, row := range []string{
		"| CRD deleted with its instances | unthrottled | upstream | 20 | 1/1 | – |",
		"| CRD deleted with its instances | unthrottled | kgc | 20 | 1/1 | – |",
		"| DeleteCollection of owners | unthrottled | upstream | 20 | 1/1 | – |",
		"| DeleteCollection of owners | unthrottled | kgc | 20 | 1/1 | – |",
		"| Backlog at start-up | unthrottled | upstream | 20 | 1/1 | – |",
		"| Backlog at start-up | unthrottled | kgc | 20 | 1/1 | – |",
	} {
		if !strings.Contains(out.String(), row) {
			t.Errorf("output lacks %q", row)
		}
	}
	// Each collector deletes each dependent once.
	for _, sc := range []string{"CRD deleted with its instances", "DeleteCollection of owners", "Backlog at start-up"} {
		for _, coll := range []string{"upstream", "kgc"} {
			if got := verbRow(out.String(), sc, "unthrottled", coll); len(got) < 3 || got[2] != "1.00" {
				t.Errorf("%s, %s: GET, namespaced LIST, DELETE per object = %v, want DELETE 1.00", sc, coll, got)
			}
		}
	}
}

// verbRow returns the cells after the collector column of a row of the
// calls-by-verb table.
func verbRow(out, scenario, budget, collector string) []string {
	prefix := "| " + scenario + " | " + budget + " | " + collector + " | "
	for _, line := range strings.Split(out, "\n") {
		if rest, ok := strings.CutPrefix(line, prefix); ok {
			return strings.Split(strings.TrimSuffix(rest, " |"), " | ")
		}
	}
	return nil
}

func TestLimitRatioRunByRun(t *testing.T) {
	mk := func(sc, coll, budget string, run int, secs float64) result {
		return result{Scenario: sc, Collector: coll, Budget: budget, Run: run, Objects: 1000, Elapsed: time.Duration(secs * float64(time.Second))}
	}
	// The limit swings from run to run; kgc keeps 90% of it in every run.
	rs := []result{
		mk("background", "kgc", "unthrottled", 0, 1/0.9), mk("limit", "client32", "proxy", 0, 1), mk("limit", "client32", "direct", 0, 0.5),
		mk("background", "kgc", "unthrottled", 1, 2/0.9), mk("limit", "client32", "proxy", 1, 2), mk("limit", "client32", "direct", 1, 1),
		mk("background", "kgc", "unthrottled", 2, 0.5/0.9), mk("limit", "client32", "proxy", 2, 0.5), mk("limit", "client32", "direct", 2, 0.25),
		mk("background", "kgc", "unthrottled", 3, 1.2), // no limit in this run: not in the run-by-run ratios
		// The own-process client is slower; kgc keeps 80% of it.
		mk("limit", "client32", "process", 0, 1/0.9*0.8), mk("limit", "client32", "process", 1, 2/0.9*0.8),
	}
	per := perRunLimitRatios(group(rs), collectorKGC, "proxy")
	if len(per) != 3 {
		t.Fatalf("per-run ratios = %v, want 3", per)
	}
	for _, x := range per {
		if math.Abs(x-0.9) > 1e-9 {
			t.Errorf("per-run ratio %v, want 0.9", x)
		}
	}
	var b bytes.Buffer
	writeTable(&b, rs, []string{"unthrottled"}, "test machine")
	for _, want := range []string{
		"of the proxied limit (run by run: median 90%, 90%–90%)",
		"of the own-process one (run by run: median 80%, 80%–80%)",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, b.String())
		}
	}
	if per := perRunLimitRatios(group(rs), collectorKGC, "process"); len(per) != 2 {
		t.Errorf("per-run ratios against the own-process limit = %v, want 2 (runs 0 and 1)", per)
	}
}

// TestClusterSmoke runs real-cluster scenarios (kube-controller-manager,
// kube-scheduler, simulated nodes) with tiny sizes for both collectors,
// end to end. Every cell also checks that none of the cluster's other
// clients reached the collector's proxy (foreignRequests).
func TestClusterSmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster")
	}
	var out, errb bytes.Buffer
	code := run([]string{"--scenarios", "deployment-foreground,cronjob,rollout,namespace", "--budgets", "unthrottled", "--runs", "1",
		"--nodes", "1", "--deployment-pods", "4", "--cronjob-jobs", "3", "--rollout-replicas", "3", "--rollouts", "2", "--rollout-interval", "200ms",
		"--namespace-owners", "5", "--timeout", "2m"}, nil, &out, &errb)
	t.Logf("stdout:\n%s\nstderr:\n%s", out.String(), errb.String())
	if code != 0 {
		t.Fatalf("exit code %d", code)
	}
	for _, sc := range []string{"deployment-foreground", "cronjob", "rollout", "namespace"} {
		for _, coll := range []string{"upstream", "kgc"} {
			if want := "BenchmarkSideBySide/" + sc + "/" + coll + "/unthrottled \t1\t"; !strings.Contains(out.String(), want) {
				t.Errorf("output lacks %q", want)
			}
		}
	}
	if !strings.Contains(out.String(), "| Deployment deleted, Foreground (cluster) | unthrottled | 6 |") {
		t.Errorf("no owner-gone row for the Foreground Deployment deletion (4 Pods, the ReplicaSet, the Deployment)")
	}
	// The CronJob controller deletes the Jobs; the collectors delete each
	// Pod once (upstream GETs it first).
	if got := verbRow(out.String(), "CronJob history limit lowered (cluster)", "unthrottled", "upstream"); len(got) < 3 || got[0] != "1.00" || got[2] != "1.00" {
		t.Errorf("upstream GET, namespaced LIST, DELETE per Pod = %v, want 1.00, _, 1.00", got)
	}
	if got := verbRow(out.String(), "CronJob history limit lowered (cluster)", "unthrottled", "kgc"); len(got) < 3 || got[2] != "1.00" {
		t.Errorf("kgc GET, namespaced LIST, DELETE per Pod = %v, want DELETE 1.00", got)
	}
}

func TestForeignRequests(t *testing.T) {
	mine := counts{
		ByResource: map[string]int64{"GET pods": 3, "DELETE pods": 3, "PATCH apps/replicasets": 1, "CREATE events": 2, "LIST pods": 1, "WATCH pods": 1},
		ByAgent:    map[string]int64{"kgc-bench": 11},
	}
	if got := foreignRequests(mine, false); len(got) != 0 {
		t.Errorf("a collector's requests taken for others': %v", got)
	}
	theirs := counts{
		ByResource: map[string]int64{"GET pods": 3, "CREATE pods": 1, "CREATE pods/binding": 1, "PATCH pods/status": 2, "UPDATE coordination.k8s.io/leases": 1, "CREATE coordination.k8s.io/leases": 1},
		ByAgent:    map[string]int64{"kgc-bench": 5, "kube-scheduler": 2},
	}
	want := []string{"2 from kube-scheduler", "CREATE coordination.k8s.io/leases=1", "CREATE pods/binding=1", "CREATE pods=1", "PATCH pods/status=2", "UPDATE coordination.k8s.io/leases=1"}
	if got := foreignRequests(theirs, false); !slices.Equal(got, want) {
		t.Errorf("foreignRequests = %v, want %v", got, want)
	}
	// kgc records its breaker's trips and its orphan journal on Leases
	// of its own; a Lease write is then not foreign, the rest still is.
	want = []string{"2 from kube-scheduler", "CREATE pods/binding=1", "CREATE pods=1", "PATCH pods/status=2"}
	if got := foreignRequests(theirs, true); !slices.Equal(got, want) {
		t.Errorf("foreignRequests with the collector's own Leases = %v, want %v", got, want)
	}
}

// TestKGCOptions: the kgc child collects with what `kgc run` collects
// with at its default flags (the deletion breaker on its Lease, the
// restore-signature hold, the orphan journal), with the cell's budget,
// workers and write slots; with --kgc-options=library, the library's
// defaults with the orphan journal.
func TestKGCOptions(t *testing.T) {
	f := collectorFlags{QPS: 40, Burst: 30, Workers: 20, MaxWrites: 7}
	opts, gcPercent, err := kgcOptions(f)
	if err != nil {
		t.Fatal(err)
	}
	if opts.QPS != 40 || opts.Burst != 30 || opts.Workers != 20 || opts.MaxWritesInFlight != 7 {
		t.Errorf("budget %v/%d, workers %d, write slots %d; want 40/30, 20, 7", opts.QPS, opts.Burst, opts.Workers, opts.MaxWritesInFlight)
	}
	if opts.Breaker == nil || opts.Breaker.LeaseNamespace != "kube-system" || opts.Breaker.LeaseName != "kgc" {
		t.Errorf("breaker %+v, want one on the Lease kube-system/kgc", opts.Breaker)
	}
	if !opts.HoldRestored {
		t.Error("no restore-signature hold")
	}
	if j := opts.OrphanJournal; j == nil || j.LeaseNamespace != "kube-system" || j.LeaseName != "kgc-orphans" {
		t.Errorf("orphan journal %+v, want one on the Lease kube-system/kgc-orphans", j)
	}
	if gcPercent <= 0 {
		t.Errorf("GC percent %d", gcPercent)
	}
	want := []types.NamespacedName{{Namespace: "kube-system", Name: "kgc"}, {Namespace: "kube-system", Name: "kgc-orphans"}}
	if got := kgcLeases(kgcOptionsRun); !slices.Equal(got, want) {
		t.Errorf("kgcLeases(run) = %v, want %v", got, want)
	}

	f.KGCOptions = kgcOptionsLibrary
	opts, _, err = kgcOptions(f)
	if err != nil {
		t.Fatal(err)
	}
	if opts.Breaker != nil || opts.HoldRestored || opts.OrphanJournal == nil {
		t.Errorf("library options: breaker %+v, hold %v, journal %+v; want none, false, one", opts.Breaker, opts.HoldRestored, opts.OrphanJournal)
	}
	f.KGCOptions = "nope"
	if _, _, err := kgcOptions(f); err == nil {
		t.Error("no error for --kgc-options=nope")
	}
}

func TestParseTrips(t *testing.T) {
	log := `I0101 00:00:00.000000       1 workers.go:10] "Deleting" object="v1/Secret ns/dep-00001"
E0101 00:00:01.000000       1 hold.go:174] "Deletion circuit breaker tripped: holding deletions on this basis until an operator resumes" signal="dangling-fraction" count=1001 limit=1000 window="10m0s" object="v1/Secret ns/dep-01000" because="1001 owners that kgc did not delete itself were found gone within 10m0s, each with dependents to delete, more than 1000 (the larger of the dangling fraction of the graph's 4000 objects and the minimum)"
E0101 00:00:01.000000       1 hold.go:174] "Deletion circuit breaker tripped: holding deletions on this basis until an operator resumes" signal="dangling-fraction" count=1001 limit=1000 window="10m0s" object="v1/Secret ns/dep-01000" because="1001 owners that kgc did not delete itself were found gone within 10m0s, each with dependents to delete, more than 1000 (the larger of the dangling fraction of the graph's 4000 objects and the minimum)"
E0101 00:00:02.000000       1 breaker.go:140] "Deletion circuit breaker tripped before this kgc started and was not resumed: holding deletions on this basis until an operator resumes" signal="unobserved-owners" trippedAt="2026-01-01 00:00:00 +0000 UTC"
`
	want := []string{"dangling-fraction 1001/1000", "unobserved-owners (on the Lease at start)"}
	if got := parseTrips(log); !slices.Equal(got, want) {
		t.Errorf("parseTrips = %q, want %q", got, want)
	}
	if got := parseTrips("I0101 nothing tripped here\n"); len(got) != 0 {
		t.Errorf("parseTrips of a log without trips = %q", got)
	}
}

// TestBulkTable: an unfinished cell is in the bulk deletions' table with
// what it left and its trips, and in no other table; the finished ones
// are compared with upstream's.
func TestBulkTable(t *testing.T) {
	rs := []result{
		{Scenario: scCollection, Collector: collectorUpstream, Budget: "kcm", Objects: 1500, Elapsed: 110 * time.Second, OwnerGone: 2 * time.Second,
			Calls: counts{ByVerb: map[string]int64{verbGet: 1500, verbDelete: 1500}}},
		{Scenario: scCollection, Collector: collectorKGC, Budget: "kcm", Objects: 1500, Elapsed: 90 * time.Second, OwnerGone: 2 * time.Second,
			Incomplete: true, Left: 500, Trips: []string{"dangling-fraction 1001/1000"},
			Calls: counts{ByVerb: map[string]int64{verbDelete: 1000}}},
		{Scenario: scCRDDelete, Collector: collectorUpstream, Budget: "kcm", Objects: 2000, Elapsed: 100 * time.Second},
		{Scenario: scCRDDelete, Collector: collectorKGC, Budget: "kcm", Objects: 2000, Elapsed: 50 * time.Second},
	}
	var b bytes.Buffer
	writeTable(&b, rs, []string{"kcm"}, "test machine")
	out := b.String()
	for _, want := range []string{
		"| DeleteCollection of owners | kcm | upstream | 1500 | 1/1 | – | 2.00 | 110.00 | – | 13.6 | 2.00 | none |",
		"| DeleteCollection of owners | kcm | kgc | 1500 | 0/1 | 500 | 2.00 | – | – | – | 1.00 | dangling-fraction 1001/1000 |",
		"| CRD deleted with its instances | kcm | kgc | 2000 | 1/1 | – | – | 50.00 | 0.50× | 40.0 | 0.00 | none |",
		// The main table has the finished cells only.
		"| DeleteCollection of owners | kcm | 1500 | 13.6 | – | – |",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
}

func TestExpandBulk(t *testing.T) {
	got := expandScenarios([]string{"bulk"})
	want := []string{scCRDDelete, scCollection, scNamespace, scBacklog}
	if !slices.Equal(got, want) {
		t.Errorf("expandScenarios(bulk) = %v, want %v", got, want)
	}
}

func TestExpandScenarios(t *testing.T) {
	got := expandScenarios([]string{"background", "deployment", "deployment-background", "cluster"})
	want := []string{"background", "deployment-background", "deployment-foreground", "cronjob", "cronjob-delete", "rollout"}
	if !slices.Equal(got, want) {
		t.Errorf("expandScenarios = %v, want %v", got, want)
	}
}
