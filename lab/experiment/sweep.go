package experiment

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	agentclient "github.com/sluicedb/sluice/agent/client"
	"github.com/sluicedb/sluice/lab/testbed"
)

// SweepOptions configure the slack sweep.
type SweepOptions struct {
	Common
	FixedRates []float64 // bytes/s; default DefaultFixedRates
	Setpoints  []float64 // ms; default SetpointFactors × the baseline mean latency
	// SetpointFactors, when Setpoints is empty, are the setpoints as
	// multiples of the baseline mean latency measured at the start of the
	// run (each > 1); default DefaultSetpointFactors.
	SetpointFactors []float64
	// Paired runs, next to each kept trial of the base loop, a fixed-rate
	// trial at its copy rate (PIDPoint.CopyRateMBs): the two meet the
	// plant minutes apart, where the ladder's trial at a like latency may
	// be a quarter of an hour away on a host whose noise drifts. The order
	// alternates per setpoint (PairFixedFirst): the first pair runs the
	// PID first and the fixed trial at its copy rate after it, the second
	// the fixed trial first, at the copy rate of the setpoint's last PID
	// trial, and so on — so that neither loop always meets the plant the
	// other has just left. Its figures are in the PID point's pair_fixed
	// and pair_first and with the ladder's fixed trials.
	Paired bool
	// Load is every trial's arrival rate during its migration (Trial.Load;
	// a Swing, say); zero = steady. The baseline and the warm-ups run at
	// the steady rate.
	Load Schedule
	// Rounds runs the whole order of trials (both ladders, the variants
	// and the pairs) this many times in one run, on one loaded tenant; 0
	// or 1 = once. Round k ≥ 2's trials are named with "-rk". Each round
	// of odd length moves the tenant the other way than the last, so over
	// two rounds a trial of each slot migrates in both directions.
	Rounds int
	StealGuard
}

// DefaultSetpointFactors are the PID ladder's setpoints as multiples of the
// settled baseline's mean latency: on the default bed (a 0.5-core source, a
// core for the target, 150 transactions/s) the setpoints that the loop can
// reach and a fixed rate of 30 MB/s lands among lie at 2.5–4× the baseline.
// Below about 2× a migration disturbs the source beyond what its rate
// controls (with the copy paused, a trial's windows stay above the
// setpoint), and above 4× the copy runs at its top speed.
// Stats.Window90 reports the undisturbed noise with every sweep.
var DefaultSetpointFactors = []float64{2.5, 3, 3.5, 4}

// DefaultFixedRates is the sweep's fixed-rate ladder, bytes/s: one rate
// among the PID's copy rates on the default bed (10–20 ms there).
var DefaultFixedRates = []float64{30e6}

// sweeper is a slack sweep under way: its plant, the order's state and
// what its trials measured.
type sweeper struct {
	o      SweepOptions
	bed    *testbed.Bed
	tn     testbed.Tenant
	base   Stats
	say    func(format string, args ...any)
	loops  []Variant // the base, then o.Variants
	res    SweepResult
	trials []Labeled
	to     int    // the server the next trial moves the tenant to
	suffix string // the round's, on every trial's name ("-r2", ...)
	// The pairs (Paired), by setpoint: the last kept PID trial's copy
	// rate, bytes/s, and the pairs run.
	lastRate map[float64]float64
	pairs    map[float64]int
}

// SlackSweep runs Slacker's Fig. 11: migrations of one tenant back and forth
// between two servers under the workload, at a ladder of fixed rates and
// under the PID at a ladder of setpoints (with each loop: the base and the
// Variants), the two ladders interleaved. Every migration's ledger is
// checked. It writes series.csv, summary.json, report.md, sweep.png and one
// PNG per PID trial into o.Out.
//
// A sweep interrupted (ctx done) or ended by a trial's error — a migration
// that rolled back on its own, say a fixed rate whose catch-up could not
// finish before its timeout — still writes what its finished trials
// measured, says so in the report, and returns the error.
func SlackSweep(ctx context.Context, bed *testbed.Bed, o SweepOptions) (SweepResult, error) {
	if err := o.check(); err != nil {
		return SweepResult{}, err
	}
	s := &sweeper{o: o, bed: bed, say: o.Progress, loops: o.loops(), to: 1, lastRate: map[float64]float64{}, pairs: map[float64]int{}}
	if !o.Load.Steady() {
		s.res.Load = o.Load.Describe(o.Workload.Rate)
	}
	started := time.Now()
	if err := s.setUp(ctx); err != nil {
		return s.res, err
	}
	round := sweepOrder(len(s.o.FixedRates), len(s.o.Setpoints), len(s.loops))
	order := repeatOrder(round, o.Rounds)
	var stopped error
	for i, t := range order {
		s.suffix = roundSuffix(i/len(round) + 1)
		var err error
		if t.Loop < 0 {
			err = s.runFixed(ctx, s.o.FixedRates[t.Index], 0)
		} else {
			err = s.runLoop(ctx, s.o.Setpoints[t.Index], t.Loop)
		}
		if err != nil && len(s.res.Fixed)+len(s.res.PID) == 0 {
			return s.res, err
		}
		if err != nil {
			stopped = err
			s.say("stopped (%v): writing what the %d finished trials measured", err, len(s.res.Fixed)+len(s.res.PID))
			break
		}
	}
	if err := s.write(started, stopped, len(order)); err != nil {
		return s.res, err
	}
	if stopped != nil {
		return s.res, fmt.Errorf("experiment: stopped after %d finished trials (their report is in %s): %w", len(s.res.Fixed)+len(s.res.PID), o.Out, stopped)
	}
	return s.res, nil
}

// check validates o and fills its defaults.
func (o *SweepOptions) check() error {
	if err := o.defaults(); err != nil {
		return err
	}
	if len(o.FixedRates) == 0 {
		o.FixedRates = DefaultFixedRates
	}
	if err := o.Load.Valid(); err != nil {
		return err
	}
	if err := o.StealGuard.check(); err != nil {
		return err
	}
	if o.Rounds < 0 || o.Rounds > MaxRounds {
		return fmt.Errorf("experiment: %d rounds: want 1 to %d (0 = 1)", o.Rounds, MaxRounds)
	}
	return nil
}

// setUp loads the tenant, measures the baseline and sets the setpoints.
func (s *sweeper) setUp(ctx context.Context) error {
	o := &s.o
	var err error
	if s.tn, err = s.bed.CreateTenant(ctx, 0, "sweep", o.Size, o.Seed+1); err != nil {
		return err
	}
	if s.base, err = SettledBaseline(ctx, s.tn, o.Workload, o.BaselineFor, o.Seed+2, s.say); err != nil {
		return err
	}
	base := s.base
	s.say("baseline: mean latency %.1f ms ± %.1f at %.0f transactions/s; 3 s windows' p90 %.1f ms", base.Mean, base.Std, o.Workload.Rate, base.Window90)
	if len(o.Setpoints) == 0 {
		if len(o.SetpointFactors) == 0 {
			o.SetpointFactors = DefaultSetpointFactors
		}
		for _, k := range o.SetpointFactors {
			o.Setpoints = append(o.Setpoints, round(k*base.Mean, 1))
		}
	}
	if low := slices.Min(o.Setpoints); base.Mean >= low {
		// A host in a steal phase can do this: the PID could only pause.
		return fmt.Errorf("experiment: the baseline mean latency %.1f ms (at %.0f transactions/s, no migration) is at or above the setpoint %.1f ms: the PID could only pause; run again on a quieter host or raise --setpoints", base.Mean, o.Workload.Rate, low)
	}
	return nil
}

// trial runs one migration of the sweep's tenant to the other server and
// adds it to the trials as name (sp: its setpoint, 0 = none).
func (s *sweeper) trial(ctx context.Context, name string, sp float64, req agentclient.StartMigration, client bool, abort float64) (*TrialResult, error) {
	s.say("%s: migrating %s to %s", name, s.tn.Name, s.bed.Servers[s.to].Name)
	wc := s.o.Workload
	wc.Seed = s.o.Seed + uint64(len(s.trials)) + 10
	r, err := Trial{Bed: s.bed, Tenant: s.tn, To: s.to, Workload: wc, Warmup: s.o.Warmup, Migration: req, TargetCPUs: s.o.TargetCPUs,
		CalmBelow: s.o.calmBelow(s.base), ClientLatency: client, AbortAboveSteal: abort, Load: s.o.Load, Progress: s.say, stealPeak: s.o.stealPeak}.Run(ctx)
	if err != nil {
		return r, fmt.Errorf("%s: %w", name, err)
	}
	s.trials = append(s.trials, Labeled{Name: name, SetpointMs: sp, Res: r})
	if !r.Aborted { // an aborted migration left the tenant where it was
		s.to = 1 - s.to
	}
	return r, nil
}

// retry says whether the trial just run (attempt 1, 2, ...) met too much
// host steal and has a re-run left; if so its series is renamed as that
// attempt's.
func (s *sweeper) retry(r *TrialResult, attempt int) bool {
	if !s.o.again(r, attempt) {
		return false
	}
	t := &s.trials[len(s.trials)-1]
	s.say("%s", s.o.rerunNote(t.Name, r, attempt))
	t.Name += fmt.Sprintf("-disturbed%d", attempt)
	return true
}

// runFixed runs a fixed-rate trial at rate (bytes/s) until it is
// undisturbed or out of re-runs; pairOf is the setpoint of the PID trial
// it is paired with (0: a ladder trial).
func (s *sweeper) runFixed(ctx context.Context, rate, pairOf float64) error {
	return untilUndisturbed(func(attempt int) (bool, error) { return s.fixedOnce(ctx, rate, pairOf, attempt) })
}

// fixedOnce is attempt of runFixed's trial.
func (s *sweeper) fixedOnce(ctx context.Context, rate, pairOf float64, attempt int) (again bool, err error) {
	name := fmt.Sprintf("fixed-%.0fMBps", rate/1e6)
	if pairOf > 0 {
		name = fmt.Sprintf("fixed-%.1fMBps-pair-%gms", rate/1e6, pairOf)
	}
	r, err := s.trial(ctx, name+s.suffix, 0, s.loops[0].request(rate), false, s.o.abortAt(attempt))
	if err != nil {
		return false, err
	}
	p := s.fixedPoint(r, rate, pairOf)
	s.say("fixed %.1f MB/s: latency %.1f ± %.1f ms (before the handover %.1f; before the migration %.1f), %.1f s%s; copy %.1f ms, catch-up %.1f ms over %.0f s (%.0f MB of WAL relayed by the %s); start cost %s ms·s, handover cost %.0f; ledger %d acknowledged, 0 lost",
		p.RateMBs, p.MeanLatencyMs, p.StddevLatencyMs, p.BeforeHandoverMs, p.PreMigrationMs, p.MigrationSeconds, throttleNote(p.SourceThrottledPct, p.TargetThrottledPct, p.HostStealPct, p.HostStealPeakPct),
		p.CopyMeanMs, p.CatchUpMeanMs, p.CatchUpSeconds, p.WALMB, cmp.Or(p.WALRelay, "?"), fp(p.StartExcessMsS), p.HandoverExcessMsS, r.Check.Acknowledged)
	if s.retry(r, attempt) {
		s.res.DisturbedFixed = append(s.res.DisturbedFixed, p)
		return true, nil
	}
	p.Disturbed = s.o.disturbed(r)
	s.res.Fixed = append(s.res.Fixed, p)
	return false, nil
}

// fixedPoint is the figures of fixed-rate trial r at rate (bytes/s).
func (s *sweeper) fixedPoint(r *TrialResult, rate, pairOf float64) FixedPoint {
	st := Describe(r.Latencies(r.MigStart, r.MigEnd))
	bh := Describe(r.Latencies(r.BeforeHandover()))
	p := FixedPoint{RateMBs: round(rate/1e6, 2), MeanLatencyMs: round(st.Mean, 2), StddevLatencyMs: round(st.Std, 2), MigrationSeconds: round(r.MigEnd-r.MigStart, 1),
		BeforeHandoverMs: round(bh.Mean, 2), FreezeMs: round(r.FreezeMs, 1), PreMigrationMs: preMigration(r),
		HandoverExcessMsS: round(handoverExcess(s.bed, s.tn.Name, r.Migration.Created), 1), StartExcessMsS: measured(r.StartExcessMsS(), 1),
		SourceThrottledPct: pct(r.SourceThrottled), TargetThrottledPct: pct(r.TargetThrottled), HostStealPct: pct(r.HostSteal), HostStealPeakPct: pct(r.HostStealPeak),
		CalmWaitS: round(r.CalmWait, 1), Calm: r.Calm, Aborted: r.Aborted, PairOfMs: pairOf}
	p.CopyMeanMs, p.CatchUpMeanMs, p.CatchUpSeconds = phaseMeans(r)
	if sm := r.Migration.Summary; sm != nil {
		p.WALRelay, p.WALMB = sm.WALRelay, round(float64(sm.WALBytes)/1e6, 1)
	}
	return p
}

// runLoop runs the PID trials of loop k (index into s.loops) at setpoint
// sp: the base loop's with its pair when Paired.
func (s *sweeper) runLoop(ctx context.Context, sp float64, k int) error {
	if k == 0 && s.o.Paired {
		return s.runPaired(ctx, sp)
	}
	return s.runPID(ctx, sp, k)
}

// runPID runs a PID trial of loop k at setpoint sp until it is undisturbed
// or out of re-runs.
func (s *sweeper) runPID(ctx context.Context, sp float64, k int) error {
	return untilUndisturbed(func(attempt int) (bool, error) { return s.pidOnce(ctx, sp, k, attempt) })
}

// pidOnce is attempt of runPID's trial.
func (s *sweeper) pidOnce(ctx context.Context, sp float64, k, attempt int) (again bool, err error) {
	v := s.loops[k]
	name := fmt.Sprintf("pid-%gms", sp)
	if len(s.loops) > 1 {
		name += "-" + v.Label()
	}
	r, err := s.trial(ctx, name+s.suffix, sp, s.o.pidRequest(v, sp), v.ClientLatency, s.o.abortAt(attempt))
	if err != nil {
		return false, err
	}
	p := s.pidPoint(r, sp, v)
	s.say("pid %.1f ms (%s): latency %.1f ± %.1f ms (execution %.1f; before the handover %.1f, loop %s; before the migration %.1f), %.1f s at %.1f MB/s%s; start cost %s ms·s; handover reserve %.0f ms·s, cost %.0f; ledger %d acknowledged, 0 lost",
		sp, p.Loop, p.MeanLatencyMs, p.StddevLatencyMs, p.ExecutionMeanMs, p.BeforeHandoverMs, fp(p.LoopMeanMs), p.PreMigrationMs, p.MigrationSeconds, p.MeanRateMBs,
		throttleNote(p.SourceThrottledPct, p.TargetThrottledPct, p.HostStealPct, p.HostStealPeakPct), fp(p.StartExcessMsS), p.ReserveMsS, p.HandoverExcessMsS, r.Check.Acknowledged)
	if s.retry(r, attempt) {
		s.res.DisturbedPID = append(s.res.DisturbedPID, p)
		return true, nil
	}
	p.Disturbed = s.o.disturbed(r)
	s.res.PID = append(s.res.PID, p)
	return false, nil
}

// pidPoint is the figures of PID trial r of loop v at setpoint sp.
func (s *sweeper) pidPoint(r *TrialResult, sp float64, v Variant) PIDPoint {
	st := Describe(r.Latencies(r.MigStart, r.MigEnd))
	secs := r.MigEnd - r.MigStart
	from, to := r.BeforeHandover()
	return PIDPoint{SetpointMs: sp, MeanLatencyMs: round(st.Mean, 2), StddevLatencyMs: round(st.Std, 2), MigrationSeconds: round(secs, 1),
		MeanRateMBs: round(float64(r.MovedBytes())/1e6/secs, 2), CopyRateMBs: round(copyRate(r)/1e6, 2), Loop: v.Label(), LatencySource: v.LatencySource(),
		ExecutionMeanMs:  round(r.ExecutionMean(r.MigStart, r.MigEnd), 2),
		BeforeHandoverMs: round(Describe(r.Latencies(from, to)).Mean, 2), LoopMeanMs: measured(r.LoopMean(from, to), 2),
		TopSpeedSteps: r.StepsAtRate(from, to, s.o.topSpeed(v)), FreezeMs: round(r.FreezeMs, 1), PreMigrationMs: preMigration(r),
		CalmWaitS: round(r.CalmWait, 1), Calm: r.Calm, ReserveMsS: round(r.ReserveMsS, 1),
		HandoverExcessMsS: round(handoverExcess(s.bed, s.tn.Name, r.Migration.Created), 1), StartExcessMsS: measured(r.StartExcessMsS(), 1),
		SourceThrottledPct: pct(r.SourceThrottled), TargetThrottledPct: pct(r.TargetThrottled), HostStealPct: pct(r.HostSteal), HostStealPeakPct: pct(r.HostStealPeak),
		Aborted: r.Aborted}
}

// runPaired runs the base loop's PID trial at setpoint sp and the
// fixed-rate trial paired with it (SweepOptions.Paired), in the order
// PairFixedFirst gives.
func (s *sweeper) runPaired(ctx context.Context, sp float64) error {
	s.pairs[sp]++
	if rate := s.lastRate[sp]; PairFixedFirst(s.pairs[sp], rate) {
		s.say("pid %.1f ms: the fixed trial first this time, at the copy rate of the last PID trial at this setpoint, %.1f MB/s", sp, rate/1e6)
		if err := s.runFixed(ctx, rate, sp); err != nil {
			return err
		}
		f := s.res.Fixed[len(s.res.Fixed)-1]
		if err := s.runPID(ctx, sp, 0); err != nil {
			return err
		}
		if k := len(s.res.PID) - 1; k >= 0 && s.res.PID[k].SetpointMs == sp {
			p := &s.res.PID[k]
			p.PairFixed, p.PairFirst = &f, "fixed"
			delete(s.lastRate, sp)
			if p.CopyRateMBs > 0 && !p.Disturbed {
				s.lastRate[sp] = p.CopyRateMBs * 1e6
			}
		}
		return nil
	}
	if err := s.runPID(ctx, sp, 0); err != nil {
		return err
	}
	k := len(s.res.PID) - 1
	if k < 0 || s.res.PID[k].SetpointMs != sp {
		return nil
	}
	rate := s.res.PID[k].CopyRateMBs * 1e6
	switch {
	case rate <= 0:
		s.say("pid %.1f ms: its copy rate was not measured: no paired fixed trial", sp)
		return nil
	case s.res.PID[k].Disturbed:
		// Its pair would be left out of the tally, and its rate is the
		// steal's, not the slack's: a fixed trial at the rate of a trial
		// paused through a steal phase may not finish its catch-up.
		delete(s.lastRate, sp)
		s.say("pid %.1f ms: kept disturbed: no paired fixed trial at its %.1f MB/s, and the next pair at this setpoint runs the PID first", sp, rate/1e6)
		return nil
	}
	s.lastRate[sp] = rate
	s.say("pid %.1f ms: its copy ran at %.1f MB/s; the fixed trial at that rate next", sp, rate/1e6)
	if err := s.runFixed(ctx, rate, sp); err != nil {
		return err
	}
	f := s.res.Fixed[len(s.res.Fixed)-1]
	s.res.PID[k].PairFixed, s.res.PID[k].PairFirst = &f, "pid"
	return nil
}
