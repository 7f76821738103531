package control

import (
	"math"
	"math/rand"
	"testing"
	"time"
)

// steadyPlant is a queue (latency L0/(1 − r/C)) with log-normal noise of
// spread sigma on each second's mean — nothing moves it but the rate — or,
// with a wave period P > 0 steps, a workload whose load swings: for P/2
// steps the server has 0.8 of its capacity at 1.25× its idle latency, for the
// next P/2 1.2 of it at 0.8×, from a phase drawn from the seed; or, with
// easeAt E > 0 steps, a load that eases once: the busy half's plant until
// step E, the light half's from then on.
type steadyPlant struct {
	sigma  float64
	period int
	phase  int
	easeAt int
	noise  *rand.Rand
}

func (p *steadyPlant) latency(k int, r float64) time.Duration {
	l0, c := 3e-3, 100e6
	if p.period > 0 || p.easeAt > 0 {
		if busy := k < p.easeAt || p.easeAt == 0 && ((k+p.phase)/(p.period/2))%2 == 0; busy {
			l0, c = 1.25*l0, 0.8*c
		} else {
			l0, c = 0.8*l0, 1.2*c
		}
	}
	s := l0 / math.Max(1-r/c, 0.02)
	s *= math.Exp(p.sigma*p.noise.NormFloat64() - p.sigma*p.sigma/2) // mean 1
	return time.Duration(s * float64(time.Second))
}

// What the PID costs where nothing moves the plant but the rate, and what it
// gains where a load swings. Against the fixed rate of equal mean latency
// (fixedStepsAt, 20 seeds, through a 3 s window), the benchmarks' PID takes
// more steps on a steady plant: a rate that moves around the one that holds
// the setpoint costs the clients more latency, at one mean speed, than that
// rate held (the latency is convex in the rate), and the loop spends its
// first steps finding it. A swing of the load helps it only when slow
// against the loop's response (tens of steps): then it copies in the light
// half and holds back in the busy one, where a fixed rate pays the busy
// half's latency at full speed. Measured: PID ÷ fixed steps at 6
// / 8 ms, 3.2 GB: noise 0.3 1.02 / 1.03, noise 0.6 1.03 / 1.05, a swing of
// period 20 s 1.04 / 1.07, 40 s 1.04 / 1.17; 9.6 GB: steady 1.01 / 1.02, a
// swing of 120 s about even (0.98 / 1.01), of 240 s 0.87 / 0.87. At Ki 0.08
// (0.04 before): 3.2 GB noise 0.3 1.01 / 1.03, noise 0.6 1.06 /
// 1.07, a swing of 20 s 1.10 / 1.28 — the faster integral chases a swing
// that quick behind the 3 s window, and at 8 ms ends 10 % over — 40 s 1.16
// / 1.16; 9.6 GB steady 1.01 / 1.02, 120 s 0.94 / 0.98, 240 s 0.85 / 0.86.
// The bounds below hold those figures.
func TestPIDSteadyPlantCost(t *testing.T) {
	const seeds = 20
	for _, c := range []struct {
		sigma  float64
		period int
		size   float64 // bytes
		bound  float64 // PID ÷ fixed steps, at most
	}{
		{0.3, 0, burstSize, 1.05},
		{0.6, 0, burstSize, 1.08},
		{0.3, 20, burstSize, 1.32},
		{0.3, 40, burstSize, 1.20},
		{0.3, 0, 3 * burstSize, 1.03},
		{0.3, 120, 3 * burstSize, 1.03},
		{0.3, 240, 3 * burstSize, 0.92},
	} {
		run := func(seed int64, ctl Controller) (int, float64) {
			p := &steadyPlant{sigma: c.sigma, period: c.period, noise: rand.New(rand.NewSource(seed))}
			if c.period > 0 {
				p.phase = int(seed*7) % c.period
			}
			return windowedCopy(t, ctl, c.size, 0, p.latency(0, 0), p.latency)
		}
		for _, sp := range []time.Duration{6 * time.Millisecond, 8 * time.Millisecond} {
			var steps, mean float64
			for s := int64(1); s <= seeds; s++ {
				pid, err := NewPID(benchPIDParams(sp))
				if err != nil {
					t.Fatal(err)
				}
				n, m := run(s, pid)
				steps += float64(n) / seeds
				mean += m / seeds
			}
			fs := fixedStepsAt(t, seeds, mean, run)
			t.Logf("noise %.1f, swing period %d, %.1f GB, setpoint %v: PID %.1f steps at %.2f ms; the fixed rate of that mean %.1f steps (PID %.3f×)", c.sigma, c.period, c.size/1e9, sp, steps, mean, fs, steps/fs)
			if steps > c.bound*fs {
				t.Errorf("noise %.1f, swing period %d, setpoint %v: PID %.1f steps, %.2f× the fixed rate's %.1f: want at most %.2f×", c.sigma, c.period, sp, steps, steps/fs, fs, c.bound)
			}
		}
	}
}

// Where the PID's mean contract ends under its setpoint: a load that eases
// 30 s into a 3.2 GB copy (idle latency 3.75 → 2.4 ms, capacity 80 → 120
// MB/s). After the ease the law climbs at most Ki·MaxRate a step (the linear
// error is at most 1) and a rearm stops at the rate that held the busy
// plant, so a short copy ends with latency in hand — the undershoot the
// testbed's short copies showed (docs/control.md).
// Measured over 20 seeds, the clients' mean against the setpoint
// at 6 / 8 / 10 ms: −6 / −10 / −13 %, where the same plant without the ease
// is within 1 %. At Ki 0.08, where the law climbs twice as
// fast, the late slack is spent: −0.6 / −1.3 / −1.3 % in 65.3 / 55.9 / 51.9
// steps, against −5.0 / −8.8 / −11.8 % in 68.2 / 58.5 / 53.8 at 0.04 the
// same day (the command: docs/control.md). The
// bounds hold those figures: a change that spends the late slack should
// tighten them; one that makes the undershoot worse fails.
func TestPIDLateSlack(t *testing.T) {
	const seeds = 20
	for _, c := range []struct {
		sp     time.Duration
		easeAt int
		lo, hi float64 // clients' mean ÷ setpoint
	}{
		{6 * time.Millisecond, 0, 0.98, 1.02},
		{10 * time.Millisecond, 0, 0.98, 1.02},
		{6 * time.Millisecond, 30, 0.97, 1.02},
		{8 * time.Millisecond, 30, 0.97, 1.02},
		{10 * time.Millisecond, 30, 0.97, 1.02},
	} {
		var steps, mean float64
		for s := int64(1); s <= seeds; s++ {
			p := &steadyPlant{sigma: 0.3, easeAt: c.easeAt, noise: rand.New(rand.NewSource(s))}
			pid, err := NewPID(benchPIDParams(c.sp))
			if err != nil {
				t.Fatal(err)
			}
			n, m := windowedCopy(t, pid, burstSize, 0, p.latency(0, 0), p.latency)
			steps += float64(n) / seeds
			mean += m / seeds
		}
		ratio := mean / ms(c.sp)
		t.Logf("setpoint %v, load eases at step %d: %.1f steps, clients' mean %.2f ms (%+.1f %%)", c.sp, c.easeAt, steps, mean, 100*(ratio-1))
		if ratio < c.lo || ratio > c.hi {
			t.Errorf("setpoint %v, load eases at step %d: clients' mean %.2f ms, %.3f× the setpoint: want %.2f–%.2f×", c.sp, c.easeAt, mean, ratio, c.lo, c.hi)
		}
	}
}
