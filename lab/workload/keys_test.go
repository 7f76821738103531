package workload

import (
	"math/rand/v2"
	"testing"
)

func TestKeyChoosers(t *testing.T) {
	const n = 10000
	const draws = 200000
	for _, tc := range []struct {
		name Distribution
		// share of draws that land on the most popular 1% of keys: bounds
		top1Min, top1Max float64
	}{
		{Uniform, 0.005, 0.02},
		{HotSpot, 0.03, 0.08}, // 80% of ops on 20% of keys: top 1% ≈ 0.8/20
		{Zipfian, 0.30, 0.80}, // theta 0.99 concentrates heavily
	} {
		t.Run(string(tc.name), func(t *testing.T) {
			kc, err := NewKeyChooser(tc.name, n)
			if err != nil {
				t.Fatal(err)
			}
			r := rand.New(rand.NewPCG(1, 2))
			counts := make([]int, n)
			for i := 0; i < draws; i++ {
				k := kc.Next(r)
				if k < 0 || k >= n {
					t.Fatalf("key %d out of [0,%d)", k, n)
				}
				counts[k]++
			}
			// sort descending by count (counting sort is overkill; simple sort)
			top := topShare(counts, n/100)
			share := float64(top) / draws
			if share < tc.top1Min || share > tc.top1Max {
				t.Fatalf("top 1%% of keys got %.3f of draws, want in [%.3f, %.3f]", share, tc.top1Min, tc.top1Max)
			}
		})
	}
	if _, err := NewKeyChooser("latest", 10); err == nil {
		t.Fatal("unknown distribution accepted")
	}
	if _, err := NewKeyChooser(Uniform, 0); err == nil {
		t.Fatal("empty key space accepted")
	}
}

func TestKeyChooserDeterministic(t *testing.T) {
	a, _ := NewKeyChooser(Zipfian, 1000)
	b, _ := NewKeyChooser(Zipfian, 1000)
	ra, rb := rand.New(rand.NewPCG(7, 7)), rand.New(rand.NewPCG(7, 7))
	for i := 0; i < 1000; i++ {
		if x, y := a.Next(ra), b.Next(rb); x != y {
			t.Fatalf("draw %d: %d != %d with the same seed", i, x, y)
		}
	}
}

func topShare(counts []int, k int) int {
	c := append([]int(nil), counts...)
	// partial selection: k largest
	sum := 0
	for i := 0; i < k; i++ {
		best := i
		for j := i + 1; j < len(c); j++ {
			if c[j] > c[best] {
				best = j
			}
		}
		c[i], c[best] = c[best], c[i]
		sum += c[i]
	}
	return sum
}
