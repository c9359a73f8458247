package model

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	utilrand "k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/retry"

	"github.com/kgc-dev/kgc/sandbox/internal/testenv"
)

// Totals over the whole package run, for the final summary.
var totalSeeds, totalOps, totalJudged, totalOrphans, totalForegrounds, totalViolations atomic.Int64

// Totals of the findings excused as known limits, by limit.
var totalWatchLag, totalRestartMemory atomic.Int64

func envInt(t *testing.T, name string, def int64) int64 {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		t.Fatalf("%s=%q: %v", name, v, err)
	}
	return n
}

// TestModel runs the randomized model-based safety test for several seeds.
func TestModel(t *testing.T) {
	first := envInt(t, "KGC_SEED", time.Now().UnixNano()%1_000_000_000)
	seeds := envInt(t, "KGC_MODEL_SEEDS", 3)
	objects := int(envInt(t, "KGC_MODEL_OBJECTS", 150))
	ops := int(envInt(t, "KGC_MODEL_OPS", int64(objects)))
	kinds := chaosKinds(t)
	maxRestarts := int(envInt(t, "KGC_MODEL_RESTARTS", 2))
	t.Logf("seeds %d..%d (rerun one with KGC_SEED=<seed> KGC_MODEL_SEEDS=1), %d objects, %d operations each, chaos %v (at most %d restarts)",
		first, first+seeds-1, objects, ops, slices.Sorted(maps.Keys(kinds)), maxRestarts)
	for i := range seeds {
		seed := first + i
		plan := planChaos(seed, ops, kinds, maxRestarts)
		if !t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) { runSeed(t, seed, objects, ops, plan) }) {
			t.Logf("seed %d failed; rerun it with KGC_SEED=%d KGC_MODEL_SEEDS=1 KGC_MODEL_OBJECTS=%d KGC_MODEL_OPS=%d KGC_MODEL_CHAOS=%s KGC_MODEL_RESTARTS=%d",
				seed, seed, objects, ops, strings.Join(slices.Sorted(maps.Keys(kinds)), ","), maxRestarts)
		}
	}
	t.Logf("summary: %d seeds, %d operations, %d collector deletions judged (S1, S2), %d orphaning owners judged (S2), %d foreground owners judged (S3), %d violations; known limits: %d %s, %d %s",
		totalSeeds.Load(), totalOps.Load(), totalJudged.Load(), totalOrphans.Load(), totalForegrounds.Load(), totalViolations.Load(),
		totalWatchLag.Load(), limitWatchLag, totalRestartMemory.Load(), limitRestartMemory)
}

// recObj is the test's record of one object: what it created and what its
// own successful writes returned.
type recObj struct {
	ident
	idx        int
	refs       []simRef
	finalizers []string // custom ones (hold) and, once the test deleted it, the policy's
	deleting   bool     // the test deleted it
	gone       bool     // the test deleted it and it had no finalizers
	orphaned   bool     // the test deleted it with the Orphan policy
	seenGone   bool     // a GET found it gone (the collector deleted it); only steers the choice of operations
}

// run is one seed's run.
type run struct {
	t       *testing.T
	ctx     context.Context
	rng     *rand.Rand
	seed    int64
	id      string // label value of every object of the run
	ns      string
	objs    []*recObj
	byUID   map[types.UID]*recObj
	deleted map[types.UID]bool // objects the test itself deleted
	counts  map[string]int     // applied operations by kind
	// operating is set once the initial forest exists: later creations are
	// operations.
	operating bool
	skipped   int
}

func runSeed(t *testing.T, seed int64, objects, ops int, plan chaosPlan) {
	t.Logf("seed %d; chaos: %s", seed, plan)
	r := &run{
		t: t, ctx: t.Context(), seed: seed,
		rng:     rand.New(rand.NewPCG(uint64(seed), uint64(seed)^0x9e3779b97f4a7c15)),
		id:      fmt.Sprintf("s%d-%s", seed, utilrand.String(5)),
		byUID:   map[types.UID]*recObj{},
		deleted: map[types.UID]bool{},
		counts:  map[string]int{},
	}
	r.ns = "model-" + r.id
	if _, err := kubeClient.CoreV1().Namespaces().Create(r.ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: r.ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create namespace: %v", err)
	}
	t.Cleanup(r.cleanup)

	start := time.Now()
	// After the namespace's cleanup is registered: the collector stops
	// before the run's objects are cleaned up.
	chaos := startChaos(t, seed, plan, r.ns)
	for range objects {
		r.createRandom()
	}
	created := time.Since(start)
	r.operating = true
	for i := range ops {
		chaos.beforeOp(i)
		r.randomOp()
	}
	chaos.settle()
	// Let everything finish: release every custom finalizer, once every
	// orphaning is done on the server. A release dooms what a deletion
	// would (see racesOrphaning), and these cannot be skipped: waiting
	// for the orphan finalizers to go gives the order the reference model
	// assumes, the orphaned references removed first.
	r.waitOrphaningDone()
	for _, o := range r.objs {
		if slices.Contains(o.finalizers, holdFinalizer) {
			r.releaseHold(o)
		}
	}

	want := r.expected()
	got, diff := r.waitForModel(want)
	if diff != "" {
		t.Errorf("seed %d: the cluster did not settle in the state of the reference model within the timeout:\n%s", seed, diff)
	}
	settled := time.Since(start)
	if err := watcher.sync(r.ctx, r.ns); err != nil {
		t.Fatalf("seed %d: watcher barrier: %v", seed, err)
	}
	if diff != "" {
		// The trace: what the watcher saw of each object the model and
		// the cluster disagree on, and of its owners.
		for uid := range want {
			if g, ok := got[uid]; !ok || g != want[uid] {
				t.Logf("seed %d trace:\n%s", seed, watcher.trace(uid))
			}
		}
		for uid := range got {
			if _, ok := want[uid]; !ok {
				t.Logf("seed %d trace:\n%s", seed, watcher.trace(uid))
			}
		}
	}
	j := watcher.judge(r.id, r.deleted, chaos)
	for _, e := range j.excused {
		t.Logf("known limit (seed %d) %s", seed, e)
	}
	for _, v := range j.violations {
		t.Errorf("SAFETY VIOLATION (seed %d) %s", seed, v)
	}
	if j.unknown > 0 {
		t.Errorf("seed %d: %d deletions were seen only as DeletedFinalStateUnknown and could not be judged", seed, j.unknown)
	}
	applied := 0
	for _, n := range r.counts {
		applied += n
	}
	totalSeeds.Add(1)
	totalOps.Add(int64(applied))
	totalJudged.Add(int64(j.judged))
	totalOrphans.Add(int64(j.orphans))
	totalForegrounds.Add(int64(j.foregrounds))
	totalViolations.Add(int64(len(j.violations)))
	totalWatchLag.Add(int64(j.limited[limitWatchLag]))
	totalRestartMemory.Add(int64(j.limited[limitRestartMemory]))
	t.Logf("seed %d: %d objects created in %s, %d operations applied %v (%d skipped: target changed or gone), %d collector starts, settled at %s with %d survivors; judged %d collector deletions, %d orphaning and %d foreground owners; %d violations; known limits: %d %s, %d %s; fault proxy: %s",
		seed, len(r.objs), created.Round(time.Millisecond), applied, r.counts, r.skipped, chaos.starts,
		settled.Round(time.Millisecond), len(got), j.judged, j.orphans, j.foregrounds, len(j.violations),
		j.limited[limitWatchLag], limitWatchLag, j.limited[limitRestartMemory], limitRestartMemory, chaos.ft)
	for _, d := range chaos.deliveries {
		t.Logf("seed %d: delivery record of %s", seed, d)
	}
}

// ---- creating objects ----

// eligibleOwners returns the objects that may own a new or existing
// dependent of kind k at position idx: earlier in the creation order (the
// forest stays acyclic), not deleted by the test, not known gone, and of a
// legal scope (a cluster-scoped dependent only gets cluster-scoped owners).
func (r *run) eligibleOwners(k kindInfo, idx int) []*recObj {
	var out []*recObj
	for _, o := range r.objs {
		if o.idx >= idx || o.deleting || o.seenGone {
			continue
		}
		if !k.namespaced && o.kind.namespaced {
			continue
		}
		out = append(out, o)
	}
	return out
}

func (r *run) pickKind() kindInfo {
	switch n := r.rng.IntN(100); {
	case n < 30:
		return configMapKind
	case n < 55:
		return secretKind
	case n < 85:
		return widgetKind
	default:
		return gadgetKind
	}
}

// pickOwners picks 1-3 distinct owners; namespaced dependents mostly get
// namespaced owners and now and then a cluster-scoped one.
func (r *run) pickOwners(k kindInfo, idx int) []*recObj {
	cands := r.eligibleOwners(k, idx)
	if len(cands) == 0 {
		return nil
	}
	var ns, cluster []*recObj
	for _, c := range cands {
		if c.kind.namespaced {
			ns = append(ns, c)
		} else {
			cluster = append(cluster, c)
		}
	}
	want := 1 + r.rng.IntN(3)
	var out []*recObj
	for range want {
		pool := ns
		if len(pool) == 0 || (len(cluster) > 0 && r.rng.IntN(10) == 0) {
			pool = cluster
		}
		if len(pool) == 0 {
			break
		}
		// Prefer recent objects a little, for deeper trees.
		c := pool[len(pool)-1-min(len(pool)-1, r.rng.IntN(len(pool))/(1+r.rng.IntN(2)))]
		if !slices.Contains(out, c) {
			out = append(out, c)
		}
	}
	return out
}

// createRandom creates one object with random owners among the live ones.
func (r *run) createRandom() {
	idx := len(r.objs)
	k := r.pickKind()
	var owners []*recObj
	if idx >= 5 && r.rng.IntN(5) != 0 {
		owners = r.pickOwners(k, idx)
	}
	var refs []metav1.OwnerReference
	for _, o := range owners {
		refs = append(refs, o.ref(r.rng.IntN(2) == 0))
	}
	var finalizers []string
	if r.rng.IntN(100) < 15 {
		finalizers = []string{holdFinalizer}
	}
	o := &recObj{ident: ident{kind: k, name: fmt.Sprintf("%s-%d", strings.ToLower(k.kind), idx)}, idx: idx}
	if k.namespaced {
		o.namespace = r.ns
	} else {
		o.name = r.id + "-" + o.name
	}
	u := &unstructured.Unstructured{}
	u.SetAPIVersion(k.apiVersion)
	u.SetKind(k.kind)
	u.SetName(o.name)
	u.SetNamespace(o.namespace)
	u.SetLabels(map[string]string{labelSeed: r.id})
	u.SetOwnerReferences(refs)
	u.SetFinalizers(finalizers)
	created, err := o.dynamic().Create(r.ctx, u, metav1.CreateOptions{})
	if err != nil {
		r.t.Fatalf("seed %d: create %s: %v", r.seed, o.ident, err)
	}
	o.uid = created.GetUID()
	o.refs = toSimRefs(created.GetOwnerReferences())
	o.finalizers = created.GetFinalizers()
	r.objs = append(r.objs, o)
	r.byUID[o.uid] = o
	if r.operating {
		r.counts["create"]++
	}
}

func toSimRefs(refs []metav1.OwnerReference) []simRef {
	out := make([]simRef, 0, len(refs))
	for _, ref := range refs {
		out = append(out, simRef{uid: ref.UID, block: ref.BlockOwnerDeletion != nil && *ref.BlockOwnerDeletion})
	}
	return out
}

// ---- operations ----

func (r *run) randomOp() {
	switch n := r.rng.IntN(100); {
	case n < 15:
		r.createRandom()
	case n < 50:
		r.deleteRandom()
	case n < 65:
		r.removeRefRandom()
	case n < 80:
		r.addRefRandom()
	default:
		r.releaseHoldRandom()
	}
}

// pick returns a random recorded object satisfying ok, or nil.
func (r *run) pick(ok func(*recObj) bool) *recObj {
	var cands []*recObj
	for _, o := range r.objs {
		if ok(o) {
			cands = append(cands, o)
		}
	}
	if len(cands) == 0 {
		return nil
	}
	return cands[r.rng.IntN(len(cands))]
}

// current reads o; nil when it is gone (remembered to steer later picks).
func (r *run) current(o *recObj) *metav1.PartialObjectMetadata {
	m, err := o.meta().Get(r.ctx, o.name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		o.seenGone = true
		return nil
	}
	if err != nil {
		r.t.Fatalf("seed %d: get %s: %v", r.seed, o.ident, err)
	}
	if m.UID != o.uid {
		r.t.Fatalf("seed %d: %s has uid %s now", r.seed, o.ident, m.UID)
	}
	return m
}

// hasOrphanedOwner says whether o refers (as far as the test knows) to an
// owner the test deleted with the Orphan policy.
func (r *run) hasOrphanedOwner(o *recObj) bool {
	for _, ref := range o.refs {
		if ow := r.byUID[ref.uid]; ow != nil && ow.orphaned {
			return true
		}
	}
	return false
}

// Shared dependents and Orphan. A dependent D with several owners, one of
// them (O) deleted with Orphan, ends up kept or collected depending on the
// order in which the collector removes O's reference and loses D's other
// owners: if the others go first, O (existing, orphaning) still holds D and
// D is kept; if O's reference goes first, D has only dead owners left and
// is collected. Both are correct, so the test never creates that race,
// while it does create the cases whose outcome is fixed — two owners of D
// both deleted with Orphan (D survives without references, however the
// two owners' patches interleave), or an orphaning owner next to live
// ones:
//
//   - orphanSafe: x may be deleted with Orphan only if every other owner of
//     each dependent still referring to x is either deleted with Orphan too
//     or not doomed (being deleted or bound to be collected, per the
//     reference model run on the record so far);
//   - racesOrphaning: any other operation that dooms objects (a Background
//     or Foreground deletion, a reference removal, the release of a hold
//     that lets a deleting owner go) is not made if it dooms an object
//     that still refers, on the server, to an owner deleted with Orphan,
//     or that is an owner of such an object. The final release of every
//     hold, which cannot be skipped, waits for the orphanings instead
//     (waitOrphaningDone).

// projection runs the reference model on the record so far, changed by
// mutate, and returns the objects it ends with being deleted or gone.
func (r *run) projection(mutate func(map[types.UID]*simObj)) map[types.UID]bool {
	sim := r.simObjs()
	if mutate != nil {
		mutate(sim)
	}
	simulate(sim)
	out := map[types.UID]bool{}
	for uid, s := range sim {
		if s.gone || s.deleting {
			out[uid] = true
		}
	}
	return out
}

// orphanSafe says whether deleting x with Orphan fixes the fate of each of
// x's dependents (see above). The other owners are taken from the test's
// record, not from the server: the reference model runs on the record, and
// a reference the collector has already removed (its owner dead) is still
// there for the model, which would then collect a dependent the collector
// keeps. So any doomed owner in the record, even one the server no longer
// shows, makes x unsafe.
func (r *run) orphanSafe(x *recObj) bool {
	var doomed map[types.UID]bool
	for _, d := range r.objs {
		if d == x || d.seenGone || !slices.ContainsFunc(d.refs, func(ref simRef) bool { return ref.uid == x.uid }) {
			continue
		}
		for _, ref := range d.refs {
			if ref.uid == x.uid {
				continue
			}
			if p := r.byUID[ref.uid]; p != nil && p.orphaned {
				continue
			}
			if doomed == nil {
				doomed = r.projection(nil)
			}
			if doomed[ref.uid] || r.byUID[ref.uid] == nil {
				return false
			}
		}
	}
	return true
}

// racesOrphaning says whether an operation, given by what it does to the
// model's record (mutate), would doom an object whose fate then depends on
// the collector's order (see above).
func (r *run) racesOrphaning(mutate func(map[types.UID]*simObj)) bool {
	pending := false
	for _, d := range r.objs {
		if !d.seenGone && r.hasOrphanedOwner(d) {
			pending = true
			break
		}
	}
	if !pending {
		return false
	}
	before, after := r.projection(nil), r.projection(mutate)
	newly := map[types.UID]bool{}
	for uid := range after {
		if !before[uid] {
			newly[uid] = true
		}
	}
	for _, d := range r.objs {
		if d.seenGone || !r.hasOrphanedOwner(d) {
			continue
		}
		if !newly[d.uid] && !slices.ContainsFunc(d.refs, func(ref simRef) bool { return newly[ref.uid] }) {
			continue
		}
		m := r.current(d)
		if m == nil {
			continue
		}
		for _, ref := range m.OwnerReferences {
			if o := r.byUID[ref.UID]; o != nil && o.orphaned {
				return true
			}
		}
	}
	return false
}

func (r *run) deleteRandom() {
	// Mostly owners: their deletions are what the collector acts on.
	owners := map[types.UID]bool{}
	if r.rng.IntN(4) != 0 {
		for _, d := range r.objs {
			for _, ref := range d.refs {
				owners[ref.uid] = true
			}
		}
	}
	o := r.pick(func(o *recObj) bool { return !o.deleting && !o.seenGone && (len(owners) == 0 || owners[o.uid]) })
	if o == nil {
		return
	}
	m := r.current(o)
	if m == nil || m.DeletionTimestamp != nil {
		r.skipped++
		return
	}
	policies := []metav1.DeletionPropagation{metav1.DeletePropagationBackground, metav1.DeletePropagationForeground, metav1.DeletePropagationOrphan}
	policy := policies[r.rng.IntN(len(policies))]
	if policy == metav1.DeletePropagationOrphan && !r.orphanSafe(o) {
		policy = metav1.DeletePropagationBackground
	}
	if policy != metav1.DeletePropagationOrphan && r.racesOrphaning(func(sim map[types.UID]*simObj) {
		x := sim[o.uid]
		x.deleting = true
		if policy == metav1.DeletePropagationForeground {
			x.finalizers = append(x.finalizers, finalizerForeground)
		}
		if len(x.finalizers) == 0 {
			x.gone = true
		}
	}) {
		// Orphan fixes the fate of the shared dependents: both owners
		// orphan them.
		if !r.orphanSafe(o) {
			r.skipped++
			return
		}
		policy = metav1.DeletePropagationOrphan
	}
	rv := m.ResourceVersion
	err := o.meta().Delete(r.ctx, o.name, metav1.DeleteOptions{
		PropagationPolicy: &policy,
		Preconditions:     &metav1.Preconditions{UID: &o.uid, ResourceVersion: &rv},
	})
	switch {
	case apierrors.IsNotFound(err) || apierrors.IsConflict(err):
		r.skipped++
		return
	case err != nil:
		// Unknown outcome: never judge this object's deletion as the
		// collector's, and stop — the record is no longer exact.
		r.deleted[o.uid] = true
		r.t.Fatalf("seed %d: delete %s: %v", r.seed, o.ident, err)
	}
	r.deleted[o.uid] = true
	o.deleting = true
	o.finalizers = slices.Clone(m.Finalizers)
	switch policy {
	case metav1.DeletePropagationOrphan:
		o.orphaned = true
		o.finalizers = append(o.finalizers, finalizerOrphan)
	case metav1.DeletePropagationForeground:
		o.finalizers = append(o.finalizers, finalizerForeground)
	}
	o.refs = toSimRefs(m.OwnerReferences)
	if len(o.finalizers) == 0 {
		o.gone = true
	}
	r.counts["delete-"+strings.ToLower(string(policy))]++
}

// patchMeta merge-patches o's metadata with fields, guarded by rv.
func (r *run) patchMeta(o *recObj, rv string, fields map[string]any) (*metav1.PartialObjectMetadata, error) {
	md := map[string]any{"resourceVersion": rv}
	for k, v := range fields {
		md[k] = v
	}
	data, err := json.Marshal(map[string]any{"metadata": md})
	if err != nil {
		r.t.Fatalf("marshal patch: %v", err)
	}
	return o.meta().Patch(r.ctx, o.name, types.MergePatchType, data, metav1.PatchOptions{})
}

func (r *run) removeRefRandom() {
	o := r.pick(func(o *recObj) bool { return !o.deleting && !o.seenGone && len(o.refs) > 0 })
	if o == nil {
		return
	}
	m := r.current(o)
	if m == nil || m.DeletionTimestamp != nil || len(m.OwnerReferences) == 0 {
		r.skipped++
		return
	}
	refs := slices.Clone(m.OwnerReferences)
	i := r.rng.IntN(len(refs))
	removed := refs[i].UID
	refs = slices.Delete(refs, i, i+1)
	if r.racesOrphaning(func(sim map[types.UID]*simObj) {
		x := sim[o.uid]
		x.refs = slices.DeleteFunc(x.refs, func(ref simRef) bool { return ref.uid == removed })
	}) {
		r.skipped++
		return
	}
	out, err := r.patchMeta(o, m.ResourceVersion, map[string]any{"ownerReferences": refs})
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		r.skipped++
		return
	}
	if err != nil {
		r.t.Fatalf("seed %d: remove a reference from %s: %v", r.seed, o.ident, err)
	}
	o.refs = toSimRefs(out.OwnerReferences)
	r.counts["remove-ref"]++
}

func (r *run) addRefRandom() {
	o := r.pick(func(o *recObj) bool { return !o.deleting && !o.seenGone && !r.hasOrphanedOwner(o) })
	if o == nil {
		return
	}
	var cands []*recObj
	for _, c := range r.eligibleOwners(o.kind, o.idx) {
		if !slices.ContainsFunc(o.refs, func(ref simRef) bool { return ref.uid == c.uid }) {
			cands = append(cands, c)
		}
	}
	if len(cands) == 0 {
		return
	}
	owner := cands[r.rng.IntN(len(cands))]
	// An owner the collector itself put into deletion (a blocking
	// dependent of a Foreground owner is deleted Foreground) is not
	// eligible either: a reference added to an owner already being
	// deleted races with the collector's decision on that owner, which
	// no collector can see coming (docs/correctness.md, "Known limits").
	// Its state is read here, so the race is left only for an owner whose
	// deletion starts in the milliseconds before the reference lands.
	if om := r.current(owner); om == nil || om.DeletionTimestamp != nil {
		r.skipped++
		return
	}
	m := r.current(o)
	if m == nil || m.DeletionTimestamp != nil || slices.ContainsFunc(m.OwnerReferences, func(ref metav1.OwnerReference) bool { return ref.UID == owner.uid }) {
		r.skipped++
		return
	}
	refs := append(slices.Clone(m.OwnerReferences), owner.ref(r.rng.IntN(2) == 0))
	out, err := r.patchMeta(o, m.ResourceVersion, map[string]any{"ownerReferences": refs})
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		r.skipped++
		return
	}
	if err != nil {
		r.t.Fatalf("seed %d: add a reference to %s: %v", r.seed, o.ident, err)
	}
	o.refs = toSimRefs(out.OwnerReferences)
	r.counts["add-ref"]++
}

func (r *run) releaseHoldRandom() {
	o := r.pick(func(o *recObj) bool { return slices.Contains(o.finalizers, holdFinalizer) })
	if o == nil {
		return
	}
	// Releasing the hold of an owner being deleted (Background) makes it
	// go, which dooms its dependents as a deletion would: not while that
	// races an orphaning (see above).
	if r.racesOrphaning(func(sim map[types.UID]*simObj) {
		x := sim[o.uid]
		x.finalizers = slices.DeleteFunc(x.finalizers, func(f string) bool { return f == holdFinalizer })
		if x.deleting && len(x.finalizers) == 0 {
			x.gone = true
		}
	}) {
		r.skipped++
		return
	}
	if r.releaseHold(o) {
		r.counts["release-hold"]++
	}
}

// waitOrphaningDone waits, within orphaningTimeout, until no object the
// test deleted with Orphan still carries the orphan finalizer on the
// server (the collector removes it once it removed the object's
// dependents' references to it); past that it goes on, and the comparison
// with the reference model reports what differs.
func (r *run) waitOrphaningDone() {
	pending := func() int {
		n := 0
		for _, o := range r.objs {
			if !o.orphaned || o.seenGone {
				continue
			}
			if m := r.current(o); m != nil && slices.Contains(m.Finalizers, finalizerOrphan) {
				n++
			}
		}
		return n
	}
	err := wait.PollUntilContextTimeout(r.ctx, 100*time.Millisecond, orphaningTimeout, true, func(context.Context) (bool, error) {
		return pending() == 0, nil
	})
	if err != nil {
		r.t.Logf("seed %d: %d owners deleted with Orphan still carry the orphan finalizer after %s; releasing the holds anyway", r.seed, pending(), orphaningTimeout)
	}
}

// orphaningTimeout bounds waitOrphaningDone.
const orphaningTimeout = time.Minute

// releaseHold removes the hold finalizer from o (retrying on conflicts: the
// collector may be editing the object's finalizers at the same time).
func (r *run) releaseHold(o *recObj) bool {
	done := false
	err := retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		m := r.current(o)
		if m == nil {
			return nil
		}
		fins := slices.DeleteFunc(slices.Clone(m.Finalizers), func(f string) bool { return f == holdFinalizer })
		if len(fins) == len(m.Finalizers) {
			return nil
		}
		if fins == nil {
			fins = []string{}
		}
		_, err := r.patchMeta(o, m.ResourceVersion, map[string]any{"finalizers": fins})
		if err == nil {
			done = true
		}
		return err
	})
	if err != nil && !apierrors.IsNotFound(err) {
		r.t.Fatalf("seed %d: release hold of %s: %v", r.seed, o.ident, err)
	}
	// Whatever happened, the object no longer carries the hold (it was
	// released now, or it was gone, which it cannot be while holding).
	o.finalizers = slices.DeleteFunc(o.finalizers, func(f string) bool { return f == holdFinalizer })
	if o.deleting && len(o.finalizers) == 0 {
		o.gone = true
	}
	return done
}

// ---- the expected and the actual final state ----

// finalState is what the comparison looks at for each surviving object.
type finalState struct {
	refs       string
	finalizers string
}

func refsKey(refs []simRef) string {
	parts := make([]string, 0, len(refs))
	for _, r := range refs {
		parts = append(parts, fmt.Sprintf("%s:%v", r.uid, r.block))
	}
	sort.Strings(parts)
	return strings.Join(parts, ",")
}

func finalizersKey(f []string) string {
	f = slices.Clone(f)
	sort.Strings(f)
	return strings.Join(f, ",")
}

// simObjs returns the reference model's objects for the test's record.
func (r *run) simObjs() map[types.UID]*simObj {
	sim := map[types.UID]*simObj{}
	for _, o := range r.objs {
		sim[o.uid] = &simObj{
			uid: o.uid, idx: o.idx,
			refs:       slices.Clone(o.refs),
			finalizers: slices.Clone(o.finalizers),
			deleting:   o.deleting,
			gone:       o.gone,
		}
	}
	return sim
}

// expected runs the reference model on the test's record.
func (r *run) expected() map[types.UID]finalState {
	sim := r.simObjs()
	simulate(sim)
	out := map[types.UID]finalState{}
	for uid, s := range sim {
		if !s.gone {
			out[uid] = finalState{refs: refsKey(s.refs), finalizers: finalizersKey(s.finalizers)}
		}
	}
	return out
}

// actual lists the run's objects.
func (r *run) actual(ctx context.Context) (map[types.UID]finalState, error) {
	out := map[types.UID]finalState{}
	for _, k := range allKinds {
		res := metadataClient.Resource(k.gvr)
		opts := metav1.ListOptions{LabelSelector: labelSeed + "=" + r.id}
		var list *metav1.PartialObjectMetadataList
		var err error
		if k.namespaced {
			list, err = res.Namespace(r.ns).List(ctx, opts)
		} else {
			list, err = res.List(ctx, opts)
		}
		if err != nil {
			return nil, err
		}
		for _, m := range list.Items {
			s := finalState{refs: refsKey(toSimRefs(m.OwnerReferences)), finalizers: finalizersKey(m.Finalizers)}
			if m.DeletionTimestamp != nil {
				s.finalizers += " (being deleted)"
			}
			out[m.UID] = s
		}
	}
	return out, nil
}

// diff describes how got differs from want, naming objects.
func (r *run) diff(want, got map[types.UID]finalState) string {
	var lines []string
	name := func(uid types.UID) string {
		if o := r.byUID[uid]; o != nil {
			return o.ident.String()
		}
		return string(uid)
	}
	for uid, w := range want {
		g, ok := got[uid]
		switch {
		case !ok:
			lines = append(lines, fmt.Sprintf("  %s: gone, the model keeps it (refs [%s])", name(uid), w.refs))
		case g != w:
			lines = append(lines, fmt.Sprintf("  %s: refs [%s] finalizers [%s], the model says refs [%s] finalizers [%s]", name(uid), g.refs, g.finalizers, w.refs, w.finalizers))
		}
	}
	for uid, g := range got {
		if _, ok := want[uid]; !ok {
			lines = append(lines, fmt.Sprintf("  %s: still there (refs [%s] finalizers [%s]), the model deletes it", name(uid), g.refs, g.finalizers))
		}
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}

// waitForModel polls until the cluster equals want, then makes sure it stays
// so for a while (a late wrong deletion would show). It returns the last
// state seen and, if it never matched or did not stay, the difference.
func (r *run) waitForModel(want map[types.UID]finalState) (map[types.UID]finalState, string) {
	var got map[types.UID]finalState
	var last string
	matched := func(ctx context.Context) (bool, error) {
		var err error
		cur, err := r.actual(ctx)
		if err != nil {
			// Keep the last difference seen: near the timeout the
			// client's rate limiter refuses, and that says nothing.
			if last == "" {
				last = err.Error()
			}
			return false, nil
		}
		got = cur
		last = r.diff(want, got)
		return last == "", nil
	}
	if err := wait.PollUntilContextTimeout(r.ctx, 250*time.Millisecond, 90*time.Second, true, matched); err != nil {
		return got, last
	}
	// Quiet period: the state must not move away from the model.
	deadline := time.Now().Add(2 * time.Second)
	for time.Now().Before(deadline) {
		time.Sleep(250 * time.Millisecond)
		if ok, _ := matched(r.ctx); !ok {
			return got, "the state matched the model, then changed:\n" + last
		}
	}
	return got, ""
}

// cleanup removes everything the run left: finalizers first, then objects
// and the namespace (no namespace controller runs in the sandbox).
func (r *run) cleanup() {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	bg := metav1.DeletePropagationBackground
	sel := metav1.ListOptions{LabelSelector: labelSeed + "=" + r.id}
	for _, k := range allKinds {
		res := metadataClient.Resource(k.gvr)
		var list *metav1.PartialObjectMetadataList
		var err error
		if k.namespaced {
			list, err = res.Namespace(r.ns).List(ctx, sel)
		} else {
			list, err = res.List(ctx, sel)
		}
		if err != nil {
			r.t.Logf("cleanup: list %s: %v", k.gvr.Resource, err)
			continue
		}
		for _, m := range list.Items {
			if len(m.Finalizers) == 0 {
				continue
			}
			o := ident{kind: k, namespace: m.Namespace, name: m.Name}
			_, err := o.meta().Patch(ctx, m.Name, types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{})
			if err != nil && !apierrors.IsNotFound(err) {
				r.t.Logf("cleanup: clear finalizers of %s: %v", o, err)
			}
		}
		if k.namespaced {
			err = res.Namespace(r.ns).DeleteCollection(ctx, metav1.DeleteOptions{PropagationPolicy: &bg}, sel)
		} else {
			err = res.DeleteCollection(ctx, metav1.DeleteOptions{PropagationPolicy: &bg}, sel)
		}
		if err != nil {
			r.t.Logf("cleanup: delete %s: %v", k.gvr.Resource, err)
		}
	}
	if err := testenv.DeleteNamespace(ctx, kubeClient, r.ns, metav1.DeleteOptions{}); err != nil {
		r.t.Logf("cleanup: %v", err)
	}
}
