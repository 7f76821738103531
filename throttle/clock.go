package throttle

import "time"

// Clock is the source of time and timers for a Limiter or Pacer. The real
// clock is used unless one is injected (NewLimiterWithClock, NewPacerWithClock);
// tests inject a fake one that advances only when told.
type Clock interface {
	// Now returns the current time.
	Now() time.Time
	// NewTimer returns a timer that sends on C once d has elapsed.
	NewTimer(d time.Duration) Timer
}

// Timer is the part of *time.Timer the throttle uses.
type Timer interface {
	// C is the channel the timer fires on.
	C() <-chan time.Time
	// Reset re-arms the timer to fire after d. It follows time.Timer.Reset's
	// Go ≥ 1.23 semantics: no stale value is received after Reset returns.
	Reset(d time.Duration)
	// Stop prevents the timer from firing.
	Stop()
}

// realClock is the wall clock (monotonic readings).
type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

func (realClock) NewTimer(d time.Duration) Timer { return realTimer{time.NewTimer(d)} }

type realTimer struct{ t *time.Timer }

func (r realTimer) C() <-chan time.Time   { return r.t.C }
func (r realTimer) Reset(d time.Duration) { r.t.Reset(d) }
func (r realTimer) Stop()                 { r.t.Stop() }
