package throttle

import (
	"math"
	"time"
)

// Burst settings used when a Limiter is created with burst <= 0 ("auto
// burst"). The auto burst follows the rate: every SetRate recomputes it as
//
//	burst = clamp(rate × AutoBurstWindow, MinAutoBurst, MaxAutoBurst)
//
// so it is max(512 KiB, rate/50) up to 256 MiB (reached at 12.8 GB/s). The
// window is the timer lateness the limiter absorbs without losing throughput:
// a waiter that wakes up to 20 ms late finds the bytes it missed still in the
// bucket and sends them at once. A smaller burst makes the stream smoother but,
// at high rates, timer lateness (≈50 µs–1 ms on a loaded host) would then cap
// the achieved rate below the requested one. The floor holds a frame of
// package transfer (256 KiB and its header), which then asks for it in one
// wait: every wake-up of a paced sender costs CPU on the server whose slack it
// spends (a context switch or two, the runtime's timer and poller work). With
// a 64 KiB floor, a snapshot paced at 2 MB/s woke each of its two paced
// stages ~30 times a second, and that, not the copying, was most of its CPU
// (`go test -run XXX -bench PacedSnapshotCPU ./agent` measures it). It is not larger because a
// larger burst lets more of the copy's CPU land in one 10 ms CFS period of a
// quota-limited server, which is what delays its transactions.
const (
	AutoBurstWindow = 20 * time.Millisecond // burst = rate × 20 ms (rate/50)
	MinAutoBurst    = 512 << 10             // bytes; 512 KiB floor, also the burst while paused
	MaxAutoBurst    = 256 << 20             // bytes; 256 MiB ceiling, also the burst while unlimited
)

// needSlack is how many bytes short of its ticket a reservation may be and
// still be granted: it absorbs float rounding in rate×time (relative error
// ~1e-16 on levels of at most a few GiB), and is far below the one byte anyone
// can send, so it never lets the stream ahead of its rate.
const needSlack = 1e-3 // bytes

// maxDelay bounds a single planned wait so tiny rates cannot overflow a
// time.Duration; the waiter simply re-plans when it expires.
const maxDelay = time.Duration(1 << 62) // ≈146 years

// autoBurst returns the automatic burst, in bytes, for rate bytes/s.
func autoBurst(rate float64) int {
	if math.IsInf(rate, 1) {
		return MaxAutoBurst
	}
	b := rate * AutoBurstWindow.Seconds()
	switch {
	case b < MinAutoBurst:
		return MinAutoBurst
	case b > MaxAutoBurst:
		return MaxAutoBurst
	}
	return int(b)
}

// sanitizeRate maps negative and NaN rates to 0 (paused): when in doubt, stop.
func sanitizeRate(r float64) float64 {
	if math.IsNaN(r) || r < 0 {
		return 0
	}
	return r
}

// bucket is the Limiter's arithmetic: a token bucket whose level may go
// negative, so reservations queue up as debt, and whose rate may change at any
// moment. It does no I/O, reads no clock (time is an argument) and is not safe
// for concurrent use; Limiter guards it with a mutex.
//
// Model, all in bytes:
//
//	credit(t)  cumulative bytes released by the bucket up to t
//	debited    cumulative bytes reserved
//	tokens     = credit − debited, never above burst; negative = debt
//
// While the rate r is finite, credit grows at r bytes/s as long as tokens stay
// ≤ burst (the surplus of an idle stream is capped at one burst). A reservation
// of c bytes takes the ticket debited+c and is granted once credit ≥ ticket.
// Because a waiter keeps its ticket, not a wake-up time, any rate change
// re-plans every wait in progress: the remaining need (ticket − credit) is
// divided by the new rate. Rate 0 freezes credit (paused); rate +Inf grants
// everything and forgives the debt. A new bucket starts empty (tokens = 0), so
// the first second at rate r carries r bytes, not r plus a burst.
type bucket struct {
	rate      float64   // bytes/s; 0 = paused, +Inf = unlimited
	burst     int       // bytes; the largest single reservation and the cap on tokens
	autoBurst bool      // burst follows the rate (see AutoBurstWindow)
	tokens    float64   // bytes; credit − debited
	debited   int64     // bytes reserved since creation
	last      time.Time // time credit was last brought up to date
}

// newBucket returns an empty bucket at time now. burst <= 0 selects the auto
// burst.
func newBucket(now time.Time, rate float64, burst int) bucket {
	b := bucket{rate: sanitizeRate(rate), burst: burst, last: now}
	if burst <= 0 {
		b.autoBurst = true
		b.burst = autoBurst(b.rate)
	}
	return b
}

// unlimited reports whether the rate is +Inf.
func (b *bucket) unlimited() bool { return math.IsInf(b.rate, 1) }

// advance brings credit up to time now at the current rate. Times before the
// last update are ignored (credit never goes back).
func (b *bucket) advance(now time.Time) {
	if !now.After(b.last) {
		return
	}
	dt := now.Sub(b.last)
	b.last = now
	if b.rate == 0 || b.unlimited() {
		return
	}
	b.tokens = math.Min(float64(b.burst), b.tokens+b.rate*float64(dt)/1e9)
}

// setRate changes the rate at time now: credit up to now accrues at the old
// rate, from now on at the new one.
func (b *bucket) setRate(now time.Time, rate float64) {
	b.advance(now)
	wasUnlimited := b.unlimited()
	b.rate = sanitizeRate(rate)
	if b.autoBurst {
		b.burst = autoBurst(b.rate)
	}
	switch {
	case b.unlimited() && b.tokens < 0:
		b.tokens = 0 // forgive the debt: every outstanding ticket is granted
	case wasUnlimited && !b.unlimited():
		b.tokens = 0 // leaving unlimited starts an empty bucket
	}
	b.tokens = math.Min(b.tokens, float64(b.burst))
}

// reserve takes c bytes (REQUIRES: 0 < c <= burst) and returns the ticket the
// caller waits for.
func (b *bucket) reserve(c int) int64 {
	b.tokens -= float64(c)
	b.debited += int64(c)
	return b.debited
}

// need returns how many bytes of credit the ticket still lacks (<= 0: none).
func (b *bucket) need(ticket int64) float64 {
	if b.unlimited() {
		return 0
	}
	return float64(ticket-b.debited) - b.tokens
}

// delay returns how long the holder of ticket must still wait at the current
// rate, as of the last advance: 0 when granted, or paused=true when the rate
// is 0 and the wait lasts until the rate is raised.
func (b *bucket) delay(ticket int64) (d time.Duration, paused bool) {
	n := b.need(ticket)
	if n <= needSlack {
		return 0, false
	}
	if b.rate == 0 {
		return 0, true
	}
	s := math.Ceil(n * 1e9 / b.rate) // ns
	if s >= float64(maxDelay) {
		return maxDelay, false
	}
	if s < 1 {
		s = 1
	}
	return time.Duration(s), false
}

// cancel gives back an ungranted reservation of c bytes with the given ticket.
// Only the newest reservation can be undone exactly (nobody queued behind it);
// an older one's bytes are forfeited, which delays later waiters a little but
// never lets the stream exceed its rate.
func (b *bucket) cancel(ticket int64, c int) {
	if ticket != b.debited {
		return
	}
	b.debited -= int64(c)
	b.tokens = math.Min(float64(b.burst), b.tokens+float64(c))
}
