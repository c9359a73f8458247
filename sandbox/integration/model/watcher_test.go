package model

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/metadata"

	"github.com/kgc-dev/kgc/sandbox/internal/safety"
)

// safetyWatcher is the test's independent judge of kgc's deletions. It does
// not use any kgc code: it watches every involved resource and keeps, for
// each object, the sequence of states it went through, each stamped with the
// resourceVersion of the change.
//
// It is not the safety watcher of the gc and faults tests (safety.Watcher),
// on purpose: that one only records deletions of objects a test marked
// protected, while this one is an oracle of the documented semantics in its
// own right — it judges every deletion and every finalizer removal against
// the owners' histories (see judge) — and is kept independent of any other
// judge. It shares only the plumbing: safety.Stream's informers and barrier.
//
// Assumption: one etcd backs the whole apiserver, so resourceVersions are
// etcd revisions and comparable across resources (every write is one etcd
// transaction with its own revision). That makes "the owner's state at the
// moment the dependent was deleted" well defined: the owner's latest state
// with a smaller revision. The watches of different resources deliver their
// events in no particular order relative to each other, so judgement is
// made after a barrier (see sync), not as events arrive.
type safetyWatcher struct {
	stream   *safety.Stream
	mu       sync.Mutex
	objects  map[types.UID]*history
	unknowns map[string]int // run → deletions seen only as DeletedFinalStateUnknown
	maxSeen  uint64         // the highest resourceVersion seen, of any object
}

// maxRV returns the highest resourceVersion the watcher has seen.
func (w *safetyWatcher) maxRV() uint64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.maxSeen
}

// history is what the watcher knows about one object.
type history struct {
	id     ident
	run    string
	states []objState
}

// objState is one observed state of an object.
type objState struct {
	rv uint64
	// seen is when the watcher received the state: after the write that
	// made it, so an upper bound of its time.
	seen       time.Time
	gone       bool
	deleting   bool
	refs       []metav1.OwnerReference
	finalizers []string
}

func (s objState) String() string {
	var refs []string
	for _, r := range s.refs {
		refs = append(refs, fmt.Sprintf("%s/%s(uid %s, block=%v)", r.Kind, r.Name, r.UID, r.BlockOwnerDeletion != nil && *r.BlockOwnerDeletion))
	}
	return fmt.Sprintf("{rv %d seen %s gone=%v deleting=%v finalizers=%v refs=[%s]}", s.rv, clock(s.seen), s.gone, s.deleting, s.finalizers, strings.Join(refs, ", "))
}

func startSafetyWatcher(ctx context.Context, client metadata.Interface) (*safetyWatcher, error) {
	w := &safetyWatcher{objects: map[types.UID]*history{}, unknowns: map[string]int{}}
	var resources []schema.GroupVersionResource
	for _, k := range allKinds {
		resources = append(resources, k.gvr)
	}
	var err error
	w.stream, err = safety.Watch(ctx, client, safety.StreamOptions{Resources: resources, Selector: labelSeed, MarkerLabel: labelMarker}, w.observe)
	if err != nil {
		return nil, err
	}
	return w, nil
}

// kindOf returns the kind served at gvr.
func kindOf(gvr schema.GroupVersionResource) (kindInfo, bool) {
	for _, k := range allKinds {
		if k.gvr == gvr {
			return k, true
		}
	}
	return kindInfo{}, false
}

func (w *safetyWatcher) observe(ev safety.Event) {
	k, ok := kindOf(ev.Resource)
	if !ok {
		return
	}
	m := ev.Object
	w.mu.Lock()
	defer w.mu.Unlock()
	run := m.Labels[labelSeed]
	if ev.FinalStateUnknown {
		// The final state was missed (watch gap): the deletion's revision
		// is unknown and cannot be judged. Counted and reported.
		w.unknowns[run]++
		return
	}
	rv, err := strconv.ParseUint(m.ResourceVersion, 10, 64)
	if err != nil {
		return
	}
	w.maxSeen = max(w.maxSeen, rv)
	h := w.objects[m.UID]
	if h == nil {
		h = &history{id: ident{kind: k, namespace: m.Namespace, name: m.Name, uid: m.UID}, run: run}
		w.objects[m.UID] = h
	}
	h.states = append(h.states, objState{
		rv:         rv,
		seen:       time.Now(),
		gone:       ev.Type == safety.Deleted,
		deleting:   m.DeletionTimestamp != nil,
		refs:       m.OwnerReferences,
		finalizers: m.Finalizers,
	})
}

// sync returns once the watcher has seen every change made before it was
// called: it creates one marker object per watched resource, in namespace
// for the namespaced ones, waits for each to come back through the watch
// and deletes them.
func (w *safetyWatcher) sync(ctx context.Context, namespace string) error {
	var created []ident
	defer func() {
		for _, o := range created {
			_ = o.meta().Delete(context.WithoutCancel(ctx), o.name, metav1.DeleteOptions{})
		}
	}()
	return w.stream.Sync(ctx, 30*time.Second, func(ctx context.Context, gvr schema.GroupVersionResource, token string) error {
		k, ok := kindOf(gvr)
		if !ok {
			return fmt.Errorf("no kind for %s", gvr)
		}
		o := ident{kind: k, name: "marker-" + token}
		if k.namespaced {
			o.namespace = namespace
		}
		u := &unstructured.Unstructured{}
		u.SetAPIVersion(k.apiVersion)
		u.SetKind(k.kind)
		u.SetName(o.name)
		u.SetNamespace(o.namespace)
		u.SetLabels(map[string]string{labelSeed: "marker", labelMarker: token})
		if _, err := o.dynamic().Create(ctx, u, metav1.CreateOptions{}); err != nil {
			return err
		}
		created = append(created, o)
		return nil
	})
}

// Finalizers of the judged rules, as the watcher sees them.
func hasFinalizer(s objState, f string) bool { return slices.Contains(s.finalizers, f) }

// phase is an interval of an owner's history during which it carried one
// of the apiserver's deletion finalizers (orphan or foregroundDeletion): it
// begins at the first state being deleted with the finalizer and ends at the
// first later state without it (the collector removed it, or the object is
// gone). end is 0 while the phase has not ended.
type phase struct{ start, end uint64 }

// phaseOf returns h's phase for finalizer f, if it ever had one.
func (h *history) phaseOf(f string) (phase, bool) {
	var p phase
	found := false
	for _, s := range h.states {
		switch {
		case !found && !s.gone && s.deleting && hasFinalizer(s, f):
			p.start, found = s.rv, true
		case found && (s.gone || !hasFinalizer(s, f)):
			p.end = s.rv
			return p, true
		}
	}
	return p, found
}

// judgement is what judge found for one run.
type judgement struct {
	violations []string
	// judged counts the collector's deletions judged (S1, S2's second
	// half); orphans and foregrounds the owners whose orphan or
	// foregroundDeletion finalizer was removed and judged (S2, S3).
	judged, orphans, foregrounds int
	// unknown counts deletions seen only as DeletedFinalStateUnknown.
	unknown int
	// limited counts, by limit, the findings excused as instances of a
	// documented limit (see limits); excused describes each.
	limited map[string]int
	excused []string
}

// limits decides whether a finding is an instance of a known limit of
// docs/correctness.md, from the run's record of what reached the
// collector (chaos implements it). The judge asks only about the findings
// the limits can explain; everything else is a violation.
type limits interface {
	// watchLag: owner's finalizer went (owner's state end) while dep
	// referred to it, a reference dep has carried since revision since.
	// journaled: the finalizer was orphan, whose removal kgc sends only
	// after writing the owner to its orphan journal.
	watchLag(owner ident, end objState, dep ident, since uint64, journaled bool) (string, bool)
	// restartMemory: a dependent of an owner orphaned under the watch-lag
	// limit (the release seen at released) was deleted (seen at deleted).
	restartMemory(released, deleted time.Time) (string, bool)
}

// refersSince returns the revision since which h has referred to owner
// without a break up to its state at rv (with a blocking reference, if
// blocking): the state that gave it the reference.
func (h *history) refersSince(owner types.UID, rv uint64, blocking bool) uint64 {
	var since uint64
	for _, s := range h.states {
		if s.rv > rv {
			break
		}
		if slices.ContainsFunc(s.refs, func(ref metav1.OwnerReference) bool {
			return ref.UID == owner && (!blocking || (ref.BlockOwnerDeletion != nil && *ref.BlockOwnerDeletion))
		}) {
			if since == 0 {
				since = s.rv
			}
		} else {
			since = 0
		}
	}
	return since
}

// judge checks run's history against the safety contract of
// docs/correctness.md (its guarantees S1–S3) and returns the violations, each named by its rule:
//
//   - S1: every deletion of a run's object that the test did not issue
//     itself (testDeleted) — its start (deletionTimestamp set) or the
//     object's removal — happened at a revision at which none of the
//     references it still carried named an owner that held it: an owner
//     holds while it exists, unless it is, or has been, in Foreground
//     deletion. An owner being deleted with another finalizer still holds.
//   - S2: (a) when an owner deleted with Orphan loses its orphan finalizer
//     (or goes), no object still refers to it; (b) no object is deleted
//     by the collector while it still refers to an owner that was deleted
//     with Orphan. A dependent whose reference to the orphaning owner was
//     removed first may still go legitimately on account of another owner
//     (its deletion state no longer names the orphaned owner, and S1 judges
//     it against the others).
//   - S3: when an owner in Foreground deletion loses its foregroundDeletion
//     finalizer (or goes), no object that still exists refers to it with
//     blockOwnerDeletion=true. (A dependent being deleted but not gone
//     still blocks.)
//
// Cross-resource order: the watches of different resources deliver their
// events in no particular order relative to each other, so nothing is
// judged by arrival; judge runs after a barrier (sync) and compares states
// by resourceVersion. With a single etcd behind the apiserver every write
// is one etcd transaction and its resourceVersion is the etcd revision, a
// global order: "D's state when O's finalizer was removed" is D's latest
// state with a smaller revision than the removal's. (With several etcds,
// per-resource storage, this would not hold.) A watch gap (a relist after
// an expired watch) would hide intermediate states; the informers here run
// without the fault proxy, and a missed final state is counted as unknown.
//
// Known limits: with lim (nil: none), a finding of S2 (a) or S3 whose
// dependent's reference had not yet reached the collector over a watch the
// chaos delays is counted as the watch-lag limit instead of a violation,
// and a deletion S2 (b) reports is counted as the restart-memory limit if
// its owner's release was such an instance and the orphan journal had
// forgotten it (see chaos.watchLag and chaos.restartMemory).
func (w *safetyWatcher) judge(run string, testDeleted map[types.UID]bool, lim limits) judgement {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := judgement{limited: map[string]int{}}
	// Owner–dependent pairs whose finalizer release was excused as watch
	// lag, with when the release was seen.
	lagged := map[[2]types.UID]time.Time{}
	var all []*history
	for _, h := range w.objects {
		if h.run == run {
			all = append(all, h)
		}
	}
	sort.Slice(all, func(i, j int) bool { return all[i].id.uid < all[j].id.uid })

	// S2 (a) and S3: at the end of each owner's orphan or foreground phase,
	// nothing refers to it (S3: with a blocking reference).
	for _, o := range all {
		for _, rule := range []struct {
			finalizer, name string
			blocking        bool
		}{{finalizerOrphan, "S2", false}, {finalizerForeground, "S3", true}} {
			p, ok := o.phaseOf(rule.finalizer)
			if !ok || p.end == 0 {
				continue
			}
			if rule.blocking {
				out.foregrounds++
			} else {
				out.orphans++
			}
			end, _ := o.stateAt(p.end)
			for _, d := range all {
				if d == o {
					continue
				}
				ds, ok := d.stateBefore(p.end)
				if !ok || ds.gone {
					continue
				}
				for _, ref := range ds.refs {
					if ref.UID != o.id.uid || (rule.blocking && !(ref.BlockOwnerDeletion != nil && *ref.BlockOwnerDeletion)) {
						continue
					}
					what := "its dependent %s still referred to it"
					if rule.blocking {
						what = "its dependent %s still existed with a blocking reference to it"
					}
					finding := fmt.Sprintf(
						"%s: %s lost its %s finalizer at rv %d while "+what+" (dependent state %s)\n  owner history: %v\n  dependent history: %v",
						rule.name, o.id, rule.finalizer, p.end, d.id, ds, o.states, d.states)
					if lim != nil {
						why, ok := lim.watchLag(o.id, end, d.id, d.refersSince(o.id.uid, ds.rv, rule.blocking), rule.finalizer == finalizerOrphan)
						if ok {
							out.limited[limitWatchLag]++
							out.excused = append(out.excused, fmt.Sprintf("%s: %s\n  %s", limitWatchLag, why, finding))
							if !rule.blocking {
								lagged[[2]types.UID{o.id.uid, d.id.uid}] = end.seen
							}
							continue
						}
						finding += "\n  not the watch-lag limit: " + why
					}
					out.violations = append(out.violations, finding)
				}
			}
		}
	}

	// S1 and S2 (b): the collector's deletions.
	for _, h := range all {
		if testDeleted[h.id.uid] {
			continue
		}
		started := false
		for _, s := range h.states {
			// The start of the deletion and the removal itself are judged;
			// updates of an object already being deleted are not deletions.
			if !(s.gone || (s.deleting && !started)) {
				continue
			}
			started = true
			out.judged++
			for _, ref := range s.refs {
				oh := w.objects[ref.UID]
				if oh == nil {
					continue // never existed among the watched objects: dangling
				}
				os, ok := oh.stateBefore(s.rv)
				if !ok {
					continue
				}
				if p, ok := oh.phaseOf(finalizerOrphan); ok && p.start < s.rv && os.gone {
					// The orphaning owner went while the dependent still
					// referred to it (S2 (a) reports that); the dependent
					// then went on account of it: the orphan was lost.
					finding := fmt.Sprintf(
						"S2: %s was deleted (state %s) while it still referred to its owner %s, deleted with Orphan at rv %d and gone at rv %d without orphaning it\n  dependent history: %v\n  owner history: %v",
						h.id, s, oh.id, p.start, os.rv, h.states, oh.states)
					if released, ok := lagged[[2]types.UID{oh.id.uid, h.id.uid}]; ok && lim != nil {
						if why, ok := lim.restartMemory(released, s.seen); ok {
							out.limited[limitRestartMemory]++
							out.excused = append(out.excused, fmt.Sprintf("%s: %s\n  %s", limitRestartMemory, why, finding))
							continue
						}
					}
					out.violations = append(out.violations, finding)
					continue
				}
				if os.gone {
					continue
				}
				if p, ok := oh.phaseOf(finalizerOrphan); ok && p.start < s.rv {
					finding := fmt.Sprintf(
						"S2: %s was deleted (state %s) while it still referred to its owner %s, deleted with Orphan at rv %d (owner state %s)\n  dependent history: %v\n  owner history: %v",
						h.id, s, oh.id, p.start, os, h.states, oh.states)
					if released, ok := lagged[[2]types.UID{oh.id.uid, h.id.uid}]; ok && lim != nil && p.end != 0 && p.end < s.rv {
						if why, ok := lim.restartMemory(released, s.seen); ok {
							out.limited[limitRestartMemory]++
							out.excused = append(out.excused, fmt.Sprintf("%s: %s\n  %s", limitRestartMemory, why, finding))
							continue
						}
					}
					out.violations = append(out.violations, finding)
					continue
				}
				if p, ok := oh.phaseOf(finalizerForeground); ok && p.start < s.rv {
					// In (or past) Foreground deletion: its dependents go.
					continue
				}
				how := "alive and not being deleted"
				if os.deleting {
					how = "being deleted, not in Foreground deletion (its finalizers hold it)"
				}
				out.violations = append(out.violations, fmt.Sprintf(
					"S1: %s was deleted (state %s) while its owner %s was %s (owner state %s)\n  dependent history: %v\n  owner history: %v",
					h.id, s, oh.id, how, os, h.states, oh.states))
			}
		}
	}
	out.unknown = w.unknowns[run]
	return out
}

// stateAt returns h's state at revision rv.
func (h *history) stateAt(rv uint64) (objState, bool) {
	for _, s := range h.states {
		if s.rv == rv {
			return s, true
		}
	}
	return objState{}, false
}

// stateBefore returns the latest state of h at a revision before rv.
func (h *history) stateBefore(rv uint64) (objState, bool) {
	var out objState
	found := false
	for _, s := range h.states {
		if s.rv < rv {
			out, found = s, true
		}
	}
	return out, found
}

// trace describes what the watcher saw of uid and of every owner it ever
// referred to, for a failure's report.
func (w *safetyWatcher) trace(uid types.UID) string {
	w.mu.Lock()
	defer w.mu.Unlock()
	h := w.objects[uid]
	if h == nil {
		return fmt.Sprintf("  %s: never seen", uid)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "  %s:\n", h.id)
	for _, s := range h.states {
		fmt.Fprintf(&b, "    %s\n", s)
	}
	seen := map[types.UID]bool{}
	for _, s := range h.states {
		for _, ref := range s.refs {
			if seen[ref.UID] {
				continue
			}
			seen[ref.UID] = true
			oh := w.objects[ref.UID]
			if oh == nil {
				fmt.Fprintf(&b, "  owner %s: never seen\n", ref.UID)
				continue
			}
			fmt.Fprintf(&b, "  owner %s:\n", oh.id)
			for _, s := range oh.states {
				fmt.Fprintf(&b, "    %s\n", s)
			}
		}
	}
	return b.String()
}
