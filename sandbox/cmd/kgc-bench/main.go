// Command kgc-bench measures kgc side by side with kube-controller-manager's
// own garbage collector (k8s.io/kubernetes/pkg/controller/garbagecollector
// v1.36.3, wired as kube-controller-manager wires it) on the sandbox control
// plane, from the same flags: each collector gets --qps and --burst as its
// --kube-api-qps and --kube-api-burst and derives its clients' budgets from
// them as its binary does (twice the QPS for the collector's own requests,
// in both).
//
// For every scenario and run it starts a fresh control plane (in this
// process), puts a counting reverse proxy in front of the apiserver, and runs
// each collector as a child process (this binary, --role=collector) that
// talks only to the proxy: the proxy's counts are the collector's API
// requests by verb and resource, and the child's rusage is its own peak RSS
// and CPU time. Collectors alternate between runs. It prints every cell,
// then Go benchmark lines (for benchstat) and Markdown tables of the
// medians.
//
// kgc runs with the options `kgc run` collects with at its default flags
// (internal/app's, as `kgc run` builds them: the deletion breaker on its
// Lease, the restore-signature hold, the orphan journal), with the cell's
// budget and workers; --kgc-options=library runs the library's defaults
// instead (no breaker, no hold). The Leases kgc writes are deleted after
// every cell, so that no trip carries over to the next.
//
//	go run ./sandbox/cmd/kgc-bench --quick
//	go run ./sandbox/cmd/kgc-bench --runs 3 --markdown bench.md
//
// Scenarios (objects are ConfigMaps; "objects" is what the collector acted on):
//
//	background  K owners × M dependents (M × --unthrottled-scale in the unthrottled budget); owners deleted
//	            Background; until every dependent is gone (K·M objects)
//	foreground  the same with blockOwnerDeletion, owners deleted Foreground; until the owners are gone (K·M + K)
//	chain       a chain of D objects each blocking its owner; the root deleted Foreground; until it is gone (D)
//	orphan      one owner × N dependents deleted Orphan; until the owner is gone and no dependent refers to it (N + 1)
//	orphan-background
//	            two owners sharing N dependents, one deleted Orphan and one Background at once; when the orphaning
//	            owner is gone (what `kubectl delete --cascade=orphan` waits for) and until everything is settled:
//	            both owners gone, no dependent refers to either (N orphaned, then deleted or kept, + 1)
//	sweep       dependents of owners that never existed (unique and shared owner UIDs), created before the
//	            collector starts; from its start until all are gone
//	populated   N objects with live owners; time to sync, time until a probe cascade completes, GETs, and
//	            peak RSS growth per object over the same collector on the empty cluster
//	limit       raw DELETE rate of an unthrottled 32-way client, through the proxy (from a process of its own,
//	            as the collectors are, and from this one) and directly, as many
//	            objects as the Background fan-out, timed like a cell (until the watcher sees them gone);
//	            measured on each background run's control plane right after its cells when both are
//	            selected, and compared with the fan-out run by run
//
// Bulk deletions (bulk.go; the group bulk): legitimate deletions of many
// owners at once, each to be collected in full. A kgc cell whose
// deletion breaker tripped and which then collects nothing for --stall,
// or any cell that collects nothing for --idle, ends there, reported with
// what it left (and the run exits non-zero):
//
//	crd-delete  a CRD with --crd-instances instances, each owning a ConfigMap (controller,
//	            blockOwnerDeletion), deleted; until the CRD and every ConfigMap are gone (N)
//	collection  --collection-owners ConfigMaps labelled app=x, each owning a Secret, removed by one
//	            DeleteCollection (kubectl delete configmaps -l app=x); until every Secret is gone (N)
//	backlog     --backlog owners, each with a dependent, deleted Background while no collector runs;
//	            from the collector's start until every dependent is gone (N)
//	namespace   on a real cluster (kube-controller-manager's namespace controller empties it, owners
//	            first): a namespace with --namespace-owners ConfigMaps, each owning a ConfigMap,
//	            deleted; until it is gone (N)
//
// Real-cluster scenarios (--cluster, or --scenarios=cluster or some of them;
// cluster.go): one sandbox per run with kube-controller-manager (every
// controller but its garbage collector), kube-scheduler and simulated nodes
// on which Pods run and terminate about 1 s after their deletion; the
// workloads are made by the real controllers, each cell in a namespace of
// its own; "owner gone" is reported beside the end of the phase:
//
//	deployment-background  a Deployment of --deployment-pods Pods deleted Background; until it, its
//	                       ReplicaSet and its Pods are gone (Pods + 1; the owner is the Deployment)
//	deployment-foreground  the same deleted Foreground (Pods + 2: the ReplicaSet, the Deployment's finalizer)
//	cronjob                a CronJob with a history of --cronjob-jobs completed Jobs, each with its Pod;
//	                       its successfulJobsHistoryLimit lowered to 0: the CronJob controller deletes the
//	                       Jobs, the collector their Pods; until all are gone (Pods; the owners are the Jobs)
//	cronjob-delete         the same CronJob deleted Background (Jobs + Pods; the owner is the CronJob)
//	rollout                a Deployment of --rollout-replicas Pods (revisionHistoryLimit 0) rolled --rollouts
//	                       times, --rollout-interval apart; until no old ReplicaSet or Pod of one is left
//	                       (the Pods and ReplicaSets deleted by anyone: mostly the controllers' work)
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"

	"github.com/kgc-dev/kgc/sandbox/controlplane"
	"github.com/kgc-dev/kgc/sandbox/internal/cpproc"
)

type budget struct {
	qps   float64
	burst int
}

type options struct {
	runs       int
	scenarios  []string
	collectors []string
	budgetList []string
	budgets    map[string]budget
	workers    int
	// kgcMaxWrites is kgc's MaxWritesInFlight; 0 is its default.
	kgcMaxWrites int
	timeout      time.Duration

	fanOwners, fanDeps int
	unthrottledScale   int // the fan-outs' dependents are this many times more in the unthrottled budget
	chain              int
	orphan             int
	orphanBackground   int
	sweepUnique        int
	sweepShared        int
	sweepSharedOwners  int
	populated          int
	limit              int

	// The bulk deletions (bulk.go).
	crdInstances     int
	collectionOwners int
	namespaceOwners  int
	backlog          int
	// stall: a bulk deletion whose kgc logged a breaker trip and has
	// collected nothing for this long ends, with what is left reported.
	stall time.Duration
	// idle: a bulk deletion where nothing has been collected for this
	// long ends, whatever the collector, with what is left reported.
	idle time.Duration
	// kgcOptions: kgcOptionsRun or kgcOptionsLibrary (collector.go).
	kgcOptions string
	childLogs  string // directory the collectors' logs are kept in

	// The real-cluster scenarios (cluster.go).
	nodes           int
	deploymentPods  int
	cronJobJobs     int
	rolloutReplicas int
	rollouts        int
	rolloutInterval time.Duration

	markdown   string
	verbose    bool
	cpuProfile string // directory for the collectors' CPU profiles
	memProfile string // directory for the collectors' allocation profiles
}

var allScenarios = []string{"background", "foreground", "chain", "orphan", "orphan-background", "sweep", "populated", "limit", scCRDDelete, scCollection, scBacklog}

// defaultScenarios are what runs without --scenarios: every scenario but
// the real-cluster ones, and the namespace deletion, which runs on a real
// cluster (kube-controller-manager's namespace controller empties the
// namespace).
var defaultScenarios = append(slices.Clone(allScenarios), scNamespace)

func main() {
	os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("kgc-bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		role   = fs.String("role", "", "internal: 'collector' runs one collector (used by the benchmark for its children)")
		cf     collectorFlags
		o      options
		quick  = fs.Bool("quick", false, "small sizes and 1 run: finishes in a few minutes")
		scen   = fs.String("scenarios", strings.Join(defaultScenarios, ","), "comma-separated scenarios: "+strings.Join(allScenarios, ",")+"; on a real cluster: "+scNamespace+","+strings.Join(clusterScenarios, ",")+" (groups: cluster = all of these but namespace, deployment = both deployment-*, bulk = "+strings.Join(bulkScenarios, ",")+")")
		clus   = fs.Bool("cluster", false, "run the real-cluster scenarios (kube-controller-manager, kube-scheduler, simulated nodes): the same as --scenarios=cluster")
		colls  = fs.String("collectors", "upstream,kgc", "comma-separated collectors: upstream, kgc")
		buds   = fs.String("budgets", "kcm,unthrottled", "comma-separated budgets: kcm, unthrottled")
		kcmQPS = fs.Float64("qps", 20, "--kube-api-qps of the kcm budget (kube-controller-manager's default); each collector derives its clients' budgets from it as its binary does: kube-controller-manager's collector's metadata client, and kgc's workers, get twice it")
		kcmB   = fs.Int("burst", 30, "--kube-api-burst of the kcm budget (kube-controller-manager's default)")
		unQPS  = fs.Float64("unthrottled-qps", 5000, "--kube-api-qps of the unthrottled budget")
		unB    = fs.Int("unthrottled-burst", 10000, "burst of the unthrottled budget")
		scale  = fs.String("scale", "", "run the scale benchmark instead (scale.go): comma-separated cluster sizes in objects, growing (e.g. 100000,300000,1000000); every collector starts on one control plane populated to each size in turn")
		scaleU = fs.Int("scale-upstream-max", 300000, "scale benchmark: the largest size upstream's collector is started on")
		scaleC = fs.String("scale-collectors", "bare,bare-stream,kgc,upstream", "scale benchmark: collectors (bare: a plain metadata client paging the objects; bare-stream: the same client with one streaming watch list)")
		scaleN = fs.Int("scale-namespaces", 1, "scale benchmark: the namespaces the objects are spread over (an owner and its dependents share one)")
		scaleS = fs.String("scale-shards", "", "scale benchmark: also start S kgc processes at once, each keeping one shard of the namespaces (docs/scaling.md's design; needs --scale-namespaces well above S), for each S of this comma-separated list")
	)
	fs.StringVar(&cf.Collector, "collector", "", "internal: collector of the collector role")
	fs.StringVar(&cf.Server, "server", "", "internal: apiserver URL of the collector role")
	fs.StringVar(&cf.CPUProfile, "child-cpuprofile", "", "internal: CPU profile file of the collector role")
	fs.StringVar(&cf.MemProfile, "child-memprofile", "", "internal: allocation profile file of the collector role")
	fs.StringVar(&cf.Shard, "shard", "", "internal: the kgc collector role keeps only shard i/S of the namespaces")
	fs.StringVar(&o.memProfile, "memprofile", "", "write each collector's allocation profile (allocs since it started, and the heap in use, when it is stopped) to this directory as <scenario>-<collector>-<budget>-<run>.alloc.pprof")
	fs.StringVar(&o.cpuProfile, "cpuprofile", "", "write each collector's CPU profile (its whole life) to this directory as <scenario>-<collector>-<budget>-<run>.pprof")
	fs.IntVar(&o.runs, "runs", 3, "runs per cell (collectors alternate)")
	fs.IntVar(&o.workers, "workers", 20, "collector workers (kube-controller-manager's --concurrent-gc-syncs)")
	fs.IntVar(&o.kgcMaxWrites, "kgc-max-writes", 0, "kgc's --max-writes-inflight (0: its default, twice --workers)")
	fs.DurationVar(&o.timeout, "timeout", 10*time.Minute, "limit on every wait of a cell")
	fs.IntVar(&o.fanOwners, "fan-owners", 10, "owners of the fan-out scenarios")
	fs.IntVar(&o.fanDeps, "fan-dependents", 100, "dependents per owner of the fan-out scenarios")
	fs.IntVar(&o.unthrottledScale, "unthrottled-scale", 5, "the fan-out scenarios have this many times more dependents per owner in the unthrottled budget, so that their measured phase lasts seconds, not a fraction of one")
	fs.IntVar(&o.chain, "chain", 200, "length of the foreground chain")
	fs.IntVar(&o.orphan, "orphan", 2000, "dependents of the orphan scenario (the issue's memory figure is for 10000)")
	fs.IntVar(&o.orphanBackground, "orphan-background", 300, "dependents the two owners of the orphan-background scenario share")
	fs.IntVar(&o.sweepUnique, "sweep-unique", 500, "startup sweep: dependents each with its own never-existing owner")
	fs.IntVar(&o.sweepShared, "sweep-shared", 500, "startup sweep: dependents sharing never-existing owners")
	fs.IntVar(&o.sweepSharedOwners, "sweep-shared-owners", 10, "startup sweep: the shared never-existing owners")
	fs.IntVar(&o.populated, "populated", 4000, "objects of the populated-cluster scenario (one owner per three dependents)")
	fs.IntVar(&o.limit, "limit", 0, "objects deleted by the physical-limit client (default: as many as the unthrottled Background fan-out collects, fan-owners × fan-dependents × unthrottled-scale)")
	fs.IntVar(&o.crdInstances, "crd-instances", 10000, "crd-delete: instances of the deleted CRD, each owning a ConfigMap")
	fs.IntVar(&o.collectionOwners, "collection-owners", 5000, "collection: ConfigMap owners removed by one DeleteCollection, each owning a Secret")
	fs.IntVar(&o.namespaceOwners, "namespace-owners", 5000, "namespace: ConfigMap owners in the deleted namespace, each owning a ConfigMap")
	fs.IntVar(&o.backlog, "backlog", 5000, "backlog: owners deleted while no collector runs, each with a dependent ConfigMap")
	fs.DurationVar(&o.stall, "stall", 30*time.Second, "bulk deletions: end a cell whose kgc logged a deletion breaker trip once it has collected nothing for this long, reporting what is left (0: wait for --timeout)")
	fs.DurationVar(&o.idle, "idle", 3*time.Minute, "bulk deletions: end a cell in which nothing has been collected for this long, whatever the collector, reporting what is left (0: wait for the timeout: the larger of --timeout and 1 s per 5 objects)")
	fs.StringVar(&o.kgcOptions, "kgc-options", kgcOptionsRun, "options of the kgc collector: "+kgcOptionsRun+" (what `kgc run` collects with at its default flags: the deletion breaker, the restore-signature hold, the orphan journal) or "+kgcOptionsLibrary+" (the library's defaults: no breaker, no hold; with the orphan journal)")
	fs.StringVar(&o.childLogs, "child-logs", "", "keep each collector's log in this directory as <scenario>-<collector>-<budget>-<run>.log")
	fs.IntVar(&o.nodes, "nodes", controlplane.DefaultNodes, "real-cluster scenarios: simulated nodes")
	fs.IntVar(&o.deploymentPods, "deployment-pods", 1000, "deployment-*: Pods of the deleted Deployment")
	fs.IntVar(&o.cronJobJobs, "cronjob-jobs", 500, "cronjob, cronjob-delete: completed Jobs (each with its Pod) in the CronJob's history")
	fs.IntVar(&o.rolloutReplicas, "rollout-replicas", 500, "rollout: replicas of the rolled Deployment")
	fs.IntVar(&o.rollouts, "rollouts", 5, "rollout: how many times the Deployment is rolled")
	fs.DurationVar(&o.rolloutInterval, "rollout-interval", time.Second, "rollout: time between two rollouts")
	fs.StringVar(&o.markdown, "markdown", "", "also write the Markdown tables to this file")
	fs.BoolVar(&o.verbose, "v", false, "log the control plane's progress")
	// The collector role reads --qps/--burst/--workers as its own budget.
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *role == "collector" {
		cf.QPS, cf.Burst, cf.Workers, cf.MaxWrites, cf.KGCOptions = *kcmQPS, *kcmB, o.workers, o.kgcMaxWrites, o.kgcOptions
		klog.SetOutput(stderr)
		klog.LogToStderr(false)
		if err := runCollectorRole(cf, stdin, stdout); err != nil {
			fmt.Fprintln(stderr, "collector:", err)
			return 1
		}
		return 0
	}
	if *role != "" {
		fmt.Fprintf(stderr, "unknown role %q\n", *role)
		return 2
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if *quick {
		def := func(name string, p *int, v int) {
			if !set[name] {
				*p = v
			}
		}
		def("runs", &o.runs, 1)
		def("fan-owners", &o.fanOwners, 5)
		def("fan-dependents", &o.fanDeps, 40)
		def("chain", &o.chain, 40)
		def("orphan", &o.orphan, 300)
		def("orphan-background", &o.orphanBackground, 100)
		def("sweep-unique", &o.sweepUnique, 100)
		def("sweep-shared", &o.sweepShared, 100)
		def("sweep-shared-owners", &o.sweepSharedOwners, 5)
		def("populated", &o.populated, 1000)
		def("crd-instances", &o.crdInstances, 2000)
		def("collection-owners", &o.collectionOwners, 1500)
		def("namespace-owners", &o.namespaceOwners, 1500)
		def("backlog", &o.backlog, 1500)
		def("deployment-pods", &o.deploymentPods, 200)
		def("cronjob-jobs", &o.cronJobJobs, 100)
		def("rollout-replicas", &o.rolloutReplicas, 100)
		def("rollouts", &o.rollouts, 3)
	}
	if !set["limit"] {
		// The limit deletes as many objects as the unthrottled Background
		// fan-out collects, so that the fixed costs of a measured phase
		// (its first requests, its last watch event) weigh the same in
		// both numbers that the "% of the limit" compares.
		o.limit = o.fanOwners * o.fanDeps * max(o.unthrottledScale, 1)
	}
	o.scenarios = splitList(*scen)
	if *clus && !set["scenarios"] {
		o.scenarios = slices.Clone(clusterScenarios)
	}
	o.scenarios = expandScenarios(o.scenarios)
	o.collectors = splitList(*colls)
	o.budgetList = splitList(*buds)
	o.budgets = map[string]budget{"kcm": {*kcmQPS, *kcmB}, "unthrottled": {*unQPS, *unB}}
	for _, s := range o.scenarios {
		if !slices.Contains(allScenarios, s) && !isClusterScenario(s) {
			fmt.Fprintf(stderr, "unknown scenario %q\n", s)
			return 2
		}
	}
	for _, c := range o.collectors {
		if c != collectorUpstream && c != collectorKGC {
			fmt.Fprintf(stderr, "unknown collector %q\n", c)
			return 2
		}
	}
	for _, b := range o.budgetList {
		if _, ok := o.budgets[b]; !ok {
			fmt.Fprintf(stderr, "unknown budget %q\n", b)
			return 2
		}
	}
	if o.memProfile != "" {
		if err := os.MkdirAll(o.memProfile, 0o755); err != nil {
			fmt.Fprintln(stderr, "--memprofile:", err)
			return 2
		}
	}
	if o.cpuProfile != "" {
		if err := os.MkdirAll(o.cpuProfile, 0o755); err != nil {
			fmt.Fprintln(stderr, "--cpuprofile:", err)
			return 2
		}
	}
	if o.kgcOptions != kgcOptionsRun && o.kgcOptions != kgcOptionsLibrary {
		fmt.Fprintf(stderr, "--kgc-options must be %s or %s\n", kgcOptionsRun, kgcOptionsLibrary)
		return 2
	}
	if o.crdInstances < 1 || o.collectionOwners < 1 || o.namespaceOwners < 1 || o.backlog < 1 {
		fmt.Fprintln(stderr, "--crd-instances, --collection-owners, --namespace-owners and --backlog must be at least 1")
		return 2
	}
	if o.childLogs != "" {
		if err := os.MkdirAll(o.childLogs, 0o755); err != nil {
			fmt.Fprintln(stderr, "--child-logs:", err)
			return 2
		}
	}
	if o.deploymentPods < 1 || o.cronJobJobs < 1 || o.rolloutReplicas < 1 || o.rollouts < 1 || o.nodes < 1 {
		fmt.Fprintln(stderr, "--nodes, --deployment-pods, --cronjob-jobs, --rollout-replicas and --rollouts must be at least 1")
		return 2
	}
	if o.runs < 1 {
		fmt.Fprintln(stderr, "--runs must be at least 1")
		return 2
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if *scale != "" {
		sizes, err := parseSizes(*scale)
		if err != nil {
			fmt.Fprintln(stderr, err)
			return 2
		}
		so := scaleOptions{sizes: sizes, upstreamMax: *scaleU, collectors: splitList(*scaleC), namespaces: *scaleN}
		for _, v := range splitList(*scaleS) {
			n, err := strconv.Atoi(v)
			if err != nil || n < 2 || n > *scaleN {
				fmt.Fprintf(stderr, "--scale-shards: %q is not a shard count from 2 to --scale-namespaces (%d)\n", v, *scaleN)
				return 2
			}
			so.shards = append(so.shards, n)
		}
		if *scaleN < 1 {
			fmt.Fprintln(stderr, "--scale-namespaces must be at least 1")
			return 2
		}
		for _, c := range so.collectors {
			if c != collectorUpstream && c != collectorKGC && !isBare(c) {
				fmt.Fprintf(stderr, "unknown collector %q\n", c)
				return 2
			}
		}
		results, shards, err := runScale(ctx, &o, so, stdout)
		machine := machineLine() + fmt.Sprintf(", load average at the end %s", loadAverage())
		fmt.Fprintln(stdout)
		return report(stdout, stderr, o.markdown, err, func(w io.Writer) {
			writeScaleTable(w, results, machine)
			writeShardTable(w, shards)
		})
	}
	results, err := orchestrate(ctx, &o, stdout)
	machine := machineLine()
	fmt.Fprintln(stdout)
	fmt.Fprintf(stdout, "goos: %s\ngoarch: %s\npkg: github.com/kgc-dev/kgc/sandbox/cmd/kgc-bench\ncpu: %s\n", runtime.GOOS, runtime.GOARCH, cpuModel())
	for _, r := range results {
		if !r.Incomplete { // an unfinished phase has no time to compare
			fmt.Fprintln(stdout, benchLine(r))
		}
	}
	fmt.Fprintln(stdout)
	return report(stdout, stderr, o.markdown, err, func(w io.Writer) { writeTable(w, results, o.budgetList, machine) })
}

// report writes a run's table to stdout, and to the Markdown file when one
// was asked for, and returns the exit code for the run's error.
func report(stdout, stderr io.Writer, markdown string, err error, table func(io.Writer)) int {
	table(stdout)
	if markdown != "" {
		f, ferr := os.Create(markdown)
		if ferr == nil {
			table(f)
			ferr = f.Close()
		}
		if ferr != nil {
			fmt.Fprintln(stderr, "markdown:", ferr)
			return 1
		}
	}
	if err != nil {
		fmt.Fprintln(stderr, "kgc-bench:", err)
		return 1
	}
	return 0
}

// expandScenarios replaces the groups of scenarioAliases by their
// scenarios and drops repetitions.
func expandScenarios(in []string) []string {
	var out []string
	for _, s := range in {
		for _, x := range append(scenarioAliases[s], s) {
			if _, alias := scenarioAliases[x]; !alias && !slices.Contains(out, x) {
				out = append(out, x)
			}
		}
	}
	return out
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// orchestrate runs every scenario × run on a fresh control plane; within
// it every collector × budget cell in its own namespace with its own child
// process, collectors in alternating order. It returns what it measured
// even when a cell fails (the error says which).
func orchestrate(ctx context.Context, o *options, out io.Writer) ([]result, error) {
	var results []result
	var errs []error
	logDir, err := os.MkdirTemp("", "kgc-bench-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(logDir)
	began := time.Now()
	writeSoFar := func() {
		if o.markdown != "" { // so far, in case the run is interrupted
			if f, ferr := os.Create(o.markdown); ferr == nil {
				writeTable(f, results, o.budgetList, machineLine())
				_ = f.Close()
			}
		}
	}
	// The real-cluster scenarios of a run share one cluster (starting one
	// takes seconds, and each cell has a namespace of its own).
	var cluster []string
	for _, sc := range o.scenarios {
		if isClusterScenario(sc) {
			cluster = append(cluster, sc)
		}
	}
	for run := range o.runs {
		if len(cluster) == 0 {
			break
		}
		if ctx.Err() != nil {
			return results, errors.Join(append(errs, ctx.Err())...)
		}
		rs, err := clusterRun(ctx, o, cluster, run, logDir, out)
		results = append(results, rs...)
		writeSoFar()
		if err != nil {
			errs = append(errs, fmt.Errorf("cluster run %d: %w", run, err))
			fmt.Fprintf(out, "# cluster run %d: %v\n", run, err)
		}
	}
	for _, sc := range o.scenarios {
		if isClusterScenario(sc) {
			continue
		}
		if sc == "limit" && slices.Contains(o.scenarios, "background") {
			continue // measured with the background runs (scenarioRun)
		}
		for run := range o.runs {
			if ctx.Err() != nil {
				return results, errors.Join(append(errs, ctx.Err())...)
			}
			rs, err := scenarioRun(ctx, o, sc, run, logDir, out)
			results = append(results, rs...)
			writeSoFar()
			if err != nil {
				errs = append(errs, fmt.Errorf("%s run %d: %w", sc, run, err))
				fmt.Fprintf(out, "# %s run %d: %v\n", sc, run, err)
			}
		}
	}
	fmt.Fprintf(out, "# all done in %s\n", time.Since(began).Round(time.Second))
	return results, errors.Join(errs...)
}

// startControlPlane starts a bare control plane (etcd + kube-apiserver)
// for one run, its log on out with --verbose. It takes seconds on an idle
// machine; the bound is generous because kgc-bench's own tests start it
// in-process under the race detector, beside other packages' tests and
// compiles, where etcd alone once took over two minutes to be ready.
func startControlPlane(ctx context.Context, o *options, out io.Writer) (*runControlPlane, error) {
	sctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	cp, err := startRunControlPlane(sctx, o, out, false)
	if err != nil {
		return nil, fmt.Errorf("control plane: %w", err)
	}
	return cp, nil
}

// runControlPlane is the control plane of a run, wherever it runs.
type runControlPlane struct {
	// Config is the control plane's admin config (Config of
	// controlplane.ControlPlane).
	Config *rest.Config
	// Stop stops it.
	Stop func() error
}

// inProcessControlPlane says where the control plane runs: in this process,
// where the published numbers were measured (the benchmark's own clients,
// the physical limit's among them, share it with kube-apiserver). The
// tests, whose binary is built with -race, set it false: the control plane
// then runs in a process of its own (package cpproc), built without the
// race detector, which is there for the benchmark's code and the
// collectors, not for kube-apiserver.
var inProcessControlPlane = true

// startRunControlPlane starts a control plane, with the rest of a cluster
// if cluster, its log on out with --verbose.
func startRunControlPlane(ctx context.Context, o *options, out io.Writer, cluster bool) (*runControlPlane, error) {
	var logf func(format string, args ...any)
	if o.verbose {
		logf = func(format string, args ...any) { fmt.Fprintf(out, "# cp: "+format+"\n", args...) }
	}
	nodes := 0
	if cluster {
		nodes = o.nodes
	}
	if !inProcessControlPlane {
		cp, err := cpproc.Start(ctx, cpproc.Options{Cluster: cluster, Nodes: nodes, Logf: logf})
		if err != nil {
			return nil, err
		}
		return &runControlPlane{Config: cp.Config, Stop: cp.Stop}, nil
	}
	cp, err := controlplane.Start(ctx, controlplane.Options{Cluster: cluster, Nodes: nodes, Logf: logf})
	if err != nil {
		return nil, err
	}
	return &runControlPlane{Config: cp.Config, Stop: cp.Stop}, nil
}

func scenarioRun(ctx context.Context, o *options, sc string, run int, logDir string, out io.Writer) ([]result, error) {
	cp, err := startControlPlane(ctx, o, out)
	if err != nil {
		return nil, err
	}
	defer func() { _ = cp.Stop() }()
	e, closeEnv, err := newEnv(cp, o, logDir)
	if err != nil {
		return nil, err
	}
	defer closeEnv()
	client := e.client

	limit := func() ([]result, error) {
		rs, err := runLimit(ctx, e, run)
		for _, r := range rs {
			fmt.Fprintf(out, "# %-10s %-9s %-11s run %d: %6d objects in %8s = %8.1f objects/s%s\n", r.Scenario, r.Collector, r.Budget, r.Run, r.Objects, r.Elapsed.Round(time.Millisecond), r.objectsPerSecond(), callWindow(r))
		}
		return rs, err
	}
	if sc == "limit" {
		return limit()
	}
	colls := slices.Clone(o.collectors)
	if run%2 == 1 {
		slices.Reverse(colls)
	}
	var results []result
	var errs []error
	for _, b := range o.budgetList {
		for _, coll := range colls {
			s := cellSpec{scenario: sc, collector: coll, budget: b, run: run}
			r, err := runCell(ctx, e, s)
			if err == nil {
				err = tripError(r)
			}
			switch {
			case err == nil:
				results = append(results, r)
				printCell(out, r)
			case errors.Is(err, errIncomplete):
				// Measured, but unfinished: in the bulk deletions' table.
				results = append(results, r)
				printCell(out, r)
				errs = append(errs, fmt.Errorf("%s/%s: %w", coll, b, err))
			default:
				errs = append(errs, fmt.Errorf("%s/%s: %w", coll, b, err))
				fmt.Fprintf(out, "# %-10s %-9s %-11s run %d: FAILED: %v\n", sc, coll, b, run, err)
			}
			ns := sanitize(fmt.Sprintf("%s-%s-%s-%d", s.scenario, s.collector, s.budget, s.run))
			if err := cleanNamespace(ctx, client, ns); err != nil {
				return results, errors.Join(append(errs, fmt.Errorf("cleaning %s: %w", ns, err))...)
			}
			if err := resetKGCLeases(ctx, client, o.kgcOptions); err != nil {
				return results, errors.Join(append(errs, err)...)
			}
		}
	}
	// The physical limit is measured on the same control plane right after
	// the background cells, so that "unthrottled Background fan-out vs the
	// raw DELETE rate" compares numbers taken under the same conditions.
	if sc == "background" && slices.Contains(o.scenarios, "limit") {
		rs, err := limit()
		results = append(results, rs...)
		if err != nil {
			errs = append(errs, fmt.Errorf("limit: %w", err))
		}
	}
	return results, errors.Join(errs...)
}

// newEnv puts a counting proxy in front of cp's apiserver, for the
// collectors alone, and makes the benchmark's own (direct, unthrottled)
// clients. close stops the proxy.
func newEnv(cp *runControlPlane, o *options, logDir string) (e *env, close func(), err error) {
	cfg := rest.CopyConfig(cp.Config)
	cfg.QPS, cfg.Burst = -1, 0
	cfg.WarningHandler = rest.NoWarnings{}
	proxy, err := startProxy(cfg)
	if err != nil {
		return nil, nil, err
	}
	// Protobuf for the benchmark's own typed client: populating a million
	// objects is the scale benchmark's longest step, and the apiserver
	// decodes protobuf faster than JSON.
	pb := rest.CopyConfig(cfg)
	pb.ContentType = "application/vnd.kubernetes.protobuf"
	client, err := kubernetes.NewForConfig(pb)
	if err != nil {
		proxy.close()
		return nil, nil, err
	}
	md, err := metadata.NewForConfig(cfg)
	if err != nil {
		proxy.close()
		return nil, nil, err
	}
	return &env{cfg: cfg, client: client, md: md, proxy: proxy, logDir: logDir, opts: o}, proxy.close, nil
}

func printCell(out io.Writer, r result) {
	fmt.Fprintf(out, "# %-10s %-9s %-11s run %d: %6d objects in %8s = %8.1f objects/s, %.2f calls/object, %.1f MB peak RSS, %.1f CPU s",
		r.Scenario, r.Collector, r.Budget, r.Run, r.Objects, r.Elapsed.Round(time.Millisecond), r.objectsPerSecond(), r.callsPerObject(),
		float64(r.Usage.MaxRSSKB)/1024, r.Usage.CPU.Seconds())
	if r.Ready > 0 && r.Tracked == 0 {
		fmt.Fprintf(out, ", synced %.2fs", r.Ready.Seconds())
	}
	if r.OwnerGone > 0 {
		fmt.Fprintf(out, ", owner gone after %s", r.OwnerGone.Round(time.Millisecond))
	}
	if r.Tracked > 0 {
		fmt.Fprintf(out, ", synced %.2fs, useful %.2fs, %.2f KB/object peak, %.2f KB/object live", r.Ready.Seconds(), r.Useful.Seconds(), r.rssGrowthPerObject(), r.liveRSSGrowthPerObject())
	}
	fmt.Fprint(out, callWindow(r))
	if r.Incomplete {
		fmt.Fprintf(out, ", INCOMPLETE: %d of %d left when it gave up", r.Left, r.Objects)
	}
	if len(r.Trips) > 0 {
		fmt.Fprintf(out, ", deletion breaker tripped: %s", strings.Join(r.Trips, "; "))
	}
	if r.Usage.SlowStop {
		fmt.Fprintf(out, ", did not stop within %s of being told to", childStopWait)
	}
	if r.Note != "" {
		fmt.Fprintf(out, " (%s)", r.Note)
	}
	fmt.Fprintf(out, "\n#   %s\n", r.Calls.resourceSummary())
}

// callWindow describes when the phase's per-object requests reached the
// proxy, when the phase recorded it.
func callWindow(r result) string {
	if r.LastCall == 0 {
		return ""
	}
	return fmt.Sprintf(", calls %s–%s, %.1f in flight", r.FirstCall.Round(time.Millisecond), r.LastCall.Round(time.Millisecond), r.InFlight)
}

func cpuModel() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				return strings.TrimSpace(v)
			}
		}
	}
	return "unknown"
}

// loadAverage is /proc/loadavg's 1, 5 and 15 minute averages.
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

func machineLine() string {
	return fmt.Sprintf("%s, %d cores, %s %s/%s, %s", cpuModel(), runtime.NumCPU(), runtime.Version(), runtime.GOOS, runtime.GOARCH, time.Now().UTC().Format("2006-01-02 15:04 UTC"))
}
