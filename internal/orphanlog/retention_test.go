package orphanlog

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
)

// A Record that returned nil promises its entry is stored: the orphan
// finalizer removal it covers follows at once. A full journal whose other
// entries carry later times than this process's clock (Encode rounds
// times up by up to Granularity; another kgc's clock may run ahead) must
// not drop the entry being recorded as "the oldest" and still report it
// durable.
func TestRecordIsNotDroppedByAFullJournalWithLaterTimes(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	clk := clocktesting.NewFakePassiveClock(now)
	store := &MemoryStore{}
	stored := map[types.UID]time.Time{}
	for i := range 3 {
		stored[uidN(i)] = now.Add(5 * time.Second)
	}
	if _, err := store.Save(context.Background(), stored, ""); err != nil {
		t.Fatal(err)
	}
	j := New(Config{Store: store, MaxEntries: 3, Clock: clk})
	if err := j.Load(context.Background()); err != nil {
		t.Fatal(err)
	}
	run(t, j)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	x := uidN(100)
	if err := j.Record(ctx, x); err != nil {
		t.Fatal(err)
	}
	if _, ok := store.Entries()[x]; !ok {
		t.Fatalf("Record(%s) returned nil, but the store does not hold it: %v", x, store.Entries())
	}
}

// stepStore fails its first Save and moves the clock on, as a store that
// is down for a while does.
type stepStore struct {
	*MemoryStore
	clk   *clocktesting.FakePassiveClock
	step  time.Duration
	fails int
}

func (s *stepStore) Save(ctx context.Context, e map[types.UID]time.Time, v string) (string, error) {
	if s.fails > 0 {
		s.fails--
		s.clk.SetTime(s.clk.Now().Add(s.step))
		return "", errors.New("etcdserver: request timed out")
	}
	return s.MemoryStore.Save(ctx, e, v)
}

// Nor may the TTL prune an entry whose Record still waits for its write
// (a TTL shorter than the store's outage).
func TestRecordIsNotPrunedWhileItWaits(t *testing.T) {
	clk := clocktesting.NewFakePassiveClock(time.Unix(1_800_000_000, 0))
	store := &stepStore{MemoryStore: &MemoryStore{}, clk: clk, step: 2 * time.Second, fails: 1}
	j := New(Config{Store: store, TTL: time.Second, Clock: clk})
	if err := j.Load(context.Background()); err != nil {
		t.Fatal(err)
	}
	run(t, j)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	x := uidN(1)
	if err := j.Record(ctx, x); err != nil {
		t.Fatal(err)
	}
	if _, ok := store.Entries()[x]; !ok {
		t.Fatalf("Record(%s) returned nil, but the store does not hold it: %v", x, store.Entries())
	}
}

// The TTL counts from when every resource was last seen whole, not only
// from the record: a dependent in a resource that was failing (Keep) is
// queued when the resource's list lands, and decided a little later; an
// entry kept past its TTL by Keep must not be pruned the moment Keep turns
// false, before that dependent's turn. Likewise after a restart: the new
// process has seen nothing before its Load, so what it loads is kept for a
// TTL from then (a resource that healed during the restart is listed
// whole at once, and its dependents decided only afterwards).
func TestTTLCountsFromWhenEverythingWasLastSeen(t *testing.T) {
	start := time.Unix(1_800_000_000, 0)
	clk := clocktesting.NewFakePassiveClock(start)
	store := &MemoryStore{}
	if _, err := store.Save(context.Background(), map[types.UID]time.Time{uidN(1): start.Add(-time.Hour)}, ""); err != nil {
		t.Fatal(err)
	}
	var keepMu sync.Mutex
	keep := true
	setKeep := func(k bool) { keepMu.Lock(); keep = k; keepMu.Unlock() }
	j := New(Config{Store: store, TTL: time.Minute, Clock: clk, Keep: func() bool {
		keepMu.Lock()
		defer keepMu.Unlock()
		return keep
	}})
	if err := j.Load(context.Background()); err != nil {
		t.Fatal(err)
	}
	run(t, j)
	ctx := context.Background()
	record := func(u types.UID) {
		t.Helper()
		if err := j.Record(ctx, u); err != nil {
			t.Fatal(err)
		}
	}
	// Loaded an hour after it was recorded: kept for a TTL from the Load.
	setKeep(false)
	clk.SetTime(start.Add(30 * time.Second))
	record(uidN(2))
	if !j.Has(uidN(1)) {
		t.Fatal("an entry loaded at start was pruned before a TTL had passed since the start")
	}
	// A resource fails for long, then heals: kept for a TTL from then.
	setKeep(true)
	clk.SetTime(start.Add(10 * time.Minute))
	record(uidN(3))
	setKeep(false)
	clk.SetTime(start.Add(10*time.Minute + 30*time.Second))
	record(uidN(4))
	if !j.Has(uidN(1)) || !j.Has(uidN(2)) {
		t.Fatal("entries kept by Keep were pruned the moment it turned false")
	}
	clk.SetTime(start.Add(11*time.Minute + time.Second))
	record(uidN(5))
	if j.Has(uidN(1)) || j.Has(uidN(2)) || j.Has(uidN(3)) || !j.Has(uidN(4)) {
		t.Fatalf("a TTL after the last unseen moment: has 1 %v, 2 %v, 3 %v, 4 %v; want only 4 (and 5)",
			j.Has(uidN(1)), j.Has(uidN(2)), j.Has(uidN(3)), j.Has(uidN(4)))
	}
}
