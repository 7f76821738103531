package experiment

import (
	"math"
	"time"

	"github.com/sluicedb/sluice/lab/testbed"
)

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
	// plant (Common.Calm), seconds; Calm is false when the plant was
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
	// Loop is the trial's loop (Variant.Label), such as "sluice" or
	// "sluice(ki=0.04)".
	Loop string `json:"loop"`
	// LatencySource is what the trial's loop steered by: "proxy" (the
	// proxy's windows) or "client" (the workload's own window too).
	LatencySource string `json:"latency_source"`
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
	// controller's top speed (Common.MaxRate): many of them and a
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

// SweepResult is `sluice bench slack-sweep --json`.
type SweepResult struct {
	Fixed []FixedPoint `json:"fixed"`
	PID   []PIDPoint   `json:"pid"`
	// DisturbedFixed and DisturbedPID are the attempts re-run because the
	// host's steal went above SweepOptions.StealLimit, in the order run;
	// their re-runs are in Fixed and PID.
	DisturbedFixed []FixedPoint `json:"disturbed_fixed,omitempty"`
	DisturbedPID   []PIDPoint   `json:"disturbed_pid,omitempty"`
	// Load says the load schedule during every migration
	// (SweepOptions.Load, Schedule.Describe); absent for a steady load.
	Load string `json:"load,omitempty"`
	// Swing is every trial's figures by the busy and light stretches of
	// the load schedule (a swing's halves), in the order run (disturbed
	// attempts too); absent for a steady load.
	Swing []SwingTrial `json:"swing,omitempty"`
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
