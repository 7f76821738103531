package experiment

import (
	"encoding/json"
	"math"
	"slices"
	"strings"
	"testing"

	agentclient "github.com/sluicedb/sluice/agent/client"
	"github.com/sluicedb/sluice/lab/workload"
	"github.com/sluicedb/sluice/loop"
)

func TestThrottleNote(t *testing.T) {
	if p := pct(math.NaN()); p != nil {
		t.Fatalf("pct(NaN) = %v, want nil", *p)
	}
	src, dst := pct(0.3449), pct(0.12)
	if *src != 34.5 || *dst != 12 {
		t.Fatalf("pct = %v, %v; want 34.5, 12", *src, *dst)
	}
	if got := throttleNote(nil, nil, nil, nil); got != "" {
		t.Fatalf("throttleNote(nil, nil, nil) = %q, want empty", got)
	}
	if got, want := throttleNote(src, nil, nil, nil), "; CPU quota throttled in 34 % of the source's periods, ? % of the target's"; got != want {
		t.Fatalf("throttleNote = %q, want %q", got, want)
	}
	if got, want := throttleNote(src, dst, pct(0.031), nil), "; CPU quota throttled in 34 % of the source's periods, 12 % of the target's; host steal 3 %"; got != want {
		t.Fatalf("throttleNote = %q, want %q", got, want)
	}
	if got, want := throttleNote(nil, nil, pct(0.2), nil), "; host steal 20 %"; got != want {
		t.Fatalf("throttleNote without quotas = %q, want %q", got, want)
	}
	if got, want := throttleNote(nil, nil, pct(0.05), pct(0.396)), "; host steal 5 %, 10 s peak 40 %"; got != want {
		t.Fatalf("throttleNote with a peak = %q, want %q", got, want)
	}
	b, err := json.Marshal(FixedPoint{SourceThrottledPct: src})
	if err != nil {
		t.Fatal(err)
	}
	if s := string(b); !strings.Contains(s, `"source_throttled_pct":34.5`) || strings.Contains(s, "target_throttled_pct") {
		t.Fatalf("JSON %s: want source_throttled_pct 34.5 and no target_throttled_pct", s)
	}
}

func TestCPULines(t *testing.T) {
	nan := math.NaN()
	none := []Labeled{{Name: "fixed-20MBps", Res: &TrialResult{SourceThrottled: nan, TargetThrottled: nan, HostSteal: nan, HostStealPeak: nan}}}
	if got := cpuLines(none); got != "" {
		t.Fatalf("cpuLines without measurements = %q, want empty", got)
	}
	some := append(none, Labeled{Name: "pid-8ms", Res: &TrialResult{SourceThrottled: 0.344, TargetThrottled: nan, HostSteal: 0.12, HostStealPeak: 0.41}},
		Labeled{Name: "pid-9ms", Res: &TrialResult{SourceThrottled: nan, TargetThrottled: nan, HostSteal: 0, HostStealPeak: nan}})
	got := cpuLines(some)
	if !strings.Contains(got, "| pid-8ms | 34 % | – | 12 % | 41 % |") || !strings.Contains(got, "| pid-9ms | – | – | 0 % | – |") || strings.Contains(got, "fixed-20MBps") {
		t.Fatalf("cpuLines = %q: want the rows of pid-8ms and pid-9ms only", got)
	}
}

// TestSweepOrder: the trials alternate F P, P F; every trial moves the tenant
// to the other server, so each fixed rate ladder and each compared loop
// must migrate in both directions as often.
func TestSweepOrder(t *testing.T) {
	got := sweepOrder(4, 4, 2)
	want := []sweepTrial{{0, -1}, {0, 0}, {0, 1}, {1, 1}, {1, 0}, {1, -1}, {2, -1}, {2, 0}, {2, 1}, {3, 1}, {3, 0}, {3, -1}}
	if !slices.Equal(got, want) {
		t.Fatalf("sweepOrder(4, 4, 2) = %v, want %v", got, want)
	}
	for _, c := range []struct{ nFixed, nSP, nLoops int }{{4, 4, 1}, {4, 4, 2}, {4, 4, 3}, {2, 4, 2}, {4, 2, 2}, {3, 5, 2}} {
		order := sweepOrder(c.nFixed, c.nSP, c.nLoops)
		if len(order) != c.nFixed+c.nSP*c.nLoops {
			t.Errorf("%+v: %d trials, want %d", c, len(order), c.nFixed+c.nSP*c.nLoops)
		}
		ways := map[int][2]int{} // variant (−1: fixed) → trials to server 1, to server 0
		for k, tr := range order {
			w := ways[tr.Loop]
			w[k%2]++
			ways[tr.Loop] = w
		}
		for v, w := range ways {
			if n := w[0] + w[1]; n >= 4 && n%2 == 0 && w[0] != w[1] {
				t.Errorf("%+v: loop %d migrates %d times one way and %d the other", c, v, w[0], w[1])
			}
		}
	}
}

// TestRepeatOrder: rounds repeat the order; with pairs (each trial of loop 0
// followed by a fixed trial at its copy rate, one more migration), a round
// of one fixed rate and two setpoints has an odd number of migrations, so over
// two rounds the PID trials and their pairs each migrate both ways as often.
func TestRepeatOrder(t *testing.T) {
	round := sweepOrder(1, 2, 1)
	order := repeatOrder(round, 2)
	if len(order) != 2*len(round) || !slices.Equal(order[:len(round)], round) || !slices.Equal(order[len(round):], round) {
		t.Fatalf("repeatOrder(%v, 2) = %v: want the round twice", round, order)
	}
	if got := repeatOrder(round, 0); !slices.Equal(got, round) {
		t.Fatalf("repeatOrder(%v, 0) = %v: want the round once", round, got)
	}
	var pidWays, pairWays [2]int // migrations to server 1, to server 0
	to := 1
	for _, tr := range order {
		if tr.Loop == 0 {
			pidWays[to]++
			to = 1 - to
			pairWays[to]++ // the pair
		}
		to = 1 - to
	}
	if pidWays[0] != pidWays[1] || pairWays[0] != pairWays[1] {
		t.Fatalf("two paired rounds: PID trials %v, pairs %v to servers (1, 0): want each both ways as often", pidWays, pairWays)
	}
	for k, want := range map[int]string{0: "", 1: "", 2: "-r2", 12: "-r12"} {
		if got := roundSuffix(k); got != want {
			t.Errorf("roundSuffix(%d) = %q, want %q", k, got, want)
		}
	}
}

// TestDominance: on a non-monotonic ladder a PID trial is beaten by the
// fixed trials faster and lower than it, beats those slower and higher,
// and a tie on either figure counts for neither.
func TestDominance(t *testing.T) {
	fixed := []FixedPoint{
		{RateMBs: 30, MeanLatencyMs: 3.0, MigrationSeconds: 42.6},
		{RateMBs: 45, MeanLatencyMs: 3.8, MigrationSeconds: 30.6},
		{RateMBs: 60, MeanLatencyMs: 6.6, MigrationSeconds: 23.7},
		{RateMBs: 75, MeanLatencyMs: 2.7, MigrationSeconds: 18.1},
		{RateMBs: 90, MeanLatencyMs: 3.3, MigrationSeconds: 15},
	}
	for _, c := range []struct {
		p             PIDPoint
		beaten, beats []float64
	}{
		{PIDPoint{MeanLatencyMs: 3.3, MigrationSeconds: 19.1}, []float64{75}, []float64{45, 60}},
		{PIDPoint{MeanLatencyMs: 2.5, MigrationSeconds: 19.1}, []float64{}, []float64{30, 45, 60}},
		{PIDPoint{MeanLatencyMs: 3.8, MigrationSeconds: 30.6}, []float64{75, 90}, []float64{}},
	} {
		beaten, beats := Dominance(fixed, c.p)
		if !slices.Equal(beaten, c.beaten) || !slices.Equal(beats, c.beats) {
			t.Errorf("Dominance(%+v) = %v, %v; want %v, %v", c.p, beaten, beats, c.beaten, c.beats)
		}
	}
	if got := rates([]float64{60, 75}); got != "60, 75 MB/s" {
		t.Errorf("rates = %q", got)
	}
	if got := rates(nil); got != "none" {
		t.Errorf("rates(nil) = %q", got)
	}
}

func TestRecentMean(t *testing.T) {
	secs := []workload.Second{{T: 0, Count: 10, MeanMs: 50}, {T: 1, Count: 10, MeanMs: 2}, {T: 2, Count: 0}, {T: 3, Count: 30, MeanMs: 4}}
	if m, ok := recentMean(secs, 2); !ok || math.Abs(m-3.5) > 1e-9 {
		t.Errorf("last 2 seconds with transactions: %v, %v; want 3.5 (weighted), true", m, ok)
	}
	if m, ok := recentMean(secs, 3); !ok || math.Abs(m-(500+20+120)/50.0) > 1e-9 {
		t.Errorf("last 3: %v, %v", m, ok)
	}
	if _, ok := recentMean(secs, 4); ok {
		t.Error("4 seconds asked of 3 with transactions: ok")
	}
}

func TestCalmLines(t *testing.T) {
	res := func(wait float64, calm bool) *TrialResult { return &TrialResult{CalmWait: wait, Calm: calm} }
	if got := calmLines([]Labeled{{Name: "a", Res: res(0, true)}, {Name: "b", Res: res(0.4, true)}}); got != "" {
		t.Errorf("no trial held: %q", got)
	}
	got := calmLines([]Labeled{{Name: "fixed-40MBps", Res: res(12, true)}, {Name: "pid-8ms", Res: res(90, false)}, {Name: "c", Res: res(0, true)}})
	for _, want := range []string{"fixed-40MBps 12 s", "not calm", "pid-8ms (after 90 s)"} {
		if !strings.Contains(got, want) {
			t.Errorf("%q lacks %q", got, want)
		}
	}
	if strings.Contains(got, "c ") {
		t.Errorf("%q names a trial that was not held", got)
	}
}

func TestWithinLine(t *testing.T) {
	if got := withinLine(nil); got != "" {
		t.Fatalf("withinLine(nil) = %q, want empty", got)
	}
	pid := []PIDPoint{
		{SetpointMs: 6.5, BeforeHandoverMs: 6.52}, // +0.3 %
		{SetpointMs: 7, BeforeHandoverMs: 9.44},   // +34.9 %
		{SetpointMs: 7.5, BeforeHandoverMs: 8.1},  // +8.0 %
		{SetpointMs: 8, BeforeHandoverMs: 7.71},   // −3.6 %
		{SetpointMs: 8, BeforeHandoverMs: 7.8},    // the same setpoint again
	}
	got := withinLine(pid)
	want := "\n4 of the 5 PID trials ended within ±10 % of their setpoint before the handover (3 distinct setpoints), 3 within ±5 %; outside: 7 ms +34.9 %.\n"
	if got != want {
		t.Fatalf("withinLine =\n%q, want\n%q", got, want)
	}
}

func TestDisturbedTrials(t *testing.T) {
	o := SweepOptions{StealGuard: StealGuard{StealLimit: 0.25}}
	for _, c := range []struct {
		peak float64
		want bool
	}{{0.40, true}, {0.25, false}, {0.1, false}, {math.NaN(), false}} {
		if got := o.disturbed(&TrialResult{HostStealPeak: c.peak}); got != c.want {
			t.Errorf("limit 25 %%, peak %v: disturbed %v, want %v", c.peak, got, c.want)
		}
	}
	if off := (SweepOptions{}); off.disturbed(&TrialResult{HostStealPeak: 0.9}) {
		t.Error("no limit: a trial was disturbed")
	}
	if got := disturbedLines(SweepResult{}, 0.25); got != "" {
		t.Fatalf("disturbedLines with none = %q, want empty", got)
	}
	peak, whole := 39.6, 8.3
	res := SweepResult{
		DisturbedFixed: []FixedPoint{{RateMBs: 40, BeforeHandoverMs: 14.18, MigrationSeconds: 91, HostStealPeakPct: &peak, HostStealPct: &whole}},
		DisturbedPID:   []PIDPoint{{SetpointMs: 7, Loop: "sluice(latency=client)", BeforeHandoverMs: 9.44, MigrationSeconds: 465.6, HostStealPeakPct: &peak}},
	}
	got := disturbedLines(res, 0.25)
	for _, want := range []string{"above 25 % over some 10 s", "| fixed 40.0 MB/s | 39.6 % | 8.3 % | 14.2 | – | 91.0 |", "| PID 7.0 ms (sluice(latency=client)) | 39.6 % | – | 9.4 | +34.9 % | 465.6 |"} {
		if !strings.Contains(got, want) {
			t.Errorf("disturbedLines =\n%s\nwant a line containing %q", got, want)
		}
	}
	if got := stealCell(&peak, true); got != "39.6 % (disturbed)" {
		t.Errorf("stealCell(39.6, disturbed) = %q", got)
	}
	b, err := json.Marshal(SweepResult{PID: []PIDPoint{{HostStealPeakPct: &peak}}})
	if err != nil {
		t.Fatal(err)
	}
	if s := string(b); !strings.Contains(s, `"host_steal_peak_pct":39.6`) || !strings.Contains(s, `"disturbed":false`) || strings.Contains(s, "disturbed_pid") {
		t.Errorf("JSON %s: want host_steal_peak_pct, disturbed false and no disturbed_pid list", s)
	}
}

// TestMovedBytes: a committed migration's bytes are its summary's; an
// aborted one's (its summary counts none before the snapshot finished) are
// the most the loop saw the snapshot move.
func TestMovedBytes(t *testing.T) {
	series := []loop.Point{{Phase: "snapshot", Bytes: 100}, {Phase: "snapshot", Bytes: 700}, {Phase: "catch-up", Bytes: 900}}
	committed := TrialResult{Migration: agentclient.Migration{Summary: &agentclient.Summary{Bytes: 5000}}, Loop: series}
	if got := committed.MovedBytes(); got != 5000 {
		t.Errorf("committed: %d, want the summary's 5000", got)
	}
	aborted := TrialResult{Aborted: true, Migration: agentclient.Migration{Summary: &agentclient.Summary{}}, Loop: series}
	if got := aborted.MovedBytes(); got != 700 {
		t.Errorf("aborted in its snapshot: %d, want the loop's 700", got)
	}
	if got := (&TrialResult{Aborted: true}).MovedBytes(); got != 0 {
		t.Errorf("aborted without summary or loop: %d, want 0", got)
	}
}
