package control

import (
	"math/rand"
	"strings"
	"testing"
	"time"
)

// stallCopy runs a PID with the bench's settings (Kp 0.02, Ki 0.04, slow
// start ×1.12, mean horizon 20) and error floor floor, copying 6000 MB over
// a queueing plant like the testbed's on a calm day (1.5 ms at rest, 120
// MB/s capacity, 10 % noise) seen through a 3 s window, where in a share
// stallP of the steps every transaction waits stallLat more whatever the
// rate. It returns the steps the copy took and the mean latency of those
// steps, ms (the clients' view: each step's own latency, not the window's).
func stallCopy(t *testing.T, seed int64, floor, stallP float64, stallLat time.Duration, sp time.Duration) (steps int, meanMs float64) {
	t.Helper()
	p := &linearPlant{base: []time.Duration{1500 * time.Microsecond}, gain: []float64{0}, cap: []float64{120e6}, noise: 0.1,
		rng: rand.New(rand.NewSource(seed)), stallP: stallP, stallLat: stallLat, stallRng: rand.New(rand.NewSource(seed + 1))}
	c, err := NewPID(PIDParams{Setpoint: sp, MaxRate: 160e6, Kp: 0.02, Ki: 0.04, Initial: 0.25,
		StartGrowth: 1.12, MeanHorizon: 20, ErrorFloor: floor})
	if err != nil {
		t.Fatal(err)
	}
	rate := 0.25 * 160e6
	return windowedCopy(t, c, 6000e6, rate, p.latency(0, rate)[0], func(k int, r float64) time.Duration { return p.latency(k, r)[0] })
}

// windowedCopy copies size bytes under controller c, one step a second:
// step k moves the rate decided at the step before (rate0 at the first),
// the controller sees the mean latency of the last 3 steps (a 3 s window)
// and the time the copy has left at that rate, and latency(k, r) is step
// k's latency after the controller decided rate r (lat0 is step 0's). It
// returns the steps the copy took and the mean of those steps' own
// latencies, ms (the clients' view, not the window's).
func windowedCopy(t *testing.T, c Controller, size, rate0 float64, lat0 time.Duration, latency func(k int, r float64) time.Duration) (steps int, meanMs float64) {
	t.Helper()
	moved, rate, lat := 0.0, rate0, lat0
	var hist []time.Duration
	var sum float64
	at := time.Date(2026, 11, 24, 0, 0, 0, 0, time.UTC)
	for k := 0; moved < size; k++ {
		if k == 5000 {
			t.Fatalf("%s: the copy did not end in %d steps", c.Name(), k)
		}
		moved += rate
		hist = append(hist, lat)
		if len(hist) > 3 {
			hist = hist[1:]
		}
		var seen time.Duration
		for _, h := range hist {
			seen += h / time.Duration(len(hist))
		}
		obs := Observation{At: at.Add(time.Duration(k) * time.Second), Signals: []Signal{{Name: "s", Mean: seen, Count: 100}}}
		if rate > 0 {
			obs.Remaining = time.Duration(max(0, size-moved) / rate * float64(time.Second))
		}
		rate = c.Next(obs).Rate
		sum += ms(lat)
		steps++
		lat = latency(k+1, rate)
	}
	return steps, sum / float64(steps)
}

// The error floor on a plant with stalls no speed causes, over 30 seeds: the
// copy ends sooner, and the clients' mean rises a little, since the law no
// longer answers the stalls in full (the mean contract still owes them). Is
// it more than a higher latency bought? Without a floor, the loop reaches
// the floor's mean latency only at a higher setpoint, and there it still
// takes more steps. Without stalls the floor never binds and changes
// nothing.
func TestPIDErrorFloorStalls(t *testing.T) {
	const seeds = 30
	sp := 4 * time.Millisecond
	run := func(floor, stallP float64, sp time.Duration) (steps, mean float64) {
		for seed := int64(1); seed <= seeds; seed++ {
			n, m := stallCopy(t, seed, floor, stallP, 20*time.Millisecond, sp)
			steps += float64(n) / seeds
			mean += m / seeds
		}
		return steps, mean
	}
	s0, m0 := run(0, 0, sp)
	s1, m1 := run(1, 0, sp)
	if s0 != s1 || m0 != m1 {
		t.Errorf("no stalls: floor 1 changed the run: %.1f steps at %.3f ms against %.1f at %.3f", s1, m1, s0, m0)
	}
	s0, m0 = run(0, 0.08, sp)
	s1, m1 = run(1, 0.08, sp)
	t.Logf("stalls in 8%% of steps: floor 0: %.1f steps at %.2f ms; floor 1: %.1f steps at %.2f ms (setpoint %v)", s0, m0, s1, m1, sp)
	if !(s1 < 0.95*s0) {
		t.Errorf("floor 1 took %.1f steps against %.1f without: want at least 5%% fewer", s1, s0)
	}
	for _, m := range []float64{m0, m1} {
		if e := m/ms(sp) - 1; e < -0.1 || e > 0.1 {
			t.Errorf("mean latency %.2f ms is %+.1f%% off the %v setpoint: want within ±10%%", m, 100*e, sp)
		}
	}
	// Without the floor, raise the setpoint until the mean is the floor's.
	for sp0 := sp; ; sp0 += 50 * time.Microsecond {
		if sp0 > 2*sp {
			t.Fatalf("floor 0 never reached the floor's mean %.2f ms up to a %v setpoint", m1, sp0)
		}
		s, m := run(0, 0.08, sp0)
		if m < m1 {
			continue
		}
		t.Logf("floor 0 at setpoint %v: %.1f steps at %.2f ms", sp0, s, m)
		if !(s > s1) {
			t.Errorf("at a latency no lower (%.2f ms against %.2f), floor 0 took %.1f steps, floor 1 %.1f: want more", m, m1, s, s1)
		}
		break
	}
}

// TestPIDHeadroomOnlyWhenShort: the headroom changes nothing while the copy
// moves what it is allowed (within TrackSlack) or is not measured; when it
// falls short, the output is held to (1 + Headroom) × what moved.
func TestPIDHeadroomOnlyWhenShort(t *testing.T) {
	mk := func(h float64) *PID {
		c, err := NewPID(PIDParams{Setpoint: 4 * time.Millisecond, MaxRate: 100e6, Kp: 0.02, Ki: 0.04, Initial: 0.05, Headroom: h})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	at := time.Date(2026, 11, 24, 0, 0, 0, 0, time.UTC)
	obs := func(k int, lat time.Duration, moved float64) Observation {
		return Observation{At: at.Add(time.Duration(k) * time.Second), Signals: []Signal{{Name: "s", Mean: lat, Count: 100}}, Moved: moved}
	}
	plain, head := mk(0), mk(0.25)
	// At 0.5 ms the law raises a small output by more than 25 % a step, so
	// a headroom applied regardless would bind.
	for k, lat := range []time.Duration{500 * time.Microsecond, 500 * time.Microsecond, 500 * time.Microsecond, 6 * time.Millisecond} {
		// Moved: unknown, then what was allowed, then 85 % of it.
		moved := []float64{0, 1, 0.85, 0.85}[k] * plain.u * 100e6
		if (k == 1 || k == 2) && !(plain.u+0.04*0.875 > 1.25*moved/100e6) {
			t.Fatalf("step %d: the law's step from %v stays under 1.25 × what moved: the case tests nothing", k, plain.u)
		}
		a, b := plain.Next(obs(k, lat, moved)), head.Next(obs(k, lat, moved))
		if a.Rate != b.Rate {
			t.Errorf("step %d (moved %.0f of %.0f B/s): rate %v with headroom, %v without", k, moved, a.Rate, b.Rate, a.Rate)
		}
	}
	// The copy moves 30 MB/s of the 100 allowed: the output is held to 37.5.
	c := mk(0.25)
	c.u = 1
	if d := c.Next(obs(0, time.Millisecond, 30e6)); d.Rate != 37.5e6 || !strings.Contains(d.Reason, "moved=30.0MB/s") {
		t.Errorf("copy bound at 30 MB/s: rate %v (%s), want 37.5e6 and the reason naming what moved", d.Rate, d.Reason)
	}
}
