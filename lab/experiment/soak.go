package experiment

// soak: one tenant moved back and forth between two servers under load for
// a long time (an hour by default), the PID controller (the default
// profile) and a fixed rate alternating migration by migration. It looks
// for what only time shows: memory or file descriptors the agents or the
// proxy do not give back, replication slots left behind, a write lost in
// the hundredth handover. The agents and the proxy run as processes of
// their own (testbed.Options.ProxyProcess), so that their RSS and fds,
// read from /proc every SampleEvery, are theirs alone.

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	agentclient "github.com/sluicedb/sluice/agent/client"
	"github.com/sluicedb/sluice/internal/clock"
	"github.com/sluicedb/sluice/internal/units"
	"github.com/sluicedb/sluice/lab/procstat"
	"github.com/sluicedb/sluice/lab/testbed"
	"github.com/sluicedb/sluice/lab/workload"
)

// Soak's controllers, alternating migration by migration (the first is the
// PID).
const (
	SoakPID   = "pid"
	SoakFixed = "fixed"
)

// SoakOptions configure Soak. Zero values take the defaults noted.
type SoakOptions struct {
	Out string // output directory; "" = write no files
	// Duration is how long migrations keep starting, from the first one's
	// start; default 1 h. The run then goes on to the first migration that
	// leaves the tenant where the warm-up left it (at most one more), so
	// that the start and end readings see the same placement.
	Duration time.Duration
	Size     int64 // tenant data, bytes; default 200 MB
	// TxRate and MPL shape the YCSB workload (uniform keys) that runs through
	// the proxy the whole time: arrivals per second (default 100) served by
	// MPL connections (default DefaultMPL).
	TxRate float64
	MPL    int
	// SetpointMs is the PID's setpoint, ms; 0 = 3 × the baseline's mean
	// latency, and at least the mean + 5 ms.
	SetpointMs float64
	// FixedRate is the fixed controller's copy rate, bytes/s; default 20 MB/s.
	FixedRate float64
	// Warmup is the number of migrations before the start reading of the
	// processes' RSS and fds; default 2.
	Warmup int
	// Settle is the pause after each migration before the next starts (and
	// before a reading); default 10 s.
	Settle time.Duration
	// SampleEvery is how often the processes' RSS and fds are read for the
	// time series; default 10 s.
	SampleEvery time.Duration
	// Baseline is how long the workload runs before the first migration;
	// its mean latency sets the default setpoint; default 10 s.
	Baseline time.Duration
	// Tolerance is how far (a fraction: 0.1 = 10 %) a process's RSS or fd
	// count at the end may be from its start reading for the check to pass;
	// default 0.1.
	Tolerance float64
	// MinPerHour is the least number of committed migrations per hour of
	// Duration for the check to pass; default 30.
	MinPerHour float64
	Seed       uint64
	Command    string                           // the command line, for the report
	Progress   func(format string, args ...any) // nil = silent
}

// Check reports the first bad option, before anything is started.
func (o SoakOptions) Check() error {
	_, err := o.withDefaults()
	return err
}

func (o SoakOptions) withDefaults() (SoakOptions, error) {
	def := func(x *float64, v float64) {
		if *x == 0 {
			*x = v
		}
	}
	defd := func(x *time.Duration, v time.Duration) {
		if *x == 0 {
			*x = v
		}
	}
	defd(&o.Duration, time.Hour)
	defd(&o.Settle, 10*time.Second)
	defd(&o.SampleEvery, 10*time.Second)
	defd(&o.Baseline, 10*time.Second)
	def(&o.TxRate, 100)
	def(&o.FixedRate, 20e6)
	def(&o.Tolerance, 0.1)
	def(&o.MinPerHour, 30)
	if o.Size == 0 {
		o.Size = 200e6
	}
	if o.MPL == 0 {
		o.MPL = DefaultMPL
	}
	if o.Warmup == 0 {
		o.Warmup = 2
	}
	if o.Progress == nil {
		o.Progress = func(string, ...any) {}
	}
	bad := func(x float64) bool { return !(x > 0) || math.IsInf(x, 0) }
	switch {
	case o.Duration < time.Minute:
		return o, fmt.Errorf("soak: duration %v is below 1m", o.Duration)
	case o.Size < 1e6:
		return o, fmt.Errorf("soak: size %d bytes is below 1 MB", o.Size)
	case bad(o.TxRate):
		return o, fmt.Errorf("soak: workload rate %v must be a positive number of transactions/s", o.TxRate)
	case o.MPL < 1 || o.MPL > 80:
		return o, fmt.Errorf("soak: mpl %d: want 1 to 80 connections", o.MPL)
	case o.SetpointMs < 0 || math.IsNaN(o.SetpointMs) || math.IsInf(o.SetpointMs, 0):
		return o, fmt.Errorf("soak: setpoint %v ms must be positive (0: from the baseline)", o.SetpointMs)
	case bad(o.FixedRate):
		return o, fmt.Errorf("soak: fixed rate %v must be a positive number of bytes/s", o.FixedRate)
	case o.Warmup < 1 || o.Warmup > 100:
		return o, fmt.Errorf("soak: warm-up %d: want 1 to 100 migrations", o.Warmup)
	case o.Settle < 0 || o.SampleEvery < 100*time.Millisecond || o.Baseline < 2*time.Second:
		return o, errors.New("soak: settle must not be negative, sample interval at least 100ms, baseline at least 2s")
	case bad(o.Tolerance) || o.Tolerance >= 1:
		return o, fmt.Errorf("soak: tolerance %v: want a fraction in (0, 1)", o.Tolerance)
	case bad(o.MinPerHour):
		return o, fmt.Errorf("soak: migrations per hour %v must be positive", o.MinPerHour)
	}
	return o, nil
}

// maxFailedInARow stops a soak whose migrations keep failing.
const maxFailedInARow = 3

// Soak runs the soak on bed, which needs two servers and its proxy in a
// process of its own (testbed.Options.ProxyProcess): it creates one tenant
// on server 0, starts the workload, measures the baseline, then migrates
// the tenant to the other server and back, the controllers alternating,
// until opt.Duration has passed (see SoakOptions.Duration), reading the
// agents' and the proxy's RSS and fds all along. At the end it lists the
// servers' replication slots, checks the ledger on the final owner and
// writes the outputs. The result's Checks say what passed; an error means
// the soak could not run to its end (a failed migration is not one: it is
// counted, and the soak goes on).
func Soak(ctx context.Context, bed *testbed.Bed, opt SoakOptions) (SoakResult, error) {
	opt, err := opt.withDefaults()
	if err != nil {
		return SoakResult{}, err
	}
	switch {
	case len(bed.Servers) != 2:
		return SoakResult{}, fmt.Errorf("soak: the testbed has %d servers, need 2", len(bed.Servers))
	case bed.ProxyPID() == 0:
		return SoakResult{}, errors.New("soak: the testbed's proxy runs in this process: start it with ProxyProcess")
	}
	if opt.Out != "" {
		if err := os.MkdirAll(opt.Out, 0o755); err != nil {
			return SoakResult{}, fmt.Errorf("soak: %w", err)
		}
	}
	s := &soakRun{opt: opt, bed: bed, say: opt.Progress, start: time.Now()}
	s.procs = []soakProc{{"proxy", bed.ProxyPID()}}
	for _, sv := range bed.Servers {
		s.procs = append(s.procs, soakProc{"agent " + sv.Name, sv.PID()})
	}
	s.say("creating a %s tenant on %s", units.FormatBytes(float64(opt.Size)), bed.Servers[0].Name)
	if s.tn, err = bed.CreateTenant(ctx, 0, "soak", opt.Size, opt.Seed+1); err != nil {
		return SoakResult{}, fmt.Errorf("soak: create tenant: %w", err)
	}
	s.res.TenantBytes = s.tn.Bytes
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go s.sampleEvery(ctx)
	if err := s.startWorkload(ctx); err != nil {
		return s.res, err
	}
	defer s.stopWorkload()
	if err := s.baseline(ctx); err != nil {
		return s.res, err
	}
	runErr := s.migrations(ctx)
	return s.res, s.finish(ctx, runErr)
}

// soakProc is a process a soak watches.
type soakProc struct {
	Name string
	PID  int
}

// soakRun is a Soak under way.
type soakRun struct {
	opt   SoakOptions
	bed   *testbed.Bed
	tn    testbed.Tenant
	say   func(format string, args ...any)
	start time.Time // the outputs' clock
	procs []soakProc
	res   SoakResult

	work    *background
	mu      sync.Mutex
	samples []SoakSample // guarded by mu
}

// startWorkload starts the YCSB workload through the proxy until
// stopWorkload; its ledger proves nothing is lost.
func (s *soakRun) startWorkload(ctx context.Context) error {
	o := s.opt
	run, err := workload.NewRunner(workload.Config{DSN: s.tn.DSN, Rate: o.TxRate, MPL: o.MPL, Records: s.tn.Rows,
		Distribution: workload.Uniform, Duration: o.Duration + 24*time.Hour, Seed: o.Seed + 2})
	if err != nil {
		return fmt.Errorf("soak: %w", err)
	}
	s.work = runBackground(ctx, run)
	s.say("workload: %.0f transactions/s over %d connections through the proxy; baseline for %v", o.TxRate, o.MPL, o.Baseline)
	return nil
}

// stopWorkload stops the workload and returns its error; again, nothing.
func (s *soakRun) stopWorkload() error { return s.work.stop() }

// baseline waits out the baseline and sets the PID's setpoint from it.
func (s *soakRun) baseline(ctx context.Context) error {
	if clock.Sleep(ctx, s.opt.Baseline) != nil {
		return ctx.Err()
	}
	secs := s.work.seconds()
	base := dtMeanLatency(secs, 1, len(secs))
	if math.IsNaN(base) {
		return fmt.Errorf("soak: the workload completed no transaction in its %v baseline", s.opt.Baseline)
	}
	s.res.BaselineMeanMs = round(base, 1)
	s.res.SetpointMs = s.opt.SetpointMs
	if s.res.SetpointMs == 0 {
		s.res.SetpointMs = round(max(3*base, base+5), 1)
	}
	s.say("baseline mean latency %.1f ms; PID setpoint %.1f ms; fixed rate %s", s.res.BaselineMeanMs, s.res.SetpointMs, units.FormatRate(s.opt.FixedRate))
	return nil
}

// migrations moves the tenant back and forth until the soak's end
// (soakDone), taking the start reading after the warm-up. Only ctx's end
// or maxFailedInARow failed migrations in a row stop it early (an error).
func (s *soakRun) migrations(ctx context.Context) error {
	var began time.Time
	failed := 0
	for i := 0; ; i++ {
		if i == s.opt.Warmup {
			s.res.Start = s.reading(ctx, "start")
		}
		if i > 0 && soakDone(i, s.opt.Warmup, time.Since(began), s.opt.Duration) {
			s.res.Seconds = round(time.Since(began).Seconds(), 1)
			return nil
		}
		if i == 0 {
			began = time.Now()
		}
		m, err := s.migrate(ctx, i)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		s.res.Migrations = append(s.res.Migrations, m)
		if err != nil {
			failed++
			s.say("migration %d (%s) failed: %v", i+1, m.Controller, err)
			if failed >= maxFailedInARow {
				return fmt.Errorf("soak: %d migrations in a row failed, the last: %w", failed, err)
			}
		} else {
			failed = 0
		}
		if clock.Sleep(ctx, s.opt.Settle) != nil {
			return ctx.Err()
		}
	}
}

// soakDone reports whether a soak that has run n migrations (n ≥ 1) over
// elapsed is over: Duration has passed, the warm-up is done, and the
// tenant is back where the warm-up left it (n − warmup even, committed
// migrations assumed), so that the end reading sees the placement the start
// reading saw.
func soakDone(n, warmup int, elapsed, duration time.Duration) bool {
	return elapsed >= duration && n > warmup && (n-warmup)%2 == 0
}

// migrate runs the i-th migration (0-based; even i: the PID, odd: the fixed
// rate) of the tenant from its owner to the other server.
func (s *soakRun) migrate(ctx context.Context, i int) (SoakMigration, error) {
	ctl := &agentclient.Control{Controller: SoakPID, SetpointMs: s.res.SetpointMs}
	if i%2 == 1 {
		ctl = &agentclient.Control{Controller: SoakFixed, Rate: s.opt.FixedRate}
	}
	m := SoakMigration{N: i + 1, Controller: ctl.Controller, StartS: round(time.Since(s.start).Seconds(), 2)}
	from, _, err := s.bed.Owner(ctx, s.tn)
	if err != nil {
		return m, err
	}
	m.From, m.To = s.bed.Servers[from].Name, s.bed.Servers[1-from].Name
	got, err := s.bed.Migrate(ctx, s.tn, 1-from, agentclient.StartMigration{Control: ctl}, nil)
	m.ID, m.EndS = got.ID, round(time.Since(s.start).Seconds(), 2)
	if got.Summary != nil {
		m.Seconds, m.Bytes, m.FreezeMs = round(got.Summary.Seconds, 2), got.Summary.Bytes, round(got.Summary.FreezeMS, 1)
	}
	if err != nil {
		m.Error = err.Error()
		return m, err
	}
	m.Committed = true
	s.say("migration %d (%s) %s → %s: %.1f s, %s, freeze %.0f ms; %s", m.N, m.Controller, m.From, m.To, m.Seconds,
		units.FormatBytes(float64(m.Bytes)), m.FreezeMs, usageLine(s.lastSamples()))
	return m, nil
}

// sampleEvery reads every watched process every SampleEvery until ctx
// ends.
func (s *soakRun) sampleEvery(ctx context.Context) {
	t := time.NewTicker(s.opt.SampleEvery)
	defer t.Stop()
	s.sample("")
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			s.sample("")
		}
	}
}

// sample reads every watched process once, records the readings marked
// mark ("", "start", "end") and returns them.
func (s *soakRun) sample(mark string) []SoakSample {
	t := round(time.Since(s.start).Seconds(), 2)
	out := make([]SoakSample, 0, len(s.procs))
	for _, p := range s.procs {
		x := SoakSample{T: t, Process: p.Name, PID: p.PID, Mark: mark}
		if u, err := procstat.Read(p.PID); err != nil {
			x.Error = err.Error()
		} else {
			x.RSSBytes, x.FDs = u.RSSBytes, u.FDs
		}
		out = append(out, x)
	}
	s.mu.Lock()
	s.samples = append(s.samples, out...)
	s.mu.Unlock()
	return out
}

// lastSamples is the latest reading of each watched process.
func (s *soakRun) lastSamples() []SoakSample {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := len(s.procs)
	if len(s.samples) < n {
		return nil
	}
	return slices.Clone(s.samples[len(s.samples)-n:])
}

// readingReads and readingGap: a start or end reading is the median of
// readingReads reads readingGap apart, per process and per figure, so that
// a connection open for a moment (an API call, a client's reconnect) does
// not count as held.
const (
	readingReads = 5
	readingGap   = time.Second
)

// reading takes the start or end reading (mark), records its reads and
// says it.
func (s *soakRun) reading(ctx context.Context, mark string) []SoakSample {
	var reads [][]SoakSample
	for i := range readingReads {
		if i > 0 && clock.Sleep(ctx, readingGap) != nil {
			break
		}
		reads = append(reads, s.sample(mark))
	}
	r := medianReading(reads)
	s.say("%s reading (median of %d reads %v apart): %s", mark, len(reads), readingGap, usageLine(r))
	return r
}

// finish takes the end reading, lists the slots, stops the workload, checks
// the ledger on the final owner, judges the checks and writes the outputs;
// it returns the first of runErr and the errors of the steps after it.
func (s *soakRun) finish(ctx context.Context, runErr error) error {
	errs := []error{runErr}
	if runErr == nil {
		s.res.End = s.reading(ctx, "end")
		slots, dirs, err := s.bed.Slots(ctx)
		errs = append(errs, err)
		s.res.Slots, s.res.WALDirs, s.res.SlotsRead = slots, dirs, err == nil
	}
	stoppedAt := time.Since(s.work.start)
	if werr := s.stopWorkload(); werr != nil && !errors.Is(werr, context.Canceled) {
		errs = append(errs, fmt.Errorf("soak: workload: %w", werr))
	}
	secs := s.work.seconds()
	_, _, werrs := dtWorkloadAround(secs, 0, stoppedAt.Truncate(time.Second))
	s.mu.Lock()
	samples := slices.Clone(s.samples)
	s.mu.Unlock()
	s.res.WorkloadErrors = int64(werrs)

	vctx, vcancel := context.WithTimeout(ctx, 5*time.Minute)
	defer vcancel()
	chk, verr := soakVerify(vctx, s.tn.DSN, s.work.run.Ledger)
	errs = append(errs, verr)
	if verr == nil {
		s.res.WritesAcknowledged, s.res.WritesMissing, s.res.WritesDuplicated = chk.Acknowledged, chk.Missing, chk.Duplicated
		s.res.LedgerChecked = true
	}
	s.res.summarise(s.opt, samples)
	for _, c := range s.res.Checks {
		s.say("%s", c.Line())
	}
	if s.opt.Out != "" {
		errs = append(errs, writeSoakOutputs(s.opt, s.bed.Describe(), s.start, s.res, samples, s.work.start, secs))
	}
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// soakVerify checks the ledger through the proxy, on the final owner.
func soakVerify(ctx context.Context, dsn string, l *workload.Ledger) (workload.Check, error) {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return workload.Check{}, fmt.Errorf("soak: verify: %w", err)
	}
	defer conn.Close(context.Background())
	return workload.Verify(ctx, conn, l)
}
