package sim

import (
	"bytes"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"time"

	"k8s.io/utils/clock"
)

// Clock is a fake clock.WithTicker that only the scheduler advances. Unlike
// k8s.io/utils/clock/testing it tells the scheduler when its next timer is
// due (Next), so that idle time is skipped in one step.
type Clock struct {
	mu      sync.Mutex
	now     time.Time
	waiters []*waiter
	// fired holds the channels of one-shot timers the last Step sent on,
	// ticked those of tickers, and when (real time): until their readers
	// took the tick, someone is about to wake.
	fired, ticked []chan time.Time
	firedAt       time.Time
	// seq numbers the timers in the order they were armed.
	seq uint64
	// wakeDelay, when set (a test hook), is how long the goroutine that
	// armed a one-shot timer the last Step fired waits in its next call of
	// Now: a reader slow between waking and acting, as the Go scheduler or
	// a loaded machine may make it. woken: those goroutines, not yet slowed.
	wakeDelay time.Duration
	woken     map[uint64]bool
}

type waiter struct {
	c       *Clock
	at      time.Time
	period  time.Duration // tickers
	ch      chan time.Time
	stopped bool
	// g armed the timer, seq-th (ArmedSince).
	g, seq uint64
}

var _ clock.WithTicker = (*Clock)(nil)

// NewClock returns a clock set to a fixed instant.
func NewClock() *Clock {
	return &Clock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
}

// Now returns the fake time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	if len(c.woken) > 0 {
		if g := goroutineID(); c.woken[g] {
			delete(c.woken, g)
			d := c.wakeDelay
			c.mu.Unlock()
			time.Sleep(d)
			c.mu.Lock()
		}
	}
	defer c.mu.Unlock()
	return c.now
}

// Since returns the fake time elapsed since t.
func (c *Clock) Since(t time.Time) time.Duration { return c.Now().Sub(t) }

func (c *Clock) add(d, period time.Duration) *waiter {
	g := goroutineID()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.seq++
	w := &waiter{c: c, at: c.now.Add(d), period: period, ch: make(chan time.Time, 1), g: g, seq: c.seq}
	if d <= 0 && period == 0 {
		w.ch <- c.now
		w.stopped = true
		return w
	}
	c.waiters = append(c.waiters, w)
	return w
}

// After returns a channel that receives the fake time once d has passed.
func (c *Clock) After(d time.Duration) <-chan time.Time { return c.add(d, 0).ch }

// NewTimer returns a timer on the fake clock.
func (c *Clock) NewTimer(d time.Duration) clock.Timer { return c.add(d, 0) }

// Sleep blocks until the scheduler advanced the clock by d.
func (c *Clock) Sleep(d time.Duration) { <-c.After(d) }

// Tick returns a ticker's channel.
func (c *Clock) Tick(d time.Duration) <-chan time.Time { return c.NewTicker(d).C() }

// NewTicker returns a ticker on the fake clock.
func (c *Clock) NewTicker(d time.Duration) clock.Ticker {
	if d <= 0 {
		d = time.Nanosecond
	}
	return ticker{c.add(d, d)}
}

type ticker struct{ w *waiter }

func (t ticker) C() <-chan time.Time { return t.w.ch }
func (t ticker) Stop()               { t.w.Stop() }

func (w *waiter) C() <-chan time.Time { return w.ch }

func (w *waiter) Stop() bool {
	w.c.mu.Lock()
	defer w.c.mu.Unlock()
	was := !w.stopped
	w.stopped = true
	w.c.prune()
	w.c.abandoned(w.ch)
	return was
}

func (w *waiter) Reset(d time.Duration) bool {
	w.c.mu.Lock()
	defer w.c.mu.Unlock()
	w.c.abandoned(w.ch)
	was := !w.stopped
	if !was {
		w.c.waiters = append(w.c.waiters, w)
	}
	w.stopped = false
	w.at = w.c.now.Add(d)
	return was
}

// abandoned forgets ch as a pending wake-up: its timer was stopped or
// reset, so whatever it fired is not waited for (a select that took
// another case, then stopped the timer). Callers hold mu.
func (c *Clock) abandoned(ch chan time.Time) {
	c.fired = slices.DeleteFunc(c.fired, func(f chan time.Time) bool { return f == ch })
}

// prune drops stopped waiters; callers hold mu.
func (c *Clock) prune() {
	live := c.waiters[:0]
	for _, w := range c.waiters {
		if !w.stopped {
			live = append(live, w)
		}
	}
	clear(c.waiters[len(live):])
	c.waiters = live
}

// Next returns when the earliest one-shot timer is due; ok is false when
// none is pending (tickers alone never make the clock "busy").
func (c *Clock) Next() (at time.Time, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, w := range c.waiters {
		if w.stopped || w.period != 0 {
			continue
		}
		if !ok || w.at.Before(at) {
			at, ok = w.at, true
		}
	}
	return at, ok
}

// Seq returns the number of timers armed so far.
func (c *Clock) Seq() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.seq
}

// ArmedSince reports whether goroutine g has a one-shot timer pending that
// it armed after the seq-th timer.
func (c *Clock) ArmedSince(g, seq uint64) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, w := range c.waiters {
		if !w.stopped && w.period == 0 && w.g == g && w.seq > seq {
			return true
		}
	}
	return false
}

// goroutineID returns the calling goroutine's ID, which Go exposes only in
// stack traces ("goroutine 42 [running]:"). The scheduler needs it to
// tell which goroutine armed a timer (ArmedSince): the one a failed LIST
// was served on, which is the monitor's.
func goroutineID() uint64 {
	var buf [32]byte
	b := bytes.TrimPrefix(buf[:runtime.Stack(buf[:], false)], []byte("goroutine "))
	if i := bytes.IndexByte(b, ' '); i > 0 {
		b = b[:i]
	}
	id, err := strconv.ParseUint(string(b), 10, 64)
	if err != nil {
		panic("sim: no goroutine ID in " + strconv.Quote(string(buf[:])))
	}
	return id
}

// Step advances the clock by d and fires what is due, in deadline order.
func (c *Clock) Step(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	c.fired, c.ticked, c.firedAt = c.fired[:0], c.ticked[:0], time.Now()
	for _, w := range c.waiters {
		if w.stopped || w.at.After(c.now) {
			continue
		}
		select {
		case w.ch <- c.now:
			if w.period == 0 {
				c.fired = append(c.fired, w.ch)
			} else {
				c.ticked = append(c.ticked, w.ch)
			}
		default: // a ticker nobody drained drops ticks, like time.Ticker
		}
		if w.period == 0 {
			w.stopped = true
			if c.wakeDelay > 0 {
				if c.woken == nil {
					c.woken = map[uint64]bool{}
				}
				c.woken[w.g] = true
			}
			continue
		}
		for !w.at.After(c.now) {
			w.at = w.at.Add(w.period)
		}
	}
	c.prune()
}

// A fired channel nobody reads does not count as a pending wake-up for
// ever: a timer that lost its select (After) is never read, a ticker's
// reader may be busy elsewhere. How long it counts is real time, which is
// what a loaded machine stretches: a reader not scheduled within the
// grace looked idle, and a step could begin, or the run end, before it
// woke. One-shot timers get the longer grace (their reader almost always
// wakes; one that stopped or reset the timer is forgotten at once), the
// tickers the shorter (their ticks are often left for the next round).
const (
	firedGrace  = 100 * time.Millisecond
	tickedGrace = 20 * time.Millisecond
)

// Undrained reports whether a channel the last Step fired has not been read
// yet (within its grace of real time): its reader is about to wake.
func (c *Clock) Undrained() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	since := time.Since(c.firedAt)
	for _, set := range []struct {
		chs   []chan time.Time
		grace time.Duration
	}{{c.fired, firedGrace}, {c.ticked, tickedGrace}} {
		if since > set.grace {
			continue
		}
		for _, ch := range set.chs {
			if len(ch) > 0 {
				return true
			}
		}
	}
	return false
}
