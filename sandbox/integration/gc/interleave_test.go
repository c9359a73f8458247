package gc

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kgc-dev/kgc/sandbox/internal/safety"
)

// Interleavings in which upstream's collector, or an earlier kgc, deleted
// the wrong object, released an owner early or never finished (the
// differences docs/correctness.md lists), against the real apiserver: the
// unit tests (internal/workers/interleave_test.go) script the exact
// interleavings; these check that kgc's writes do what they must on a real
// kube-apiserver (JSON patches with tests, strategic merge patches keyed by
// UID and their fallback for custom resources, conflicting DELETEs).

// churn patches the annotations of objs every period until the returned
// stop is called, as a controller updating status-like metadata would.
func (tc *testCase) churn(period time.Duration, objs ...obj) (stop func()) {
	ctx, cancel := context.WithCancel(tc.ctx)
	var wg sync.WaitGroup
	for _, o := range objs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tick := time.NewTicker(period)
			defer tick.Stop()
			for i := 0; ; i++ {
				select {
				case <-ctx.Done():
					return
				case <-tick.C:
				}
				patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{
					"uid":         o.uid,
					"annotations": map[string]string{"kgc.test/churn": fmt.Sprint(i)},
				}})
				_, err := o.client().Patch(ctx, o.name, types.MergePatchType, patch, metav1.PatchOptions{})
				if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
					return // gone (or replaced)
				}
			}
		}()
	}
	var once sync.Once
	stop = func() { once.Do(func() { cancel(); wg.Wait() }) }
	tc.cleanup(func(context.Context) { stop() })
	return stop
}

// TestConstantlyUpdatedObjectsAreCollected: objects whose annotations another
// client patches every 20 ms are collected, stripped of dangling references,
// and orphaned like any other: kgc's writes rest on their ownerReferences and
// finalizers, not on their resourceVersion.
func TestConstantlyUpdatedObjectsAreCollected(t *testing.T) {
	t.Parallel()
	tc := newTestCase(t)
	live := tc.configMap("live", protected())
	gone := tc.configMap("gone")
	orphaning := tc.configMap("orphaning")
	dependent := tc.configMap("dependent", withOwners(gone.ref(false)))
	stripped := tc.configMap("stripped", withOwners(live.ref(false), gone.ref(false)), protected())
	orphaned := tc.configMap("orphaned", withOwners(orphaning.ref(true)), protected())
	stop := tc.churn(20*time.Millisecond, dependent, stripped, orphaned, orphaning)

	tc.del(gone, background())
	tc.del(orphaning, orphan())

	tc.waitGone(gone, dependent, orphaning)
	tc.waitOwnerRefs(stripped, live.uid)
	tc.waitOwnerRefs(orphaned)
	stop()
	tc.assertKeptAfterGC(configMapKind, alive(live), aliveWithOwners(stripped, live.uid), aliveWithOwners(orphaned))
}

// TestTwoOwnersOrphanSharedDependents: two owners orphaning shared dependents
// at once leave every dependent alive with no references, whichever order
// their patches land in: an owner whose dependent is at a version kgc already
// wrote to retries instead of skipping it. Custom resources take no strategic
// merge patch, so they exercise the JSON-patch fallback of reference removal.
func TestTwoOwnersOrphanSharedDependents(t *testing.T) {
	t.Parallel()
	tc := newTestCase(t)
	k := newCRDKind()
	tc.createCRD(k)
	for _, kind := range []string{"configmaps", "custom"} {
		t.Log(kind)
		var o, p obj
		var deps []obj
		if kind == "custom" {
			o, p = tc.customResource(k, "o"), tc.customResource(k, "p")
			for _, n := range names("cr-dep", 20) {
				deps = append(deps, tc.customResource(k, n, withOwners(o.ref(true), p.ref(false)), protected()))
			}
		} else {
			o, p = tc.configMap("o"), tc.configMap("p")
			for _, n := range names("cm-dep", 20) {
				deps = append(deps, tc.configMap(n, withOwners(o.ref(true), p.ref(false)), protected()))
			}
		}
		tc.del(o, orphan())
		tc.del(p, orphan())
		tc.waitGone(o, p)
		var keep []kept
		for _, d := range deps {
			tc.waitOwnerRefs(d)
			keep = append(keep, aliveWithOwners(d))
		}
		tc.assertKeptAfterGC(configMapKind, keep...)
	}
}

// TestForegroundSelfReferenceIsCollected: an object whose reference to
// itself blocks, deleted in the Foreground, goes (upstream keeps it
// forever).
func TestForegroundSelfReferenceIsCollected(t *testing.T) {
	t.Parallel()
	tc := newTestCase(t)
	x := tc.configMap("self")
	tc.addOwnerRefs(x, x.ref(true))
	tc.del(x, foreground())
	tc.waitGone(x)
}

// TestForegroundChainIsNoCycle: owner ← middle ← lower ← held, every reference
// blocking. lower is deleted in the Foreground and waits for held (held by a
// finalizer); then owner is deleted in the Foreground. There is no cycle:
// owner must wait for middle, middle for lower, lower for held. Upstream
// "breaks the cycle" at middle and owner goes at once.
func TestForegroundChainIsNoCycle(t *testing.T) {
	t.Parallel()
	tc := newTestCase(t)
	owner := tc.configMap("owner")
	middle := tc.configMap("middle", withOwners(owner.ref(true)))
	lower := tc.configMap("lower", withOwners(middle.ref(true)))
	held := tc.configMap("held", withOwners(lower.ref(true)), withFinalizers(holdFinalizer))

	tc.del(lower, foreground())
	tc.waitTerminating(held)
	tc.del(owner, foreground())
	tc.waitTerminating(middle)

	waiting := func(o obj) kept {
		return kept{o: o, check: func(m *metav1.PartialObjectMetadata) error {
			if m.DeletionTimestamp == nil || !slices.Contains(m.Finalizers, metav1.FinalizerDeleteDependents) {
				return fmt.Errorf("is not waiting for its dependents: %s", safety.Describe(m))
			}
			for _, r := range m.OwnerReferences {
				if r.BlockOwnerDeletion == nil || !*r.BlockOwnerDeletion {
					return fmt.Errorf("its reference to %s no longer blocks: no cycle to break", r.Name)
				}
			}
			return nil
		}}
	}
	tc.assertKeptAfterGC(configMapKind, waiting(owner), waiting(middle), waiting(lower))

	tc.release(held)
	tc.waitGone(held, lower, middle, owner)
}
