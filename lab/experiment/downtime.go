package experiment

// downtime: live migration vs stop-and-copy, as the clients see it.
//
// One tenant runs Slacker's YCSB workload through the proxy the whole time
// while it is moved back and forth between two testbed servers, alternating
// a live migration and a stop-and-copy one. For every move the agent's own
// figure (the live handover's freeze, or stop-and-copy's downtime) is set
// beside what clients saw: a probe connection through the proxy runs
// `SELECT 1` every few milliseconds and logs each one's latency, so the
// stall around each switch is known at that resolution, independently of the
// agent. At the end every acknowledged write is checked row by row.

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	agentclient "github.com/sluicedb/sluice/agent/client"
	"github.com/sluicedb/sluice/internal/stats"
	"github.com/sluicedb/sluice/internal/units"
	"github.com/sluicedb/sluice/lab/chart"
	"github.com/sluicedb/sluice/lab/testbed"
	"github.com/sluicedb/sluice/lab/workload"
	"github.com/sluicedb/sluice/migration"
)

// DowntimeOptions configure Downtime. Zero values take the defaults noted.
type DowntimeOptions struct {
	Out  string // output directory; "" = write no files
	Size int64  // tenant data, bytes; default 200 MB
	Runs int    // migrations of each mode (live, stop-and-copy), interleaved; default 3
	// TxRate and MPL shape the YCSB workload that runs throughout: arrivals
	// per second (default 200) served by MPL connections (default 8), the
	// demo's defaults.
	TxRate float64
	MPL    int
	// Rate caps a live migration's copy, bytes/s; 0 = unlimited. Stop-and-copy
	// is never paced (clients are waiting).
	Rate float64
	// ProbeInterval is how often the probe connection issues `SELECT 1`
	// through the proxy; default 5 ms. A probe that takes longer delays the
	// next one (one connection, one query at a time).
	ProbeInterval time.Duration
	// Window is how far before the hold and after the release the client-side
	// stall of a move is looked for; default 1 s.
	Window time.Duration
	// Baseline is how long the workload runs before the first move; the mean
	// latency of its whole seconds (the first excepted) is the baseline the
	// recovery is judged against; default 10 s.
	Baseline time.Duration
	// Settle is the least time the workload runs on the new owner before the
	// next move; default 3 s.
	Settle time.Duration
	// Recover bounds the wait, after a move, for the workload to recover: a
	// whole second after the release that ends with no arrival queued and
	// has a mean latency within RecoverFactor × the baseline (at least
	// baseline + 5 ms). Default 60 s; a move whose workload has not
	// recovered by then is recorded with recovery -1 and the next move
	// starts anyway.
	Recover time.Duration
	// RecoverFactor: see Recover; default 2.
	RecoverFactor float64
	Seed          uint64
	Command       string                           // the command line, for the report
	Progress      func(format string, args ...any) // nil = silent
}

// Check reports the first bad option, before anything is started.
func (o DowntimeOptions) Check() error {
	_, err := o.withDefaults()
	return err
}

func (o DowntimeOptions) withDefaults() (DowntimeOptions, error) {
	if o.Size == 0 {
		o.Size = 200e6
	}
	if o.Runs == 0 {
		o.Runs = 3
	}
	if o.TxRate == 0 {
		o.TxRate = 200
	}
	if o.MPL == 0 {
		o.MPL = 8
	}
	if o.ProbeInterval == 0 {
		o.ProbeInterval = 5 * time.Millisecond
	}
	if o.Window == 0 {
		o.Window = time.Second
	}
	if o.Baseline == 0 {
		o.Baseline = 10 * time.Second
	}
	if o.Settle == 0 {
		o.Settle = 3 * time.Second
	}
	if o.Recover == 0 {
		o.Recover = time.Minute
	}
	if o.RecoverFactor == 0 {
		o.RecoverFactor = 2
	}
	if o.Progress == nil {
		o.Progress = func(string, ...any) {}
	}
	switch {
	case o.Size < 1e6:
		return o, fmt.Errorf("downtime: size %d bytes is below 1 MB", o.Size)
	case o.Runs < 1 || o.Runs > 100:
		return o, fmt.Errorf("downtime: runs %d: want 1 to 100 migrations of each mode", o.Runs)
	case !(o.TxRate > 0) || math.IsInf(o.TxRate, 0):
		return o, fmt.Errorf("downtime: workload rate %v must be a positive number of transactions/s", o.TxRate)
	case o.MPL < 1 || o.MPL > 1000:
		return o, fmt.Errorf("downtime: mpl %d: want 1 to 1000 connections", o.MPL)
	case o.Rate < 0 || math.IsNaN(o.Rate) || math.IsInf(o.Rate, 0):
		return o, fmt.Errorf("downtime: migration rate %v must be 0 (unlimited) or a positive number of bytes/s", o.Rate)
	case o.ProbeInterval < time.Millisecond:
		return o, fmt.Errorf("downtime: probe interval %v is below 1ms", o.ProbeInterval)
	case o.Window < 0 || o.Settle < 0 || o.Recover < 0:
		return o, errors.New("downtime: window, settle and recover must not be negative")
	case o.Baseline < 2*time.Second:
		return o, fmt.Errorf("downtime: baseline %v is below 2s", o.Baseline)
	case !(o.RecoverFactor >= 1) || math.IsInf(o.RecoverFactor, 0):
		return o, fmt.Errorf("downtime: recover factor %v must be a number ≥ 1", o.RecoverFactor)
	}
	return o, nil
}

// DowntimeRun is one migration's figures.
type DowntimeRun struct {
	Run     int     `json:"run"`  // 1-based, per mode
	Mode    string  `json:"mode"` // live or stop-and-copy
	ID      string  `json:"migration_id"`
	From    int     `json:"from"` // server index
	To      int     `json:"to"`
	AgentMs float64 `json:"agent_ms"` // the agent's freeze (live) or downtime (stop-and-copy), hold → release
	// ProbeMaxMs is the longest probe (`SELECT 1` through the proxy) that
	// started between Window before the hold and Window after the release:
	// the stall a client saw.
	ProbeMaxMs float64 `json:"probe_max_latency_ms"`
	// ProbeGapMs is the longest time in that window between two successful
	// probe completions (the window's edges count as completions).
	ProbeGapMs  float64 `json:"probe_longest_gap_ms"`
	ProbeErrors int     `json:"probe_errors"` // failed probes in the window
	// WorkloadMaxMs is the longest YCSB transaction (queue + execution) that
	// completed in the seconds overlapping the window (the workload keeps
	// latencies per second of completion).
	WorkloadMaxMs  float64 `json:"workload_max_latency_ms"`
	WorkloadErrors int     `json:"workload_errors"` // failed transactions in those seconds
	// RecoveryS is the time from the release to the end of the first whole
	// second with an empty arrival queue and a mean latency back within
	// the recovery limit (1 s resolution); -1 = not within Recover.
	RecoveryS float64 `json:"recovery_s"`
	Seconds   float64 `json:"migration_seconds"`
	Bytes     int64   `json:"bytes"`
	// Hold and release as wall-clock times, seconds since the bench started.
	HeldAtS     float64 `json:"held_at_s"`
	ReleasedAtS float64 `json:"released_at_s"`
}

// DowntimeResult is the downtime experiment's summary; its JSON keys are
// `sluice bench downtime --json`'s. Medians are over the runs of each mode.
type DowntimeResult struct {
	LiveFreezeMs             float64 `json:"live_freeze_ms"`
	StopAndCopyDowntimeMs    float64 `json:"stop_and_copy_downtime_ms"`
	LiveProbeMaxMs           float64 `json:"live_probe_max_latency_ms"`
	StopAndCopyProbeMaxMs    float64 `json:"stop_and_copy_probe_max_latency_ms"`
	LiveProbeGapMs           float64 `json:"live_probe_longest_gap_ms"`
	StopAndCopyProbeGapMs    float64 `json:"stop_and_copy_probe_longest_gap_ms"`
	LiveWorkloadMaxMs        float64 `json:"live_workload_max_latency_ms"`
	StopAndCopyWorkloadMaxMs float64 `json:"stop_and_copy_workload_max_latency_ms"`
	// Recovery medians (see DowntimeRun.RecoveryS); -1 if most runs of the
	// mode did not recover within the limit.
	LiveRecoveryS        float64 `json:"live_recovery_s"`
	StopAndCopyRecoveryS float64 `json:"stop_and_copy_recovery_s"`
	// BaselineMeanMs is the workload's mean latency before the first move;
	// RecoveryLimitMs the mean a second must be back within to count as
	// recovered.
	BaselineMeanMs     float64 `json:"baseline_mean_latency_ms"`
	RecoveryLimitMs    float64 `json:"recovery_limit_ms"`
	LiveSeconds        float64 `json:"live_migration_seconds"`
	StopAndCopySeconds float64 `json:"stop_and_copy_migration_seconds"`
	// DowntimeRatio is StopAndCopyDowntimeMs / LiveFreezeMs.
	DowntimeRatio      float64 `json:"downtime_ratio"`
	TenantBytes        int64   `json:"tenant_bytes"`
	WritesAcknowledged int64   `json:"writes_acknowledged"`
	WritesMissing      int64   `json:"writes_missing"`
	WritesDuplicated   int64   `json:"writes_duplicated"`
	// WorkloadErrors counts failed transactions over the run, up to the last
	// whole second before the workload was stopped (stopping it cuts off
	// transactions in flight).
	WorkloadErrors int64         `json:"workload_errors"`
	Live           []DowntimeRun `json:"live"`
	StopAndCopy    []DowntimeRun `json:"stop_and_copy"`
}

// Downtime runs the experiment on bed (which needs at least two servers): it
// creates one tenant on server 0, starts the workload and the probe, moves the
// tenant opt.Runs times live and opt.Runs times by stop-and-copy, alternately,
// each time to the other server, then verifies the ledger on the final owner
// and writes the outputs. It returns an error (with the result so far) if a
// migration fails or an acknowledged write is missing or duplicated.
func Downtime(ctx context.Context, bed *testbed.Bed, opt DowntimeOptions) (DowntimeResult, error) {
	opt, err := opt.withDefaults()
	if err != nil {
		return DowntimeResult{}, err
	}
	if len(bed.Servers) < 2 {
		return DowntimeResult{}, fmt.Errorf("downtime: the testbed has %d servers, need 2", len(bed.Servers))
	}
	if opt.Out != "" {
		if err := os.MkdirAll(opt.Out, 0o755); err != nil {
			return DowntimeResult{}, fmt.Errorf("downtime: %w", err)
		}
	}
	say := opt.Progress
	start := time.Now()

	say("creating a %s tenant on %s", units.FormatBytes(float64(opt.Size)), bed.Servers[0].Name)
	tn, err := bed.CreateTenant(ctx, 0, "downtime", opt.Size, opt.Seed+1)
	if err != nil {
		return DowntimeResult{}, fmt.Errorf("downtime: create tenant: %w", err)
	}
	res := DowntimeResult{TenantBytes: tn.Bytes}
	say("tenant %q: %d rows, %s on disk", tn.Name, tn.Rows, units.FormatBytes(float64(tn.Bytes)))

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	// The probe: one connection, SELECT 1 every ProbeInterval.
	pr := &dtProbe{dsn: tn.DSN, every: opt.ProbeInterval}
	probeDone := make(chan error, 1)
	pctx, stopProbe := context.WithCancel(ctx)
	defer stopProbe()
	if err := pr.connect(pctx); err != nil {
		return res, fmt.Errorf("downtime: probe: %w", err)
	}
	go func() { probeDone <- pr.run(pctx) }()
	probeStopped := false
	stopProbeWait := func() {
		if !probeStopped {
			probeStopped = true
			stopProbe()
			<-probeDone
		}
	}
	defer stopProbeWait()

	// The workload, through the proxy the whole time; its ledger proves nothing is lost.
	run, err := workload.NewRunner(workload.Config{DSN: tn.DSN, Rate: opt.TxRate, MPL: opt.MPL, Records: tn.Rows, Duration: 24 * time.Hour, Seed: opt.Seed + 2})
	if err != nil {
		return res, fmt.Errorf("downtime: %w", err)
	}
	wctx, stopWork := context.WithCancel(ctx)
	defer stopWork()
	var secsMu sync.Mutex
	var secs []workload.Second
	workDone := make(chan error, 1)
	wStart := time.Now()
	go func() {
		_, err := run.Run(wctx, func(s workload.Second) { secsMu.Lock(); secs = append(secs, s); secsMu.Unlock() })
		workDone <- err
	}()
	workStopped := false
	stopWorkWait := func() error {
		if workStopped {
			return nil
		}
		workStopped = true
		stopWork()
		return <-workDone
	}
	defer stopWorkWait()
	say("workload: %.0f transactions/s over %d connections; probe every %v; baseline for %v", opt.TxRate, opt.MPL, opt.ProbeInterval, opt.Baseline)
	if sleepCtx(ctx, opt.Baseline) != nil {
		return res, ctx.Err()
	}
	// The workload's clock starts once its connections are open: wait for
	// its report of the baseline's last second (at most 10 s more).
	nb := int(opt.Baseline / time.Second)
	for i := 0; i < 100; i++ {
		secsMu.Lock()
		n := len(secs)
		secsMu.Unlock()
		if n >= nb || sleepCtx(ctx, 100*time.Millisecond) != nil {
			break
		}
	}
	secsMu.Lock()
	base := dtMeanLatency(secs, 1, nb)
	secsMu.Unlock()
	if math.IsNaN(base) {
		return res, fmt.Errorf("downtime: the workload completed no transaction in its %v baseline", opt.Baseline)
	}
	res.BaselineMeanMs = round(base, 1)
	limitMs := max(opt.RecoverFactor*res.BaselineMeanMs, res.BaselineMeanMs+5)
	res.RecoveryLimitMs = round(limitMs, 1)
	say("baseline mean latency %.1f ms; recovered = a second with an empty queue and a mean ≤ %.1f ms", res.BaselineMeanMs, limitMs)

	owner := 0
	var migErr error
	for i := 0; i < 2*opt.Runs && migErr == nil; i++ {
		mode := string(migration.Live)
		if i%2 == 1 {
			mode = string(migration.StopAndCopy)
		}
		to := 1 - owner
		req := agentclient.StartMigration{Mode: mode}
		if mode == string(migration.Live) {
			req.Rate = opt.Rate
		}
		n := i/2 + 1
		say("%s %d/%d: %s → %s", mode, n, opt.Runs, bed.Servers[owner].Name, bed.Servers[to].Name)
		lastPhase, lastSay := "", time.Time{}
		m, err := bed.Migrate(ctx, tn, to, req, func(m agentclient.Migration) {
			if p := m.Progress; p.Phase != lastPhase || time.Since(lastSay) > 5*time.Second {
				lastPhase, lastSay = p.Phase, time.Now()
				total := ""
				if p.TotalBytes > 0 {
					total = "of " + units.FormatBytes(float64(p.TotalBytes))
				}
				say("  %-9s %9s %-12s %12s", p.Phase, units.FormatBytes(float64(p.Bytes)), total, units.FormatRate(p.Rate))
			}
		})
		if err != nil {
			migErr = fmt.Errorf("downtime: %s migration %d: %w", mode, n, err)
			break
		}
		r := DowntimeRun{Run: n, Mode: mode, ID: m.ID, From: owner, To: to}
		var rec migration.Record
		if err := json.Unmarshal(m.Record, &rec); err != nil || rec.HeldAt.IsZero() || rec.ReleasedAt.IsZero() {
			migErr = fmt.Errorf("downtime: migration %s: its record has no hold/release times", m.ID)
			break
		}
		if m.Summary != nil {
			r.Seconds, r.Bytes = m.Summary.Seconds, m.Summary.Bytes
			r.AgentMs = m.Summary.FreezeMS
			if mode == string(migration.StopAndCopy) {
				r.AgentMs = m.Summary.DowntimeMS
			}
		}
		r.HeldAtS, r.ReleasedAtS = rec.HeldAt.Sub(start).Seconds(), rec.ReleasedAt.Sub(start).Seconds()
		owner = to
		// Let the window's tail pass, then wait for the workload to recover
		// (so that moves do not inherit each other's backlog).
		if sleepCtx(ctx, max(opt.Settle, opt.Window+100*time.Millisecond)) != nil {
			migErr = ctx.Err()
			break
		}
		r.RecoveryS = -1
		for {
			secsMu.Lock()
			rs, ok := dtRecovery(secs, rec.ReleasedAt.Sub(wStart), limitMs)
			secsMu.Unlock()
			if ok {
				r.RecoveryS = rs
				break
			}
			if time.Since(rec.ReleasedAt) > opt.Recover || sleepCtx(ctx, 200*time.Millisecond) != nil {
				break
			}
		}
		if ctx.Err() != nil {
			migErr = ctx.Err()
			break
		}
		from, until := rec.HeldAt.Add(-opt.Window), rec.ReleasedAt.Add(opt.Window)
		st := dtStall(pr.snapshot(), from, until)
		r.ProbeMaxMs, r.ProbeGapMs, r.ProbeErrors = st.MaxMs, st.GapMs, st.Errors
		secsMu.Lock()
		lo, hi, errs := dtWorkloadAround(secs, from.Sub(wStart), until.Sub(wStart))
		secsMu.Unlock()
		r.WorkloadErrors = errs
		for _, l := range run.Latencies(lo, hi) {
			r.WorkloadMaxMs = max(r.WorkloadMaxMs, l)
		}
		say("  %s %d/%d: agent %.1f ms; probe: longest %.1f ms, gap %.1f ms, %d errors; workload: longest %.1f ms, %d errors, recovered after %.1f s; %.1f s, %s",
			mode, n, opt.Runs, r.AgentMs, r.ProbeMaxMs, r.ProbeGapMs, r.ProbeErrors, r.WorkloadMaxMs, r.WorkloadErrors, r.RecoveryS, r.Seconds, units.FormatBytes(float64(r.Bytes)))
		r.round()
		if mode == string(migration.Live) {
			res.Live = append(res.Live, r)
		} else {
			res.StopAndCopy = append(res.StopAndCopy, r)
		}
	}

	stoppedAt := time.Since(wStart)
	werr := stopWorkWait()
	stopProbeWait()
	if migErr == nil && werr != nil && !errors.Is(werr, context.Canceled) {
		migErr = fmt.Errorf("downtime: workload: %w", werr)
	}
	secsMu.Lock()
	_, _, errs := dtWorkloadAround(secs, 0, stoppedAt.Truncate(time.Second))
	res.WorkloadErrors = int64(errs)
	secsMu.Unlock()
	res.summarise()

	// Row by row on the final owner, through the proxy (not if interrupted).
	vctx, vcancel := context.WithTimeout(ctx, 5*time.Minute)
	defer vcancel()
	chk, verr := dtVerify(vctx, tn.DSN, run.Ledger)
	if verr == nil {
		res.WritesAcknowledged, res.WritesMissing, res.WritesDuplicated = chk.Acknowledged, chk.Missing, chk.Duplicated
		say("ledger: %d writes acknowledged, %d missing, %d duplicated", chk.Acknowledged, chk.Missing, chk.Duplicated)
	}
	if opt.Out != "" {
		secsMu.Lock()
		all := slices.Clone(secs)
		secsMu.Unlock()
		if err := writeDowntimeOutputs(opt, bed.Describe(), start, res, pr.snapshot(), wStart, all); err != nil && migErr == nil {
			migErr = err
		}
	}
	switch {
	case migErr != nil:
		return res, migErr
	case verr != nil:
		return res, verr
	case !chk.OK():
		return res, fmt.Errorf("downtime: %d acknowledged writes missing, %d duplicated", chk.Missing, chk.Duplicated)
	}
	return res, nil
}

func dtVerify(ctx context.Context, dsn string, l *workload.Ledger) (workload.Check, error) {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return workload.Check{}, fmt.Errorf("downtime: verify: %w", err)
	}
	defer conn.Close(context.Background())
	return workload.Verify(ctx, conn, l)
}

// summarise fills the medians from the per-run lists.
func (r *DowntimeResult) summarise() {
	med := func(runs []DowntimeRun, f func(DowntimeRun) float64) float64 {
		xs := make([]float64, len(runs))
		for i, x := range runs {
			xs[i] = f(x)
		}
		return stats.Median(xs)
	}
	agent := func(x DowntimeRun) float64 { return x.AgentMs }
	probe := func(x DowntimeRun) float64 { return x.ProbeMaxMs }
	gap := func(x DowntimeRun) float64 { return x.ProbeGapMs }
	wmax := func(x DowntimeRun) float64 { return x.WorkloadMaxMs }
	secs := func(x DowntimeRun) float64 { return x.Seconds }
	r.LiveFreezeMs, r.StopAndCopyDowntimeMs = med(r.Live, agent), med(r.StopAndCopy, agent)
	r.LiveProbeMaxMs, r.StopAndCopyProbeMaxMs = med(r.Live, probe), med(r.StopAndCopy, probe)
	r.LiveProbeGapMs, r.StopAndCopyProbeGapMs = med(r.Live, gap), med(r.StopAndCopy, gap)
	r.LiveWorkloadMaxMs, r.StopAndCopyWorkloadMaxMs = med(r.Live, wmax), med(r.StopAndCopy, wmax)
	r.LiveSeconds, r.StopAndCopySeconds = med(r.Live, secs), med(r.StopAndCopy, secs)
	// Not recovered (-1) ranks above every recovery time.
	rec := func(x DowntimeRun) float64 {
		if x.RecoveryS < 0 {
			return math.Inf(1)
		}
		return x.RecoveryS
	}
	r.LiveRecoveryS, r.StopAndCopyRecoveryS = med(r.Live, rec), med(r.StopAndCopy, rec)
	for _, x := range []*float64{&r.LiveRecoveryS, &r.StopAndCopyRecoveryS} {
		if math.IsInf(*x, 1) || math.IsNaN(*x) {
			*x = -1
		}
	}
	if r.LiveFreezeMs > 0 {
		r.DowntimeRatio = round(r.StopAndCopyDowntimeMs/r.LiveFreezeMs, 2)
	}
}

// round keeps 0.1 ms and 0.01 s (hold and release: 0.1 ms): the figures'
// resolution, not float noise.
func (r *DowntimeRun) round() {
	for _, x := range []*float64{&r.AgentMs, &r.ProbeMaxMs, &r.ProbeGapMs, &r.WorkloadMaxMs} {
		*x = round(*x, 1)
	}
	r.Seconds, r.RecoveryS = round(r.Seconds, 2), round(r.RecoveryS, 2)
	r.HeldAtS, r.ReleasedAtS = round(r.HeldAtS, 4), round(r.ReleasedAtS, 4)
}

// dtSample is one probe: when it was issued, how long it took, and whether it
// failed.
type dtSample struct {
	At      time.Time
	Latency time.Duration
	Err     bool
}

// dtStallFigures is what the probe saw in one window.
type dtStallFigures struct {
	MaxMs  float64 // longest probe issued in the window
	GapMs  float64 // longest time between successful completions (window edges count)
	Errors int
	Probes int
}

// dtStall measures the client-visible stall in [from, until] from samples
// sorted by issue time. A probe counts if it was issued in the window. The gap
// is the longest interval between consecutive successful completions, with
// the window's edges as the first and last "completions" (a probe still
// running past until stretches the last gap to its completion).
func dtStall(samples []dtSample, from, until time.Time) dtStallFigures {
	var f dtStallFigures
	last := from
	for _, s := range samples {
		if s.At.Before(from) {
			// A probe issued before the window that completes inside it ends a gap.
			if end := s.At.Add(s.Latency); !s.Err && end.After(last) && !end.After(until) {
				f.GapMs = max(f.GapMs, dtMs(end.Sub(last)))
				last = end
			}
			continue
		}
		if s.At.After(until) {
			break
		}
		f.Probes++
		f.MaxMs = max(f.MaxMs, dtMs(s.Latency))
		if s.Err {
			f.Errors++
			continue
		}
		end := s.At.Add(s.Latency)
		if end.After(last) {
			f.GapMs = max(f.GapMs, dtMs(end.Sub(last)))
			last = end
		}
	}
	if until.After(last) {
		f.GapMs = max(f.GapMs, dtMs(until.Sub(last)))
	}
	return f
}

// dtWorkloadAround returns the workload seconds [lo, hi) that overlap
// [from, until) (offsets since its start) and the transactions that failed
// in them.
func dtWorkloadAround(secs []workload.Second, from, until time.Duration) (lo, hi, errs int) {
	lo, hi = int(max(from, 0)/time.Second), int((until+time.Second-1)/time.Second)
	for _, s := range secs {
		if s.T >= lo && s.T < hi {
			errs += s.Errors
		}
	}
	return lo, hi, errs
}

// dtMeanLatency is the transaction-weighted mean latency of the workload
// seconds [from, to); NaN if none completed.
func dtMeanLatency(secs []workload.Second, from, to int) float64 {
	var sum float64
	var n int
	for _, s := range secs {
		if s.T >= from && s.T < to {
			sum += s.MeanMs * float64(s.Count)
			n += s.Count
		}
	}
	if n == 0 {
		return math.NaN()
	}
	return sum / float64(n)
}

// dtRecovery finds the first whole workload second starting at or after
// release (an offset since the workload started) that completed
// transactions, ended with no arrival queued, and had a mean latency ≤
// limitMs; it returns the time from release to that second's end, seconds.
func dtRecovery(secs []workload.Second, release time.Duration, limitMs float64) (float64, bool) {
	for _, s := range secs {
		lo := time.Duration(s.T) * time.Second
		if lo < release {
			continue
		}
		if s.Count > 0 && s.QueueLen == 0 && s.MeanMs <= limitMs {
			return (lo + time.Second - release).Seconds(), true
		}
	}
	return 0, false
}

func dtMs(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// dtProbe issues `SELECT 1` (simple protocol, one connection) every `every`
// and records each one. A failed probe is recorded and the connection
// reopened before the next.
type dtProbe struct {
	dsn   string
	every time.Duration
	conn  *pgx.Conn

	mu      sync.Mutex
	samples []dtSample
}

func (p *dtProbe) connect(ctx context.Context) error {
	c, err := pgx.Connect(ctx, p.dsn)
	if err != nil {
		return err
	}
	p.conn = c
	return nil
}

// run probes until ctx ends. It owns p.conn.
func (p *dtProbe) run(ctx context.Context) error {
	defer func() {
		if p.conn != nil {
			p.conn.Close(context.Background())
		}
	}()
	next := time.Now()
	for ctx.Err() == nil {
		if p.conn == nil || p.conn.IsClosed() {
			if err := p.connect(ctx); err != nil {
				if ctx.Err() != nil {
					return nil
				}
				p.add(dtSample{At: time.Now(), Err: true})
				sleepCtx(ctx, 20*time.Millisecond)
				continue
			}
		}
		at := time.Now()
		_, err := p.conn.Exec(ctx, "SELECT 1", pgx.QueryExecModeSimpleProtocol)
		lat := time.Since(at)
		if err != nil && ctx.Err() != nil {
			return nil // stopped mid-probe: not a client-visible failure
		}
		p.add(dtSample{At: at, Latency: lat, Err: err != nil})
		if err != nil {
			p.conn.Close(context.Background())
			p.conn = nil
		}
		// Keep to the grid; after a long probe, start again from now.
		next = next.Add(p.every)
		if now := time.Now(); next.Before(now) {
			next = now
		}
		sleepCtx(ctx, time.Until(next))
	}
	return nil
}

func (p *dtProbe) add(s dtSample) {
	p.mu.Lock()
	p.samples = append(p.samples, s)
	p.mu.Unlock()
}

func (p *dtProbe) snapshot() []dtSample {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.samples)
}

// writeDowntimeOutputs writes summary.json, probe.csv, workload.csv,
// report.md and downtime.png into opt.Out.
func writeDowntimeOutputs(opt DowntimeOptions, bed string, start time.Time, res DowntimeResult, samples []dtSample, wStart time.Time, secs []workload.Second) error {
	b, _ := json.MarshalIndent(res, "", "  ")
	if err := os.WriteFile(filepath.Join(opt.Out, "summary.json"), append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("downtime: %w", err)
	}
	runs := append(slices.Clone(res.Live), res.StopAndCopy...)
	slices.SortFunc(runs, func(a, b DowntimeRun) int { return cmp.Compare(a.HeldAtS, b.HeldAtS) })
	if err := writeDowntimeCSV(filepath.Join(opt.Out, "probe.csv"), start, samples, runs, opt.Window); err != nil {
		return err
	}
	if err := writeDowntimeWorkloadCSV(filepath.Join(opt.Out, "workload.csv"), wStart.Sub(start), secs); err != nil {
		return err
	}
	if err := writeDowntimePNG(filepath.Join(opt.Out, "downtime.png"), start, samples, res, opt.Window, opt.ProbeInterval); err != nil {
		return err
	}
	return writeFile(opt.Out, "report.md", downtimeReport(opt, start, res, bed))
}

// writeDowntimeCSV writes one row per probe: t_s (issue time, seconds since
// the bench started), latency_ms, ok, and — for probes within a move's
// window — the move (mode, run, migration id) and the time since its hold.
func writeDowntimeCSV(path string, start time.Time, samples []dtSample, runs []DowntimeRun, window time.Duration) error {
	header := []string{"t_s", "latency_ms", "ok", "mode", "run", "migration_id", "since_hold_s"}
	ws := window.Seconds()
	return writeCSV(path, header, func(emit func([]string)) {
		j := 0
		for _, s := range samples {
			t := s.At.Sub(start).Seconds()
			for j < len(runs) && t > runs[j].ReleasedAtS+ws {
				j++
			}
			row := []string{strconv.FormatFloat(t, 'f', 4, 64), strconv.FormatFloat(dtMs(s.Latency), 'f', 3, 64), strconv.FormatBool(!s.Err), "", "", "", ""}
			if j < len(runs) && t >= runs[j].HeldAtS-ws {
				r := runs[j]
				row[3], row[4], row[5], row[6] = r.Mode, strconv.Itoa(r.Run), r.ID, strconv.FormatFloat(t-r.HeldAtS, 'f', 4, 64)
			}
			emit(row)
		}
	})
}

// writeDowntimeWorkloadCSV writes the workload's seconds: t_s (the second's
// start, seconds since the bench started; offset is the workload's start
// on that clock), then the workload's own figures.
func writeDowntimeWorkloadCSV(path string, offset time.Duration, secs []workload.Second) error {
	header := []string{"t_s", "count", "errors", "mean_ms", "p50_ms", "p99_ms", "queue_ms", "queue_len"}
	ff := func(x float64) string { return strconv.FormatFloat(x, 'f', 3, 64) }
	return writeCSV(path, header, func(emit func([]string)) {
		for _, s := range secs {
			emit([]string{ff((offset + time.Duration(s.T)*time.Second).Seconds()), strconv.Itoa(s.Count), strconv.Itoa(s.Errors),
				ff(s.MeanMs), ff(s.P50Ms), ff(s.P99Ms), ff(s.QueueMs), strconv.Itoa(s.QueueLen)})
		}
	})
}

// writeDowntimePNG plots, against time since the hold, how long the probe in
// flight has been waiting (a sawtooth: each probe's wait grows from its issue
// to its completion), one line per move, live above and stop-and-copy below,
// with the agent's median figure dashed.
func writeDowntimePNG(path string, start time.Time, samples []dtSample, res DowntimeResult, window, every time.Duration) error {
	panel := func(title string, runs []DowntimeRun, agentMs float64) chart.Panel {
		p := chart.Panel{Title: title, YLabel: "probe's wait so far, ms"}
		ws := window.Seconds()
		var xmax float64
		for _, r := range runs {
			var xs, ys []float64
			for _, s := range samples {
				t := s.At.Sub(start).Seconds()
				if t < r.HeldAtS-ws || t > r.ReleasedAtS+ws {
					continue
				}
				// The probe's wait rises from 0 at its issue to its latency at
				// its completion (a failed probe leaves a gap).
				x0, y1 := t-r.HeldAtS, dtMs(s.Latency)
				if s.Err {
					y1 = math.NaN()
				}
				xs, ys = append(xs, x0, x0+s.Latency.Seconds()), append(ys, 0, y1)
			}
			xmax = max(xmax, r.ReleasedAtS-r.HeldAtS+ws)
			p.Series = append(p.Series, chart.Series{Name: fmt.Sprintf("run %d (%s→%s)", r.Run, dtServer(r.From), dtServer(r.To)), X: xs, Y: ys})
		}
		p.Series = append(p.Series, chart.Series{Name: fmt.Sprintf("agent's median %.0f ms", agentMs), X: []float64{-ws, xmax}, Y: []float64{agentMs, agentMs}, Dashed: true})
		return p
	}
	c := chart.Chart{
		Title: fmt.Sprintf("sluice bench downtime: %s tenant under YCSB — live freeze %.0f ms vs stop-and-copy downtime %.0f ms (medians)",
			units.FormatBytes(float64(res.TenantBytes)), res.LiveFreezeMs, res.StopAndCopyDowntimeMs),
		XLabel: fmt.Sprintf("seconds since the proxy held the tenant (probe: SELECT 1 through the proxy every %v)", every),
		Panels: []chart.Panel{
			panel("live migration", res.Live, res.LiveFreezeMs),
			panel("stop-and-copy", res.StopAndCopy, res.StopAndCopyDowntimeMs),
		},
	}
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("downtime: %w", err)
	}
	if err := chart.WritePNG(f, c); err != nil {
		f.Close()
		return fmt.Errorf("downtime: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("downtime: %w", err)
	}
	return nil
}

func dtServer(i int) string { return string(rune('A' + i)) }

// downtimeReport is the Markdown report.
func downtimeReport(opt DowntimeOptions, start time.Time, res DowntimeResult, bed string) string {
	var b strings.Builder
	cmdline := opt.Command
	if cmdline == "" {
		cmdline = "(library call)"
	}
	rate := "unlimited"
	if opt.Rate > 0 {
		rate = units.FormatRate(opt.Rate)
	}
	b.WriteString(reportHeader("sluice bench downtime: live migration vs stop-and-copy", cmdline, start, bed))
	fmt.Fprintf(&b, "One tenant of %s (requested %s) under Slacker's YCSB workload (%.0f transactions/s, MPL %d) through the proxy, "+
		"moved between two servers alternately by %d live migrations (copy rate %s) and %d stop-and-copy ones. "+
		"*Agent* is the agent's hold → release time (live: the handover freeze; stop-and-copy: the downtime). "+
		"*Probe* is a separate connection through the proxy issuing `SELECT 1` every %v: the longest probe, and the longest gap "+
		"between successful probes, within %v of the hold and release. *Workload max* is the longest YCSB transaction (queue + execution) "+
		"completed in the seconds overlapping the same window. *Recovery* is the time from the release to the end of the first whole second "+
		"whose YCSB transactions had a mean latency ≤ %.1f ms (%.1f× the baseline mean of %.1f ms, at least +5 ms) with no arrival left queued; "+
		"the next move waits for it (at most %v; -1 = not recovered by then). Medians over the runs:\n\n",
		units.FormatBytes(float64(res.TenantBytes)), units.FormatBytes(float64(opt.Size)), opt.TxRate, opt.MPL,
		len(res.Live), rate, len(res.StopAndCopy), opt.ProbeInterval, opt.Window, res.RecoveryLimitMs, opt.RecoverFactor, res.BaselineMeanMs, opt.Recover)
	fmt.Fprintf(&b, "| mode | agent, ms | probe max, ms | probe gap, ms | workload max, ms | recovery, s | migration, s |\n|---|---:|---:|---:|---:|---:|---:|\n")
	fmt.Fprintf(&b, "| live | %.1f | %.1f | %.1f | %.1f | %.2f | %.1f |\n", res.LiveFreezeMs, res.LiveProbeMaxMs, res.LiveProbeGapMs, res.LiveWorkloadMaxMs, res.LiveRecoveryS, res.LiveSeconds)
	fmt.Fprintf(&b, "| stop-and-copy | %.1f | %.1f | %.1f | %.1f | %.2f | %.1f |\n\n", res.StopAndCopyDowntimeMs, res.StopAndCopyProbeMaxMs, res.StopAndCopyProbeGapMs, res.StopAndCopyWorkloadMaxMs, res.StopAndCopyRecoveryS, res.StopAndCopySeconds)
	if res.DowntimeRatio > 0 {
		fmt.Fprintf(&b, "Stop-and-copy's downtime is %.1f× the live freeze.\n\n", res.DowntimeRatio)
	}
	fmt.Fprintf(&b, "Every run:\n\n| mode | run | from→to | agent, ms | probe max, ms | probe gap, ms | probe errors | workload max, ms | workload errors | recovery, s | migration, s | bytes |\n|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, r := range append(slices.Clone(res.Live), res.StopAndCopy...) {
		fmt.Fprintf(&b, "| %s | %d | %s→%s | %.1f | %.1f | %.1f | %d | %.1f | %d | %.2f | %.1f | %s |\n", r.Mode, r.Run, dtServer(r.From), dtServer(r.To),
			r.AgentMs, r.ProbeMaxMs, r.ProbeGapMs, r.ProbeErrors, r.WorkloadMaxMs, r.WorkloadErrors, r.RecoveryS, r.Seconds, units.FormatBytes(float64(r.Bytes)))
	}
	fmt.Fprintf(&b, "\nLedger, checked row by row on the final owner: %d writes acknowledged, %d missing, %d duplicated (%d failed transactions over the run).\n",
		res.WritesAcknowledged, res.WritesMissing, res.WritesDuplicated, res.WorkloadErrors)
	fmt.Fprintf(&b, "\nFiles: summary.json, probe.csv (every probe; mode/run/since_hold_s set within a move's window), workload.csv (the YCSB workload per second), downtime.png.\n")
	return b.String()
}
