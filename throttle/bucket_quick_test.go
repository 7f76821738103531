package throttle

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

// refBucket is a deliberately dumb reference for bucket: a FIFO queue of
// requests and a level that never goes negative, stepped on a 1 ms grid. The
// head is granted at the first grid point where the level covers it.
type refBucket struct {
	rate    float64 // bytes/s
	burst   float64
	level   float64 // bytes, 0..burst
	queue   []int   // request ids, oldest first
	size    map[int]float64
	granted map[int]time.Duration
}

func (r *refBucket) step(at, dt time.Duration) {
	if r.rate > 0 && !math.IsInf(r.rate, 1) {
		r.level += r.rate * dt.Seconds()
		if len(r.queue) == 0 {
			// Only an idle bucket overflows: with a queue, the head (≤ burst)
			// is granted before the level could pass burst; capping in the
			// middle of a step would lose bytes to the grid.
			r.level = math.Min(r.burst, r.level)
		}
	}
	r.grant(at)
}

func (r *refBucket) grant(at time.Duration) {
	for len(r.queue) > 0 {
		id := r.queue[0]
		if !math.IsInf(r.rate, 1) && r.level < r.size[id] {
			return
		}
		if !math.IsInf(r.rate, 1) {
			r.level -= r.size[id]
		}
		r.granted[id] = at
		r.queue = r.queue[1:]
	}
}

func (r *refBucket) setRate(at time.Duration, rate float64) {
	wasInf := math.IsInf(r.rate, 1)
	if math.IsInf(rate, 1) && len(r.queue) > 0 {
		r.level = 0 // the queue is granted, the debt forgiven
	}
	if wasInf && !math.IsInf(rate, 1) {
		r.level = 0
	}
	r.rate = rate
	r.grant(at)
}

// TestBucketAgainstReference drives bucket and refBucket with the same seeded
// random script of rate changes (paused, slow, fast, unlimited) and
// reservations on a 1 ms grid, and checks every request is granted at the
// same time, give or take the reference's 1 ms step.
func TestBucketAgainstReference(t *testing.T) {
	const (
		stepDur = time.Millisecond
		steps   = 20000 // 20 s
		burst   = 1000  // bytes
	)
	rates := []float64{0, 200, 1000, 5000, 20000, math.Inf(1)}
	for seed := uint64(1); seed <= 20; seed++ {
		rng := rand.New(rand.NewPCG(seed, 42))
		type op struct {
			at   time.Duration
			rate float64 // set the rate when >= 0
			size int     // else reserve this many bytes
		}
		var ops []op
		for k := 1; k < steps; k++ {
			at := time.Duration(k) * stepDur
			switch x := rng.IntN(1000); {
			case x < 3:
				ops = append(ops, op{at: at, rate: rates[rng.IntN(len(rates))]})
			case x < 60:
				ops = append(ops, op{at: at, rate: -1, size: 1 + rng.IntN(burst)})
			}
		}

		// The bucket, event by event: ops at their times, grants at the times
		// delay predicts.
		t0 := time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)
		b := newBucket(t0, 1000, burst)
		got := map[int]time.Duration{}
		type pend struct {
			id     int
			ticket int64
		}
		var queue []pend
		grantDue := func(now time.Duration) {
			b.advance(t0.Add(now))
			for len(queue) > 0 {
				if d, paused := b.delay(queue[0].ticket); d != 0 || paused {
					return
				}
				got[queue[0].id] = now
				queue = queue[1:]
			}
		}
		// drainUntil grants, in order, every reservation due by end
		// (delay is as of the last advance).
		drainUntil := func(end time.Duration) {
			for len(queue) > 0 {
				d, paused := b.delay(queue[0].ticket)
				if paused || b.last.Sub(t0)+d > end {
					return
				}
				grantDue(b.last.Sub(t0) + d)
			}
		}
		for id, o := range ops {
			drainUntil(o.at)
			b.advance(t0.Add(o.at))
			if o.rate >= 0 {
				b.setRate(t0.Add(o.at), o.rate)
			} else if b.unlimited() {
				got[id] = o.at
			} else {
				queue = append(queue, pend{id, b.reserve(o.size)})
			}
			grantDue(o.at)
		}
		drainUntil(steps * stepDur)

		// The reference, step by step.
		ref := &refBucket{rate: 1000, burst: burst, size: map[int]float64{}, granted: map[int]time.Duration{}}
		i := 0
		for k := 1; k <= steps; k++ {
			at := time.Duration(k) * stepDur
			ref.step(at, stepDur)
			for ; i < len(ops) && ops[i].at == at; i++ {
				if ops[i].rate >= 0 {
					ref.setRate(at, ops[i].rate)
				} else {
					ref.size[i] = float64(ops[i].size)
					ref.queue = append(ref.queue, i)
					ref.grant(at)
				}
			}
		}

		compared := 0
		for id, o := range ops {
			if o.rate >= 0 {
				continue
			}
			g, gok := got[id]
			r, rok := ref.granted[id]
			if gok != rok {
				t.Fatalf("seed %d: request %d (%d bytes at %v): bucket granted=%v, reference granted=%v",
					seed, id, o.size, o.at, gok, rok)
			}
			if !gok {
				continue
			}
			if diff := r - g; diff < -time.Microsecond || diff > stepDur+time.Microsecond {
				t.Fatalf("seed %d: request %d (%d bytes at %v): bucket grants at %v, reference at %v",
					seed, id, o.size, o.at, g, r)
			}
			compared++
		}
		if compared < 100 {
			t.Fatalf("seed %d: only %d grants compared", seed, compared)
		}
	}
}
