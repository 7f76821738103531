package stats

import (
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
