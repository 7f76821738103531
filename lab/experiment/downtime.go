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
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"time"

	"github.com/jackc/pgx/v5"

	agentclient "github.com/sluicedb/sluice/agent/client"
	"github.com/sluicedb/sluice/internal/clock"
	"github.com/sluicedb/sluice/internal/stats"
	"github.com/sluicedb/sluice/internal/units"
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
	d := &downtimeRun{opt: opt, bed: bed, say: opt.Progress, start: time.Now()}
	d.say("creating a %s tenant on %s", units.FormatBytes(float64(opt.Size)), bed.Servers[0].Name)
	if d.tn, err = bed.CreateTenant(ctx, 0, "downtime", opt.Size, opt.Seed+1); err != nil {
		return DowntimeResult{}, fmt.Errorf("downtime: create tenant: %w", err)
	}
	d.res.TenantBytes = d.tn.Bytes
	d.say("tenant %q: %d rows, %s on disk", d.tn.Name, d.tn.Rows, units.FormatBytes(float64(d.tn.Bytes)))

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if err := d.startProbe(ctx); err != nil {
		return d.res, err
	}
	defer d.stopProbe()
	if err := d.startWorkload(ctx); err != nil {
		return d.res, err
	}
	defer d.stopWorkload()
	if err := d.baseline(ctx); err != nil {
		return d.res, err
	}
	owner := 0
	var migErr error
	for i := range 2 * opt.Runs {
		r, err := d.move(ctx, i, owner)
		if err != nil {
			migErr = err
			break
		}
		owner = r.To
		if r.Mode == string(migration.Live) {
			d.res.Live = append(d.res.Live, r)
		} else {
			d.res.StopAndCopy = append(d.res.StopAndCopy, r)
		}
	}
	return d.res, d.finish(ctx, migErr)
}

// downtimeRun is a Downtime experiment under way: its tenant, the probe
// and the workload running through the proxy, and what they measured.
type downtimeRun struct {
	opt   DowntimeOptions
	bed   *testbed.Bed
	tn    testbed.Tenant
	say   func(format string, args ...any)
	start time.Time // the bench's, the outputs' clock
	res   DowntimeResult

	pr          *dtProbe
	probeDone   chan error
	cancelProbe context.CancelFunc
	work        *background // the workload, through the proxy the whole time
	limitMs     float64     // a recovered second's mean latency at most
}

// startProbe starts the probe: one connection, SELECT 1 every
// ProbeInterval, until stopProbe.
func (d *downtimeRun) startProbe(ctx context.Context) error {
	d.pr = &dtProbe{dsn: d.tn.DSN, every: d.opt.ProbeInterval}
	pctx, cancel := context.WithCancel(ctx)
	if err := d.pr.connect(pctx); err != nil {
		cancel()
		return fmt.Errorf("downtime: probe: %w", err)
	}
	d.probeDone, d.cancelProbe = make(chan error, 1), cancel
	go func() { d.probeDone <- d.pr.run(pctx) }()
	return nil
}

// stopProbe stops the probe and waits for it; again, it does nothing.
func (d *downtimeRun) stopProbe() {
	if d.cancelProbe != nil {
		d.cancelProbe()
		<-d.probeDone
		d.cancelProbe = nil
	}
}

// startWorkload starts the workload, recording its seconds, until
// stopWorkload. Its ledger proves nothing is lost.
func (d *downtimeRun) startWorkload(ctx context.Context) error {
	o := d.opt
	run, err := workload.NewRunner(workload.Config{DSN: d.tn.DSN, Rate: o.TxRate, MPL: o.MPL, Records: d.tn.Rows, Duration: 24 * time.Hour, Seed: o.Seed + 2})
	if err != nil {
		return fmt.Errorf("downtime: %w", err)
	}
	d.work = runBackground(ctx, run)
	d.say("workload: %.0f transactions/s over %d connections; probe every %v; baseline for %v", o.TxRate, o.MPL, o.ProbeInterval, o.Baseline)
	return nil
}

// stopWorkload stops the workload and returns its error; again, it does
// nothing.
func (d *downtimeRun) stopWorkload() error { return d.work.stop() }

// baseline waits out the baseline and sets the recovery limit from it.
func (d *downtimeRun) baseline(ctx context.Context) error {
	o := d.opt
	if clock.Sleep(ctx, o.Baseline) != nil {
		return ctx.Err()
	}
	// The workload's clock starts once its connections are open: wait for
	// its report of the baseline's last second (at most 10 s more).
	nb := int(o.Baseline / time.Second)
	for range 100 {
		n := len(d.work.seconds())
		if n >= nb || clock.Sleep(ctx, 100*time.Millisecond) != nil {
			break
		}
	}
	base := dtMeanLatency(d.work.seconds(), 1, nb)
	if math.IsNaN(base) {
		return fmt.Errorf("downtime: the workload completed no transaction in its %v baseline", o.Baseline)
	}
	d.res.BaselineMeanMs = round(base, 1)
	d.limitMs = max(o.RecoverFactor*d.res.BaselineMeanMs, d.res.BaselineMeanMs+5)
	d.res.RecoveryLimitMs = round(d.limitMs, 1)
	d.say("baseline mean latency %.1f ms; recovered = a second with an empty queue and a mean ≤ %.1f ms", d.res.BaselineMeanMs, d.limitMs)
	return nil
}

// move runs the i-th migration (live when i is even) of the tenant from
// server owner to the other, waits for the workload to recover, and
// returns its figures.
func (d *downtimeRun) move(ctx context.Context, i, owner int) (DowntimeRun, error) {
	o := d.opt
	mode := string(migration.Live)
	if i%2 == 1 {
		mode = string(migration.StopAndCopy)
	}
	to, n := 1-owner, i/2+1
	req := agentclient.StartMigration{Mode: mode}
	if mode == string(migration.Live) {
		req.Rate = o.Rate
	}
	d.say("%s %d/%d: %s → %s", mode, n, o.Runs, d.bed.Servers[owner].Name, d.bed.Servers[to].Name)
	lastPhase, lastSay := "", time.Time{}
	m, err := d.bed.Migrate(ctx, d.tn, to, req, func(m agentclient.Migration) {
		if p := m.Progress; p.Phase != lastPhase || time.Since(lastSay) > 5*time.Second {
			lastPhase, lastSay = p.Phase, time.Now()
			total := ""
			if p.TotalBytes > 0 {
				total = "of " + units.FormatBytes(float64(p.TotalBytes))
			}
			d.say("  %-9s %9s %-12s %12s", p.Phase, units.FormatBytes(float64(p.Bytes)), total, units.FormatRate(p.Rate))
		}
	})
	if err != nil {
		return DowntimeRun{}, fmt.Errorf("downtime: %s migration %d: %w", mode, n, err)
	}
	r := DowntimeRun{Run: n, Mode: mode, ID: m.ID, From: owner, To: to}
	var rec migration.Record
	if err := json.Unmarshal(m.Record, &rec); err != nil || rec.HeldAt.IsZero() || rec.ReleasedAt.IsZero() {
		return r, fmt.Errorf("downtime: migration %s: its record has no hold/release times", m.ID)
	}
	if m.Summary != nil {
		r.Seconds, r.Bytes = m.Summary.Seconds, m.Summary.Bytes
		r.AgentMs = m.Summary.FreezeMS
		if mode == string(migration.StopAndCopy) {
			r.AgentMs = m.Summary.DowntimeMS
		}
	}
	r.HeldAtS, r.ReleasedAtS = rec.HeldAt.Sub(d.start).Seconds(), rec.ReleasedAt.Sub(d.start).Seconds()
	// Let the window's tail pass, then wait for the workload to recover
	// (so that moves do not inherit each other's backlog).
	if clock.Sleep(ctx, max(o.Settle, o.Window+100*time.Millisecond)) != nil {
		return r, ctx.Err()
	}
	r.RecoveryS = d.recovery(ctx, rec.ReleasedAt)
	if ctx.Err() != nil {
		return r, ctx.Err()
	}
	d.stall(&r, rec)
	d.say("  %s %d/%d: agent %.1f ms; probe: longest %.1f ms, gap %.1f ms, %d errors; workload: longest %.1f ms, %d errors, recovered after %.1f s; %.1f s, %s",
		mode, n, o.Runs, r.AgentMs, r.ProbeMaxMs, r.ProbeGapMs, r.ProbeErrors, r.WorkloadMaxMs, r.WorkloadErrors, r.RecoveryS, r.Seconds, units.FormatBytes(float64(r.Bytes)))
	r.round()
	return r, nil
}

// recovery waits, up to Recover after release, for the workload's first
// recovered second (dtRecovery) and returns the time to its end, seconds;
// -1 if none came.
func (d *downtimeRun) recovery(ctx context.Context, release time.Time) float64 {
	for {
		rs, ok := dtRecovery(d.work.seconds(), release.Sub(d.work.start), d.limitMs)
		if ok {
			return rs
		}
		if time.Since(release) > d.opt.Recover || clock.Sleep(ctx, 200*time.Millisecond) != nil {
			return -1
		}
	}
}

// stall sets r's client-side figures: the probe's and the workload's
// around the move's hold and release.
func (d *downtimeRun) stall(r *DowntimeRun, rec migration.Record) {
	from, until := rec.HeldAt.Add(-d.opt.Window), rec.ReleasedAt.Add(d.opt.Window)
	st := dtStall(d.pr.snapshot(), from, until)
	r.ProbeMaxMs, r.ProbeGapMs, r.ProbeErrors = st.MaxMs, st.GapMs, st.Errors
	lo, hi, errs := dtWorkloadAround(d.work.seconds(), from.Sub(d.work.start), until.Sub(d.work.start))
	r.WorkloadErrors = errs
	for _, l := range d.work.run.Latencies(lo, hi) {
		r.WorkloadMaxMs = max(r.WorkloadMaxMs, l)
	}
}

// finish stops the workload and the probe, sums the runs up, checks the
// ledger on the final owner and writes the outputs; it returns the first
// of migErr, the workload's, the check's and the outputs' errors.
func (d *downtimeRun) finish(ctx context.Context, migErr error) error {
	stoppedAt := time.Since(d.work.start)
	werr := d.stopWorkload()
	d.stopProbe()
	if migErr == nil && werr != nil && !errors.Is(werr, context.Canceled) {
		migErr = fmt.Errorf("downtime: workload: %w", werr)
	}
	all := d.work.seconds()
	_, _, errs := dtWorkloadAround(all, 0, stoppedAt.Truncate(time.Second))
	d.res.WorkloadErrors = int64(errs)
	d.res.summarise()

	// Row by row on the final owner, through the proxy (not if interrupted).
	vctx, vcancel := context.WithTimeout(ctx, 5*time.Minute)
	defer vcancel()
	chk, verr := dtVerify(vctx, d.tn.DSN, d.work.run.Ledger)
	if verr == nil {
		d.res.WritesAcknowledged, d.res.WritesMissing, d.res.WritesDuplicated = chk.Acknowledged, chk.Missing, chk.Duplicated
		d.say("ledger: %d writes acknowledged, %d missing, %d duplicated", chk.Acknowledged, chk.Missing, chk.Duplicated)
	}
	if d.opt.Out != "" {
		if err := writeDowntimeOutputs(d.opt, d.bed.Describe(), d.start, d.res, d.pr.snapshot(), d.work.start, all); err != nil && migErr == nil {
			migErr = err
		}
	}
	switch {
	case migErr != nil:
		return migErr
	case verr != nil:
		return verr
	case !chk.OK():
		return fmt.Errorf("downtime: %d acknowledged writes missing, %d duplicated", chk.Missing, chk.Duplicated)
	}
	return nil
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
