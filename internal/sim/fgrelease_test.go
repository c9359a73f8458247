package sim

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Found by the strict random schedules (seed 7168 of 5001..10000, without
// -race; a collector listing by pages, so not a streaming matter): a
// variant of TestNoDeleteAfterOwnerLeftForeground, fixed in
// internal/workers/execute.go (a refused re-release no longer forgets a
// release that landed; unit test
// TestForegroundReleaseRefusalKeepsEarlierRelease). An owner held by a
// foreign finalizer is deleted Foreground; kgc removes its
// foregroundDeletion finalizer (no blocking dependent), but the event of
// its own patch is not delivered yet, so its graph still shows the owner
// waiting. A dependent seen then (its only owner waiting) is deleted on
// that stale view once its decision, which waits for a resource that
// never finished listing (clusterroles), is released by --unlisted-hold:
// the DELETE lands while the owner exists and is no longer in Foreground
// deletion (S1, read as TestNoDeleteAfterOwnerLeftForeground reads it).
// The fix of that test (a DELETE is not sent once kgc released one of the
// waiting owners it rests on) does not catch a release that came before
// the dependent's decision. It fails about half the time: at the jump, the
// owner's own re-check (its patch refused, 422) races with the
// dependent's release; when the re-check goes first, the DELETE is not
// sent (the refused patch had forgotten the release that landed). Before
// the fix it failed 9 of 24 replays under load.
func TestForegroundReleaseRefusalKeepsDependent(t *testing.T) {
	s := newScripted(t)
	o, err := s.Create(ConfigMaps, "b", "o4", []string{Finalizer})
	s.must(err)
	s.must(s.Delete(o, metav1.DeletePropagationForeground))
	s.FailLists(ClusterRoles, 2)
	s.start() // o4's foregroundDeletion finalizer goes; its event waits
	if m := s.Get(o); m == nil || len(m.Finalizers) != 1 {
		t.Fatalf("the owner's foregroundDeletion finalizer did not go at the start: %v\n%s", m, s.Trace())
	}
	_, err = s.Create(Jobs, "b", "o6", []string{Finalizer}, s.OwnerRef(o, false))
	s.must(err)
	s.must(s.Deliver(Jobs))
	s.must(s.Jump(90 * time.Second))
	s.finish()
}
