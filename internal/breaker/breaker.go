package breaker

import (
	"cmp"
	"fmt"
	"slices"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
)

// Signal is what a trip rests on.
type Signal string

const (
	// Unobserved: deletions resting on too many distinct owners kgc never
	// observed alive (the restore / rollback signature).
	Unobserved Signal = "unobserved-owners"
	// Dangling: too large a fraction of the graph found dangling.
	Dangling Signal = "dangling-fraction"
)

// Signals lists every signal (metrics label values, status order).
var Signals = []Signal{Unobserved, Dangling}

// Defaults: see Config and the README's argument for them.
const (
	DefaultWindow           = 10 * time.Minute
	DefaultUnobservedLimit  = 200
	DefaultDanglingFraction = 0.2
	DefaultDanglingMinimum  = 1000
	DefaultMaxHeld          = 100000
)

// Config sets the breaker's window and thresholds.
type Config struct {
	// Window over which deletions are counted. Default DefaultWindow.
	Window time.Duration
	// UnobservedLimit is how many distinct owners never observed alive
	// deletions may rest on in one window; a deletion resting on one more
	// trips Unobserved. Owners, not deletions: a Background cascade that a
	// new leader (or a restarted kgc) takes over midway rests on one owner
	// it never saw, however many dependents that owner has, and is not
	// suspicious; a restore names as many missing owners as it restored
	// objects with references. 0 turns the signal off.
	UnobservedLimit int
	// DanglingFraction and DanglingMinimum: Dangling trips when the
	// owners found dangling in one window (distinct owners that kgc did not
	// delete itself, each with a dependent to delete) would exceed both
	// DanglingFraction × the graph's size and DanglingMinimum (so that a
	// small cluster does not trip on one Deployment). DanglingFraction 0
	// turns the signal off.
	DanglingFraction float64
	DanglingMinimum  int
	// MaxHeld bounds how many held objects are remembered to be queued
	// again on resume. Default DefaultMaxHeld. Objects held beyond it are
	// held all the same; the caller re-checks its whole graph on resume
	// when Overflowed says so.
	MaxHeld int
	// Clock; nil is the real clock.
	Clock clock.PassiveClock
}

// DefaultConfig is the configuration `kgc run` starts with.
func DefaultConfig() Config {
	return Config{Window: DefaultWindow, UnobservedLimit: DefaultUnobservedLimit,
		DanglingFraction: DefaultDanglingFraction, DanglingMinimum: DefaultDanglingMinimum, MaxHeld: DefaultMaxHeld}
}

// Validate returns every problem with c.
func (c Config) Validate() []error {
	var errs []error
	if c.Window < 0 {
		errs = append(errs, fmt.Errorf("the breaker window must not be negative, got %s", c.Window))
	}
	if c.UnobservedLimit < 0 {
		errs = append(errs, fmt.Errorf("the unobserved-owner limit must not be negative, got %d", c.UnobservedLimit))
	}
	if c.DanglingFraction < 0 || c.DanglingFraction > 1 || c.DanglingFraction != c.DanglingFraction {
		errs = append(errs, fmt.Errorf("the dangling fraction must be between 0 and 1, got %v", c.DanglingFraction))
	}
	if c.DanglingMinimum < 0 {
		errs = append(errs, fmt.Errorf("the dangling minimum must not be negative, got %d", c.DanglingMinimum))
	}
	if c.MaxHeld < 0 {
		errs = append(errs, fmt.Errorf("the held-object bound must not be negative, got %d", c.MaxHeld))
	}
	return errs
}

// Trip is one signal crossing its threshold.
type Trip struct {
	Signal Signal    `json:"signal"`
	At     time.Time `json:"at"`
	// Count is the deletions the signal had counted in the window, the one
	// that tripped it included; Limit the most it allowed then.
	Count int `json:"count"`
	Limit int `json:"limit"`
	// GraphSize is the graph's size when it tripped (Dangling).
	GraphSize int `json:"graphSize,omitempty"`
	// Window is the window it was counted over.
	Window Duration `json:"window"`
	// Object is the deletion that tripped it ("kind namespace/name").
	Object string `json:"object,omitempty"`
}

// Because says why the signal tripped, in plain words.
func (t Trip) Because() string {
	switch t.Signal {
	case Unobserved:
		return fmt.Sprintf("%d owners kgc never observed alive (a quorum read found nothing, or another object, at a UID the graph never held) were found gone within %s, each with dependents to delete, more than the limit of %d: the restore / rollback signature",
			t.Count, time.Duration(t.Window), t.Limit)
	case Dangling:
		return fmt.Sprintf("%d owners that kgc did not delete itself were found gone within %s, each with dependents to delete, more than %d (the larger of the dangling fraction of the graph's %d objects and the minimum)",
			t.Count, time.Duration(t.Window), t.Limit, t.GraphSize)
	}
	return string(t.Signal)
}

// Deletion is one deletion kgc is about to make because an owner of the
// object is dangling.
type Deletion struct {
	UID types.UID
	// Object names it for people ("kind namespace/name").
	Object string
	// Unobserved: an owner it rests on was never observed alive.
	Unobserved bool
	// UnobservedOwners: those owners; each counts once per window toward
	// UnobservedLimit. A deletion that is Unobserved and names none counts
	// as one owner of its own.
	UnobservedOwners []types.UID
	// Owners: the dangling owners it rests on that kgc did not delete
	// itself; each counts once per window toward the dangling fraction.
	Owners []types.UID
	// GraphSize is the graph's size now.
	GraphSize int
}

// Verdict is the breaker's answer about one deletion.
type Verdict struct {
	// Held: the deletion must not be made; Trip is the trip that holds it.
	Held bool
	Trip Trip
	// Tripped: this deletion tripped Trip (report it once).
	Tripped bool
}

// Hold is one held object.
type Hold struct {
	UID    types.UID `json:"uid"`
	Object string    `json:"object"`
	Signal Signal    `json:"signal"`
	Since  time.Time `json:"since"`
}

// Breaker counts deletions and holds them once a signal has tripped.
type Breaker struct {
	cfg Config
	clk clock.PassiveClock

	mu sync.Mutex
	// window: what was counted, oldest first: owners toward Unobserved,
	// owners toward Dangling; inWindow says what each signal holds now
	// (one object, or owner, counts once per window however often it is
	// decided).
	window   []entry
	inWindow map[Signal]map[types.UID]struct{}
	counts   map[Signal]int
	trips    map[Signal]Trip
	// lastResume is the latest resume applied.
	lastResume time.Time
	held       map[types.UID]Hold
	overflowed bool
	// released: objects held when an operator resumed: they go without
	// being counted again (else a resumed restore re-trips at once).
	released map[types.UID]struct{}
}

type entry struct {
	at     time.Time
	signal Signal
	uid    types.UID
}

// New returns a breaker with cfg (zero Window and MaxHeld take their
// defaults).
func New(cfg Config) *Breaker {
	if cfg.Window == 0 {
		cfg.Window = DefaultWindow
	}
	if cfg.MaxHeld == 0 {
		cfg.MaxHeld = DefaultMaxHeld
	}
	clk := cfg.Clock
	if clk == nil {
		clk = clock.RealClock{}
	}
	return &Breaker{cfg: cfg, clk: clk, inWindow: newInWindow(), counts: map[Signal]int{},
		trips: map[Signal]Trip{}, held: map[types.UID]Hold{}, released: map[types.UID]struct{}{}}
}

// Config returns the breaker's configuration.
func (b *Breaker) Config() Config { return b.cfg }

// Admit decides whether d may be made now. A deletion that may go is
// counted; one that is held is remembered (Held) until Resume.
func (b *Breaker) Admit(d Deletion) Verdict {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.clk.Now()
	if _, ok := b.released[d.UID]; ok {
		delete(b.released, d.UID)
		return Verdict{}
	}
	if t, ok := b.holding(d); ok {
		b.hold(d, t, now)
		return Verdict{Held: true, Trip: t}
	}
	b.expire(now)
	var unobserved []types.UID
	if d.Unobserved && b.cfg.UnobservedLimit > 0 {
		keys := d.UnobservedOwners
		if len(keys) == 0 {
			keys = []types.UID{d.UID}
		}
		for _, o := range keys {
			if !b.has(Unobserved, o) && !slices.Contains(unobserved, o) {
				unobserved = append(unobserved, o)
			}
		}
		if n := b.counts[Unobserved] + len(unobserved); len(unobserved) > 0 && n > b.cfg.UnobservedLimit {
			return b.trip(d, Unobserved, n, b.cfg.UnobservedLimit, now)
		}
	}
	var owners []types.UID
	if b.cfg.DanglingFraction > 0 {
		for _, o := range d.Owners {
			if !b.has(Dangling, o) && !slices.Contains(owners, o) {
				owners = append(owners, o)
			}
		}
		if limit := b.danglingLimit(d.GraphSize); len(owners) > 0 && b.counts[Dangling]+len(owners) > limit {
			return b.trip(d, Dangling, b.counts[Dangling]+len(owners), limit, now)
		}
	}
	for _, o := range unobserved {
		b.count(Unobserved, o, now)
	}
	for _, o := range owners {
		b.count(Dangling, o, now)
	}
	return Verdict{}
}

func newInWindow() map[Signal]map[types.UID]struct{} {
	return map[Signal]map[types.UID]struct{}{Unobserved: {}, Dangling: {}}
}

func (b *Breaker) has(s Signal, uid types.UID) bool {
	_, ok := b.inWindow[s][uid]
	return ok
}

func (b *Breaker) count(s Signal, uid types.UID, now time.Time) {
	b.window = append(b.window, entry{at: now, signal: s, uid: uid})
	b.inWindow[s][uid] = struct{}{}
	b.counts[s]++
}

// danglingLimit is the most deletions Dangling allows in a window for a
// graph of size objects.
func (b *Breaker) danglingLimit(size int) int {
	return max(b.cfg.DanglingMinimum, int(b.cfg.DanglingFraction*float64(size)))
}

// holding returns the trip that holds d, if one does.
func (b *Breaker) holding(d Deletion) (Trip, bool) {
	if t, ok := b.trips[Dangling]; ok {
		return t, true
	}
	if t, ok := b.trips[Unobserved]; ok && d.Unobserved {
		return t, true
	}
	return Trip{}, false
}

func (b *Breaker) trip(d Deletion, s Signal, count, limit int, now time.Time) Verdict {
	t := Trip{Signal: s, At: now, Count: count, Limit: limit, Window: Duration(b.cfg.Window), Object: d.Object}
	if s == Dangling {
		t.GraphSize = d.GraphSize
	}
	b.trips[s] = t
	b.hold(d, t, now)
	return Verdict{Held: true, Trip: t, Tripped: true}
}

func (b *Breaker) hold(d Deletion, t Trip, now time.Time) {
	if _, ok := b.held[d.UID]; ok {
		return
	}
	if len(b.held) >= b.cfg.MaxHeld {
		b.overflowed = true
		return
	}
	b.held[d.UID] = Hold{UID: d.UID, Object: d.Object, Signal: t.Signal, Since: now}
}

// expire drops the deletions older than the window.
func (b *Breaker) expire(now time.Time) {
	cut := now.Add(-b.cfg.Window)
	i := 0
	for ; i < len(b.window) && !b.window[i].at.After(cut); i++ {
		e := b.window[i]
		delete(b.inWindow[e.signal], e.uid)
		b.counts[e.signal]--
	}
	if i > 0 {
		b.window = slices.Delete(b.window, 0, i)
	}
}

// Restore applies trips recorded elsewhere (kgc's Lease, by an earlier
// process), unless resumed at or after they happened. It returns the
// trips it applied.
func (b *Breaker) Restore(trips []Trip, resumed time.Time) []Trip {
	b.mu.Lock()
	defer b.mu.Unlock()
	if resumed.After(b.lastResume) {
		b.lastResume = resumed
	}
	var out []Trip
	for _, t := range trips {
		if t.At.After(b.lastResume) {
			if cur, ok := b.trips[t.Signal]; !ok || cur.At.Before(t.At) {
				b.trips[t.Signal] = t
				out = append(out, t)
			}
		}
	}
	return out
}

// Resume clears the trips that happened at or before at and returns the
// objects they held, to be decided again (they go without being counted
// again, once each). overflowed reports that more objects were held than
// remembered: the caller re-checks everything unfinished. A trip after at
// stays (the operator resumed before it).
func (b *Breaker) Resume(at time.Time) (release []types.UID, resumed []Trip, overflowed bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !at.After(b.lastResume) {
		return nil, nil, false
	}
	b.lastResume = at
	for s, t := range b.trips {
		if !t.At.After(at) {
			resumed = append(resumed, t)
			delete(b.trips, s)
		}
	}
	if len(resumed) == 0 {
		return nil, nil, false
	}
	for uid, h := range b.held {
		if _, still := b.trips[h.Signal]; still {
			continue
		}
		if _, dangling := b.trips[Dangling]; dangling {
			continue
		}
		release = append(release, uid)
		b.released[uid] = struct{}{}
		delete(b.held, uid)
	}
	overflowed, b.overflowed = b.overflowed, false
	// Start counting afresh: what was counted led to the trips just
	// resumed.
	b.window, b.inWindow = nil, newInWindow()
	b.counts = map[Signal]int{}
	slices.SortFunc(resumed, func(x, y Trip) int { return x.At.Compare(y.At) })
	return release, resumed, overflowed
}

// Forget drops uid from the held objects (it went, or no longer rests on
// a dangling owner).
func (b *Breaker) Forget(uid types.UID) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.held, uid)
	delete(b.released, uid)
}

// Held returns the hold on uid, if it is held.
func (b *Breaker) Held(uid types.UID) (Hold, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	h, ok := b.held[uid]
	return h, ok
}

// Status is the breaker's state.
type Status struct {
	// Trips: the signals tripped now, by the time they tripped.
	Trips []Trip `json:"trips"`
	// Counts: what each signal counted in the current window (deletions
	// for Unobserved, distinct owners for Dangling), and the
	// limit of each (0: off; Dangling's for GraphSize).
	Counts map[Signal]int `json:"counts"`
	Limits map[Signal]int `json:"limits"`
	// Held: the held objects, oldest first, at most limit of them;
	// HeldTotal how many are held (remembered) in all.
	Held      []Hold `json:"held,omitempty"`
	HeldTotal int    `json:"heldTotal"`
	// Overflowed: more objects were held than remembered.
	Overflowed bool `json:"overflowed,omitempty"`
	// LastResume is the latest resume applied (zero: none).
	LastResume time.Time `json:"lastResume,omitzero"`
	Window     Duration  `json:"window"`
}

// Status returns the breaker's state with at most limit held objects
// (negative: all) for a graph of graphSize objects.
func (b *Breaker) Status(graphSize, limit int) Status {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.expire(b.clk.Now())
	st := Status{Counts: map[Signal]int{}, Limits: map[Signal]int{}, HeldTotal: len(b.held),
		Overflowed: b.overflowed, LastResume: b.lastResume, Window: Duration(b.cfg.Window)}
	for _, s := range Signals {
		st.Counts[s] = b.counts[s]
	}
	st.Limits[Unobserved] = b.cfg.UnobservedLimit
	if b.cfg.DanglingFraction > 0 {
		st.Limits[Dangling] = b.danglingLimit(graphSize)
	}
	for _, t := range b.trips {
		st.Trips = append(st.Trips, t)
	}
	slices.SortFunc(st.Trips, func(x, y Trip) int { return x.At.Compare(y.At) })
	if limit != 0 {
		for _, h := range b.held {
			st.Held = append(st.Held, h)
		}
		slices.SortFunc(st.Held, func(x, y Hold) int {
			if c := x.Since.Compare(y.Since); c != 0 {
				return c
			}
			return cmp.Compare(x.UID, y.UID)
		})
		if limit > 0 && len(st.Held) > limit {
			st.Held = st.Held[:limit]
		}
	}
	return st
}

// HeldBySignal counts the held objects by the signal that holds them.
func (b *Breaker) HeldBySignal() map[Signal]int {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make(map[Signal]int, len(Signals))
	for _, h := range b.held {
		out[h.Signal]++
	}
	return out
}

// Tripped reports whether signal s is tripped now.
func (b *Breaker) Tripped(s Signal) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	_, ok := b.trips[s]
	return ok
}

// Duration is a time.Duration that marshals as its string ("10m0s").
type Duration time.Duration

func (d Duration) String() string { return time.Duration(d).String() }

// MarshalText implements encoding.TextMarshaler.
func (d Duration) MarshalText() ([]byte, error) { return []byte(time.Duration(d).String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler.
func (d *Duration) UnmarshalText(b []byte) error {
	v, err := time.ParseDuration(string(b))
	*d = Duration(v)
	return err
}
