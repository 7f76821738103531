package experiment

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	agentclient "github.com/sluicedb/sluice/agent/client"
	"github.com/sluicedb/sluice/control"
	"github.com/sluicedb/sluice/lab/internal/testbin"
	"github.com/sluicedb/sluice/lab/testbed"
	"github.com/sluicedb/sluice/lab/workload"
	"github.com/sluicedb/sluice/loop"
	"github.com/sluicedb/sluice/monitor"
)

func TestMain(m *testing.M) {
	code := m.Run()
	testbin.Remove()
	os.Exit(code)
}

// smallBed starts two servers without cgroup limits (the experiments'
// logic, not their figures, is under test).
func smallBed(t *testing.T) *testbed.Bed {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("agents run PostgreSQL as the postgres user: needs root")
	}
	b, err := testbed.Start(context.Background(), testbed.Options{Binary: testbin.Sluice(t), CPUs: -1, MemoryMB: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

func small(t *testing.T) Common {
	return Common{Out: t.TempDir(), Size: 4e6, Workload: workload.Config{Rate: 40, MPL: 4}, MaxRate: 20e6,
		Warmup: 2 * time.Second, BaselineFor: 2 * time.Second, Progress: t.Logf}
}

func readJSON(t *testing.T, path string) map[string]any {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

// TestSlackSweepSmall runs a fixed trial and two PID trials on real
// PostgreSQL, with (simulated) steal bursts by attempt: every trial's first
// attempt meets one and its migration is aborted (--steal-abort) and rolled
// back with its ledger checked on the source, which the second attempt then
// migrates from. The first PID trial's second attempt meets one too: it is
// kept, marked disturbed, and gets no paired fixed trial (its rate is the
// steal's); the other trials' second attempts run clean, and the clean PID
// trial gets its pair at its copy rate.
func TestSlackSweepSmall(t *testing.T) {
	b := smallBed(t)
	c := small(t)
	// Each attempt's samples start with one taken as it starts, so a new
	// first sample is a new attempt; attempts are numbered in the order
	// they run: the ladder's fixed trial (1, 2), the first PID trial (3,
	// 4), the second (5, 6), its pair (7, 8).
	attempt, first := 0, time.Time{}
	disturbed := map[int]bool{1: true, 3: true, 4: true, 5: true, 7: true}
	burst := func(s []monitor.HostCPUSample, _ time.Duration) float64 {
		if len(s) > 0 && !s[0].At.Equal(first) {
			attempt, first = attempt+1, s[0].At
		}
		if disturbed[attempt] {
			return 0.5
		}
		return 0
	}
	res, err := SlackSweep(context.Background(), b, SweepOptions{Common: c, FixedRates: []float64{4e6}, Setpoints: []float64{50, 60}, Paired: true,
		StealGuard: StealGuard{StealLimit: 0.25, StealRetries: 1, StealAbort: true, stealPeak: burst}})
	if err != nil {
		t.Fatal(err)
	}
	// The ladder's fixed trial, the PIDs', and the fixed trial paired with
	// the clean PID trial at its copy rate (Paired).
	if len(res.Fixed) != 2 || len(res.PID) != 2 {
		t.Fatalf("result %+v: want two fixed points (the ladder's, the pair's) and two PID points", res)
	}
	if len(res.DisturbedFixed) != 2 || len(res.DisturbedPID) != 2 || !res.DisturbedFixed[0].Aborted || !res.DisturbedFixed[1].Aborted || !res.DisturbedPID[0].Aborted || !res.DisturbedPID[1].Aborted {
		t.Fatalf("disturbed attempts %+v, %+v: want every first attempt aborted", res.DisturbedFixed, res.DisturbedPID)
	}
	kept, clean := res.PID[0], res.PID[1]
	if kept.Disturbed == clean.Disturbed {
		t.Fatalf("PID points %+v, %+v: want the first kept disturbed, the second clean", kept, clean)
	}
	if res.Fixed[0].Disturbed || res.Fixed[0].Aborted || kept.Aborted || clean.Aborted || !kept.Disturbed {
		t.Fatalf("kept trials %+v, %+v, %+v: want all run to the end, the first PID's marked disturbed", res.Fixed[0], kept, clean)
	}
	if kept.PairFixed != nil {
		t.Fatalf("PID point kept disturbed %+v: want no paired fixed trial", kept)
	}
	pair := clean.PairFixed
	if !(clean.CopyRateMBs > 0) || pair == nil || clean.PairFirst != "pid" || pair.PairOfMs != clean.SetpointMs || res.Fixed[1].PairOfMs != clean.SetpointMs || res.Fixed[0].PairOfMs != 0 ||
		math.Abs(pair.RateMBs-clean.CopyRateMBs) > 0.01 || !(pair.MigrationSeconds > 0) {
		t.Fatalf("PID point %+v, pair %+v: want a fixed trial at the PID's copy rate, marked as its pair", clean, pair)
	}
	// Four migrations committed (0 → 1, 1 → 0, 0 → 1, 1 → 0); the aborted ones moved nothing.
	if owner, _, err := b.Owner(context.Background(), testbed.Tenant{Name: "sweep"}); err != nil || owner != 0 {
		t.Fatalf("tenant on server %d (%v) after the sweep, want 0", owner, err)
	}
	if res.PID[0].LoopMeanMs == nil {
		t.Fatalf("PID point %+v: no loop mean", res.PID[0])
	}
	if p := res.PID[0]; p.LatencySource != "proxy" || p.Loop != control.DefaultProfileName {
		t.Fatalf("PID point %+v: want the default loop, steering by the proxy's windows", p)
	}
	for _, x := range []float64{res.Fixed[0].MeanLatencyMs, res.Fixed[0].MigrationSeconds, res.PID[0].MeanLatencyMs, res.PID[0].MigrationSeconds, res.PID[0].MeanRateMBs,
		res.Fixed[0].BeforeHandoverMs, res.Fixed[0].FreezeMs, res.PID[0].BeforeHandoverMs, *res.PID[0].LoopMeanMs, res.PID[0].FreezeMs} {
		if !(x > 0) {
			t.Fatalf("result %+v: a figure is not positive", res)
		}
	}
	m := readJSON(t, filepath.Join(c.Out, SummaryFile))
	if len(m) != 4 || m["fixed"] == nil || m["pid"] == nil || m["disturbed_fixed"] == nil || m["disturbed_pid"] == nil {
		t.Fatalf("summary keys %v: want exactly fixed, pid, disturbed_fixed and disturbed_pid", m)
	}
	if d, ok := m["disturbed_pid"].([]any); !ok || len(d) != 2 || d[0].(map[string]any)["aborted"] != true || d[1].(map[string]any)["aborted"] != true {
		t.Fatalf("summary's disturbed_pid %v: want two attempts marked aborted", m["disturbed_pid"])
	}
	if rep, err := os.ReadFile(filepath.Join(c.Out, ReportFile)); err != nil || strings.Count(string(rep), "(aborted)") != 4 || !strings.Contains(string(rep), "against its paired fixed trial") {
		t.Errorf("report: %v; want the four aborted attempts marked (aborted) and the pair's table:\n%s", err, rep)
	}
	for _, f := range []string{SeriesFile, ReportFile, "sweep.png", "setpoints.png", "pid-50ms.png", "pid-60ms.png"} {
		if st, err := os.Stat(filepath.Join(c.Out, f)); err != nil || st.Size() == 0 {
			t.Errorf("%s: %v", f, err)
		}
	}
}

// TestSlackSweepStopped: a sweep interrupted in its second trial still
// writes the first trial's figures, says in its report that it stopped, and
// returns the interruption.
func TestSlackSweepStopped(t *testing.T) {
	b := smallBed(t)
	c := small(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c.Progress = func(format string, args ...any) {
		t.Logf(format, args...)
		if strings.HasPrefix(format, "%s: migrating") && strings.HasPrefix(fmt.Sprint(args[0]), "pid-") {
			cancel() // the PID trial is starting
		}
	}
	res, err := SlackSweep(ctx, b, SweepOptions{Common: c, FixedRates: []float64{8e6}, Setpoints: []float64{50}})
	if !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "stopped after 1 finished trials") {
		t.Fatalf("err %v: want the interruption, after 1 finished trial", err)
	}
	if len(res.Fixed) != 1 || len(res.PID) != 0 {
		t.Fatalf("result %+v: want the fixed trial only", res)
	}
	m := readJSON(t, filepath.Join(c.Out, SummaryFile))
	if f, ok := m["fixed"].([]any); !ok || len(f) != 1 {
		t.Fatalf("summary %v: want the one fixed trial", m)
	}
	rep, err := os.ReadFile(filepath.Join(c.Out, ReportFile))
	if err != nil || !strings.Contains(string(rep), "**Stopped** before its end") || !strings.Contains(string(rep), "1 of the 2 trials finished") {
		t.Fatalf("report (%v) does not say it stopped after 1 of 2 trials:\n%s", err, rep)
	}
	if owner, _, err := b.Owner(context.Background(), testbed.Tenant{Name: "sweep"}); err != nil || owner != 1 {
		t.Fatalf("tenant on server %d (%v), want 1: the interrupted migration rolled back", owner, err)
	}
}

// TestSlackSweepBaselineAboveSetpoint: a setpoint at or under the baseline
// stops the sweep before any trial, with an error that says so, and writes
// no results.
func TestSlackSweepBaselineAboveSetpoint(t *testing.T) {
	b := smallBed(t)
	c := small(t)
	_, err := SlackSweep(context.Background(), b, SweepOptions{Common: c, FixedRates: []float64{8e6}, Setpoints: []float64{50, 0.01}})
	if err == nil || !strings.Contains(err.Error(), "at or above the setpoint 0.0 ms") {
		t.Fatalf("err %v: want the baseline-above-setpoint error", err)
	}
	if _, err := os.Stat(filepath.Join(c.Out, SummaryFile)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("summary after the refusal: %v, want none", err)
	}
	if owner, _, err := b.Owner(context.Background(), testbed.Tenant{Name: "sweep"}); err != nil || owner != 0 {
		t.Errorf("tenant on server %d (%v), want 0: no migration", owner, err)
	}
}

// TestMultitenantSmall moves one of two tenants under the default loop,
// then, moved back, under a variant that steers by the workload's own
// window too (its URL served by the trial) with another integral gain.
func TestMultitenantSmall(t *testing.T) {
	b := smallBed(t)
	c := small(t)
	v, err := ParseVariant(control.DefaultProfile(), "ki=0.1,latency=client")
	if err != nil {
		t.Fatal(err)
	}
	c.Variants = []Variant{v}
	res, err := Multitenant(context.Background(), b, MultiOptions{Common: c, Tenants: 2, SetpointMs: 50})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Variants) != 1 || res.Loop != "sluice" || res.Variants[0].Loop != "sluice(ki=0.1,latency=client)" {
		t.Fatalf("result %+v: want the base loop's run and the variant's", res)
	}
	for _, r := range []MultiRun{res.MultiRun, res.Variants[0]} {
		if len(r.Tenants) != 2 || !r.Tenants[0].Moved || r.Tenants[1].Moved || r.WritesAcknowledged == 0 || !(r.ServerMeanLatencyMs > 0) {
			t.Fatalf("run %+v", r)
		}
	}
	if owner, _, err := b.Owner(context.Background(), testbed.Tenant{Name: "tenant1"}); err != nil || owner != 1 {
		t.Fatalf("tenant1 on server %d (%v), want 1", owner, err)
	}
	if owner, _, err := b.Owner(context.Background(), testbed.Tenant{Name: "tenant2"}); err != nil || owner != 0 {
		t.Fatalf("tenant2 on server %d (%v), want 0", owner, err)
	}
	m := readJSON(t, filepath.Join(c.Out, SummaryFile))
	if m["loop"] != "sluice" || m["server_mean_latency_ms"] == nil || m["variants"] == nil {
		t.Errorf("summary %v: want the base run's keys at the top and the variants", m)
	}
	for _, f := range []string{ReportFile, "multitenant.png", "multitenant-sluice(ki=0.1,latency=client).png"} {
		if st, err := os.Stat(filepath.Join(c.Out, f)); err != nil || st.Size() == 0 {
			t.Errorf("%s: %v", f, err)
		}
	}
}

// TestStepLoadSmall runs step40's logic on a small tenant: both trials, the
// stepped load's baseline (measured at Factor × the rate, so with more
// transactions), and the summary's keys. A simulated steal burst in every
// attempt (StealGuard, one re-run, aborting) aborts the first PID and the
// first fixed migration — each rolled back, its ledger checked on the
// source — and each re-run goes to its end, kept and marked disturbed.
func TestStepLoadSmall(t *testing.T) {
	b := smallBed(t)
	c := small(t)
	// A copy of several seconds, so the step lands inside both trials; a
	// baseline long enough to hold whole 3 s windows (else it is never
	// "settled" and is measured three times).
	c.Size, c.BaselineFor = 40e6, 6*time.Second
	burst := func([]monitor.HostCPUSample, time.Duration) float64 { return 0.5 }
	res, err := StepLoad(context.Background(), b, StepOptions{Common: c, SetpointMs: 50, StepAfter: 2 * time.Second, Settle: time.Second,
		StealGuard: StealGuard{StealLimit: 0.25, StealRetries: 1, StealAbort: true, stealPeak: burst}})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Disturbed) != 2 || res.Disturbed[0].Controller != "pid" || res.Disturbed[1].Controller != "fixed" || !res.Disturbed[0].Aborted || !res.Disturbed[1].Aborted {
		t.Fatalf("disturbed attempts %+v: want the first PID and the first fixed attempt, both aborted", res.Disturbed)
	}
	if !res.PID.Disturbed || !res.Fixed.Disturbed || res.PID.Aborted || res.Fixed.Aborted {
		t.Errorf("kept trials %+v / %+v: want both run to their end and marked disturbed", res.PID, res.Fixed)
	}
	// The PID moved it to server 1, the fixed rate back: the aborted
	// attempts left it where it was.
	if owner, _, err := b.Owner(context.Background(), testbed.Tenant{Name: "step"}); err != nil || owner != 0 {
		t.Errorf("tenant on server %d (%v) after the trials, want 0", owner, err)
	}
	if rep, err := os.ReadFile(filepath.Join(c.Out, ReportFile)); err != nil || !strings.Contains(string(rep), "(aborted)") || !strings.Contains(string(rep), "(disturbed)") {
		t.Errorf("report (%v) does not list the aborted attempts and the disturbed trials:\n%s", err, rep)
	}
	if !(res.BaselineMs > 0) || !(res.BaselineAfterStepMs > 0) || res.SetpointMs != 50 {
		t.Fatalf("result %+v: want both baselines measured and the setpoint given", res)
	}
	for _, r := range []StepRun{res.PID, res.Fixed} {
		if !(r.MeanLatencyBeforeMs > 0) || !(r.MigrationSeconds > 0) {
			t.Fatalf("result %+v: a trial's figures are missing", res)
		}
		if r.CopyAfterStepS <= 0 || r.CopyAfterStepS > r.MigrationSeconds {
			t.Errorf("trial %+v: copy after the step %v s, want within the migration's %v s", r, r.CopyAfterStepS, r.MigrationSeconds)
		}
		// /proc/stat is readable here: the host's steal is measured (its
		// 10 s peak only when the migration lasts that long).
		if r.HostStealPct == nil || *r.HostStealPct < 0 || *r.HostStealPct > 100 {
			t.Errorf("trial %+v: want the host's steal measured, a percentage", r)
		}
	}
	m := readJSON(t, filepath.Join(c.Out, SummaryFile))
	if pid, _ := m["pid"].(map[string]any); pid == nil || pid["copy_after_step_s"] == nil {
		t.Errorf("summary's pid has no copy_after_step_s: %v", m["pid"])
	}
	for _, k := range []string{"pid", "fixed", "setpoint_ms", "baseline_ms", "baseline_after_step_ms", "disturbed"} {
		if _, ok := m[k]; !ok {
			t.Errorf("summary has no %q: %v", k, m)
		}
	}
	for _, f := range []string{SeriesFile, ReportFile, "step.png"} {
		if st, err := os.Stat(filepath.Join(c.Out, f)); err != nil || st.Size() == 0 {
			t.Errorf("%s: %v", f, err)
		}
	}
}

func TestFixedSecondsAt(t *testing.T) {
	fixed := []FixedPoint{{MeanLatencyMs: 30, MigrationSeconds: 50}, {MeanLatencyMs: 10, MigrationSeconds: 200}, {MeanLatencyMs: 20, MigrationSeconds: 100}}
	for _, c := range []struct {
		lat, want float64
		ok        bool
	}{{10, 200, true}, {15, 150, true}, {25, 75, true}, {30, 50, true}, {5, 0, false}, {31, 0, false}} {
		got, ok := FixedSecondsAt(fixed, c.lat)
		if ok != c.ok || got != c.want {
			t.Errorf("at %v ms: %v, %v; want %v, %v", c.lat, got, ok, c.want, c.ok)
		}
	}
}

func TestFixedLatencyAt(t *testing.T) {
	fixed := []FixedPoint{{MeanLatencyMs: 30, MigrationSeconds: 50}, {MeanLatencyMs: 10, MigrationSeconds: 200}, {MeanLatencyMs: 20, MigrationSeconds: 100}}
	for _, c := range []struct {
		secs, want float64
		ok         bool
	}{{200, 10, true}, {150, 15, true}, {75, 25, true}, {50, 30, true}, {40, 0, false}, {201, 0, false}} {
		got, ok := FixedLatencyAt(fixed, c.secs)
		if ok != c.ok || got != c.want {
			t.Errorf("at %v s: %v, %v; want %v, %v", c.secs, got, ok, c.want, c.ok)
		}
	}
}

func TestRateBetween(t *testing.T) {
	r := &TrialResult{MigStart: 10}
	// 1 MB/s for 10 s (the ramp), then 5 MB/s; catch-up restarts the count.
	for s := 11; s <= 40; s++ {
		b := int64(s-10) * 1e6
		if s > 20 {
			b = 10e6 + int64(s-20)*5e6
		}
		r.Loop = append(r.Loop, loop.Point{T: float64(s), Bytes: b, Phase: "snapshot"})
	}
	r.Loop = append(r.Loop, loop.Point{T: 41, Bytes: 1, Phase: "catch-up"})
	if got := rateBetween(r, 25, 40); math.Abs(got-5e6) > 1 {
		t.Errorf("rate over 25..40 s = %v, want 5e6", got)
	}
	if got := rateBetween(r, 0, 20); math.Abs(got-1e6) > 1 {
		t.Errorf("rate from the start to 20 s = %v, want 1e6", got)
	}
	if got := rateBetween(r, 0, 45); math.Abs(got-110e6/30) > 1 {
		t.Errorf("rate from the start to 45 s = %v, want the snapshot's mean (catch-up ignored)", got)
	}
	if got := rateBetween(&TrialResult{}, 0, 10); got != 0 {
		t.Errorf("no record: %v", got)
	}
	// The fixed rate of equal speed: with no law step recorded (a slow
	// start to the step), the 20 s before a step at 40 s.
	r.StepAt = 40
	if got, from := equalSpeed(r); math.Abs(got-5e6) > 1 || from != 20 {
		t.Errorf("equal speed before a step at 40 s = %v from %v s, want 5e6 from 20 s", got, from)
	}
	// The slow start ends at 15 s (the first law step): from there, at
	// 1 MB/s for 5 s then 5 MB/s for 20 s.
	for i := range r.Loop {
		switch {
		case r.Loop[i].T < 15:
			r.Loop[i].Reason = "pid slow start pv=3ms u=0.1"
		case r.Loop[i].T <= 40:
			r.Loop[i].Reason = control.LawReason + "4ms e=+0.1 u=0.2"
		}
	}
	if got, from := equalSpeed(r); math.Abs(got-105e6/25) > 1 || from != 15 {
		t.Errorf("equal speed from the slow start's end = %v from %v s, want 105 MB over 25 s from 15 s", got, from)
	}
	// A law step later than 20 s before the step does not shorten the window.
	for i := range r.Loop {
		if r.Loop[i].T < 30 {
			r.Loop[i].Reason = "pid slow start"
		}
	}
	if got, from := equalSpeed(r); math.Abs(got-5e6) > 1 || from != 20 {
		t.Errorf("equal speed with a late law step = %v from %v s, want 5e6 from 20 s", got, from)
	}
	// A PID paused through the window (bytes flat from 20 s) gets its whole
	// pre-step copy's mean instead.
	for i := range r.Loop {
		if r.Loop[i].T > 20 && r.Loop[i].Phase == "snapshot" {
			r.Loop[i].Bytes = 10e6
		}
	}
	if got, from := equalSpeed(r); math.Abs(got-10e6/30) > 1 || from != r.MigStart {
		t.Errorf("equal speed after a paused window = %v from %v s, want the copy's mean 10 MB over 30 s", got, from)
	}
	if got, _ := equalSpeed(&TrialResult{StepAt: 40}); got != 0 {
		t.Errorf("equal speed with no record = %v, want 0", got)
	}
}

// TestWindowMeans: each window pools the transactions of its seconds (a
// busy second weighs more than a quiet one), empty windows are skipped, and
// the p90 is the nearest-rank quantile of the (sorted) windows.
func TestWindowMeans(t *testing.T) {
	secs := [][]float64{{1, 1}, {4}, {}, {}, {}, {10, 10, 10, 10}}
	lat := func(a, b int) []float64 {
		var out []float64
		for s := a; s < b && s < len(secs); s++ {
			out = append(out, secs[s]...)
		}
		return out
	}
	got := WindowMeans(lat, 0, len(secs), 3)
	want := []float64{2, 4, 10} // seconds 0-2 {1,1,4}, 1-3 {4}, 2-4 {} skipped, 3-5 {10×4}
	if len(got) != len(want) {
		t.Fatalf("windows %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("windows %v, want %v", got, want)
		}
	}
	if p := workload.Quantile(got, 0.9); p != 10 {
		t.Errorf("p90 %v, want 10", p)
	}
	if p := workload.Quantile([]float64{1, 2, 3}, 0.5); p != 2 {
		t.Errorf("median of 1,2,3: %v, want 2", p)
	}
}

// TestStepsAtRate counts the steps in the window that set the top speed
// (float noise below it included), and no others.
func TestStepsAtRate(t *testing.T) {
	r := &TrialResult{Loop: []loop.Point{{T: 0, Rate: 80e6}, {T: 1, Rate: 80e6 * (1 - 1e-9)}, {T: 2, Rate: 40e6}, {T: 3, Rate: 80e6}, {T: 4, Rate: 80e6}}}
	if n := r.StepsAtRate(1, 4, 80e6); n != 2 {
		t.Fatalf("%d steps at top speed in [1, 4), want 2 (t=1 and t=3)", n)
	}
}

// TestBaselineSettled: a baseline made by a stall (mean far above its median
// 3 s window) is not settled; the plant's ordinary spread is.
func TestBaselineSettled(t *testing.T) {
	cases := []struct {
		name string
		st   Stats
		want bool
	}{
		{"steady", Stats{Mean: 2.3, Std: 3.6, N: 2000, Window50: 2.2, Window90: 2.7}, true},
		{"spiky but typical", Stats{Mean: 3.1, Std: 10.2, N: 2000, Window50: 2.6, Window90: 3.9}, true},
		{"at the bound", Stats{Mean: 4, N: 10, Window50: 2}, true},
		{"a stall of a few seconds", Stats{Mean: 17.8, Std: 67, N: 2000, Window50: 3.1, Window90: 100.3}, false},
		{"no windows", Stats{Mean: 2, N: 10}, false},
		{"no transactions", Stats{}, false},
	}
	for _, c := range cases {
		if got := c.st.Settled(); got != c.want {
			t.Errorf("%s: Settled() = %v, want %v", c.name, got, c.want)
		}
	}
}

// TestTrialTargetCPUs: a trial with TargetCPUs gives the server the tenant
// moves to that quota and its source the bed's, before the migration, and
// the tenant arrives whole; on a bed without CPU caps it fails before
// anything starts. A calm level the plant never reaches holds the start
// only for CalmMax.
func TestTrialTargetCPUs(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for cgroups")
	}
	if _, err := os.Stat("/sys/fs/cgroup/cpu"); err != nil {
		t.Skip("no cgroup v1 cpu controller")
	}
	ctx := context.Background()
	b, err := testbed.Start(ctx, testbed.Options{Binary: testbin.Sluice(t), CPUs: 1, MemoryMB: 1024})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	tn, err := b.CreateTenant(ctx, 0, "quota", 4e6, 1)
	if err != nil {
		t.Fatal(err)
	}
	// The source's quota was changed by someone: the trial puts it back.
	if err := b.SetCPUs(0, 0.7); err != nil {
		t.Fatal(err)
	}
	c := small(t)
	// A calm level no plant reaches: the start is held for CalmMax, then
	// the trial migrates anyway and says so. The step counts from the
	// migration's start, not the workload's.
	r, err := Trial{Bed: b, Tenant: tn, To: 1, Workload: c.Workload, Warmup: time.Second, TargetCPUs: 1.5, Progress: t.Logf,
		CalmBelow: 1e-6, CalmMax: 2 * time.Second, Migration: agentclient.StartMigration{Rate: 20e6}, Load: Step(500*time.Millisecond, 1.5)}.Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if r.Calm || r.CalmWait < 2 || r.MigStart < 2.5 {
		t.Errorf("held for an unreachable calm: Calm %v after %.1f s, migration started at %.1f s; want false, >= 2 s, >= 2.5 s", r.Calm, r.CalmWait, r.MigStart)
	}
	if r.StepAt < r.MigStart+0.5 {
		t.Errorf("step at %.2f s, migration's start at %.2f s: want the step 0.5 s after the start", r.StepAt, r.MigStart)
	}
	if !r.Check.OK() || r.Check.Acknowledged == 0 {
		t.Fatalf("ledger %+v", r.Check)
	}
	if src, dst := b.CPUs(0), b.CPUs(1); src != 1 || dst != 1.5 {
		t.Errorf("after the trial: source %v CPU, target %v; want 1 (the bed's) and 1.5", src, dst)
	}
	if owner, _, err := b.Owner(ctx, tn); err != nil || owner != 1 {
		t.Fatalf("tenant on server %d (%v), want 1", owner, err)
	}
	// To the server it is on already: an error, no migration.
	if _, err := (Trial{Bed: b, Tenant: tn, To: 1, Workload: c.Workload, TargetCPUs: 1.5}).Run(ctx); err == nil {
		t.Error("a trial to the tenant's own server: no error")
	}
	// A schedule that stops the load: refused before anything starts.
	if _, err := (Trial{Bed: b, Tenant: tn, To: 0, Workload: c.Workload, Load: Step(time.Second, 0)}).Run(ctx); err == nil || !strings.Contains(err.Error(), "load schedule") {
		t.Errorf("a step to no load: %v, want refused", err)
	}
	// A swing: its high and low rates during the migration, the steady
	// rate after it; the tenant moves back whole.
	r, err = Trial{Bed: b, Tenant: tn, To: 0, Workload: c.Workload, Warmup: time.Second, Progress: t.Logf,
		Migration: agentclient.StartMigration{Rate: 2e6}, Load: Swing(2*time.Second, 0.5)}.Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !r.Check.OK() || r.Check.Acknowledged == 0 {
		t.Fatalf("swing: ledger %+v", r.Check)
	}
	seen := map[float64]bool{}
	for _, s := range r.Seconds {
		if float64(s.T) > r.MigStart && float64(s.T) < r.MigEnd-1 {
			seen[s.Rate] = true
		}
	}
	if tail := r.Seconds[len(r.Seconds)-1].Rate; !seen[60] || !seen[20] || tail != 40 {
		t.Errorf("swing ±50 %% of 40/s over a %.1f s migration: rates seen %v, after it %v; want 60 and 20, then 40", r.MigEnd-r.MigStart, seen, tail)
	}

	free := smallBed(t)
	ftn, err := free.CreateTenant(ctx, 0, "free", 2e6, 1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := (Trial{Bed: free, Tenant: ftn, To: 1, Workload: c.Workload, TargetCPUs: 1}).Run(ctx); err == nil || !strings.Contains(err.Error(), "no CPU cap") {
		t.Errorf("TargetCPUs on a bed without CPU caps: %v; want the no-cap error", err)
	}
	if owner, _, err := free.Owner(ctx, ftn); err != nil || owner != 0 {
		t.Errorf("after the refused trial the tenant is on server %d (%v), want 0", owner, err)
	}
}

// TestCopyEnd: the hot copy ends at the loop's last snapshot step, whatever
// follows; a record with none ends at the migration's start.
func TestCopyEnd(t *testing.T) {
	r := &TrialResult{MigStart: 5, Loop: []loop.Point{
		{T: 5, Phase: "snapshot"}, {T: 6, Phase: "snapshot"}, {T: 9, Phase: "snapshot"},
		{T: 10, Phase: "catch-up"}, {T: 14, Phase: "warm"}, {T: 15, Phase: "handover"},
	}}
	if got := copyEnd(r); got != 9 {
		t.Errorf("copy end %v, want 9", got)
	}
	r.Loop = r.Loop[3:]
	if got := copyEnd(r); got != 5 {
		t.Errorf("no snapshot step: copy end %v, want the start 5", got)
	}
	// A fixed-rate migration has no loop: its progress says.
	r.Loop, r.CopyEnd = nil, 12
	if got := copyEnd(r); got != 12 {
		t.Errorf("no loop, progress in the copy until 12: copy end %v, want 12", got)
	}
}
