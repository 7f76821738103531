// Package control holds sluice's controllers: pure functions of the
// measurements they are handed that choose how fast a migration may move data.
//
// Contract shared by every controller:
//   - No clocks, no I/O, no goroutines, no global state. Time arrives in the
//     Observation; the same sequence of observations gives the same decisions.
//   - Rates are bytes per second (float64); 0 means paused.
//   - "No data" is explicit: a Signal or HostIO whose Err is non-nil (or an
//     Observation with no usable signal) makes the controller hold its previous
//     rate and say so in Decision.Hold; it never speeds up blind.
//   - A Controller is not safe for concurrent use; the control loop owns it.
//
// # Controllers
//
//   - Fixed (fixed.go): a constant rate, the baseline. It uses no
//     measurement, so it never holds.
//   - PID (pid.go): Slacker's velocity-form PID on the worst server's
//     latency, with a slow start and the setpoint held as the run's mean.
//   - Integral (integral.go): Aqueduct's integral law on the worst store's
//     error against per-store contracts; K = (1 − p)/G from control/tune.
//   - Interference (interference.go, model.go): the migration-buffering
//     thesis's logistic model of interference from host I/O, a PID on the
//     disk read rate toward a probability threshold, and lock/unlock
//     hysteresis; sends from the read-ahead buffer while locked. The thesis's
//     coefficients are the default model; fit your own for a new host, since
//     a model fitted elsewhere may never fire: Train (classifier.go: the
//     thesis's 75/25 split and 5-fold CV) on labelled samples, written as a
//     model file (modelfile.go) that an agent loads; `sluice lab tune
//     classifier` collects the samples on the lab's bed.
//
// # Profiles and the governor
//
// A Profile (profile.go) is the loop's tuning as one named value: the PID's
// gains and options, the control period, the settling time and the catch-up
// floor. DefaultProfile ("sluice") is what every command and benchmark
// runs; "slacker" is the paper's controller. A Governor (governor.go) wraps
// any controller with the migration's own policy: hold through the copy's
// start-up, and never let catch-up stall.
//
// # Tuning
//
// Profile the plant with Fixed at a ladder of rates, one run per rate, and
// hand the (rate, latency) pairs to control/tune.Recommend with the setpoint:
// it fits a line and a queueing model (latency bends up near the knee, where
// setpoints sit), takes the local gain at the setpoint, and proposes K for
// Integral and gains and error form for PID.
package control

import (
	"errors"
	"time"
)

// Signal is one latency source (a server, or a store with a contract) measured
// over the control window that ends at Observation.At.
type Signal struct {
	Name     string        // server or store name, for reasons and plots
	Mean     time.Duration // mean transaction latency over the window
	P95      time.Duration // 95th percentile over the window
	P99      time.Duration // 99th percentile over the window
	Count    int           // transactions completed in the window
	Contract time.Duration // latency contract LC_i of this store (Integral); 0 = controller's default
	Err      error         // non-nil: this signal has no data this step
	// Idle: the store has no client connected and none of its transactions
	// ended in the window, so no one's latency can suffer. The Integral
	// counts it as latency 0 (full slack); latency-tracking controllers
	// (PID, model) leave it out and hold when every signal is idle. Only a
	// source that can tell "no clients" from "no transaction yet" sets it;
	// a window that is merely empty is an Err (latency unknown, not zero).
	Idle bool
}

// HostIO is the host's block-device activity over the last step (from
// /proc/diskstats), the input of the Interference controller.
type HostIO struct {
	IOPS       float64 // reads+writes completed per second
	IOTicks    float64 // milliseconds the device was busy per second (0..1000)
	Throughput float64 // bytes read+written per second
	Util       float64 // busy fraction, 0..1
	Err        error   // non-nil: no data this step
}

// CPUQuota is the server's CPU quota over the last step (its cgroup's CFS
// bandwidth counters, cpu.stat): on a server with a CPU quota, transactions
// queue once the server's processes together want more CPU than the quota
// allows, whatever the disk does.
type CPUQuota struct {
	// Throttled is the share (0–1) of the quota's periods in the step in
	// which the server's cgroup ran out of quota and was throttled.
	Throttled float64
	Err       error // non-nil: no data this step (no quota, or a first read)
}

// Observation is everything a controller is told at one step.
type Observation struct {
	At      time.Time // end of the window; steps are normally 1 s apart
	Signals []Signal  // latency per server/store; PID uses the max Mean over them
	Host    *HostIO   // nil when host I/O is not measured
	// CPU is the source server's CPU quota over the step; nil when it is
	// not measured. Recorded with each step; no controller steers by it yet.
	CPU *CPUQuota
	// Settling marks a step whose latency window still holds the
	// migration's start-up (loop.Loop.Settle): a one-off cost that no speed
	// would have avoided. Its latency signals carry Err = ErrSettling and
	// their measured values, so a controller holds its output as for
	// missing data; the PID's contract on the run's mean
	// (PIDParams.MeanHorizon) still counts their latency, since the run's
	// clients saw it.
	Settling bool
	// Remaining is the time the migration expects to run until its
	// handover at the rate it has now (the copy's bytes left over the
	// rate); 0 = unknown. The PID's contract on the run's mean
	// (PIDParams.MeanHorizon) settles its balance by then.
	Remaining time.Duration
	// Stage is the part of the migration the step falls in (Governor).
	Stage Stage
	// Bytes is what the migration's current copy has moved so far, bytes
	// (the snapshot's in StageCopy); 0 before its first byte.
	Bytes int64
	// Lag is the standby's replay lag, bytes; < 0 = unknown (Governor's
	// catch-up floor).
	Lag int64
}

// ErrSettling is the error of the latency signals of a Settling step.
var ErrSettling = errors.New("settling: the copy has not started, or its start-up is still in the latency window")

// Decision is a controller's output for one step.
type Decision struct {
	Rate     float64 // send rate, bytes/s; 0 = paused
	Prefetch float64 // read-ahead rate into memory, bytes/s (Interference; others set it = Rate)
	Hold     bool    // true when the step had no data and the previous rate was kept
	Reason   string  // short human-readable explanation, e.g. "pid e=-0.12 u=+0.003"
}

// Controller turns observations into rates.
type Controller interface {
	// Name is the controller's kind: "fixed", "pid", "integral", "interference".
	Name() string
	// Next returns the decision for the step ending at obs.At.
	Next(obs Observation) Decision
	// Initial is the send rate in force before the first step, bytes/s:
	// the caller applies it from the first byte, before Next is called.
	Initial() float64
}
