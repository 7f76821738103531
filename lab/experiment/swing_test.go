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
	w := Swing{Period: time.Minute, Amplitude: 0.4}
	for _, c := range []struct {
		at   time.Duration
		want float64
	}{
		{-time.Second, 1}, {0, 1.4}, {29999 * time.Millisecond, 1.4}, {30 * time.Second, 0.6},
		{59 * time.Second, 0.6}, {time.Minute, 1.4}, {95 * time.Second, 0.6},
	} {
		if got := w.Factor(c.at); got != c.want {
			t.Errorf("Factor(%v) = %v, want %v", c.at, got, c.want)
		}
	}
	// An odd period in nanoseconds: the high half is the longer by one.
	odd := Swing{Period: 3, Amplitude: 0.5}
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
	for _, bad := range []Swing{{Period: time.Minute}, {Period: time.Minute, Amplitude: 1}, {Amplitude: 0.4}, {Period: -time.Second, Amplitude: 0.4}} {
		if bad.Valid() == nil {
			t.Errorf("%+v: valid, want an error", bad)
		}
	}
	if err := w.Valid(); err != nil {
		t.Errorf("%+v: %v", w, err)
	}
}

// TestSwingHalves: a trial's seconds and loop steps go to the half of the
// swing their time falls in, on the migration's clock; latency is weighted
// by transactions, the copy rate is bytes moved over the steps' time, and
// what lies outside the migration counts in neither.
func TestSwingHalves(t *testing.T) {
	w := Swing{Period: 4 * time.Second, Amplitude: 0.5}
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
		r.Loop = append(r.Loop, loop.Point{T: tt, Bytes: b, Phase: loop.CopyPhase})
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
