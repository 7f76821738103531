package control

import (
	"errors"
	"math"
	"testing"
	"time"
)

// gov is a test harness around a Governor: step k happens at t0 + k s with
// the stage, copy bytes and lag the test's functions report, and the
// latency its obs function gives.
type gov struct {
	g     *Governor
	rates []float64 // the rate decided at every step
}

var t0 = time.Unix(1000, 0)

func (h *gov) step(k int, stage Stage, bytes, lag int64, sig ...Signal) Decision {
	d := h.g.Next(Observation{At: t0.Add(time.Duration(k) * time.Second), Signals: sig, Stage: stage, Bytes: bytes, Lag: lag})
	h.rates = append(h.rates, d.Rate)
	return d
}

// scripted is a test controller: rate = 1e6 × (number of signals with data),
// hold when none has data; it records what it was shown.
type scripted struct {
	last     float64
	settling []bool     // Observation.Settling of every step
	seen     [][]Signal // Observation.Signals of every step
}

func (s *scripted) Name() string     { return "scripted" }
func (s *scripted) Initial() float64 { return 0 }
func (s *scripted) Next(obs Observation) Decision {
	s.settling = append(s.settling, obs.Settling)
	s.seen = append(s.seen, obs.Signals)
	n := 0
	for _, sg := range obs.Signals {
		if sg.Err == nil {
			n++
		}
	}
	if n == 0 {
		return Decision{Rate: s.last, Prefetch: s.last, Hold: true, Reason: "no data"}
	}
	s.last = float64(n) * 1e6
	return Decision{Rate: s.last, Prefetch: 2 * s.last}
}

// rateScript decides the rates of its script, one a step (then the last).
type rateScript struct {
	rates []float64
	k     int
}

func (r *rateScript) Name() string     { return "rate-script" }
func (r *rateScript) Initial() float64 { return r.rates[0] }
func (r *rateScript) Next(Observation) Decision {
	x := r.rates[min(r.k, len(r.rates)-1)]
	r.k++
	return Decision{Rate: x, Prefetch: x}
}

// testCatchUp is the catch-up floor the tests assume (the default
// profile's).
var testCatchUp = DefaultProfile().CatchUp

const mib = 1 << 20

var errProbe = errors.New("probe timed out")

// TestGovernorSettle: with Settle, the controller sees no data while no byte
// has moved and for Settle after the first step that saw bytes; later
// stages that report no bytes of their own do not settle again. Settling
// signals keep their measurement, and a signal's own failure stays.
func TestGovernorSettle(t *testing.T) {
	bytesAt := []int64{0, 0, 100, 200, 300, 400, 500, 0, 0, 0, 700}
	stages := []Stage{StageCopy, StageCopy, StageCopy, StageCopy, StageCopy, StageCopy, StageCopy, StageCatchUp, StageCatchUp, StageCatchUp, StageCatchUp}
	ctl := &scripted{}
	h := gov{g: NewGovernor(ctl, GovernorParams{Settle: 2 * time.Second, CatchUp: testCatchUp})}
	var holds []bool
	for k := range bytesAt {
		sig := []Signal{{Name: "src", Mean: 30 * time.Millisecond}}
		if k == 1 {
			sig = append(sig, Signal{Name: "dst", Err: errProbe})
		}
		holds = append(holds, h.step(k, stages[k], bytesAt[k], -1, sig...).Hold)
	}
	// The copy starts at step 2: steps 0-3 settle (2 s after step 2).
	for k, hold := range holds {
		if want := k < 4; hold != want || ctl.settling[k] != want {
			t.Errorf("step %d (bytes %d): hold %v, Settling %v; want %v", k, bytesAt[k], hold, ctl.settling[k], want)
		}
	}
	if r := h.rates[len(h.rates)-1]; r != 1e6 {
		t.Errorf("after settling the controller set %v, want 1e6", r)
	}
	seen := ctl.seen[1]
	if len(seen) != 2 || seen[0].Err != ErrSettling || seen[0].Mean != 30*time.Millisecond || seen[1].Err != errProbe {
		t.Errorf("settling step's signals: %+v, want src marked ErrSettling with its 30 ms, dst with its own error", seen)
	}
	// No settling for a controller that does not steer by latency.
	ctl = &scripted{}
	h = gov{g: NewGovernor(ctl, GovernorParams{CatchUp: testCatchUp})}
	h.step(0, StageCopy, 0, -1, Signal{Name: "src", Mean: time.Millisecond})
	if ctl.settling[0] {
		t.Error("Settle 0: a step was marked settling")
	}
}

// TestCatchUpFloor: in catch-up, a lag that does not shrink over Patience
// steps raises a floor under the controller's rate, again after each
// further stretch without progress; a shrinking lag does not, and the floor
// lasts while the lag is unknown and goes when catch-up ends.
func TestCatchUpFloor(t *testing.T) {
	lags := []int64{100, 100, 100, 100, 100, 100, 100, 100, 100, 100, 100, 100, 90, 80, 70, 60, 50, 40, 30}
	h := gov{g: NewGovernor(&scripted{}, GovernorParams{CatchUp: testCatchUp})}
	src := Signal{Name: "src", Mean: 30 * time.Millisecond}
	for k, lag := range lags {
		h.step(k, StageCatchUp, 1, lag, src)
	}
	c := testCatchUp
	first := c.MinFloor * c.Boost
	want := []float64{1e6, 1e6, 1e6, 1e6, 1e6, first, first, first, first, first, first, first * c.Boost}
	for k, w := range want {
		if h.rates[k] != w {
			t.Fatalf("step %d: rate %v, want %v (rates %v)", k, h.rates[k], w, h.rates)
		}
	}
	for k := len(want); k < len(lags); k++ {
		if h.rates[k] != first*c.Boost {
			t.Fatalf("step %d: rate %v while the lag shrinks, want the floor %v kept, not raised", k, h.rates[k], first*c.Boost)
		}
	}
	if r := h.step(100, StageCatchUp, 1, -1, src).Rate; r != first*c.Boost {
		t.Fatalf("lag unknown: rate %v, want the floor %v kept", r, first*c.Boost)
	}
	if r := h.step(101, StageOther, 1, 0, src).Rate; r != 1e6 {
		t.Fatalf("after catch-up: rate %v, want the controller's 1e6", r)
	}
}

// TestCatchUpFloorMeanRate: the floor rises from the mean rate in force over
// the window, not from the decision of the step that notices (a controller
// that paused and then ramps to 24 MB/s), to at least the rate that drains
// the lag in DrainMs at the WAL rate the window showed (the mean rate in
// force less the pace the lag shrank at). A lag that shrinks, but too
// slowly to drain in time, raises it too; one that drains in time does not.
func TestCatchUpFloorMeanRate(t *testing.T) {
	c := testCatchUp
	drainIn := c.DrainMs / 1000
	cases := []struct {
		name  string
		rates []float64         // the controller's, one a step
		lag   func(k int) int64 // the lag at step k
		want  float64           // the floor after the window (step Patience); 0 = none
	}{
		{"pause then ramp", []float64{12e6, 10e6, 0, 0, 0, 24e6, 1e6}, func(int) int64 { return 20 * mib },
			max(22e6/5*c.Boost, 22e6/5+20*mib/drainIn)},
		{"steady, lag not draining", []float64{10e6, 10e6, 10e6, 10e6, 10e6, 10e6, 1e6}, func(int) int64 { return 500 * mib },
			10e6 + 500*mib/drainIn},
		{"paused throughout", []float64{0, 0, 0, 0, 0, 0, 0}, func(int) int64 { return 10 * mib },
			c.MinFloor * c.Boost},
		// 290 MiB shrinking by 0.3 MiB a step at 2 MB/s: ~1000 s to drain
		{"shrinking too slowly", []float64{2e6, 2e6, 2e6, 2e6, 2e6, 2e6, 2e6}, func(k int) int64 { return 290*mib - int64(k)*3*mib/10 },
			(2e6 - 0.3*mib) + (290*mib-5*3*mib/10)/drainIn},
		// 100 MiB shrinking by 8 MiB a step: drains in ~12 s
		{"draining in time", []float64{10e6, 10e6, 10e6, 10e6, 10e6, 10e6, 10e6}, func(k int) int64 { return 100*mib - int64(k)*8*mib },
			0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := gov{g: NewGovernor(&rateScript{rates: tc.rates}, GovernorParams{CatchUp: c})}
			for k := range tc.rates {
				h.step(k, StageCatchUp, 1, tc.lag(k), Signal{Name: "src", Mean: 30 * time.Millisecond})
			}
			for k := range c.Patience {
				if h.rates[k] != tc.rates[k] {
					t.Fatalf("step %d: rate %v before any floor, want the controller's %v", k, h.rates[k], tc.rates[k])
				}
			}
			for _, k := range []int{c.Patience, c.Patience + 1} {
				if got := h.rates[k]; math.Abs(got-max(tc.want, tc.rates[k])) > 1e-6 {
					t.Fatalf("step %d: rate %v, want max(floor %v, controller %v)", k, got, tc.want, tc.rates[k])
				}
			}
		})
	}
}

// TestCatchUpEntryFloor: catch-up starts with a floor at the mean rate the
// controller decided over the copy's last Entry steps — a lag that drains in
// time does not lower it, and it goes when catch-up ends — and a catch-up
// with no copy before it starts without one.
func TestCatchUpEntryFloor(t *testing.T) {
	// 14 copy steps: the first four (40 MB/s) fall out of the mean.
	copyRates := []float64{40e6, 40e6, 40e6, 40e6, 10e6, 20e6, 30e6, 0, 50e6, 60e6, 20e6, 30e6, 40e6, 50e6}
	rates := append([]float64(nil), copyRates...)
	for range 6 {
		rates = append(rates, 2e6) // the controller in catch-up
	}
	h := gov{g: NewGovernor(&rateScript{rates: rates}, GovernorParams{CatchUp: testCatchUp})}
	n := len(rates) + 1
	for k := range n {
		stage := StageCatchUp
		switch {
		case k < len(copyRates):
			stage = StageCopy
		case k == len(rates):
			stage = StageOther
		}
		lag := int64(max(200e6-50e6*float64(max(k-len(copyRates), 0)), 0)) // drains in 4 s
		h.step(k, stage, int64(k), lag)
	}
	const entry = 31e6 // mean of the last 10 copy decisions
	for i, r := range h.rates {
		want := rates[min(i, len(rates)-1)]
		if i >= len(copyRates) && i < len(rates) {
			want = max(want, entry)
		}
		if r != want {
			t.Errorf("step %d: rate %v, want %v", i, r, want)
		}
	}
	h = gov{g: NewGovernor(&rateScript{rates: []float64{2e6}}, GovernorParams{CatchUp: testCatchUp})}
	if r := h.step(0, StageCatchUp, 0, 100).Rate; r != 2e6 {
		t.Errorf("catch-up with no copy before it: rate %v, want the controller's 2e6", r)
	}
}

// TestCatchUpFloorCapped: a lag that never shrinks raises the floor again
// and again, but never above MaxRate.
func TestCatchUpFloorCapped(t *testing.T) {
	h := gov{g: NewGovernor(&scripted{}, GovernorParams{CatchUp: testCatchUp, MaxRate: 5e6})}
	for k := range 60 {
		h.step(k, StageCatchUp, 1, 1<<30, Signal{Name: "src", Mean: 30 * time.Millisecond})
	}
	peak := 0.0
	for _, r := range h.rates {
		peak = max(peak, r)
	}
	if peak != 5e6 {
		t.Errorf("a 1 GiB lag that never shrinks: peak rate %v, want the floor raised to the 5e6 cap and no further (rates %v)", peak, h.rates)
	}
}

// TestCatchUpEntryFloorOverSetpoint: a copy that ended with the clients
// above the setpoint enters catch-up with its mean rate scaled by setpoint ÷
// mean latency; one at or under the setpoint, or with no latency known,
// keeps the mean rate; steps with no data do not count in the latency.
func TestCatchUpEntryFloorOverSetpoint(t *testing.T) {
	for _, tc := range []struct {
		name      string
		latencies []float64 // ms at the 10 copy steps; < 0: no data
		want      float64
	}{
		{"over", []float64{10, 10, 10, 10, 10, 30, 30, 30, 30, 30}, 30e6 * 10 / 20},
		{"over, gaps", []float64{-1, -1, 20, 20, 20, 20, 20, 20, 20, 20}, 30e6 * 10 / 20},
		{"at", []float64{5, 15, 5, 15, 5, 15, 5, 15, 5, 15}, 30e6},
		{"under", []float64{4, 4, 4, 4, 4, 4, 4, 4, 4, 4}, 30e6},
		{"unknown", []float64{-1, -1, -1, -1, -1, -1, -1, -1, -1, -1}, 30e6},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rates := []float64{20e6, 40e6, 20e6, 40e6, 20e6, 40e6, 20e6, 40e6, 20e6, 40e6, 1e6}
			h := gov{g: NewGovernor(&rateScript{rates: rates}, GovernorParams{CatchUp: testCatchUp, Setpoint: 10 * time.Millisecond})}
			for k, ms := range tc.latencies {
				sig := Signal{Name: "src", Err: errors.New("no data")}
				if ms >= 0 {
					sig = Signal{Name: "src", Mean: time.Duration(ms * float64(time.Millisecond))}
				}
				h.step(k, StageCopy, int64(k+1), -1, sig)
			}
			if got := h.step(len(tc.latencies), StageCatchUp, 0, 0).Rate; math.Abs(got-tc.want) > 1 {
				t.Errorf("catch-up's first rate %v, want %v", got, tc.want)
			}
		})
	}
}

// TestCatchUpDrainHorizon: after a long copy the lag may take Share of the
// copy's duration to drain: a lag shrinking at 12 MB/s from 400 MB (33 s to
// drain) keeps the entry floor after a 400 s copy (40 s horizon) but raises
// it after a 50 s one (DrainMs's 20 s).
func TestCatchUpDrainHorizon(t *testing.T) {
	for _, tc := range []struct {
		copySteps int
		raised    bool
	}{{400, false}, {50, true}} {
		rates := make([]float64, tc.copySteps)
		for i := range rates {
			rates[i] = 10e6
		}
		rates = append(rates, 1e6) // the controller in catch-up
		h := gov{g: NewGovernor(&rateScript{rates: rates}, GovernorParams{CatchUp: testCatchUp})}
		for k := range tc.copySteps + 12 {
			if k < tc.copySteps {
				h.step(k, StageCopy, int64(k+1), -1)
			} else {
				h.step(k, StageCatchUp, 0, max(400e6-12e6*int64(k-tc.copySteps), 0))
			}
		}
		peak := 0.0
		for _, r := range h.rates[tc.copySteps:] {
			peak = max(peak, r)
		}
		if raised := peak > 10e6; raised != tc.raised {
			t.Errorf("after a %d s copy: catch-up rates %v; floor raised %v, want %v", tc.copySteps, h.rates[tc.copySteps:], raised, tc.raised)
		}
	}
}
