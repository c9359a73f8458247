package main

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/metadata/metadatainformer"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
)

var configMapsGVR = schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}

// env is what a cell runs against: a fresh control plane and a proxy that
// serves only the collector under test.
type env struct {
	cfg    *rest.Config // unthrottled, direct to the apiserver: setup and observation
	client kubernetes.Interface
	md     metadata.Interface
	proxy  *countingProxy
	logDir string
	opts   *options
}

// cellSpec says which collector with which budget.
type cellSpec struct {
	scenario  string
	collector string
	budget    string
	run       int
}

func (s cellSpec) flags(e *env) collectorFlags {
	b := e.opts.budgets[s.budget]
	f := collectorFlags{Collector: s.collector, Server: e.proxy.URL, QPS: b.qps, Burst: b.burst, Workers: e.opts.workers, MaxWrites: e.opts.kgcMaxWrites, KGCOptions: e.opts.kgcOptions}
	if e.opts.childLogs != "" {
		f.KeepLog = filepath.Join(e.opts.childLogs, s.namespace()+".log")
	}
	if e.opts.cpuProfile != "" {
		f.CPUProfile = filepath.Join(e.opts.cpuProfile, sanitize(fmt.Sprintf("%s-%s-%s-%d", s.scenario, s.collector, s.budget, s.run))+".pprof")
	}
	if e.opts.memProfile != "" {
		f.MemProfile = filepath.Join(e.opts.memProfile, sanitize(fmt.Sprintf("%s-%s-%s-%d", s.scenario, s.collector, s.budget, s.run))+".alloc.pprof")
	}
	return f
}

// namespace is the cell's namespace.
func (s cellSpec) namespace() string {
	return sanitize(fmt.Sprintf("%s-%s-%s-%d", s.scenario, s.collector, s.budget, s.run))
}

// watcher mirrors the objects of one namespace (metadata only; ConfigMaps
// unless other resources are given, the first of them is what objects
// returns), direct from the apiserver, so that the benchmark can wait for
// conditions without polling LISTs.
type watcher struct {
	gvrs    []schema.GroupVersionResource
	stores  map[schema.GroupVersionResource]cache.Store
	deleted map[schema.GroupVersionResource]*atomic.Int64 // delete events since resetDeleted
	cancel  context.CancelFunc
	done    chan struct{}
	changed chan struct{} // signalled (coalesced) after every event
}

func newWatcher(md metadata.Interface, ns string, gvrs ...schema.GroupVersionResource) (*watcher, error) {
	return newWatcherWith(md, ns, nil, gvrs...)
}

// newWatcherWith is newWatcher with tweak applied to its lists and
// watches (nil: none).
func newWatcherWith(md metadata.Interface, ns string, tweak func(*metav1.ListOptions), gvrs ...schema.GroupVersionResource) (*watcher, error) {
	if len(gvrs) == 0 {
		gvrs = []schema.GroupVersionResource{configMapsGVR}
	}
	ctx, cancel := context.WithCancel(context.Background())
	w := &watcher{
		gvrs:    gvrs,
		stores:  map[schema.GroupVersionResource]cache.Store{},
		deleted: map[schema.GroupVersionResource]*atomic.Int64{},
		cancel:  cancel,
		done:    make(chan struct{}),
		changed: make(chan struct{}, 1),
	}
	signal := func() {
		select {
		case w.changed <- struct{}{}:
		default:
		}
	}
	var wg sync.WaitGroup
	var synced []cache.InformerSynced
	for _, gvr := range gvrs {
		inf := metadatainformer.NewFilteredMetadataInformer(md, gvr, ns, 0, cache.Indexers{}, tweak).Informer()
		del := &atomic.Int64{}
		w.stores[gvr], w.deleted[gvr] = inf.GetStore(), del
		if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc:    func(any) { signal() },
			UpdateFunc: func(any, any) { signal() },
			DeleteFunc: func(any) { del.Add(1); signal() },
		}); err != nil {
			cancel()
			wg.Wait()
			return nil, err
		}
		wg.Go(func() { inf.RunWithContext(ctx) })
		synced = append(synced, inf.HasSynced)
	}
	go func() { wg.Wait(); close(w.done) }()
	sctx, scancel := context.WithTimeout(ctx, time.Minute)
	defer scancel()
	if !cache.WaitForCacheSync(sctx.Done(), synced...) {
		w.stop()
		return nil, errors.New("watcher did not sync")
	}
	return w, nil
}

func (w *watcher) stop() { w.cancel(); <-w.done }

// objects returns the mirrored objects of the first resource.
func (w *watcher) objects() []*metav1.PartialObjectMetadata { return w.of(w.gvrs[0]) }

// resetDeleted zeroes the delete-event counters.
func (w *watcher) resetDeleted() {
	for _, d := range w.deleted {
		d.Store(0)
	}
}

// deletedSince is the number of delete events of gvr since resetDeleted.
func (w *watcher) deletedSince(gvr schema.GroupVersionResource) int {
	return int(w.deleted[gvr].Load())
}

// of returns the mirrored objects of gvr (one of the watcher's resources).
func (w *watcher) of(gvr schema.GroupVersionResource) []*metav1.PartialObjectMetadata {
	items := w.stores[gvr].List()
	out := make([]*metav1.PartialObjectMetadata, 0, len(items))
	for _, it := range items {
		if o, ok := it.(*metav1.PartialObjectMetadata); ok {
			out = append(out, o)
		}
	}
	return out
}

// waitFor evaluates cond over the mirrored objects whenever the watcher
// has seen an event (at most once per 2ms, and at least every 20ms)
// until it holds or timeout passes. Waking on events rather than on a 20ms
// tick keeps the end of a measured phase within about 2ms of the watch
// event that completed it, for every collector and for the limit alike;
// the 2ms floor bounds the benchmark's own CPU (it shares the
// machine with the apiserver) while events stream in.
func (w *watcher) waitFor(ctx context.Context, timeout time.Duration, what string, cond func([]*metav1.PartialObjectMetadata) bool) error {
	return w.waitUntil(ctx, timeout, what, func() bool { return cond(w.objects()) })
}

// waitUntil is waitFor for conditions over any of the watcher's resources.
func (w *watcher) waitUntil(ctx context.Context, timeout time.Duration, what string, cond func() bool) error {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		if cond() {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s: %w", what, ctx.Err())
		case <-deadline.C:
			if cond() {
				return nil
			}
			return fmt.Errorf("timed out after %s waiting for %s", timeout, what)
		case <-w.changed:
			time.Sleep(2 * time.Millisecond)
		case <-tick.C:
		}
	}
}

func countPrefix(objs []*metav1.PartialObjectMetadata, prefix string) int {
	n := 0
	for _, o := range objs {
		if strings.HasPrefix(o.Name, prefix) {
			n++
		}
	}
	return n
}

// cmSpec is a ConfigMap to create.
type cmSpec struct {
	name   string
	owners []metav1.OwnerReference
	labels map[string]string
}

// inParallel calls do(i) for every i < n from 32 goroutines. A goroutine
// whose call fails stops; the first error is returned.
func inParallel(n int, do func(i int) error) error {
	var (
		next  atomic.Int64
		wg    sync.WaitGroup
		errMu sync.Mutex
		first error
	)
	for range 32 {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				if err := do(i); err != nil {
					errMu.Lock()
					if first == nil {
						first = err
					}
					errMu.Unlock()
					return
				}
			}
		})
	}
	wg.Wait()
	return first
}

// createAll creates the ConfigMaps with 32 concurrent unthrottled requests
// and returns the UIDs by name.
func createAll(ctx context.Context, client kubernetes.Interface, ns string, specs []cmSpec) (map[string]types.UID, error) {
	var (
		mu   sync.Mutex
		uids = make(map[string]types.UID, len(specs))
	)
	err := inParallel(len(specs), func(i int) error {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: specs[i].name, OwnerReferences: specs[i].owners, Labels: specs[i].labels}}
		got, err := client.CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{})
		if err != nil {
			return fmt.Errorf("create %s/%s: %w", ns, specs[i].name, err)
		}
		mu.Lock()
		uids[got.Name] = got.UID
		mu.Unlock()
		return nil
	})
	return uids, err
}

// deleteAll deletes the named ConfigMaps with 32 concurrent requests.
func deleteAll(ctx context.Context, client kubernetes.Interface, ns string, names []string, policy *metav1.DeletionPropagation) error {
	return inParallel(len(names), func(i int) error {
		err := client.CoreV1().ConfigMaps(ns).Delete(ctx, names[i], metav1.DeleteOptions{PropagationPolicy: policy})
		if err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("delete %s/%s: %w", ns, names[i], err)
		}
		return nil
	})
}

func ownerRef(name string, uid types.UID, block bool) metav1.OwnerReference {
	r := metav1.OwnerReference{APIVersion: "v1", Kind: "ConfigMap", Name: name, UID: uid}
	if block {
		r.BlockOwnerDeletion = &block
	}
	return r
}

// runCell runs one cell on e and returns its result.
func runCell(ctx context.Context, e *env, s cellSpec) (result, error) {
	ns := s.namespace()
	if _, err := e.client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		return result{}, err
	}
	gvrs := []schema.GroupVersionResource{configMapsGVR}
	if s.scenario == scCollection {
		gvrs = append(gvrs, secretsGVR)
	}
	w, err := newWatcher(e.md, ns, gvrs...)
	if err != nil {
		return result{}, err
	}
	defer w.stop()
	res := result{Scenario: s.scenario, Collector: s.collector, Budget: s.budget, Run: s.run}
	switch s.scenario {
	case "background", "foreground", "chain", "orphan", "orphan-background":
		err = runLive(ctx, e, s, ns, w, &res)
	case "sweep":
		err = runSweep(ctx, e, s, ns, w, &res)
	case "populated":
		err = runPopulated(ctx, e, s, ns, w, &res)
	case scCRDDelete:
		err = runCRDDelete(ctx, e, s, ns, w, &res)
	case scCollection:
		err = runCollection(ctx, e, s, ns, w, &res)
	case scBacklog:
		err = runBacklog(ctx, e, s, ns, w, &res)
	default:
		err = fmt.Errorf("unknown scenario %q", s.scenario)
	}
	return res, err
}

// runLive: the collector starts on an empty namespace and syncs; the
// objects are created; once the collector is quiet the measured phase
// deletes the owners and waits for the cascade.
func runLive(ctx context.Context, e *env, s cellSpec, ns string, w *watcher, res *result) error {
	o := e.opts
	c, err := startChild(s.flags(e), e.logDir)
	if err != nil {
		return err
	}
	stopped := false
	defer func() {
		if !stopped {
			_, _ = c.stop()
		}
	}()
	if _, err := c.waitSynced(ctx, o.timeout); err != nil {
		return err
	}

	var (
		owners   []string // names deleted in the measured phase
		policy   metav1.DeletionPropagation
		done     func(objs []*metav1.PartialObjectMetadata) bool
		total    int
		ownerUID types.UID
		// background: owners deleted Background at the same time;
		// awaited: the owner whose going is timed (res.OwnerGone).
		background []string
		awaited    types.UID
	)
	switch s.scenario {
	case "background", "foreground":
		k, m := o.fanOwners, o.fanDeps
		if s.budget == "unthrottled" {
			// An unthrottled cascade of 1,000 objects lasts well under a
			// second, where one scheduling hiccup of the shared machine
			// (a GC pause of the apiserver, another process) moves the
			// rate by tens of percent; a larger one measures the rate.
			// The same for both collectors, and the limit deletes as many.
			m *= max(o.unthrottledScale, 1)
		}
		var specs []cmSpec
		for i := range k {
			specs = append(specs, cmSpec{name: fmt.Sprintf("owner-%03d", i)})
			owners = append(owners, fmt.Sprintf("owner-%03d", i))
		}
		uids, err := createAll(ctx, e.client, ns, specs)
		if err != nil {
			return err
		}
		specs = specs[:0]
		fg := s.scenario == "foreground"
		for i := range k {
			on := fmt.Sprintf("owner-%03d", i)
			for j := range m {
				specs = append(specs, cmSpec{name: fmt.Sprintf("dep-%03d-%05d", i, j), owners: []metav1.OwnerReference{ownerRef(on, uids[on], fg)}})
			}
		}
		if _, err := createAll(ctx, e.client, ns, specs); err != nil {
			return err
		}
		total = k + k*m
		if fg {
			policy = metav1.DeletePropagationForeground
			res.Objects = k*m + k // dependents deleted + owners' finalizers removed
			done = func(objs []*metav1.PartialObjectMetadata) bool { return countPrefix(objs, "owner-") == 0 }
		} else {
			policy = metav1.DeletePropagationBackground
			res.Objects = k * m
			done = func(objs []*metav1.PartialObjectMetadata) bool { return countPrefix(objs, "dep-") == 0 }
		}
	case "chain":
		// link-0000 ← link-0001 ← … each blocking its owner's deletion;
		// created in order so every owner exists first.
		prevName, prevUID := "", types.UID("")
		for i := range o.chain {
			sp := cmSpec{name: fmt.Sprintf("link-%04d", i)}
			if i > 0 {
				sp.owners = []metav1.OwnerReference{ownerRef(prevName, prevUID, true)}
			}
			uids, err := createAll(ctx, e.client, ns, []cmSpec{sp})
			if err != nil {
				return err
			}
			prevName, prevUID = sp.name, uids[sp.name]
		}
		owners = []string{"link-0000"}
		policy = metav1.DeletePropagationForeground
		total = o.chain
		res.Objects = o.chain
		done = func(objs []*metav1.PartialObjectMetadata) bool { return countPrefix(objs, "link-0000") == 0 }
	case "orphan":
		uids, err := createAll(ctx, e.client, ns, []cmSpec{{name: "owner"}})
		if err != nil {
			return err
		}
		ownerUID = uids["owner"]
		var specs []cmSpec
		for j := range o.orphan {
			specs = append(specs, cmSpec{name: fmt.Sprintf("dep-%05d", j), owners: []metav1.OwnerReference{ownerRef("owner", ownerUID, false)}})
		}
		if _, err := createAll(ctx, e.client, ns, specs); err != nil {
			return err
		}
		owners = []string{"owner"}
		policy = metav1.DeletePropagationOrphan
		total = 1 + o.orphan
		res.Objects = o.orphan + 1 // dependents orphaned + the owner's finalizer removed
		done = func(objs []*metav1.PartialObjectMetadata) bool {
			for _, ob := range objs {
				if ob.UID == ownerUID {
					return false
				}
				for _, r := range ob.OwnerReferences {
					if r.UID == ownerUID {
						return false
					}
				}
			}
			return true
		}
	}
	if s.scenario == "orphan-background" {
		// Each dependent refers to both owners: the Orphan one must not
		// take it along, the Background one, gone, would.
		uids, err := createAll(ctx, e.client, ns, []cmSpec{{name: "orphaned-owner"}, {name: "deleted-owner"}})
		if err != nil {
			return err
		}
		refs := []metav1.OwnerReference{ownerRef("orphaned-owner", uids["orphaned-owner"], false), ownerRef("deleted-owner", uids["deleted-owner"], false)}
		var specs []cmSpec
		for j := range o.orphanBackground {
			specs = append(specs, cmSpec{name: fmt.Sprintf("dep-%05d", j), owners: refs})
		}
		if _, err := createAll(ctx, e.client, ns, specs); err != nil {
			return err
		}
		owners, policy, background, awaited = []string{"orphaned-owner"}, metav1.DeletePropagationOrphan, []string{"deleted-owner"}, uids["orphaned-owner"]
		total = 2 + o.orphanBackground
		res.Objects = o.orphanBackground + 1 // dependents orphaned (some then deleted) + the finalizer removed
		done = func(objs []*metav1.PartialObjectMetadata) bool {
			for _, ob := range objs {
				if ob.UID == uids["orphaned-owner"] || ob.UID == uids["deleted-owner"] {
					return false
				}
				for _, r := range ob.OwnerReferences {
					if r.UID == uids["orphaned-owner"] || r.UID == uids["deleted-owner"] {
						return false
					}
				}
			}
			return true
		}
	}
	if s.scenario == "orphan" {
		awaited = ownerUID
	}
	var start time.Time // of the measured phase
	if awaited != "" {
		settled := done
		done = func(objs []*metav1.PartialObjectMetadata) bool {
			if res.OwnerGone == 0 && !slices.ContainsFunc(objs, func(ob *metav1.PartialObjectMetadata) bool { return ob.UID == awaited }) {
				res.OwnerGone = time.Since(start)
			}
			return settled(objs)
		}
	}
	if err := w.waitFor(ctx, o.timeout, "the watcher to see every object", func(objs []*metav1.PartialObjectMetadata) bool { return len(objs) >= total }); err != nil {
		return err
	}
	// Let the collector digest the new objects before measuring.
	_ = e.proxy.waitQuiet(time.Second, time.Minute)

	before := e.proxy.snapshot()
	e.proxy.mark()
	start = time.Now()
	bg := metav1.DeletePropagationBackground
	deleted := make(chan error, 1)
	go func() { deleted <- deleteAll(ctx, e.client, ns, background, &bg) }()
	if err := errors.Join(deleteAll(ctx, e.client, ns, owners, &policy), <-deleted); err != nil {
		return err
	}
	if err := w.waitFor(ctx, o.timeout, s.scenario+" cascade", done); err != nil {
		return err
	}
	res.Elapsed = time.Since(start)
	res.FirstCall, res.LastCall = e.proxy.firstLast(start)
	res.InFlight = e.proxy.meanInFlight(start, start.Add(res.Elapsed))
	res.Calls = e.proxy.snapshot().sub(before)
	res.Trips = c.breakerTrips()
	stopped = true
	res.Usage, err = c.stop()
	return err
}

// runSweep: dependents of owners that never existed are created first; the
// measured phase is from the collector's start until all are collected.
func runSweep(ctx context.Context, e *env, s cellSpec, ns string, w *watcher, res *result) error {
	o := e.opts
	var specs []cmSpec
	for i := range o.sweepUnique {
		specs = append(specs, cmSpec{name: fmt.Sprintf("dep-u-%05d", i), owners: []metav1.OwnerReference{ownerRef(fmt.Sprintf("ghost-u-%05d", i), uuid.NewUUID(), false)}})
	}
	shared := make([]metav1.OwnerReference, max(o.sweepSharedOwners, 1))
	for i := range shared {
		shared[i] = ownerRef(fmt.Sprintf("ghost-s-%03d", i), uuid.NewUUID(), false)
	}
	for i := range o.sweepShared {
		specs = append(specs, cmSpec{name: fmt.Sprintf("dep-s-%05d", i), owners: []metav1.OwnerReference{shared[i%len(shared)]}})
	}
	if _, err := createAll(ctx, e.client, ns, specs); err != nil {
		return err
	}
	if err := w.waitFor(ctx, o.timeout, "the watcher to see every object", func(objs []*metav1.PartialObjectMetadata) bool { return len(objs) >= len(specs) }); err != nil {
		return err
	}
	res.Objects = len(specs)
	return collectAtStart(ctx, e, s, w, res, "the startup sweep")
}

// runPopulated: first the collector's peak RSS on the empty cluster; then
// N objects with live owners (groups of one owner and three dependents,
// named so that a LIST returns each dependent before its owner), and a
// fresh collector: time to sync, time until a probe cascade issued at sync
// has completed ("useful"), GETs spent until it is quiet, and peak RSS.
func runPopulated(ctx context.Context, e *env, s cellSpec, ns string, w *watcher, res *result) error {
	o := e.opts
	// Baseline.
	c, err := startChild(s.flags(e), e.logDir)
	if err != nil {
		return err
	}
	if _, err := c.waitSynced(ctx, o.timeout); err != nil {
		_, _ = c.stop()
		return err
	}
	_ = e.proxy.waitQuiet(time.Second, 30*time.Second)
	base, err := c.stop()
	if err != nil {
		return fmt.Errorf("baseline: %w", err)
	}
	res.BaselineRSS, res.BaselineLiveRSS = base.MaxRSSKB, base.LiveRSSKB

	groups := max(o.populated/4, 1)
	var ownerSpecs, depSpecs []cmSpec
	for i := range groups {
		ownerSpecs = append(ownerSpecs, cmSpec{name: fmt.Sprintf("g%06d-owner", i)})
	}
	uids, err := createAll(ctx, e.client, ns, append(ownerSpecs, cmSpec{name: "probe-owner"}))
	if err != nil {
		return err
	}
	for i := range groups {
		on := fmt.Sprintf("g%06d-owner", i)
		for j := range 3 {
			depSpecs = append(depSpecs, cmSpec{name: fmt.Sprintf("g%06d-dep-%d", i, j), owners: []metav1.OwnerReference{ownerRef(on, uids[on], false)}})
		}
	}
	depSpecs = append(depSpecs, cmSpec{name: "probe-dep", owners: []metav1.OwnerReference{ownerRef("probe-owner", uids["probe-owner"], false)}})
	if _, err := createAll(ctx, e.client, ns, depSpecs); err != nil {
		return err
	}
	res.Tracked = len(ownerSpecs) + len(depSpecs) + 1
	res.Objects = res.Tracked
	if err := w.waitFor(ctx, o.timeout, "the watcher to see every object", func(objs []*metav1.PartialObjectMetadata) bool { return len(objs) >= res.Tracked }); err != nil {
		return err
	}

	before := e.proxy.snapshot()
	c, err = startChild(s.flags(e), e.logDir)
	if err != nil {
		return err
	}
	stopped := false
	defer func() {
		if !stopped {
			_, _ = c.stop()
		}
	}()
	if res.Ready, err = c.waitSynced(ctx, o.timeout); err != nil {
		return err
	}
	bg := metav1.DeletePropagationBackground
	if err := e.client.CoreV1().ConfigMaps(ns).Delete(ctx, "probe-owner", metav1.DeleteOptions{PropagationPolicy: &bg}); err != nil {
		return err
	}
	if err := w.waitFor(ctx, o.timeout, "the probe cascade", func(objs []*metav1.PartialObjectMetadata) bool { return countPrefix(objs, "probe-dep") == 0 }); err != nil {
		return err
	}
	res.Useful = time.Since(c.start)
	if err := e.proxy.waitQuiet(2*time.Second, o.timeout); err != nil {
		res.Note = "GETs counted while the collector was still busy"
	}
	res.Elapsed = res.Useful
	res.Calls = e.proxy.snapshot().sub(before)
	res.Trips = c.breakerTrips()
	stopped = true
	res.Usage, err = c.stop()
	return err
}

// runLimit measures the apiserver's raw DELETE rate: n ConfigMaps deleted
// by an unthrottled 32-way client, three ways: through the proxy from a
// process of its own (as the collectors are: a child of this binary), through
// the proxy from this process (which hosts the apiserver), and directly.
//
// It is measured exactly as a collector's cell is, so that "unthrottled
// Background fan-out vs the limit" compares like with like: the namespace
// is mirrored by the same watcher, the objects were created the same way,
// and the clock runs from the first DELETE until the watcher has seen every
// object gone (a collector's cell ends when the watcher sees its last
// dependent gone). Through the proxy first, so that it is measured right
// after the collectors' cells of the run.
func runLimit(ctx context.Context, e *env, run int) ([]result, error) {
	var out []result
	for _, via := range []string{"process", "proxy", "direct"} {
		ns := sanitize(fmt.Sprintf("limit-%s-%d", via, run))
		if _, err := e.client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			return nil, err
		}
		names := limitNames(e.opts.limit)
		specs := make([]cmSpec, len(names))
		for i, n := range names {
			specs[i] = cmSpec{name: n}
		}
		if _, err := createAll(ctx, e.client, ns, specs); err != nil {
			return nil, err
		}
		r, err := func() (result, error) {
			w, err := newWatcher(e.md, ns)
			if err != nil {
				return result{}, err
			}
			defer w.stop()
			if err := w.waitFor(ctx, e.opts.timeout, "the watcher to see every object", func(objs []*metav1.PartialObjectMetadata) bool { return len(objs) >= len(names) }); err != nil {
				return result{}, err
			}
			var deleteAllNow func() error
			var c *child
			stopped := false
			switch via {
			case "process":
				// A process of its own that talks to the proxy, as the
				// collectors are: the same path to the apiserver, and a
				// runtime and scheduler of its own competing for the
				// machine, not a share of the apiserver's.
				c, err = startChild(collectorFlags{Collector: collectorClient32, Server: e.proxy.URL}, e.logDir)
				if err != nil {
					return result{}, err
				}
				defer func() {
					if !stopped {
						_, _ = c.stop()
					}
				}()
				if _, err := c.waitSynced(ctx, e.opts.timeout); err != nil {
					return result{}, err
				}
				deleteAllNow = func() error {
					_, err := fmt.Fprintf(c.stdin, "%s %d\n", ns, len(names))
					return err
				}
			case "proxy":
				pc, err := kubernetes.NewForConfig(&rest.Config{Host: e.proxy.URL, QPS: -1})
				if err != nil {
					return result{}, err
				}
				deleteAllNow = func() error { return deleteAll(ctx, pc, ns, names, nil) }
			default:
				deleteAllNow = func() error { return deleteAll(ctx, e.client, ns, names, nil) }
			}
			before := e.proxy.snapshot()
			e.proxy.mark()
			start := time.Now()
			if err := deleteAllNow(); err != nil {
				return result{}, err
			}
			if err := w.waitFor(ctx, e.opts.timeout, "the limit's deletions", func(objs []*metav1.PartialObjectMetadata) bool { return len(objs) == 0 }); err != nil {
				return result{}, err
			}
			r := result{Scenario: "limit", Collector: collectorClient32, Budget: via, Run: run, Objects: len(names), Elapsed: time.Since(start)}
			r.FirstCall, r.LastCall = e.proxy.firstLast(start)
			r.InFlight = e.proxy.meanInFlight(start, start.Add(r.Elapsed))
			r.Calls = e.proxy.snapshot().sub(before)
			if c != nil {
				stopped = true
				u, err := c.stop()
				if err != nil {
					return result{}, err
				}
				r.Usage = u
			}
			return r, nil
		}()
		if err != nil {
			return out, err
		}
		out = append(out, r)
	}
	return out, nil
}

// cleanNamespace removes what a cell left behind (after a failure) so the
// next cell's collector does not see it.
func cleanNamespace(ctx context.Context, client kubernetes.Interface, ns string) error {
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		l, err := client.CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		if len(l.Items) == 0 {
			return true, nil
		}
		for _, cm := range l.Items {
			if len(cm.Finalizers) > 0 {
				_, _ = client.CoreV1().ConfigMaps(ns).Patch(ctx, cm.Name, types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{})
			}
		}
		_ = client.CoreV1().ConfigMaps(ns).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{})
		return false, nil
	})
	if err != nil {
		return err
	}
	// The Secrets of the bulk deletions' owners (none has a finalizer).
	return wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		l, err := client.CoreV1().Secrets(ns).List(ctx, metav1.ListOptions{})
		if err != nil || len(l.Items) == 0 {
			return err == nil, err
		}
		_ = client.CoreV1().Secrets(ns).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{})
		return false, nil
	})
}
