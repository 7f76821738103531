package experiment

import (
	"math"
	"strings"
	"testing"

	"github.com/sluicedb/sluice/loop"
)

// TestCopyRate: the copy's own rate runs from the last snapshot point
// before its first byte to its last point with bytes; the start-up before
// it and catch-up after it do not count.
func TestCopyRate(t *testing.T) {
	r := &TrialResult{MigStart: 10}
	for s := 11; s <= 30; s++ { // start-up: no bytes until 20 s
		r.Loop = append(r.Loop, loop.Point{T: float64(s), Phase: copyPhase, Bytes: max(0, int64(s-20)*4e6)})
	}
	r.Loop = append(r.Loop, loop.Point{T: 31, Phase: "catch-up"}, loop.Point{T: 40, Phase: "warm", Bytes: 1e9})
	if got := copyRate(r); math.Abs(got-4e6) > 1 {
		t.Errorf("copy rate %v, want 4e6 (40 MB over 20..30 s)", got)
	}
	if got := rateBetween(r, 0, 40); !(got < 3e6) {
		t.Errorf("rate from the migration's start %v: want it below the copy's own (start-up counted)", got)
	}
	if got := copyRate(&TrialResult{Loop: []loop.Point{{T: 1, Phase: copyPhase, Bytes: 5}}}); got != 0 {
		t.Errorf("one point: copy rate %v, want 0", got)
	}
	if got := copyRate(&TrialResult{}); got != 0 {
		t.Errorf("no record: copy rate %v, want 0", got)
	}
}

// TestPairLines: each PID trial with a paired fixed trial gets a row and a
// verdict; trials without one none; the count line says how many the PID won,
// the next the medians and the sign test's tails over the pairs in which
// neither trial was kept disturbed.
func TestPairLines(t *testing.T) {
	if s := pairLines([]PIDPoint{{SetpointMs: 7}}); s != "" {
		t.Errorf("no pairs: %q, want nothing", s)
	}
	pid := []PIDPoint{
		{SetpointMs: 7, MeanLatencyMs: 7.1, MigrationSeconds: 80, CopyRateMBs: 40, PairFixed: &FixedPoint{RateMBs: 40, MeanLatencyMs: 9, MigrationSeconds: 85}},
		{SetpointMs: 8, MeanLatencyMs: 8.2, MigrationSeconds: 90, CopyRateMBs: 45, PairFirst: "fixed", PairFixed: &FixedPoint{RateMBs: 44, MeanLatencyMs: 7, MigrationSeconds: 80}},
		{SetpointMs: 9, MeanLatencyMs: 9.1, MigrationSeconds: 60},
		{SetpointMs: 9, MeanLatencyMs: 9.1, MigrationSeconds: 60, CopyRateMBs: 50, Disturbed: true, PairFixed: &FixedPoint{RateMBs: 50, MeanLatencyMs: 20, MigrationSeconds: 61}},
	}
	s := pairLines(pid)
	for _, want := range []string{"| 7.0 | pid | 7.1 | 80.0 | 40.0 | 40.0 | 9.0 | 85.0 | -21 % | -6 % | PID: lower and faster |", "| 8.0 | fixed | 8.2 | 90.0 | 45.0 | 44.0 | 7.0 | 80.0 | +17 % | +12 % | fixed: lower and faster |", "in 2 of 3 pairs, and lower or equal and as fast or faster in 2.", "| 9.0 | pid | 9.1 | 60.0 | 50.0 | 50.0 | 20.0 | 61.0 | -54 % | -2 % | PID: lower and faster | – (disturbed) / – |",
		"By order: the PID lower in 1 of the 1 such pairs it ran first in, and in 0 of the 1 in which the fixed trial ran first.",
		"Over the 2 pairs in which neither trial was kept disturbed (the last column says which were), the PID's mean latency was the fixed trial's -2 % (median; -21 to +17 %) and its migration time +3 % (median; -6 to ", "1 or more lower pairs of 2 would come with chance 0.750"} {
		if !strings.Contains(s, want) {
			t.Errorf("pair lines lack %q:\n%s", want, s)
		}
	}
	if strings.Count(s, "\n| 9.0 |") != 1 {
		t.Errorf("want one row at 9 ms (the PID trial without a pair gets none):\n%s", s)
	}
	for n, want := range map[int]bool{1: false, 2: true, 3: false, 4: true} {
		if got := PairFixedFirst(n, 40e6); got != want {
			t.Errorf("PairFixedFirst(%d, 40 MB/s) = %v, want %v", n, got, want)
		}
	}
	if PairFixedFirst(2, 0) {
		t.Errorf("PairFixedFirst(2, 0): the fixed trial first with no copy rate to run it at")
	}
	for _, c := range []struct {
		pm, ps, fm, fs float64
		want           string
	}{
		{7, 80, 8, 90, "PID: lower and faster"},
		{9, 95, 8, 90, "fixed: lower and faster"},
		{7, 95, 8, 90, "PID lower, fixed faster"},
		{9, 80, 8, 90, "PID faster, fixed lower"},
		{8, 90, 8, 90, "PID: lower and faster"}, // a tie is the PID's: "at least as fast"
	} {
		if got := PairVerdict(c.pm, c.ps, c.fm, c.fs); got != c.want {
			t.Errorf("PairVerdict(%v, %v, %v, %v) = %q, want %q", c.pm, c.ps, c.fm, c.fs, got, c.want)
		}
	}
}
