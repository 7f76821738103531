package experiment

import (
	"testing"
	"time"
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
