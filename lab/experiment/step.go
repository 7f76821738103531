package experiment

import (
	"context"
	"fmt"
	"math"
	"strings"
	"time"

	agentclient "github.com/sluicedb/sluice/agent/client"
	"github.com/sluicedb/sluice/control"
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
	// host steal burst: each pair's PID trial until it is undisturbed or
	// out of re-runs, then the fixed rate's, of the kept PID trial's speed.
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
	// window is catch-up and warm, where the governor's catch-up floor
	// (control.Governor) may hold the rate above the controller's: an
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
	Loop       string `json:"loop"`       // the pair's loop (StepPair.Loop)
	StepRun
}

// StepPair is one loop's pair of trials under the step: the PID's, and the
// fixed rate's of equal speed.
type StepPair struct {
	// Loop is the PID's loop (Variant.Label); the fixed trial migrates by
	// the loop's mechanism too.
	Loop  string  `json:"loop"`
	PID   StepRun `json:"pid"`
	Fixed StepRun `json:"fixed"`
	// FixedRateMBs is the fixed trial's rate, MB/s: the PID's mean over
	// the FixedRateWindowS seconds before the step (equalSpeed).
	FixedRateMBs     float64 `json:"fixed_rate_mb_s"`
	FixedRateWindowS float64 `json:"fixed_rate_window_s"`
}

// StepResult is `sluice bench step40 --json`.
//
// BaselineAfterStepMs is the mean latency of the stepped load (Factor ×
// the arrival rate) on the tenant with no migration, measured before the
// trials: a setpoint at or under it cannot be held after the step by any
// migration speed, only by pausing and then not fully (Slacker's Fig. 13a
// assumes the stepped load still leaves slack).
type StepResult struct {
	StepPair                       // the base loop's
	Variants            []StepPair `json:"variants,omitempty"` // Common.Variants', in order
	SetpointMs          float64    `json:"setpoint_ms"`
	BaselineMs          float64    `json:"baseline_ms"`
	BaselineAfterStepMs float64    `json:"baseline_after_step_ms"`
	// Disturbed are the attempts re-run (StealGuard), in the order run.
	Disturbed []StepAttempt `json:"disturbed,omitempty"`
}

// stepper is a step experiment under way.
type stepper struct {
	o           StepOptions
	bed         *testbed.Bed
	tn          testbed.Tenant
	base, sbase Stats // the baselines at the load before and after the step
	say         func(format string, args ...any)
	loops       []Variant
	res         StepResult
	trials      []Labeled
	charts      []stepCharted // one per pair, in order
}

// StepLoad runs the PID at a setpoint while the arrival rate steps up
// StepAfter into the migration, then a fixed rate equal to the PID's mean
// rate before the step under the same step: the PID slows down and returns
// to its setpoint, the fixed rate cannot. It runs such a pair for the base
// loop and for each of Common.Variants. Writes series.csv, summary.json,
// report.md and step.png (step-LOOP.png for the variants) into o.Out.
func StepLoad(ctx context.Context, bed *testbed.Bed, o StepOptions) (StepResult, error) {
	if err := o.check(); err != nil {
		return StepResult{}, err
	}
	s := &stepper{o: o, bed: bed, say: o.Progress, loops: o.loops()}
	started := time.Now()
	if err := s.setUp(ctx); err != nil {
		return s.res, err
	}
	for k, v := range s.loops {
		p, err := s.pair(ctx, v)
		if err != nil {
			return jsonSafe(s.res), err
		}
		if k == 0 {
			s.res.StepPair = p
		} else {
			s.res.Variants = append(s.res.Variants, p)
		}
	}
	return jsonSafe(s.res), s.write(started)
}

// check validates o and fills its defaults.
func (o *StepOptions) check() error {
	if err := o.defaults(); err != nil {
		return err
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
		return fmt.Errorf("experiment: step factor %v, step after %v, setpoint %v ms: want positive values", o.Factor, o.StepAfter, o.SetpointMs)
	}
	return o.StealGuard.check()
}

// load is the step as a schedule: it counts from the migration's start,
// not the workload's, so a trial held for a calm plant steps in its
// migration too.
func (o *StepOptions) load() Schedule { return Step(o.StepAfter, o.Factor) }

// setUp loads the tenant, measures the baselines before and after the step
// and sets the setpoint.
func (s *stepper) setUp(ctx context.Context) error {
	o := &s.o
	var err error
	if s.tn, err = s.bed.CreateTenant(ctx, 0, "step", o.Size, o.Seed+1); err != nil {
		return err
	}
	if s.base, err = SettledBaseline(ctx, s.tn, o.Workload, o.BaselineFor, o.Seed+2, s.say); err != nil {
		return err
	}
	if o.SetpointMs == 0 {
		o.SetpointMs = round(3*s.base.Mean, 1)
	}
	if s.base.Mean >= o.SetpointMs {
		// A host in a steal phase can do this: the PID would pause through
		// the copy, and the fixed trial at its speed would crawl for hours.
		return fmt.Errorf("experiment: the baseline mean latency %.1f ms (at %.0f transactions/s, no migration) is at or above the setpoint %.1f ms: the PID could only pause, and a fixed rate of its speed would crawl; run again on a quieter host or raise --setpoint", s.base.Mean, o.Workload.Rate, o.SetpointMs)
	}
	s.res.SetpointMs, s.res.BaselineMs = o.SetpointMs, round(s.base.Mean, 2)
	stepped := o.Workload
	stepped.Rate *= o.Factor
	if s.sbase, err = SettledBaseline(ctx, s.tn, stepped, o.BaselineFor, o.Seed+3, s.say); err != nil {
		return err
	}
	s.res.BaselineAfterStepMs = round(s.sbase.Mean, 2)
	s.say("baseline: mean latency %.1f ms ± %.1f at %.0f transactions/s, %.1f ms ± %.1f at %.0f (after the step, no migration); setpoint %.1f ms; +%.0f %% arrivals %v into the migration",
		s.base.Mean, s.base.Std, o.Workload.Rate, s.sbase.Mean, s.sbase.Std, stepped.Rate, o.SetpointMs, 100*(o.Factor-1), o.StepAfter)
	if s.sbase.Mean >= o.SetpointMs {
		s.say("warning: the stepped load alone is at or above the setpoint (%.1f ≥ %.1f ms): after the step the PID can only pause", s.sbase.Mean, o.SetpointMs)
	}
	return nil
}

// pair runs loop v's PID trial (tenant to server 1) and the fixed trial of
// its speed before the step (back to server 0).
func (s *stepper) pair(ctx context.Context, v Variant) (StepPair, error) {
	p := StepPair{Loop: v.Label()}
	suffix := ""
	if len(s.loops) > 1 {
		suffix = "-" + p.Loop
	}
	pr, ps, err := s.run(ctx, "pid", v, suffix, 1, s.o.pidRequest(v, s.o.SetpointMs))
	if err != nil {
		return p, err
	}
	p.PID = ps
	if pr.StepAt < 0 || pr.StepAt >= pr.MigEnd {
		return p, fmt.Errorf("experiment: the PID's migration ended %.0f s after its start, before the step at %v: use a larger --size or an earlier --step-after", pr.MigEnd-pr.MigStart, s.o.StepAfter)
	}
	if ps.CopyAfterStepS < minCopyAfterStep {
		s.say("warning: the PID's copy ended %.0f s after the step: its 'after' window is mostly catch-up, paced by the catch-up floor more than by the PID (use a larger --size or an earlier --step-after)", ps.CopyAfterStepS)
	}
	rate, from := equalSpeed(pr)
	if !(rate > 0) {
		return p, fmt.Errorf("experiment: the PID moved no bytes before the step")
	}
	p.FixedRateMBs, p.FixedRateWindowS = round(rate/1e6, 2), round(pr.StepAt-from, 1)
	s.say("the fixed rate of equal speed: the PID's mean over the %.0f s before the step, %.1f MB/s", pr.StepAt-from, rate/1e6)
	fr, fs, err := s.run(ctx, fmt.Sprintf("fixed-%.1fMBps", rate/1e6), v, suffix, 0, v.request(rate))
	if err != nil {
		return p, err
	}
	p.Fixed = fs
	if math.IsNaN(ps.MeanLatencyAfterMs) || math.IsNaN(fs.MeanLatencyAfterMs) {
		s.say("warning: a migration ended before step + %v: no 'after' window (use a larger --size)", s.o.Settle)
	}
	pid, fixed := Labeled{Name: "pid" + suffix, SetpointMs: s.o.SetpointMs, Res: pr}, Labeled{Name: "fixed" + suffix, SetpointMs: s.o.SetpointMs, Res: fr}
	s.trials = append(s.trials, pid, fixed)
	s.charts = append(s.charts, stepCharted{pid: pid, fixed: fixed, pair: p, from: from})
	return p, nil
}

// run is once until the trial is undisturbed or out of re-runs; an
// aborted attempt left the tenant on its source, so every attempt
// migrates the same way. ctrl ("pid" or "fixed…") and suffix make its
// name.
func (s *stepper) run(ctx context.Context, ctrl string, v Variant, suffix string, to int, req agentclient.StartMigration) (*TrialResult, StepRun, error) {
	for attempt := 1; ; attempt++ {
		r, sr, err := s.once(ctx, ctrl+suffix, v, to, req, s.o.abortAt(attempt))
		if err != nil || !s.o.again(r, attempt) {
			sr.Disturbed = err == nil && s.o.disturbed(r)
			return r, sr, err
		}
		s.say("%s", s.o.rerunNote(ctrl+suffix, r, attempt))
		s.res.Disturbed = append(s.res.Disturbed, StepAttempt{Controller: strings.SplitN(ctrl, "-", 2)[0], Loop: v.Label(), StepRun: sr})
	}
}

// once runs one trial of the pair and returns its figures.
func (s *stepper) once(ctx context.Context, name string, v Variant, to int, req agentclient.StartMigration, abort float64) (*TrialResult, StepRun, error) {
	o := &s.o
	s.say("%s: migrating %s to %s", name, s.tn.Name, s.bed.Servers[to].Name)
	wc := o.Workload
	wc.Seed = o.Seed + uint64(to) + 10
	r, err := Trial{Bed: s.bed, Tenant: s.tn, To: to, Workload: wc, Warmup: o.Warmup, Migration: req, Load: o.load(), TargetCPUs: o.TargetCPUs,
		CalmBelow: o.calmBelow(s.base), ClientLatency: v.ClientLatency, AbortAboveSteal: abort, Progress: s.say, stealPeak: o.stealPeak}.Run(ctx)
	if err != nil {
		return r, StepRun{}, fmt.Errorf("%s: %w", name, err)
	}
	sr := stepRun(r, o.Settle)
	s.say("%s: before the step %.1f ms, after %.1f ms (setpoint %.1f; with the handover %.1f), %.1f s%s", name, sr.MeanLatencyBeforeMs, sr.MeanLatencyAfterMs, o.SetpointMs, sr.MeanLatencyAfterWithHandoverMs, sr.MigrationSeconds, throttleNote(nil, nil, sr.HostStealPct, sr.HostStealPeakPct))
	return r, sr, nil
}

// stepRun is trial r's figures around its step, the "after" window
// starting settle after it.
func stepRun(r *TrialResult, settle time.Duration) StepRun {
	sr := StepRun{MigrationSeconds: round(r.MigEnd-r.MigStart, 1), MeanLatencyAfterMs: math.NaN(), MeanLatencyAfterWithHandoverMs: math.NaN()}
	stepAt := r.StepAt
	if stepAt < 0 || stepAt > r.MigEnd {
		stepAt = r.MigEnd
	}
	sr.MeanLatencyBeforeMs = round(Describe(r.Latencies(r.MigStart, stepAt)).Mean, 2)
	after := stepAt + settle.Seconds()
	if _, hold := r.BeforeHandover(); after < hold {
		sr.MeanLatencyAfterMs = round(Describe(r.Latencies(after, hold)).Mean, 2)
	}
	if after < r.MigEnd {
		sr.MeanLatencyAfterWithHandoverMs = round(Describe(r.Latencies(after, r.MigEnd)).Mean, 2)
	}
	sr.HostStealPct, sr.HostStealPeakPct = pct(r.HostSteal), pct(r.HostStealPeak)
	sr.Aborted = r.Aborted
	sr.CopyAfterStepS = round(max(copyEnd(r)-stepAt, 0), 1)
	return sr
}

// equalSpeed is the fixed rate of equal speed to PID trial r: its mean
// snapshot rate from the end of its slow start (the first step its PID law
// ran) to the step, where it has found its rate (the ramp from its initial
// rate would make the fixed run gentler), and over at least the rateWindow
// before the step. The longest such window, not the last rateWindow alone:
// a burst's pause in the last seconds before the step can make the fixed
// rate no more than the WAL the stepped load writes, and then the fixed
// trial's catch-up never converges. When the PID moved nothing over that
// window, the mean over its
// whole copy before the step. from is the window's start (workload
// seconds); rate is 0 when it moved nothing before the step at all.
func equalSpeed(r *TrialResult) (rate, from float64) {
	from = r.StepAt - rateWindow
	for _, p := range r.Loop {
		if p.Phase == copyPhase && strings.HasPrefix(p.Reason, control.LawReason) && p.T < r.StepAt {
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
		if p.Phase != copyPhase || p.T > to {
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
