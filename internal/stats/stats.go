// Package stats holds the small summary statistics sluice's commands and
// agents share.
package stats

import (
	"math"
	"slices"
)

// Median is the median of xs: the middle value, or the mean of the middle
// two for an even count; 0 for none. xs is not modified.
func Median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if n := len(s); n%2 == 0 {
		return (s[n/2-1] + s[n/2]) / 2
	}
	return s[len(s)/2]
}

// Mean is the arithmetic mean of xs; 0 for none.
func Mean(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	var sum float64
	for _, x := range xs {
		sum += x
	}
	return sum / float64(len(xs))
}

// SignTail is the sign test's one-sided tail: the chance of k or more
// successes in n fair coin flips, P(X ≥ k) for X ~ Binomial(n, 1/2); 1 for
// k ≤ 0, 0 for k > n.
func SignTail(k, n int) float64 {
	if k <= 0 {
		return 1
	}
	lg := func(x int) float64 { v, _ := math.Lgamma(float64(x + 1)); return v }
	var p float64
	for i := k; i <= n; i++ { // C(n, i) / 2^n, in logs: n of hundreds stays finite
		p += math.Exp(lg(n) - lg(i) - lg(n-i) - float64(n)*math.Ln2)
	}
	return p
}
