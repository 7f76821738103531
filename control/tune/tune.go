// Package tune holds the tuning math of sluice's controllers: fit the process
// gain of a plant from fixed-rate profiling runs, and propose controller gains
// for it. Every function is pure: numbers in, numbers out. `sluice tune`
// does the measuring and calls these.
//
// Units: rates are bytes/s, latencies seconds, so a process gain G is seconds
// of latency per byte/s of migration rate, and Aqueduct's K is (bytes/s) per
// second of latency error, per step.
package tune

import (
	"errors"
	"fmt"
	"math"
)

// ErrUnstable is returned when a proposed gain would make the closed loop
// unstable on the fitted plant.
var ErrUnstable = errors.New("unstable")

// ErrNoGain is returned by FitGain when latency does not rise with rate: there
// is no slack to steer by (or the profile was too noisy or too short).
var ErrNoGain = errors.New("latency does not rise with rate")

// FitGain fits latency = intercept + G·rate by ordinary least squares over
// profiling runs (Aqueduct §5.1: one fixed rate per run, the run's average
// latency). rates are bytes/s, latencies seconds, pairwise. It returns G
// (seconds per byte/s), the intercept (seconds: the latency at rate 0) and
// R² of the fit in [0, 1].
//
// G is the average slope over the profiled range. A server's latency bends
// upward near its knee, where setpoints usually sit, so a line fitted over low
// rates underestimates the gain there; when the plant bends, use FitQueue and
// Queue.GainAt(setpoint) instead.
//
// It fails on fewer than 3 points, mismatched lengths, non-finite or negative
// inputs, or fewer than 2 distinct rates; it returns the fit together with an
// error wrapping ErrNoGain when G <= 0.
func FitGain(rates, latencies []float64) (G, intercept, r2 float64, err error) {
	for i := range min(len(rates), len(latencies)) {
		x, y := rates[i], latencies[i]
		if !finite(x) || !finite(y) || x < 0 || y < 0 {
			return 0, 0, 0, fmt.Errorf("tune: fit gain: point %d (rate=%v, latency=%v) must be finite and >= 0", i, x, y)
		}
	}
	G, intercept, r2, err = ols(rates, latencies)
	if err != nil {
		return 0, 0, 0, fmt.Errorf("tune: fit gain: %w", err)
	}
	if G <= 0 {
		return G, intercept, r2, fmt.Errorf("tune: fit gain: G=%.3g s per byte/s: %w", G, ErrNoGain)
	}
	return G, intercept, r2, nil
}

// ols fits y = intercept + slope·x by ordinary least squares and returns R²
// (0 when y is constant). It needs >= 3 pairs and >= 2 distinct x.
func ols(x, y []float64) (slope, intercept, r2 float64, err error) {
	if len(x) != len(y) {
		return 0, 0, 0, fmt.Errorf("%d rates but %d latencies", len(x), len(y))
	}
	n := len(x)
	if n < 3 {
		return 0, 0, 0, fmt.Errorf("need at least 3 (rate, latency) points, got %d", n)
	}
	var mx, my float64
	for i := range x {
		mx += x[i]
		my += y[i]
	}
	mx /= float64(n)
	my /= float64(n)
	var sxx, sxy, syy float64
	for i := range x {
		dx, dy := x[i]-mx, y[i]-my
		sxx += dx * dx
		sxy += dx * dy
		syy += dy * dy
	}
	if sxx == 0 {
		return 0, 0, 0, fmt.Errorf("all %d runs used the same rate; need at least 2 distinct rates", n)
	}
	slope = sxy / sxx
	intercept = my - slope*mx
	if syy > 0 {
		r2 = sxy * sxy / (sxx * syy)
	}
	return slope, intercept, r2, nil
}

// Pole returns the closed-loop pole p = 1 − K·G of Aqueduct's integral
// controller on a plant of gain G (Aqueduct eq. 2).
func Pole(G, K float64) float64 { return 1 - K*G }

// Stable reports whether the integral loop with gain K on plant gain G is
// stable: |1 − K·G| < 1, i.e. 0 < K < 2/G.
func Stable(G, K float64) bool { return G > 0 && K > 0 && K < 2/G }

// KForPole returns K = (1 − pole)/G without any check: for callers that force
// a pole the stability check would refuse.
func KForPole(G, pole float64) float64 { return (1 - pole) / G }

// ProposeK returns Aqueduct's integral gain K = (1 − pole)/G in (bytes/s)
// per second of latency error, for a desired closed-loop pole and fitted gain
// G (seconds per byte/s). Aqueduct chose pole −0.22 (K = 1.09 for G = 1.12)
// for its synthetic workload and 0.49 for OpenMail; a pole in [0, 1) gives a
// monotone approach, (−1, 0) an alternating one, and 0 settles in one step on
// an exact model. It fails with ErrUnstable unless −1 < pole < 1 (0 < K <
// 2/G); use KForPole to force.
func ProposeK(G, pole float64) (float64, error) {
	if !finite(G) || G <= 0 {
		return 0, fmt.Errorf("tune: propose K: gain G must be > 0 s per byte/s, got %v", G)
	}
	if !finite(pole) || pole <= -1 || pole >= 1 {
		return 0, fmt.Errorf("tune: propose K: pole %v gives K=%.4g outside (0, 2/G=%.4g): %w", pole, KForPole(G, pole), 2/G, ErrUnstable)
	}
	return KForPole(G, pole), nil
}

// finite reports whether v is neither NaN nor infinite.
func finite(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }
