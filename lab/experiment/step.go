package experiment

import (
	"context"
	"fmt"
	"math"
	"strings"
	"time"

	agentclient "github.com/sluicedb/sluice/agent/client"
	"github.com/sluicedb/sluice/control"
	"github.com/sluicedb/sluice/lab/chart"
	"github.com/sluicedb/sluice/lab/testbed"
	"github.com/sluicedb/sluice/loop"
)

// StepOptions configure the step experiment (Slacker Fig. 13a).
type StepOptions struct {
	Common
	// SetpointMs is the PID's setpoint; default 3 × the baseline mean latency.
	SetpointMs float64
	// StepAfter is when, after the migration starts, the arrival rate steps
	// up; default 60 s.
	StepAfter time.Duration
	// Factor multiplies the arrival rate at the step; default 1.4 (+40 %).
	Factor float64
	// Settle is how long after the step the "after" window starts; default 10 s.
	Settle time.Duration
	// StealGuard re-runs (and with StealAbort aborts) a trial that met a
	// host steal burst: the PID's until it is undisturbed or out of
	// re-runs, then the fixed rate's, of the kept PID trial's speed.
	StealGuard
}

// StepRun is one controller's figures (JSON keys are `sluice bench step40
// --json`'s). Latencies are means over the migrating tenant's transactions:
// before = from the migration's start to the step; after = from the step +
// Settle to the migration's end.
//
// MeanLatencyAfterMs covers step + Settle up to the handover's hold: the
// regime the controller sets after the step. The handover (freeze and the
// drain of the queue it builds, the same for both controllers) is in
// MeanLatencyAfterWithHandoverMs, which runs to the migration's end.
type StepRun struct {
	MeanLatencyBeforeMs            float64 `json:"mean_latency_before_ms"`
	MeanLatencyAfterMs             float64 `json:"mean_latency_after_ms"`
	MigrationSeconds               float64 `json:"migration_seconds"`
	MeanLatencyAfterWithHandoverMs float64 `json:"mean_latency_after_with_handover_ms"`
	// HostStealPct and HostStealPeakPct are the share (%) of the machine's
	// CPU time the hypervisor stole over the whole migration and over its
	// worst StealSpan (TrialResult.HostSteal, HostStealPeak): a burst in
	// the "after" window slows the workload whatever the rate. Absent if
	// unmeasured.
	HostStealPct     *float64 `json:"host_steal_pct,omitempty"`
	HostStealPeakPct *float64 `json:"host_steal_peak_pct,omitempty"`
	// Disturbed says the host's steal peaked above StealGuard.StealLimit
	// in this trial, kept because it had no re-run left; Aborted, in
	// StepResult.Disturbed, that the attempt was aborted (its figures run
	// to the abort, the tenant stayed on its source).
	Disturbed bool `json:"disturbed,omitempty"`
	Aborted   bool `json:"aborted,omitempty"`
	// CopyAfterStepS is how long the hot copy (phase snapshot) ran after
	// the step, seconds (0: it ended before). The rest of the "after"
	// window is catch-up and warm, where the loop's catch-up floor
	// (loop.Loop.Lag) may hold the rate above the controller's: an
	// "after" window with little copy in it measures that floor more than
	// the controller.
	CopyAfterStepS float64 `json:"copy_after_step_s"`
}

// minCopyAfterStep is the least copy after the step (seconds) below which
// step40 warns that its "after" window is mostly catch-up.
const minCopyAfterStep = 30.0

// StepAttempt is an attempt re-run because the host's steal went above
// StealGuard.StealLimit.
type StepAttempt struct {
	Controller string `json:"controller"` // "pid" or "fixed"
	StepRun
}

// StepResult is `sluice bench step40 --json`.
//
// BaselineAfterStepMs is the mean latency of the stepped load (Factor ×
// the arrival rate) on the tenant with no migration, measured before the
// trials: a setpoint at or under it cannot be held after the step by any
// migration speed, only by pausing and then not fully (Slacker's Fig. 13a
// assumes the stepped load still leaves slack).
type StepResult struct {
	PID                 StepRun `json:"pid"`
	Fixed               StepRun `json:"fixed"`
	SetpointMs          float64 `json:"setpoint_ms"`
	BaselineMs          float64 `json:"baseline_ms"`
	BaselineAfterStepMs float64 `json:"baseline_after_step_ms"`
	// FixedRateMBs is the fixed trial's rate, MB/s: the PID's mean over
	// the FixedRateWindowS seconds before the step (equalSpeed).
	FixedRateMBs     float64 `json:"fixed_rate_mb_s"`
	FixedRateWindowS float64 `json:"fixed_rate_window_s"`
	// Disturbed are the attempts re-run (StealGuard), in the order run.
	Disturbed []StepAttempt `json:"disturbed,omitempty"`
}

// StepLoad runs the PID at a setpoint while the arrival rate steps up
// StepAfter into the migration, then a fixed rate equal to the PID's mean
// rate before the step under the same step: the PID slows down and returns
// to its setpoint, the fixed rate cannot. Writes series.csv, summary.json,
// report.md, step.png into o.Out.
func StepLoad(ctx context.Context, bed *testbed.Bed, o StepOptions) (StepResult, error) {
	var res StepResult
	if err := o.defaults(); err != nil {
		return res, err
	}
	if o.StepAfter == 0 {
		o.StepAfter = 60 * time.Second
	}
	if o.Factor == 0 {
		o.Factor = 1.4
	}
	if o.Settle == 0 {
		o.Settle = 10 * time.Second
	}
	if o.Factor <= 0 || o.StepAfter < 0 || o.SetpointMs < 0 {
		return res, fmt.Errorf("experiment: step factor %v, step after %v, setpoint %v ms: want positive values", o.Factor, o.StepAfter, o.SetpointMs)
	}
	if err := o.StealGuard.check(); err != nil {
		return res, err
	}
	started := time.Now()
	say := o.Progress
	tn, err := bed.CreateTenant(ctx, 0, "step", o.Size, o.Seed+1)
	if err != nil {
		return res, err
	}
	base, err := SettledBaseline(ctx, tn, o.Workload, o.BaselineFor, o.Seed+2, say)
	if err != nil {
		return res, err
	}
	if o.SetpointMs == 0 {
		o.SetpointMs = round(3*base.Mean, 1)
	}
	if base.Mean >= o.SetpointMs {
		// Seen 2026-11-26 21:43 UTC in a host steal phase: a 14.8 ms
		// baseline under a 7 ms setpoint; the PID paused through the copy
		// and its "equal speed" was 0.7 MB/s, a fixed trial of an hour.
		return res, fmt.Errorf("experiment: the baseline mean latency %.1f ms (at %.0f transactions/s, no migration) is at or above the setpoint %.1f ms: the PID could only pause, and a fixed rate of its speed would crawl; run again on a quieter host or raise --setpoint", base.Mean, o.Workload.Rate, o.SetpointMs)
	}
	res.SetpointMs, res.BaselineMs = o.SetpointMs, round(base.Mean, 2)
	stepped := o.Workload
	stepped.Rate *= o.Factor
	sbase, err := SettledBaseline(ctx, tn, stepped, o.BaselineFor, o.Seed+3, say)
	if err != nil {
		return res, err
	}
	res.BaselineAfterStepMs = round(sbase.Mean, 2)
	say("baseline: mean latency %.1f ms ± %.1f at %.0f transactions/s, %.1f ms ± %.1f at %.0f (after the step, no migration); setpoint %.1f ms; +%.0f %% arrivals %v into the migration",
		base.Mean, base.Std, o.Workload.Rate, sbase.Mean, sbase.Std, stepped.Rate, o.SetpointMs, 100*(o.Factor-1), o.StepAfter)
	if sbase.Mean >= o.SetpointMs {
		say("warning: the stepped load alone is at or above the setpoint (%.1f ≥ %.1f ms): after the step the PID can only pause", sbase.Mean, o.SetpointMs)
	}

	// The step's time counts from the migration's start: a trial that
	// waits for a calm plant (CalmBelow) once stepped 5 s before its
	// migration began, when the step counted from the workload's start
	// (2026-11-27 01:30 UTC).
	step := &Step{At: o.StepAfter, Factor: o.Factor}
	once := func(name string, to int, req agentclient.StartMigration, abort float64) (*TrialResult, StepRun, error) {
		say("%s: migrating %s to %s", name, tn.Name, bed.Servers[to].Name)
		wc := o.Workload
		wc.Seed = o.Seed + uint64(to) + 10
		req.Checkpoint, req.WALRelay = o.Checkpoint, o.WALRelay
		r, err := Trial{Bed: bed, Tenant: tn, To: to, Workload: wc, Warmup: o.Warmup, Migration: req, Step: step, TargetCPUs: o.TargetCPUs, CalmBelow: o.calmBelow(base), ClientLatency: o.ClientLatency, AbortAboveSteal: abort, Progress: say, stealPeak: o.stealPeak}.Run(ctx)
		if err != nil {
			return r, StepRun{}, fmt.Errorf("%s: %w", name, err)
		}
		sr := StepRun{MigrationSeconds: round(r.MigEnd-r.MigStart, 1), MeanLatencyAfterMs: math.NaN(), MeanLatencyAfterWithHandoverMs: math.NaN()}
		stepAt := r.StepAt
		if stepAt < 0 || stepAt > r.MigEnd {
			stepAt = r.MigEnd
		}
		sr.MeanLatencyBeforeMs = round(Describe(r.Latencies(r.MigStart, stepAt)).Mean, 2)
		after := stepAt + o.Settle.Seconds()
		if _, hold := r.BeforeHandover(); after < hold {
			sr.MeanLatencyAfterMs = round(Describe(r.Latencies(after, hold)).Mean, 2)
		}
		if after < r.MigEnd {
			sr.MeanLatencyAfterWithHandoverMs = round(Describe(r.Latencies(after, r.MigEnd)).Mean, 2)
		}
		sr.HostStealPct, sr.HostStealPeakPct = pct(r.HostSteal), pct(r.HostStealPeak)
		sr.Aborted = r.Aborted
		sr.CopyAfterStepS = round(max(copyEnd(r)-stepAt, 0), 1)
		say("%s: before the step %.1f ms, after %.1f ms (setpoint %.1f; with the handover %.1f), %.1f s%s", name, sr.MeanLatencyBeforeMs, sr.MeanLatencyAfterMs, o.SetpointMs, sr.MeanLatencyAfterWithHandoverMs, sr.MigrationSeconds, throttleNote(nil, nil, sr.HostStealPct, sr.HostStealPeakPct))
		return r, sr, nil
	}
	// run is once until the trial is undisturbed or out of re-runs; an
	// aborted attempt left the tenant on its source, so every attempt
	// migrates the same way.
	run := func(name string, to int, req agentclient.StartMigration) (*TrialResult, StepRun, error) {
		for attempt := 1; ; attempt++ {
			r, sr, err := once(name, to, req, o.abortAt(attempt))
			if err != nil || !o.again(r, attempt) {
				sr.Disturbed = err == nil && o.disturbed(r)
				return r, sr, err
			}
			say("%s", o.rerunNote(name, r, attempt))
			res.Disturbed = append(res.Disturbed, StepAttempt{Controller: strings.SplitN(name, "-", 2)[0], StepRun: sr})
		}
	}
	pr, ps, err := run("pid", 1, agentclient.StartMigration{Rate: o.MaxRate * StartFraction, Control: o.pidControl(o.SetpointMs)})
	if err != nil {
		return res, err
	}
	res.PID = ps
	if pr.StepAt < 0 || pr.StepAt >= pr.MigEnd {
		return jsonSafe(res), fmt.Errorf("experiment: the PID's migration ended %.0f s after its start, before the step at %v: use a larger --size or an earlier --step-after", pr.MigEnd-pr.MigStart, step.At)
	}
	if ps.CopyAfterStepS < minCopyAfterStep {
		say("warning: the PID's copy ended %.0f s after the step: its 'after' window is mostly catch-up, paced by the loop's catch-up floor more than by the PID (use a larger --size or an earlier --step-after)", ps.CopyAfterStepS)
	}
	fixedRate, from := equalSpeed(pr)
	if !(fixedRate > 0) {
		return res, fmt.Errorf("experiment: the PID moved no bytes before the step")
	}
	res.FixedRateMBs, res.FixedRateWindowS = round(fixedRate/1e6, 2), round(pr.StepAt-from, 1)
	say("the fixed rate of equal speed: the PID's mean over the %.0f s before the step, %.1f MB/s", pr.StepAt-from, fixedRate/1e6)
	fr, fs, err := run(fmt.Sprintf("fixed-%.1fMBps", fixedRate/1e6), 0, agentclient.StartMigration{Rate: fixedRate})
	if err != nil {
		return res, err
	}
	res.Fixed = fs
	trials := []Labeled{{Name: "pid", SetpointMs: o.SetpointMs, Res: pr}, {Name: "fixed", SetpointMs: o.SetpointMs, Res: fr}}
	if math.IsNaN(res.PID.MeanLatencyAfterMs) || math.IsNaN(res.Fixed.MeanLatencyAfterMs) {
		say("warning: a migration ended before step + %v: no 'after' window (use a larger --size)", o.Settle)
	}

	if err := writeSeries(o.Out, trials); err != nil {
		return res, err
	}
	if err := writeHandovers(o.Out, trials); err != nil {
		return res, err
	}
	if err := writeStarts(o.Out, trials); err != nil {
		return res, err
	}
	if err := writeJSON(o.Out, SummaryFile, jsonSafe(res)); err != nil {
		return res, err
	}
	c := stepChart(trials[0], trials[1],
		fmt.Sprintf("step40: PID at %.1f ms, +%.0f %% arrivals at %.0f s", o.SetpointMs, 100*(o.Factor-1), pr.StepAt),
		fmt.Sprintf("fixed %.1f MB/s (the PID's rate in the %.0f s before the step), same step at %.0f s", fixedRate/1e6, pr.StepAt-from, fr.StepAt),
		fixedRate)
	if err := writePNG(o.Out, "step.png", c); err != nil {
		return res, err
	}
	var b strings.Builder
	b.WriteString(reportHeader("sluice bench step40 (Slacker Fig. 13a)", o.Command, started, o.bedNote(bed)))
	fmt.Fprintf(&b, "Tenant: %d rows, %.0f MB; workload %.0f → %.0f transactions/s %v after the migration starts (%s keys, MPL %d); baseline mean latency %.1f ± %.1f ms, and %.1f ± %.1f ms at the stepped load without a migration.\n\n",
		tn.Rows, float64(tn.Bytes)/1e6, o.Workload.Rate, o.Factor*o.Workload.Rate, o.StepAfter, o.Workload.Distribution, o.Workload.MPL, base.Mean, base.Std, sbase.Mean, sbase.Std)
	fmt.Fprintf(&b, "| controller | mean latency before the step ms | after (step + %v to the handover) ms | vs setpoint %.1f ms | after, handover included ms | migration s | host steal, whole / worst %.0f s |\n|---|---|---|---|---|---|---|\n", o.Settle, o.SetpointMs, StealSpan.Seconds())
	for _, x := range []struct {
		name string
		r    StepRun
	}{{"PID", res.PID}, {fmt.Sprintf("fixed %.1f MB/s", fixedRate/1e6), res.Fixed}} {
		if x.r.Disturbed {
			x.name += " (disturbed)"
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %.1f | %s / %s |\n", x.name, f1(x.r.MeanLatencyBeforeMs), f1(x.r.MeanLatencyAfterMs), signedPct(x.r.MeanLatencyAfterMs, o.SetpointMs), f1(x.r.MeanLatencyAfterWithHandoverMs), x.r.MigrationSeconds, stealCell(x.r.HostStealPct, false), stealCell(x.r.HostStealPeakPct, false))
	}
	fmt.Fprintf(&b, "\nThe hot copy ran %.0f s after the step with the PID, %.0f s with the fixed rate; the rest of each 'after' window is catch-up and warm.\n", res.PID.CopyAfterStepS, res.Fixed.CopyAfterStepS)
	fmt.Fprintf(&b, "\nThe fixed rate is the PID's mean snapshot rate over the %.0f s before the step (from the end of its slow start, at least %.0f s).\n", res.FixedRateWindowS, rateWindow)
	b.WriteString(stepDisturbedLines(res, o.SetpointMs, o.StealLimit))
	b.WriteString("\n" + ledgerLines(trials) + "\n![step](step.png)\n")
	return jsonSafe(res), writeFile(o.Out, ReportFile, b.String())
}

// equalSpeed is the fixed rate of equal speed to PID trial r: its mean
// snapshot rate from the end of its slow start (the first step its PID law
// ran) to the step, where it has found its rate (the ramp from its initial
// rate would make the fixed run gentler), and over at least the rateWindow
// before the step. The longest such window, not the last rateWindow alone:
// a burst's pause in the last seconds before the step once made the fixed
// rate 4.0 MB/s, no more than the WAL the stepped load writes, and that
// migration's catch-up never converged (step40 at 7 ms, 2026-11-26 21:00
// UTC). When the PID moved nothing over that window, the mean over its
// whole copy before the step. from is the window's start (workload
// seconds); rate is 0 when it moved nothing before the step at all.
func equalSpeed(r *TrialResult) (rate, from float64) {
	from = r.StepAt - rateWindow
	for _, p := range r.Loop {
		if p.Phase == "snapshot" && strings.HasPrefix(p.Reason, control.LawReason) && p.T < r.StepAt {
			from = min(from, p.T)
			break
		}
	}
	if v := rateBetween(r, from, r.StepAt); v > 0 {
		return v, from
	}
	return rateBetween(r, r.MigStart, r.StepAt), r.MigStart
}

// rateWindow is the least time before the step over which the fixed rate of
// equal speed is measured (the PID's snapshot bytes per second), seconds.
const rateWindow = 20.0

// rateBetween is the snapshot's bytes/s between workload seconds from and
// to, from the control loop's record (snapshot-phase points only: later
// phases count other bytes). from is raised to the migration's start.
func rateBetween(r *TrialResult, from, to float64) float64 {
	var first, last *loop.Point
	for i := range r.Loop {
		p := &r.Loop[i]
		if p.Phase != "snapshot" || p.T > to {
			continue
		}
		if first == nil && p.T >= from {
			first = p
		}
		last = p
	}
	if first == nil || last == nil {
		return 0
	}
	if first == last || from <= r.MigStart {
		// From the migration's start: its byte count starts at 0.
		if last.T <= r.MigStart {
			return 0
		}
		return float64(last.Bytes) / (last.T - r.MigStart)
	}
	return float64(last.Bytes-first.Bytes) / (last.T - first.T)
}

// copyEnd is the time (workload seconds) r last saw its hot copy (phase
// snapshot): in its progress (TrialResult.CopyEnd) or in its control
// loop's record, whichever is later; r.MigStart if neither saw it.
func copyEnd(r *TrialResult) float64 {
	end := max(r.MigStart, r.CopyEnd)
	for _, p := range r.Loop {
		if p.Phase == loop.CopyPhase {
			end = max(end, p.T)
		}
	}
	return end
}

// jsonSafe maps NaN figures (no data) to -1 for JSON.
func jsonSafe(r StepResult) StepResult {
	fix := func(x *float64) {
		if math.IsNaN(*x) {
			*x = -1
		}
	}
	r.Disturbed = append([]StepAttempt(nil), r.Disturbed...)
	runs := []*StepRun{&r.PID, &r.Fixed}
	for i := range r.Disturbed {
		runs = append(runs, &r.Disturbed[i].StepRun)
	}
	for _, s := range runs {
		fix(&s.MeanLatencyBeforeMs)
		fix(&s.MeanLatencyAfterMs)
		fix(&s.MeanLatencyAfterWithHandoverMs)
	}
	return r
}

// stepChart stacks the PID trial's chart (trialChart: two panels, three when
// its loop recorded the source's CPU quota) over the fixed trial's, whose
// title heads its first panel and whose rate panel shows the constant rate
// (bytes/s): a fixed-rate migration has no loop record.
func stepChart(pid, fixed Labeled, pidTitle, fixedTitle string, fixedRate float64) chart.Chart {
	c := trialChart(pid, pidTitle)
	f := trialChart(fixed, fixedTitle)
	r := fixed.Res
	f.Panels[1].Series = []chart.Series{{Name: "fixed rate", X: []float64{r.MigStart, r.MigEnd}, Y: []float64{fixedRate / 1e6, fixedRate / 1e6}}}
	n := len(c.Panels)
	c.Panels = append(c.Panels, f.Panels...)
	c.Panels[n].Title = f.Title
	return c
}

// signedPct is x's error against sp as a signed whole percentage, "–" when x
// is NaN (not measured).
func signedPct(x, sp float64) string {
	if math.IsNaN(x) {
		return "–"
	}
	return fmt.Sprintf("%+.0f %%", 100*(x-sp)/sp)
}

// stepDisturbedLines lists the attempts re-run because the host's steal
// peaked above limit (a share); "" when none was.
func stepDisturbedLines(res StepResult, sp, limit float64) string {
	if len(res.Disturbed) == 0 {
		return ""
	}
	var b strings.Builder
	fmt.Fprintf(&b, "\nRe-run because the host's steal went above %.0f %% over some %.0f s of the migration (the kept attempts are in the table above):\n\n| attempt | host steal, worst %.0f s | before the step ms | after ms | vs setpoint | migration s |\n|---|---|---|---|---|---|\n",
		100*limit, StealSpan.Seconds(), StealSpan.Seconds())
	for _, a := range res.Disturbed {
		secs := fmt.Sprintf("%.1f", a.MigrationSeconds)
		if a.Aborted {
			secs += " (aborted)"
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s |\n", a.Controller, stealCell(a.HostStealPeakPct, false), f1(a.MeanLatencyBeforeMs), f1(a.MeanLatencyAfterMs), signedPct(a.MeanLatencyAfterMs, sp), secs)
	}
	return b.String()
}
