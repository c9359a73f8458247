package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"runtime/debug"
	"runtime/metrics"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/metadata/metadatainformer"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"k8s.io/controller-manager/pkg/informerfactory"
	"k8s.io/klog/v2"
	"k8s.io/kubernetes/pkg/controller/garbagecollector"

	"github.com/kgc-dev/kgc/internal/app"
	"github.com/kgc-dev/kgc/pkg/kgc"
)

// The collector role: the bench binary re-executes itself with
// --role=collector so that each collector's peak RSS and CPU time are its own
// (getrusage of the child). The child prints "synced" on stdout once its
// monitors have synced and runs until its stdin is closed.

const (
	collectorUpstream = "upstream"
	collectorKGC      = "kgc"
	collectorClient32 = "client32" // the physical limit's deleter
)

type collectorFlags struct {
	Collector string
	Server    string
	QPS       float64
	Burst     int
	Workers   int
	// MaxWrites is kgc's MaxWritesInFlight (0: kgc's default, twice
	// Workers); upstream has no such bound (each of its workers makes its
	// calls one at a time).
	MaxWrites int
	// CPUProfile, when set, is where the child writes a CPU profile of
	// its whole life (--cpuprofile of the benchmark).
	CPUProfile string
	// MemProfile, when set, is where the child writes its allocation
	// profile (allocs: every allocation sampled since it started, and the
	// heap in use) when it is told to stop (--memprofile).
	MemProfile string
	// Shard, "i/S" when set, makes the kgc child keep only shard i of S
	// of the namespaces (kgc.Options.BenchmarkShard: a measurement of
	// docs/scaling.md's sharded design, not a way to run kgc).
	Shard string
	// KGCOptions: the options the kgc child collects with: kgcOptionsRun
	// (`kgc run`'s defaults) or kgcOptionsLibrary (the library's, with the
	// orphan journal).
	KGCOptions string
	// KeepLog, when set, is where the parent copies the child's log when
	// it stops (--child-logs); the child does not see it.
	KeepLog string
}

func (f collectorFlags) args() []string {
	return []string{
		"--role=collector",
		"--collector=" + f.Collector,
		"--server=" + f.Server,
		"--qps=" + strconv.FormatFloat(f.QPS, 'f', -1, 64),
		"--burst=" + strconv.Itoa(f.Burst),
		"--workers=" + strconv.Itoa(f.Workers),
		"--kgc-max-writes=" + strconv.Itoa(f.MaxWrites),
		"--child-cpuprofile=" + f.CPUProfile,
		"--child-memprofile=" + f.MemProfile,
		"--shard=" + f.Shard,
		"--kgc-options=" + f.KGCOptions,
	}
}

// runDeleterRole is the main of the physical limit's child (collector
// client32): it prints "synced" at once, then reads one line "<namespace>
// <n>" and deletes ConfigMaps obj-00000… of that namespace with 32
// concurrent unthrottled requests, then waits for its stdin to close.
// It is a process of its own, as the collectors are, so that the limit and
// the collectors reach the proxy the same way.
func runDeleterRole(f collectorFlags, stdin io.Reader, stdout io.Writer) error {
	client, err := kubernetes.NewForConfig(&rest.Config{Host: f.Server, QPS: -1})
	if err != nil {
		return err
	}
	fmt.Fprintln(stdout, "synced")
	in := bufio.NewReader(stdin)
	line, err := in.ReadString('\n')
	if err != nil {
		return fmt.Errorf("reading the deleter's order: %w", err)
	}
	var ns string
	var n int
	if _, err := fmt.Sscanf(line, "%s %d", &ns, &n); err != nil {
		return fmt.Errorf("deleter order %q: %w", line, err)
	}
	if err := deleteAll(context.Background(), client, ns, limitNames(n), nil); err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, in)
	if kb, err := readStatusKB("/proc/self/status", "VmHWM"); err == nil {
		fmt.Fprintf(stdout, "vmhwm %d\n", kb)
	}
	return nil
}

// limitNames are the names of the physical limit's ConfigMaps.
func limitNames(n int) []string {
	names := make([]string, n)
	for i := range n {
		names[i] = fmt.Sprintf("obj-%05d", i)
	}
	return names
}

// The options the kgc child can collect with (--kgc-options).
const (
	// kgcOptionsRun: what `kgc run` collects with at its default flags,
	// taken from internal/app as `kgc run` builds them: the deletion
	// breaker on its Lease, the restore-signature hold, the orphan
	// journal, and the rest of its defaults.
	kgcOptionsRun = "run"
	// kgcOptionsLibrary: the library's defaults (no breaker, no hold),
	// with the orphan journal: what the benchmark ran before it ran
	// `kgc run`'s, for comparison.
	kgcOptionsLibrary = "library"
)

// kgcOptions returns the library options of a kgc child with f's budget,
// workers and write slots, and the Go GC target percentage it runs with
// (`kgc run`'s --gc-percent default).
func kgcOptions(f collectorFlags) (kgc.Options, int, error) {
	switch f.KGCOptions {
	case kgcOptionsRun, "":
		ro, err := runOptions(f)
		if err != nil {
			return kgc.Options{}, 0, err
		}
		return ro.LibraryOptions(), ro.Observability.GCPercent, nil
	case kgcOptionsLibrary:
		return kgc.Options{QPS: float32(f.QPS), Burst: f.Burst, Workers: f.Workers, MaxWritesInFlight: f.MaxWrites,
			OrphanJournal: &kgc.OrphanJournalOptions{LeaseNamespace: metav1.NamespaceSystem, LeaseName: "kgc-bench-orphans"}}, kgc.RecommendedGCPercent, nil
	default:
		return kgc.Options{}, 0, fmt.Errorf("--kgc-options %q: want %s or %s", f.KGCOptions, kgcOptionsRun, kgcOptionsLibrary)
	}
}

// runOptions are `kgc run`'s options at its default flags but for the
// budget (--kube-api-qps, --kube-api-burst), the workers
// (--concurrent-gc-syncs) and the write slots (--max-writes-inflight),
// which are the cell's, completed and validated as `kgc run` does.
func runOptions(f collectorFlags) (*app.RunOptions, error) {
	ro := app.NewRunOptions()
	ro.KubeAPIQPS, ro.KubeAPIBurst = float32(f.QPS), f.Burst
	ro.ConcurrentGCSyncs, ro.MaxWritesInFlight = f.Workers, f.MaxWrites
	if err := ro.Complete(); err != nil {
		return nil, err
	}
	if errs := ro.Validate(); len(errs) > 0 {
		return nil, fmt.Errorf("kgc run options: %w", errors.Join(errs...))
	}
	return ro, nil
}

// kgcLeases are the Leases a kgc child with these options may write (the
// breaker's trips, the orphan journal): the benchmark deletes them after
// every cell, so that a trip or a journal entry of one cell does not carry
// over into the next, which runs on the same control plane.
func kgcLeases(mode string) []types.NamespacedName {
	opts, _, err := kgcOptions(collectorFlags{KGCOptions: mode, QPS: 1, Burst: 1, Workers: 1})
	if err != nil {
		return nil
	}
	var out []types.NamespacedName
	if b := opts.Breaker; b != nil && b.LeaseName != "" {
		out = append(out, types.NamespacedName{Namespace: b.LeaseNamespace, Name: b.LeaseName})
	}
	if j := opts.OrphanJournal; j != nil {
		out = append(out, types.NamespacedName{Namespace: j.LeaseNamespace, Name: j.LeaseName})
	}
	return out
}

// runCollectorRole is the child's main.
func runCollectorRole(f collectorFlags, stdin io.Reader, stdout io.Writer) error {
	if f.Collector == collectorClient32 {
		return runDeleterRole(f, stdin, stdout)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if f.CPUProfile != "" {
		pf, err := os.Create(f.CPUProfile)
		if err != nil {
			return err
		}
		if err := pprof.StartCPUProfile(pf); err != nil {
			pf.Close()
			return err
		}
		defer func() { pprof.StopCPUProfile(); _ = pf.Close() }()
	}
	heapPeak := sampleHeapPeak(ctx)
	go func() {
		_, _ = io.Copy(io.Discard, stdin)
		fmt.Fprintf(stdout, "heappeak %d\n", heapPeak.Load())
		if f.MemProfile != "" {
			if err := writeAllocProfile(f.MemProfile); err != nil {
				fmt.Fprintln(os.Stderr, "memprofile:", err)
			}
		}
		// The memory the collector holds with everything tracked: return
		// what the heap does not use to the OS, then read the resident set.
		debug.FreeOSMemory()
		fmt.Fprintf(stdout, "heaplive %d\n", heapObjects())
		if kb, err := readStatusKB("/proc/self/status", "VmRSS"); err == nil {
			fmt.Fprintf(stdout, "vmrss %d\n", kb)
		}
		cancel()
	}()

	cfg := &rest.Config{Host: f.Server, QPS: float32(f.QPS), Burst: f.Burst}
	var waitSynced func(context.Context) error
	var done <-chan struct{}
	switch f.Collector {
	case collectorKGC:
		opts, gcPercent, err := kgcOptions(f)
		if err != nil {
			return err
		}
		if f.Shard != "" {
			var i, n int
			if _, err := fmt.Sscanf(f.Shard, "%d/%d", &i, &n); err != nil || n < 1 || i < 0 || i >= n {
				return fmt.Errorf("--shard %q: want i/S with 0 <= i < S", f.Shard)
			}
			opts.BenchmarkShard = &kgc.BenchmarkShard{Index: i, Count: n}
		}
		// As `kgc run` does without --gc-percent; upstream runs with Go's
		// default, as kube-controller-manager does. GOGC in the
		// environment wins for both.
		if os.Getenv("GOGC") == "" {
			debug.SetGCPercent(gcPercent)
		}
		c, err := kgc.New(cfg, opts)
		if err != nil {
			return err
		}
		ch := make(chan struct{})
		go func() { defer close(ch); _ = c.Run(ctx) }()
		done = ch
		waitSynced = c.WaitForSync
	case collectorBare, collectorBareStream:
		ch := make(chan struct{})
		close(ch)
		done = ch
		role := runBareRole
		if f.Collector == collectorBareStream {
			role = runBareStreamRole
		}
		waitSynced = func(ctx context.Context) error { return role(ctx, f) }
	case collectorUpstream:
		synced, ch, err := startUpstream(ctx, cfg, f.Workers)
		if err != nil {
			return err
		}
		done = ch
		waitSynced = func(ctx context.Context) error {
			return wait.PollUntilContextCancel(ctx, 10*time.Millisecond, true, func(context.Context) (bool, error) { return synced(), nil })
		}
	default:
		return fmt.Errorf("unknown collector %q", f.Collector)
	}
	if err := waitSynced(ctx); err == nil {
		fmt.Fprintln(stdout, "synced")
	}
	<-ctx.Done()
	select {
	case <-done:
	case <-time.After(childStopWait):
		// Said, not failed: what was measured was measured before.
		fmt.Fprintln(stdout, "slowstop")
	}
	// The peak RSS of this process image. getrusage's ru_maxrss is no good
	// for a child: Linux carries the parent's high-water mark across the
	// vfork+exec that starts it, and the parent runs the control plane.
	if kb, err := readStatusKB("/proc/self/status", "VmHWM"); err == nil {
		fmt.Fprintf(stdout, "vmhwm %d\n", kb)
	}
	return nil
}

// heapObjectsMetric is the bytes of heap objects, live or not yet swept:
// the heap in use.
const heapObjectsMetric = "/memory/classes/heap/objects:bytes"

func heapObjects() int64 {
	s := []metrics.Sample{{Name: heapObjectsMetric}}
	metrics.Read(s)
	return int64(s[0].Value.Uint64())
}

// sampleHeapPeak samples the heap in use every 10 ms until ctx ends and
// returns its peak so far.
func sampleHeapPeak(ctx context.Context) *atomic.Int64 {
	var peak atomic.Int64
	peak.Store(heapObjects())
	go func() {
		t := time.NewTicker(10 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			if v := heapObjects(); v > peak.Load() {
				peak.Store(v)
			}
		}
	}()
	return &peak
}

// writeAllocProfile writes the allocs profile (allocations since start and
// the heap in use, sampled) to path.
func writeAllocProfile(path string) error {
	pf, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := pprof.Lookup("allocs").WriteTo(pf, 0); err != nil {
		pf.Close()
		return err
	}
	return pf.Close()
}

// readStatusKB returns a kB field (VmHWM: peak resident set, VmRSS:
// resident set) of a /proc/<pid>/status file.
func readStatusKB(path, field string) (int64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	return parseStatusKB(string(b), field)
}

func parseStatusKB(status, field string) (int64, error) {
	for _, line := range strings.Split(status, "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			return strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
		}
	}
	return 0, fmt.Errorf("no %s in status", field)
}

// startUpstream wires kube-controller-manager v1.36.3's garbage collector the
// way kube-controller-manager does (cmd/kube-controller-manager/app:
// CreateControllerContext and newGarbageCollectorController): typed shared
// informers and metadata informers, both trimming managedFields, behind
// informerfactory.NewInformerFactory (typed informers for built-in
// resources, metadata informers for the rest); a deferred discovery REST
// mapper over a memory-cached discovery client, reset every 30s; the default
// ignored resources; Run(ctx, workers, 30s) and Sync(ctx, discovery, 30s)
// with a discovery client of its own. Every client gets cfg's QPS and Burst
// (--kube-api-qps, --kube-api-burst) but the collector's metadata client,
// which gets twice the QPS, as newGarbageCollectorController gives it.
func startUpstream(ctx context.Context, cfg *rest.Config, workers int) (synced func() bool, done <-chan struct{}, err error) {
	trim := func(obj any) (any, error) {
		if a, err := meta.Accessor(obj); err == nil && a.GetManagedFields() != nil {
			a.SetManagedFields(nil)
		}
		return obj, nil
	}
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, nil, err
	}
	md, err := metadata.NewForConfig(cfg) // the informers'
	if err != nil {
		return nil, nil, err
	}
	gcConfig := rest.CopyConfig(cfg)
	gcConfig.QPS *= 2
	gcMetadata, err := metadata.NewForConfig(gcConfig)
	if err != nil {
		return nil, nil, err
	}
	mapperDiscovery, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return nil, nil, err
	}
	gcDiscovery, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return nil, nil, err
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(mapperDiscovery))
	go wait.Until(mapper.Reset, 30*time.Second, ctx.Done())

	const resync = 12 * time.Hour // kube-controller-manager's --min-resync-period
	typed := informers.NewSharedInformerFactoryWithOptions(kube, resync, informers.WithTransform(trim))
	metaInformers := metadatainformer.NewSharedInformerFactoryWithOptions(md, resync, metadatainformer.WithTransform(trim))
	factory := informerfactory.NewInformerFactory(typed, metaInformers)
	started := make(chan struct{})
	gb := garbagecollector.NewDependencyGraphBuilder(ctx, md, mapper, garbagecollector.DefaultIgnoredResources(), factory, started)
	gc, err := garbagecollector.NewComposedGarbageCollector(ctx, kube, gcMetadata, mapper, gb)
	if err != nil {
		return nil, nil, err
	}
	factory.Start(ctx.Done())
	close(started)
	ch := make(chan struct{})
	runDone := make(chan struct{})
	go func() { defer close(runDone); gc.Run(ctx, workers, 30*time.Second) }()
	syncDone := make(chan struct{})
	go func() { defer close(syncDone); gc.Sync(ctx, gcDiscovery, 30*time.Second) }()
	go func() { <-runDone; <-syncDone; typed.Shutdown(); metaInformers.Shutdown(); close(ch) }()
	logger := klog.FromContext(ctx)
	return func() bool { return gc.IsSynced(logger) }, ch, nil
}

// child is a running collector process.
type child struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	start  time.Time
	synced chan struct{}
	exited chan struct{}
	logf   *os.File
	// keepLog: where stop copies the log (collectorFlags.KeepLog).
	keepLog string
	syncAt  time.Time
	vmhwm   int64 // kB, reported by the child as it exits
	// slowStop: the child said its collector did not stop in time.
	slowStop bool
	vmrss    int64 // kB, reported by the child when asked to stop
	// heapPeak and heapLive (bytes): the child's peak heap in use, and its
	// heap after a GC when asked to stop.
	heapPeak, heapLive int64
}

// usage is what a finished child used: its peak RSS (VmHWM) and CPU time
// (user + system, from wait4's rusage, which is the child's own).
type usage struct {
	MaxRSSKB  int64
	LiveRSSKB int64 // resident set after debug.FreeOSMemory, when asked to stop
	CPU       time.Duration
	// HeapPeak: the peak heap in use (sampled every 10 ms); HeapLive: the
	// heap after a GC, when asked to stop. Bytes.
	HeapPeak, HeapLive int64
	// SlowStop: the collector did not stop within childStopWait of being
	// told to (its child exited regardless).
	SlowStop bool
}

func startChild(f collectorFlags, logDir string) (*child, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	logf, err := os.CreateTemp(logDir, f.Collector+"-*.log")
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(exe, f.args()...)
	cmd.Stderr = logf
	stdin, err := cmd.StdinPipe()
	if err != nil {
		logf.Close()
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		logf.Close()
		return nil, err
	}
	c := &child{cmd: cmd, stdin: stdin, synced: make(chan struct{}), exited: make(chan struct{}), logf: logf, keepLog: f.KeepLog}
	c.start = time.Now()
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, err
	}
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			line := strings.TrimSpace(sc.Text())
			if line == "synced" {
				c.syncAt = time.Now()
				close(c.synced)
			}
			if line == "slowstop" {
				c.slowStop = true
			}
			if v, ok := strings.CutPrefix(line, "vmhwm "); ok {
				c.vmhwm, _ = strconv.ParseInt(v, 10, 64)
			}
			if v, ok := strings.CutPrefix(line, "vmrss "); ok {
				c.vmrss, _ = strconv.ParseInt(v, 10, 64)
			}
			if v, ok := strings.CutPrefix(line, "heappeak "); ok {
				c.heapPeak, _ = strconv.ParseInt(v, 10, 64)
			}
			if v, ok := strings.CutPrefix(line, "heaplive "); ok {
				c.heapLive, _ = strconv.ParseInt(v, 10, 64)
			}
		}
		_ = cmd.Wait()
		close(c.exited)
	}()
	return c, nil
}

// waitSynced returns the time from process start to "synced".
func (c *child) waitSynced(ctx context.Context, timeout time.Duration) (time.Duration, error) {
	select {
	case <-ctx.Done():
		return 0, ctx.Err()
	case <-c.synced:
		return c.syncAt.Sub(c.start), nil
	case <-c.exited:
		return 0, fmt.Errorf("collector exited before syncing: %s", c.logTail())
	case <-time.After(timeout):
		return 0, fmt.Errorf("collector not synced after %s: %s", timeout, c.logTail())
	}
}

// childStopWait is how long a collector child waits for its collector to
// stop before it exits all the same, saying so (usage.SlowStop).
// Upstream's can take minutes: its event broadcaster's Shutdown waits
// for events still being retried, such as those of a deleted namespace.
const childStopWait = 45 * time.Second

// stop closes the child's stdin, waits (killing it after childStopWait
// and 15 s more) and returns
// its resource usage.
func (c *child) stop() (usage, error) {
	_ = c.stdin.Close()
	var err error
	select {
	case <-c.exited:
	case <-time.After(childStopWait + 15*time.Second):
		_ = c.cmd.Process.Kill()
		<-c.exited
		err = fmt.Errorf("collector did not exit within %s; killed", childStopWait+15*time.Second)
	}
	defer os.Remove(c.logf.Name())
	defer c.logf.Close()
	if c.keepLog != "" {
		if b, rerr := os.ReadFile(c.logf.Name()); rerr == nil {
			_ = os.WriteFile(c.keepLog, b, 0o644)
		}
	}
	st := c.cmd.ProcessState
	if st == nil {
		return usage{}, errors.Join(err, errors.New("no process state"))
	}
	if err == nil && !st.Success() {
		err = fmt.Errorf("collector exited with %v: %s", st, c.logTail())
	}
	ru, ok := st.SysUsage().(*syscall.Rusage)
	if !ok {
		return usage{}, errors.Join(err, errors.New("no rusage"))
	}
	if c.vmhwm == 0 && err == nil {
		err = errors.New("collector did not report its peak RSS")
	}
	return usage{
		MaxRSSKB:  c.vmhwm,
		LiveRSSKB: c.vmrss,
		HeapPeak:  c.heapPeak,
		HeapLive:  c.heapLive,
		SlowStop:  c.slowStop,
		CPU:       time.Duration(syscall.TimevalToNsec(ru.Utime) + syscall.TimevalToNsec(ru.Stime)),
	}, err
}

// tripMarker is what kgc logs when its deletion breaker trips, or finds at
// start that it tripped before and was not resumed.
const tripMarker = "circuit breaker tripped"

var (
	tripSignal = regexp.MustCompile(`\bsignal="?([A-Za-z0-9-]+)"?`)
	tripCount  = regexp.MustCompile(`\bcount=(\d+)`)
	tripLimit  = regexp.MustCompile(`\blimit=(\d+)`)
)

// breakerTrips returns the deletion breaker trips the child has logged so
// far, one per line that says so: the signal, and the count over the
// limit when the line has them ("dangling-fraction 1001/1000").
func (c *child) breakerTrips() []string {
	b, err := os.ReadFile(c.logf.Name())
	if err != nil {
		return nil
	}
	return parseTrips(string(b))
}

func parseTrips(log string) []string {
	var out []string
	seen := map[string]bool{}
	for _, line := range strings.Split(log, "\n") {
		// The child's klog writes an error once per severity at or below
		// it, all to the same log: the copies are one trip.
		if !strings.Contains(strings.ToLower(line), tripMarker) || seen[line] {
			continue
		}
		seen[line] = true
		t := "unknown signal"
		if m := tripSignal.FindStringSubmatch(line); m != nil {
			t = m[1]
		}
		if n, l := tripCount.FindStringSubmatch(line), tripLimit.FindStringSubmatch(line); n != nil && l != nil {
			t += " " + n[1] + "/" + l[1]
		} else if strings.Contains(line, "before this kgc started") {
			t += " (on the Lease at start)"
		}
		out = append(out, t)
	}
	return out
}

func (c *child) logTail() string {
	b, err := os.ReadFile(c.logf.Name())
	if err != nil {
		return err.Error()
	}
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return strings.TrimSpace(string(b))
}
