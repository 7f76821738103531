package experiment

import (
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	agentclient "github.com/sluicedb/sluice/agent/client"
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

// TestWritePlanBench writes a made-up result's files: every file named in
// the bench's doc, the goals judged in the report.
func TestWritePlanBench(t *testing.T) {
	dir := t.TempDir()
	if d := os.Getenv("PLANBENCH_OUT"); d != "" {
		dir = d // to look at the files
	}
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	res := PlanBenchResult{ContractMs: 18, FixedBaselineP99Ms: 30, AloneBaselineP99Ms: 30, K: 5e8, Pole: 0.7,
		Methods: []PlanMethod{
			{Method: "whole-store", PlanSeconds: 40, WorstViolationFraction: 0.6, WorstAVLFraction: 0.4, FixedStoreP99Ms: 80, AloneStoreP99Ms: 31, ThroughputFraction: 0.97,
				Stores: []PlanStoreResult{{Name: "m1", Role: RoleMoving, ContractMs: 18}}},
			{Method: "integral", PlanSeconds: 120, WorstViolationFraction: 0.05, WorstAVLFraction: -0.08, FixedStoreP99Ms: 32, AloneStoreP99Ms: 31, ThroughputFraction: 0.99},
		}}
	outs := []planOutput{
		{method: "whole-store", start: at, series: []agentclient.PlanPoint{{At: at.Add(time.Second), Rate: -1, Running: 1}},
			status: []agentclient.PlanStatus{{Rate: -1}, {Rate: -1, MovedBytes: 5e7}},
			stores: []storeSeries{{name: "m1", role: RoleMoving, t: []float64{0, 3}, ms: []float64{12, 25}}, {name: "f1", role: RoleFixed, t: []float64{0, 3}, ms: []float64{8, 9}}}},
		{method: "integral", start: at, stores: []storeSeries{{name: "m1", role: RoleMoving, t: []float64{0}, ms: []float64{10}}}},
	}
	if err := writePlanBench(PlanBenchOptions{Out: dir, Command: "sluice bench plan"}, "test bed", res, outs, at); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{SummaryFile, ReportFile, "methods.csv", "stores.csv", "series.csv", "windows.csv", "plan-whole-store.png", "plan-integral.png"} {
		if st, err := os.Stat(filepath.Join(dir, f)); err != nil || st.Size() == 0 {
			t.Fatalf("%s: %v", f, err)
		}
	}
	rep, _ := os.ReadFile(filepath.Join(dir, ReportFile))
	for _, want := range []string{"worst store VR 0.05 ≤ 0.10: met", "worst AVL -8% of the contract, within 10% under it: met", "whole-store violating (worst VR 0.60 > 0): met"} {
		if !strings.Contains(string(rep), want) {
			t.Fatalf("report lacks %q:\n%s", want, rep)
		}
	}
}
