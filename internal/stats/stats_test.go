package stats

import (
	"math"
	"slices"
	"testing"
)

func TestMedian(t *testing.T) {
	for _, c := range []struct {
		xs   []float64
		want float64
	}{
		{nil, 0},
		{[]float64{7}, 7},
		{[]float64{3, 1, 2}, 2},
		{[]float64{4, 1, 3, 2}, 2.5},
		{[]float64{-5, 10}, 2.5},
	} {
		in := slices.Clone(c.xs)
		if got := Median(in); got != c.want {
			t.Errorf("Median(%v) = %v, want %v", c.xs, got, c.want)
		}
		if !slices.Equal(in, c.xs) {
			t.Errorf("Median(%v) reordered its input to %v", c.xs, in)
		}
	}
}

func TestMean(t *testing.T) {
	for _, c := range []struct {
		xs   []float64
		want float64
	}{
		{nil, 0},
		{[]float64{7}, 7},
		{[]float64{1, 2, 6}, 3},
		{[]float64{-5, 10}, 2.5},
	} {
		if got := Mean(c.xs); got != c.want {
			t.Errorf("Mean(%v) = %v, want %v", c.xs, got, c.want)
		}
	}
}

// TestSignTail against exact binomial tails: 9 of 10 heads or more is
// 11/1024; at least none is certain; more than n never.
func TestSignTail(t *testing.T) {
	for _, c := range []struct {
		k, n int
		want float64
	}{
		{0, 10, 1},
		{-1, 3, 1},
		{9, 10, 11.0 / 1024},
		{10, 10, 1.0 / 1024},
		{5, 10, 638.0 / 1024},
		{1, 1, 0.5},
		{11, 10, 0},
		{200, 200, math.Pow(2, -200)},
	} {
		if got := SignTail(c.k, c.n); math.Abs(got-c.want) > 1e-9*max(c.want, 1e-300) && math.Abs(got-c.want) > 1e-12 {
			t.Errorf("SignTail(%d, %d) = %v, want %v", c.k, c.n, got, c.want)
		}
	}
}
