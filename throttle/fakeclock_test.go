package throttle

import (
	"sync"
	"time"
)

// fakeClock is a Clock that moves only when Advance is called. Timers fire
// (send on their buffered channel) during Advance.
type fakeClock struct {
	mu     sync.Mutex
	now    time.Time
	timers map[*fakeTimer]bool // armed timers
	onFire func()              // if set, called for each timer fired, before it sends
}

var _ Clock = (*fakeClock)(nil)

func newFakeClock() *fakeClock {
	return &fakeClock{
		now:    time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC),
		timers: map[*fakeTimer]bool{},
	}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Since returns how far the clock has moved since start.
func (c *fakeClock) Since(start time.Time) time.Duration { return c.Now().Sub(start) }

func (c *fakeClock) NewTimer(d time.Duration) Timer {
	t := &fakeTimer{c: c, ch: make(chan time.Time, 1)}
	t.Reset(d)
	return t
}

// Advance moves the clock forward by d and fires every timer due by then.
func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	for t := range c.timers {
		if !t.when.After(c.now) {
			c.fireLocked(t)
		}
	}
	c.mu.Unlock()
}

// Next returns the earliest armed timer's deadline, and false when none is armed.
func (c *fakeClock) Next() (time.Duration, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var best time.Time
	ok := false
	for t := range c.timers {
		if !ok || t.when.Before(best) {
			best, ok = t.when, true
		}
	}
	return best.Sub(c.now), ok
}

func (c *fakeClock) fireLocked(t *fakeTimer) {
	delete(c.timers, t)
	if c.onFire != nil {
		c.onFire()
	}
	select {
	case t.ch <- c.now:
	default:
	}
}

type fakeTimer struct {
	c    *fakeClock
	ch   chan time.Time
	when time.Time
}

func (t *fakeTimer) C() <-chan time.Time { return t.ch }

func (t *fakeTimer) Reset(d time.Duration) {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	select { // no stale value after Reset, as time.Timer since Go 1.23
	case <-t.ch:
	default:
	}
	t.when = t.c.now.Add(d)
	t.c.timers[t] = true
	if d <= 0 {
		t.c.fireLocked(t)
	}
}

func (t *fakeTimer) Stop() {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	delete(t.c.timers, t)
	select {
	case <-t.ch:
	default:
	}
}
