package experiment

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	agentclient "github.com/sluicedb/sluice/agent/client"
	"github.com/sluicedb/sluice/control"
	"github.com/sluicedb/sluice/internal/stats"
	"github.com/sluicedb/sluice/lab/chart"
	"github.com/sluicedb/sluice/lab/testbed"
	"github.com/sluicedb/sluice/lab/workload"
	"github.com/sluicedb/sluice/loop"
)

// DefaultMPL is the experiments' workload connections. Slacker fixes its MPL
// so that "the queue time is minimal unless the server is heavily
// overloaded" (§5.2). On the testbed's 0.25-CPU servers at 100
// transactions/s no MPL does both jobs. At 8, any stall above ~80 ms fills
// every connection and the transactions behind them wait in the client's
// queue, where the proxy — the loop's instrument — cannot see them (1 GB
// sweep, 10 ms setpoint, 2026-11-23 06:18: clients 15.3 ms of which 3.7
// queue, the loop's 10.4). At 24 that queue moved into the server (06:22:
// clients 11.6 ms of which 0.1 queue, the loop's 11.0), but 24 backends on a
// quarter of a core convoy behind whichever holds a lock when the CPU quota
// runs out: the 2 GB step's baseline was 357 ± 493 ms at 24 against 3.5 ±
// 6.3 at 8 (07:08 and 07:12), and five tenants at 24 each ran at 8–10 s.
// So 8; --mpl sets it (docs/benchmarks.md).
const DefaultMPL = 8

// SweepMPL is slack-sweep's workload connections. With the servers' page
// cache out of the host's DAMON pageout (package damon) the sweep's 1 GB
// tenant is cached and its servers are CPU-bound; at MPL 8 the stalls
// still filled every connection and the clients' queue was most of their
// excess over the setpoint (2026-11-24 02:16, SP 12.8 ms: clients 21.2 ms
// of which 6.8 queue, the loop's 13.3; 01:11, SP 13.7: 18.2 of which 3.7),
// while at 16 the clients' mean stayed within 0.1–2.5 ms of the proxy's
// execution mean in eight PID trials (01:22–01:57) and the baselines were
// alike (2.1–2.2 ± 4.3–6.7 ms against 2.6–3.4 ± 3.8–6.2 at 8). step40 and
// multitenant keep DefaultMPL: their convoys at 24 were not re-measured at
// 16.
const SweepMPL = 16

// Common are the options every experiment shares. Zero values take the
// defaults noted.
type Common struct {
	Out      string          // output directory (required)
	Command  string          // the command line, for the report
	Size     int64           // tenant data, bytes; default 1 GB (Slacker's)
	Workload workload.Config // default 100 transactions/s, MPL DefaultMPL, uniform keys
	// MaxRate is the PID's top speed, bytes/s; default 80 MB/s.
	MaxRate float64
	// Kp, Ki, Kd are the PID's gains (fractions of MaxRate per step, error
	// normalised by the setpoint); nil = sluice's simulator-tuned gains.
	Kp, Ki, Kd *float64
	// ErrorForm is the PID's error form, "linear" or "hybrid"; default
	// DefaultErrorForm.
	ErrorForm string
	// StartGrowth is the PID's slow-start growth per step (> 1; 1 = none);
	// default DefaultStartGrowth.
	StartGrowth float64
	// RearmGrowth is the PID's growth per step back to the rate that held
	// the setpoint after a pause (control.PIDParams.RearmGrowth); 0 =
	// DefaultRearmGrowth, 1 = the slow start's, to half the peak.
	RearmGrowth float64
	// StartBackoff is how many steps of growth the PID's slow start takes
	// back when it ends (control.PIDParams.StartBackoff); 0 =
	// DefaultStartBackoff, -1 = none.
	StartBackoff int
	// IdleFloor is the lowest the PID's mean contract repays at, a
	// fraction of the way from the idle latency to the setpoint
	// (control.PIDParams.IdleFloor); 0 = DefaultIdleFloor, < 0 = none.
	IdleFloor float64
	// MeanHorizon is the PID's mean-latency horizon in steps
	// (control.PIDParams.MeanHorizon); 0 = off.
	MeanHorizon int
	// ErrorFloor is the PID's error floor (control.PIDParams.ErrorFloor,
	// a fraction of the setpoint); 0 = none.
	ErrorFloor float64
	// Headroom is the PID's headroom over what the copy moves
	// (control.PIDParams.Headroom); 0 = off.
	Headroom float64
	// Checkpoint is how each migration's snapshot takes its checkpoint
	// (agent/client.StartMigration.Checkpoint): "fast", "spread" or a pace
	// such as "3s"; "" = the agent's default (fast).
	Checkpoint string
	// WALRelay is where each migration's standby WAL stream is relayed
	// (agent/client.StartMigration.WALRelay): "target" or "source"; "" =
	// the agent's default (target).
	WALRelay string
	// HandoverReserve is the PID's handover reserve, ms·s
	// (agent/client.Control.HandoverReserveMsS); nil = learned from the
	// proxy's measured handovers.
	HandoverReserve *float64
	// Calm, when > 0, holds each migration's start until the workload's
	// last CalmSpan seconds average at most Calm × the baseline's median
	// 3 s window (Trial.CalmBelow; at most CalmWaitMax): trials start on a
	// plant as calm as the baseline's, not in the previous migration's
	// aftermath. 0 = no hold.
	Calm float64
	// TargetCPUs, when not 0, is the CPU quota (cores; negative: none) of
	// the server each trial's tenant moves to, the source keeping the
	// bed's (Trial.TargetCPUs); 0 = every server the bed's.
	TargetCPUs float64
	// ClientLatency has every PID trial's loop steer by the workload's own
	// latency (queue + execution, Slacker's measure and the one the
	// benchmarks report) next to the proxy's windows (Trial.ClientLatency);
	// false: the proxy's only.
	ClientLatency bool
	Warmup        time.Duration // workload before each migration; default 20 s (the previous trial's handover backlog drains)
	// BaselineFor is how long the workload runs without a migration to
	// measure the baseline; default 20 s.
	BaselineFor time.Duration
	Seed        uint64
	Progress    func(format string, args ...any)
}

func (c *Common) defaults() error {
	if c.Out == "" {
		return fmt.Errorf("experiment: no output directory")
	}
	if c.Size == 0 {
		c.Size = 1e9
	}
	if c.Workload.Rate == 0 {
		c.Workload.Rate = 100
	}
	if c.Workload.MPL == 0 {
		c.Workload.MPL = DefaultMPL
	}
	if c.Workload.Distribution == "" {
		c.Workload.Distribution = workload.Uniform
	}
	if c.MaxRate == 0 {
		c.MaxRate = 80e6
	}
	if c.Warmup == 0 {
		c.Warmup = 20 * time.Second
	}
	if c.BaselineFor == 0 {
		c.BaselineFor = 20 * time.Second
	}
	if c.Progress == nil {
		c.Progress = func(string, ...any) {}
	}
	switch {
	case c.Size < 1e6:
		return fmt.Errorf("experiment: size %d bytes is below 1 MB", c.Size)
	case !(c.MaxRate > 0) || math.IsInf(c.MaxRate, 0):
		return fmt.Errorf("experiment: max rate %v must be a positive number of bytes/s", c.MaxRate)
	case !(c.Workload.Rate > 0) || math.IsInf(c.Workload.Rate, 0):
		return fmt.Errorf("experiment: workload rate %v must be a positive number", c.Workload.Rate)
	}
	return nil
}

// calmBelow is Trial.CalmBelow for a run whose baseline is base (ms; 0 =
// no hold).
func (c *Common) calmBelow(base Stats) float64 {
	if c.Calm <= 0 || !(base.Window50 > 0) {
		return 0
	}
	return round(c.Calm*base.Window50, 2)
}

// bedNote is the bed's description for a report, with the targets' CPU
// quota when it differs from the bed's (TargetCPUs).
func (c *Common) bedNote(bed *testbed.Bed) string {
	switch {
	case c.TargetCPUs > 0:
		return fmt.Sprintf("%s; each migration's target server %.2g CPU for its trial", bed.Describe(), c.TargetCPUs)
	case c.TargetCPUs < 0:
		return bed.Describe() + "; each migration's target server without a CPU cap for its trial"
	}
	return bed.Describe()
}

// pidControl is the Control of a PID trial at setpoint sp (ms).
// StartFraction is the PID's starting rate in the benchmarks, a fraction of
// MaxRate. A quarter (20 MB/s at the default 80 MB/s) is gentle on every
// server variant measured here (fixed 20 MB/s stays near the baseline) and
// leaves the loop less of a ramp within one migration than the controller's
// own default of a tenth.
const StartFraction = 0.25

func (c *Common) pidControl(sp float64) *agentclient.Control {
	ctl := &agentclient.Control{Controller: "pid", SetpointMs: sp, MaxRate: c.MaxRate, Rate: c.MaxRate * StartFraction, Kp: c.Kp, Ki: c.Ki, Kd: c.Kd, ErrorForm: c.ErrorForm}
	if ctl.ErrorForm == "" {
		ctl.ErrorForm = DefaultErrorForm
	}
	ctl.MeanHorizon = c.MeanHorizon
	ctl.ErrorFloor = c.ErrorFloor
	ctl.Headroom = c.Headroom
	ctl.HandoverReserveMsS = c.HandoverReserve
	ctl.StartGrowth = c.StartGrowth
	if ctl.StartGrowth == 0 {
		ctl.StartGrowth = DefaultStartGrowth
	}
	ctl.RearmGrowth = c.RearmGrowth
	if ctl.RearmGrowth == 0 {
		ctl.RearmGrowth = DefaultRearmGrowth
	}
	ctl.StartBackoff = c.StartBackoff
	switch ctl.StartBackoff {
	case 0:
		ctl.StartBackoff = DefaultStartBackoff
	case -1:
		ctl.StartBackoff = 0
	}
	ctl.IdleFloor = c.IdleFloor
	switch {
	case ctl.IdleFloor == 0:
		ctl.IdleFloor = DefaultIdleFloor
	case ctl.IdleFloor < 0:
		ctl.IdleFloor = 0
	}
	if !(ctl.StartGrowth > 1) {
		ctl.RearmGrowth, ctl.StartBackoff = 0, 0 // no slow start, nothing to rearm or take back
	}
	if ctl.Kp == nil && ctl.Ki == nil && ctl.Kd == nil {
		kp, ki := DefaultKp, DefaultKi
		ctl.Kp, ctl.Ki = &kp, &ki
	}
	return ctl
}

// The PID settings the experiments use unless told otherwise, chosen for
// the testbed's CPU-bound servers (0.25 CPU; docs/benchmarks.md): their
// latency follows a queue, L ≈ L0/(1 − r/C) with L0 ≈ 4–7 ms and C ≈ 56
// MB/s from the fixed-rate ladder, so at a 60 MB/s top speed the
// normalised process gain at a 7–45 ms setpoint is G ≈ SP·MaxRate/(L0·C)
// ≈ 2–7 and Ki·G at Ki 0.04 stays at 0.1–0.3 per 1 s step: a settled loop despite the
// 3 s window's delay, where the simulator's gains (Kp 0.11, Ki 0.10) made a
// limit cycle between 0 and 50 MB/s (2026-11-22 21:18 UTC). The error is
// Slacker's linear one: its mean is zero exactly when the mean latency is
// at the setpoint, while the hybrid form, on this spiky latency, settled
// 2–110 % above it (21:31 UTC).
//
// Ki was 0.04 until 2026-11-27: on the 3 GB slack sweeps of that day (0.5
// CPU source, 120 MB/s top speed) the testbed's latency stayed flat over
// most of the rate range, the process gain below the setpoint was small and
// the law's climb (Ki·e·MaxRate a step) too slow for 40–90 s copies. In
// seven same-run pairs at 10–20 ms, Ki 0.08 ended nearer its setpoint in
// five (0.04 in one, one tie) and faster in four (0.04 in two, ending 9–16 %
// under). On the control package's plants it changes long copies by under
// 1 %, takes 3–5 % fewer steps on short ones ending −0.2…+5.5 % off (0.04:
// −3.8…+1.7 %), spends the slack a load leaves late in a copy (−12 % → −1 % at 10 ms,
// TestPIDLateSlack), chases a load that swings every 20 s (1.07 → 1.28× the
// steps of a fixed rate at 8 ms, TestPIDSteadyPlantCost), and makes no limit
// cycle up to 0.32 (TestPIDIntegralGain; docs/benchmarks.md, thirty-sixth
// round).
var (
	DefaultKp        = 0.02
	DefaultKi        = 0.08
	DefaultErrorForm = "linear"
	// DefaultStartGrowth is the PID's slow start, ×1.12 per step: from the
	// start fraction to full speed in 13 steps, where the linear law's ramp
	// took the whole of a 1 GB migration (docs/benchmarks.md).
	DefaultStartGrowth = 1.12
	// DefaultRearmGrowth is the PID's climb back after a pause, ×1.5 per
	// step to the rate that held the setpoint (control.PIDParams.RearmGrowth):
	// on the control package's burst plant (TestPIDRearmBursts) it took
	// 0.6–3 % fewer steps than the old rearm at a mean latency 0.3–0.5 % higher; on the
	// testbed the old one's slow climbs cost a slack-sweep trial ~20 s
	// (2026-11-26, docs/benchmarks.md).
	DefaultRearmGrowth = 1.5
	// DefaultStartBackoff is how many steps of growth the PID's slow
	// start takes back when it ends (control.PIDParams.StartBackoff): the
	// testbed's latency showed a rate about three steps late (3.5 ms at 83
	// MB/s, then the exit at 117, 2026-11-26 11:40 UTC). On the control
	// package's plants it changed the steps and means by under 1 %
	// (TestPIDStartBackoffPlants), whose queues have no backlog to drain after
	// an overshoot; the testbed's clients queue. Under the mean contract it
	// applies only when the run owes latency at the exit: one with its slow
	// start's savings in hand keeps the growth (TestPIDStartBackoffInHand:
	// short runs had ended 8–15 % under their setpoints).
	DefaultStartBackoff = 3
	// DefaultIdleFloor keeps the PID's mean contract repaying no lower
	// than half-way from the idle latency to the setpoint
	// (control.PIDParams.IdleFloor): a 7 ms trial (2026-11-26 13:54 UTC)
	// otherwise crawled for 150 s at its plant's idle latency.
	DefaultIdleFloor = 0.5
	// DefaultMeanHorizon is the PID's mean-latency horizon in the
	// benchmarks, steps (control.PIDParams.MeanHorizon); 0 = off.
	DefaultMeanHorizon = control.DefaultMeanHorizon
	// DefaultErrorFloor is the PID's error floor in the benchmarks
	// (control.PIDParams.ErrorFloor); 0 = none.
	DefaultErrorFloor = 0.0
	// DefaultHeadroom is the PID's headroom over what the copy moves in
	// the benchmarks (control.PIDParams.Headroom); 0 = off.
	DefaultHeadroom = 0.0
	// DefaultCalm is the benchmarks' calm hold (Common.Calm): a migration
	// starts once the workload's last 5 s average at most 1.5 × the
	// baseline's median 3 s window. 0 would start every trial after its
	// fixed warm-up, as before 2026-11-25.
	DefaultCalm = 1.5
)

// SweepOptions configure the slack sweep.
type SweepOptions struct {
	Common
	FixedRates []float64 // bytes/s; default 10, 20, 40 MB/s
	Setpoints  []float64 // ms; default SetpointFactors × the baseline mean latency
	// SetpointFactors, when Setpoints is empty, are the setpoints as
	// multiples of the baseline mean latency measured at the start of the
	// run (each > 1); default DefaultSetpointFactors.
	SetpointFactors []float64
	// CompareHorizons run every PID setpoint again with each of these
	// mean-latency horizons (steps), right after its run with
	// Common.MeanHorizon: the loops compared in one run, on the same plant.
	CompareHorizons []int
	// CompareKi run every PID setpoint again with each of these integral
	// gains (per step, as Common.Ki), the mean horizon Common's: gains
	// compared in one run, on the same plant.
	CompareKi []float64
	// CompareReserves run every PID setpoint again with each of these
	// handover reserves (ms·s, as Common.HandoverReserve), right after its
	// run with Common's: the reserve's effect in one run, on the same plant.
	CompareReserves []float64
	// CompareErrorFloors run every PID setpoint again with each of these
	// error floors (as Common.ErrorFloor), right after its run with
	// Common's: the floor's effect in one run, on the same plant.
	CompareErrorFloors []float64
	// CompareHeadroom run every PID setpoint again with each of these
	// headrooms (as Common.Headroom), in the same run.
	CompareHeadroom []float64
	// CompareStartGrowth run every PID setpoint again with each of these
	// slow-start growths (as Common.StartGrowth), in the same run.
	CompareStartGrowth []float64
	// CompareRearmGrowth run every PID setpoint again with each of these
	// rearm growths (as Common.RearmGrowth), in the same run.
	CompareRearmGrowth []float64
	// CompareWALRelay runs every fixed-rate trial again next to it, with
	// the WAL relayed on the other side (Common.WALRelay's "target" ↔
	// "source"), the other side first at every other rate: the relay's
	// cost to the source's clients in catch-up, compared at one rate in
	// one run.
	CompareWALRelay bool
	// CompareLatencySource runs every PID setpoint again with the other
	// process variable than Common.ClientLatency's (proxy only ↔ the
	// clients' too), right after it: the two compared on the same plant.
	CompareLatencySource bool
	// Paired runs, next to each kept trial of Common's PID loop, a
	// fixed-rate trial at its copy rate (PIDPoint.CopyRateMBs): the two
	// meet the plant minutes apart, where the ladder's trial at a like
	// latency may be a quarter of an hour away on a host whose noise
	// drifts. The order alternates per setpoint (PairFixedFirst): the
	// first pair runs the PID first and the fixed trial at its copy rate
	// after it, the second the fixed trial first, at the copy rate of the
	// setpoint's last PID trial, and so on — so that neither loop always
	// meets the plant the other has just left. Its figures are in the PID
	// point's pair_fixed and pair_first and with the ladder's fixed trials.
	Paired bool
	// Swing, when set, swings every trial's arrival rate during its
	// migration (Trial.Swing); the baseline and the warm-ups run at the
	// steady rate.
	Swing *Swing
	// Rounds runs the whole order of trials (both ladders, the compared
	// loops and the pairs) this many times in one run, on one loaded
	// tenant; 0 or 1 = once. Round k ≥ 2's trials are named with "-rk". Each
	// round of odd length moves the tenant the other way than the last, so
	// over two rounds a trial of each slot migrates in both directions.
	Rounds int
	StealGuard
}

// FixedPoint is one fixed-rate migration of the sweep (JSON keys are
// `sluice bench slack-sweep --json`'s).
type FixedPoint struct {
	RateMBs          float64 `json:"rate_mb_s"`
	MeanLatencyMs    float64 `json:"mean_latency_ms"`
	StddevLatencyMs  float64 `json:"stddev_latency_ms"`
	MigrationSeconds float64 `json:"migration_seconds"`
	// WALRelay is where the standby's WAL was relayed ("target",
	// "source"; agent/client.Summary.WALRelay), WALMB how much, MB.
	WALRelay string  `json:"wal_relay,omitempty"`
	WALMB    float64 `json:"wal_relayed_mb,omitempty"`
	// CopyMeanMs is the mean latency over the hot copy (the migration's
	// start to TrialResult.CopyEnd), CatchUpMeanMs over the rest before
	// the handover (catch-up and warm: the WAL relay's phase), which
	// lasted CatchUpSeconds; NaN-free: 0 when a phase had no whole second.
	CopyMeanMs     float64 `json:"mean_latency_copy_ms"`
	CatchUpMeanMs  float64 `json:"mean_latency_catch_up_ms"`
	CatchUpSeconds float64 `json:"catch_up_seconds"`
	// BeforeHandoverMs is the mean latency before the handover
	// (TrialResult.BeforeHandover); FreezeMs the handover's freeze.
	BeforeHandoverMs float64 `json:"mean_latency_before_handover_ms"`
	FreezeMs         float64 `json:"freeze_ms"`
	// HandoverExcessMsS is the handover's cost to the clients as the proxy
	// measured it (proxy/client.Handover's ExcessMSS), ms·s; -1 if none.
	HandoverExcessMsS float64 `json:"handover_excess_ms_s"`
	// StartExcessMsS is the migration's start's cost to the clients
	// (TrialResult.StartExcessMsS), ms·s; absent if not measured.
	StartExcessMsS *float64 `json:"start_excess_ms_s,omitempty"`
	// PreMigrationMs is the mean latency over the last PreWindow seconds of
	// the warm-up, before this migration starts: the plant's state then.
	PreMigrationMs float64 `json:"mean_latency_pre_migration_ms"`
	// CalmWaitS is how long the migration's start was held for a calm
	// plant (SweepOptions.Calm), seconds; Calm is false when the plant was
	// not calm by the end of that hold (the trial ran anyway).
	CalmWaitS float64 `json:"calm_wait_s"`
	Calm      bool    `json:"calm"`
	// SourceThrottledPct and TargetThrottledPct are the shares (%) of the
	// source's and target's CFS quota periods in which their cgroup was
	// throttled during the migration (TrialResult.SourceThrottled); absent
	// without a CPU quota.
	SourceThrottledPct *float64 `json:"source_throttled_pct,omitempty"`
	TargetThrottledPct *float64 `json:"target_throttled_pct,omitempty"`
	// HostStealPct is the share (%) of the machine's CPU time the
	// hypervisor stole during the migration (TrialResult.HostSteal): a
	// slowdown of the whole plant no rate made; absent if unmeasured.
	HostStealPct *float64 `json:"host_steal_pct,omitempty"`
	// HostStealPeakPct is the largest share (%) stolen over any StealSpan
	// of the migration (TrialResult.HostStealPeak); absent if unmeasured.
	HostStealPeakPct *float64 `json:"host_steal_peak_pct,omitempty"`
	// Disturbed says the host's steal peaked above SweepOptions.StealLimit
	// in this trial and in every re-run it was given: the figure is the
	// host's as much as the rate's.
	Disturbed bool `json:"disturbed"`
	// Aborted marks a disturbed attempt whose migration was aborted
	// (SweepOptions.StealAbort): its figures stop at the abort.
	Aborted bool `json:"aborted,omitempty"`
	// PairOfMs is the setpoint (ms) of the PID trial this one was run at
	// the copy rate of (SweepOptions.Paired); 0 = a ladder trial.
	PairOfMs float64 `json:"pair_of_setpoint_ms,omitempty"`
}

// PIDPoint is one PID migration of the sweep.
type PIDPoint struct {
	SetpointMs       float64 `json:"setpoint_ms"`
	MeanLatencyMs    float64 `json:"mean_latency_ms"`
	StddevLatencyMs  float64 `json:"stddev_latency_ms"`
	MigrationSeconds float64 `json:"migration_seconds"`
	MeanRateMBs      float64 `json:"mean_rate_mb_s"`
	// CopyRateMBs is the hot copy's own rate: the bytes it moved over the
	// time from its first byte to its last (mean_rate_mb_s divides by the
	// whole migration: start-up, catch-up and handover too); 0 when the
	// loop recorded too little of it.
	CopyRateMBs float64 `json:"copy_rate_mb_s"`
	// PairFixed is the fixed-rate trial paired with this one
	// (SweepOptions.Paired): run right after it at its copy rate, or, when
	// PairFirst is "fixed", right before it at the copy rate of the last
	// PID trial at this setpoint; nil without one.
	PairFixed *FixedPoint `json:"pair_fixed,omitempty"`
	// PairFirst says which trial of the pair ran first: "pid" or "fixed".
	PairFirst string `json:"pair_first,omitempty"`
	// MeanHorizon is the trial's mean-latency horizon, steps (0 = off).
	MeanHorizon int `json:"mean_horizon_steps"`
	// Ki is the trial's integral gain, per step.
	Ki float64 `json:"ki"`
	// StartGrowth is the trial's slow-start growth per step (1 = none).
	StartGrowth float64 `json:"start_growth"`
	// RearmGrowth is the trial's growth back to the held rate after a
	// pause (1 = the slow start's, to half the peak).
	RearmGrowth float64 `json:"rearm_growth"`
	// StartBackoff is how many steps of growth the trial's slow start
	// took back when it ended (0 = none).
	StartBackoff int `json:"start_backoff"`
	// IdleFloor is the trial's idle floor under its mean contract's
	// working setpoint (0 = none).
	IdleFloor float64 `json:"idle_floor"`
	// LatencySource is what the trial's loop steered by: "proxy" (the
	// proxy's windows) or "client" (the workload's own window too).
	LatencySource string `json:"latency_source"`
	// ErrorFloor is the trial's error floor (0 = none).
	ErrorFloor float64 `json:"error_floor"`
	// Headroom is the trial's headroom over what the copy moved (0 = off).
	Headroom float64 `json:"headroom"`
	// ExecutionMeanMs is the mean without the workload's own queue wait:
	// the latency the proxy measures and the loop controls.
	ExecutionMeanMs float64 `json:"execution_mean_latency_ms"`
	// BeforeHandoverMs is the mean latency before the handover, while the
	// loop sets the speed (TrialResult.BeforeHandover); LoopMeanMs the mean
	// of the loop's own process variable then (the proxy's window mean;
	// null when the loop recorded none: a migration aborted before its
	// first step); FreezeMs the handover's freeze.
	BeforeHandoverMs float64  `json:"mean_latency_before_handover_ms"`
	LoopMeanMs       *float64 `json:"loop_mean_latency_ms"`
	FreezeMs         float64  `json:"freeze_ms"`
	PreMigrationMs   float64  `json:"mean_latency_pre_migration_ms"` // as FixedPoint's
	CalmWaitS        float64  `json:"calm_wait_s"`                   // as FixedPoint's
	Calm             bool     `json:"calm"`                          // as FixedPoint's
	// TopSpeedSteps counts the loop's steps before the handover at the
	// controller's top speed (SweepOptions.MaxRate): many of them and a
	// loop mean under the setpoint mean the setpoint was out of reach.
	TopSpeedSteps int `json:"top_speed_steps"`
	// BeatenByFixed lists the fixed rates (MB/s) whose trials in the same
	// run migrated faster at a lower mean latency than this one; BeatsFixed
	// those this one was faster and lower than (Dominance). Never null.
	BeatenByFixed []float64 `json:"beaten_by_fixed_mb_s"`
	BeatsFixed    []float64 `json:"beats_fixed_mb_s"`
	// ReserveMsS is the PID's handover reserve (ms·s, learned from the
	// proxy unless given); HandoverExcessMsS what the proxy then measured
	// the handover to cost (proxy/client.Handover.ExcessMSS; -1 if it did
	// not say).
	ReserveMsS        float64 `json:"handover_reserve_ms_s"`
	HandoverExcessMsS float64 `json:"handover_excess_ms_s"`
	// StartExcessMsS: as FixedPoint's.
	StartExcessMsS *float64 `json:"start_excess_ms_s,omitempty"`
	// SourceThrottledPct, TargetThrottledPct, HostStealPct,
	// HostStealPeakPct, Disturbed, Aborted: as FixedPoint's.
	SourceThrottledPct *float64 `json:"source_throttled_pct,omitempty"`
	TargetThrottledPct *float64 `json:"target_throttled_pct,omitempty"`
	HostStealPct       *float64 `json:"host_steal_pct,omitempty"`
	HostStealPeakPct   *float64 `json:"host_steal_peak_pct,omitempty"`
	Disturbed          bool     `json:"disturbed"`
	Aborted            bool     `json:"aborted,omitempty"`
}

// PreWindow is how much of a trial's warm-up, up to the migration's start,
// its pre-migration latency covers (seconds).
const PreWindow = 10.0

// pct is share (0–1) as a percentage rounded to 0.1, nil when share is NaN
// (not measured).
func pct(share float64) *float64 {
	return measured(100*share, 1)
}

// measured is x rounded to d decimals, nil when x is NaN (not measured).
func measured(x float64, d int) *float64 {
	if math.IsNaN(x) {
		return nil
	}
	v := round(x, d)
	return &v
}

// offCell formats how far a measured figure is from setpoint sp, in %
// ("–" when it is absent).
func offCell(x *float64, sp float64) string {
	if x == nil {
		return "–"
	}
	return fmt.Sprintf("%+.1f %%", 100*(*x-sp)/sp)
}

// fp formats a measured figure to 0.1, "–" when it is absent.
func fp(x *float64) string {
	if x == nil {
		return "–"
	}
	return f1(*x)
}

// throttleNote is the progress lines' account of the servers' CPU quota
// and the host's steal ("; CPU quota throttled in 34 % of the source's
// periods, 12 % of the target's; host steal 3 %, 10 s peak 21 %"), each
// part left out when not measured.
func throttleNote(src, dst, steal, peak *float64) string {
	f := func(p *float64) string {
		if p == nil {
			return "? %"
		}
		return fmt.Sprintf("%.0f %%", *p)
	}
	var note string
	if src != nil || dst != nil {
		note = fmt.Sprintf("; CPU quota throttled in %s of the source's periods, %s of the target's", f(src), f(dst))
	}
	if steal != nil {
		note += "; host steal " + f(steal)
		if peak != nil {
			note += fmt.Sprintf(", %.0f s peak %s", StealSpan.Seconds(), f(peak))
		}
	}
	return note
}

// preMigration returns r's mean latency over the PreWindow whole seconds
// before the one its migration started in.
func preMigration(r *TrialResult) float64 {
	end := math.Floor(r.MigStart)
	return round(Describe(r.Latencies(max(0, end-PreWindow), end)).Mean, 2)
}

// handoverExcess is the cost (ms·s) the bed's proxy measured for the
// tenant's handover held after since (the trial's migration was created);
// -1 if it has none. The trial's cooldown outlasts the proxy's window, after
// which the measurement is in.
func handoverExcess(bed *testbed.Bed, tenant string, since time.Time) float64 {
	if bed.Proxy == nil {
		return -1
	}
	for _, h := range bed.Proxy.Handovers(tenant) {
		if h.HeldAt.After(since) {
			return h.ExcessMSS
		}
	}
	return -1
}

// sweepTrial is one trial of a sweep's order: fixed rate Index (Variant
// −1), or PID setpoint Index with loop Variant (0: Common's; 1...: the
// compared variants in SweepOptions' order).
type sweepTrial struct{ Index, Variant int }

// sweepOrder is the order of a sweep's trials over nFixed fixed rates and
// nSP setpoints of nVariants loops each. Fixed and PID alternate in pairs —
// F P, P F, F P, ... — so that drift over the sweep (the table gains dead
// tuples) falls on both ladders alike; and a setpoint's loops run in
// reverse order on every other setpoint. The tenant changes servers with
// each trial, so each ladder, and each variant of the PID, then migrates
// in both directions as often: with plain F P F P every PID trial moved the
// tenant the same way, and with the variants always in one order each
// variant did (on 2026-11-24 every floor-1 loop of a comparison moved
// server-a to server-b), so a difference between the servers read as the
// variant's.
func sweepOrder(nFixed, nSP, nVariants int) []sweepTrial {
	var out []sweepTrial
	for i := 0; i < max(nFixed, nSP); i++ {
		var fixed, pid []sweepTrial
		if i < nFixed {
			fixed = []sweepTrial{{i, -1}}
		}
		if i < nSP {
			for v := range nVariants {
				pid = append(pid, sweepTrial{i, v})
			}
		}
		if i%2 == 1 {
			slices.Reverse(pid)
			fixed, pid = pid, fixed
		}
		out = append(append(out, fixed...), pid...)
	}
	return out
}

// MaxRounds bounds SweepOptions.Rounds.
const MaxRounds = 50

// repeatOrder is a sweep's order for rounds rounds (SweepOptions.Rounds)
// of round.
func repeatOrder(round []sweepTrial, rounds int) []sweepTrial {
	var out []sweepTrial
	for range max(1, rounds) {
		out = append(out, round...)
	}
	return out
}

// roundSuffix ends the names of round k's trials (from 1): none for the
// first, "-rk" after it.
func roundSuffix(k int) string {
	if k <= 1 {
		return ""
	}
	return fmt.Sprintf("-r%d", k)
}

// SweepResult is `sluice bench slack-sweep --json`.
type SweepResult struct {
	Fixed []FixedPoint `json:"fixed"`
	PID   []PIDPoint   `json:"pid"`
	// DisturbedFixed and DisturbedPID are the attempts re-run because the
	// host's steal went above SweepOptions.StealLimit, in the order run;
	// their re-runs are in Fixed and PID.
	DisturbedFixed []FixedPoint `json:"disturbed_fixed,omitempty"`
	DisturbedPID   []PIDPoint   `json:"disturbed_pid,omitempty"`
	// FixedOtherRelay are the fixed-rate trials re-run with the WAL relayed
	// on the other side (SweepOptions.CompareWALRelay), apart from Fixed,
	// whose ladder the PID points are judged against.
	FixedOtherRelay []FixedPoint `json:"fixed_other_wal_relay,omitempty"`
	// SwingAmplitude and SwingPeriodS are the load's swing during every
	// migration (SweepOptions.Swing): a fraction of the rate, and seconds;
	// absent without one.
	SwingAmplitude float64 `json:"swing_amplitude,omitempty"`
	SwingPeriodS   float64 `json:"swing_period_s,omitempty"`
	// Swing is every trial's figures by the swing's halves, in the order
	// run (disturbed attempts too); absent without a swing.
	Swing []SwingTrial `json:"swing,omitempty"`
}

// DefaultSetpointFactors are the PID ladder's setpoints as multiples of the
// baseline mean latency. They start at 3×, not 2×: on the testbed's
// 0.25-CPU servers a migration disturbs the source beyond what its rate
// controls (the sweep of 2026-11-23 02:58: with the copy paused, rate 0, the
// 2× trial's 3 s windows still read 20–29 ms against its 7.2 ms setpoint,
// while the undisturbed workload's windows had a p90 of 5.6 ms), so at 2×
// the loop spends the migration paused above its setpoint. Stats.Window90
// reports the undisturbed noise with every sweep.
var DefaultSetpointFactors = []float64{3, 4, 5, 6}

// SlackSweep runs Slacker's Fig. 11: migrations of one tenant back and forth
// between two servers under the workload, at a ladder of fixed rates and
// under the PID at a ladder of setpoints, the two ladders interleaved. Every migration's ledger is
// checked. It writes series.csv, summary.json, report.md, sweep.png and one
// PNG per PID trial into o.Out.
func SlackSweep(ctx context.Context, bed *testbed.Bed, o SweepOptions) (SweepResult, error) {
	var res SweepResult
	if err := o.defaults(); err != nil {
		return res, err
	}
	if len(o.FixedRates) == 0 {
		o.FixedRates = []float64{10e6, 20e6, 30e6, 40e6}
	}
	if w := o.Swing; w != nil {
		if err := w.Valid(); err != nil {
			return res, err
		}
		res.SwingAmplitude, res.SwingPeriodS = w.Amplitude, w.Period.Seconds()
	}
	if err := o.StealGuard.check(); err != nil {
		return res, err
	}
	if o.Rounds < 0 || o.Rounds > MaxRounds {
		return res, fmt.Errorf("experiment: %d rounds: want 1 to %d (0 = 1)", o.Rounds, MaxRounds)
	}
	started := time.Now()
	say := o.Progress
	tn, err := bed.CreateTenant(ctx, 0, "sweep", o.Size, o.Seed+1)
	if err != nil {
		return res, err
	}
	base, err := SettledBaseline(ctx, tn, o.Workload, o.BaselineFor, o.Seed+2, say)
	if err != nil {
		return res, err
	}
	say("baseline: mean latency %.1f ms ± %.1f at %.0f transactions/s; 3 s windows' p90 %.1f ms", base.Mean, base.Std, o.Workload.Rate, base.Window90)
	if len(o.Setpoints) == 0 {
		if len(o.SetpointFactors) == 0 {
			o.SetpointFactors = DefaultSetpointFactors
		}
		for _, k := range o.SetpointFactors {
			o.Setpoints = append(o.Setpoints, round(k*base.Mean, 1))
		}
	}
	if low := slices.Min(o.Setpoints); base.Mean >= low {
		// Seen 2026-11-27 01:58 and 02:02 UTC: baselines of 8.5 and 12.6
		// ms, host steal 5–26 %, under setpoints of 7.5–9 ms.
		return res, fmt.Errorf("experiment: the baseline mean latency %.1f ms (at %.0f transactions/s, no migration) is at or above the setpoint %.1f ms: the PID could only pause; run again on a quieter host or raise --setpoints", base.Mean, o.Workload.Rate, low)
	}
	var trials []Labeled
	to := 1
	suffix := "" // the round's, on every trial's name ("-r2", ...)
	trial := func(name string, sp float64, req agentclient.StartMigration, client bool, abort float64) (*TrialResult, error) {
		say("%s: migrating %s to %s", name, tn.Name, bed.Servers[to].Name)
		wc := o.Workload
		wc.Seed = o.Seed + uint64(len(trials)) + 10
		req.Checkpoint = o.Checkpoint
		if req.WALRelay == "" {
			req.WALRelay = o.WALRelay
		}
		r, err := Trial{Bed: bed, Tenant: tn, To: to, Workload: wc, Warmup: o.Warmup, Migration: req, TargetCPUs: o.TargetCPUs, CalmBelow: o.calmBelow(base), ClientLatency: client, AbortAboveSteal: abort, Swing: o.Swing, Progress: say, stealPeak: o.stealPeak}.Run(ctx)
		if err != nil {
			return r, fmt.Errorf("%s: %w", name, err)
		}
		trials = append(trials, Labeled{Name: name, SetpointMs: sp, Res: r})
		if !r.Aborted { // an aborted migration left the tenant where it was
			to = 1 - to
		}
		return r, nil
	}
	// retry says whether the trial just run (attempt 1, 2, ...) met too
	// much host steal and has a re-run left; if so its series is renamed
	// as that attempt's.
	retry := func(r *TrialResult, attempt int) bool {
		if !o.again(r, attempt) {
			return false
		}
		t := &trials[len(trials)-1]
		say("%s", o.rerunNote(t.Name, r, attempt))
		t.Name += fmt.Sprintf("-disturbed%d", attempt)
		return true
	}
	fixedOnce := func(rate, pairOf float64, relay string, attempt int) (again bool, err error) {
		name := fmt.Sprintf("fixed-%.0fMBps", rate/1e6)
		if pairOf > 0 {
			name = fmt.Sprintf("fixed-%.1fMBps-pair-%gms", rate/1e6, pairOf)
		}
		if relay != "" {
			name += "-relay-" + relay
		}
		name += suffix
		r, err := trial(name, 0, agentclient.StartMigration{Rate: rate, WALRelay: relay}, false, o.abortAt(attempt))
		if err != nil {
			return false, err
		}
		st := Describe(r.Latencies(r.MigStart, r.MigEnd))
		bh := Describe(r.Latencies(r.BeforeHandover()))
		p := FixedPoint{RateMBs: round(rate/1e6, 2), MeanLatencyMs: round(st.Mean, 2), StddevLatencyMs: round(st.Std, 2), MigrationSeconds: round(r.MigEnd-r.MigStart, 1),
			BeforeHandoverMs: round(bh.Mean, 2), FreezeMs: round(r.FreezeMs, 1), PreMigrationMs: preMigration(r),
			HandoverExcessMsS: round(handoverExcess(bed, tn.Name, r.Migration.Created), 1), StartExcessMsS: measured(r.StartExcessMsS(), 1),
			SourceThrottledPct: pct(r.SourceThrottled), TargetThrottledPct: pct(r.TargetThrottled), HostStealPct: pct(r.HostSteal), HostStealPeakPct: pct(r.HostStealPeak), CalmWaitS: round(r.CalmWait, 1), Calm: r.Calm, Aborted: r.Aborted, PairOfMs: pairOf}
		p.CopyMeanMs, p.CatchUpMeanMs, p.CatchUpSeconds = phaseMeans(r)
		if sm := r.Migration.Summary; sm != nil {
			p.WALRelay, p.WALMB = sm.WALRelay, round(float64(sm.WALBytes)/1e6, 1)
		}
		say("fixed %.1f MB/s: latency %.1f ± %.1f ms (before the handover %.1f; before the migration %.1f), %.1f s%s; copy %.1f ms, catch-up %.1f ms over %.0f s (%.0f MB of WAL relayed by the %s); start cost %s ms·s, handover cost %.0f; ledger %d acknowledged, 0 lost",
			p.RateMBs, p.MeanLatencyMs, p.StddevLatencyMs, p.BeforeHandoverMs, p.PreMigrationMs, p.MigrationSeconds, throttleNote(p.SourceThrottledPct, p.TargetThrottledPct, p.HostStealPct, p.HostStealPeakPct), p.CopyMeanMs, p.CatchUpMeanMs, p.CatchUpSeconds, p.WALMB, cmp.Or(p.WALRelay, "?"), fp(p.StartExcessMsS), p.HandoverExcessMsS, r.Check.Acknowledged)
		if retry(r, attempt) {
			res.DisturbedFixed = append(res.DisturbedFixed, p)
			return true, nil
		}
		p.Disturbed = o.disturbed(r)
		if relay != "" {
			res.FixedOtherRelay = append(res.FixedOtherRelay, p)
		} else {
			res.Fixed = append(res.Fixed, p)
		}
		return false, nil
	}
	relayTurn := 0 // compared relays: the pairs so far
	runFixed := func(rate, pairOf float64) error {
		sides := []string{""}
		if o.CompareWALRelay && pairOf == 0 {
			other := agentclient.WALRelaySource
			if o.WALRelay == agentclient.WALRelaySource {
				other = agentclient.WALRelayTarget
			}
			// Common's side migrates to server 1 in even pairs, to server
			// 0 in odd ones, so each side moves the tenant both ways as
			// often: the servers may differ, and the trials between pairs
			// (the PID's) flip the direction, so a fixed order would not
			// alternate it.
			if sides = append(sides, other); (to == 1) != (relayTurn%2 == 0) {
				slices.Reverse(sides)
			}
			relayTurn++
		}
		for _, side := range sides {
			if err := untilUndisturbed(func(attempt int) (bool, error) { return fixedOnce(rate, pairOf, side, attempt) }); err != nil {
				return err
			}
		}
		return nil
	}
	// pidVariant is one loop compared at a setpoint: Common's settings but
	// for the fields set.
	type pidVariant struct {
		h                                           int
		ki, reserve, floor, headroom, growth, rearm *float64
		client                                      bool
	}
	pidOnce := func(sp float64, v pidVariant, attempt int) (again bool, err error) {
		h, client := v.h, v.client
		ctl := o.pidControl(sp)
		ctl.MeanHorizon = h
		if v.ki != nil {
			ctl.Ki = v.ki
		}
		if v.floor != nil {
			ctl.ErrorFloor = *v.floor
		}
		if v.headroom != nil {
			ctl.Headroom = *v.headroom
		}
		if v.reserve != nil {
			ctl.HandoverReserveMsS = v.reserve
		}
		if v.growth != nil {
			ctl.StartGrowth = *v.growth
		}
		if v.rearm != nil {
			ctl.RearmGrowth = *v.rearm
		}
		gain := control.SlackerKi // the agent's default when none is sent
		if ctl.Ki != nil {
			gain = *ctl.Ki
		}
		name := fmt.Sprintf("pid-%gms", sp)
		if len(o.CompareHorizons) > 0 {
			name += fmt.Sprintf("-h%d", h)
		}
		if len(o.CompareKi) > 0 {
			name += fmt.Sprintf("-ki%g", gain)
		}
		if len(o.CompareReserves) > 0 {
			if r := ctl.HandoverReserveMsS; r != nil {
				name += fmt.Sprintf("-r%g", *r)
			} else {
				name += "-rauto"
			}
		}
		if len(o.CompareErrorFloors) > 0 {
			name += fmt.Sprintf("-f%g", ctl.ErrorFloor)
		}
		if len(o.CompareHeadroom) > 0 {
			name += fmt.Sprintf("-hr%g", ctl.Headroom)
		}
		if len(o.CompareStartGrowth) > 0 {
			name += fmt.Sprintf("-g%g", ctl.StartGrowth)
		}
		if len(o.CompareRearmGrowth) > 0 {
			name += fmt.Sprintf("-rg%g", ctl.RearmGrowth)
		}
		source := latencySource(client)
		if o.CompareLatencySource {
			name += "-" + source
		}
		name += suffix
		r, err := trial(name, sp, agentclient.StartMigration{Rate: o.MaxRate * StartFraction, Control: ctl}, client, o.abortAt(attempt))
		if err != nil {
			return false, err
		}
		st := Describe(r.Latencies(r.MigStart, r.MigEnd))
		secs := r.MigEnd - r.MigStart
		p := PIDPoint{SetpointMs: sp, MeanLatencyMs: round(st.Mean, 2), StddevLatencyMs: round(st.Std, 2), MigrationSeconds: round(secs, 1),
			MeanRateMBs: round(float64(r.MovedBytes())/1e6/secs, 2), CopyRateMBs: round(copyRate(r)/1e6, 2), MeanHorizon: h, Ki: gain, LatencySource: source, StartGrowth: ctl.StartGrowth, RearmGrowth: ctl.RearmGrowth, StartBackoff: ctl.StartBackoff, IdleFloor: ctl.IdleFloor, ErrorFloor: ctl.ErrorFloor, Headroom: ctl.Headroom, ExecutionMeanMs: round(r.ExecutionMean(r.MigStart, r.MigEnd), 2)}
		from, to := r.BeforeHandover()
		p.BeforeHandoverMs = round(Describe(r.Latencies(from, to)).Mean, 2)
		p.LoopMeanMs = measured(r.LoopMean(from, to), 2)
		p.TopSpeedSteps = r.StepsAtRate(from, to, o.MaxRate)
		p.FreezeMs = round(r.FreezeMs, 1)
		p.PreMigrationMs = preMigration(r)
		p.CalmWaitS, p.Calm = round(r.CalmWait, 1), r.Calm
		p.ReserveMsS = round(r.ReserveMsS, 1)
		p.HandoverExcessMsS = round(handoverExcess(bed, tn.Name, r.Migration.Created), 1)
		p.StartExcessMsS = measured(r.StartExcessMsS(), 1)
		p.SourceThrottledPct, p.TargetThrottledPct = pct(r.SourceThrottled), pct(r.TargetThrottled)
		p.HostStealPct, p.HostStealPeakPct = pct(r.HostSteal), pct(r.HostStealPeak)
		p.Aborted = r.Aborted
		say("pid %.1f ms (%s latency, mean horizon %d, ki %g, start growth %g, backoff %d, rearm growth %g, idle floor %g, error floor %g, headroom %g): latency %.1f ± %.1f ms (execution %.1f; before the handover %.1f, loop %s; before the migration %.1f), %.1f s at %.1f MB/s%s; start cost %s ms·s; handover reserve %.0f ms·s, cost %.0f; ledger %d acknowledged, 0 lost",
			sp, source, h, gain, ctl.StartGrowth, ctl.StartBackoff, ctl.RearmGrowth, ctl.IdleFloor, ctl.ErrorFloor, ctl.Headroom, p.MeanLatencyMs, p.StddevLatencyMs, p.ExecutionMeanMs, p.BeforeHandoverMs, fp(p.LoopMeanMs), p.PreMigrationMs, p.MigrationSeconds, p.MeanRateMBs, throttleNote(p.SourceThrottledPct, p.TargetThrottledPct, p.HostStealPct, p.HostStealPeakPct), fp(p.StartExcessMsS), p.ReserveMsS, p.HandoverExcessMsS, r.Check.Acknowledged)
		if retry(r, attempt) {
			res.DisturbedPID = append(res.DisturbedPID, p)
			return true, nil
		}
		p.Disturbed = o.disturbed(r)
		res.PID = append(res.PID, p)
		return false, nil
	}
	runPID := func(sp float64, v pidVariant) error {
		return untilUndisturbed(func(attempt int) (bool, error) { return pidOnce(sp, v, attempt) })
	}
	// The PID loops of a setpoint: Common's, then each compared variant
	// (sweepOrder gives their order).
	var variants []func(sp float64) error
	loop0 := pidVariant{h: o.MeanHorizon, client: o.ClientLatency}
	add := func(v pidVariant) { variants = append(variants, func(sp float64) error { return runPID(sp, v) }) }
	add(loop0)
	if o.Paired {
		pid := variants[0]
		lastRate := map[float64]float64{} // setpoint → its last kept PID trial's copy rate, bytes/s
		pairs := map[float64]int{}        // setpoint → pairs run
		variants[0] = func(sp float64) error {
			pairs[sp]++
			if rate := lastRate[sp]; PairFixedFirst(pairs[sp], rate) {
				say("pid %.1f ms: the fixed trial first this time, at the copy rate of the last PID trial at this setpoint, %.1f MB/s", sp, rate/1e6)
				if err := runFixed(rate, sp); err != nil {
					return err
				}
				f := res.Fixed[len(res.Fixed)-1]
				if err := pid(sp); err != nil {
					return err
				}
				if k := len(res.PID) - 1; k >= 0 && res.PID[k].SetpointMs == sp {
					res.PID[k].PairFixed, res.PID[k].PairFirst = &f, "fixed"
					delete(lastRate, sp)
					if r := res.PID[k].CopyRateMBs; r > 0 && !res.PID[k].Disturbed {
						lastRate[sp] = r * 1e6
					}
				}
				return nil
			}
			if err := pid(sp); err != nil {
				return err
			}
			k := len(res.PID) - 1
			if k < 0 || res.PID[k].SetpointMs != sp {
				return nil
			}
			rate := res.PID[k].CopyRateMBs * 1e6
			if rate <= 0 {
				say("pid %.1f ms: its copy rate was not measured: no paired fixed trial", sp)
				return nil
			}
			if res.PID[k].Disturbed {
				// Its pair would be left out of the tally, and its rate is
				// the steal's, not the slack's: a 9 ms trial paused through
				// a steal phase copied at 4.8 MB/s, and a fixed trial at
				// that rate could not finish its catch-up (2026-11-26).
				delete(lastRate, sp)
				say("pid %.1f ms: kept disturbed: no paired fixed trial at its %.1f MB/s, and the next pair at this setpoint runs the PID first", sp, rate/1e6)
				return nil
			}
			lastRate[sp] = rate
			say("pid %.1f ms: its copy ran at %.1f MB/s; the fixed trial at that rate next", sp, rate/1e6)
			if err := runFixed(rate, sp); err != nil {
				return err
			}
			f := res.Fixed[len(res.Fixed)-1]
			res.PID[k].PairFixed, res.PID[k].PairFirst = &f, "pid"
			return nil
		}
	}
	for _, h := range o.CompareHorizons {
		v := loop0
		v.h = h
		add(v)
	}
	each := func(xs []float64, set func(v *pidVariant, x *float64)) {
		for _, x := range xs {
			v := loop0
			set(&v, &x)
			add(v)
		}
	}
	each(o.CompareKi, func(v *pidVariant, x *float64) { v.ki = x })
	each(o.CompareReserves, func(v *pidVariant, x *float64) { v.reserve = x })
	each(o.CompareErrorFloors, func(v *pidVariant, x *float64) { v.floor = x })
	each(o.CompareHeadroom, func(v *pidVariant, x *float64) { v.headroom = x })
	each(o.CompareStartGrowth, func(v *pidVariant, x *float64) { v.growth = x })
	each(o.CompareRearmGrowth, func(v *pidVariant, x *float64) { v.rearm = x })
	if o.CompareLatencySource {
		v := loop0
		v.client = !o.ClientLatency
		add(v)
	}
	// A sweep interrupted (ctx done) or ended by a trial's error — a
	// migration that rolled back on its own, say a fixed rate whose
	// catch-up could not finish before its timeout — still writes what
	// its finished trials measured, says so in the report, and returns
	// the error.
	round := sweepOrder(len(o.FixedRates), len(o.Setpoints), len(variants))
	order := repeatOrder(round, o.Rounds)
	var stopped error
	for i, t := range order {
		suffix = roundSuffix(i/len(round) + 1)
		var err error
		if t.Variant < 0 {
			err = runFixed(o.FixedRates[t.Index], 0)
		} else {
			err = variants[t.Variant](o.Setpoints[t.Index])
		}
		if err != nil && len(res.Fixed)+len(res.PID) > 0 {
			stopped = err
			say("stopped (%v): writing what the %d finished trials measured", err, len(res.Fixed)+len(res.PID))
			break
		}
		if err != nil {
			return res, err
		}
	}

	for i := range res.PID {
		res.PID[i].BeatenByFixed, res.PID[i].BeatsFixed = Dominance(res.Fixed, res.PID[i])
	}
	for i := range res.DisturbedPID { // against the kept fixed trials, as the reruns
		res.DisturbedPID[i].BeatenByFixed, res.DisturbedPID[i].BeatsFixed = Dominance(res.Fixed, res.DisturbedPID[i])
	}

	// Outputs.
	if err := writeSeries(o.Out, trials); err != nil {
		return res, err
	}
	if err := writeHandovers(o.Out, trials); err != nil {
		return res, err
	}
	if err := writeStarts(o.Out, trials); err != nil {
		return res, err
	}
	if o.Swing != nil {
		res.Swing = swingTrials(*o.Swing, trials)
	}
	if err := writeJSON(o.Out, SummaryFile, res); err != nil {
		return res, err
	}
	for _, t := range trials {
		if t.SetpointMs > 0 {
			if err := writePNG(o.Out, t.Name+".png", trialChart(t, fmt.Sprintf("%s: PID at setpoint %.1f ms", t.Name, t.SetpointMs))); err != nil {
				return res, err
			}
		}
	}
	if err := writePNG(o.Out, "sweep.png", sweepChart(res)); err != nil {
		return res, err
	}
	if len(res.PID) > 0 {
		if err := writePNG(o.Out, "setpoints.png", setpointChart(res)); err != nil {
			return res, err
		}
	}
	var b strings.Builder
	b.WriteString(reportHeader("sluice bench slack-sweep (Slacker Fig. 11)", o.Command, started, o.bedNote(bed)))
	if stopped != nil {
		fmt.Fprintf(&b, "**Stopped** before its end (%v): %d of the %d trials finished; the trial under way when it stopped is in no figure.\n\n", stopped, len(res.Fixed)+len(res.PID), len(order))
	}
	fmt.Fprintf(&b, "Tenant: %d rows, %.0f MB; workload %.0f transactions/s (%s keys, MPL %d); baseline mean latency %.1f ± %.1f ms (3 s windows: p90 %.1f ms); PID max rate %.0f MB/s.\n\n",
		tn.Rows, float64(tn.Bytes)/1e6, o.Workload.Rate, o.Workload.Distribution, o.Workload.MPL, base.Mean, base.Std, base.Window90, o.MaxRate/1e6)
	if w := o.Swing; w != nil {
		fmt.Fprintf(&b, "Load swing during every migration: %.0f transactions/s for %.0f s, then %.0f for %.0f s, and again, from the migration's start (±%.0f %%, a %.0f s period); the baseline and the warm-ups at %.0f.\n\n",
			(1+w.Amplitude)*o.Workload.Rate, (w.Period - w.Period/2).Seconds(), (1-w.Amplitude)*o.Workload.Rate, (w.Period / 2).Seconds(), 100*w.Amplitude, w.Period.Seconds(), o.Workload.Rate)
	}
	b.WriteString("Fixed and PID trials alternate in pairs (fixed 1, PID 1, PID 2, fixed 2, fixed 3, ...), and a setpoint's compared loops run in reverse order on every other setpoint, so each ladder and each loop migrates both ways as often; \"before the migration\" is each trial's mean over the last 10 s of its warm-up.\n\n")
	b.WriteString("| fixed rate MB/s | WAL relay | mean latency ms | stddev ms | migration s | mean before the handover ms | copy ms | catch-up ms (s) | WAL relayed MB | source throttled % | freeze ms | start cost ms·s | handover cost ms·s | before the migration ms |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, p := range append(slices.Clip(res.Fixed), res.FixedOtherRelay...) {
		fmt.Fprintf(&b, "| %.1f | %s | %s | %s | %.1f | %s | %s | %s (%.0f) | %.0f | %s | %.0f | %s | %s | %s |\n", p.RateMBs, cmp.Or(p.WALRelay, "?"), f1(p.MeanLatencyMs), f1(p.StddevLatencyMs), p.MigrationSeconds, f1(p.BeforeHandoverMs), f1(p.CopyMeanMs), f1(p.CatchUpMeanMs), p.CatchUpSeconds, p.WALMB, fp(p.SourceThrottledPct), p.FreezeMs, fp(p.StartExcessMsS), f1(p.HandoverExcessMsS), f1(p.PreMigrationMs))
	}
	b.WriteString("\nLatency is the workload's (Slacker: arrival queue + execution); \"execution\" leaves out the wait in the workload's own arrival queue — what the proxy measures. A loop steers by the proxy's windows (latency source \"proxy\") or by those and the workload's own window (\"client\").\n")
	b.WriteString("\n| PID setpoint ms | latency source | mean horizon steps | Ki | start growth / backoff | rearm growth | error floor | headroom | mean latency ms | error vs setpoint | execution mean ms | error vs setpoint | stddev ms | migration s | mean rate MB/s | fixed rate's migration s at this latency | fixed rate's mean latency ms at this migration time | fixed trials faster and lower | fixed trials it was faster and lower than |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, p := range res.PID {
		eq := "outside the fixed ladder's range"
		if s, ok := FixedSecondsAt(res.Fixed, p.MeanLatencyMs); ok {
			eq = fmt.Sprintf("%.1f (PID %.2f× as fast)", s, s/p.MigrationSeconds)
		}
		eqLat := "outside the fixed ladder's range"
		if l, ok := FixedLatencyAt(res.Fixed, p.MigrationSeconds); ok {
			eqLat = fmt.Sprintf("%.1f (PID's %+.0f %%)", l, 100*(p.MeanLatencyMs-l)/l)
		}
		fmt.Fprintf(&b, "| %.1f | %s | %d | %g | %g / %d | %g | %g | %g | %s | %+.1f %% | %s | %+.1f %% | %s | %.1f | %.1f | %s | %s | %s | %s |\n", p.SetpointMs, p.LatencySource, p.MeanHorizon, p.Ki, p.StartGrowth, p.StartBackoff, p.RearmGrowth, p.ErrorFloor, p.Headroom, f1(p.MeanLatencyMs), 100*(p.MeanLatencyMs-p.SetpointMs)/p.SetpointMs,
			f1(p.ExecutionMeanMs), 100*(p.ExecutionMeanMs-p.SetpointMs)/p.SetpointMs, f1(p.StddevLatencyMs), p.MigrationSeconds, p.MeanRateMBs, eq, eqLat, rates(p.BeatenByFixed), rates(p.BeatsFixed))
	}
	unbeaten := 0
	for _, p := range res.PID {
		if len(p.BeatenByFixed) == 0 {
			unbeaten++
		}
	}
	if len(res.PID) > 0 && len(res.Fixed) > 0 {
		fmt.Fprintf(&b, "\nNo fixed trial migrated faster at a lower mean latency than %d of the %d PID trials (the interpolated columns assume the fixed ladder is monotonic; these two do not).\n", unbeaten, len(res.PID))
	}
	b.WriteString("\nBefore the handover (the loop sets the speed; the handover's freeze and the drain of the queue it builds are a fixed cost per migration, in the whole-migration figures above):\n\n")
	b.WriteString("| PID setpoint ms | latency source | mean horizon steps | Ki | start growth / backoff | rearm growth | error floor | headroom | mean latency ms | error vs setpoint | loop's own mean ms | error vs setpoint | fixed rate's migration s at this latency | freeze ms | before the migration ms | steps at top speed | start cost ms·s | handover reserve / cost ms·s | host steal, 10 s peak |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, p := range res.PID {
		eq := "outside the fixed ladder's range"
		if s, ok := secondsAt(res.Fixed, func(f FixedPoint) float64 { return f.BeforeHandoverMs }, p.BeforeHandoverMs); ok {
			eq = fmt.Sprintf("%.1f (PID %.2f× as fast)", s, s/p.MigrationSeconds)
		}
		fmt.Fprintf(&b, "| %.1f | %s | %d | %g | %g / %d | %g | %g | %g | %s | %+.1f %% | %s | %s | %s | %.0f | %s | %d | %s | %.1f / %s | %s |\n", p.SetpointMs, p.LatencySource, p.MeanHorizon, p.Ki, p.StartGrowth, p.StartBackoff, p.RearmGrowth, p.ErrorFloor, p.Headroom, f1(p.BeforeHandoverMs), 100*(p.BeforeHandoverMs-p.SetpointMs)/p.SetpointMs,
			fp(p.LoopMeanMs), offCell(p.LoopMeanMs, p.SetpointMs), eq, p.FreezeMs, f1(p.PreMigrationMs), p.TopSpeedSteps, fp(p.StartExcessMsS), p.ReserveMsS, f1(p.HandoverExcessMsS), stealCell(p.HostStealPeakPct, p.Disturbed))
	}
	b.WriteString(withinLine(res.PID))
	b.WriteString(pairLines(res.PID))
	if res.Swing != nil {
		b.WriteString(swingLines(res.Swing))
	}
	b.WriteString(disturbedLines(res, o.StealLimit))
	b.WriteString("\n")
	b.WriteString(ledgerLines(trials))
	b.WriteString(cpuLines(trials))
	b.WriteString(calmLines(trials))
	b.WriteString("\n![sweep](sweep.png)\n\n![setpoints](setpoints.png)\n")
	if err := writeFile(o.Out, ReportFile, b.String()); err != nil {
		return res, err
	}
	if stopped != nil {
		return res, fmt.Errorf("experiment: stopped after %d finished trials (their report is in %s): %w", len(res.Fixed)+len(res.PID), o.Out, stopped)
	}
	return res, nil
}

// sweepChart plots mean latency against migration time for both ladders
// (the trade-off: lower and left is better) and achieved latency against
// the setpoint.
func sweepChart(r SweepResult) chart.Chart {
	var fx, fy, px, py []float64
	fixed := append([]FixedPoint(nil), r.Fixed...)
	sort.Slice(fixed, func(i, j int) bool { return fixed[i].MigrationSeconds < fixed[j].MigrationSeconds })
	for _, p := range fixed {
		fx, fy = append(fx, p.MigrationSeconds), append(fy, p.MeanLatencyMs)
	}
	pid := append([]PIDPoint(nil), r.PID...)
	sort.Slice(pid, func(i, j int) bool { return pid[i].MigrationSeconds < pid[j].MigrationSeconds })
	for _, p := range pid {
		px, py = append(px, p.MigrationSeconds), append(py, p.MeanLatencyMs)
	}
	c1 := chart.Chart{
		Title:  "slack sweep: mean latency during the migration vs its duration",
		XLabel: "migration seconds",
		Panels: []chart.Panel{{YLabel: "mean latency, ms", Series: []chart.Series{
			{Name: "fixed rates", X: fx, Y: fy}, {Name: "PID setpoints", X: px, Y: py},
		}}},
	}
	return c1
}

// setpointChart plots the PID's achieved mean latency against its setpoint.
func setpointChart(r SweepResult) chart.Chart {
	pid := append([]PIDPoint(nil), r.PID...)
	sort.Slice(pid, func(i, j int) bool { return pid[i].SetpointMs < pid[j].SetpointMs })
	var sx, sy []float64
	for _, p := range pid {
		sx, sy = append(sx, p.SetpointMs), append(sy, p.MeanLatencyMs)
	}
	return chart.Chart{
		Title:  "PID: achieved mean latency during the migration vs setpoint",
		XLabel: "setpoint, ms",
		Panels: []chart.Panel{{YLabel: "mean latency, ms", Series: []chart.Series{
			{Name: "achieved", X: sx, Y: sy}, {Name: "= setpoint", X: sx, Y: sx, Dashed: true},
		}}},
	}
}

// untilUndisturbed calls once with attempt 1, 2, … while it asks to run
// again (its trial was disturbed and has a re-run left) and fails not.
func untilUndisturbed(once func(attempt int) (again bool, err error)) error {
	for attempt := 1; ; attempt++ {
		if again, err := once(attempt); err != nil || !again {
			return err
		}
	}
}

// stealCell is a report cell for a host steal percentage (nil: "–"),
// marked when the trial stayed disturbed through its re-runs.
func stealCell(pct *float64, disturbed bool) string {
	cell := "–"
	if pct != nil {
		cell = f1(*pct) + " %"
	}
	if disturbed {
		cell += " (disturbed)"
	}
	return cell
}

// withinLine counts the PID trials whose mean latency before the handover
// ended within ±10 % and ±5 % of their setpoint (Slacker's result and
// sluice's goal), and the distinct setpoints among them; "" without PID
// trials. Trials marked Disturbed count, as they ran.
func withinLine(pid []PIDPoint) string {
	if len(pid) == 0 {
		return ""
	}
	n10, n5 := 0, 0
	sps := map[float64]bool{}
	var missed []string
	for _, p := range pid {
		e := math.Abs(p.BeforeHandoverMs-p.SetpointMs) / p.SetpointMs
		switch {
		case e <= 0.05:
			n5++
			fallthrough
		case e <= 0.10:
			n10++
			sps[p.SetpointMs] = true
		default:
			missed = append(missed, fmt.Sprintf("%g ms %+.1f %%", p.SetpointMs, 100*(p.BeforeHandoverMs-p.SetpointMs)/p.SetpointMs))
		}
	}
	line := fmt.Sprintf("\n%d of the %d PID trials ended within ±10 %% of their setpoint before the handover (%d distinct setpoints), %d within ±5 %%", n10, len(pid), len(sps), n5)
	if len(missed) > 0 {
		line += "; outside: " + strings.Join(missed, ", ")
	}
	return line + ".\n"
}

// disturbedLines lists the attempts re-run because the host's steal peaked
// above limit (a share; SweepOptions.StealLimit); "" when none was.
func disturbedLines(res SweepResult, limit float64) string {
	if len(res.DisturbedFixed)+len(res.DisturbedPID) == 0 {
		return ""
	}
	var b strings.Builder
	fmt.Fprintf(&b, "\nRe-run because the host's steal went above %.0f %% over some %.0f s of the migration (each re-run is in the tables above):\n\n| attempt | host steal, %.0f s peak | host steal, whole migration | mean before the handover ms | vs setpoint | migration s |\n|---|---|---|---|---|---|\n",
		100*limit, StealSpan.Seconds(), StealSpan.Seconds())
	secs := func(s float64, aborted bool) string {
		if aborted {
			return fmt.Sprintf("%.1f (aborted)", s)
		}
		return fmt.Sprintf("%.1f", s)
	}
	for _, p := range res.DisturbedFixed {
		fmt.Fprintf(&b, "| fixed %.1f MB/s | %s | %s | %s | – | %s |\n", p.RateMBs, stealCell(p.HostStealPeakPct, false), stealCell(p.HostStealPct, false), f1(p.BeforeHandoverMs), secs(p.MigrationSeconds, p.Aborted))
	}
	for _, p := range res.DisturbedPID {
		fmt.Fprintf(&b, "| PID %.1f ms (%s) | %s | %s | %s | %+.1f %% | %s |\n", p.SetpointMs, p.LatencySource, stealCell(p.HostStealPeakPct, false), stealCell(p.HostStealPct, false), f1(p.BeforeHandoverMs), 100*(p.BeforeHandoverMs-p.SetpointMs)/p.SetpointMs, secs(p.MigrationSeconds, p.Aborted))
	}
	return b.String()
}

// cpuLines tabulates, per trial, the share of the source's and target's
// CPU quota periods throttled during the migration and the share of the
// host's CPU time stolen by the hypervisor; "" when no trial measured any.
func cpuLines(trials []Labeled) string {
	var b strings.Builder
	f := func(x float64) string {
		if math.IsNaN(x) {
			return "–"
		}
		return fmt.Sprintf("%.0f %%", 100*x)
	}
	for _, t := range trials {
		if math.IsNaN(t.Res.SourceThrottled) && math.IsNaN(t.Res.TargetThrottled) && math.IsNaN(t.Res.HostSteal) {
			continue
		}
		if b.Len() == 0 {
			fmt.Fprintf(&b, "\nCPU during each migration: the share of its quota periods in which each server's cgroup was throttled (it wanted more CPU than its quota), and the share of the machine's CPU time the hypervisor stole (a slowdown of the whole plant that no rate made), over the whole migration and over its worst %.0f s.\n\n| trial | source throttled | target throttled | host steal | host steal, %.0f s peak |\n|---|---|---|---|---|\n", StealSpan.Seconds(), StealSpan.Seconds())
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s |\n", t.Name, f(t.Res.SourceThrottled), f(t.Res.TargetThrottled), f(t.Res.HostSteal), f(t.Res.HostStealPeak))
	}
	return b.String()
}

// calmLines reports the trials whose start was held for a calm plant
// (Trial.CalmBelow), and those that started without one; "" when none was
// held.
func calmLines(trials []Labeled) string {
	var held, notCalm []string
	for _, t := range trials {
		switch {
		case !t.Res.Calm:
			notCalm = append(notCalm, fmt.Sprintf("%s (after %.0f s)", t.Name, t.Res.CalmWait))
		case t.Res.CalmWait >= 1:
			held = append(held, fmt.Sprintf("%s %.0f s", t.Name, t.Res.CalmWait))
		}
	}
	var b strings.Builder
	if len(held) > 0 {
		fmt.Fprintf(&b, "\nHeld for a calm plant before the migration: %s.\n", strings.Join(held, ", "))
	}
	if len(notCalm) > 0 {
		fmt.Fprintf(&b, "\nStarted on a plant that was not calm by the end of the hold: %s.\n", strings.Join(notCalm, ", "))
	}
	return b.String()
}

// ledgerLines reports every trial's row-by-row check.
func ledgerLines(trials []Labeled) string {
	var b strings.Builder
	var ack, miss, dup int64
	for _, t := range trials {
		ack += t.Res.Check.Acknowledged
		miss += t.Res.Check.Missing
		dup += t.Res.Check.Duplicated
	}
	fmt.Fprintf(&b, "Ledger, every migration checked row by row on its new owner: %d acknowledged writes, %d missing, %d duplicated.\n", ack, miss, dup)
	return b.String()
}

// BaselineAttempts is how many times SettledBaseline measures at most.
const BaselineAttempts = 3

// SettledBaseline is Baseline until a measurement is Settled, at most
// BaselineAttempts times, each reported through say; if none settles it
// returns the one with the lowest mean. The experiments derive their
// setpoints from it, so one stall in a single 20 s measurement must not set
// them.
func SettledBaseline(ctx context.Context, t testbed.Tenant, wc workload.Config, d time.Duration, seed uint64, say func(string, ...any)) (Stats, error) {
	var best Stats
	for i := range BaselineAttempts {
		st, err := Baseline(ctx, t, wc, d, seed+uint64(i)*1000)
		if err != nil {
			return st, err
		}
		if st.Settled() {
			return st, nil
		}
		say("baseline %d of %d not settled: mean %.1f ms ± %.1f is above %g × its median 3 s window (%.1f ms); measuring again",
			i+1, BaselineAttempts, st.Mean, st.Std, MaxBaselineSkew, st.Window50)
		if i == 0 || st.Mean < best.Mean {
			best = st
		}
	}
	say("no settled baseline in %d attempts; using the lowest (mean %.1f ms)", BaselineAttempts, best.Mean)
	return best, nil
}

// Baseline runs the workload on t without a migration for d and returns the
// latency figures after a 3 s warm-up.
func Baseline(ctx context.Context, t testbed.Tenant, wc workload.Config, d time.Duration, seed uint64) (Stats, error) {
	wc.DSN, wc.Duration, wc.Seed = t.DSN, d+3*time.Second, seed
	if wc.Records == 0 {
		wc.Records = t.Rows
	}
	r, err := workload.NewRunner(wc)
	if err != nil {
		return Stats{}, err
	}
	if _, err := r.Run(ctx, nil); err != nil {
		return Stats{}, fmt.Errorf("experiment: baseline: %w", err)
	}
	st := Describe(r.Latencies(3, 1<<30))
	windows := WindowMeans(r.Latencies, 3, int(wc.Duration/time.Second), 3)
	sort.Float64s(windows)
	st.Window90 = round(workload.Quantile(windows, 0.9), 2)
	st.Window50 = round(workload.Quantile(windows, 0.5), 2)
	return st, nil
}

// Dominance compares a PID trial with the fixed trials of its run on both
// figures at once, without interpolating (a fixed ladder on a noisy plant
// need not be monotonic): beaten lists the rates (MB/s) of the fixed trials
// that migrated in less time at a lower mean latency than p, beats those
// p was both faster and lower than. A tie on either figure counts for
// neither. Both are non-nil, in the ladder's order.
func Dominance(fixed []FixedPoint, p PIDPoint) (beaten, beats []float64) {
	beaten, beats = []float64{}, []float64{}
	for _, f := range fixed {
		switch {
		case f.MigrationSeconds < p.MigrationSeconds && f.MeanLatencyMs < p.MeanLatencyMs:
			beaten = append(beaten, f.RateMBs)
		case f.MigrationSeconds > p.MigrationSeconds && f.MeanLatencyMs > p.MeanLatencyMs:
			beats = append(beats, f.RateMBs)
		}
	}
	return beaten, beats
}

// rates lists rates (MB/s) for the report: "60, 75 MB/s", or "none".
func rates(r []float64) string {
	if len(r) == 0 {
		return "none"
	}
	parts := make([]string, len(r))
	for i, x := range r {
		parts[i] = strconv.FormatFloat(x, 'f', -1, 64)
	}
	return strings.Join(parts, ", ") + " MB/s"
}

// FixedSecondsAt interpolates, linearly between the fixed ladder's points
// ordered by latency, the migration time a fixed rate needs to cause mean
// latency lat (ms). ok is false outside the ladder's latency range.
func FixedSecondsAt(fixed []FixedPoint, lat float64) (secs float64, ok bool) {
	return secondsAt(fixed, func(f FixedPoint) float64 { return f.MeanLatencyMs }, lat)
}

// FixedLatencyAt interpolates, linearly between the fixed ladder's points
// ordered by migration time, the mean latency (ms) of a fixed rate that
// migrates in secs seconds: the other reading of the trade-off, for a PID
// point whose latency lies outside the ladder's. ok is false outside the
// ladder's range of migration times.
func FixedLatencyAt(fixed []FixedPoint, secs float64) (lat float64, ok bool) {
	return ladderAt(fixed, func(f FixedPoint) float64 { return f.MigrationSeconds }, func(f FixedPoint) float64 { return f.MeanLatencyMs }, secs)
}

// secondsAt is FixedSecondsAt with the latency figure chosen by latOf.
func secondsAt(fixed []FixedPoint, latOf func(FixedPoint) float64, lat float64) (secs float64, ok bool) {
	return ladderAt(fixed, latOf, func(f FixedPoint) float64 { return f.MigrationSeconds }, lat)
}

// ladderAt interpolates yOf linearly between the fixed ladder's points
// ordered by xOf, at x; ok is false outside the ladder's range of xOf.
func ladderAt(fixed []FixedPoint, xOf, yOf func(FixedPoint) float64, x float64) (y float64, ok bool) {
	ps := append([]FixedPoint(nil), fixed...)
	sort.Slice(ps, func(i, j int) bool { return xOf(ps[i]) < xOf(ps[j]) })
	for i := 1; i < len(ps); i++ {
		a, b := ps[i-1], ps[i]
		xa, xb := xOf(a), xOf(b)
		if x >= xa && x <= xb && xb > xa {
			f := (x - xa) / (xb - xa)
			return yOf(a) + f*(yOf(b)-yOf(a)), true
		}
	}
	return 0, false
}

// latencySource names a PID trial's process variable (PIDPoint.LatencySource).
func latencySource(client bool) string {
	if client {
		return "client"
	}
	return "proxy"
}

// copyRate is the hot copy's own rate, bytes/s: the bytes the loop's
// snapshot-phase points saw moved, over the time from the last point
// before the first byte (or the first point with bytes) to the last point
// with bytes; 0 when fewer than two such points exist.
func copyRate(r *TrialResult) float64 {
	var from, to *loop.Point
	var zero *loop.Point // the latest snapshot point before the first byte
	for i := range r.Loop {
		p := &r.Loop[i]
		if p.Phase != loop.CopyPhase {
			continue
		}
		if p.Bytes <= 0 {
			if from == nil {
				zero = p
			}
			continue
		}
		if from == nil {
			from = p
			if zero != nil {
				from = zero
			}
		}
		to = p
	}
	if from == nil || to == nil || to.T <= from.T {
		return 0
	}
	return float64(to.Bytes-from.Bytes) / (to.T - from.T)
}

// pairLines is the report's table of PID trials against the fixed trials
// run right after them at their copy rates (SweepOptions.Paired), with a
// count of the pairs the PID won; "" when there are none.
func pairLines(pid []PIDPoint) string {
	var b strings.Builder
	var n, won, lower int
	var firstN, firstLower [2]int // clean pairs by which ran first (0 PID, 1 fixed), and the PID lower among them
	var dLat, dTime []float64     // PID against its pair, %, the undisturbed pairs'
	for _, p := range pid {
		f := p.PairFixed
		if f == nil {
			continue
		}
		first, ranFirst := 0, "pid" // which ran first: index into firstN, and the table's cell
		if p.PairFirst == "fixed" {
			first, ranFirst = 1, "fixed"
		}
		if !p.Disturbed && !f.Disturbed {
			firstN[first]++
			if p.MeanLatencyMs <= f.MeanLatencyMs {
				firstLower[first]++
			}
			dLat = append(dLat, 100*(p.MeanLatencyMs-f.MeanLatencyMs)/f.MeanLatencyMs)
			dTime = append(dTime, 100*(p.MigrationSeconds-f.MigrationSeconds)/f.MigrationSeconds)
		}
		if n == 0 {
			b.WriteString("\nEach PID trial against its paired fixed trial (`--paired`: run right after it at its copy rate, or, every second pair at a setpoint, right before it at the copy rate of the setpoint's last PID trial):\n\n")
			b.WriteString("| PID setpoint ms | ran first | PID mean latency ms | PID migration s | PID copy rate MB/s | fixed rate MB/s | fixed trial's mean latency ms | fixed trial's migration s | PID's latency against it | PID's time against it | which did better | host steal, 10 s peak: PID / fixed |\n|---|---|---|---|---|---|---|---|---|---|---|---|\n")
		}
		n++
		verdict := PairVerdict(p.MeanLatencyMs, p.MigrationSeconds, f.MeanLatencyMs, f.MigrationSeconds)
		if p.MeanLatencyMs <= f.MeanLatencyMs {
			lower++
			if p.MigrationSeconds <= f.MigrationSeconds {
				won++
			}
		}
		fmt.Fprintf(&b, "| %.1f | %s | %s | %.1f | %.1f | %.1f | %s | %.1f | %+.0f %% | %+.0f %% | %s | %s / %s |\n", p.SetpointMs, ranFirst, f1(p.MeanLatencyMs), p.MigrationSeconds, p.CopyRateMBs,
			f.RateMBs, f1(f.MeanLatencyMs), f.MigrationSeconds, 100*(p.MeanLatencyMs-f.MeanLatencyMs)/f.MeanLatencyMs, 100*(p.MigrationSeconds-f.MigrationSeconds)/f.MigrationSeconds, verdict,
			stealCell(p.HostStealPeakPct, p.Disturbed), stealCell(f.HostStealPeakPct, f.Disturbed))
	}
	if n == 0 {
		return ""
	}
	fmt.Fprintf(&b, "\nThe PID was at a lower or equal mean latency than its paired fixed trial in %d of %d pairs, and lower or equal and as fast or faster in %d.\n", lower, n, won)
	if calm, calmLower := firstN[0]+firstN[1], firstLower[0]+firstLower[1]; calm > 1 {
		fmt.Fprintf(&b, "Over the %d pairs in which neither trial was kept disturbed (the last column says which were), the PID's mean latency was the fixed trial's %+.0f %% (median; %+.0f to %+.0f %%) and its migration time %+.0f %% (median; %+.0f to %+.0f %%). Sign test: were the PID no lower than the fixed rate at its speed (each pair a coin flip at best), %d or more lower pairs of %d would come with chance %.3f; were it no higher, %d or more higher pairs of %d with chance %.3f.\n",
			calm, stats.Median(dLat), slices.Min(dLat), slices.Max(dLat), stats.Median(dTime), slices.Min(dTime), slices.Max(dTime), calmLower, calm, stats.SignTail(calmLower, calm), calm-calmLower, calm, stats.SignTail(calm-calmLower, calm))
		fmt.Fprintf(&b, "By order: the PID lower in %d of the %d such pairs it ran first in, and in %d of the %d in which the fixed trial ran first.\n", firstLower[0], firstN[0], firstLower[1], firstN[1])
	}
	return b.String()
}

// PairFixedFirst says whether the n-th pair at a setpoint (from 1) runs its
// fixed trial first: every second pair does, once a PID trial at that
// setpoint has given a copy rate (lastRate, bytes/s; 0 = none yet).
func PairFixedFirst(n int, lastRate float64) bool {
	return n%2 == 0 && lastRate > 0
}

// PairVerdict says which of a PID trial (latency ms, seconds) and the
// fixed trial at its copy rate did better: one lower and no slower did
// better; otherwise each won on one count.
func PairVerdict(pidMs, pidS, fixedMs, fixedS float64) string {
	switch {
	case pidMs <= fixedMs && pidS <= fixedS:
		return "PID: lower and faster"
	case fixedMs <= pidMs && fixedS <= pidS:
		return "fixed: lower and faster"
	case pidMs < fixedMs:
		return "PID lower, fixed faster"
	default:
		return "PID faster, fixed lower"
	}
}

// phaseMeans splits a trial's migration before the handover at its copy's
// end (TrialResult.CopyEnd): the mean latency (ms) of the whole seconds of
// the copy, of the rest (catch-up and warm), and how long that rest
// lasted (s). A phase without a whole second has mean 0.
func phaseMeans(r *TrialResult) (copyMs, catchUpMs, catchUpS float64) {
	from, to := r.BeforeHandover()
	if r.CopyEnd <= from || r.CopyEnd >= to {
		return 0, 0, 0
	}
	mean := func(a, b float64) float64 {
		if b <= a {
			return 0
		}
		l := r.Latencies(a, b)
		if len(l) == 0 {
			return 0
		}
		return round(Describe(l).Mean, 2)
	}
	mid := math.Round(r.CopyEnd)
	return mean(from, mid), mean(mid, to), round(r.HoldAt-r.CopyEnd, 1)
}
