package tune

import (
	"errors"
	"math"
	"math/rand"
	"testing"
	"time"
)

func TestFitGainExactAndNoisy(t *testing.T) {
	// latency = 5 ms + 0.2 ms per MB/s.
	rates := []float64{0, 10e6, 20e6, 30e6, 40e6, 50e6}
	lat := make([]float64, len(rates))
	for i, r := range rates {
		lat[i] = 0.005 + 0.2e-3*r/1e6
	}
	G, b, r2, err := FitGain(rates, lat)
	if err != nil {
		t.Fatal(err)
	}
	if math.Abs(G-0.2e-9)/0.2e-9 > 1e-9 || math.Abs(b-0.005) > 1e-12 || math.Abs(r2-1) > 1e-12 {
		t.Fatalf("exact: G=%g b=%g r2=%g", G, b, r2)
	}

	rng := rand.New(rand.NewSource(7))
	for i := range lat {
		lat[i] *= 1 + 0.05*rng.NormFloat64()
	}
	G, _, r2, err = FitGain(rates, lat)
	if err != nil {
		t.Fatal(err)
	}
	if math.Abs(G-0.2e-9)/0.2e-9 > 0.2 || r2 < 0.8 || r2 > 1 {
		t.Fatalf("noisy: G=%g r2=%g", G, r2)
	}
}

func TestFitGainErrors(t *testing.T) {
	for _, tc := range []struct {
		name       string
		rates, lat []float64
		noGain     bool
	}{
		{"mismatch", []float64{1, 2, 3}, []float64{1, 2}, false},
		{"too few", []float64{1, 2}, []float64{1, 2}, false},
		{"one rate", []float64{5, 5, 5}, []float64{1, 2, 3}, false},
		{"nan", []float64{1, math.NaN(), 3}, []float64{1, 2, 3}, false},
		{"negative latency", []float64{1, 2, 3}, []float64{1, -2, 3}, false},
		{"falling", []float64{1, 2, 3}, []float64{3, 2, 1}, true},
		{"flat", []float64{1, 2, 3}, []float64{2, 2, 2}, true},
	} {
		_, _, _, err := FitGain(tc.rates, tc.lat)
		if err == nil {
			t.Errorf("%s: want error", tc.name)
			continue
		}
		if got := errors.Is(err, ErrNoGain); got != tc.noGain {
			t.Errorf("%s: errors.Is(ErrNoGain)=%v, want %v (%v)", tc.name, got, tc.noGain, err)
		}
	}
}

func TestProposeKMatchesAqueduct(t *testing.T) {
	// Aqueduct §5.1 and §6: G=1.12, p=−0.22 → K=1.09; G=1.41, p=0.49 → K=0.36.
	for _, tc := range []struct{ G, p, want float64 }{{1.12, -0.22, 1.09}, {1.41, 0.49, 0.36}} {
		K, err := ProposeK(tc.G, tc.p)
		if err != nil {
			t.Fatal(err)
		}
		if math.Abs(K-tc.want) > 0.005 {
			t.Errorf("G=%v p=%v: K=%.4f, want %.2f", tc.G, tc.p, K, tc.want)
		}
		if !Stable(tc.G, K) || math.Abs(Pole(tc.G, K)-tc.p) > 1e-12 {
			t.Errorf("G=%v K=%v: pole %v stable=%v", tc.G, K, Pole(tc.G, K), Stable(tc.G, K))
		}
	}
	for _, p := range []float64{-1, 1, 1.5, math.NaN()} {
		if _, err := ProposeK(1, p); !errors.Is(err, ErrUnstable) {
			t.Errorf("pole %v: want ErrUnstable, got %v", p, err)
		}
	}
	if _, err := ProposeK(0, 0.5); err == nil || errors.Is(err, ErrUnstable) {
		t.Errorf("G=0: want a gain error, got %v", err)
	}
	if K := KForPole(1, -1.5); Stable(1, K) {
		t.Errorf("forced K=%v for pole −1.5 must be unstable", K)
	}
}

// simulate runs the PIDRadius model for steps and returns the normalised
// error at every step, starting from output 0 with target output uStar.
func simulate(g float64, window int, gains PIDGains, uStar float64, steps int) []float64 {
	us := make([]float64, window) // last window outputs, newest last
	var e1, e2 float64
	out := make([]float64, steps)
	for k := range steps {
		mean := 0.0
		for _, u := range us {
			mean += u
		}
		mean /= float64(window)
		e := g * (uStar - mean) // e = (SP − PV)/SP with PV = base + G·maxRate·mean
		if k == 0 {
			e1, e2 = e, e
		}
		du := gains.Kp*(e-e1) + gains.Ki*e + gains.Kd*(e-2*e1+e2)
		u := us[window-1] + du // unclamped: the model is linear
		us = append(us[1:], u)
		e2, e1 = e1, e
		out[k] = e
	}
	return out
}

func TestPIDRadiusIntegralOnly(t *testing.T) {
	for _, ki := range []float64{0.1, 0.5, 1, 1.5} {
		g := 1.25
		if got, want := PIDRadius(g, 1, 0, ki, 0), math.Abs(1-ki*g); math.Abs(got-want) > 1e-9 {
			t.Errorf("ki=%v: radius %v, want |1−Ki·g| = %v", ki, got, want)
		}
	}
}

func TestProposePIDConverges(t *testing.T) {
	// Plant: 0.5 ms per MB/s, setpoint 40 ms, max 100 MB/s: g = 1.25.
	G := 0.5e-3 / 1e6
	for _, window := range []int{1, 3} {
		p, err := ProposePID(G, 40*time.Millisecond, 100e6, window, 0.6)
		if err != nil {
			t.Fatalf("window %d: %v", window, err)
		}
		if p.Radius > 0.6 || math.Abs(p.NormGain-1.25) > 1e-9 {
			t.Fatalf("window %d: %+v", window, p)
		}
		errs := simulate(p.NormGain, window, p.PIDGains, 0.6, 4*p.SettleSteps+10)
		if last := math.Abs(errs[len(errs)-1]); last > 0.02*math.Abs(errs[0]) {
			t.Errorf("window %d: gains %+v: error %v after %d steps (start %v)", window, p.PIDGains, last, len(errs), errs[0])
		}
		t.Logf("window %d: %+v", window, p)
	}
}

func TestSlackerGainsOnModel(t *testing.T) {
	// Slacker's gains are stable but slow on g = 1.25 (radius near 1), and
	// scaling them up keeping their ratios destabilises the loop.
	g := 1.25
	if r := PIDRadius(g, 3, 0.025, 0.005, 0.015); r >= 1 || r < 0.9 {
		t.Errorf("Slacker's gains: radius %v, want stable and slow (0.9..1)", r)
	}
	if r := PIDRadius(g, 1, 20*0.025, 20*0.005, 20*0.015); r < 1 {
		t.Errorf("20x Slacker's gains: radius %v, want unstable", r)
	}
}

func TestProposePIDErrors(t *testing.T) {
	for _, tc := range []struct {
		name   string
		G      float64
		sp     time.Duration
		max    float64
		window int
		radius float64
	}{
		{"zero gain", 0, time.Second, 1, 1, 0.5},
		{"no setpoint", 1, 0, 1, 1, 0.5},
		{"no max", 1, time.Second, 0, 1, 0.5},
		{"no window", 1, time.Second, 1, 0, 0.5},
		{"radius 1", 1, time.Second, 1, 1, 1},
	} {
		if _, err := ProposePID(tc.G, tc.sp, tc.max, tc.window, tc.radius); err == nil {
			t.Errorf("%s: want error", tc.name)
		}
	}
}

func TestFitQueue(t *testing.T) {
	// L = 4 ms / (1 − r/12.5 MB/s), sampled at low rates only (as a profile
	// that stays clear of the knee would be).
	q0 := Queue{L0: 0.004, Capacity: 12.5e6}
	var rates, lats []float64
	for _, r := range []float64{1.2e6, 2.4e6, 3.6e6, 4.8e6, 6e6} {
		rates = append(rates, r)
		lats = append(lats, q0.Latency(r))
	}
	q, err := FitQueue(rates, lats)
	if err != nil {
		t.Fatal(err)
	}
	if math.Abs(q.L0-q0.L0)/q0.L0 > 1e-9 || math.Abs(q.Capacity-q0.Capacity)/q0.Capacity > 1e-9 || q.R2 < 0.999999 {
		t.Fatalf("fit %+v, want %+v", q, q0)
	}
	sp := 0.030
	if r := q.RateAt(sp); math.Abs(q.Latency(r)-sp) > 1e-12 {
		t.Fatalf("RateAt(%v)=%v gives latency %v", sp, r, q.Latency(r))
	}
	// The local gain at the setpoint is the derivative there, and far above
	// the straight line's slope over the profiled range.
	h := 1e3
	num := (q.Latency(q.RateAt(sp)+h) - q.Latency(q.RateAt(sp)-h)) / (2 * h)
	if math.Abs(q.GainAt(sp)-num)/num > 1e-4 {
		t.Fatalf("GainAt=%v, numeric derivative %v", q.GainAt(sp), num)
	}
	G, _, _, err := FitGain(rates, lats)
	if err != nil {
		t.Fatal(err)
	}
	if q.GainAt(sp) < 10*G {
		t.Fatalf("local gain %v should dwarf the low-rate slope %v near the knee", q.GainAt(sp), G)
	}
	if q.RateAt(q0.L0/2) != 0 || !math.IsInf(q.Latency(2*q.Capacity), 1) {
		t.Fatal("RateAt below L0 must be 0 and Latency beyond capacity +Inf")
	}
	for _, tc := range []struct {
		name       string
		rates, lat []float64
		noGain     bool
	}{
		{"zero latency", []float64{1, 2, 3}, []float64{1, 0, 3}, false},
		{"negative rate", []float64{-1, 2, 3}, []float64{1, 2, 3}, false},
		{"too few", []float64{1, 2}, []float64{1, 2}, false},
		{"falling latency", []float64{1, 2, 3}, []float64{3, 2, 1}, true},
	} {
		_, err := FitQueue(tc.rates, tc.lat)
		if err == nil || errors.Is(err, ErrNoGain) != tc.noGain {
			t.Errorf("%s: err=%v, want error (ErrNoGain=%v)", tc.name, err, tc.noGain)
		}
	}
}

func TestRecommend(t *testing.T) {
	// A queueing plant profiled at low rates: the queue model wins and the
	// design is made at the setpoint's local gain.
	q0 := Queue{L0: 0.004, Capacity: 12.5e6}
	var rates, lats []float64
	for _, r := range []float64{1.2e6, 2.4e6, 3.6e6, 4.8e6, 6e6, 7.2e6} {
		rates = append(rates, r)
		lats = append(lats, q0.Latency(r))
	}
	rec, err := Recommend(rates, lats, 30*time.Millisecond, 12e6, 3, 0.5, 0.6)
	if err != nil {
		t.Fatal(err)
	}
	if rec.Model != "queue" {
		t.Fatalf("model %q, want queue", rec.Model)
	}
	if math.Abs(rec.Gain-q0.GainAt(0.03))/q0.GainAt(0.03) > 1e-6 || math.Abs(rec.RateAtSetpoint-q0.RateAt(0.03)) > 1 {
		t.Fatalf("gain %v rate %v", rec.Gain, rec.RateAtSetpoint)
	}
	if math.Abs(Pole(rec.Gain, rec.K)-0.5) > 1e-9 || rec.PID.Radius > 0.6 {
		t.Fatalf("K %v (pole %v), PID %+v", rec.K, Pole(rec.Gain, rec.K), rec.PID)
	}
	if len(rec.Warnings) != 1 { // 30 ms is 2.6x the highest profiled 12.2 ms
		t.Fatalf("warnings %q", rec.Warnings)
	}

	// A straight plant: the line wins.
	lats = lats[:0]
	for _, r := range rates {
		lats = append(lats, 0.005+0.5e-9*r)
	}
	rec, err = Recommend(rates, lats, 8*time.Millisecond, 12e6, 1, 0, 0.6)
	if err != nil {
		t.Fatal(err)
	}
	if rec.Model != "line" || math.Abs(rec.Gain-0.5e-9) > 1e-15 {
		t.Fatalf("%+v", rec)
	}

	// Setpoint under the idle latency: refused.
	if _, err := Recommend(rates, lats, 4*time.Millisecond, 12e6, 1, 0, 0.6); !errors.Is(err, ErrSetpointTooLow) {
		t.Fatalf("want ErrSetpointTooLow, got %v", err)
	}
	// Flat latency: no gain.
	if _, err := Recommend(rates, []float64{5e-3, 5e-3, 5e-3, 5e-3, 5e-3, 5e-3}, 8*time.Millisecond, 12e6, 1, 0, 0.6); !errors.Is(err, ErrNoGain) {
		t.Fatalf("want ErrNoGain, got %v", err)
	}
	// Unstable pole: refused.
	if _, err := Recommend(rates, lats, 8*time.Millisecond, 12e6, 1, 1.2, 0.6); !errors.Is(err, ErrUnstable) {
		t.Fatalf("want ErrUnstable, got %v", err)
	}
}
