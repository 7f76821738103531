package experiment

import (
	"math"
	"testing"
	"time"

	"github.com/sluicedb/sluice/lab/workload"
	"github.com/sluicedb/sluice/loop"
)

// TestSwingFactor: the swing is high for the first half of every period
// from the migration's start, low for the second, 1 before the start, and
// averages to the trial's rate over whole periods.
func TestSwingFactor(t *testing.T) {
	w := Swing(time.Minute, 0.4)
	for _, c := range []struct {
		at   time.Duration
		want float64
	}{
		{-time.Second, 1}, {0, 1.4}, {29999 * time.Millisecond, 1.4}, {30 * time.Second, 0.6},
		{59 * time.Second, 0.6}, {time.Minute, 1.4}, {95 * time.Second, 0.6},
	} {
		if got := w.Factor(c.at); math.Abs(got-c.want) > 1e-12 {
			t.Errorf("Factor(%v) = %v, want %v", c.at, got, c.want)
		}
	}
	// An odd period in nanoseconds: the high half is the longer by one.
	odd := Swing(3, 0.5)
	if odd.Factor(1) != 1.5 || odd.Factor(2) != 0.5 {
		t.Errorf("odd period: Factor(1) = %v, Factor(2) = %v, want 1.5, 0.5", odd.Factor(1), odd.Factor(2))
	}
	var sum float64
	const n = 3 * 600
	for i := range n {
		sum += w.Factor(time.Duration(i) * 100 * time.Millisecond)
	}
	if mean := sum / n; mean < 0.9999 || mean > 1.0001 {
		t.Errorf("mean factor over three periods %v, want 1", mean)
	}
	if err := w.Valid(); err != nil {
		t.Errorf("%+v: %v", w, err)
	}
}

// TestStepFactor: a step holds the trial's rate until its time, then its
// factor to the migration's end; steady is 1 throughout.
func TestStepFactor(t *testing.T) {
	s := Step(30*time.Second, 1.4)
	for _, c := range []struct {
		at   time.Duration
		want float64
	}{{-time.Second, 1}, {0, 1}, {29999 * time.Millisecond, 1}, {30 * time.Second, 1.4}, {time.Hour, 1.4}} {
		if got := s.Factor(c.at); got != c.want {
			t.Errorf("Factor(%v) = %v, want %v", c.at, got, c.want)
		}
	}
	var steady Schedule
	if !steady.Steady() || steady.Factor(time.Minute) != 1 || steady.Valid() != nil || s.Steady() {
		t.Errorf("the zero schedule: steady %v, factor %v, valid %v; a step steady %v", steady.Steady(), steady.Factor(time.Minute), steady.Valid(), s.Steady())
	}
}

// TestScheduleValid: factors must be positive and levels in order from 0
// (within the period, when there is one).
func TestScheduleValid(t *testing.T) {
	for name, bad := range map[string]Schedule{
		"swing of 100 %":   Swing(time.Minute, 1),
		"swing of 140 %":   Swing(time.Minute, 1.4),
		"no period":        Swing(0, 0.4),
		"negative period":  Swing(-time.Second, 0.4),
		"step to nothing":  Step(time.Second, 0),
		"step before 0":    Step(-time.Second, 2),
		"NaN factor":       Step(time.Second, math.NaN()),
		"levels backwards": {Levels: []Level{{At: 2 * time.Second, Factor: 1}, {At: time.Second, Factor: 2}}},
		"past the period":  {Levels: []Level{{At: 0, Factor: 1}, {At: time.Minute, Factor: 2}}, Period: time.Minute},
	} {
		if bad.Valid() == nil {
			t.Errorf("%s %+v: valid, want an error", name, bad)
		}
	}
}

// TestScheduleDescribe: a report's phrase for each kind of schedule.
func TestScheduleDescribe(t *testing.T) {
	for _, c := range []struct {
		s    Schedule
		want string
	}{
		{Schedule{}, "a steady 100 transactions/s"},
		{Step(30*time.Second, 1.4), "100 transactions/s, then 140 from 30 s after the migration's start"},
		{Swing(time.Minute, 0.4), "140 transactions/s from 0 s, then 60 from 30 s after the migration's start, again every 60 s"},
	} {
		if got := c.s.Describe(100); got != c.want {
			t.Errorf("Describe(%+v) = %q, want %q", c.s, got, c.want)
		}
	}
}

// TestSwingHalves: a trial's seconds and loop steps go to the half of the
// swing their time falls in, on the migration's clock; latency is weighted
// by transactions, the copy rate is bytes moved over the steps' time, and
// what lies outside the migration counts in neither.
func TestSwingHalves(t *testing.T) {
	w := Swing(4*time.Second, 0.5)
	r := &TrialResult{MigStart: 10, MigEnd: 18}
	for s := range 20 { // busy halves: 10–12, 14–16; light: 12–14, 16–18
		x := workload.Second{T: s, Count: 10, MeanMs: 1}
		if s >= 10 && s < 18 {
			if (s-10)%4 < 2 {
				x.MeanMs, x.Count = 30, 20
			} else {
				x.MeanMs = 5
			}
		}
		if s == 13 {
			x.Count = 30 // weighs three times a light second of 10
			x.MeanMs = 9
		}
		r.Seconds = append(r.Seconds, x)
	}
	var b int64
	for k := range 9 { // steps at 10.5 … 18.5; 10 MB a busy step, 40 MB a light one
		tt := 10.5 + float64(k)
		if w.Factor(time.Duration((tt-r.MigStart)*float64(time.Second))) > 1 {
			b += 10e6
		} else {
			b += 40e6
		}
		r.Loop = append(r.Loop, loop.Point{T: tt, Bytes: b, Phase: copyPhase})
	}
	// The copy ends at 17.5: the catch-up's step counts its own bytes from
	// 0 and is in no copy rate.
	r.Loop[len(r.Loop)-2].Phase, r.Loop[len(r.Loop)-2].Bytes = "catch-up", 1e6
	busy, light := w.Halves(r)
	// Light seconds 12, 13, 16, 17: 10×5 + 30×9 + 10×5 + 10×5 over 60.
	if busy.Seconds != 4 || light.Seconds != 4 || busy.LatencyMs != 30 || math.Abs(light.LatencyMs-(50+270+50+50)/60.0) > 1e-9 {
		t.Errorf("busy %+v, light %+v: want 4 s each at 30 and 7 ms", busy, light)
	}
	// Copy steps ending 11.5 (busy), 12.5, 13.5 (light), 14.5, 15.5
	// (busy), 16.5 (light); 17.5 is the catch-up's, 18.5 after the
	// migration.
	if busy.CopyMBs != 10 || light.CopyMBs != 40 {
		t.Errorf("copy: busy %v, light %v MB/s: want 10 and 40", busy.CopyMBs, light.CopyMBs)
	}
	fixed := &TrialResult{MigStart: 10, MigEnd: 18, Seconds: r.Seconds}
	if _, l := w.Halves(fixed); !math.IsNaN(l.CopyMBs) {
		t.Errorf("a trial without a loop record: light copy %v, want NaN", l.CopyMBs)
	}
}
