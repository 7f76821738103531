package sim

import (
	"math"
	"time"
)

// WindowMeans returns, for each point, the mean latency of the transactions
// completed in the window of w seconds ending at it (the controller's process
// variable without measurement noise), keyed by the point's T. Points with
// nothing completed in the window are absent.
func WindowMeans(points []Point, w int) map[float64]time.Duration {
	out := map[float64]time.Duration{}
	for i := range points {
		var s float64
		var n int
		for j := max(0, i-w+1); j <= i; j++ {
			s += points[j].Latency.Seconds() * float64(points[j].Count)
			n += points[j].Count
		}
		if n > 0 {
			out[points[i].T] = secs(s / float64(n))
		}
	}
	return out
}

// MeanBetween is the mean latency of the transactions completed in the 1 s
// windows ending in (from, to].
func MeanBetween(points []Point, from, to float64) time.Duration {
	var s float64
	var n int
	for _, p := range points {
		if p.T > from && p.T <= to {
			s += p.Latency.Seconds() * float64(p.Count)
			n += p.Count
		}
	}
	if n == 0 {
		return 0
	}
	return secs(s / float64(n))
}

// Recovery measures how a run came back to its setpoint after a disturbance
// at time at: the first control window (window seconds, noise-free mean)
// ending after at whose latency is within ±band of setpoint once the latency
// has left the band; if it never left, the recovery is at `at` itself. It
// returns the time of recovery and whether there was one before end.
func Recovery(points []Point, at float64, window int, setpoint time.Duration, band, end float64) (float64, bool) {
	w := WindowMeans(points, window)
	lo, hi := float64(setpoint)*(1-band), float64(setpoint)*(1+band)
	left := false
	for _, p := range points {
		if p.T <= at || p.T > end {
			continue
		}
		v, ok := w[p.T]
		if !ok {
			left = true
			continue
		}
		in := float64(v) >= lo && float64(v) <= hi
		switch {
		case !in:
			left = true
		case left:
			return p.T, true
		}
	}
	if !left {
		return at, true
	}
	return math.Inf(1), false
}
