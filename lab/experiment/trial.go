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
	"github.com/sluicedb/sluice/internal/clock"
	"github.com/sluicedb/sluice/lab/testbed"
	"github.com/sluicedb/sluice/lab/workload"
	"github.com/sluicedb/sluice/migration"
	"github.com/sluicedb/sluice/monitor"
)

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
	// Load is the arrival rate during the migration (a Step, a Swing);
	// zero = steady. The warm-up and the cooldown run at Workload.Rate.
	Load Schedule
	// Others are further tenants loaded by their own workloads for the
	// whole trial (multitenant); their latency is recorded too.
	Others []Background
	// CalmBelow, when > 0, holds the migration's start after the warm-up
	// until the workload's mean latency over its last CalmSpan whole
	// seconds is at most this (ms), for at most CalmMax: a trial does not
	// start on a plant still disturbed by what came before it (the
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
	// AtStart, if set, is called just before the migration starts, with
	// its source server (a co-located workload's start, a cache drop).
	AtStart func(ctx context.Context, from int) error

	// stealPeak, if set, replaces monitor.StealPeak for AbortAboveSteal and
	// HostStealPeak (a test's way to meet a burst on a host that has none).
	stealPeak func(samples []monitor.HostCPUSample, span time.Duration) float64
}

// Background is another tenant's workload during a trial.
type Background struct {
	Tenant   testbed.Tenant
	Workload workload.Config
}

// CalmSpan is how many whole seconds of the workload Trial.CalmBelow
// judges the plant by.
const CalmSpan = 5

// CalmWaitMax bounds how long a trial holds its migration for a calm plant
// (Trial.CalmBelow).
const CalmWaitMax = 90 * time.Second

// PurgeWaitMax bounds how long a trial waits at its start for the bed's
// retired data directories to be purged (testbed.Bed.WaitPurged).
const PurgeWaitMax = 2 * time.Minute

// trialRun is a Trial under way: its workloads and what it records.
type trialRun struct {
	tr  Trial
	res *TrialResult
	say func(format string, args ...any)
	wc  workload.Config // the migrating tenant's, as run
	run *workload.Runner

	mu       sync.Mutex // guards res.Seconds and res.Others
	wg       sync.WaitGroup
	errs     []error // each workload's
	stopWork context.CancelFunc
	start    time.Time // the workload's clock's zero
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
	if tr.CalmMax == 0 {
		tr.CalmMax = CalmWaitMax
	}
	t := &trialRun{tr: tr, say: tr.Progress, res: &TrialResult{StepAt: -1, SourceThrottled: math.NaN(), TargetThrottled: math.NaN(), HostSteal: math.NaN(), HostStealPeak: math.NaN()}}
	if t.say == nil {
		t.say = func(string, ...any) {}
	}
	if err := tr.Load.Valid(); err != nil {
		return t.res, err
	}
	if err := t.prepare(ctx); err != nil {
		return t.res, err
	}
	if err := t.startWorkloads(ctx); err != nil {
		t.stopAll()
		return t.res, err
	}
	if err := t.holdStart(ctx); err != nil {
		t.stopAll()
		return t.res, err
	}
	from, _, err := tr.Bed.Owner(ctx, tr.Tenant)
	if err != nil {
		t.stopAll()
		return t.res, err
	}
	if tr.ClientLatency && tr.Migration.Control != nil {
		u, stopServe, err := t.run.ServeWindow("127.0.0.1:0", tr.Tenant.Name)
		if err != nil {
			t.stopAll()
			return t.res, err
		}
		defer stopServe()
		ctl := *tr.Migration.Control // the caller's spec stays as it was
		ctl.ClientLatencyURL = u
		t.tr.Migration.Control = &ctl
	}
	m, err := t.migrate(ctx, from)
	if err != nil {
		t.stopAll()
		return t.res, err
	}
	return t.res, t.finish(ctx, from, m)
}

// prepare sets the servers' CPU quotas (TargetCPUs) and waits for the
// previous migration's retired copy to be purged: on the bed's shared disk
// the purge disturbs the next trial's plant.
func (t *trialRun) prepare(ctx context.Context) error {
	tr := t.tr
	if tr.TargetCPUs != 0 {
		from, _, err := tr.Bed.Owner(ctx, tr.Tenant)
		if err != nil {
			return err
		}
		if from == tr.To {
			return fmt.Errorf("experiment: tenant %s is on server %d already", tr.Tenant.Name, tr.To)
		}
		if err := tr.Bed.SetCPUs(from, tr.Bed.Opt.CPUs); err != nil {
			return err
		}
		if err := tr.Bed.SetCPUs(tr.To, tr.TargetCPUs); err != nil {
			return err
		}
	}
	if n := len(tr.Bed.RetiredDirs()); n > 0 {
		waited, err := tr.Bed.WaitPurged(ctx, PurgeWaitMax)
		if err != nil {
			return err
		}
		if left := len(tr.Bed.RetiredDirs()); left > 0 {
			t.say("  %d retired data directories still there after %.0f s; starting anyway", left, waited.Seconds())
		} else {
			t.say("  waited %.1f s for %d retired data directory purge(s) to finish", waited.Seconds(), n)
		}
	}
	return nil
}

// startWorkloads starts the migrating tenant's workload and the Others',
// each recording its seconds into the result, until stopAll.
func (t *trialRun) startWorkloads(ctx context.Context) error {
	tr, res := t.tr, t.res
	wctx, stop := context.WithCancel(ctx)
	t.stopWork = stop
	t.errs = make([]error, 1+len(tr.Others))
	res.Others = make([][]workload.Second, len(tr.Others))
	t.start = time.Now()
	for i := range 1 + len(tr.Others) {
		tn, wc := tr.Tenant, tr.Workload
		if i > 0 {
			tn, wc = tr.Others[i-1].Tenant, tr.Others[i-1].Workload
		}
		wc.DSN, wc.Duration = tn.DSN, 24*time.Hour
		if wc.Records == 0 {
			wc.Records = tn.Rows
		}
		run, err := workload.NewRunner(wc)
		if err != nil {
			return err
		}
		if i == 0 {
			t.run, t.wc = run, wc
			res.runner, res.transactions = run, run.Transactions
		} else {
			res.others = append(res.others, run)
		}
		t.wg.Add(1)
		go func() {
			defer t.wg.Done()
			_, t.errs[i] = run.Run(wctx, func(s workload.Second) {
				t.mu.Lock()
				defer t.mu.Unlock()
				if i == 0 {
					res.Seconds = append(res.Seconds, s)
				} else {
					res.Others[i-1] = append(res.Others[i-1], s)
				}
			})
		}()
	}
	return nil
}

// stopAll stops the workloads and returns the first one's error.
func (t *trialRun) stopAll() error {
	if t.stopWork != nil {
		t.stopWork()
	}
	t.wg.Wait()
	return workErr(t.errs)
}

// since is the time on the workload's clock, seconds.
func (t *trialRun) since() float64 { return time.Since(t.start).Seconds() }

// lastMean is the migrating tenant's mean latency (ms) in its last second
// with transactions; NaN before any.
func (t *trialRun) lastMean() float64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	for i := len(t.res.Seconds) - 1; i >= 0; i-- {
		if t.res.Seconds[i].Count > 0 {
			return t.res.Seconds[i].MeanMs
		}
	}
	return math.NaN()
}

// holdStart runs the warm-up, then holds for a calm plant (CalmBelow), and
// puts the result's times on the workload's clock.
func (t *trialRun) holdStart(ctx context.Context) error {
	tr, res := t.tr, t.res
	if err := clock.Sleep(ctx, tr.Warmup); err != nil {
		return err
	}
	res.Calm = true
	if tr.CalmBelow > 0 {
		held := time.Now()
		for {
			t.mu.Lock()
			m, ok := recentMean(res.Seconds, CalmSpan)
			t.mu.Unlock()
			if ok && m <= tr.CalmBelow {
				break
			}
			if time.Since(held) >= tr.CalmMax {
				res.Calm = false
				t.say("  the plant is not calm after %.0f s more (last %d s: %.1f ms, want ≤ %.1f); migrating anyway", time.Since(held).Seconds(), CalmSpan, m, tr.CalmBelow)
				break
			}
			if err := clock.Sleep(ctx, time.Second); err != nil {
				return err
			}
		}
		res.CalmWait = time.Since(held).Seconds()
		if res.CalmWait >= 1 && res.Calm {
			t.say("  waited %.0f s for a calm plant (last %d s ≤ %.1f ms)", res.CalmWait, CalmSpan, tr.CalmBelow)
		}
	}
	// From here on every time is on the workload's clock, which starts
	// once its connections are open (tens to hundreds of ms after start):
	// the seconds and transactions it records are placed against the
	// migration's times by it.
	if s := t.run.Started(); !s.IsZero() {
		t.start = s
	}
	return nil
}

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

// migrate runs the migration from server from under the load schedule,
// watching its progress, and records its times, the CPU figures and the
// handover's; an abort for host steal is not an error.
func (t *trialRun) migrate(ctx context.Context, from int) (agentclient.Migration, error) {
	tr, res := t.tr, t.res
	if tr.AtStart != nil {
		if err := tr.AtStart(ctx, from); err != nil {
			return agentclient.Migration{}, err
		}
	}
	res.MigStart = t.since()
	stopLoad := applyLoad(tr.Load, t.run, t.wc.Rate, time.Now(), t.since, t.say)
	cpuFrom, cpuTo := cpuStat(tr.Bed.Servers[from]), cpuStat(tr.Bed.Servers[tr.To])
	w := newProgressWatch(ctx, t, from)
	m, err := tr.Bed.Migrate(ctx, tr.Tenant, tr.To, tr.Migration, w.see)
	if err != nil && w.abortAsked && m.Done && m.Outcome == "aborted" {
		res.Aborted, err = true, nil
		t.say("  aborted: the tenant stays on %s", tr.Bed.Servers[from].Name)
	}
	res.StepAt = stopLoad()
	res.MigEnd = t.since()
	res.SourceThrottled = throttledSince(tr.Bed.Servers[from], cpuFrom)
	res.TargetThrottled = throttledSince(tr.Bed.Servers[tr.To], cpuTo)
	w.stealFigures()
	res.Migration = m
	res.HoldAt = res.MigEnd
	var rec migration.Record
	if json.Unmarshal(m.Record, &rec) == nil && !rec.HeldAt.IsZero() && !rec.ReleasedAt.IsZero() {
		res.HoldAt = rec.HeldAt.Sub(t.start).Seconds()
		res.FreezeMs = float64(rec.ReleasedAt.Sub(rec.HeldAt).Microseconds()) / 1000
		ms := func(at time.Time) float64 { return float64(at.Sub(rec.HeldAt).Microseconds()) / 1000 }
		t.say("  handover: freeze %.0f ms (hold done %.0f, fenced %.0f, replayed %.0f, promoted %.0f, switched %.0f)",
			ms(rec.ReleasedAt), ms(rec.FlushAt), ms(rec.FencedAt), ms(rec.ReplayedAt), ms(rec.PromotedAt), ms(rec.SwitchedAt))
	}
	return m, err
}

// finish collects the loop's record, runs the cooldown, stops the
// workloads and checks the ledger on the tenant's owner.
func (t *trialRun) finish(ctx context.Context, from int, m agentclient.Migration) error {
	tr, res := t.tr, t.res
	// The loop's record, on the workload's clock (its t = 0 is about the
	// migration's start).
	if series, err := tr.Bed.Servers[from].Client.MigrationSeries(ctx, m.ID); err == nil {
		for _, p := range series {
			p.T += res.MigStart
			res.Loop = append(res.Loop, p)
		}
	}
	clock.Sleep(ctx, tr.Cooldown)
	if txs := res.StartTxs(); len(txs) > 0 {
		t.say("  start: %s; cost %.1f ms·s", describeTxs(txs, "the migration's start"), res.StartExcessMsS())
	}
	if txs := res.HandoverTxs(); len(txs) > 0 {
		t.say("  handover: %s", describeTxs(txs, "the hold"))
	}
	if err := t.stopAll(); err != nil {
		return err
	}
	conn, err := pgx.Connect(ctx, tr.Tenant.DSN)
	if err != nil {
		return fmt.Errorf("experiment: verify: %w", err)
	}
	defer conn.Close(context.Background())
	if res.Check, err = workload.Verify(ctx, conn, t.run.Ledger); err != nil {
		return err
	}
	if !res.Check.OK() {
		return fmt.Errorf("experiment: %d acknowledged writes missing, %d duplicated after migration %s (%s)", res.Check.Missing, res.Check.Duplicated, m.ID, m.Outcome)
	}
	return nil
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
