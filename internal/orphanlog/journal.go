package orphanlog

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/kgc-dev/kgc/internal/metrics"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
)

// Defaults.
const (
	DefaultTTL        = 10 * time.Minute
	DefaultMaxEntries = 7000
)

// Store keeps the journal's entries somewhere that outlives a kgc process.
type Store interface {
	// Load returns the stored entries (UID -> when recorded) and the
	// version to make the next Save conditional on ("" when nothing is
	// stored yet).
	Load(ctx context.Context) (map[types.UID]time.Time, string, error)
	// Save replaces the stored entries if the store is still at version,
	// and returns its new version; a conflict answers an error for which
	// apierrors.IsConflict or apierrors.IsAlreadyExists is true.
	Save(ctx context.Context, entries map[types.UID]time.Time, version string) (string, error)
	// String names the store in logs.
	String() string
}

// Config configures a Journal.
type Config struct {
	// Store, when nil, keeps the journal in memory only: Record returns at
	// once, and a restart forgets (kgc as a library without a Lease).
	Store Store
	// TTL and MaxEntries bound the journal (defaults above).
	TTL        time.Duration
	MaxEntries int
	// Keep, when it returns true, keeps every entry past its TTL: a
	// resource that could hold dependents is unlisted or failing.
	Keep func() bool
	// Clock dates the entries (tests use a fake one); waits and retries use
	// real time.
	Clock clock.PassiveClock
	// ReadOnly loads the Store and never writes it (shadow mode, which
	// makes no write: it records nothing, and its pruning is not written).
	ReadOnly bool
	// OnWrite, when set, is told the outcome of each write to the Store
	// (metrics.JournalWritten, JournalConflict or JournalError) and the entries it held.
	OnWrite func(outcome string, entries int)
}

// Journal is the memory of orphaned owners. Its methods are safe for
// concurrent use; Load must be called before the first Has matters, and Run
// must run for Record to return (with a Store).
type Journal struct {
	cfg Config

	mu      sync.Mutex
	entries map[types.UID]time.Time
	version string
	// gen counts changes; durable is the gen last written; flushed is
	// closed (and replaced) at each successful write.
	gen, durable uint64
	flushed      chan struct{}
	stopped      bool
	dropped      int // entries dropped for MaxEntries since the last log
	// pending counts the Records of each owner still waiting for their
	// write: prune never drops those (a Record that returns nil promises
	// its entry is stored). latest is the latest time of any entry ever
	// held: a new entry is dated no earlier, so that it is never "older"
	// than entries read from the Store (whose times Encode rounds up, or
	// another kgc's clock wrote) and dropped first when the journal is
	// full.
	pending map[types.UID]int
	latest  time.Time
	// tentative holds the entries a Record made (the owner was not held
	// before) that no finalizer removal may rest on yet: Withdraw drops
	// only these. Confirm, a read of the Store holding the owner, or the
	// entry's end takes an owner out.
	tentative map[types.UID]struct{}
	// unseen is the last time some resource was not seen whole: Keep held
	// at a prune, or the process had just started (Load). The TTL counts
	// from it as well as from each entry's record: a dependent in a
	// resource that just healed is queued when its list lands and decided
	// a little later, and must still find its owner then.
	unseen time.Time

	kick chan struct{}
}

// New returns a journal; it holds nothing until Load.
func New(cfg Config) *Journal {
	if cfg.TTL <= 0 {
		cfg.TTL = DefaultTTL
	}
	if cfg.MaxEntries <= 0 {
		cfg.MaxEntries = DefaultMaxEntries
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	if cfg.Keep == nil {
		cfg.Keep = func() bool { return false }
	}
	if cfg.OnWrite == nil {
		cfg.OnWrite = func(string, int) {}
	}
	return &Journal{cfg: cfg, entries: map[types.UID]time.Time{}, pending: map[types.UID]int{}, tentative: map[types.UID]struct{}{},
		flushed: make(chan struct{}), kick: make(chan struct{}, 1)}
}

// Durable reports whether the journal outlives the process.
func (j *Journal) Durable() bool { return j.cfg.Store != nil }

// Load reads the stored entries and merges them into the journal. Without
// a Store it does nothing.
func (j *Journal) Load(ctx context.Context) error {
	if j.cfg.Store == nil {
		return nil
	}
	stored, version, err := j.cfg.Store.Load(ctx)
	if err != nil {
		return fmt.Errorf("reading the orphan journal %s: %w", j.cfg.Store, err)
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	j.merge(stored)
	j.version = version
	j.unseen = j.cfg.Clock.Now()
	return nil
}

// merge adds stored entries, keeping the later time of an entry held on
// both sides. A stored entry is never tentative: another kgc's removal may
// rest on it (this process's own entries written earlier are taken as
// such too: a stale entry costs less than a lost one). j.mu is held.
func (j *Journal) merge(stored map[types.UID]time.Time) {
	for uid, at := range stored {
		delete(j.tentative, uid)
		if mine, ok := j.entries[uid]; !ok || at.After(mine) {
			j.entries[uid] = at
		}
		if at.After(j.latest) {
			j.latest = at
		}
	}
}

// Len returns the number of entries.
func (j *Journal) Len() int {
	j.mu.Lock()
	defer j.mu.Unlock()
	return len(j.entries)
}

// Has reports whether owner is recorded as orphaned by kgc.
func (j *Journal) Has(owner types.UID) bool {
	j.mu.Lock()
	defer j.mu.Unlock()
	_, ok := j.entries[owner]
	return ok
}

// Record records owner and returns once the entry is durable (at once
// without a Store). An error means it may not be: the finalizer removal it
// was to cover must not be made. The caller then tells the journal what
// became of that removal: Confirm when it may have landed, Withdraw when it
// was refused or never sent.
func (j *Journal) Record(ctx context.Context, owner types.UID) error {
	if j.cfg.ReadOnly {
		return errors.New("the orphan journal is read-only (shadow mode)")
	}
	j.mu.Lock()
	if _, held := j.entries[owner]; !held {
		j.tentative[owner] = struct{}{}
	}
	at := j.cfg.Clock.Now()
	if j.latest.After(at) {
		at = j.latest
	}
	j.latest = at
	j.entries[owner] = at
	j.gen++
	want := j.gen
	if j.cfg.Store == nil {
		j.durable = want
		j.mu.Unlock()
		return nil
	}
	j.pending[owner]++
	j.mu.Unlock()
	defer func() {
		j.mu.Lock()
		if j.pending[owner]--; j.pending[owner] <= 0 {
			delete(j.pending, owner)
		}
		j.mu.Unlock()
	}()
	select {
	case j.kick <- struct{}{}:
	default:
	}
	for {
		j.mu.Lock()
		done, stopped, ch := j.durable >= want, j.stopped, j.flushed
		j.mu.Unlock()
		switch {
		case done:
			return nil
		case stopped:
			return errors.New("the orphan journal is stopped")
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Confirm records that the finalizer removal owner was recorded for may
// have landed (it succeeded, or its answer was lost: a timeout, a 5xx, a
// broken connection): the entry stays for its TTL, and no later Withdraw
// takes it out.
func (j *Journal) Confirm(owner types.UID) {
	j.mu.Lock()
	defer j.mu.Unlock()
	delete(j.tentative, owner)
}

// Withdraw takes owner's entry out again after the finalizer removal it
// was recorded for was refused, or its Record failed (the removal is not
// sent), if no removal may rest on it: a Record made it (the journal did
// not hold owner before), no removal was confirmed since, no Record of it
// waits, and no read of the Store found it. Otherwise the entry stays: the
// refusal, or the failed write, says nothing about an earlier removal,
// which may have landed (a refused attempt decided again on a graph that
// has not seen it is refused exactly because it landed). The entry's
// removal is written with the next write.
func (j *Journal) Withdraw(owner types.UID) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if _, ok := j.tentative[owner]; !ok || j.pending[owner] > 0 {
		return
	}
	delete(j.tentative, owner)
	if _, ok := j.entries[owner]; ok {
		delete(j.entries, owner)
		j.gen++
	}
}

// prune drops entries past their TTL (counted from their record and from
// the last time some resource was unseen; none while Keep) and the oldest
// beyond MaxEntries, never one whose Record waits. j.mu is held.
func (j *Journal) prune(now time.Time, keep bool) {
	before := len(j.entries)
	if keep {
		j.unseen = now
	} else {
		maps.DeleteFunc(j.entries, func(uid types.UID, at time.Time) bool {
			if j.unseen.After(at) {
				at = j.unseen
			}
			return now.Sub(at) > j.cfg.TTL && j.pending[uid] == 0
		})
	}
	if over := len(j.entries) - j.cfg.MaxEntries; over > 0 {
		uids := slices.DeleteFunc(slices.Collect(maps.Keys(j.entries)), func(uid types.UID) bool { return j.pending[uid] > 0 })
		slices.SortFunc(uids, func(a, b types.UID) int { return j.entries[a].Compare(j.entries[b]) })
		over = min(over, len(uids))
		for _, uid := range uids[:over] {
			delete(j.entries, uid)
		}
		j.dropped += over
	}
	if len(j.entries) != before {
		j.gen++
		maps.DeleteFunc(j.tentative, func(uid types.UID, _ struct{}) bool {
			_, held := j.entries[uid]
			return !held
		})
	}
}

// Run writes recorded entries until ctx is done (with a Store; without one
// it returns at once). Every pruneEvery it also drops expired entries.
func (j *Journal) Run(ctx context.Context) {
	defer func() {
		j.mu.Lock()
		j.stopped = true
		close(j.flushed)
		j.flushed = make(chan struct{})
		j.mu.Unlock()
	}()
	if j.cfg.Store == nil || j.cfg.ReadOnly {
		<-ctx.Done()
		return
	}
	logger := klog.FromContext(ctx).WithValues("journal", j.cfg.Store.String())
	const pruneEvery = time.Minute
	prune := time.NewTicker(pruneEvery)
	defer prune.Stop()
	backoff := time.Duration(0)
	for {
		var retry <-chan time.Time
		if backoff > 0 {
			retry = time.After(backoff)
		}
		select {
		case <-ctx.Done():
			return
		case <-j.kick:
		case <-prune.C:
		case <-retry:
		}
		err := j.flush(ctx, logger)
		switch {
		case err == nil:
			backoff = 0
		case ctx.Err() != nil:
			return
		default:
			backoff = min(max(2*backoff, 100*time.Millisecond), 10*time.Second)
			logger.Error(err, "Writing the orphan journal; orphan finalizer removals wait for it", "retryIn", backoff)
		}
	}
}

// flush writes the journal if it changed since the last write, re-reading
// and merging on a conflict.
func (j *Journal) flush(ctx context.Context, logger klog.Logger) error {
	conflicts := 0
	for {
		j.mu.Lock()
		j.prune(j.cfg.Clock.Now(), j.cfg.Keep())
		if j.dropped > 0 {
			logger.Info("Orphan journal full: the oldest entries were dropped from it; their dependents, if seen only after a restart, are deleted as dangling",
				"dropped", j.dropped, "maxEntries", j.cfg.MaxEntries)
			j.dropped = 0
		}
		if j.gen == j.durable {
			j.mu.Unlock()
			return nil
		}
		gen, version, entries := j.gen, j.version, maps.Clone(j.entries)
		j.mu.Unlock()

		newVersion, err := j.cfg.Store.Save(ctx, entries, version)
		switch {
		case err == nil:
			j.cfg.OnWrite(metrics.JournalWritten, len(entries))
		case apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err):
			j.cfg.OnWrite(metrics.JournalConflict, len(entries))
		default:
			j.cfg.OnWrite(metrics.JournalError, len(entries))
		}
		if err == nil {
			j.mu.Lock()
			j.version = newVersion
			if gen > j.durable {
				j.durable = gen
			}
			close(j.flushed)
			j.flushed = make(chan struct{})
			j.mu.Unlock()
			conflicts = 0
			continue // changes made meanwhile are written at once
		}
		if !(apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err)) || conflicts >= 5 {
			return err
		}
		conflicts++
		// Another writer (a previous leader still running, a restart
		// racing with it): merge its entries and write the union.
		stored, v, lerr := j.cfg.Store.Load(ctx)
		if lerr != nil {
			return lerr
		}
		j.mu.Lock()
		j.merge(stored)
		j.version = v
		j.gen++
		j.mu.Unlock()
	}
}
