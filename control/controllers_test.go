package control

import (
	"errors"
	"math"
	"math/rand"
	"strings"
	"testing"
	"time"

	"github.com/sluicedb/sluice/control/tune"
)

// steadyRun closes the loop of c around a linear plant (latency = base +
// G·rate, seen through a moving-average window of `window` steps, with
// relative Gaussian noise) for steps and returns the mean latency of the
// last quarter, in seconds.
func steadyRun(c Controller, initRate float64, base time.Duration, G float64, window, steps int, noise float64, seed int64) float64 {
	rng := rand.New(rand.NewSource(seed))
	rate := initRate
	var hist []float64
	var sum float64
	var n int
	at := time.Unix(0, 0)
	for k := range steps {
		l := (base.Seconds() + G*rate) * (1 + noise*rng.NormFloat64())
		hist = append(hist, l)
		if len(hist) > window {
			hist = hist[1:]
		}
		seen := 0.0
		for _, h := range hist {
			seen += h / float64(len(hist))
		}
		if k >= steps*3/4 {
			sum += l
			n++
		}
		d := c.Next(Observation{At: at.Add(time.Duration(k) * time.Second), Signals: []Signal{
			{Name: "src", Mean: time.Duration(seen * float64(time.Second)), Count: 10},
			{Name: "dst", Mean: time.Duration(seen * 0.5 * float64(time.Second)), Count: 10},
		}})
		rate = d.Rate
	}
	return sum / float64(n)
}

// TestPIDHoldsSetpointOnSteadyPlants checks the goal: mean latency
// within ±5% of the setpoint on a steady plant, with Slacker's default gains
// (given time) and with control/tune's gains, with and without noise and a
// 3-step window.
func TestPIDHoldsSetpointOnSteadyPlants(t *testing.T) {
	const maxRate = 100e6
	for _, tc := range []struct {
		name     string
		sp, base time.Duration
		G        float64 // s per byte/s
		window   int
		noise    float64
		slacker  bool
		steps    int
	}{
		{"slacker gains, window 1", 40 * time.Millisecond, 10 * time.Millisecond, 0.5e-9, 1, 0, true, 2000},
		{"slacker gains, window 3, noise", 40 * time.Millisecond, 10 * time.Millisecond, 0.5e-9, 3, 0.05, true, 2000},
		{"tuned, window 1, noise", 40 * time.Millisecond, 10 * time.Millisecond, 0.5e-9, 1, 0.05, false, 400},
		{"tuned, window 3, noise", 40 * time.Millisecond, 10 * time.Millisecond, 0.5e-9, 3, 0.05, false, 400},
		{"tuned, stiff plant", 200 * time.Millisecond, 150 * time.Millisecond, 2e-9, 3, 0.05, false, 400},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := slackerParams()
			p.Setpoint, p.MaxRate = tc.sp, maxRate
			if !tc.slacker {
				pr, err := tune.ProposePID(tc.G, tc.sp, maxRate, tc.window, 0.6)
				if err != nil {
					t.Fatal(err)
				}
				p.Kp, p.Ki, p.Kd = pr.Kp, pr.Ki, pr.Kd
			}
			c, err := NewPID(p)
			if err != nil {
				t.Fatal(err)
			}
			mean := steadyRun(c, p.Initial*maxRate, tc.base, tc.G, tc.window, tc.steps, tc.noise, 1)
			if dev := (mean - tc.sp.Seconds()) / tc.sp.Seconds(); math.Abs(dev) > 0.05 {
				t.Fatalf("mean latency %.2fms, setpoint %v: %+.1f%% (want within ±5%%)", mean*1e3, tc.sp, 100*dev)
			}
		})
	}
}

// TestNoDataNeverSpeedsUp feeds every controller random observations with
// missing data mixed in: a step without data must hold both rates exactly
// and say so.
func TestNoDataNeverSpeedsUp(t *testing.T) {
	rng := rand.New(rand.NewSource(42))
	pp := slackerParams()
	pp.Setpoint, pp.MaxRate = 40*time.Millisecond, 100e6
	pid, _ := NewPID(pp)
	ip := DefaultIntegralParams()
	ip.MaxRate, ip.K = 100e6, HeuristicIntegralK(100e6, 10*time.Millisecond)
	integ, _ := NewIntegral(ip)
	fp := DefaultInterferenceParams()
	fp.MaxRate = 100e6
	inter, _ := NewInterference(fp)
	for _, c := range []Controller{pid, integ, inter} {
		prev, started := Decision{}, false
		for k := range 2000 {
			obs := Observation{At: time.Unix(int64(k), 0)}
			noData := rng.Intn(4) == 0
			for i := range 1 + rng.Intn(4) {
				s := Signal{Name: "s", Mean: time.Duration(1+rng.Intn(60)) * time.Millisecond, Count: 5}
				if noData && i == 0 {
					switch rng.Intn(3) {
					case 0:
						s.Err = errors.New("timeout")
					case 1:
						s.Mean = 0
					default:
						s.Mean = -time.Millisecond
					}
				}
				obs.Signals = append(obs.Signals, s)
			}
			h := HostIO{IOPS: 10 + rng.Float64()*3000, Util: rng.Float64(), Throughput: rng.Float64() * 200e6}
			h.IOTicks = h.Util * 1000
			if noData && c == Controller(inter) {
				if rng.Intn(2) == 0 {
					h.Err = errors.New("diskstats")
					obs.Host = &h
				}
			} else {
				obs.Host = &h
			}
			d := c.Next(obs)
			if noData && started {
				if !d.Hold || d.Rate != prev.Rate || d.Prefetch != prev.Prefetch {
					t.Fatalf("%s step %d: no data gave %+v after %+v", c.Name(), k, d, prev)
				}
			}
			if !noData && d.Hold {
				t.Fatalf("%s step %d: held with data: %+v", c.Name(), k, d)
			}
			if d.Rate < 0 || d.Rate > 100e6 || d.Prefetch < 0 || d.Prefetch > 2*100e6 {
				t.Fatalf("%s step %d: rates out of range: %+v", c.Name(), k, d)
			}
			prev, started = d, true
		}
	}
}

// TestInterferenceLockCountsExact checks the lock/unlock hysteresis against a
// dumb reference over random sequences, for several N and M.
func TestInterferenceLockCountsExact(t *testing.T) {
	calm := HostIO{IOPS: 50, Util: 0.1, IOTicks: 100, Throughput: 1 << 20}   // p ≈ 0.03
	mid := HostIO{IOPS: 150, Util: 0.6, IOTicks: 600, Throughput: 20 << 20}  // p ≈ 0.36
	busy := HostIO{IOPS: 200, Util: 1, IOTicks: 1000, Throughput: 100 << 20} // p ≈ 0.98
	states := []*HostIO{&calm, &mid, &busy, nil}
	rng := rand.New(rand.NewSource(7))
	for n := 1; n <= 4; n++ {
		for m := 1; m <= 4; m++ {
			p := DefaultInterferenceParams()
			p.MaxRate, p.LockAfter, p.UnlockAfter, p.MaxLocked = 100e6, n, m, []int{0, 7}[(n+m)%2]
			c, err := NewInterference(p)
			if err != nil {
				t.Fatal(err)
			}
			locked, above, below, lockedSteps := false, 0, 0, 0
			for k := range 3000 {
				h := states[rng.Intn(len(states))]
				// Reference: consecutive counts; a missing step counts nothing.
				if h != nil {
					switch *h {
					case busy:
						above, below = above+1, 0
					case calm:
						above, below = 0, below+1
					default:
						above, below = 0, 0
					}
					if !locked && above == n {
						locked, lockedSteps = true, 0
					} else if locked && below == m {
						locked = false
					} else if locked && p.MaxLocked > 0 && lockedSteps == p.MaxLocked {
						locked, above = false, 0
					}
					if locked {
						lockedSteps++
					}
				}
				d := c.Next(Observation{At: time.Unix(int64(k), 0), Host: h})
				if c.Locked() != locked {
					t.Fatalf("N=%d M=%d step %d: locked=%v, reference %v", n, m, k, c.Locked(), locked)
				}
				if locked && d.Prefetch != 0 {
					t.Fatalf("N=%d M=%d step %d: prefetch %v while locked", n, m, k, d.Prefetch)
				}
				if !locked && d.Rate != min(p.MaxRate, d.Prefetch) {
					t.Fatalf("N=%d M=%d step %d: prefetch %v, rate %v while unlocked", n, m, k, d.Prefetch, d.Rate)
				}
			}
		}
	}
}

// TestDeterministic checks that the same observations give the same decisions.
func TestDeterministic(t *testing.T) {
	run := func() []Decision {
		p := DefaultInterferenceParams()
		p.MaxRate = 50e6
		c, _ := NewInterference(p)
		rng := rand.New(rand.NewSource(3))
		var out []Decision
		for k := range 500 {
			h := HostIO{IOPS: 10 + rng.Float64()*500, Util: rng.Float64(), Throughput: rng.Float64() * 200e6}
			out = append(out, c.Next(Observation{At: time.Unix(int64(k), 0), Host: &h}))
		}
		return out
	}
	a, b := run(), run()
	for i := range a {
		if a[i] != b[i] {
			t.Fatalf("step %d: %+v vs %+v", i, a[i], b[i])
		}
	}
}

func TestParamsValidate(t *testing.T) {
	okPID := slackerParams()
	okPID.Setpoint, okPID.MaxRate = time.Second, 1
	okInt := DefaultIntegralParams()
	okInt.MaxRate, okInt.K = 1, 1
	okInter := DefaultInterferenceParams()
	okInter.MaxRate = 1
	for _, tc := range []struct {
		name string
		err  error
		bad  bool
	}{
		{"pid ok", okPID.Validate(), false},
		{"pid default needs setpoint", slackerParams().Validate(), true},
		{"pid negative kd", func() error { p := okPID; p.Kd = -1; return p.Validate() }(), true},
		{"pid initial > 1", func() error { p := okPID; p.Initial = 1.5; return p.Validate() }(), true},
		{"pid NaN max", func() error { p := okPID; p.MaxRate = math.NaN(); return p.Validate() }(), true},
		{"pid rearm without slow start", func() error { p := okPID; p.RearmGrowth = 1.5; return p.Validate() }(), true},
		{"pid rearm with slow start", func() error { p := okPID; p.StartGrowth, p.RearmGrowth = 1.12, 1.5; return p.Validate() }(), false},
		{"pid rearm > 4", func() error { p := okPID; p.StartGrowth, p.RearmGrowth = 1.12, 5; return p.Validate() }(), true},
		{"pid backoff without slow start", func() error { p := okPID; p.StartBackoff = 3; return p.Validate() }(), true},
		{"pid backoff with slow start", func() error { p := okPID; p.StartGrowth, p.StartBackoff = 1.12, 3; return p.Validate() }(), false},
		{"pid backoff > max", func() error { p := okPID; p.StartGrowth, p.StartBackoff = 1.12, MaxStartBackoff+1; return p.Validate() }(), true},
		{"pid idle floor 0.5", func() error { p := okPID; p.IdleFloor = 0.5; return p.Validate() }(), false},
		{"pid idle floor 1", func() error { p := okPID; p.IdleFloor = 1; return p.Validate() }(), true},
		{"pid idle floor NaN", func() error { p := okPID; p.IdleFloor = math.NaN(); return p.Validate() }(), true},
		{"pid backoff < 0", func() error { p := okPID; p.StartGrowth, p.StartBackoff = 1.12, -1; return p.Validate() }(), true},
		{"integral ok", okInt.Validate(), false},
		{"integral default needs K", DefaultIntegralParams().Validate(), true},
		{"integral P > 1", func() error { p := okInt; p.P = 1.2; return p.Validate() }(), true},
		{"integral initial > max", func() error { p := okInt; p.Initial = 2; return p.Validate() }(), true},
		{"integral no contract", func() error { p := okInt; p.DefaultContract = 0; return p.Validate() }(), true},
		{"interference ok", okInter.Validate(), false},
		{"interference default needs max", DefaultInterferenceParams().Validate(), true},
		{"interference low >= high", func() error { p := okInter; p.Low = 0.6; return p.Validate() }(), true},
		{"interference lock 0", func() error { p := okInter; p.LockAfter = 0; return p.Validate() }(), true},
		{"interference factor < 1", func() error { p := okInter; p.PrefetchFactor = 0.5; return p.Validate() }(), true},
		{"interference NaN model", func() error { p := okInter; p.Model.Coef[0] = math.NaN(); return p.Validate() }(), true},
	} {
		if (tc.err != nil) != tc.bad {
			t.Errorf("%s: err=%v, want error=%v", tc.name, tc.err, tc.bad)
		}
	}
	lit := PIDParams{Setpoint: time.Second, MaxRate: 1, Ki: 0.1} // zero Stat and Error mean the defaults
	if err := lit.Validate(); err != nil {
		t.Errorf("literal params with zero Stat/Error: %v", err)
	}
	if _, err := NewFixed(math.Inf(1)); err == nil {
		t.Error("NewFixed(+Inf): want error")
	}
}

func TestDefaultModelReading(t *testing.T) {
	m := DefaultModel()
	calm := HostIO{IOPS: 50, Util: 0.1, IOTicks: 100, Throughput: 1 << 20}
	seq := HostIO{IOPS: 200, Util: 1, IOTicks: 1000, Throughput: 100 << 20}
	small := HostIO{IOPS: 2000, Util: 1, IOTicks: 1000, Throughput: 20 << 20}
	if p := m.Prob(calm); p > 0.15 {
		t.Errorf("calm disk: p=%v, want < 0.15", p)
	}
	if p := m.Prob(seq); p < 0.5 {
		t.Errorf("disk saturated by few large ops: p=%v, want > 0.5", p)
	}
	if p := m.Prob(small); p > 0.15 {
		t.Errorf("disk saturated by many small ops: p=%v, want < 0.15", p)
	}
	// More busy time at the same IOPS and throughput never lowers p.
	prev := -1.0
	for u := 0.0; u <= 1; u += 0.05 {
		h := seq
		h.Util, h.IOTicks = u, u*1000
		p := m.Prob(h)
		if p < prev {
			t.Fatalf("p fell from %v to %v as utilisation rose to %v", prev, p, u)
		}
		prev = p
	}
	// An idle disk has finite features.
	if p := m.Prob(HostIO{}); math.IsNaN(p) {
		t.Fatal("idle disk: NaN probability")
	}
}

func TestFitRecoversModel(t *testing.T) {
	rng := rand.New(rand.NewSource(11))
	truth := DefaultModel()
	hosts := syntheticHosts(rng, 3000)
	samples := make([]Sample, len(hosts))
	for i, h := range hosts {
		samples[i] = Sample{IO: h, Interfering: rng.Float64() < truth.Prob(h)}
	}
	m, rep, err := Fit(samples, 5, 11)
	if err != nil {
		t.Fatal(err)
	}
	best, _ := score(truth, samples)
	if rep.MeanAccuracy < best-0.03 {
		t.Errorf("cv accuracy %.3f, true model %.3f", rep.MeanAccuracy, best)
	}
	if len(rep.Accuracy) != 5 || rep.Iterations == 0 || rep.Iterations > FitMaxIterations {
		t.Errorf("report %+v", rep)
	}
	agree := 0
	fresh := syntheticHosts(rand.New(rand.NewSource(12)), 2000)
	for _, h := range fresh {
		if (m.Prob(h) >= 0.5) == (truth.Prob(h) >= 0.5) {
			agree++
		}
	}
	if agree < 1800 {
		t.Errorf("fitted and true model agree on %d/2000 fresh hosts, want >= 90%%", agree)
	}
	// A label-free feature (pure noise labels) gives chance-level CV accuracy:
	// the CV is not reporting training accuracy.
	for i := range samples {
		samples[i].Interfering = rng.Intn(2) == 0
	}
	_, rep, err = Fit(samples, 5, 11)
	if err != nil {
		t.Fatal(err)
	}
	if rep.MeanAccuracy > 0.6 {
		t.Errorf("random labels: cv accuracy %.3f, want near 0.5", rep.MeanAccuracy)
	}
}

func TestFitErrors(t *testing.T) {
	good := []Sample{}
	for i := range 20 {
		good = append(good, Sample{IO: HostIO{IOPS: float64(10 + i), Util: float64(i) / 20}, Interfering: i%2 == 0})
	}
	if _, _, err := Fit(good, 1, 1); err == nil {
		t.Error("1 fold: want error")
	}
	if _, _, err := Fit(good, 11, 1); err == nil {
		t.Error("11 folds with 10 per class: want error")
	}
	bad := append([]Sample{{IO: HostIO{Err: errors.New("x")}}}, good...)
	if _, _, err := Fit(bad, 2, 1); err == nil {
		t.Error("sample with error: want error")
	}
	nan := append([]Sample{{IO: HostIO{IOPS: math.NaN()}}}, good...)
	if _, _, err := Fit(nan, 2, 1); err == nil {
		t.Error("NaN sample: want error")
	}
	neg := append([]Sample{{IO: HostIO{IOPS: 5, Util: -0.5}}}, good...)
	if _, _, err := Fit(neg, 2, 1); err == nil {
		t.Error("negative utilisation: want error")
	}
	if _, _, err := Fit(good, 2, 1); err != nil {
		t.Errorf("good: %v", err)
	}
}

func TestInterferenceRejectsImpossibleHostIO(t *testing.T) {
	p := DefaultInterferenceParams()
	p.MaxRate = 100e6
	c, _ := NewInterference(p)
	calm := HostIO{IOPS: 50, Util: 0.1, IOTicks: 100, Throughput: 1 << 20}
	first := c.Next(Observation{Host: &calm})
	for _, h := range []HostIO{
		{IOPS: math.NaN(), Util: 0.1},
		{IOPS: 50, Util: math.Inf(1)},
		{IOPS: -1, Util: 0.1},
		{IOPS: 50, Throughput: math.NaN()},
	} {
		d := c.Next(Observation{Host: &h})
		if !d.Hold || d.Rate != first.Rate || d.Prefetch != first.Prefetch || !strings.Contains(d.Reason, "out of range") {
			t.Fatalf("host %+v: %+v, want a hold at %+v", h, d, first)
		}
	}
	if d := c.Next(Observation{Host: &calm}); d.Hold || math.IsNaN(d.Rate) || d.Prefetch <= first.Prefetch {
		t.Fatalf("after bad figures: %+v", d)
	}
}

// TestPIDVelocityEqualsPositional checks the velocity form against the
// textbook positional PID while the output stays inside its clamps:
// u(k) = u(0) + Kp(e(k) − e(0)) + Ki·Σ_{j=1..k} e(j) + Kd((e(k) − e(k−1)) − 0).
func TestPIDVelocityEqualsPositional(t *testing.T) {
	p := slackerParams()
	p.Setpoint, p.MaxRate, p.Kp, p.Ki, p.Kd, p.Initial = 40*time.Millisecond, 1, 0.01, 0.002, 0.005, 0.5
	c, _ := NewPID(p)
	rng := rand.New(rand.NewSource(9))
	var es []float64
	for k := range 300 {
		l := time.Duration(30+rng.Intn(20)) * time.Millisecond
		d := c.Next(Observation{At: time.Unix(int64(k), 0), Signals: []Signal{{Mean: l}}})
		e := (40 - float64(l/time.Millisecond)) / 40
		es = append(es, e)
		sum := 0.0
		for _, x := range es[1:] {
			sum += x
		}
		deriv := 0.0
		if k > 0 {
			deriv = es[k] - es[k-1]
		}
		// The first step primes e(−1) = e(−2) = e(0): its integral term
		// Ki·e(0) is the only one the positional sum starts without.
		want := 0.5 + p.Kp*(es[k]-es[0]) + p.Ki*(sum+es[0]) + p.Kd*deriv
		if want <= 0 || want >= 1 {
			t.Fatalf("step %d: reference left the clamps (%v): pick other numbers", k, want)
		}
		if math.Abs(d.Rate-want) > 1e-9 {
			t.Fatalf("step %d: velocity %v, positional %v", k, d.Rate, want)
		}
	}
}

func TestLabelByLatency(t *testing.T) {
	h := HostIO{IOPS: 100, Util: 0.5, IOTicks: 500, Throughput: 1e6}
	bad := HostIO{IOPS: math.NaN()}
	failed := HostIO{Err: errors.New("x")}
	sig := func(ms ...int) []Signal {
		var out []Signal
		for _, m := range ms {
			out = append(out, Signal{Mean: time.Duration(m) * time.Millisecond})
		}
		return out
	}
	obs := []Observation{
		{Host: &h, Signals: sig(10, 40)},                      // worst 40 > 30: interfering
		{Host: &h, Signals: sig(10, 20)},                      // calm
		{Host: &h, Signals: sig(30)},                          // at the threshold: calm
		{Host: nil, Signals: sig(50)},                         // no host: skipped
		{Host: &bad, Signals: sig(50)},                        // impossible host: skipped
		{Host: &failed, Signals: sig(50)},                     // failed host: skipped
		{Host: &h, Signals: []Signal{{Err: errors.New("x")}}}, // no latency: skipped
	}
	got := LabelByLatency(obs, StatMean, 30*time.Millisecond)
	if len(got) != 3 || !got[0].Interfering || got[1].Interfering || got[2].Interfering {
		t.Fatalf("got %+v", got)
	}
}
