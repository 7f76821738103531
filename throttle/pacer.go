package throttle

import (
	"context"
	"fmt"
	"math"
	"sync"
	"time"
)

// Delay is Aqueduct's actuator rule (FAST 2002, §3.1): after a sub-move of
// moved bytes that took took, sleep max(0, moved/rate − took) before the next
// one, so sub-moves of W bytes start at most once every W/R. rate is bytes/s:
// +Inf gives 0 (no pacing); 0 (or negative, NaN) gives paused=true — wait until
// the rate is raised. A negative took counts as 0. The result is rounded up to
// the nanosecond and capped at about 146 years.
func Delay(moved int64, rate float64, took time.Duration) (d time.Duration, paused bool) {
	rate = sanitizeRate(rate)
	took = max(took, 0)
	if moved <= 0 || math.IsInf(rate, 1) {
		return 0, false
	}
	if rate == 0 {
		return 0, true
	}
	s := math.Ceil(float64(moved)*1e9/rate) - float64(took) // ns
	switch {
	case s <= 0:
		return 0, false
	case s >= float64(maxDelay):
		return maxDelay, false
	}
	return time.Duration(s), false
}

// PacerCatchUp is the most lateness a Pacer makes up. When a sub-move starts
// after the previous slot ended (the sleep woke late, the mover paused between
// sub-moves, or the last sub-move overran its slot), its own slot is counted
// from up to PacerCatchUp earlier, so timer lateness (≈50 µs–1 ms on a loaded
// host, large against the 0.5 ms slot of a 1 MiB sub-move at 2 GB/s) does not
// lower the achieved rate. Anything beyond it is not made up: that would be a
// burst. It plays the role of the Limiter's AutoBurstWindow.
const PacerCatchUp = 20 * time.Millisecond

// Pacer paces chunked moves at a rate that may change at any time: the mover
// does a sub-move, then calls Wait with its size and duration, which sleeps
// the rest of the sub-move's time slot (see Delay). A rate change re-plans the
// sleep in progress against the same sub-move: its slot becomes moved/new rate,
// measured from the sub-move's start; a raise wakes the sleeper at once; rate 0
// holds it until the rate is raised. Up to PacerCatchUp of lateness between
// one slot's end and the next sub-move's start is made up in the next slot, so
// over many sub-moves the achieved rate is the set rate unless the mover
// itself is slower.
//
// All methods are safe for concurrent use, though a Pacer normally serves one
// mover. The zero value paces nothing (unlimited) on the real clock.
type Pacer struct {
	clk Clock // nil = real clock; set only by the constructors

	mu struct {
		sync.Mutex
		init    bool
		rate    float64       // bytes/s
		wake    chan struct{} // closed (and replaced) whenever the rate changes
		slotEnd time.Time     // when the last paced slot ended (zero: none yet)
	}

	// parked, if set (tests only), is called each time Wait is about to block.
	parked func(d time.Duration, paused bool)
}

// NewPacer returns a Pacer at rate bytes/s (math.Inf(1) = no pacing,
// 0 = paused).
func NewPacer(rate float64) *Pacer { return NewPacerWithClock(rate, nil) }

// NewPacerWithClock is NewPacer on the given clock (nil = real clock).
func NewPacerWithClock(rate float64, clk Clock) *Pacer {
	p := &Pacer{clk: clk}
	p.mu.init = true
	p.mu.rate = sanitizeRate(rate)
	p.mu.wake = make(chan struct{})
	return p
}

func (p *Pacer) clock() Clock {
	if p.clk == nil {
		return realClock{}
	}
	return p.clk
}

func (p *Pacer) initLocked() {
	if !p.mu.init {
		p.mu.init = true
		p.mu.rate = math.Inf(1)
		p.mu.wake = make(chan struct{})
	}
}

// SetRate changes the rate in bytes/s; a sleeping Wait re-plans at once.
func (p *Pacer) SetRate(rate float64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.initLocked()
	rate = sanitizeRate(rate)
	if rate != p.mu.rate {
		p.mu.rate = rate
		close(p.mu.wake)
		p.mu.wake = make(chan struct{})
	}
}

// Rate returns the current rate in bytes/s.
func (p *Pacer) Rate() float64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.initLocked()
	return p.mu.rate
}

// Wait sleeps after a sub-move of moved bytes (>= 0) that took took (the
// sub-move just ended) until the sub-move's slot moved/Rate() has passed since
// it started, re-planning whenever the rate changes, and while the rate is 0
// until it is raised. If the sub-move started after the previous slot ended,
// its slot is counted from up to PacerCatchUp earlier (never before that end).
// It returns ctx.Err() if ctx ends first.
func (p *Pacer) Wait(ctx context.Context, moved int64, took time.Duration) error {
	if moved < 0 {
		return fmt.Errorf("throttle: Pacer.Wait(moved=%d): moved must not be negative", moved)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	clk := p.clock()
	started := clk.Now().Add(-max(took, 0))
	p.mu.Lock()
	if prev := p.mu.slotEnd; !prev.IsZero() && !started.Before(prev) {
		started = started.Add(-min(started.Sub(prev), PacerCatchUp)) // make up lateness
	}
	p.mu.Unlock()
	var timer Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		p.mu.Lock()
		p.initLocked()
		rate, wake := p.mu.rate, p.mu.wake
		p.mu.Unlock()

		now := clk.Now()
		d, paused := Delay(moved, rate, now.Sub(started))
		if d == 0 && !paused {
			end := now // the slot's planned end: started + moved/rate, never after now
			if rate > 0 && !math.IsInf(rate, 1) {
				end = started.Add(time.Duration(math.Ceil(float64(moved) * 1e9 / rate)))
			}
			p.mu.Lock()
			p.mu.slotEnd = end
			p.mu.Unlock()
			return nil
		}
		var fired <-chan time.Time
		switch {
		case paused && timer != nil:
			timer.Stop() // a plan from before the pause must not fire
		case paused:
		case timer == nil:
			timer = clk.NewTimer(d)
			fired = timer.C()
		default:
			timer.Reset(d)
			fired = timer.C()
		}
		if p.parked != nil {
			p.parked(d, paused)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-fired:
		case <-wake:
		}
	}
}
