package experiment

import (
	"math"
	"testing"
)

func TestStoreFigures(t *testing.T) {
	// Seconds 0..8: windows [0,3) [3,6) [6,9); the second window is over a
	// 10 ms contract.
	secs := [][]float64{{5, 5}, {5}, {5}, {20}, {20, 20}, {11}, {1}, {}, {3}}
	lat := func(a, b int) []float64 {
		var out []float64
		for i := a; i < b && i < len(secs); i++ {
			out = append(out, secs[i]...)
		}
		return out
	}
	f := storeFigures(lat, 0, 9, 10)
	if f.Windows != 3 || math.Abs(f.VR-1.0/3) > 1e-9 {
		t.Fatalf("windows %d vr %v, want 3 and 1/3", f.Windows, f.VR)
	}
	// Window means 5, 17.75, 2: AVL 8.25.
	if math.Abs(f.AVLMs-8.25) > 1e-9 {
		t.Fatalf("avl %v, want 8.25", f.AVLMs)
	}
	if f.P99Ms != 20 || f.P95Ms != 20 {
		t.Fatalf("p95 %v p99 %v, want 20", f.P95Ms, f.P99Ms)
	}
	if e := storeFigures(lat, 7, 8, 10); !math.IsNaN(e.VR) || e.Windows != 0 {
		t.Fatalf("no transactions: %+v, want NaN figures", e)
	}
	if p := percentile([]float64{1, 2, 3, 4}, 0.5); p != 2 {
		t.Fatalf("median of 1..4 = %v, want 2 (nearest rank)", p)
	}
}
