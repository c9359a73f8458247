package orphanlog

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	clocktesting "k8s.io/utils/clock/testing"
)

func uidN(i int) types.UID {
	return types.UID(uuid.NewSHA1(uuid.NameSpaceOID, fmt.Appendf(nil, "%d", i)).String())
}

func TestEncodeDecode(t *testing.T) {
	at := time.Unix(1_800_000_000, 0)
	in := map[types.UID]time.Time{
		uidN(1): at, uidN(2): at, uidN(3): at.Add(time.Second),
		"not-a-uuid": at, "with space,comma/slash~%": at.Add(2 * time.Second),
		types.UID(uuid.NewSHA1(uuid.NameSpaceOID, []byte("x")).String()[:35] + "Z"): at, // UUID-shaped but not canonical
	}
	s := Encode(in)
	out, err := Decode(s)
	if err != nil {
		t.Fatalf("Decode(%q): %v", s, err)
	}
	if !maps.EqualFunc(in, out, func(a, b time.Time) bool { return time.Unix(roundUp(a), 0).Equal(b) && !b.Before(a) }) {
		t.Fatalf("round trip:\n in  %v\n out %v\n encoded %q", in, out, s)
	}
	for _, bad := range []string{"v2\n1 x", "v1\nnotanumber abc", "v1\n1 short", "v1\n1 ~%zz"} {
		if _, err := Decode(bad); err == nil {
			t.Errorf("Decode(%q) succeeded", bad)
		}
	}
	if m, err := Decode(""); err != nil || len(m) != 0 {
		t.Errorf("Decode(\"\") = %v, %v", m, err)
	}
}

// The default bound fits kube-apiserver's 256 KiB limit on annotations.
func TestEncodedSizeAtMaxEntries(t *testing.T) {
	in := map[types.UID]time.Time{}
	for i := range DefaultMaxEntries {
		in[uidN(i)] = time.Unix(1_800_000_000+int64(i)*int64(Granularity/time.Second), 0) // worst case: one time each
	}
	if n := len(Encode(in)); n > 200*1000 {
		t.Fatalf("%d entries encode to %d bytes, over the annotation budget", DefaultMaxEntries, n)
	} else {
		t.Logf("%d entries: %d bytes (%.1f per entry)", DefaultMaxEntries, n, float64(n)/DefaultMaxEntries)
	}
}

func run(t *testing.T, j *Journal) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); j.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
}

// Record returns once the entry is stored, and many concurrent records
// share writes; a new journal on the same store loads them.
func TestRecordIsDurableAndGrouped(t *testing.T) {
	store := &MemoryStore{}
	j := New(Config{Store: store})
	if err := j.Load(context.Background()); err != nil {
		t.Fatal(err)
	}
	run(t, j)
	const n = 200
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Go(func() {
			if err := j.Record(context.Background(), uidN(i)); err != nil {
				errs <- err
				return
			}
			if _, ok := store.Entries()[uidN(i)]; !ok {
				errs <- fmt.Errorf("Record(%s) returned before the entry was stored", uidN(i))
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if s := store.Saves(); s >= n {
		t.Errorf("%d records took %d writes: not grouped", n, s)
	} else {
		t.Logf("%d concurrent records: %d writes", n, s)
	}
	again := New(Config{Store: store})
	if err := again.Load(context.Background()); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		if !again.Has(uidN(i)) {
			t.Fatalf("a journal loaded from the store lacks %s", uidN(i))
		}
	}
}

// A store that fails keeps Record from returning success: the finalizer
// removal it covers waits. Once the store heals, the entry is written.
func TestRecordWaitsForAFailingStore(t *testing.T) {
	store := &MemoryStore{}
	j := New(Config{Store: store})
	run(t, j)
	store.SetFail(errors.New("apiserver unavailable"))
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if err := j.Record(ctx, uidN(1)); err == nil {
		t.Fatal("Record succeeded while the store fails")
	}
	store.SetFail(nil)
	ctx2, cancel2 := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel2()
	if err := j.Record(ctx2, uidN(2)); err != nil {
		t.Fatalf("Record after the store healed: %v", err)
	}
	for _, u := range []types.UID{uidN(1), uidN(2)} {
		if _, ok := store.Entries()[u]; !ok {
			t.Errorf("%s not stored after the store healed", u)
		}
	}
}

// Two journals writing to one store (an old leader still running) keep
// the union of their entries.
func TestConcurrentWritersMerge(t *testing.T) {
	store := &MemoryStore{}
	a, b := New(Config{Store: store}), New(Config{Store: store})
	for _, j := range []*Journal{a, b} {
		if err := j.Load(context.Background()); err != nil {
			t.Fatal(err)
		}
		run(t, j)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for i := range 50 {
		wg.Go(func() {
			j := a
			if i%2 == 1 {
				j = b
			}
			if err := j.Record(ctx, uidN(i)); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	got := store.Entries()
	for i := range 50 {
		if _, ok := got[uidN(i)]; !ok {
			t.Errorf("%s lost between two writers", uidN(i))
		}
	}
}

// Entries go after their TTL, but not while Keep says a resource that
// could hold dependents is unlisted; at most MaxEntries are kept, the
// oldest going first; Withdraw removes one its own Record made.
func TestPruning(t *testing.T) {
	clk := clocktesting.NewFakePassiveClock(time.Unix(1_800_000_000, 0))
	store := &MemoryStore{}
	var keepMu sync.Mutex
	keep := true
	j := New(Config{Store: store, TTL: time.Minute, MaxEntries: 3, Clock: clk, Keep: func() bool {
		keepMu.Lock()
		defer keepMu.Unlock()
		return keep
	}})
	run(t, j)
	ctx := context.Background()
	record := func(u types.UID) {
		t.Helper()
		if err := j.Record(ctx, u); err != nil {
			t.Fatal(err)
		}
	}
	record(uidN(1))
	clk.SetTime(clk.Now().Add(2 * time.Minute))
	record(uidN(2))
	if !j.Has(uidN(1)) {
		t.Fatal("an entry past its TTL went while Keep held it")
	}
	keepMu.Lock()
	keep = false
	keepMu.Unlock()
	// The TTL counts from the last time Keep held too (2m).
	clk.SetTime(clk.Now().Add(30 * time.Second))
	record(uidN(3))
	if !j.Has(uidN(1)) {
		t.Fatal("an entry Keep held went less than a TTL after Keep released it")
	}
	clk.SetTime(clk.Now().Add(31 * time.Second))
	record(uidN(4))
	if j.Has(uidN(1)) || j.Has(uidN(2)) || !j.Has(uidN(3)) || !j.Has(uidN(4)) {
		t.Fatalf("after the TTL: has 1 %v, 2 %v, 3 %v, 4 %v; want only 3 and 4", j.Has(uidN(1)), j.Has(uidN(2)), j.Has(uidN(3)), j.Has(uidN(4)))
	}
	if _, ok := store.Entries()[uidN(1)]; ok {
		t.Error("the expired entry is still stored")
	}
	clk.SetTime(clk.Now().Add(time.Second))
	record(uidN(5))
	clk.SetTime(clk.Now().Add(time.Second))
	record(uidN(6))
	if j.Len() != 3 || j.Has(uidN(3)) {
		t.Fatalf("MaxEntries 3: %d entries, oldest kept %v", j.Len(), j.Has(uidN(3)))
	}
	j.Withdraw(uidN(5))
	record(uidN(7))
	if j.Has(uidN(5)) {
		t.Fatal("withdrawn entry still there")
	}
	if _, ok := store.Entries()[uidN(5)]; ok {
		t.Error("withdrawn entry still stored")
	}
}

// Without a store the journal is memory only: Record returns at once.
func TestMemoryOnly(t *testing.T) {
	j := New(Config{})
	if err := j.Load(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := j.Record(context.Background(), uidN(1)); err != nil || !j.Has(uidN(1)) {
		t.Fatalf("Record without a store: %v, has %v", err, j.Has(uidN(1)))
	}
	if j.Durable() {
		t.Fatal("a journal without a store says it is durable")
	}
}

// LeaseStore creates the Lease on the first write, updates it after, and
// keeps what else the Lease carries.
func TestLeaseStore(t *testing.T) {
	cs := fake.NewClientset()
	s := &LeaseStore{Client: cs.CoordinationV1(), Namespace: "kgc-system", Name: "kgc-orphans"}
	ctx := context.Background()
	got, v, err := s.Load(ctx)
	if err != nil || len(got) != 0 || v != "" {
		t.Fatalf("Load of a missing Lease: %v %q %v", got, v, err)
	}
	at := time.Unix(1_800_000_000, 0)
	if _, err := s.Save(ctx, map[types.UID]time.Time{uidN(1): at}, ""); err != nil {
		t.Fatalf("first Save: %v", err)
	}
	if _, err := s.Save(ctx, map[types.UID]time.Time{uidN(2): at}, ""); err == nil {
		t.Fatal("a second create succeeded")
	}
	l, _ := cs.CoordinationV1().Leases("kgc-system").Get(ctx, "kgc-orphans", metav1.GetOptions{})
	l.Annotations["other"] = "kept"
	if _, err := cs.CoordinationV1().Leases("kgc-system").Update(ctx, l, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	got, v, err = s.Load(ctx)
	if err != nil || !got[uidN(1)].Equal(at) { // at is a multiple of Granularity
		t.Fatalf("Load: %v %v", got, err)
	}
	if _, err := s.Save(ctx, map[types.UID]time.Time{uidN(1): at, uidN(2): at}, v); err != nil {
		t.Fatalf("Save at the version read: %v", err)
	}
	l, _ = cs.CoordinationV1().Leases("kgc-system").Get(ctx, "kgc-orphans", metav1.GetOptions{})
	if l.Annotations["other"] != "kept" {
		t.Error("Save dropped another annotation")
	}
	if m, _ := Decode(l.Annotations[Annotation]); len(m) != 2 {
		t.Errorf("stored %v", m)
	}
}

// A read-only journal (shadow mode) loads the store and never writes it,
// not even to prune.
func TestReadOnly(t *testing.T) {
	clk := clocktesting.NewFakePassiveClock(time.Unix(1_800_000_000, 0))
	store := &MemoryStore{}
	if _, err := store.Save(context.Background(), map[types.UID]time.Time{uidN(1): clk.Now()}, ""); err != nil {
		t.Fatal(err)
	}
	clk.SetTime(clk.Now().Add(time.Hour))
	j := New(Config{Store: store, ReadOnly: true, TTL: time.Minute, Clock: clk})
	if err := j.Load(context.Background()); err != nil || !j.Has(uidN(1)) {
		t.Fatalf("Load: %v, has %v", err, j.Has(uidN(1)))
	}
	run(t, j)
	if err := j.Record(context.Background(), uidN(2)); err == nil {
		t.Fatal("a read-only journal recorded")
	}
	if s := store.Saves(); s != 1 {
		t.Fatalf("a read-only journal wrote: %d saves", s)
	}
}

// A Lease whose annotation cannot be read answers ErrUnreadable, so that
// kgc can say what to do about it.
func TestLeaseStoreUnreadable(t *testing.T) {
	cs := fake.NewClientset()
	s := &LeaseStore{Client: cs.CoordinationV1(), Namespace: "kgc-system", Name: "kgc-orphans"}
	l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: "kgc-system", Name: "kgc-orphans", Annotations: map[string]string{Annotation: "v9\n1 x"}}}
	if _, err := cs.CoordinationV1().Leases("kgc-system").Create(context.Background(), l, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Load(context.Background()); !errors.Is(err, ErrUnreadable) {
		t.Fatalf("Load of an unreadable annotation: %v, want ErrUnreadable", err)
	}
	if err := New(Config{Store: s}).Load(context.Background()); !errors.Is(err, ErrUnreadable) {
		t.Fatalf("Journal.Load: %v, want ErrUnreadable", err)
	}
}

// Withdraw takes out only an entry no removal may rest on: one the
// withdrawn attempt's own Record made. An entry confirmed (its removal may
// have landed), held before the Record (an earlier attempt's, in this
// process or read from the Store), stays, in memory and in the Store.
func TestWithdrawKeepsEntriesARemovalMayRestOn(t *testing.T) {
	store := &MemoryStore{}
	if _, err := store.Save(context.Background(), map[types.UID]time.Time{uidN(9): time.Unix(1_800_000_000, 0)}, ""); err != nil {
		t.Fatal(err)
	}
	j := New(Config{Store: store})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := j.Load(ctx); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); j.Run(ctx) }()
	defer func() { cancel(); <-done }()
	record := func(uid types.UID) {
		t.Helper()
		rctx, rcancel := context.WithTimeout(ctx, 10*time.Second)
		defer rcancel()
		if err := j.Record(rctx, uid); err != nil {
			t.Fatal(err)
		}
	}

	record(uidN(1)) // refused: withdrawn
	j.Withdraw(uidN(1))
	record(uidN(2)) // may have landed, then a later attempt refused
	j.Confirm(uidN(2))
	record(uidN(2))
	j.Withdraw(uidN(2))
	record(uidN(3)) // re-recorded before any answer (an attempt never sent), then refused
	record(uidN(3))
	j.Withdraw(uidN(3))
	record(uidN(9)) // read from the Store: another kgc's removal may rest on it
	j.Withdraw(uidN(9))
	record(uidN(4)) // written to the Store with everything before it

	stored := store.Entries()
	for uid, want := range map[types.UID]bool{uidN(1): false, uidN(2): true, uidN(3): false, uidN(9): true, uidN(4): true} {
		if j.Has(uid) != want {
			t.Errorf("%s held %v, want %v", uid, j.Has(uid), want)
		}
		if _, ok := stored[uid]; ok != want {
			t.Errorf("%s stored %v, want %v", uid, ok, want)
		}
	}
}
