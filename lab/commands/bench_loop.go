package commands

import (
	"context"
	"fmt"
	"math"
	"os"
	"os/signal"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	agentclient "github.com/sluicedb/sluice/agent/client"
	"github.com/sluicedb/sluice/control"
	"github.com/sluicedb/sluice/internal/cli"
	"github.com/sluicedb/sluice/internal/units"
	"github.com/sluicedb/sluice/lab/experiment"
	"github.com/sluicedb/sluice/lab/testbed"
	"github.com/sluicedb/sluice/lab/workload"
	"github.com/sluicedb/sluice/snapshot"
)

// The closed-loop benchmarks (Slacker's experiments) on cgroup-limited
// servers: slack-sweep, step40, multitenant. Their shared flags describe the
// servers, the tenant and the workload.

type loopFlags struct {
	out, size, maxRate, keys string
	errorForm                string
	startGrowth              float64
	rearmGrowth              float64
	startBackoff             int
	idleFloor                float64
	errorFloor               float64
	headroom                 float64
	meanHorizon              int
	cpus                     float64
	targetCPUs               float64
	calm                     float64
	cpuShares                int64
	memoryMB                 int
	readMBps                 float64
	readIOPS                 int64
	hostReclaim              bool
	tps                      float64
	mpl                      int
	releaseLimit             int
	kp, ki, kd               float64
	seed                     uint64
	settings                 []string
	reserve                  string
	checkpoint               string
	walRelay                 string
	latencySource            string
	json                     bool
}

func (f *loopFlags) register(fs *pflag.FlagSet, scenario, size string, memoryMB, mpl int) {
	fs.StringVar(&f.out, "out", filepath.Join("out", "bench", scenario), "output directory (CSV, summary JSON, Markdown report, PNG plots)")
	fs.StringVar(&f.size, "size", size, "tenant data size (Slacker: 1 GB; multitenant: all tenants together)")
	fs.Float64Var(&f.cpus, "cpus", 0.25, "each server's CPU quota, cores (cgroup; shared by its agent and tenants)")
	fs.Float64Var(&f.targetCPUs, "target-cpus", 0, "the CPU quota, cores, of the server each migration moves the tenant to, for that trial (Slacker's target: an idle server of its own, so the copy is bound by the source's slack, not the target's CPU); the source keeps --cpus; 0 = --cpus for every server, negative = no cap")
	fs.Float64Var(&f.calm, "calm", experiment.DefaultCalm, "hold each migration's start until the workload's last 5 s average at most this multiple of the baseline's median 3 s window (at most 90 s), so no trial starts in the previous one's aftermath (slack-sweep and step40; multitenant has no such hold); 0 = no hold")
	fs.Int64Var(&f.cpuShares, "cpu-shares", 32768, "cpu.shares of the servers' groups and of the bench process (workload, proxy) against other processes on the host (1024 each): less noise from a busy neighbour; 0 = none")
	fs.IntVar(&f.memoryMB, "memory", memoryMB, "each server's memory cap, MiB, page cache included (cgroup); below the tenant's size its reads go to disk")
	fs.Float64Var(&f.readMBps, "read-mbps", 0, "each server's read bandwidth on the data disk, MB/s (cgroup blkio); 0 = none")
	fs.Int64Var(&f.readIOPS, "read-iops", 0, "each server's read operations per second on the data disk; 0 = none")
	fs.BoolVar(&f.hostReclaim, "host-reclaim", false, "leave the host's DAMON pageout free to evict the servers' page cache (default: their memory cgroups are excluded from it while the bench runs)")
	fs.Float64Var(&f.tps, "tps", 100, "workload arrivals per second (Poisson)")
	fs.IntVar(&f.mpl, "mpl", mpl, "workload connections (multiprogramming level)")
	fs.IntVar(&f.releaseLimit, "release-limit", defaultReleaseLimit, "the proxy's release ramp: for a second after a handover's release, at most this many of the tenant's transactions in flight on the freshly promoted server (0 = none)")
	fs.StringVar(&f.keys, "keys", "uniform", "workload key distribution: uniform, zipfian or hotspot")
	fs.StringVar(&f.maxRate, "max-rate", "80MB/s", "the controller's top migration speed")
	fs.Float64Var(&f.kp, "kp", experiment.DefaultKp, "PID proportional gain (fraction of max rate per unit change of error normalised by the setpoint)")
	fs.Float64Var(&f.ki, "ki", experiment.DefaultKi, "PID integral gain")
	fs.Float64Var(&f.kd, "kd", 0, "PID derivative gain")
	fs.StringVar(&f.errorForm, "error-form", experiment.DefaultErrorForm, "PID error form: linear (Slacker) or hybrid (SP/PV−1 below the setpoint)")
	fs.Float64Var(&f.errorFloor, "error-floor", experiment.DefaultErrorFloor, "PID error floor: a latency window more than (1 + this)× the setpoint slows the copy as one at that level would, so a stall no speed causes does not cut it to a crawl (0 = none, Slacker)")
	fs.Float64Var(&f.headroom, "headroom", experiment.DefaultHeadroom, "PID: while the copy moves less than it is allowed (bound elsewhere: the target's CPU, a disk), allow at most (1 + this)× what it moved, so a cut bites at once (0 = off, Slacker)")
	fs.Float64Var(&f.startGrowth, "start-growth", experiment.DefaultStartGrowth, "PID slow start: rate × this per step until the latency is half-way to the setpoint (1 = none, Slacker)")
	fs.Float64Var(&f.rearmGrowth, "rearm-growth", experiment.DefaultRearmGrowth, "PID after a pause: rate × this per step back to the rate that held the setpoint (1 = the slow start's growth, to half the peak)")
	fs.IntVar(&f.startBackoff, "start-backoff", experiment.DefaultStartBackoff, "PID: when the slow start ends, take back this many steps of its growth (the latency that ends it is a few steps old; 0 = none)")
	fs.Float64Var(&f.idleFloor, "idle-floor", experiment.DefaultIdleFloor, "PID with a mean horizon: repay latency owed no lower than this fraction of the way from the idle latency (measured before the copy loads the server) to the setpoint, where the copy would crawl (0 = none: down to half the setpoint)")
	fs.IntVar(&f.meanHorizon, "mean-horizon", experiment.DefaultMeanHorizon, "PID: hold the migration's mean latency (not each window's) at the setpoint, working off a shortfall or excess over this many steps, or, once the copy's time left is known, over the rest of the run (0 = off, Slacker)")
	fs.StringVar(&f.reserve, "handover-reserve", "auto", "PID with a mean horizon: the handover's expected cost to the clients, ms·s, spent under the setpoint beforehand; auto = the median of the proxy's last measured handovers of the tenant, 0 = none")
	fs.Uint64Var(&f.seed, "seed", 1, "workload seed")
	fs.StringVar(&f.walRelay, "wal-relay", "target", "where each migration's standby WAL stream is relayed and paced: target (the target agent) or source (the source agent)")
	fs.StringVar(&f.checkpoint, "checkpoint", "fast", "how each migration's snapshot takes its checkpoint: fast (at once), spread (the server's own pacing, minutes by default), or a pace such as 3s (its writes spread over about that long, up to 27s)")
	fs.StringArrayVar(&f.settings, "tenant-setting", nil, "a postgresql.conf parameter for every tenant, name=value (repeatable; over the bed's own)")
	fs.StringVar(&f.latencySource, "latency-source", "client", "what the PID steers by: client (the workload's own window next to the proxy's: queue wait + execution, Slacker's measure and the one the results report) or proxy (the proxy's windows only: execution)")
	fs.BoolVar(&f.json, "json", false, "print the summary as JSON")
}

// defaultReleaseLimit is the bed's proxy's release ramp (proxy.Config's
// ReleaseLimit). 1: on the bed's quarter-core servers, the transactions in
// the second after a handover cost the clients about half as much admitted
// one at a time as all at once. Measured 2026-11-25 (docs/benchmarks.md,
// nineteenth round): `slack-sweep --size 512MB --tps 150 --fixed-rates
// 40MB/s,60MB/s,80MB/s --setpoints 3x,3.5x`, five handovers a run; the
// transactions that arrived in the second after the hold lost 2.3, 3.1 and
// 2.4 s (mean per handover of the sum over them of their latency above the
// median before) with limit 1, 4.6–6.4 s in four runs with none, 3.1 and
// 5.6 s with limit 2; the proxy's measured cost 8.3 ms·s (mean of fifteen
// handovers) against 16.7 with none.
const defaultReleaseLimit = 1

// parse checks the flags and returns the testbed options and the
// experiment's common options. name prefixes errors.
func (f *loopFlags) parse(name string, cmd *cobra.Command) (testbed.Options, experiment.Common, error) {
	var c experiment.Common
	size, err := units.ParseBytes(f.size)
	if err != nil {
		return testbed.Options{}, c, cli.Usagef("bench %s: --size: %v", name, err)
	}
	maxRate, err := units.ParseRate(f.maxRate)
	if err != nil || !(maxRate > 0) || math.IsInf(maxRate, 0) {
		return testbed.Options{}, c, cli.Usagef("bench %s: --max-rate %q: want a positive finite rate such as 30MB/s", name, f.maxRate)
	}
	dist := workload.Distribution(f.keys)
	if _, err := workload.NewKeyChooser(dist, 10); err != nil {
		return testbed.Options{}, c, cli.Usagef("bench %s: --keys %q: want uniform, zipfian or hotspot", name, f.keys)
	}
	switch {
	case size < 1e6:
		return testbed.Options{}, c, cli.Usagef("bench %s: --size %s is below 1 MB", name, f.size)
	case !(f.tps > 0) || math.IsInf(f.tps, 0):
		return testbed.Options{}, c, cli.Usagef("bench %s: --tps must be a positive number", name)
	case f.mpl < 1 || f.mpl > 1000:
		return testbed.Options{}, c, cli.Usagef("bench %s: --mpl must be in 1..1000", name)
	case f.releaseLimit < 0:
		return testbed.Options{}, c, cli.Usagef("bench %s: --release-limit %d: want 0 (none) or a number of transactions", name, f.releaseLimit)
	case f.kp < 0 || f.ki <= 0 || f.kd < 0 || math.IsNaN(f.kp+f.ki+f.kd):
		return testbed.Options{}, c, cli.Usagef("bench %s: PID gains must be non-negative and --ki positive", name)
	case !(f.startGrowth >= 1 && f.startGrowth <= 4):
		return testbed.Options{}, c, cli.Usagef("bench %s: --start-growth %v: want 1 (none) to 4", name, f.startGrowth)
	case !(f.rearmGrowth >= 1 && f.rearmGrowth <= 4):
		return testbed.Options{}, c, cli.Usagef("bench %s: --rearm-growth %v: want 1 (the slow start's) to 4", name, f.rearmGrowth)
	case f.startBackoff < 0 || f.startBackoff > control.MaxStartBackoff:
		return testbed.Options{}, c, cli.Usagef("bench %s: --start-backoff %d: want 0 (none) to %d steps", name, f.startBackoff, control.MaxStartBackoff)
	case !(f.idleFloor >= 0 && f.idleFloor < 1):
		return testbed.Options{}, c, cli.Usagef("bench %s: --idle-floor %v: want a fraction in [0, 1) (0 = none)", name, f.idleFloor)
	case f.meanHorizon < 0 || f.meanHorizon > 3600:
		return testbed.Options{}, c, cli.Usagef("bench %s: --mean-horizon %d: want 0 (off) to 3600 steps", name, f.meanHorizon)
	case f.errorForm != "linear" && f.errorForm != "hybrid":
		return testbed.Options{}, c, cli.Usagef("bench %s: --error-form %q: want linear or hybrid", name, f.errorForm)
	case !(f.headroom >= 0) || math.IsInf(f.headroom, 0):
		return testbed.Options{}, c, cli.Usagef("bench %s: --headroom %v: want a fraction >= 0 (0 = off)", name, f.headroom)
	case !(f.errorFloor >= 0) || math.IsInf(f.errorFloor, 0):
		return testbed.Options{}, c, cli.Usagef("bench %s: --error-floor %v: want a fraction of the setpoint >= 0 (0 = none)", name, f.errorFloor)
	case f.cpus == 0 || f.memoryMB == 0:
		return testbed.Options{}, c, cli.Usagef("bench %s: --cpus and --memory must be positive (negative: no cap)", name)
	case f.targetCPUs != 0 && f.cpus < 0:
		return testbed.Options{}, c, cli.Usagef("bench %s: --target-cpus needs servers with a CPU cap (--cpus > 0)", name)
	case !(f.calm == 0 || f.calm >= 1) || math.IsInf(f.calm, 0):
		return testbed.Options{}, c, cli.Usagef("bench %s: --calm %v: want 0 (no hold) or a multiple >= 1 of the baseline's median window", name, f.calm)
	case f.latencySource != "proxy" && f.latencySource != "client":
		return testbed.Options{}, c, cli.Usagef("bench %s: --latency-source %q: want proxy or client", name, f.latencySource)
	case f.targetCPUs != 0 && testbed.CheckCPUs(f.targetCPUs) != nil:
		return testbed.Options{}, c, cli.Usagef("bench %s: --target-cpus %v: want 0.01..64 cores, 0 (as --cpus) or negative (no cap)", name, f.targetCPUs)
	}
	var reserve *float64
	if f.reserve != "auto" {
		v, err := strconv.ParseFloat(f.reserve, 64)
		if err != nil || !(v >= 0) || math.IsInf(v, 0) {
			return testbed.Options{}, c, cli.Usagef("bench %s: --handover-reserve %q: want auto or a number of ms·s >= 0", name, f.reserve)
		}
		reserve = &v
	}
	if f.walRelay != agentclient.WALRelayTarget && f.walRelay != agentclient.WALRelaySource {
		return testbed.Options{}, c, cli.Usagef("bench %s: --wal-relay %q: want target or source", name, f.walRelay)
	}
	if _, _, err := snapshot.ParseCheckpoint(f.checkpoint); err != nil {
		return testbed.Options{}, c, cli.Usagef("bench %s: --checkpoint: %v", name, err)
	}
	bo := testbed.Options{CPUs: f.cpus, CPUShares: f.cpuShares, MemoryMB: f.memoryMB, ReadMBps: f.readMBps, ReadIOPS: f.readIOPS, HostReclaim: f.hostReclaim, ReleaseLimit: f.releaseLimit}
	for _, kv := range f.settings {
		k, v, ok := strings.Cut(kv, "=")
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		if !ok || !settingName.MatchString(k) || v == "" {
			return bo, c, cli.Usagef("bench %s: --tenant-setting %q: want name=value, e.g. wal_init_zero=off", name, kv)
		}
		if bo.Settings == nil {
			bo.Settings = map[string]string{}
		}
		bo.Settings[k] = v
	}
	if err := bo.Check(); err != nil {
		return bo, c, cli.Usagef("bench %s: %v", name, err)
	}
	kp, ki, kd := f.kp, f.ki, f.kd
	backoff, idle := f.startBackoff, f.idleFloor
	if backoff == 0 {
		backoff = -1 // Common's zero is the default
	}
	if idle == 0 {
		idle = -1
	}
	c = experiment.Common{
		Out: f.out, Command: "sluice " + strings.Join(os.Args[1:], " "), Size: size,
		Workload: workload.Config{Rate: f.tps, MPL: f.mpl, Distribution: dist},
		MaxRate:  maxRate, Kp: &kp, Ki: &ki, Kd: &kd, ErrorForm: f.errorForm, StartGrowth: f.startGrowth, RearmGrowth: f.rearmGrowth, StartBackoff: backoff, IdleFloor: idle, ErrorFloor: f.errorFloor, Headroom: f.headroom, MeanHorizon: f.meanHorizon, HandoverReserve: reserve, Checkpoint: f.checkpoint, WALRelay: f.walRelay, Seed: f.seed,
		TargetCPUs: f.targetCPUs, Calm: f.calm, ClientLatency: f.latencySource == "client",
	}
	// Progress goes to stderr, with --json too (stdout carries the JSON).
	c.Progress = func(format string, args ...any) {
		fmt.Fprintf(cmd.ErrOrStderr(), "%s "+format+"\n", append([]any{time.Now().Format("15:04:05")}, args...)...)
	}
	bo.Progress = c.Progress
	return bo, c, nil
}

// settingName is what a PostgreSQL parameter name looks like (custom ones
// have a dot).
var settingName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)?$`)

// runOnBed starts the testbed, runs fn, and stops the bed even on ^C. It
// prints fn's result as JSON with --json, else the Markdown report.
func runOnBed(cmd *cobra.Command, f *loopFlags, bo testbed.Options, fn func(ctx context.Context, bed *testbed.Bed) (any, error)) error {
	out := f.out
	if os.Geteuid() != 0 {
		return fmt.Errorf("bench: needs root (cgroup v1 groups for the servers)")
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	bo.LogDir = filepath.Join(out, "agents") // the agents' logs outlive the bed
	bed, err := testbed.Start(ctx, bo)
	if err != nil {
		return err
	}
	defer bed.Close()
	res, err := fn(ctx, bed)
	if err != nil {
		return err
	}
	if f.json {
		return cli.WriteJSON(cmd.OutOrStdout(), res)
	}
	rep, err := os.ReadFile(filepath.Join(out, experiment.ReportFile))
	if err != nil {
		return err
	}
	_, err = cmd.OutOrStdout().Write(rep)
	return err
}

// parseList parses a comma-separated list with parse.
func parseList(s string, parse func(string) (float64, error)) ([]float64, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	var out []float64
	for _, p := range strings.Split(s, ",") {
		v, err := parse(strings.TrimSpace(p))
		if err != nil {
			return nil, err
		}
		if !(v > 0) || math.IsInf(v, 0) {
			return nil, fmt.Errorf("%q must be positive and finite", p)
		}
		out = append(out, v)
	}
	return out, nil
}

// parseNonNegList parses a comma-separated list of finite numbers >= 0
// (parseList's are > 0); want says what each should be, for the error.
func parseNonNegList(s, want string) ([]float64, error) {
	var out []float64
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p == "" {
			continue
		}
		v, err := strconv.ParseFloat(p, 64)
		if err != nil || !(v >= 0) || math.IsInf(v, 0) {
			return nil, fmt.Errorf("%q: want %s", p, want)
		}
		out = append(out, v)
	}
	return out, nil
}

// parseMs parses "40ms", "0.04s" or "40" (ms) into milliseconds.
func parseMs(s string) (float64, error) {
	if v, err := strconv.ParseFloat(s, 64); err == nil {
		return v, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("%q is not a duration", s)
	}
	return float64(d) / float64(time.Millisecond), nil
}

// parseSwing parses --swing (a percentage in (0, 100)) with its period; ""
// is no swing.
func parseSwing(amp string, period time.Duration) (*experiment.Swing, error) {
	if amp == "" {
		return nil, nil
	}
	v, err := strconv.ParseFloat(strings.TrimSuffix(amp, "%"), 64)
	if err != nil || !strings.HasSuffix(amp, "%") || !(v > 0 && v < 100) {
		return nil, fmt.Errorf("--swing %q: want a percentage of the arrival rate above 0 and under 100 (40%%)", amp)
	}
	w := &experiment.Swing{Period: period, Amplitude: v / 100}
	if period < 2*time.Second {
		return nil, fmt.Errorf("--swing-period %v: want at least 2s (the control loop steps once a second)", period)
	}
	return w, nil
}

// parseFactor parses a multiple of the baseline such as "2.5x" (> 1: a
// setpoint at or under the undisturbed latency cannot be held).
func parseFactor(s string) (float64, error) {
	v, err := strconv.ParseFloat(strings.TrimSuffix(s, "x"), 64)
	if err != nil || !strings.HasSuffix(s, "x") || !(v > 1) || math.IsInf(v, 0) {
		return 0, fmt.Errorf("%q: want every setpoint a duration (40ms) or every one a multiple of the baseline above 1 (2.5x)", s)
	}
	return v, nil
}

func init() {
	var f loopFlags
	var rates, setpoints, compare, compareKi, compareReserves, compareFloors, compareHeadroom string
	var compareSource, compareRelay, paired bool
	var compareGrowth, compareRearm string
	var rounds int
	var swing string
	var swingPeriod time.Duration
	var steal stealFlags
	cmd := &cobra.Command{
		Use:   "slack-sweep [--out DIR] [--json]",
		Short: "Slacker Fig. 11: fixed rates vs PID setpoints, latency and migration time",
		Long: `Starts two cgroup-limited servers (agent + tenant postmasters in one cgroup: CPU
quota, memory cap with the page cache, read bandwidth cap), loads a tenant
(Slacker's YCSB usertable, 1 GB by default), measures the workload's baseline,
then migrates the tenant back and forth under the workload: once per fixed rate
(--fixed-rates) and once per PID setpoint (--setpoints: durations, or multiples
of the baseline mean latency such as 2.5x; default 3x,4x,5x,6x). Every
migration's acknowledged writes are checked row by row. Writes series.csv,
summary.json, report.md and PNG plots to --out.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			bo, c, err := f.parse("slack-sweep", cmd)
			if err != nil {
				return err
			}
			o := experiment.SweepOptions{Common: c}
			if o.FixedRates, err = parseList(rates, units.ParseRate); err != nil {
				return cli.Usagef("bench slack-sweep: --fixed-rates: %v", err)
			}
			if strings.Contains(setpoints, "x") {
				o.SetpointFactors, err = parseList(setpoints, parseFactor)
			} else {
				o.Setpoints, err = parseList(setpoints, parseMs)
			}
			if err != nil {
				return cli.Usagef("bench slack-sweep: --setpoints: %v", err)
			}
			for _, s := range strings.Split(compare, ",") {
				if s = strings.TrimSpace(s); s == "" {
					continue
				}
				h, err := strconv.Atoi(s)
				if err != nil || h < 0 || h > 3600 {
					return cli.Usagef("bench slack-sweep: --compare-mean-horizons: %q: want 0 (off) to 3600 steps", s)
				}
				o.CompareHorizons = append(o.CompareHorizons, h)
			}
			gain := func(s string) (float64, error) {
				v, err := strconv.ParseFloat(s, 64)
				if err == nil && v > 1 {
					err = fmt.Errorf("%q: want an integral gain in (0, 1]", s)
				}
				return v, err
			}
			if o.CompareKi, err = parseList(compareKi, gain); err != nil {
				return cli.Usagef("bench slack-sweep: --compare-ki: %v", err)
			}
			if o.CompareReserves, err = parseNonNegList(compareReserves, "a reserve of ms·s >= 0"); err != nil {
				return cli.Usagef("bench slack-sweep: --compare-handover-reserves: %v", err)
			}
			if o.CompareErrorFloors, err = parseNonNegList(compareFloors, "an error floor >= 0 (a fraction of the setpoint; 0 = none)"); err != nil {
				return cli.Usagef("bench slack-sweep: --compare-error-floors: %v", err)
			}
			if o.CompareHeadroom, err = parseNonNegList(compareHeadroom, "a headroom >= 0 (a fraction of what the copy moved; 0 = off)"); err != nil {
				return cli.Usagef("bench slack-sweep: --compare-headroom: %v", err)
			}
			growth := func(s string) (float64, error) {
				v, err := strconv.ParseFloat(s, 64)
				if err == nil && !(v >= 1 && v <= 4) {
					err = fmt.Errorf("%q: want a growth per step from 1 (none) to 4", s)
				}
				return v, err
			}
			if o.CompareStartGrowth, err = parseList(compareGrowth, growth); err != nil {
				return cli.Usagef("bench slack-sweep: --compare-start-growth: %v", err)
			}
			if o.CompareRearmGrowth, err = parseList(compareRearm, growth); err != nil {
				return cli.Usagef("bench slack-sweep: --compare-rearm-growth: %v", err)
			}
			o.CompareLatencySource = compareSource
			o.CompareWALRelay = compareRelay
			o.Paired = paired
			if rounds < 1 || rounds > experiment.MaxRounds {
				return cli.Usagef("bench slack-sweep: --rounds %d: want 1 to %d", rounds, experiment.MaxRounds)
			}
			o.Rounds = rounds
			if o.Swing, err = parseSwing(swing, swingPeriod); err != nil {
				return cli.Usagef("bench slack-sweep: %v", err)
			}
			if o.StealGuard, err = steal.parse("slack-sweep"); err != nil {
				return err
			}
			return runOnBed(cmd, &f, bo, func(ctx context.Context, bed *testbed.Bed) (any, error) {
				return experiment.SlackSweep(ctx, bed, o)
			})
		},
	}
	f.register(cmd.Flags(), "slack-sweep", "1GB", 3072, experiment.SweepMPL)
	cmd.Flags().StringVar(&rates, "fixed-rates", "10MB/s,20MB/s,30MB/s,40MB/s", "fixed migration rates, comma-separated")
	cmd.Flags().StringVar(&compareKi, "compare-ki", "", "run every PID setpoint again with each of these integral gains (per step, comma-separated), in the same run")
	cmd.Flags().StringVar(&compareReserves, "compare-handover-reserves", "", "run every PID setpoint again with each of these handover reserves (ms·s, comma-separated; 0 = none), in the same run")
	cmd.Flags().StringVar(&compareFloors, "compare-error-floors", "", "run every PID setpoint again with each of these error floors (fractions of the setpoint, comma-separated; 0 = none), in the same run")
	cmd.Flags().StringVar(&compareRearm, "compare-rearm-growth", "", "run every PID setpoint again with each of these rearm growths (per step, comma-separated; 1 = the slow start's, to half the peak), in the same run")
	cmd.Flags().StringVar(&compareGrowth, "compare-start-growth", "", "run every PID setpoint again with each of these slow-start growths (per step, comma-separated; 1 = none), in the same run")
	cmd.Flags().BoolVar(&paired, "paired", false, "after each PID trial, a fixed-rate trial at that trial's copy rate, run right after it (the pair meets the same plant; reported side by side)")
	cmd.Flags().StringVar(&swing, "swing", "", "swing the arrival rate by this much during every migration (40%: --tps × 1.4 for half a --swing-period, then × 0.6, from the migration's start); empty = a steady load")
	cmd.Flags().DurationVar(&swingPeriod, "swing-period", time.Minute, "a whole cycle of --swing (high half, then low half)")
	cmd.Flags().IntVar(&rounds, "rounds", 1, "run the whole order of trials (both ladders, compared loops, pairs) this many times on the one loaded tenant; with --paired the pairs of every round are summed up together")
	cmd.Flags().BoolVar(&compareRelay, "compare-wal-relay", false, "run every fixed-rate trial again right after it with the WAL relayed on the other side than --wal-relay's (target ↔ source), in the same run")
	cmd.Flags().BoolVar(&compareSource, "compare-latency-source", false, "run every PID setpoint again steering by the other latency source than --latency-source's (proxy ↔ client), in the same run")
	cmd.Flags().StringVar(&compareHeadroom, "compare-headroom", "", "run every PID setpoint again with each of these headrooms (fractions, comma-separated; 0 = off), in the same run")
	cmd.Flags().StringVar(&compare, "compare-mean-horizons", "", "run every PID setpoint again with each of these mean horizons (steps, comma-separated; 0 = off), in the same run")
	cmd.Flags().StringVar(&setpoints, "setpoints", "", "PID setpoints, comma-separated: durations (20ms,40ms) or multiples of the baseline mean latency measured first (2x,3x); default 3x,4x,5x,6x")
	steal.register(cmd.Flags())
	benchCmd.AddCommand(cmd)
}

// stealFlags are the host-steal guard's flags (experiment.StealGuard) of
// slack-sweep and step40.
type stealFlags struct {
	limit   float64 // percent
	retries int
	abort   bool
}

func (s *stealFlags) register(fs *pflag.FlagSet) {
	fs.Float64Var(&s.limit, "steal-limit", 0, "re-run a trial in which the host's steal went above this percentage over some 10 s of its migration (a shared machine's burst slows the whole plant whatever the rate); every attempt is reported; 0 = off")
	fs.IntVar(&s.retries, "steal-retries", experiment.DefaultStealRetries, "with --steal-limit: re-runs a disturbed trial gets before it is kept, marked disturbed")
	fs.BoolVar(&s.abort, "steal-abort", false, "with --steal-limit: abort a trial's migration (roll back, tenant stays on its source) as soon as its steal goes above the limit, while it has a re-run left, instead of letting it finish")
}

// parse checks the flags of bench name and returns the guard they set.
func (s *stealFlags) parse(name string) (experiment.StealGuard, error) {
	switch {
	case !(s.limit >= 0 && s.limit < 100):
		return experiment.StealGuard{}, cli.Usagef("bench %s: --steal-limit: %v: want a percentage in [0, 100) (0 = off)", name, s.limit)
	case s.retries < 1 || s.retries > 10:
		return experiment.StealGuard{}, cli.Usagef("bench %s: --steal-retries: %d: want 1 to 10", name, s.retries)
	case s.abort && s.limit == 0:
		return experiment.StealGuard{}, cli.Usagef("bench %s: --steal-abort needs --steal-limit", name)
	}
	return experiment.StealGuard{StealLimit: s.limit / 100, StealRetries: s.retries, StealAbort: s.abort}, nil
}

func init() {
	var f loopFlags
	var setpoint, after string
	var factor float64
	var steal stealFlags
	cmd := &cobra.Command{
		Use:   "step40 [--out DIR] [--json]",
		Short: "Slacker Fig. 13a: +40% arrivals during the migration, PID vs the fixed rate of equal speed",
		Long: `On two cgroup-limited servers (see slack-sweep), migrates a tenant under the PID
while the workload's arrival rate steps up by --factor (+40 %) --step-after into
the migration; then migrates it back at a fixed rate equal to the PID's mean
rate before the step, with the same step. The PID slows down and returns to
its setpoint; the fixed rate does not. --tps is the load after the step (by
default the other scenarios' 100, which the bed carries with slack; see
docs/benchmarks.md for 140); before the step the workload runs at
--tps ÷ --factor. Before the trials it measures the
stepped load's latency without a migration (baseline_after_step_ms): a
setpoint under it cannot be held after the step. Writes series.csv,
summary.json, report.md and step.png to --out.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			bo, c, err := f.parse("step40", cmd)
			if err != nil {
				return err
			}
			o := experiment.StepOptions{Common: c, Factor: factor}
			if setpoint != "" {
				if o.SetpointMs, err = parseMs(setpoint); err != nil || !(o.SetpointMs > 0) {
					return cli.Usagef("bench step40: --setpoint %q: want a positive duration such as 40ms", setpoint)
				}
			}
			if o.StepAfter, err = time.ParseDuration(after); err != nil || o.StepAfter < 0 {
				return cli.Usagef("bench step40: --step-after %q: want a duration such as 60s", after)
			}
			if !(factor > 0) || math.IsInf(factor, 0) {
				return cli.Usagef("bench step40: --factor must be a positive number")
			}
			if o.StealGuard, err = steal.parse("step40"); err != nil {
				return err
			}
			// --tps is the stepped load: by default the other scenarios'
			// load, which the bed carries with slack.
			o.Workload.Rate = f.tps / factor
			return runOnBed(cmd, &f, bo, func(ctx context.Context, bed *testbed.Bed) (any, error) {
				return experiment.StepLoad(ctx, bed, o)
			})
		},
	}
	f.register(cmd.Flags(), "step40", "2GB", 4096, experiment.DefaultMPL)
	cmd.Flags().StringVar(&setpoint, "setpoint", "", "PID setpoint (e.g. 40ms); default 3 × the baseline mean latency")
	cmd.Flags().StringVar(&after, "step-after", "30s", "when the arrival rate steps up, after the migration starts (Slacker: a minute; the bed's 2 GB copy at the pre-step load lasts 50–90 s, and the fixed trial, at the PID's pre-step speed, must still be copying after it)")
	cmd.Flags().Float64Var(&factor, "factor", 1.4, "arrival rate multiplier at the step")
	tps := cmd.Flags().Lookup("tps")
	tps.Usage = "workload arrivals per second after the step (Poisson); before it, this ÷ --factor"
	steal.register(cmd.Flags())
	benchCmd.AddCommand(cmd)
}

func init() {
	var f loopFlags
	var setpoint string
	var tenants int
	cmd := &cobra.Command{
		Use:   "multitenant [--out DIR] [--json]",
		Short: "Slacker Fig. 13b: five tenants on a server, one moves under the PID, server-wide latency",
		Long: `On two cgroup-limited servers (see slack-sweep), loads --tenants tenants on the
first (--size in all), runs a workload on each (--tps in all), measures the
server-wide baseline, then moves one tenant under the PID, whose process
variable is the worst tenant's latency window on either server. Reports the
server-wide and per-tenant mean latency during the migration against the
setpoint. Writes series.csv, summary.json, report.md and multitenant.png.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			bo, c, err := f.parse("multitenant", cmd)
			if err != nil {
				return err
			}
			if tenants < 2 || tenants > 15 {
				return cli.Usagef("bench multitenant: --tenants must be in 2..15")
			}
			o := experiment.MultiOptions{Common: c, Tenants: tenants}
			if setpoint != "" {
				if o.SetpointMs, err = parseMs(setpoint); err != nil || !(o.SetpointMs > 0) {
					return cli.Usagef("bench multitenant: --setpoint %q: want a positive duration such as 40ms", setpoint)
				}
			}
			return runOnBed(cmd, &f, bo, func(ctx context.Context, bed *testbed.Bed) (any, error) {
				return experiment.Multitenant(ctx, bed, o)
			})
		},
	}
	f.register(cmd.Flags(), "multitenant", "3GB", 5120, experiment.DefaultMPL)
	cmd.Flags().StringVar(&setpoint, "setpoint", "", "PID setpoint (e.g. 40ms); default 3 × the baseline server-wide mean latency")
	cmd.Flags().IntVar(&tenants, "tenants", 5, "tenants on the source server (one moves)")
	benchCmd.AddCommand(cmd)
}
