package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
)

// The scale benchmark (--scale N,M,…; make bench-scale): one control plane
// is populated to each size in turn (groups of one owner and three
// dependents, named so that a LIST returns each dependent before its
// owner), and at each size every collector starts on it in a process of
// its own, one after the other:
//
//   - bare: a plain metadata client (client-go's, as an informer would)
//     paging the ConfigMaps by 5,000, all namespaces, decoding every page
//     and keeping nothing: the apiserver's own paging speed plus the
//     standard decoding, the floor any collector's start is measured
//     against;
//   - kgc and upstream (kube-controller-manager v1.36.3's collector;
//     skipped above --scale-upstream-max): ready is the time from process
//     start to synced (kgc: every list applied to its graph); useful is
//     the time until a probe Background cascade issued at sync has
//     completed.
//
// Memory is growth over the same collector on the empty cluster (measured
// first): heap (runtime/metrics, sampled every 10 ms: the peak, and the
// live heap after a GC with everything tracked) and RSS (VmHWM, and the
// resident set after debug.FreeOSMemory). CPU is the child's user + system
// time from its start until it is stopped, after the probe and a quiet
// period. GETs are the collector's GET requests until then.

// Collectors of the bare-client baselines: paging with LIST (bare), and
// one streaming watch list (bare-stream: WATCH with sendInitialEvents,
// served from the apiserver's watch cache without pages), the cheaper
// protocol kgc's monitors could use.
const (
	collectorBare       = "bare"
	collectorBareStream = "bare-stream"
)

func isBare(c string) bool { return c == collectorBare || c == collectorBareStream }

type scaleOptions struct {
	sizes       []int
	upstreamMax int
	collectors  []string
	// namespaces the groups are spread over (1: all in "scale"); shards:
	// the shard counts of the sharded cells.
	namespaces int
	shards     []int
}

// shardResult is one sharded cell: S kgc processes started at once, each
// keeping its shard of the namespaces.
type shardResult struct {
	Size, Shards int
	// Ready: the last shard's; Shard: each shard's.
	Ready time.Duration
	Shard []scaleResult
}

type scaleResult struct {
	Size      int
	Collector string
	Ready     time.Duration
	Useful    time.Duration // 0 for the bare client
	Usage     usage
	Base      usage // the same collector on the empty cluster
	GETs      int64
	Note      string
}

func perObjectKB(v, base int64, n int) float64 {
	if n == 0 {
		return 0
	}
	return float64(v-base) / float64(n)
}

func (r scaleResult) heapPeakKB() float64 {
	return perObjectKB(r.Usage.HeapPeak, r.Base.HeapPeak, r.Size) / 1024
}
func (r scaleResult) heapLiveKB() float64 {
	return perObjectKB(r.Usage.HeapLive, r.Base.HeapLive, r.Size) / 1024
}
func (r scaleResult) rssPeakKB() float64 {
	return perObjectKB(r.Usage.MaxRSSKB, r.Base.MaxRSSKB, r.Size)
}
func (r scaleResult) rssLiveKB() float64 {
	return perObjectKB(r.Usage.LiveRSSKB, r.Base.LiveRSSKB, r.Size)
}
func (r scaleResult) cpuPerObject() time.Duration {
	return time.Duration(float64(r.Usage.CPU) / float64(r.Size))
}

func parseSizes(s string) ([]int, error) {
	var out []int
	for _, p := range splitList(s) {
		n, err := strconv.Atoi(strings.ReplaceAll(p, "_", ""))
		if err != nil || n < 4 {
			return nil, fmt.Errorf("--scale: %q is not a size of at least 4", p)
		}
		if len(out) > 0 && n <= out[len(out)-1] {
			return nil, errors.New("--scale: sizes must grow")
		}
		out = append(out, n)
	}
	return out, nil
}

// runScale runs the scale benchmark and writes its table.
func runScale(ctx context.Context, o *options, so scaleOptions, out io.Writer) ([]scaleResult, []shardResult, error) {
	cp, err := startControlPlane(ctx, o, out)
	if err != nil {
		return nil, nil, err
	}
	defer func() { _ = cp.Stop() }()
	logDir, err := os.MkdirTemp("", "kgc-bench-")
	if err != nil {
		return nil, nil, err
	}
	defer os.RemoveAll(logDir)
	e, closeEnv, err := newEnv(cp, o, logDir)
	if err != nil {
		return nil, nil, err
	}
	defer closeEnv()
	const ns = "scale"
	for _, name := range append([]string{ns}, spreadNamespaces(so.namespaces)...) {
		if _, err := e.client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return nil, nil, err
		}
	}

	// Baselines on the empty cluster.
	base := map[string]usage{}
	for _, coll := range so.collectors {
		c, err := startChild(scaleFlags(e, coll, "empty"), logDir)
		if err != nil {
			return nil, nil, err
		}
		if _, err := c.waitSynced(ctx, o.timeout); err != nil {
			_, _ = c.stop()
			return nil, nil, fmt.Errorf("%s on the empty cluster: %w", coll, err)
		}
		_ = e.proxy.waitQuiet(time.Second, 30*time.Second)
		u, err := c.stop()
		if err != nil {
			return nil, nil, fmt.Errorf("%s on the empty cluster: %w", coll, err)
		}
		base[coll] = u
		fmt.Fprintf(out, "# scale empty %-8s heap peak %.1f MB, live %.1f MB; RSS peak %.1f MB, live %.1f MB; CPU %.2fs\n", coll,
			mb(u.HeapPeak), mb(u.HeapLive), float64(u.MaxRSSKB)/1024, float64(u.LiveRSSKB)/1024, u.CPU.Seconds())
	}

	var results []scaleResult
	var shards []shardResult
	groups := 0
	for _, size := range so.sizes {
		want := size / 4
		began := time.Now()
		for groups < want {
			batch := min(want-groups, 20000)
			if err := createSpread(ctx, e, ns, so.namespaces, groups, batch); err != nil {
				return results, shards, err
			}
			groups += batch
		}
		fmt.Fprintf(out, "# scale %d: populated %d objects in %s\n", size, groups*4, time.Since(began).Round(time.Second))
		for _, coll := range so.collectors {
			if coll == collectorUpstream && size > so.upstreamMax {
				continue
			}
			r, err := scaleCell(ctx, e, ns, size, coll)
			if err != nil {
				return results, shards, fmt.Errorf("%s at %d: %w", coll, size, err)
			}
			r.Base = base[coll]
			results = append(results, r)
			fmt.Fprintf(out, "# scale %-8d %-8s ready %7.2fs useful %7.2fs CPU %6.2fs (%5.1f µs/object) GETs %6d; heap peak %5.3f live %5.3f KB/object; RSS peak %5.3f live %5.3f KB/object%s\n",
				r.Size, r.Collector, r.Ready.Seconds(), r.Useful.Seconds(), r.Usage.CPU.Seconds(), float64(r.cpuPerObject())/1e3, r.GETs,
				r.heapPeakKB(), r.heapLiveKB(), r.rssPeakKB(), r.rssLiveKB(), noteOf(r.Note))
		}
		for _, n := range so.shards {
			sr, err := shardCell(ctx, e, size, n, base[collectorKGC])
			if err != nil {
				return results, shards, fmt.Errorf("%d shards at %d: %w", n, size, err)
			}
			shards = append(shards, sr)
			for i, r := range sr.Shard {
				fmt.Fprintf(out, "# scale %-8d kgc shard %d/%d ready %7.2fs CPU %6.2fs heap peak %6.1f live %6.1f MB; RSS peak %6.1f live %6.1f MB (growth)\n",
					size, i, n, r.Ready.Seconds(), r.Usage.CPU.Seconds(), mb(r.Usage.HeapPeak-r.Base.HeapPeak), mb(r.Usage.HeapLive-r.Base.HeapLive),
					float64(r.Usage.MaxRSSKB-r.Base.MaxRSSKB)/1024, float64(r.Usage.LiveRSSKB-r.Base.LiveRSSKB)/1024)
			}
		}
	}
	return results, shards, nil
}

// spreadNamespaces names the namespaces groups are spread over (none: all
// in "scale").
func spreadNamespaces(n int) []string {
	if n <= 1 {
		return nil
	}
	out := make([]string, n)
	for i := range n {
		out[i] = fmt.Sprintf("scale-%04d", i)
	}
	return out
}

// createSpread creates groups [from, from+n), group g in namespace g mod
// namespaces (in "scale" when there is one).
func createSpread(ctx context.Context, e *env, ns string, namespaces, from, n int) error {
	names := spreadNamespaces(namespaces)
	if len(names) == 0 {
		return createGroups(ctx, e, ns, from, n)
	}
	// Groups are numbered across namespaces; each namespace gets its
	// share of [from, from+n) as runs of consecutive numbers.
	for j, name := range names {
		var ids []int
		for g := from; g < from+n; g++ {
			if g%namespaces == j {
				ids = append(ids, g)
			}
		}
		if len(ids) == 0 {
			continue
		}
		if err := createGroupIDs(ctx, e, name, ids); err != nil {
			return err
		}
	}
	return nil
}

// shardCell starts n kgc processes at once, shard i of n each, on the
// populated cluster, and measures each until all are synced.
func shardCell(ctx context.Context, e *env, size, n int, base usage) (shardResult, error) {
	sr := shardResult{Size: size, Shards: n}
	children := make([]*child, n)
	defer func() {
		for _, c := range children {
			if c != nil {
				_, _ = c.stop()
			}
		}
	}()
	for i := range n {
		f := scaleFlags(e, collectorKGC, fmt.Sprintf("%d-shard-%d-of-%d", size, i, n))
		f.Shard = fmt.Sprintf("%d/%d", i, n)
		c, err := startChild(f, e.logDir)
		if err != nil {
			return sr, err
		}
		children[i] = c
	}
	for i, c := range children {
		ready, err := c.waitSynced(ctx, e.opts.timeout)
		if err != nil {
			return sr, fmt.Errorf("shard %d: %w", i, err)
		}
		sr.Ready = max(sr.Ready, ready)
		sr.Shard = append(sr.Shard, scaleResult{Size: size, Collector: collectorKGC, Ready: ready, Base: base})
	}
	_ = e.proxy.waitQuiet(2*time.Second, e.opts.timeout)
	for i, c := range children {
		u, err := c.stop()
		children[i] = nil
		if err != nil {
			return sr, fmt.Errorf("shard %d: %w", i, err)
		}
		sr.Shard[i].Usage = u
	}
	return sr, nil
}

func noteOf(s string) string {
	if s == "" {
		return ""
	}
	return " (" + s + ")"
}

func mb(b int64) float64 { return float64(b) / (1 << 20) }

func scaleFlags(e *env, coll, label string) collectorFlags {
	b := e.opts.budgets["unthrottled"]
	f := collectorFlags{Collector: coll, Server: e.proxy.URL, QPS: b.qps, Burst: b.burst, Workers: e.opts.workers, MaxWrites: e.opts.kgcMaxWrites, KGCOptions: e.opts.kgcOptions}
	name := sanitize(fmt.Sprintf("scale-%s-%s", label, coll))
	if e.opts.cpuProfile != "" {
		f.CPUProfile = filepath.Join(e.opts.cpuProfile, name+".pprof")
	}
	if e.opts.memProfile != "" {
		f.MemProfile = filepath.Join(e.opts.memProfile, name+".alloc.pprof")
	}
	return f
}

// createGroups creates groups [from, from+n) in ns: each an owner and
// three dependents ("gNNNNNNN-dep-J" sorts before "gNNNNNNN-owner").
func createGroups(ctx context.Context, e *env, ns string, from, n int) error {
	ids := make([]int, n)
	for i := range n {
		ids[i] = from + i
	}
	return createGroupIDs(ctx, e, ns, ids)
}

// createGroupIDs creates the groups numbered ids in ns.
func createGroupIDs(ctx context.Context, e *env, ns string, ids []int) error {
	owners := make([]cmSpec, len(ids))
	for i, g := range ids {
		owners[i] = cmSpec{name: fmt.Sprintf("g%07d-owner", g)}
	}
	uids, err := createAll(ctx, e.client, ns, owners)
	if err != nil {
		return err
	}
	deps := make([]cmSpec, 0, 3*len(ids))
	for i, g := range ids {
		on := owners[i].name
		for j := range 3 {
			deps = append(deps, cmSpec{name: fmt.Sprintf("g%07d-dep-%d", g, j), owners: []metav1.OwnerReference{ownerRef(on, uids[on], false)}})
		}
	}
	_, err = createAll(ctx, e.client, ns, deps)
	return err
}

// scaleCell starts coll on the populated cluster and measures it.
func scaleCell(ctx context.Context, e *env, ns string, size int, coll string) (scaleResult, error) {
	r := scaleResult{Size: size, Collector: coll}
	probeOwner, probeDep := "probe-"+coll+"-owner", "probe-"+coll+"-dep"
	if !isBare(coll) {
		uids, err := createAll(ctx, e.client, ns, []cmSpec{{name: probeOwner}})
		if err != nil {
			return r, err
		}
		if _, err := createAll(ctx, e.client, ns, []cmSpec{{name: probeDep, owners: []metav1.OwnerReference{ownerRef(probeOwner, uids[probeOwner], false)}}}); err != nil {
			return r, err
		}
	}
	before := e.proxy.snapshot()
	c, err := startChild(scaleFlags(e, coll, strconv.Itoa(size)), e.logDir)
	if err != nil {
		return r, err
	}
	stopped := false
	defer func() {
		if !stopped {
			_, _ = c.stop()
		}
	}()
	if r.Ready, err = c.waitSynced(ctx, e.opts.timeout); err != nil {
		return r, err
	}
	if !isBare(coll) {
		bg := metav1.DeletePropagationBackground
		if err := e.client.CoreV1().ConfigMaps(ns).Delete(ctx, probeOwner, metav1.DeleteOptions{PropagationPolicy: &bg}); err != nil {
			return r, err
		}
		err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, e.opts.timeout, true, func(ctx context.Context) (bool, error) {
			_, err := e.client.CoreV1().ConfigMaps(ns).Get(ctx, probeDep, metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				return true, nil
			}
			return false, err
		})
		if err != nil {
			return r, fmt.Errorf("the probe cascade: %w", err)
		}
		r.Useful = time.Since(c.start)
	}
	if err := e.proxy.waitQuiet(2*time.Second, e.opts.timeout); err != nil {
		r.Note = "GETs counted while the collector was still busy"
	}
	r.GETs = e.proxy.snapshot().sub(before).ByVerb[verbGet]
	stopped = true
	r.Usage, err = c.stop()
	return r, err
}

// runBareRole is the bare-client baseline's child: it pages every
// ConfigMap's metadata with client-go's metadata client, prints "synced",
// and waits for its stdin to close.
func runBareRole(ctx context.Context, f collectorFlags) error {
	md, err := metadata.NewForConfig(&rest.Config{Host: f.Server, QPS: float32(f.QPS), Burst: f.Burst})
	if err != nil {
		return err
	}
	opts := metav1.ListOptions{Limit: 5000}
	objects := 0
	for {
		l, err := md.Resource(corev1.SchemeGroupVersion.WithResource("configmaps")).List(ctx, opts)
		if err != nil {
			return err
		}
		objects += len(l.Items)
		if l.Continue == "" {
			break
		}
		opts.Continue = l.Continue
	}
	if objects == 0 {
		return nil // the empty cluster
	}
	return nil
}

// writeShardTable writes the sharded cells' Markdown table: per shard,
// the growth over one kgc process on the empty cluster.
func writeShardTable(w io.Writer, srs []shardResult) {
	if len(srs) == 0 {
		return
	}
	fmt.Fprintln(w, "\nSharded (docs/scaling.md): S kgc processes started at once, each keeping one shard of the namespaces (and every cluster-scoped object); per shard, min–max across shards:")
	fmt.Fprintln(w, "\n| objects | shards | all ready s | shard ready s | shard CPU s | shard heap peak MB | shard heap live MB | shard RSS peak MB | shard RSS live MB |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|")
	for _, sr := range srs {
		span := func(f func(r scaleResult) float64, format string) string {
			lo, hi := math.Inf(1), math.Inf(-1)
			for _, r := range sr.Shard {
				v := f(r)
				lo, hi = math.Min(lo, v), math.Max(hi, v)
			}
			return fmt.Sprintf(format+"–"+format, lo, hi)
		}
		fmt.Fprintf(w, "| %s | %d | %.2f | %s | %s | %s | %s | %s | %s |\n", fnum(float64(sr.Size), 0), sr.Shards, sr.Ready.Seconds(),
			span(func(r scaleResult) float64 { return r.Ready.Seconds() }, "%.2f"),
			span(func(r scaleResult) float64 { return r.Usage.CPU.Seconds() }, "%.2f"),
			span(func(r scaleResult) float64 { return mb(r.Usage.HeapPeak - r.Base.HeapPeak) }, "%.0f"),
			span(func(r scaleResult) float64 { return mb(r.Usage.HeapLive - r.Base.HeapLive) }, "%.0f"),
			span(func(r scaleResult) float64 { return float64(r.Usage.MaxRSSKB-r.Base.MaxRSSKB) / 1024 }, "%.0f"),
			span(func(r scaleResult) float64 { return float64(r.Usage.LiveRSSKB-r.Base.LiveRSSKB) / 1024 }, "%.0f"))
	}
}

// writeScaleTable writes the scale benchmark's Markdown table.
func writeScaleTable(w io.Writer, rs []scaleResult, machine string) {
	fmt.Fprintf(w, "Start on a populated cluster, by size (%s; one run each; unthrottled client; objects are ConfigMaps, one owner per three dependents; ready = process start → synced, useful = a probe Background cascade issued at sync has completed; growth over the same process on the empty cluster):\n\n", machine)
	fmt.Fprintln(w, "| objects | collector | ready s | ready / bare | ready / bare-stream | useful s | CPU s | CPU µs/object | heap peak KB/object | heap live KB/object | RSS peak KB/object | RSS live KB/object | GETs |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|---|---|---|---|")
	bare := map[string]map[int]time.Duration{collectorBare: {}, collectorBareStream: {}}
	for _, r := range rs {
		if m := bare[r.Collector]; m != nil {
			m[r.Size] = r.Ready
		}
	}
	ratio := func(r scaleResult, to string) string {
		if b := bare[to][r.Size]; b > 0 && !isBare(r.Collector) {
			return fmt.Sprintf("%.2f", r.Ready.Seconds()/b.Seconds())
		}
		return "–"
	}
	for _, r := range rs {
		frac, fracStream, useful := ratio(r, collectorBare), ratio(r, collectorBareStream), "–"
		if r.Useful > 0 {
			useful = fmt.Sprintf("%.2f", r.Useful.Seconds())
		}
		gets := strconv.FormatInt(r.GETs, 10)
		if isBare(r.Collector) {
			gets = "–"
		}
		fmt.Fprintf(w, "| %s | %s | %.2f | %s | %s | %s | %.2f | %.1f | %.3f | %.3f | %.3f | %.3f | %s |\n",
			fnum(float64(r.Size), 0), r.Collector, r.Ready.Seconds(), frac, fracStream, useful, r.Usage.CPU.Seconds(), float64(r.cpuPerObject())/1e3,
			r.heapPeakKB(), r.heapLiveKB(), r.rssPeakKB(), r.rssLiveKB(), gets)
	}
}

// runBareStreamRole is the streaming baseline's child: one WATCH of every
// ConfigMap's metadata with sendInitialEvents (the apiserver's WatchList,
// on by default since 1.34), until the bookmark that ends the initial
// events; it prints "synced" (its caller) and waits for its stdin to close.
func runBareStreamRole(ctx context.Context, f collectorFlags) error {
	md, err := metadata.NewForConfig(&rest.Config{Host: f.Server, QPS: float32(f.QPS), Burst: f.Burst})
	if err != nil {
		return err
	}
	send := true
	w, err := md.Resource(corev1.SchemeGroupVersion.WithResource("configmaps")).Watch(ctx, metav1.ListOptions{
		SendInitialEvents: &send, ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan, AllowWatchBookmarks: true,
	})
	if err != nil {
		return err
	}
	defer w.Stop()
	for ev := range w.ResultChan() {
		switch ev.Type {
		case watch.Error:
			return fmt.Errorf("watch list: %v", ev.Object)
		case watch.Bookmark:
			if m, err := meta.Accessor(ev.Object); err == nil && m.GetAnnotations()[metav1.InitialEventsAnnotationKey] == "true" {
				return nil
			}
		}
	}
	return errors.New("watch list: the stream ended before its initial events did")
}
