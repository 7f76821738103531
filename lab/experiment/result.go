package experiment

import (
	"fmt"
	"math"
	"time"

	agentclient "github.com/sluicedb/sluice/agent/client"
	"github.com/sluicedb/sluice/lab/workload"
	"github.com/sluicedb/sluice/loop"
	"github.com/sluicedb/sluice/migration"
)

// copyPhase is the phase of a migration's hot copy in its progress and in
// its control loop's record (loop.Point.Phase).
const copyPhase = string(migration.PhaseSnapshot)

// TrialResult is what a trial recorded. Times are seconds since the
// workload started.
type TrialResult struct {
	Seconds  []workload.Second   // the migrating tenant's workload, per second
	Others   [][]workload.Second // each Background's, per second
	Loop     []loop.Point        // the control loop's record; T re-based to the workload's clock
	MigStart float64
	MigEnd   float64
	HoldAt   float64 // when the handover's hold completed (clients wait from about here); MigEnd if unknown
	FreezeMs float64 // the handover's freeze (hold → release), ms; 0 if unknown
	// ReserveMsS is the PID's handover reserve as its progress last showed
	// it (agent/client.Progress.ReserveMsS), ms·s; 0 without one.
	ReserveMsS float64
	// CalmWait is how long the migration's start was held after the
	// warm-up for a calm plant (Trial.CalmBelow), seconds; Calm is false
	// when it was still above CalmBelow after CalmWaitMax.
	CalmWait float64
	Calm     bool
	// StepAt is when the trial's load schedule (Trial.Load) first changed
	// the arrival rate, seconds: a Step's step; -1 if it never did (a
	// steady load, or a migration that ended first).
	StepAt float64
	// CopyEnd is the last time the migration's progress showed its hot
	// copy (copyPhase), seconds; 0 if it never did. Unlike Loop it
	// is known for a fixed-rate migration, which runs no control loop.
	CopyEnd float64
	// SourceThrottled and TargetThrottled are the shares (0–1) of the
	// source's and target's CFS quota periods in which their cgroup was
	// throttled during the migration (monitor.CPUStat.ThrottledShare): how
	// often the server wanted more CPU than its quota. NaN without a quota.
	SourceThrottled, TargetThrottled float64
	// HostSteal is the share (0–1) of the machine's CPU time the hypervisor
	// stole during the migration (monitor.HostCPU.StealShare): a slowdown
	// of every process that no rate caused. NaN when /proc/stat was
	// unreadable.
	HostSteal float64
	// HostStealPeak is the largest share (0–1) stolen over any StealSpan
	// of the migration (monitor.StealPeak over the host's CPU read with
	// each progress line, about every 2 s): the worst burst, which
	// HostSteal's mean over the whole migration dilutes. NaN when
	// unmeasured or the migration was shorter than StealSpan.
	HostStealPeak float64
	// Aborted is set when the trial aborted its migration for host steal
	// (Trial.AbortAboveSteal): the tenant stayed on its source.
	Aborted   bool
	Migration agentclient.Migration
	Check     workload.Check // the migrating tenant's ledger, verified on its new owner (its source after an abort)
	runner    *workload.Runner
	others    []*workload.Runner
	// transactions is runner.Transactions (a field, so a test can give a
	// result its own).
	transactions func(from, to time.Duration) []workload.Tx
}

// Latencies returns the migrating tenant's transaction latencies (ms) in
// workload seconds [from, to).
func (r *TrialResult) Latencies(from, to float64) []float64 {
	return r.runner.Latencies(int(math.Floor(from)), int(math.Ceil(to)))
}

// ExecutionMean is the migrating tenant's mean execution latency (ms) in
// workload seconds [from, to): the transactions' latency without the wait
// in the workload's own arrival queue — what the proxy, and so the control
// loop, sees.
func (r *TrialResult) ExecutionMean(from, to float64) float64 {
	var sum, n float64
	for _, s := range r.Seconds {
		if t := float64(s.T); t >= math.Floor(from) && t < math.Ceil(to) && s.Count > 0 {
			sum += float64(s.Count) * (s.MeanMs - s.QueueMs)
			n += float64(s.Count)
		}
	}
	if n == 0 {
		return math.NaN()
	}
	return sum / n
}

// BeforeHandover is the part of the migration before the handover, in
// workload seconds [MigStart, whole second of HoldAt): the time the control
// loop sets the speed (snapshot, catch-up, warm). The handover's freeze and
// the drain of the queue it builds are a cost per migration, the same for
// every rate and controller, reported apart (FreezeMs).
func (r *TrialResult) BeforeHandover() (from, to float64) {
	return r.MigStart, math.Max(math.Floor(r.HoldAt), math.Ceil(r.MigStart))
}

// MovedBytes is what the migration copied (bytes): its summary's count
// once it committed; for one aborted before its snapshot finished (whose
// summary counts no bytes), the most the loop's steps saw the snapshot's
// stream move (copyPhase) — 0 without a loop.
func (r *TrialResult) MovedBytes() int64 {
	var n int64
	if s := r.Migration.Summary; s != nil {
		n = s.Bytes
	}
	if !r.Aborted {
		return n
	}
	for _, p := range r.Loop {
		if p.Phase == copyPhase {
			n = max(n, p.Bytes)
		}
	}
	return n
}

// LoopMean is the mean of the control loop's process variable (the latency
// it steered by, ms) over its steps in workload seconds [from, to); NaN when
// no step had a measurement.
func (r *TrialResult) LoopMean(from, to float64) float64 {
	var sum, n float64
	for _, p := range r.Loop {
		if p.T >= from && p.T < to && p.LatencyMs >= 0 {
			sum += p.LatencyMs
			n++
		}
	}
	if n == 0 {
		return math.NaN()
	}
	return sum / n
}

// StepsAtRate counts the loop's steps in [from, to) that set at least
// rate (bytes/s; ×0.999 for float noise) — with the controller's top speed,
// the steps it could go no faster: a setpoint above what the plant shows at
// top speed is not reachable, and the loop's mean stays under it.
func (r *TrialResult) StepsAtRate(from, to, rate float64) int {
	n := 0
	for _, p := range r.Loop {
		if p.T >= from && p.T < to && p.Rate >= 0.999*rate {
			n++
		}
	}
	return n
}

// HandoverBefore and HandoverAfter bound the transactions HandoverTxs
// returns: those that ended from HandoverBefore before the hold to
// HandoverAfter after it (the proxy's window after a release is 3 s).
// StartTxs uses the same bounds around the migration's start.
const (
	HandoverBefore = time.Second
	HandoverAfter  = 3 * time.Second
)

// HandoverTxs returns the migrating tenant's transactions that ended in
// [hold − HandoverBefore, hold + HandoverAfter), with times as offsets from
// the hold (HoldAt); nil when the hold's time is unknown (FreezeMs 0).
func (r *TrialResult) HandoverTxs() []workload.Tx {
	if r.FreezeMs <= 0 {
		return nil
	}
	return r.txsAround(r.HoldAt)
}

// StartTxs returns the migrating tenant's transactions that ended in
// [start − HandoverBefore, start + HandoverAfter), with times as offsets
// from the migration's start (MigStart): what the migration's first steps
// (replication slot, pg_backup_start's checkpoint, the copy's start) cost
// the clients.
func (r *TrialResult) StartTxs() []workload.Tx {
	return r.txsAround(r.MigStart)
}

// StartExcessMsS is what the migration's start cost the clients, ms·s: the
// latency above the level before the start of the migrating tenant's
// transactions that ended in the HandoverAfter after it, divided by the
// arrival rate before it — the proxy's measure of a handover
// (proxy/client.Handover.ExcessMSS) applied to the start, from the clients'
// side (latency from arrival, queue included). The level and the rate are
// those of the transactions that ended in the PreWindow seconds before the
// start. A mean that stays StartExcessMsS ms above its level for one second
// adds as much to a run's mean. Failed transactions are left out. NaN
// without transactions in both windows.
func (r *TrialResult) StartExcessMsS() float64 {
	if r.transactions == nil {
		return math.NaN()
	}
	at := time.Duration(r.MigStart * float64(time.Second))
	from := max(at-time.Duration(PreWindow*float64(time.Second)), 0)
	ms := func(tx workload.Tx) float64 { return float64((tx.End - tx.Arrival).Microseconds()) / 1000 }
	var base float64
	n := 0
	for _, tx := range r.transactions(from, at) {
		if !tx.Failed {
			base += ms(tx)
			n++
		}
	}
	if n == 0 { // else at > from: some transaction ended in [from, at)
		return math.NaN()
	}
	base /= float64(n)
	rate := float64(n) / (at - from).Seconds()
	excess, m := 0.0, 0
	for _, tx := range r.transactions(at, at+HandoverAfter) {
		if !tx.Failed {
			excess += ms(tx) - base
			m++
		}
	}
	if m == 0 {
		return math.NaN()
	}
	return excess / rate
}

// txsAround returns the transactions that ended in [at − HandoverBefore,
// at + HandoverAfter), at in seconds of the workload's clock, with times as
// offsets from at.
func (r *TrialResult) txsAround(at float64) []workload.Tx {
	if r.transactions == nil {
		return nil
	}
	d := time.Duration(at * float64(time.Second))
	txs := r.transactions(d-HandoverBefore, d+HandoverAfter)
	for i := range txs {
		txs[i].Arrival -= d
		txs[i].Begin -= d
		txs[i].End -= d
	}
	return txs
}

// describeTxs summarises the transactions around an event (HandoverTxs,
// StartTxs): how many took over 50 ms, and the slowest one's timeline
// relative to the event, which the text calls event ("the hold").
func describeTxs(txs []workload.Tx, event string) string {
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	slow, worst := 0, txs[0]
	for _, tx := range txs {
		if tx.End-tx.Arrival > 50*time.Millisecond {
			slow++
		}
		if tx.End-tx.Arrival > worst.End-worst.Arrival {
			worst = tx
		}
	}
	return fmt.Sprintf("%d of %d transactions around it took over 50 ms; the slowest %.0f ms (arrived %+.0f ms from %s, began %+.0f, ended %+.0f)",
		slow, len(txs), ms(worst.End-worst.Arrival), ms(worst.Arrival), event, ms(worst.Begin), ms(worst.End))
}

// OtherLatencies is Latencies for Background i.
func (r *TrialResult) OtherLatencies(i int, from, to float64) []float64 {
	return r.others[i].Latencies(int(math.Floor(from)), int(math.Ceil(to)))
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
		if p.Phase != copyPhase {
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

// copyEnd is the time (workload seconds) r last saw its hot copy (phase
// snapshot): in its progress (TrialResult.CopyEnd) or in its control
// loop's record, whichever is later; r.MigStart if neither saw it.
func copyEnd(r *TrialResult) float64 {
	end := max(r.MigStart, r.CopyEnd)
	for _, p := range r.Loop {
		if p.Phase == copyPhase {
			end = max(end, p.T)
		}
	}
	return end
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
