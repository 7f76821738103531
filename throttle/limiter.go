package throttle

import (
	"context"
	"fmt"
	"math"
	"sync"
	"time"
)

// Limiter limits a byte stream to a rate that may change at any time. It is a
// token bucket (see bucket for the model): the bucket refills at Rate bytes/s
// up to Burst bytes, and WaitN takes n bytes from it, waiting while it is in
// debt. Most callers want WaitN before every chunk they send and SetRate from
// the control loop.
//
// Rates are bytes per second: math.Inf(1) is unlimited, 0 is paused (WaitN
// blocks until the rate is raised or its context ends); negative and NaN rates
// count as 0. A rate change takes effect at once for everyone: waiters keep
// their place in line and re-plan the rest of their wait on the new rate, and a
// raise (or an unpause) wakes them immediately.
//
// A new Limiter's bucket is empty, so over any interval of length t starting at
// creation at most rate×t bytes pass (later, an idle stream may save up at most
// Burst bytes). Waiters are served in the order they reserve, one chunk of at
// most Burst bytes at a time.
//
// All methods are safe for concurrent use. The zero value is an unlimited
// Limiter with the auto burst on the real clock, as NewLimiter(math.Inf(1), 0).
type Limiter struct {
	clk Clock // nil = real clock; set only by the constructors

	mu struct {
		sync.Mutex
		init bool
		b    bucket
		wake chan struct{} // closed (and replaced) whenever the rate changes
	}

	// parked, if set (tests only), is called each time a waiter is about to
	// block: for d (timer armed), or paused until the rate changes.
	parked func(d time.Duration, paused bool)
}

// NewLimiter returns a Limiter at rate bytes/s (math.Inf(1) = unlimited,
// 0 = paused) with an empty bucket. burst is the bucket size in bytes and the
// largest chunk WaitN hands out at once; burst <= 0 selects the auto burst,
// which follows the rate: clamp(rate × 20 ms, 512 KiB, 256 MiB) (see
// AutoBurstWindow for why).
func NewLimiter(rate float64, burst int) *Limiter {
	return NewLimiterWithClock(rate, burst, nil)
}

// NewLimiterWithClock is NewLimiter on the given clock (nil = real clock);
// tests pass a fake one.
func NewLimiterWithClock(rate float64, burst int, clk Clock) *Limiter {
	l := &Limiter{clk: clk}
	l.mu.init = true
	l.mu.b = newBucket(l.clock().Now(), rate, burst)
	l.mu.wake = make(chan struct{})
	return l
}

func (l *Limiter) clock() Clock {
	if l.clk == nil {
		return realClock{}
	}
	return l.clk
}

// initLocked makes the zero value usable: unlimited, auto burst.
func (l *Limiter) initLocked(now time.Time) {
	if !l.mu.init {
		l.mu.init = true
		l.mu.b = newBucket(now, math.Inf(1), 0)
		l.mu.wake = make(chan struct{})
	}
}

// SetRate changes the rate, in bytes/s, from now on. Bytes earned up to now
// stay earned; every waiter re-plans on the new rate, and is woken at once to
// do so. Setting the same rate again is a no-op.
func (l *Limiter) SetRate(rate float64) {
	now := l.clock().Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	l.initLocked(now)
	old := l.mu.b.rate
	l.mu.b.setRate(now, rate)
	if l.mu.b.rate != old {
		close(l.mu.wake)
		l.mu.wake = make(chan struct{})
	}
}

// Rate returns the current rate in bytes/s.
func (l *Limiter) Rate() float64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.mu.init {
		return math.Inf(1)
	}
	return l.mu.b.rate
}

// Burst returns the current burst in bytes: the bucket size and the largest
// chunk WaitN takes at once. With the auto burst it changes with the rate.
func (l *Limiter) Burst() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.mu.init {
		return autoBurst(math.Inf(1))
	}
	return l.mu.b.burst
}

// WaitN blocks until n bytes (any n >= 0) may be sent, taking them from the
// bucket in chunks of at most Burst bytes, one after another. It blocks while
// the rate is 0. If ctx ends first it returns ctx.Err(): the chunk it was
// waiting for is given back when nobody queued behind it, but chunks already
// granted stay spent. A negative n is an error.
func (l *Limiter) WaitN(ctx context.Context, n int) error {
	if n < 0 {
		return fmt.Errorf("throttle: WaitN(n=%d): n must not be negative", n)
	}
	if n == 0 {
		return nil
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	w := waiter{l: l, clk: l.clock()}
	defer w.stop()
	for n > 0 {
		got, err := w.chunk(ctx, n)
		if err != nil {
			return err
		}
		n -= got
	}
	return nil
}

// waiter is the state of one WaitN call: its timer, created on first need and
// re-armed for every re-plan.
type waiter struct {
	l     *Limiter
	clk   Clock
	timer Timer
}

func (w *waiter) stop() {
	if w.timer != nil {
		w.timer.Stop()
	}
}

// chunk reserves min(n, Burst) bytes, waits until they are granted and returns
// how many bytes it covered (all n once the rate is unlimited).
func (w *waiter) chunk(ctx context.Context, n int) (int, error) {
	l := w.l
	l.mu.Lock()
	b := &l.mu.b
	if !l.mu.init || b.unlimited() {
		l.mu.Unlock() // unlimited: no clock read, no accounting
		return n, nil
	}
	b.advance(w.clk.Now())
	c := min(n, b.burst)
	ticket := b.reserve(c)
	for {
		d, paused := b.delay(ticket)
		if d == 0 && !paused {
			l.mu.Unlock()
			return c, nil
		}
		wake := l.mu.wake
		l.mu.Unlock()

		var fired <-chan time.Time
		switch {
		case paused && w.timer != nil:
			w.timer.Stop() // a plan from before the pause must not fire
		case paused:
		case w.timer == nil:
			w.timer = w.clk.NewTimer(d)
			fired = w.timer.C()
		default:
			w.timer.Reset(d)
			fired = w.timer.C()
		}
		if l.parked != nil {
			l.parked(d, paused)
		}
		select {
		case <-ctx.Done():
			l.mu.Lock()
			b.advance(w.clk.Now())
			if d, paused := b.delay(ticket); d != 0 || paused {
				b.cancel(ticket, c)
			}
			l.mu.Unlock()
			return 0, ctx.Err()
		case <-fired:
		case <-wake:
		}

		l.mu.Lock()
		b.advance(w.clk.Now())
		if b.unlimited() {
			l.mu.Unlock()
			return n, nil
		}
	}
}
