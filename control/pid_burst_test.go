package control

import (
	"math"
	"math/rand"
	"strings"
	"testing"
	"time"
)

// burstPlant is the testbed's tenant server as the slack sweep meets it on a
// busy host: a queue (latency L0/(1 − r/C)) with 30 % noise on each second's
// mean, and host CPU steal bursts no rate causes — every ~90 s (exponential
// gaps) a burst of 8–20 s in which the server has 60 % of its capacity and
// twice its idle latency. The schedule is drawn from the seed alone, so the
// controllers compared on one seed meet the same bursts at the same times.
type burstPlant struct {
	l0, cap float64 // idle latency (s), capacity (bytes/s)
	noise   *rand.Rand
	bursts  [][2]int // [from, to) steps
}

func newBurstPlant(seed int64, steps int) *burstPlant {
	p := &burstPlant{l0: 4.5e-3, cap: 100e6, noise: rand.New(rand.NewSource(seed))}
	sched := rand.New(rand.NewSource(seed + 1000))
	for k := int(sched.ExpFloat64() * 90); k < steps; k += int(sched.ExpFloat64()*90) + 1 {
		d := 8 + sched.Intn(13)
		p.bursts = append(p.bursts, [2]int{k, k + d})
		k += d
	}
	return p
}

func (p *burstPlant) latency(k int, r float64) time.Duration {
	l0, c := p.l0, p.cap
	for _, b := range p.bursts {
		if k >= b[0] && k < b[1] {
			l0, c = 2*l0, 0.7*c
		}
	}
	s := l0 / math.Max(1-r/c, 0.02)
	s *= math.Max(0.2, 1+0.3*p.noise.NormFloat64())
	return time.Duration(s * float64(time.Second))
}

// burstCopy copies size bytes under controller c over a burstPlant seen
// through a 3 s window, and returns the steps it took and the clients' mean
// latency over them, ms.
func burstCopy(t *testing.T, seed int64, c Controller, size float64) (steps int, meanMs float64) {
	t.Helper()
	p := newBurstPlant(seed, 5000)
	return windowedCopy(t, c, size, 0, p.latency(0, 0), p.latency)
}

// burstPID is the benchmarks' PID (Kp 0.02, Ki 0.04, Kd 0, slow
// start ×1.12, mean horizon 20, from a quarter of 120 MB/s) with rearm growth g.
func burstPID(t *testing.T, sp time.Duration, g float64) *PID {
	t.Helper()
	c, err := NewPID(PIDParams{Setpoint: sp, MaxRate: 120e6, Kp: 0.02, Ki: 0.04, Initial: 0.25,
		StartGrowth: 1.12, MeanHorizon: 20, RearmGrowth: g})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// On the burst plant over 20 seeds, the rearm to the held rate (growth 1.5)
// copies in fewer steps than the rearm to half the peak at ×1.12, with the
// clients' mean within ±5 % of the setpoint both ways and within 1 % of each
// other. Measured: 6 ms 190.2 → 184.1 steps, 8 ms 90.7 → 88.7,
// 10 ms 69.4 → 69.0, the means 0.3–0.5 % higher. A small gain on this
// plant, whose bursts come every ~90 s; the testbed's came every 20–60 s.
func TestPIDRearmBursts(t *testing.T) {
	const seeds, size = 20, 3.2e9
	avg := func(sp time.Duration, g float64) (steps, mean float64) {
		for s := int64(1); s <= seeds; s++ {
			n, m := burstCopy(t, s, burstPID(t, sp, g), size)
			steps += float64(n) / seeds
			mean += m / seeds
		}
		return
	}
	for _, sp := range []time.Duration{6 * time.Millisecond, 8 * time.Millisecond, 10 * time.Millisecond} {
		s0, m0 := avg(sp, 0)
		s1, m1 := avg(sp, 1.5)
		t.Logf("setpoint %v: rearm to half the peak %.1f steps at %.2f ms; to the held rate %.1f steps at %.2f ms", sp, s0, m0, s1, m1)
		if !(s1 < s0) {
			t.Errorf("setpoint %v: the rearm to the held rate took %.1f steps, without it %.1f: want fewer", sp, s1, s0)
		}
		for _, m := range []float64{m0, m1} {
			if e := m/ms(sp) - 1; math.Abs(e) > 0.05 {
				t.Errorf("setpoint %v: mean %.2f ms is %+.1f%% off: want within ±5%%", sp, m, 100*e)
			}
		}
		if math.Abs(m1/m0-1) > 0.01 {
			t.Errorf("setpoint %v: mean %.2f ms with the rearm against %.2f without: want within 1%%", sp, m1, m0)
		}
	}
}

// After a pause, the rearm climbs by RearmGrowth a step to the rate that
// held the setpoint and stops there; without it, by StartGrowth to half the
// peak.
func TestPIDRearmToHeld(t *testing.T) {
	var lats []time.Duration
	// The slow start grows u once (0.6 → 0.672, the peak) and ends at
	// the first window at the setpoint.
	lats = append(lats, 3*time.Millisecond)
	for range 15 {
		lats = append(lats, 8*time.Millisecond) // at the setpoint: held → the output in force
	}
	for range 12 {
		lats = append(lats, 40*time.Millisecond) // a burst: the law pauses the copy
	}
	for range 14 {
		lats = append(lats, 3*time.Millisecond) // it passed
	}
	run := func(g float64) []float64 {
		us, _ := scriptedPID(t, PIDParams{Setpoint: 8 * time.Millisecond, Initial: 0.6, RearmGrowth: g}, lats)
		return us
	}
	// The first step grows in the slow start, the third after the burst in
	// a rearm; each decision says which.
	if _, d := scriptedPID(t, PIDParams{Setpoint: 8 * time.Millisecond, Initial: 0.6, RearmGrowth: 1.5}, lats[:1]); !strings.HasPrefix(d.Reason, "pid slow start ") {
		t.Errorf("first step's reason %q: want the slow start's", d.Reason)
	}
	if _, d := scriptedPID(t, PIDParams{Setpoint: 8 * time.Millisecond, Initial: 0.6, RearmGrowth: 1.5}, lats[:31]); !strings.HasPrefix(d.Reason, "pid rearm ") {
		t.Errorf("third step after the burst: reason %q, want a rearm's", d.Reason)
	}
	old, rearm := run(0), run(1.5)
	held := old[15] // the output at the setpoint, the same in both runs until the burst
	if old[27] > 0.01 || rearm[27] > 0.01 {
		t.Fatalf("the burst did not pause the copy: u %.3f / %.3f", old[27], rearm[27])
	}
	t.Logf("after the burst, u without rearm growth %.3f, with %.3f (held %.3f, peak/2 %.3f)", old[28:], rearm[28:], held, 0.672/2)
	// The rearm to the held rate gets there within six steps of the
	// burst's end; past it only the law climbs (Ki·e = 0.025 a step at 3
	// ms against 8: the scripted latency does not answer the rate). The
	// old one is still short of it.
	if rearm[33] < held*0.99 {
		t.Errorf("six steps after the burst the rearm is at %.3f: want the held %.3f", rearm[33], held)
	}
	for k := 29; k < len(rearm); k++ {
		if rearm[k-1] >= held && rearm[k]-rearm[k-1] > 0.04*0.625+1e-9 {
			t.Errorf("step %d: past the held %.3f the output grew %.3f → %.3f: more than the law's step", k, held, rearm[k-1], rearm[k])
		}
	}
	if old[33] >= held*0.99 {
		t.Errorf("without rearm growth the output reached %.3f in six steps: the case does not tell the two apart", old[33])
	}
}

// scriptedPID runs a PID with parameters p (the benchmarks' gains, Kp 0.02
// and Ki 0.04, MaxRate 100 MB/s, slow start ×1.12, unless set) over one
// window per second at the latencies lats, and returns its output after
// each step and its last decision.
func scriptedPID(t *testing.T, p PIDParams, lats []time.Duration) ([]float64, Decision) {
	t.Helper()
	if p.MaxRate == 0 {
		p.MaxRate, p.Kp, p.Ki, p.StartGrowth = 100e6, 0.02, 0.04, 1.12
	}
	c, err := NewPID(p)
	if err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 11, 26, 0, 0, 0, 0, time.UTC)
	var us []float64
	var d Decision
	for k, l := range lats {
		d = c.Next(Observation{At: at.Add(time.Duration(k) * time.Second), Signals: []Signal{{Name: "s", Mean: l, Count: 100}}})
		us = append(us, c.u)
	}
	return us, d
}
