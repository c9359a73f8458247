package budget

import (
	"container/list"
	"context"
	"math"
	"sync"
	"time"

	"k8s.io/client-go/util/flowcontrol"
	"k8s.io/utils/clock"
)

// Limiter is a token bucket, client-go's rate limiter's shape (qps tokens a
// second, at most burst stored, one per request), whose waiters are served
// awaited first (WithAwaited on the request's context), then the others,
// each in arrival order. A request takes a token at once only when nobody
// waits: a token is never taken past a waiter.
type Limiter struct {
	clock clock.WithDelayedExecution
	qps   float64
	burst float64

	mu      sync.Mutex
	tokens  float64
	last    time.Time
	waiting [classes]list.List // of *waiter
	timer   clock.Timer        // wakes the waiters when the next token is due; nil when none waits
	stopped bool
}

type waiter struct {
	ready   chan struct{}
	granted bool
}

var _ flowcontrol.RateLimiter = (*Limiter)(nil)

// NewLimiter returns a Limiter of qps (> 0) tokens a second, burst (at
// least 1) of them available at once, starting full, on clk (nil: the real
// clock).
func NewLimiter(qps float32, burst int, clk clock.WithDelayedExecution) *Limiter {
	if clk == nil {
		clk = clock.RealClock{}
	}
	b := float64(max(burst, 1))
	return &Limiter{clock: clk, qps: float64(qps), burst: b, tokens: b, last: clk.Now()}
}

// refill adds the tokens due since the last refill. Called with mu held.
func (l *Limiter) refill(now time.Time) {
	if d := now.Sub(l.last); d > 0 {
		l.tokens = math.Min(l.burst, l.tokens+d.Seconds()*l.qps)
	}
	l.last = now
}

func (l *Limiter) nobodyWaits() bool {
	for c := range classes {
		if l.waiting[c].Len() > 0 {
			return false
		}
	}
	return true
}

// Wait blocks until the request made with ctx may go, or ctx is done.
func (l *Limiter) Wait(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	l.mu.Lock()
	l.refill(l.clock.Now())
	if l.nobodyWaits() && l.tokens >= 1 {
		l.tokens--
		l.mu.Unlock()
		return nil
	}
	w := &waiter{ready: make(chan struct{})}
	c := classOf(Awaited(ctx))
	e := l.waiting[c].PushBack(w)
	l.wake()
	l.mu.Unlock()

	select {
	case <-w.ready:
		return nil
	case <-ctx.Done():
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if w.granted {
		// Too late to leave the line: give the token to the next one.
		l.tokens = math.Min(l.burst, l.tokens+1)
		l.dispatch()
	} else {
		l.waiting[c].Remove(e)
	}
	return ctx.Err()
}

// dispatch hands the tokens there are to the waiters, awaited first, and
// sets the timer for the next one. Called with mu held.
func (l *Limiter) dispatch() {
	l.refill(l.clock.Now())
	for c := range classes {
		for l.tokens >= 1 && l.waiting[c].Len() > 0 {
			w := l.waiting[c].Remove(l.waiting[c].Front()).(*waiter)
			w.granted = true
			close(w.ready)
			l.tokens--
		}
	}
	l.wake()
}

// wake sets the timer for when the next token is due, if someone waits
// and no timer is set. Called with mu held.
func (l *Limiter) wake() {
	if l.timer != nil || l.stopped || l.nobodyWaits() {
		return
	}
	// Rounded up to the nanosecond: a timer firing a hair early would find
	// the token not quite there, and set another.
	d := time.Duration(math.Ceil((1 - l.tokens) / l.qps * float64(time.Second)))
	// On a goroutine of its own: a fake clock runs the function while it
	// holds its lock, and dispatch reads the clock.
	l.timer = l.clock.AfterFunc(max(d, 0), func() {
		go func() {
			l.mu.Lock()
			defer l.mu.Unlock()
			l.timer = nil
			l.dispatch()
		}()
	})
}

// TryAccept takes a token if one is there and nobody waits.
func (l *Limiter) TryAccept() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.refill(l.clock.Now())
	if l.nobodyWaits() && l.tokens >= 1 {
		l.tokens--
		return true
	}
	return false
}

// Accept waits for a token, as other work.
func (l *Limiter) Accept() { _ = l.Wait(context.Background()) }

// QPS returns the rate.
func (l *Limiter) QPS() float32 { return float32(l.qps) }

// Stop stops the timer; waiters still waiting wait until their context
// ends.
func (l *Limiter) Stop() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.stopped = true
	if l.timer != nil {
		l.timer.Stop()
		l.timer = nil
	}
}

// waiters returns how many requests wait (tests).
func (l *Limiter) waiters() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.waiting[classAwaited].Len() + l.waiting[classOther].Len()
}
