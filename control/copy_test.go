package control

import (
	"testing"
	"time"
)

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
