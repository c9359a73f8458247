package gc

import (
	"fmt"
	"slices"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kgc-dev/kgc/sandbox/internal/safety"
)

// Scenario 1. RC1 owns pods; some of them are also owned by RC2. Deleting
// RC1 in the background collects the pods it owned alone, and keeps the
// others, which lose their (now dangling) reference to RC1.
func TestCascadingDeletionKeepsDependentsWithAnotherLiveOwner(t *testing.T) {
	t.Parallel()
	tc := newTestCase(t)
	rc1 := tc.rc("rc1")
	rc2 := tc.rc("rc2", protected())

	var onlyRC1, shared []obj
	for _, n := range names("only-rc1", 3) {
		onlyRC1 = append(onlyRC1, tc.pod(n, withOwners(rc1.ref(false))))
	}
	for _, n := range names("shared", 3) {
		shared = append(shared, tc.pod(n, withOwners(rc1.ref(false), rc2.ref(false)), protected()))
	}

	tc.del(rc1, background())

	tc.waitGone(rc1)
	tc.waitGone(onlyRC1...)
	for _, p := range shared {
		tc.waitOwnerRefs(p, rc2.uid)
	}
	keep := []kept{alive(rc2)}
	for _, p := range shared {
		keep = append(keep, aliveWithOwners(p, rc2.uid))
	}
	tc.assertKeptAfterGC(podKind, keep...)
}

// Scenario 2. A pod created with an ownerReference to an RC that never
// existed is garbage from the start.
func TestCreateWithNonExistentOwner(t *testing.T) {
	t.Parallel()
	tc := newTestCase(t)
	p := tc.pod("orphan-at-birth", withOwners(missingRef(rcKind, "never-existed")))
	// A second one whose reference blocks owner deletion: same outcome.
	ref := missingRef(rcKind, "never-existed-either")
	block := true
	ref.BlockOwnerDeletion = &block
	p2 := tc.pod("orphan-at-birth-blocking", withOwners(ref))
	tc.waitGone(p, p2)
}

// Scenario 3. Many RCs with pods, deleted in parallel under each way of asking
// for (or defaulting to) a propagation policy.
func TestStressingCascadingDeletion(t *testing.T) {
	t.Parallel()
	tc := newTestCase(t)
	orphanDependents := func(v bool) metav1.DeleteOptions { return metav1.DeleteOptions{OrphanDependents: &v} }

	type group struct {
		name         string
		rcFinalizers []string
		opts         metav1.DeleteOptions
		podsSurvive  bool
	}
	groups := []group{
		// v1 ReplicationController defaults to orphaning.
		{name: "a-default", opts: metav1.DeleteOptions{}, podsSurvive: true},
		{name: "b-orphan-finalizer", rcFinalizers: []string{metav1.FinalizerOrphanDependents}, opts: metav1.DeleteOptions{}, podsSurvive: true},
		// orphanDependents=false overrides the finalizer the RC was created with.
		{name: "c-orphan-finalizer-overridden", rcFinalizers: []string{metav1.FinalizerOrphanDependents}, opts: orphanDependents(false), podsSurvive: false},
		{name: "d-orphan-dependents", opts: orphanDependents(true), podsSurvive: true},
		{name: "e-orphan-policy", opts: orphan(), podsSurvive: true},
		{name: "f-background", opts: background(), podsSurvive: false},
	}
	const rcsPerGroup, podsPerRC = 2, 3

	type rcWithPods struct {
		g    group
		rc   obj
		pods []obj
	}
	var all []rcWithPods
	for _, g := range groups {
		for i := range rcsPerGroup {
			name := fmt.Sprintf("%s-%d", g.name, i)
			r := rcWithPods{g: g, rc: tc.rc(name, withFinalizers(g.rcFinalizers...))}
			for _, pn := range names(name, podsPerRC) {
				opts := []objOpt{withOwners(r.rc.ref(false))}
				if g.podsSurvive {
					opts = append(opts, protected())
				}
				r.pods = append(r.pods, tc.pod(pn, opts...))
			}
			all = append(all, r)
		}
	}

	for _, r := range all {
		tc.del(r.rc, r.g.opts)
	}

	var keep []kept
	for _, r := range all {
		if r.g.podsSurvive {
			// The orphan finalizer goes only after the pods are released.
			for _, p := range r.pods {
				tc.waitOwnerRefs(p)
				keep = append(keep, aliveWithOwners(p))
			}
			tc.waitGone(r.rc)
		} else {
			tc.waitGone(r.rc)
			tc.waitGone(r.pods...)
		}
	}
	tc.assertKeptAfterGC(podKind, keep...)
}

// Scenario 4. Orphan propagation: the RC goes, its pods stay, unowned.
func TestOrphaning(t *testing.T) {
	t.Parallel()
	tc := newTestCase(t)
	rc := tc.rc("rc")
	other := tc.configMap("unrelated-owner", protected())
	var pods []obj
	for i, n := range names("pod", 10) {
		refs := []metav1.OwnerReference{rc.ref(true)}
		if i%2 == 1 {
			// Odd pods also point at a live owner, which must be left alone.
			refs = append(refs, other.ref(false))
		}
		pods = append(pods, tc.pod(n, withOwners(refs...), protected()))
	}

	tc.del(rc, orphan())

	tc.waitGone(rc)
	keep := []kept{alive(other)}
	for i, p := range pods {
		want := []types.UID{}
		if i%2 == 1 {
			want = append(want, other.uid)
		}
		tc.waitOwnerRefs(p, want...)
		keep = append(keep, aliveWithOwners(p, want...))
	}
	tc.assertKeptAfterGC(podKind, keep...)
}

// Scenario 5. A pod owned by RC1 (blocking) and RC2 (solid). Foreground
// deletion of RC1 completes; the pod stays, owned by RC2 alone.
func TestSolidOwnerDoesNotBlockWaitingOwner(t *testing.T) {
	t.Parallel()
	tc := newTestCase(t)
	rc1 := tc.rc("rc1")
	rc2 := tc.rc("rc2", protected())
	p := tc.pod("pod", withOwners(rc1.ref(true), rc2.ref(false)), protected())

	tc.del(rc1, foreground())

	tc.waitGone(rc1)
	tc.waitOwnerRefs(p, rc2.uid)
	tc.assertKeptAfterGC(podKind, aliveWithOwners(p, rc2.uid), alive(rc2))
}

// Scenario 6. Dependents whose reference does not block owner deletion do not
// hold up a foreground deletion, even while they themselves linger.
func TestNonBlockingOwnerRefDoesNotBlock(t *testing.T) {
	t.Parallel()
	tc := newTestCase(t)
	rc := tc.rc("rc")
	held := tc.pod("held", withOwners(rc.ref(false)), withFinalizers(holdFinalizer))
	plain := tc.pod("plain", withOwners(rc.ref(false)))

	tc.del(rc, foreground())

	tc.waitGone(rc)
	if m, err := tc.get(tc.ctx, held); err != nil || m == nil {
		t.Fatalf("%s: want it to still exist (held by %s) when its owner is gone; got %s, err %v",
			held, holdFinalizer, safety.Describe(m), err)
	}
	tc.waitGone(plain)
	// kgc deleted the held pod too; only the finalizer keeps it.
	tc.waitTerminating(held)
	tc.release(held)
	tc.waitGone(held)
}

// Scenario 7. Deleting in the foreground twice an owner that carries its own
// finalizer: the second request changes nothing, kgc finishes the cascade and
// removes foregroundDeletion, leaving only the custom finalizer. A blocking
// dependent held by a finalizer keeps the cascade going until the second
// request has been made: kgc can delete the other dependents and release
// the owner within milliseconds of the first, before the test has seen the
// owner in foreground deletion.
func TestDoubleForegroundDeletionWithCustomFinalizer(t *testing.T) {
	t.Parallel()
	tc := newTestCase(t)
	owner := tc.rc("owner", withFinalizers(holdFinalizer))
	var pods []obj
	for i, n := range names("pod", 4) {
		pods = append(pods, tc.pod(n, withOwners(owner.ref(i%2 == 0))))
	}
	lingering := tc.pod("lingering", withOwners(owner.ref(true)), withFinalizers(holdFinalizer))

	tc.del(owner, foreground())
	tc.waitFor(owner, "in foreground deletion", func(m *metav1.PartialObjectMetadata) bool {
		return m != nil && m.DeletionTimestamp != nil && slices.Contains(m.Finalizers, metav1.FinalizerDeleteDependents)
	})
	tc.del(owner, foreground())

	tc.waitGone(pods...)
	tc.waitTerminating(lingering)
	tc.release(lingering)
	tc.waitGone(lingering)
	tc.waitFor(owner, "present with only the custom finalizer", func(m *metav1.PartialObjectMetadata) bool {
		return m != nil && slices.Equal(m.Finalizers, []string{holdFinalizer})
	})
	tc.release(owner)
	tc.waitGone(owner)
}

// Scenario 7b. An owner that carries its own finalizer is deleted in the
// foreground, kgc deletes its dependents and removes foregroundDeletion;
// the custom finalizer keeps it. New dependents appear (blocking ones
// among them) and the owner is deleted in the foreground again: the
// apiserver puts foregroundDeletion back, a new request. kgc must carry it
// out like the first — delete the new dependents, wait for the one that
// lingers, release the owner — not take its first release as final (the
// dependents' DELETEs were refused for good, and the owner and a blocking
// dependent waited for each other).
func TestForegroundDeletionAgainAfterRelease(t *testing.T) {
	t.Parallel()
	tc := newTestCase(t)
	owner := tc.rc("owner", withFinalizers(holdFinalizer))
	first := tc.pod("first", withOwners(owner.ref(true)))

	tc.del(owner, foreground())
	tc.waitGone(first)
	tc.waitFor(owner, "released (only the custom finalizer left)", func(m *metav1.PartialObjectMetadata) bool {
		return m != nil && m.DeletionTimestamp != nil && slices.Equal(m.Finalizers, []string{holdFinalizer})
	})

	blocking := tc.pod("blocking", withOwners(owner.ref(true)))
	lingering := tc.pod("lingering", withOwners(owner.ref(true)), withFinalizers(holdFinalizer))
	plain := tc.pod("plain", withOwners(owner.ref(false)))
	tc.del(owner, foreground())

	tc.waitGone(blocking, plain)
	// kgc deletes the lingering pod too (its finalizer holds it), and the
	// owner waits for it.
	tc.waitTerminating(lingering)
	if m, err := tc.get(tc.ctx, owner); err != nil || m == nil || !slices.Contains(m.Finalizers, metav1.FinalizerDeleteDependents) {
		t.Fatalf("%s: want it waiting for its blocking dependent %s; got %s, err %v", owner, lingering, safety.Describe(m), err)
	}
	tc.release(lingering)
	tc.waitGone(lingering)
	tc.waitFor(owner, "released again (only the custom finalizer left)", func(m *metav1.PartialObjectMetadata) bool {
		return m != nil && slices.Equal(m.Finalizers, []string{holdFinalizer})
	})
	tc.release(owner)
	tc.waitGone(owner)
}

// Scenario 8. A blocking dependent that cannot go away keeps its owner in
// foreground deletion; once it goes, the owner goes.
func TestBlockingOwnerRefDoesBlock(t *testing.T) {
	t.Parallel()
	tc := newTestCase(t)
	owner := tc.rc("owner")
	p := tc.pod("pod", withOwners(owner.ref(true)), withFinalizers(holdFinalizer))

	tc.del(owner, foreground())

	// kgc deletes the pod (the finalizer holds it) ...
	tc.waitTerminating(p)
	// ... and must leave the owner waiting for it.
	tc.assertKeptAfterGC(podKind, kept{o: owner, check: func(m *metav1.PartialObjectMetadata) error {
		if m.DeletionTimestamp == nil || !slices.Contains(m.Finalizers, metav1.FinalizerDeleteDependents) {
			return fmt.Errorf("is not waiting for its dependents (want deletionTimestamp and %s)", metav1.FinalizerDeleteDependents)
		}
		return nil
	}})
	if m, err := tc.get(tc.ctx, p); err != nil || m == nil {
		t.Fatalf("%s: want it held by %s; got %s, err %v", p, holdFinalizer, safety.Describe(m), err)
	}

	tc.release(p)
	tc.waitGone(p)
	tc.waitGone(owner)
}

// Scenario 14. p1 → p2 → p3 → p1, each owning the next with a blocking
// reference. Foreground deletion of p1 must not deadlock on the cycle.
func TestDependencyCycleIsCollected(t *testing.T) {
	t.Parallel()
	tc := newTestCase(t)
	p1 := tc.pod("p1")
	p2 := tc.pod("p2", withOwners(p1.ref(true)))
	p3 := tc.pod("p3", withOwners(p2.ref(true)))
	tc.addOwnerRefs(p1, p3.ref(true))

	tc.del(p1, foreground())

	tc.waitGone(p1, p2, p3)
}
