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
)

// TestMain lets the test binary serve as the collector child of the smoke
// test, as the kgc-bench binary does for itself.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == "--role=collector" {
		os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
	}
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
	code := run([]string{"--scenarios", "deployment-foreground,cronjob,rollout", "--budgets", "unthrottled", "--runs", "1",
		"--nodes", "1", "--deployment-pods", "4", "--cronjob-jobs", "3", "--rollout-replicas", "3", "--rollouts", "2", "--rollout-interval", "200ms",
		"--timeout", "2m"}, nil, &out, &errb)
	t.Logf("stdout:\n%s\nstderr:\n%s", out.String(), errb.String())
	if code != 0 {
		t.Fatalf("exit code %d", code)
	}
	for _, sc := range []string{"deployment-foreground", "cronjob", "rollout"} {
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
	if got := foreignRequests(mine); len(got) != 0 {
		t.Errorf("a collector's requests taken for others': %v", got)
	}
	theirs := counts{
		ByResource: map[string]int64{"GET pods": 3, "CREATE pods": 1, "CREATE pods/binding": 1, "PATCH pods/status": 2, "UPDATE coordination.k8s.io/leases": 1},
		ByAgent:    map[string]int64{"kgc-bench": 5, "kube-scheduler": 2},
	}
	want := []string{"2 from kube-scheduler", "CREATE pods/binding=1", "CREATE pods=1", "PATCH pods/status=2", "UPDATE coordination.k8s.io/leases=1"}
	if got := foreignRequests(theirs); !slices.Equal(got, want) {
		t.Errorf("foreignRequests = %v, want %v", got, want)
	}
}

func TestExpandScenarios(t *testing.T) {
	got := expandScenarios([]string{"background", "deployment", "deployment-background", "cluster"})
	want := []string{"background", "deployment-background", "deployment-foreground", "cronjob", "cronjob-delete", "rollout"}
	if !slices.Equal(got, want) {
		t.Errorf("expandScenarios = %v, want %v", got, want)
	}
}
