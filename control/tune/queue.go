package tune

import (
	"fmt"
	"math"
)

// Queue is a queueing model of latency against migration rate, fitted by
// FitQueue:
//
//	L(r) = L0 / (1 − r/Capacity)
//
// the mean response time of a server whose spare capacity the migration eats
// (M/M/1-like: latency grows without bound as the rate nears Capacity). Real
// servers bend this way near their knee (Slacker §3: "above a certain
// migration speed latency becomes unbounded"), which a straight line fitted
// over low rates misses: its slope there is far below the slope at a setpoint
// near the knee, and gains designed with it oscillate.
type Queue struct {
	L0       float64 `json:"l0_s"`         // latency at rate 0, seconds
	Capacity float64 `json:"capacity_Bps"` // rate at which latency diverges, bytes/s
	R2       float64 `json:"r2"`           // R² of the fit of 1/L against r, in [0, 1]
}

// FitQueue fits Queue to profiling runs (rates bytes/s, latencies seconds,
// pairwise) by least squares on the linearised form
//
//	1/L = 1/L0 − r/(L0·Capacity)
//
// It needs the same inputs as FitGain, with latencies > 0, and fails with
// ErrNoGain if 1/L does not fall with r.
func FitQueue(rates, latencies []float64) (Queue, error) {
	inv := make([]float64, len(latencies))
	for i, l := range latencies {
		if !finite(l) || l <= 0 {
			return Queue{}, fmt.Errorf("tune: fit queue: latency %d is %v, must be > 0", i, l)
		}
		inv[i] = 1 / l
	}
	for i, r := range rates {
		if !finite(r) || r < 0 {
			return Queue{}, fmt.Errorf("tune: fit queue: rate %d is %v, must be finite and >= 0", i, r)
		}
	}
	slope, icpt, r2, err := ols(rates, inv)
	if err != nil {
		return Queue{}, fmt.Errorf("tune: fit queue: %w", err)
	}
	if slope >= 0 || icpt <= 0 {
		return Queue{}, fmt.Errorf("tune: fit queue: 1/L = %.4g %+.4g·r does not fall from a positive value: %w", icpt, slope, ErrNoGain)
	}
	return Queue{L0: 1 / icpt, Capacity: -icpt / slope, R2: r2}, nil
}

// Latency returns the model's latency at rate r (bytes/s); +Inf at or beyond
// Capacity.
func (q Queue) Latency(r float64) float64 {
	if r >= q.Capacity {
		return math.Inf(1)
	}
	return q.L0 / (1 - r/q.Capacity)
}

// RateAt returns the rate at which the model's latency equals l seconds
// (0 if l <= L0).
func (q Queue) RateAt(l float64) float64 {
	if l <= q.L0 {
		return 0
	}
	return q.Capacity * (1 - q.L0/l)
}

// GainAt returns the local process gain dL/dr at the operating point where
// latency is l seconds: L²/(L0·Capacity), seconds per byte/s. Use it as G for
// ProposeK and ProposePID with l = the setpoint (or P·LC).
func (q Queue) GainAt(l float64) float64 {
	return l * l / (q.L0 * q.Capacity)
}
