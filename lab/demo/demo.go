// Package demo runs sluice end to end on one machine and shows what it is
// for: a live migration whose speed the source server's control loop sets,
// every second, from the latency the proxy measures, so that the clients'
// latency rides the operator's setpoint while the tenant moves.
//
// Two "servers" (lab/testbed: each a `sluice agent` subprocess in a cgroup v1
// group that the tenant postmasters it starts inherit, their data in memory
// when the machine has room: memRoot) sit behind a proxy. The source's CPU is
// limited by a CFS quota, so the copy and the tenant's transactions compete
// for it: at full speed the copy would push the clients' latency far above
// the setpoint, and the setpoint binds. The demo loads a tenant, runs
// Slacker's YCSB workload through the proxy, measures the baseline latency,
// migrates the tenant live with the product's default control profile
// (control.DefaultProfile; the demo sets no gains and steers by nothing but
// the proxy's windows, as `sluice migrate` does), checks every acknowledged
// write on the new owner row by row, and writes summary.json (Result),
// loop.csv, demo.png and the servers' logs.
//
// It is what `make demo` (`sluice demo`) shows a newcomer first. It needs
// root and cgroup v1 (CheckHost).
package demo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sluicedb/sluice/internal/units"
	"github.com/sluicedb/sluice/lab/cgroup"
	"github.com/sluicedb/sluice/lab/testbed"
	"github.com/sluicedb/sluice/lab/workload"
)

// Defaults of Options. On a 2-core machine they put the source near its
// knee: the workload alone uses about half of the source's quota and the
// copy at the profile's top speed would need more than the rest, so at the
// setpoint the copy runs at a third of the top speed or so, for about a
// minute, and the whole demo takes under two and a half minutes
// (docs/results.md, "demo").
const (
	DefaultSize       = 1.8e9 // tenant data, bytes
	DefaultCPUs       = 0.45  // the source server's CPU quota, cores
	DefaultTargetCPUs = 1.0   // the target server's, cores: the copy is bound by the source
	DefaultTxRate     = 150   // workload arrivals/s
	DefaultMPL        = 32    // workload connections: a free one for each arrival even in a stall of 200 ms
	DefaultBaseline   = 10 * time.Second
	// SetpointFactor × the baseline's calmest latency is the setpoint when
	// none is given (SetpointRule).
	SetpointFactor = 3.5
	// MinSetpointGap is the least the setpoint rule puts above the
	// baseline's calmest latency, so that a fast baseline still leaves the
	// loop room.
	MinSetpointGap = 4 * time.Millisecond
	// CalmWindow is the span over which the baseline's calmest latency is
	// the lowest mean: 5 s of the workload alone.
	CalmWindow = 5 * time.Second
)

// Options configure a demo run. Zero values take the defaults noted.
type Options struct {
	Out string // output directory; default "out/demo"
	// Binary is the sluice executable the servers run as `sluice agent`;
	// "" = this process's own executable.
	Binary     string
	Size       int64         // tenant data, bytes; default DefaultSize
	Setpoint   time.Duration // 0: SetpointRule of the measured baseline's calmest latency
	TxRate     float64       // workload arrivals/s; default DefaultTxRate
	MPL        int           // workload connections; default DefaultMPL
	MaxRate    float64       // the migration's top speed, bytes/s; 0 = the profile's
	Controller string        // pid (default) or fixed (at the top speed)
	CPUs       float64       // the source server's CPU quota, cores; default DefaultCPUs
	TargetCPUs float64       // the target server's, cores; default DefaultTargetCPUs; negative = none
	Baseline   time.Duration // baseline measurement; default DefaultBaseline
	Seed       uint64
	Progress   io.Writer // live progress lines; nil = none
}

// maxMPL is the most workload connections a tenant takes: its
// max_connections is PostgreSQL's default, 100, and the agents, the
// migration and the ledger check need a few of their own.
const maxMPL = 80

// Check reports the first bad option, before anything is started.
func (o Options) Check() error {
	_, err := o.withDefaults()
	return err
}

func (o Options) withDefaults() (Options, error) {
	if o.Out == "" {
		o.Out = filepath.Join("out", "demo")
	}
	if o.Size == 0 {
		o.Size = DefaultSize
	}
	if o.TxRate == 0 {
		o.TxRate = DefaultTxRate
	}
	if o.MPL == 0 {
		o.MPL = DefaultMPL
	}
	if o.Controller == "" {
		o.Controller = "pid"
	}
	if o.CPUs == 0 {
		o.CPUs = DefaultCPUs
	}
	if o.TargetCPUs == 0 {
		o.TargetCPUs = DefaultTargetCPUs
	}
	if o.Baseline == 0 {
		o.Baseline = DefaultBaseline
	}
	if o.Progress == nil {
		o.Progress = io.Discard
	}
	switch {
	case o.Size < 1e6:
		return o, fmt.Errorf("demo: size %d bytes is below 1 MB", o.Size)
	case o.Setpoint < 0:
		return o, fmt.Errorf("demo: setpoint %v must be positive", o.Setpoint)
	case !(o.TxRate > 0) || math.IsInf(o.TxRate, 0):
		return o, fmt.Errorf("demo: workload rate %v must be a positive number", o.TxRate)
	case o.MPL < 1 || o.MPL > maxMPL:
		return o, fmt.Errorf("demo: %d workload connections: want 1..%d", o.MPL, maxMPL)
	case o.MaxRate < 0 || math.IsNaN(o.MaxRate) || math.IsInf(o.MaxRate, 0):
		return o, fmt.Errorf("demo: max rate %v must be a positive number of bytes/s (0: the profile's)", o.MaxRate)
	case o.Controller != "pid" && o.Controller != "fixed":
		return o, fmt.Errorf("demo: controller %q: want pid or fixed", o.Controller)
	case o.CPUs < 0 || testbed.CheckCPUs(o.CPUs) != nil:
		return o, fmt.Errorf("demo: source CPU quota %v cores: want 0.01..64 (the demo needs the source limited)", o.CPUs)
	case o.TargetCPUs > 0 && testbed.CheckCPUs(o.TargetCPUs) != nil:
		return o, fmt.Errorf("demo: target CPU quota %v cores: want 0.01..64, or negative for none", o.TargetCPUs)
	case o.Baseline < time.Second:
		return o, fmt.Errorf("demo: baseline %v: want at least 1s", o.Baseline)
	}
	return o, nil
}

// SetpointRule is the setpoint the demo picks from the baseline's calmest
// latency (the lowest mean over any CalmWindow of it): SetpointFactor × it,
// and at least MinSetpointGap above it. The calmest stretch rather than the
// mean, so that a baseline a burst on the host (or the load's aftermath)
// inflates does not put the setpoint where the copy at full speed no longer
// reaches it.
func SetpointRule(calm time.Duration) time.Duration {
	return max(time.Duration(SetpointFactor*float64(calm)), calm+MinSetpointGap)
}

// CheckHost reports, in one line, why this host cannot run the demo: it
// limits the source server's CPU with a cgroup v1 quota, so it needs root
// and the cgroup v1 controllers lab/cgroup uses mounted under cgroup.Root.
// The demo never runs unlimited instead.
func CheckHost() error {
	if os.Geteuid() != 0 {
		return errors.New("demo: needs root: it limits the source server's CPU with a cgroup v1 quota")
	}
	for _, c := range cgroup.Controllers {
		p := filepath.Join(cgroup.Root, c, "cgroup.procs")
		if _, err := os.Stat(p); err != nil {
			return fmt.Errorf("demo: needs cgroup v1 (the %s controller is not mounted at %s): it limits the source server's CPU with a CFS quota", c, filepath.Dir(p))
		}
	}
	if _, err := os.Stat(filepath.Join(cgroup.Root, "cpu", "cpu.cfs_quota_us")); err != nil {
		return fmt.Errorf("demo: needs cgroup v1's CPU quota (no cpu.cfs_quota_us under %s)", filepath.Join(cgroup.Root, "cpu"))
	}
	return nil
}

// Run performs the demo. It stops everything it started before returning.
func Run(ctx context.Context, opt Options) (Result, error) {
	opt, err := opt.withDefaults()
	if err != nil {
		return Result{}, err
	}
	if err := CheckHost(); err != nil {
		return Result{}, err
	}
	if err := os.MkdirAll(opt.Out, 0o755); err != nil {
		return Result{}, fmt.Errorf("demo: %w", err)
	}
	began := time.Now()
	say := func(format string, args ...any) {
		fmt.Fprintf(opt.Progress, "[%4.0fs] %s\n", time.Since(began).Seconds(), fmt.Sprintf(format, args...))
	}

	root, err := memRoot(opt.Size)
	if err != nil {
		return Result{}, err
	}
	if root != "" {
		defer os.RemoveAll(root)
		say("the servers' data directories are in memory (%s)", root)
	} else {
		say("%s has no room for the servers' data: they share this machine's disk, whose writes disturb the latency", shmDir)
	}
	bed, err := testbed.Start(ctx, testbed.Options{
		Root: root, Binary: opt.Binary, CPUs: opt.CPUs, MemoryMB: memoryMB(opt.Size),
		CPUShares: cpuShares, LogDir: filepath.Join(opt.Out, "logs"), Progress: say,
	})
	if err != nil {
		return Result{}, fmt.Errorf("demo: %w", err)
	}
	defer bed.Close()
	if err := bed.SetCPUs(1, opt.TargetCPUs); err != nil {
		return Result{}, fmt.Errorf("demo: %w", err)
	}
	say("source %s: %.2g CPU; target %s: %s", bed.Servers[0].Name, opt.CPUs, bed.Servers[1].Name, cpusText(opt.TargetCPUs))
	say("loading %s of YCSB usertable through the proxy (limits lifted meanwhile)", units.FormatBytes(float64(opt.Size)))
	tn, err := bed.CreateTenant(ctx, 0, "demo", opt.Size, opt.Seed+1)
	if err != nil {
		return Result{}, fmt.Errorf("demo: %w", err)
	}

	// One workload runs from before the baseline to after the handover; the
	// ledger proves nothing it wrote is lost.
	w, err := startWork(ctx, tn, opt)
	if err != nil {
		return Result{}, err
	}
	defer w.stop()
	say("running the workload: %.0f transactions/s, %d connections; warming up, then %v of baseline", opt.TxRate, opt.MPL, opt.Baseline)
	warm, bmean, calm, err := w.baseline(ctx, opt.Baseline)
	if err != nil {
		return Result{}, err
	}
	sp := opt.Setpoint
	if sp == 0 {
		sp = SetpointRule(time.Duration(calm * float64(time.Millisecond)))
	}
	res := Result{SourceCPUs: opt.CPUs, SetpointMs: ms(sp), BaselineMeanLatencyMs: bmean, BaselineCalmLatencyMs: calm}
	say("baseline mean latency %.1f ms, %.1f ms over its calmest %v; setpoint %.1f ms", bmean, calm, CalmWindow, res.SetpointMs)

	mr, err := migrate(ctx, bed, tn, opt, sp, w.Runner, &w.secs, say)
	if err != nil {
		return res, err
	}
	time.Sleep(2 * time.Second) // some traffic on the new owner
	if err := w.stop(); err != nil {
		return res, err
	}
	res.measure(mr, w.Runner)

	// Row by row on the new owner, through the proxy (its route followed the handover).
	vconn, err := pgx.Connect(ctx, tn.DSN)
	if err != nil {
		return res, fmt.Errorf("demo: verify: %w", err)
	}
	chk, err := workload.Verify(ctx, vconn, w.Ledger)
	vconn.Close(context.Background())
	if err != nil {
		return res, err
	}
	res.WritesAcknowledged, res.WritesMissing, res.WritesDuplicated = chk.Acknowledged, chk.Missing, chk.Duplicated
	if err := writeOutputs(opt.Out, res, w.secs.all(), mr, [2]time.Duration{warm, warm + opt.Baseline}); err != nil {
		return res, err
	}
	if !chk.OK() {
		return res, fmt.Errorf("demo: %d acknowledged writes missing, %d duplicated", chk.Missing, chk.Duplicated)
	}
	return res, nil
}

// Warm-up: the workload runs at least minWarmUp before its baseline is
// measured, and until two consecutive warmWindow means differ by less than
// warmTolerance of the smaller (the new connections' backends and the
// tenant's caches settled after the load, any backlog drained), or
// maxWarmUp.
const (
	minWarmUp     = 5 * time.Second
	maxWarmUp     = 30 * time.Second
	warmWindow    = 3 * time.Second
	warmTolerance = 0.5
)

// work is the demo's workload, running until stop.
type work struct {
	*workload.Runner
	secs   seconds
	cancel context.CancelFunc
	done   chan struct{} // closed when the workload has stopped; err is then set
	err    error
}

// startWork starts opt's workload on tn, with uniform keys as the
// benchmarks' workload: zipfian's hot rows make concurrent transactions wait
// on each other's row locks (and deadlock), stalls no copy speed causes.
func startWork(ctx context.Context, tn testbed.Tenant, opt Options) (*work, error) {
	run, err := workload.NewRunner(workload.Config{DSN: tn.DSN, Rate: opt.TxRate, MPL: opt.MPL, Records: tn.Rows,
		Distribution: workload.Uniform, Duration: 30 * time.Minute, Seed: opt.Seed + 2})
	if err != nil {
		return nil, fmt.Errorf("demo: %w", err)
	}
	w := &work{Runner: run, done: make(chan struct{})}
	ctx, w.cancel = context.WithCancel(ctx)
	go func() {
		_, w.err = run.Run(ctx, w.secs.add)
		close(w.done)
	}()
	return w, nil
}

// stop stops the workload and waits for it; safe to call more than once.
func (w *work) stop() error {
	w.cancel()
	<-w.done
	if w.err != nil && !errors.Is(w.err, context.Canceled) {
		return fmt.Errorf("demo: workload: %w", w.err)
	}
	return nil
}

// baseline waits out the workload's warm-up, then d, and returns when the
// baseline began on the workload's clock, its mean latency and its calmest
// (the lowest mean over any CalmWindow of it, or the mean when d is
// shorter), ms.
func (w *work) baseline(ctx context.Context, d time.Duration) (from time.Duration, mean, calm float64, err error) {
	t := minWarmUp
	for ; t < maxWarmUp; t += time.Second {
		if err := w.waitFor(ctx, t); err != nil {
			return 0, 0, 0, err
		}
		a, _ := clientMeans(w.Transactions(t-2*warmWindow, t-warmWindow))
		b, _ := clientMeans(w.Transactions(t-warmWindow, t))
		if math.Abs(a-b) < warmTolerance*math.Min(a, b) {
			break
		}
	}
	if err := w.waitFor(ctx, t+d); err != nil {
		return 0, 0, 0, err
	}
	mean, _ = clientMeans(w.Transactions(t, t+d))
	if math.IsNaN(mean) {
		return 0, 0, 0, errors.New("demo: no transaction completed during the baseline")
	}
	calm = mean
	for s := t; s+CalmWindow <= t+d; s += time.Second {
		if m, _ := clientMeans(w.Transactions(s, s+CalmWindow)); m < calm {
			calm = m
		}
	}
	return t, mean, calm, nil
}

// waitFor returns once the workload's clock reads at least d, or with an
// error when ctx ends or the workload stops.
func (w *work) waitFor(ctx context.Context, d time.Duration) error {
	for {
		if t0 := w.Started(); !t0.IsZero() && time.Since(t0) >= d {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-w.done:
			return fmt.Errorf("demo: the workload stopped: %v", w.err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// seconds collects the workload's per-second figures as they arrive; safe
// for concurrent use.
type seconds struct {
	mu sync.Mutex
	s  []workload.Second
}

func (s *seconds) add(x workload.Second) { s.mu.Lock(); s.s = append(s.s, x); s.mu.Unlock() }

func (s *seconds) all() []workload.Second {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]workload.Second(nil), s.s...)
}

// last is the mean latency of the last second with transactions; NaN if none.
func (s *seconds) last() float64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := len(s.s) - 1; i >= 0; i-- {
		if s.s[i].Count > 0 {
			return s.s[i].MeanMs
		}
	}
	return math.NaN()
}
