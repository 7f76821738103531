package loop

import (
	"bytes"
	"context"
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/sluicedb/sluice/control"
)

// scripted is a test controller: rate = 1e6 × (number of signals with data),
// hold when none has data. It lets the test see what the loop hands over.
type scripted struct {
	last     float64
	settling []bool // Observation.Settling of every step
}

func (s *scripted) Name() string { return "scripted" }
func (s *scripted) Next(obs control.Observation) control.Decision {
	s.settling = append(s.settling, obs.Settling)
	n := 0
	for _, sg := range obs.Signals {
		if sg.Err == nil {
			n++
		}
	}
	if n == 0 {
		return control.Decision{Rate: s.last, Prefetch: s.last, Hold: true, Reason: "no data"}
	}
	s.last = float64(n) * 1e6
	return control.Decision{Rate: s.last, Prefetch: 2 * s.last}
}

type setter struct{ rates []float64 }

func (s *setter) SetRate(r float64) { s.rates = append(s.rates, r) }

func TestStepRecordsAndApplies(t *testing.T) {
	obs := []control.Observation{
		{Signals: []control.Signal{{Name: "src", Mean: 30 * time.Millisecond}, {Name: "dst", Mean: 45 * time.Millisecond}}},
		{Signals: []control.Signal{{Name: "src", Err: errors.New("down")}}},
		{Signals: []control.Signal{{Name: "src", Mean: 20 * time.Millisecond}}, CPU: &control.CPUQuota{Throttled: 0.25}},
	}
	send, pre := &setter{}, &setter{}
	i := 0
	l := &Loop{
		Controller: &scripted{},
		Observe: func(_ context.Context, at time.Time) control.Observation {
			o := obs[i]
			o.At = at
			i++
			return o
		},
		Send: send, Prefetch: pre, Setpoint: 40 * time.Millisecond,
		Status: func() (string, int64) { return "snapshot", int64(i) * 100 },
	}
	t0 := time.Unix(1000, 0)
	for k := range obs {
		l.Step(context.Background(), t0.Add(time.Duration(k)*time.Second))
	}
	s := l.Series()
	want := []Point{
		{T: 0, LatencyMs: 45, SetpointMs: 40, Rate: 2e6, Prefetch: 4e6, Phase: "snapshot", Bytes: 100},
		{T: 1, LatencyMs: -1, SetpointMs: 40, Rate: 2e6, Prefetch: 2e6, Hold: true, Reason: "no data", Phase: "snapshot", Bytes: 200},
		{T: 2, LatencyMs: 20, SetpointMs: 40, Rate: 1e6, Prefetch: 2e6, Phase: "snapshot", Bytes: 300},
	}
	if len(s) != len(want) {
		t.Fatalf("%d points, want %d", len(s), len(want))
	}
	if c := s[2].CPUThrottledPct; c == nil || *c != 25 {
		t.Errorf("point 2's CPU throttled share = %v, want 25 %%", c)
	}
	s[2].CPUThrottledPct = nil
	for k := range want {
		if s[k] != want[k] {
			t.Errorf("point %d = %+v, want %+v", k, s[k], want[k])
		}
	}
	if got := send.rates; len(got) != 3 || got[0] != 2e6 || got[1] != 2e6 || got[2] != 1e6 {
		t.Errorf("send rates %v", got)
	}
	var buf bytes.Buffer
	if err := WriteCSV(&buf, l.Series()); err != nil {
		t.Fatal(err)
	}
	if lines := strings.Count(buf.String(), "\n"); lines != 4 {
		t.Fatalf("csv has %d lines, want header + 3:\n%s", lines, buf.String())
	}
	if !strings.Contains(buf.String(), ",300,25.000,") {
		t.Fatalf("csv lacks point 2's CPU throttled share:\n%s", buf.String())
	}
}

func TestRunNeedsParts(t *testing.T) {
	if err := (&Loop{}).Run(context.Background(), nil); err == nil {
		t.Fatal("Run without controller/observer/throttle did not fail")
	}
}

// TestSettleHoldsStartUp: with Settle, the controller sees no data while no
// byte has moved and for Settle after the first step that saw bytes; the
// record keeps the measured latency.
func TestSettleHoldsStartUp(t *testing.T) {
	// The snapshot, then catch-up and warm, which report no bytes of their
	// own (the progress carries the current copy's bytes, 0 between copies):
	// the loop must not settle again there.
	bytesAt := []int64{0, 0, 100, 200, 300, 400, 500, 0, 0, 0, 700}
	phases := []string{"snapshot", "snapshot", "snapshot", "snapshot", "snapshot", "snapshot", "snapshot", "catch-up", "catch-up", "warm", "warm"}
	i := 0
	send := &setter{}
	ctl := &scripted{}
	var seen []control.Signal // what the controller was shown at step 1
	l := &Loop{
		Controller: recorder{ctl, func(k int, obs control.Observation) {
			if k == 1 {
				seen = obs.Signals
			}
		}},
		Observe: func(_ context.Context, at time.Time) control.Observation {
			i++
			sig := []control.Signal{{Name: "src", Mean: 30 * time.Millisecond}}
			if i == 2 { // a target that failed this step keeps its own error
				sig = append(sig, control.Signal{Name: "dst", Err: errProbe})
			}
			return control.Observation{At: at, Signals: sig}
		},
		Send:   send,
		Status: func() (string, int64) { return phases[i-1], bytesAt[i-1] },
		Settle: 2 * time.Second,
	}
	t0 := time.Unix(1000, 0)
	for k := range bytesAt {
		l.Step(context.Background(), t0.Add(time.Duration(k)*time.Second))
	}
	// Copy starts at step 2: steps 0-3 settle (2 s after step 2), 4- run,
	// catch-up and warm included.
	for k, p := range l.Series() {
		if wantHold := k < 4; p.Hold != wantHold {
			t.Errorf("step %d (bytes %d): hold %v, want %v (%s)", k, p.Bytes, p.Hold, wantHold, p.Reason)
		}
		if p.LatencyMs != 30 {
			t.Errorf("step %d: recorded latency %v, want the measured 30", k, p.LatencyMs)
		}
	}
	if r := send.rates[len(send.rates)-1]; r != 1e6 {
		t.Errorf("after settling the controller set %v, want 1e6", r)
	}
	for k, st := range ctl.settling {
		if want := k < 4; st != want {
			t.Errorf("step %d: Observation.Settling %v, want %v", k, st, want)
		}
	}
	// The settling signals keep their measurement for a run-long account
	// (control.PIDParams.MeanHorizon); a signal's own failure is not hidden.
	if len(seen) != 2 || seen[0].Err != ErrSettling || seen[0].Mean != 30*time.Millisecond || seen[1].Err != errProbe {
		t.Errorf("settling step's signals: %+v, want src marked ErrSettling with its 30 ms, dst with its own error", seen)
	}
}

var errProbe = errors.New("probe timed out")

// recorder passes each observation to see before its controller.
type recorder struct {
	control.Controller
	see func(k int, obs control.Observation)
}

func (r recorder) Next(obs control.Observation) control.Decision {
	r.see(len(r.Controller.(*scripted).settling), obs)
	return r.Controller.Next(obs)
}

// TestCatchUpFloor: in catch-up, a lag that does not shrink over
// CatchUpPatience steps raises a floor under the controller's rate, again
// after each further stretch without progress; a shrinking lag does not,
// and the floor lasts through warm and goes at the handover.
func TestCatchUpFloor(t *testing.T) {
	lags := []int64{100, 100, 100, 100, 100, 100, 100, 100, 100, 100, 100, 100, 90, 80, 70, 60, 50, 40, 30}
	phase := "catch-up"
	i := 0
	send := &setter{}
	l := catchUpLoop(send, func() string { return phase }, func() int64 { i++; return lags[i-1] })
	t0 := time.Unix(1000, 0)
	for k := range lags {
		l.Step(context.Background(), t0.Add(time.Duration(k)*time.Second))
	}
	first := float64(MinCatchUpFloor) * CatchUpBoost
	want := []float64{1e6, 1e6, 1e6, 1e6, 1e6, first, first, first, first, first, first, first * CatchUpBoost}
	for k, w := range want {
		if send.rates[k] != w {
			t.Fatalf("step %d: rate %v, want %v (rates %v)", k, send.rates[k], w, send.rates)
		}
	}
	for k := len(want); k < len(lags); k++ {
		if send.rates[k] != first*CatchUpBoost {
			t.Fatalf("step %d: rate %v while the lag shrinks, want the floor %v kept, not raised", k, send.rates[k], first*CatchUpBoost)
		}
	}
	// WARM (which waits for the lag again after its copy) keeps the floor,
	// also while the lag is not measured (-1); the handover drops it.
	phase = "warm"
	lags = append(lags, -1, 30)
	l.Step(context.Background(), t0.Add(time.Hour))
	l.Step(context.Background(), t0.Add(time.Hour+time.Second))
	if r := send.rates[len(send.rates)-1]; r != first*CatchUpBoost {
		t.Fatalf("in warm: rate %v, want the floor %v kept", r, first*CatchUpBoost)
	}
	phase = "handover"
	lags = append(lags, 0)
	l.Step(context.Background(), t0.Add(2*time.Hour))
	if r := send.rates[len(send.rates)-1]; r != 1e6 {
		t.Fatalf("after catch-up and warm: rate %v, want the controller's 1e6", r)
	}
}

// rateScript decides the rates of its script, one a step (then the last).
type rateScript struct {
	rates []float64
	k     int
}

func (r *rateScript) Name() string { return "rate-script" }
func (r *rateScript) Next(control.Observation) control.Decision {
	x := r.rates[min(r.k, len(r.rates)-1)]
	r.k++
	return control.Decision{Rate: x, Prefetch: x}
}

// TestCatchUpFloorMeanRate: the floor rises from the mean rate in force over
// the window, not from the decision of the step that notices (a controller
// that paused and then ramps to 24 MB/s), to at least the rate that drains
// the lag in CatchUpDrain at the WAL rate the window showed (the mean rate
// in force less the pace the lag shrank at). A lag that shrinks, but too
// slowly to drain in CatchUpDrain, raises it too; one that drains in time
// does not.
func TestCatchUpFloorMeanRate(t *testing.T) {
	const mib = 1 << 20
	drainIn := CatchUpDrain.Seconds()
	cases := []struct {
		name  string
		rates []float64         // the controller's, one a step
		lag   func(k int) int64 // the lag at step k
		want  float64           // the floor after the window (step CatchUpPatience); 0 = none
	}{
		// steps 0..4 are the window (from each step's lag to the next);
		// step 5 sees the lag and decides
		{"pause then ramp", []float64{12e6, 10e6, 0, 0, 0, 24e6, 1e6}, func(int) int64 { return 20 * mib },
			max(22e6/5*CatchUpBoost, 22e6/5+20*mib/drainIn)},
		{"steady, lag not draining", []float64{10e6, 10e6, 10e6, 10e6, 10e6, 10e6, 1e6}, func(int) int64 { return 500 * mib },
			10e6 + 500*mib/drainIn},
		{"paused throughout", []float64{0, 0, 0, 0, 0, 0, 0}, func(int) int64 { return 10 * mib },
			MinCatchUpFloor * CatchUpBoost},
		// 290 MiB shrinking by 0.3 MiB a step at 2 MB/s: ~1000 s to drain
		{"shrinking too slowly", []float64{2e6, 2e6, 2e6, 2e6, 2e6, 2e6, 2e6}, func(k int) int64 { return 290*mib - int64(k)*3*mib/10 },
			(2e6 - 0.3*mib) + (290*mib-5*3*mib/10)/drainIn},
		// 100 MiB shrinking by 8 MiB a step: drains in ~12 s
		{"draining in time", []float64{10e6, 10e6, 10e6, 10e6, 10e6, 10e6, 10e6}, func(k int) int64 { return 100*mib - int64(k)*8*mib },
			0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			send := &setter{}
			k := 0
			l := &Loop{
				Controller: &rateScript{rates: c.rates},
				Observe: func(_ context.Context, at time.Time) control.Observation {
					return control.Observation{At: at, Signals: []control.Signal{{Name: "src", Mean: 30 * time.Millisecond}}}
				},
				Send:   send,
				Status: func() (string, int64) { return "catch-up", 1 },
				Lag:    func() int64 { k++; return c.lag(k - 1) },
			}
			t0 := time.Unix(1000, 0)
			for k := range c.rates {
				l.Step(context.Background(), t0.Add(time.Duration(k)*time.Second))
			}
			for k := range CatchUpPatience {
				if send.rates[k] != c.rates[k] {
					t.Fatalf("step %d: rate %v before any floor, want the controller's %v", k, send.rates[k], c.rates[k])
				}
			}
			if got := send.rates[CatchUpPatience]; math.Abs(got-max(c.want, c.rates[CatchUpPatience])) > 1e-6 {
				t.Fatalf("step %d: rate %v, want max(floor %v, controller %v)", CatchUpPatience, got, c.want, c.rates[CatchUpPatience])
			}
			if got := send.rates[CatchUpPatience+1]; math.Abs(got-max(c.want, c.rates[CatchUpPatience+1])) > 1e-6 {
				t.Fatalf("step %d: rate %v, want max(floor %v, controller %v)", CatchUpPatience+1, got, c.want, c.rates[CatchUpPatience+1])
			}
		})
	}
}

// movedSeen records Observation.Moved of every step.
type movedSeen struct{ moved []float64 }

func (m *movedSeen) Name() string { return "moved" }
func (m *movedSeen) Next(obs control.Observation) control.Decision {
	m.moved = append(m.moved, obs.Moved)
	return control.Decision{Rate: 1e6, Prefetch: 1e6}
}

// TestStepMeasuresMoved: the controller is told the rate the copy moved over
// each step of the copy phase (bytes since the last step over the time
// since it), and 0 in a step that follows another phase, in other phases,
// and when nothing moved.
func TestStepMeasuresMoved(t *testing.T) {
	steps := []struct {
		at    float64 // seconds
		phase string
		bytes int64
	}{
		{0, "prepare", 0}, {1, CopyPhase, 10e6}, {2, CopyPhase, 30e6}, {2.5, CopyPhase, 40e6},
		{3.5, CopyPhase, 40e6}, {4.5, "catch-up", 1e6}, {5.5, "catch-up", 2e6},
	}
	want := []float64{0, 0, 20e6, 20e6, 0, 0, 0}
	m := &movedSeen{}
	k := 0
	l := &Loop{
		Controller: m,
		Observe:    func(context.Context, time.Time) control.Observation { return control.Observation{} },
		Send:       &setter{},
		Status:     func() (string, int64) { return steps[k].phase, steps[k].bytes },
	}
	t0 := time.Unix(1000, 0)
	for k = range steps {
		l.Step(context.Background(), t0.Add(time.Duration(steps[k].at*float64(time.Second))))
	}
	for i := range want {
		if m.moved[i] != want[i] {
			t.Errorf("step %d (%s, %d bytes): moved %v, want %v", i, steps[i].phase, steps[i].bytes, m.moved[i], want[i])
		}
	}
}

// TestCatchUpEntryFloor: catch-up starts with a floor at the mean rate the
// controller decided over the copy's last CatchUpEntry steps — a lag that
// drains in time does not lower it, warm keeps it, the handover drops it —
// and a catch-up with no copy before it (none measured) starts without one.
func TestCatchUpEntryFloor(t *testing.T) {
	// 14 copy steps: the first four (40 MB/s) fall out of the mean.
	copyRates := []float64{40e6, 40e6, 40e6, 40e6, 10e6, 20e6, 30e6, 0, 50e6, 60e6, 20e6, 30e6, 40e6, 50e6}
	var rates []float64
	rates = append(rates, copyRates...)
	for range 6 {
		rates = append(rates, 2e6) // the controller in catch-up
	}
	phases := make([]string, len(rates)+2)
	for k := range phases {
		switch {
		case k < len(copyRates):
			phases[k] = CopyPhase
		case k < len(rates):
			phases[k] = "catch-up"
		case k == len(rates):
			phases[k] = "warm"
		default:
			phases[k] = "handover"
		}
	}
	k := 0
	send := &setter{}
	l := &Loop{
		Controller: &rateScript{rates: rates},
		Observe:    func(_ context.Context, at time.Time) control.Observation { return control.Observation{At: at} },
		Send:       send,
		Status:     func() (string, int64) { return phases[k], int64(k) },
		Lag:        func() int64 { return int64(max(200e6-50e6*float64(max(k-len(copyRates), 0)), 0)) }, // drains in 4 s
	}
	t0 := time.Unix(1000, 0)
	for k = range phases {
		l.Step(context.Background(), t0.Add(time.Duration(k)*time.Second))
	}
	const entry = 31e6 // mean of the last 10 copy decisions
	for i, r := range send.rates {
		want := rates[min(i, len(rates)-1)]
		if i >= len(copyRates) && i <= len(rates) { // catch-up and warm
			want = max(want, entry)
		}
		if r != want {
			t.Errorf("step %d (%s): rate %v, want %v", i, phases[i], r, want)
		}
	}

	// Catch-up without a copy step before it: the controller's rate.
	send = &setter{}
	l = &Loop{
		Controller: &rateScript{rates: []float64{2e6}},
		Observe:    func(_ context.Context, at time.Time) control.Observation { return control.Observation{At: at} },
		Send:       send,
		Status:     func() (string, int64) { return "catch-up", 0 },
		Lag:        func() int64 { return 100 },
	}
	l.Step(context.Background(), t0)
	if send.rates[0] != 2e6 {
		t.Errorf("catch-up with no copy before it: rate %v, want the controller's 2e6", send.rates[0])
	}
}

// catchUpLoop is a loop whose controller decides 1e6 B/s at 30 ms, in the
// phase phase() reports, with the lag lag() reports.
func catchUpLoop(send *setter, phase func() string, lag func() int64) *Loop {
	return &Loop{
		Controller: &scripted{}, // decides 1e6 B/s
		Observe: func(_ context.Context, at time.Time) control.Observation {
			return control.Observation{At: at, Signals: []control.Signal{{Name: "src", Mean: 30 * time.Millisecond}}}
		},
		Send:   send,
		Status: func() (string, int64) { return phase(), 1 },
		Lag:    lag,
	}
}

// TestCatchUpFloorCapped: a lag that never shrinks raises the floor again
// and again, but never above MaxRate.
func TestCatchUpFloorCapped(t *testing.T) {
	send := &setter{}
	l := catchUpLoop(send, func() string { return "catch-up" }, func() int64 { return 1 << 30 })
	l.MaxRate = 5e6
	t0 := time.Unix(1000, 0)
	for k := range 60 {
		l.Step(context.Background(), t0.Add(time.Duration(k)*time.Second))
	}
	peak := 0.0
	for _, r := range send.rates {
		peak = max(peak, r)
	}
	if peak != 5e6 {
		t.Errorf("a 1 GiB lag that never shrinks: peak rate %v, want the floor raised to the 5e6 cap and no further (rates %v)", peak, send.rates)
	}
}

// TestCatchUpEntryFloorOverSetpoint: a copy that ended with the clients
// above the setpoint (a load step late in the copy) enters catch-up with its
// mean rate scaled by setpoint ÷ mean latency; one at or under the setpoint,
// or with no latency known, keeps the mean rate; steps with no data do not
// count in the latency.
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
			k := 0
			send := &setter{}
			l := &Loop{
				Controller: &rateScript{rates: []float64{20e6, 40e6, 20e6, 40e6, 20e6, 40e6, 20e6, 40e6, 20e6, 40e6, 1e6}},
				Observe: func(_ context.Context, at time.Time) control.Observation {
					if k >= len(tc.latencies) || tc.latencies[k] < 0 {
						return control.Observation{At: at, Signals: []control.Signal{{Name: "src", Err: errors.New("no data")}}}
					}
					return control.Observation{At: at, Signals: []control.Signal{{Name: "src", Mean: time.Duration(tc.latencies[k] * float64(time.Millisecond))}}}
				},
				Send:     send,
				Setpoint: 10 * time.Millisecond,
				Status: func() (string, int64) {
					if k < len(tc.latencies) {
						return CopyPhase, int64(k + 1)
					}
					return "catch-up", 0
				},
				Lag: func() int64 { return 0 },
			}
			t0 := time.Unix(1000, 0)
			for k = range len(tc.latencies) + 1 {
				l.Step(context.Background(), t0.Add(time.Duration(k)*time.Second))
			}
			if got := send.rates[len(tc.latencies)]; math.Abs(got-tc.want) > 1 {
				t.Errorf("catch-up's first rate %v, want %v", got, tc.want)
			}
		})
	}
}

// TestCatchUpDrainHorizon: after a long copy the lag may take CatchUpShare
// of the copy's duration to drain: a lag shrinking at 12 MB/s from 400 MB
// (33 s to drain) keeps the entry floor after a 400 s copy (40 s horizon)
// but raises it after a 50 s one (CatchUpDrain's 20 s).
func TestCatchUpDrainHorizon(t *testing.T) {
	for _, tc := range []struct {
		copySteps int
		raised    bool
	}{{400, false}, {50, true}} {
		k := 0
		send := &setter{}
		rates := make([]float64, tc.copySteps)
		for i := range rates {
			rates[i] = 10e6
		}
		rates = append(rates, 1e6) // the controller in catch-up
		l := &Loop{
			Controller: &rateScript{rates: rates},
			Observe:    func(_ context.Context, at time.Time) control.Observation { return control.Observation{At: at} },
			Send:       send,
			Status: func() (string, int64) {
				if k < tc.copySteps {
					return CopyPhase, int64(k + 1)
				}
				return "catch-up", 0
			},
			Lag: func() int64 { return max(400e6-12e6*int64(k-tc.copySteps), 0) },
		}
		t0 := time.Unix(1000, 0)
		for k = range tc.copySteps + 12 {
			l.Step(context.Background(), t0.Add(time.Duration(k)*time.Second))
		}
		peak := 0.0
		for _, r := range send.rates[tc.copySteps:] {
			peak = max(peak, r)
		}
		if raised := peak > 10e6; raised != tc.raised {
			t.Errorf("after a %d s copy: catch-up rates %v; floor raised %v, want %v", tc.copySteps, send.rates[tc.copySteps:], raised, tc.raised)
		}
	}
}
