package experiment

import (
	"math"
	"slices"
)

// The figures of `sluice bench plan` (Aqueduct §5: violation fraction and
// average victim latency), from per-second latencies. Pure: tested on
// made-up seconds.

// PlanWindow is Aqueduct's sampling period W in the bench: the proxy's
// window length, 3 s, which the plan's control loop sees too.
const PlanWindow = 3

// StoreFigures are one store's figures over a plan.
type StoreFigures struct {
	Windows int     `json:"windows"`            // sampling windows with transactions
	MeanMs  float64 `json:"mean_latency_ms"`    // over every transaction
	AVLMs   float64 `json:"avl_ms"`             // mean of the windows' means (Aqueduct's average latency)
	VR      float64 `json:"violation_fraction"` // share of windows whose mean is over the contract
	P95Ms   float64 `json:"p95_ms"`
	P99Ms   float64 `json:"p99_ms"`
}

// storeFigures computes a store's figures over seconds [from, to) of its
// run; lat(a, b) returns the latencies (ms) of seconds [a, b).
func storeFigures(lat func(a, b int) []float64, from, to int, contractMs float64) StoreFigures {
	var f StoreFigures
	var means []float64
	for a := from; a < to; a += PlanWindow {
		xs := lat(a, min(a+PlanWindow, to))
		if len(xs) == 0 {
			continue
		}
		m := Describe(xs).Mean
		means = append(means, m)
		if m > contractMs {
			f.VR++
		}
	}
	f.Windows = len(means)
	all := lat(from, to)
	if f.Windows == 0 || len(all) == 0 {
		return StoreFigures{MeanMs: math.NaN(), AVLMs: math.NaN(), VR: math.NaN(), P95Ms: math.NaN(), P99Ms: math.NaN()}
	}
	f.VR /= float64(f.Windows)
	f.AVLMs = Describe(means).Mean
	f.MeanMs = Describe(all).Mean
	f.P95Ms, f.P99Ms = percentile(all, 0.95), percentile(all, 0.99)
	return f
}

// percentile is the q-quantile of xs (nearest rank); NaN if empty.
func percentile(xs []float64, q float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	i := int(math.Ceil(q*float64(len(s)))) - 1
	return s[min(max(i, 0), len(s)-1)]
}
