package experiment

import (
	"context"
	"encoding/csv"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicedb/sluice/lab/cgroup"
	"github.com/sluicedb/sluice/lab/internal/testbin"
	"github.com/sluicedb/sluice/lab/testbed"
	"github.com/sluicedb/sluice/lab/workload"
)

// probes returns samples issued every 5 ms from t0 over [0, n), each taking
// 1 ms, except those listed in slow (index → latency) and failed.
func probes(t0 time.Time, n int, slow map[int]time.Duration, failed map[int]bool) []dtSample {
	var out []dtSample
	at := t0
	for i := 0; i < n; i++ {
		lat := time.Millisecond
		if d, ok := slow[i]; ok {
			lat = d
		}
		out = append(out, dtSample{At: at, Latency: lat, Err: failed[i]})
		at = at.Add(max(5*time.Millisecond, lat)) // the next probe waits for this one
	}
	return out
}

func TestDtStall(t *testing.T) {
	t0 := time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	cases := []struct {
		name       string
		samples    []dtSample
		from, to   time.Duration // window, offsets from t0
		max, gap   float64
		errs, seen int
	}{
		{name: "quiet", samples: probes(t0, 200, nil, nil), from: ms(100), to: ms(600),
			max: 1, gap: 5, seen: 101},
		// Probe 40 (issued at 200 ms) is held 300 ms: completions at 196, then
		// 500; probes issued at 100..200 and 500..900 ms.
		{name: "one stall", samples: probes(t0, 200, map[int]time.Duration{40: ms(300)}, nil), from: ms(100), to: ms(900),
			max: 300, gap: 304, seen: 21 + 81},
		// The held probe was issued before the window and ends inside it: the
		// gap runs from the window's start to its completion.
		{name: "stall from before the window", samples: probes(t0, 200, map[int]time.Duration{10: ms(400)}, nil), from: ms(100), to: ms(600),
			max: 1, gap: 350, seen: 31},
		// Failed probes do not end a gap; they are counted.
		{name: "errors", samples: probes(t0, 100, nil, map[int]bool{20: true, 21: true, 22: true}), from: ms(50), to: ms(300),
			max: 1, gap: 20, errs: 3, seen: 51},
		// Nothing completes after 250 ms: the gap runs to the window's end.
		{name: "tail", samples: probes(t0, 50, nil, nil), from: ms(100), to: ms(600),
			max: 1, gap: 354, seen: 30},
	}
	for _, c := range cases {
		f := dtStall(c.samples, t0.Add(c.from), t0.Add(c.to))
		if math.Abs(f.MaxMs-c.max) > 1e-9 || math.Abs(f.GapMs-c.gap) > 1e-9 || f.Errors != c.errs || f.Probes != c.seen {
			t.Errorf("%s: got %+v; want max %v gap %v errors %d probes %d", c.name, f, c.max, c.gap, c.errs, c.seen)
		}
	}
}

func TestDtWorkloadAround(t *testing.T) {
	secs := []workload.Second{
		{T: 0, Count: 10, P99Ms: 50},
		{T: 1, Count: 10, P99Ms: 20, Errors: 1},
		{T: 2, Count: 0, Errors: 2},
		{T: 3, Count: 10, P99Ms: 900},
		{T: 4, Count: 10, P99Ms: 30},
	}
	// [1.5 s, 3.2 s) overlaps seconds 1, 2 and 3.
	lo, hi, errs := dtWorkloadAround(secs, 1500*time.Millisecond, 3200*time.Millisecond)
	if lo != 1 || hi != 4 || errs != 3 {
		t.Fatalf("got seconds [%d, %d), errors %d; want [1, 4), 3", lo, hi, errs)
	}
	// A window ending on a second's boundary does not reach into the next.
	if lo, hi, errs := dtWorkloadAround(secs, 0, 2*time.Second); lo != 0 || hi != 2 || errs != 1 {
		t.Fatalf("got seconds [%d, %d), errors %d; want [0, 2), 1", lo, hi, errs)
	}
}

func TestDtRecovery(t *testing.T) {
	secs := []workload.Second{
		{T: 0, Count: 10, MeanMs: 10},
		{T: 1, Count: 10, MeanMs: 12},
		{T: 2, Count: 0},                             // frozen
		{T: 3, Count: 40, MeanMs: 300, QueueLen: 20}, // backlog
		{T: 4, Count: 30, MeanMs: 15, QueueLen: 2},   // fast, but still queued
		{T: 5, Count: 20, MeanMs: 25},                // too slow
		{T: 6, Count: 20, MeanMs: 19},
	}
	if m := dtMeanLatency(secs, 0, 2); m != 11 {
		t.Fatalf("mean of seconds 0-1 = %v, want 11", m)
	}
	if m := dtMeanLatency(secs, 2, 3); !math.IsNaN(m) {
		t.Fatalf("mean of an empty second = %v, want NaN", m)
	}
	// Released at 2.6 s: second 2 started before the release; 6 is the first good one.
	if rs, ok := dtRecovery(secs, 2600*time.Millisecond, 20); !ok || math.Abs(rs-4.4) > 1e-9 {
		t.Fatalf("recovery = %v, %v; want 4.4 s", rs, ok)
	}
	if _, ok := dtRecovery(secs, 2600*time.Millisecond, 18); ok {
		t.Fatal("recovered under a limit no second meets")
	}
	// A run that never recovered ranks above the others; most not recovered → -1.
	r := DowntimeResult{Live: []DowntimeRun{{RecoveryS: 2}, {RecoveryS: -1}, {RecoveryS: 1}},
		StopAndCopy: []DowntimeRun{{RecoveryS: -1}, {RecoveryS: 3}, {RecoveryS: -1}}}
	r.summarise()
	if r.LiveRecoveryS != 2 || r.StopAndCopyRecoveryS != -1 {
		t.Fatalf("recovery medians %v, %v; want 2, -1", r.LiveRecoveryS, r.StopAndCopyRecoveryS)
	}
}

func TestDowntimeOptionsCheck(t *testing.T) {
	for _, o := range []DowntimeOptions{{Size: 10}, {Runs: -1}, {Runs: 101}, {TxRate: -1}, {TxRate: math.Inf(1)}, {MPL: -2},
		{Rate: -5}, {Rate: math.NaN()}, {ProbeInterval: time.Microsecond}, {Window: -time.Second}, {Baseline: time.Second},
		{Recover: -1}, {RecoverFactor: 0.5}, {RecoverFactor: math.NaN()}} {
		if err := o.Check(); err == nil || !strings.HasPrefix(err.Error(), "downtime: ") {
			t.Errorf("%+v: error %v", o, err)
		}
	}
	if err := (DowntimeOptions{}).Check(); err != nil {
		t.Errorf("defaults: %v", err)
	}
}

// TestDowntimeSmall runs the whole experiment on a tiny tenant without cgroup
// limits: one live migration and one stop-and-copy under the workload, the
// ledger exact, both figures measured, every output written.
func TestDowntimeSmall(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the testbed runs tenants as the postgres user: needs root")
	}
	if _, err := os.Stat(filepath.Join(cgroup.Root, "memory")); err != nil {
		t.Skip("no cgroup v1")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	bed, err := testbed.Start(ctx, testbed.Options{Binary: testbin.Sluice(t), CPUs: -1, MemoryMB: -1, Progress: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	defer bed.Close()
	out := filepath.Join(t.TempDir(), "downtime")
	res, err := Downtime(ctx, bed, DowntimeOptions{Out: out, Size: 5e6, Runs: 1, TxRate: 50, MPL: 2, Baseline: 2 * time.Second, Settle: time.Second, Progress: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%+v", res)
	if res.WritesAcknowledged == 0 || res.WritesMissing != 0 || res.WritesDuplicated != 0 {
		t.Fatalf("ledger: acknowledged %d, missing %d, duplicated %d", res.WritesAcknowledged, res.WritesMissing, res.WritesDuplicated)
	}
	if len(res.Live) != 1 || len(res.StopAndCopy) != 1 {
		t.Fatalf("runs: %d live, %d stop-and-copy; want 1 each", len(res.Live), len(res.StopAndCopy))
	}
	if !(res.LiveFreezeMs > 0) || !(res.StopAndCopyDowntimeMs > 0) {
		t.Fatalf("live_freeze_ms %v, stop_and_copy_downtime_ms %v: want both > 0", res.LiveFreezeMs, res.StopAndCopyDowntimeMs)
	}
	for _, r := range append(res.Live, res.StopAndCopy...) {
		if !(r.ProbeMaxMs > 0) || !(r.ProbeGapMs > 0) || r.ReleasedAtS < r.HeldAtS || r.From == r.To || r.ID == "" {
			t.Fatalf("run figures: %+v", r)
		}
	}
	if res.Live[0].From != 0 || res.StopAndCopy[0].From != 1 {
		t.Fatalf("moves: live %d→%d, stop-and-copy %d→%d; want A→B then B→A", res.Live[0].From, res.Live[0].To, res.StopAndCopy[0].From, res.StopAndCopy[0].To)
	}

	// summary.json carries the contract's keys.
	b, err := os.ReadFile(filepath.Join(out, "summary.json"))
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"live_freeze_ms", "stop_and_copy_downtime_ms", "writes_acknowledged", "writes_missing", "writes_duplicated", "live", "stop_and_copy"} {
		if _, ok := m[k]; !ok {
			t.Errorf("summary.json lacks %q", k)
		}
	}
	// probe.csv: a header and rows of both modes.
	f, err := os.Open(filepath.Join(out, "probe.csv"))
	if err != nil {
		t.Fatal(err)
	}
	rows, err := csv.NewReader(f).ReadAll()
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	modes := map[string]int{}
	for _, r := range rows[1:] {
		modes[r[3]]++
	}
	if rows[0][0] != "t_s" || modes["live"] == 0 || modes["stop-and-copy"] == 0 {
		t.Fatalf("probe.csv: header %v, rows per mode %v", rows[0], modes)
	}
	if !(res.BaselineMeanMs > 0) || res.RecoveryLimitMs < res.BaselineMeanMs+5 {
		t.Fatalf("baseline %v ms, recovery limit %v ms", res.BaselineMeanMs, res.RecoveryLimitMs)
	}
	for _, name := range []string{"report.md", "downtime.png", "workload.csv"} {
		if st, err := os.Stat(filepath.Join(out, name)); err != nil || st.Size() == 0 {
			t.Errorf("%s: %v", name, err)
		}
	}
}
