package orphanlog

import (
	"context"
	"errors"
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
