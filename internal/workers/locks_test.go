package workers

import (
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// A DELETE of an owner waits for a write resting on that owner being solid,
// and the other way round; locks go away once released.
func TestDeletionLocks(t *testing.T) {
	var l deletionLocks
	unlockShared := l.rlock([]types.UID{"b", "a", "b"})
	deleted := make(chan struct{})
	go func() {
		defer close(deleted)
		defer l.lock("a")()
	}()
	select {
	case <-deleted:
		t.Fatal("exclusive lock taken while a shared holder runs")
	case <-time.After(50 * time.Millisecond):
	}
	unlockShared()
	select {
	case <-deleted:
	case <-time.After(10 * time.Second):
		t.Fatal("exclusive lock not taken after the shared holder released")
	}
	if n := l.len(); n != 0 {
		t.Errorf("%d locks left after every release, want 0", n)
	}
	// Unrelated UIDs do not wait for each other.
	unlockA := l.lock("a")
	unlockB := l.rlock([]types.UID{"b"})
	unlockB()
	unlockA()
}
