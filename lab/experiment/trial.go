// Package experiment runs sluice's closed-loop benchmarks on a testbed:
// Slacker's experiments (slack sweep, step in load, multitenant) and the
// live-vs-stop-and-copy downtime comparison. Each experiment is a list of
// trials; a trial is one migration under Slacker's YCSB workload, recorded
// second by second (the workload's latency, the control loop's record) and
// checked row by row against the workload's ledger of acknowledged writes.
package experiment

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	agentclient "github.com/sluicedb/sluice/agent/client"
	"github.com/sluicedb/sluice/lab/testbed"
	"github.com/sluicedb/sluice/lab/workload"
	"github.com/sluicedb/sluice/loop"
	"github.com/sluicedb/sluice/migration"
	"github.com/sluicedb/sluice/monitor"
)

// Step is a change of the workload's arrival rate during a trial.
type Step struct {
	At     time.Duration // after the migration started (after the warm-up and any wait for a calm plant)
	Factor float64       // new rate = Factor × the trial's rate
}

// Trial is one migration of Tenant to server To while the workload runs.
type Trial struct {
	Bed    *testbed.Bed
	Tenant testbed.Tenant
	To     int
	// Workload is the tenant's load; DSN is set from Tenant, Duration is
	// managed by the trial.
	Workload workload.Config
	// Warmup runs the workload before the migration starts (so the control
	// loop starts with data and the latency before is known); default 10 s.
	Warmup time.Duration
	// Cooldown runs it after the migration ended; default 3 s.
	Cooldown time.Duration
	// Migration is the request (Tenant and To are filled in).
	Migration agentclient.StartMigration
	Step      *Step
	// Swing, when set, swings the arrival rate during the migration (not
	// with Step).
	Swing *Swing
	// Others are further tenants loaded by their own workloads for the
	// whole trial (multitenant); their latency is recorded too.
	Others []Background
	// CalmBelow, when > 0, holds the migration's start after the warm-up
	// until the workload's mean latency over its last CalmSpan whole
	// seconds is at most this (ms), for at most CalmWaitMax: a trial does
	// not start on a plant still disturbed by what came before it (the
	// previous migration's aftermath on the shared machine), which would
	// otherwise be charged to its rate or controller. 0 = start after the
	// warm-up whatever the latency.
	CalmBelow float64
	// CalmMax bounds that hold; 0 = CalmWaitMax.
	CalmMax time.Duration
	// TargetCPUs, when not 0, is server To's CPU quota for the trial,
	// cores (negative: none), while the tenant's current server gets the
	// bed's own (testbed.Options.CPUs), both set before the warm-up:
	// Slacker's target was an idle machine of its own, so the copy's
	// ceiling was the source's slack, not the target's CPU. The tenant
	// keeps the target's quota after the handover until the next trial
	// sets it again. 0: every server keeps what it has.
	TargetCPUs float64
	// ClientLatency, with a control spec in Migration, serves the
	// workload's own latency window (queue + execution, Slacker's process
	// variable) on a loopback port for the trial and has the agent's loop
	// steer by it next to the proxy's windows
	// (agentclient.Control.ClientLatencyURL). false: the proxy's only.
	ClientLatency bool
	// AbortAboveSteal, when > 0, aborts the migration as soon as the
	// host's steal over some StealSpan of it goes above this share (0–1):
	// the migration rolls back, the tenant keeps serving on its source,
	// the ledger is checked there, and the result is marked Aborted (its
	// figures cover the migration up to the abort). An abort the source
	// refuses (past the route switch) lets the migration finish. 0 = never.
	AbortAboveSteal float64
	// Progress gets a line every 2 s; nil = none.
	Progress func(format string, args ...any)

	// stealPeak, if set, replaces monitor.StealPeak for AbortAboveSteal and
	// HostStealPeak (a test's way to meet a burst on a host that has none).
	stealPeak func(samples []monitor.HostCPUSample, span time.Duration) float64
}

// Background is another tenant's workload during a trial.
type Background struct {
	Tenant   testbed.Tenant
	Workload workload.Config
}

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
	StepAt   float64 // -1 without a step
	// CopyEnd is the last time the migration's progress showed its hot
	// copy (loop.CopyPhase), seconds; 0 if it never did. Unlike Loop it
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
// stream move (loop.CopyPhase) — 0 without a loop.
func (r *TrialResult) MovedBytes() int64 {
	var n int64
	if s := r.Migration.Summary; s != nil {
		n = s.Bytes
	}
	if !r.Aborted {
		return n
	}
	for _, p := range r.Loop {
		if p.Phase == loop.CopyPhase {
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

// CalmSpan is how many whole seconds of the workload Trial.CalmBelow
// judges the plant by.
const CalmSpan = 5

// CalmWaitMax bounds how long a trial holds its migration for a calm plant
// (Trial.CalmBelow).
const CalmWaitMax = 90 * time.Second

// recentMean is the transaction-weighted mean latency (ms) of the last
// span seconds of secs that have transactions, and whether there were
// span of them.
func recentMean(secs []workload.Second, span int) (float64, bool) {
	var sum float64
	var n, seen int
	for i := len(secs) - 1; i >= 0 && seen < span; i-- {
		if secs[i].Count == 0 {
			continue
		}
		sum += float64(secs[i].Count) * secs[i].MeanMs
		n += secs[i].Count
		seen++
	}
	if seen < span {
		return math.NaN(), false
	}
	return sum / float64(n), true
}

// PurgeWaitMax bounds how long a trial waits at its start for the bed's
// retired data directories to be purged (testbed.Bed.WaitPurged).
const PurgeWaitMax = 2 * time.Minute

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

// Run performs the trial. The migration must commit (or abort for
// AbortAboveSteal) and the ledger must check exactly, or it is an error
// (the result holds what was recorded).
func (tr Trial) Run(ctx context.Context) (*TrialResult, error) {
	if tr.Warmup == 0 {
		tr.Warmup = 10 * time.Second
	}
	if tr.Cooldown == 0 {
		tr.Cooldown = 3 * time.Second
	}
	say := tr.Progress
	if say == nil {
		say = func(string, ...any) {}
	}
	res := &TrialResult{StepAt: -1, SourceThrottled: math.NaN(), TargetThrottled: math.NaN(), HostSteal: math.NaN(), HostStealPeak: math.NaN()}
	if tr.Swing != nil {
		if tr.Step != nil {
			return res, errors.New("experiment: a trial takes a step or a swing in its load, not both")
		}
		if err := tr.Swing.Valid(); err != nil {
			return res, err
		}
	}
	if tr.TargetCPUs != 0 {
		from, _, err := tr.Bed.Owner(ctx, tr.Tenant)
		if err != nil {
			return res, err
		}
		if from == tr.To {
			return res, fmt.Errorf("experiment: tenant %s is on server %d already", tr.Tenant.Name, tr.To)
		}
		if err := tr.Bed.SetCPUs(from, tr.Bed.Opt.CPUs); err != nil {
			return res, err
		}
		if err := tr.Bed.SetCPUs(tr.To, tr.TargetCPUs); err != nil {
			return res, err
		}
	}
	// The previous migration's retired copy is purged a few seconds after
	// it; on the bed's shared disk that disturbs the next trial's plant.
	if n := len(tr.Bed.RetiredDirs()); n > 0 {
		waited, err := tr.Bed.WaitPurged(ctx, PurgeWaitMax)
		if err != nil {
			return res, err
		}
		if left := len(tr.Bed.RetiredDirs()); left > 0 {
			say("  %d retired data directories still there after %.0f s; starting anyway", left, waited.Seconds())
		} else {
			say("  waited %.1f s for %d retired data directory purge(s) to finish", waited.Seconds(), n)
		}
	}
	wc := tr.Workload
	wc.DSN, wc.Duration = tr.Tenant.DSN, 24*time.Hour
	if wc.Records == 0 {
		wc.Records = tr.Tenant.Rows
	}
	run, err := workload.NewRunner(wc)
	if err != nil {
		return res, err
	}
	res.runner, res.transactions = run, run.Transactions
	wctx, stopWork := context.WithCancel(ctx)
	defer stopWork()
	var mu sync.Mutex
	var wg sync.WaitGroup
	errs := make([]error, 1+len(tr.Others))
	start := time.Now()
	wg.Add(1)
	go func() {
		defer wg.Done()
		_, errs[0] = run.Run(wctx, func(s workload.Second) { mu.Lock(); res.Seconds = append(res.Seconds, s); mu.Unlock() })
	}()
	res.Others = make([][]workload.Second, len(tr.Others))
	for i, o := range tr.Others {
		oc := o.Workload
		oc.DSN, oc.Duration = o.Tenant.DSN, 24*time.Hour
		if oc.Records == 0 {
			oc.Records = o.Tenant.Rows
		}
		or, err := workload.NewRunner(oc)
		if err != nil {
			return res, err
		}
		res.others = append(res.others, or)
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[1+i] = or.Run(wctx, func(s workload.Second) { mu.Lock(); res.Others[i] = append(res.Others[i], s); mu.Unlock() })
		}()
	}
	stopAll := func() error { stopWork(); wg.Wait(); return workErr(errs) }
	since := func() float64 { return time.Since(start).Seconds() }
	last := func() float64 {
		mu.Lock()
		defer mu.Unlock()
		for i := len(res.Seconds) - 1; i >= 0; i-- {
			if res.Seconds[i].Count > 0 {
				return res.Seconds[i].MeanMs
			}
		}
		return math.NaN()
	}
	stepDone := tr.Step == nil
	var migAt time.Time // the migration's start (zero before), the step's origin
	doStep := func() {
		if !stepDone && !migAt.IsZero() && time.Since(migAt) >= tr.Step.At {
			run.SetRate(tr.Step.Factor * wc.Rate)
			res.StepAt = since()
			stepDone = true
			say("arrival rate ×%.2f: %.0f transactions/s", tr.Step.Factor, run.Rate())
		}
	}
	if err := sleepCtx(ctx, tr.Warmup); err != nil {
		stopAll()
		return res, err
	}
	res.Calm = true
	if tr.CalmMax == 0 {
		tr.CalmMax = CalmWaitMax
	}
	if tr.CalmBelow > 0 {
		held := time.Now()
		for {
			mu.Lock()
			m, ok := recentMean(res.Seconds, CalmSpan)
			mu.Unlock()
			if ok && m <= tr.CalmBelow {
				break
			}
			if time.Since(held) >= tr.CalmMax {
				res.Calm = false
				say("  the plant is not calm after %.0f s more (last %d s: %.1f ms, want ≤ %.1f); migrating anyway", time.Since(held).Seconds(), CalmSpan, m, tr.CalmBelow)
				break
			}
			if err := sleepCtx(ctx, time.Second); err != nil {
				stopAll()
				return res, err
			}
		}
		res.CalmWait = time.Since(held).Seconds()
		if res.CalmWait >= 1 && res.Calm {
			say("  waited %.0f s for a calm plant (last %d s ≤ %.1f ms)", res.CalmWait, CalmSpan, tr.CalmBelow)
		}
	}
	// From here on every time is on the workload's clock, which starts
	// once its connections are open (tens to hundreds of ms after start):
	// the seconds and transactions it records are placed against the
	// migration's times by it.
	if s := run.Started(); !s.IsZero() {
		start = s
	}

	from, _, err := tr.Bed.Owner(ctx, tr.Tenant)
	if err != nil {
		stopAll()
		return res, err
	}
	if tr.ClientLatency && tr.Migration.Control != nil {
		u, stopServe, err := run.ServeWindow("127.0.0.1:0", tr.Tenant.Name)
		if err != nil {
			stopAll()
			return res, err
		}
		defer stopServe()
		ctl := *tr.Migration.Control // the caller's spec stays as it was
		ctl.ClientLatencyURL = u
		tr.Migration.Control = &ctl
	}
	res.MigStart, migAt = since(), time.Now()
	stopSwing := swingLoad(tr.Swing, run, wc.Rate, migAt, since, say)
	cpuFrom, cpuTo := cpuStat(tr.Bed.Servers[from]), cpuStat(tr.Bed.Servers[tr.To])
	hostFrom, hostErr := monitor.ReadHostCPU()
	lastSay := time.Time{}
	hostSamples := []monitor.HostCPUSample{{At: time.Now(), CPU: hostFrom}} // one per progress line
	peakOf := tr.stealPeak
	if peakOf == nil {
		peakOf = monitor.StealPeak
	}
	abortAsked := false
	warned := false
	m, merr := tr.Bed.Migrate(ctx, tr.Tenant, tr.To, tr.Migration, func(m agentclient.Migration) {
		doStep()
		if m.Progress.Phase == loop.CopyPhase {
			res.CopyEnd = since()
		}
		if w := m.Progress.Warning; w != "" && !warned {
			say("  %5.0fs warning: %s", since(), w)
		}
		warned = m.Progress.Warning != ""
		if m.Progress.Controller != "" {
			res.ReserveMsS = m.Progress.ReserveMsS // a finished migration's answer no longer carries it
		}
		if time.Since(lastSay) >= 2*time.Second {
			lastSay = time.Now()
			p := m.Progress
			moved := fmt.Sprintf("%6.0f MB       ", float64(p.Bytes)/1e6) // a phase without a total of its own
			if p.TotalBytes > 0 {
				moved = fmt.Sprintf("%6.0f/%-6.0f MB", float64(p.Bytes)/1e6, float64(p.TotalBytes)/1e6)
			}
			if p.Phase == "catch-up" && p.LagBytes >= 0 {
				moved = fmt.Sprintf("lag %8.1f MB", float64(p.LagBytes)/1e6)
			}
			loopFig := "" // a fixed rate has no loop and no setpoint
			if p.SetpointMs > 0 {
				loopFig = fmt.Sprintf(" (loop %6.1f, setpoint %.1f)", p.LatencyMs, p.SetpointMs)
				if c := p.CPUThrottledPct; c != nil {
					loopFig += fmt.Sprintf("  source CPU throttled %3.0f %%", *c)
				}
			}
			if h, err := monitor.ReadHostCPU(); hostErr == nil && err == nil {
				if st := h.StealShare(hostSamples[len(hostSamples)-1].CPU); !math.IsNaN(st) {
					loopFig += fmt.Sprintf("  host steal %3.0f %%", 100*st)
				}
				hostSamples = append(hostSamples, monitor.HostCPUSample{At: time.Now(), CPU: h})
			}
			say("  %5.0fs %-9s %s  %6.1f MB/s (limit %6.1f)  latency %6.1f ms%s",
				since(), p.Phase, moved, p.Rate/1e6, p.Limit/1e6, last(), loopFig)
			if tr.AbortAboveSteal <= 0 || abortAsked || m.Done {
				return
			}
			if pk := peakOf(hostSamples, StealSpan); pk > tr.AbortAboveSteal {
				abortAsked = true
				say("  host steal %.0f %% over %.0f s (limit %.0f %%): aborting the migration", 100*pk, StealSpan.Seconds(), 100*tr.AbortAboveSteal)
				if _, err := tr.Bed.Servers[from].Client.AbortMigration(ctx, m.ID); err != nil {
					say("  the abort was refused (%v); the migration goes on", err)
				}
			}
		}
	})
	if merr != nil && abortAsked && m.Done && m.Outcome == "aborted" {
		res.Aborted, merr = true, nil
		say("  aborted: the tenant stays on %s", tr.Bed.Servers[from].Name)
	}
	stopSwing()
	res.MigEnd = since()
	res.SourceThrottled = throttledSince(tr.Bed.Servers[from], cpuFrom)
	res.TargetThrottled = throttledSince(tr.Bed.Servers[tr.To], cpuTo)
	if h, err := monitor.ReadHostCPU(); hostErr == nil && err == nil {
		res.HostSteal = h.StealShare(hostFrom)
		res.HostStealPeak = peakOf(append(hostSamples, monitor.HostCPUSample{At: time.Now(), CPU: h}), StealSpan)
	}
	res.Migration = m
	res.HoldAt = res.MigEnd
	var rec migration.Record
	if json.Unmarshal(m.Record, &rec) == nil && !rec.HeldAt.IsZero() && !rec.ReleasedAt.IsZero() {
		res.HoldAt = rec.HeldAt.Sub(start).Seconds()
		res.FreezeMs = float64(rec.ReleasedAt.Sub(rec.HeldAt).Microseconds()) / 1000
		ms := func(t time.Time) float64 { return float64(t.Sub(rec.HeldAt).Microseconds()) / 1000 }
		say("  handover: freeze %.0f ms (hold done %.0f, fenced %.0f, replayed %.0f, promoted %.0f, switched %.0f)",
			ms(rec.ReleasedAt), ms(rec.FlushAt), ms(rec.FencedAt), ms(rec.ReplayedAt), ms(rec.PromotedAt), ms(rec.SwitchedAt))
	}
	if merr != nil {
		stopAll()
		return res, merr
	}
	// The loop's record, on the workload's clock (its t = 0 is about the
	// migration's start).
	if series, err := tr.Bed.Servers[from].Client.MigrationSeries(ctx, m.ID); err == nil {
		for _, p := range series {
			p.T += res.MigStart
			res.Loop = append(res.Loop, p)
		}
	}
	for !stepDone && !res.Aborted && ctx.Err() == nil && time.Since(migAt) < tr.Step.At+time.Second {
		sleepCtx(ctx, 100*time.Millisecond)
		doStep()
	}
	sleepCtx(ctx, tr.Cooldown)
	if txs := res.StartTxs(); len(txs) > 0 {
		say("  start: %s; cost %.1f ms·s", describeTxs(txs, "the migration's start"), res.StartExcessMsS())
	}
	if txs := res.HandoverTxs(); len(txs) > 0 {
		say("  handover: %s", describeTxs(txs, "the hold"))
	}
	if err := stopAll(); err != nil {
		return res, err
	}
	conn, err := pgx.Connect(ctx, tr.Tenant.DSN)
	if err != nil {
		return res, fmt.Errorf("experiment: verify: %w", err)
	}
	defer conn.Close(context.Background())
	if res.Check, err = workload.Verify(ctx, conn, run.Ledger); err != nil {
		return res, err
	}
	if !res.Check.OK() {
		return res, fmt.Errorf("experiment: %d acknowledged writes missing, %d duplicated after migration %s (%s)", res.Check.Missing, res.Check.Duplicated, m.ID, m.Outcome)
	}
	return res, nil
}

// cpuStat is s's cgroup's CFS counters now; nil without a group or when
// they cannot be read.
func cpuStat(s *testbed.Server) *monitor.CPUStat {
	if s.Group == nil {
		return nil
	}
	st, err := s.Group.CPUStat()
	if err != nil {
		return nil
	}
	return &st
}

// throttledSince is the share of s's quota periods throttled since before
// (monitor.CPUStat.ThrottledShare); NaN when either reading is missing.
func throttledSince(s *testbed.Server, before *monitor.CPUStat) float64 {
	now := cpuStat(s)
	if before == nil || now == nil {
		return math.NaN()
	}
	return now.ThrottledShare(*before)
}

func workErr(errs []error) error {
	for _, e := range errs {
		if e != nil && !errors.Is(e, context.Canceled) {
			return fmt.Errorf("experiment: workload: %w", e)
		}
	}
	return nil
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// Stats are the mean and standard deviation of latencies (ms) and their count.
type Stats struct {
	Mean, Std float64
	N         int
	// Window90 (Baseline only; 0 otherwise) is the 90th percentile, over
	// the run, of the mean latency in a sliding 3 s window — what the loop
	// reads from the proxy — without any migration: the plant's own noise
	// at the controller's sampling. A setpoint near it cannot be held.
	Window90 float64
	// Window50 (Baseline only) is the median of those window means: the
	// plant's typical state, which a stall of a few seconds does not move.
	Window50 float64
}

// MaxBaselineSkew bounds Settled: a baseline whose mean is more than this
// many times its median 3 s window was made by a stall.
const MaxBaselineSkew = 2.0

// Settled reports whether a baseline measured the plant's steady state: its
// mean at most MaxBaselineSkew × its median 3 s window. A stall of a few
// seconds moves the mean but not the median (2026-11-23 07:26: a baseline of
// 17.8 ± 67 ms with a window p90 of 100 ms, against 2.3 ± 3.6 in the next
// run seven minutes later), and setpoints derived from it were 3–6× too high.
func (s Stats) Settled() bool {
	return s.N > 0 && s.Window50 > 0 && s.Mean <= MaxBaselineSkew*s.Window50
}

// WindowMeans returns the mean latency of every window of w consecutive
// seconds of a run, from second from on (seconds with no transactions
// count for nothing); lat(a, b) returns the latencies of seconds [a, b).
func WindowMeans(lat func(a, b int) []float64, from, to, w int) []float64 {
	var out []float64
	for a := from; a+w <= to; a++ {
		if xs := lat(a, a+w); len(xs) > 0 {
			out = append(out, Describe(xs).Mean)
		}
	}
	return out
}

// Describe computes Stats of xs (NaN mean and std when empty).
func Describe(xs []float64) Stats {
	if len(xs) == 0 {
		return Stats{Mean: math.NaN(), Std: math.NaN()}
	}
	var s, ss float64
	for _, x := range xs {
		s += x
	}
	m := s / float64(len(xs))
	for _, x := range xs {
		ss += (x - m) * (x - m)
	}
	return Stats{Mean: m, Std: math.Sqrt(ss / float64(len(xs))), N: len(xs)}
}
