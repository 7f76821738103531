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

	"github.com/sluicedb/sluice/control"
	"github.com/sluicedb/sluice/internal/cli"
	"github.com/sluicedb/sluice/internal/units"
	"github.com/sluicedb/sluice/lab/experiment"
	"github.com/sluicedb/sluice/lab/testbed"
	"github.com/sluicedb/sluice/lab/workload"
)

// The closed-loop benchmarks (Slacker's experiments) on cgroup-limited
// servers: slack-sweep, step40, multitenant. Their shared flags describe the
// servers, the tenant, the workload and the control loop: a profile as
// `sluice migrate --profile` takes it, and --variant for every other loop
// to run the PID trials with.

type loopFlags struct {
	out, size, keys    string
	profile, maxRate   string
	variants, settings []string
	cpus, targetCPUs   float64
	calm, readMBps     float64
	readIOPS           int64
	memoryMB, mpl      int
	tps                float64
	seed               uint64
	json               bool
}

// bed is a benchmark's default plant: the servers and the workload its
// Must-show figures were measured on, so that a run with no flags compares
// something (on a plant with no slack, or none to spare, every controller
// ties).
type bed struct {
	size       string
	memoryMB   int
	mpl        int
	cpus       float64 // each server's quota, cores
	targetCPUs float64 // the target's quota during a trial; 0 = cpus
	tps        float64
	stealLimit float64 // %, 0 = off
}

// The closed-loop benchmarks' beds. A 0.5-core source with a whole core for
// the target: the copy is bound by the source's slack, not the target's CPU;
// 3 GB at 150 transactions/s gives a PID 40–150 s of copy to settle in.
var (
	sweepBed = bed{size: "3GB", memoryMB: 5120, mpl: experiment.SweepMPL, cpus: 0.5, targetCPUs: 1, tps: 150, stealLimit: 25}
	stepBed  = bed{size: "3GB", memoryMB: 5120, mpl: experiment.DefaultMPL, cpus: 0.5, targetCPUs: 1, tps: 210, stealLimit: 25}
	multiBed = bed{size: "3GB", memoryMB: 5120, mpl: experiment.DefaultMPL, cpus: 0.5, targetCPUs: 1, tps: 100}
)

func (f *loopFlags) register(fs *pflag.FlagSet, scenario string, b bed) {
	size, memoryMB, mpl := b.size, b.memoryMB, b.mpl
	fs.StringVar(&f.out, "out", filepath.Join("out", "bench", scenario), "output directory (CSV, summary JSON, Markdown report, PNG plots)")
	fs.BoolVar(&f.json, "json", false, "print the summary as JSON")
	fs.StringVar(&f.size, "size", size, "tenant data size (Slacker: 1 GB; multitenant: all tenants together)")
	fs.Float64Var(&f.tps, "tps", b.tps, "workload arrivals per second (Poisson)")
	fs.IntVar(&f.mpl, "mpl", mpl, "workload connections (multiprogramming level)")
	fs.StringVar(&f.keys, "keys", "uniform", "workload key distribution: uniform, zipfian or hotspot")
	fs.Uint64Var(&f.seed, "seed", 1, "workload seed")
	fs.Float64Var(&f.cpus, "cpus", b.cpus, "each server's CPU quota, cores (cgroup; shared by its agent and tenants)")
	fs.IntVar(&f.memoryMB, "memory", memoryMB, "each server's memory cap, MiB, page cache included (cgroup); below the tenant's size its reads go to disk")
	fs.Float64Var(&f.targetCPUs, "target-cpus", b.targetCPUs, "the CPU quota, cores, of the server each migration moves the tenant to, for that trial (Slacker's target: an idle server of its own, so the copy is bound by the source's slack, not the target's CPU); the source keeps --cpus; 0 = --cpus for every server, negative = no cap")
	fs.Float64Var(&f.readMBps, "read-mbps", 0, "each server's read bandwidth on the data disk, MB/s (cgroup blkio); 0 = none")
	fs.Int64Var(&f.readIOPS, "read-iops", 0, "each server's read operations per second on the data disk; 0 = none")
	fs.StringArrayVar(&f.settings, "tenant-setting", nil, "a postgresql.conf parameter for every tenant, name=value (repeatable; over the bed's own)")
	fs.Float64Var(&f.calm, "calm", experiment.DefaultCalm, "hold each migration's start until the workload's last 5 s average at most this multiple of the baseline's median 3 s window (at most 90 s), so no trial starts in the previous one's aftermath (slack-sweep and step40; multitenant has no such hold); 0 = no hold")
	fs.StringVar(&f.profile, "profile", control.DefaultProfileName, "the control loop's tuning (as sluice migrate takes it): "+strings.Join(control.Profiles(), " or ")+", or a YAML/JSON profile file")
	fs.StringArrayVar(&f.variants, "variant", nil, "run every PID trial again with this loop: key=value[,key=value…], a profile field changed from --profile's (ki=0.04, mean_horizon=0, catch_up.boost=2), latency=client (steer by the workload's own window too; default the proxy's), wal_relay=source or checkpoint=spread|3s (repeatable: one loop each)")
	fs.StringVar(&f.maxRate, "max-rate", "", "the controller's top migration speed (as sluice migrate takes it; default: each loop's profile's)")
}

// Bed settings the benchmarks hold fixed: they make the plant quieter and
// the handover gentler, and are not experiments of their own.
const (
	// benchCPUShares is the cpu.shares of the servers' groups and of the
	// bench process (workload, proxy) against the host's other processes
	// (1024 each): less noise from a busy neighbour.
	benchCPUShares = 32768
	// benchReleaseLimit is the bed's proxy's release ramp (proxy.Config's
	// ReleaseLimit): on the quarter-core servers the transactions in the
	// second after a handover cost the clients about half as much
	// admitted one at a time as all at once (docs/control.md).
	benchReleaseLimit = 1
)

// parse checks the flags and returns the testbed options and the
// experiment's common options. name prefixes errors.
func (f *loopFlags) parse(name string, cmd *cobra.Command) (testbed.Options, experiment.Common, error) {
	var c experiment.Common
	usage := func(format string, args ...any) error {
		return cli.Usagef("bench %s: "+format, append([]any{name}, args...)...)
	}
	size, err := units.ParseBytes(f.size)
	if err != nil {
		return testbed.Options{}, c, usage("--size: %v", err)
	}
	dist := workload.Distribution(f.keys)
	if _, err := workload.NewKeyChooser(dist, 10); err != nil {
		return testbed.Options{}, c, usage("--keys %q: want uniform, zipfian or hotspot", f.keys)
	}
	switch {
	case size < 1e6:
		return testbed.Options{}, c, usage("--size %s is below 1 MB", f.size)
	case !(f.tps > 0) || math.IsInf(f.tps, 0):
		return testbed.Options{}, c, usage("--tps must be a positive number")
	case f.mpl < 1 || f.mpl > 1000:
		return testbed.Options{}, c, usage("--mpl must be in 1..1000")
	case f.cpus == 0 || f.memoryMB == 0:
		return testbed.Options{}, c, usage("--cpus and --memory must be positive (negative: no cap)")
	case f.targetCPUs != 0 && f.cpus < 0:
		return testbed.Options{}, c, usage("--target-cpus needs servers with a CPU cap (--cpus > 0)")
	case !(f.calm == 0 || f.calm >= 1) || math.IsInf(f.calm, 0):
		return testbed.Options{}, c, usage("--calm %v: want 0 (no hold) or a multiple >= 1 of the baseline's median window", f.calm)
	case f.targetCPUs != 0 && testbed.CheckCPUs(f.targetCPUs) != nil:
		return testbed.Options{}, c, usage("--target-cpus %v: want 0.01..64 cores, 0 (as --cpus) or negative (no cap)", f.targetCPUs)
	}
	c = experiment.Common{
		Out: f.out, Command: "sluice " + strings.Join(os.Args[1:], " "), Size: size,
		Workload: workload.Config{Rate: f.tps, MPL: f.mpl, Distribution: dist},
		Seed:     f.seed, TargetCPUs: f.targetCPUs, Calm: f.calm,
	}
	if err := f.parseLoops(&c, usage); err != nil {
		return testbed.Options{}, c, err
	}
	bo, err := f.bed(usage)
	if err != nil {
		return bo, c, err
	}
	// Progress goes to stderr, with --json too (stdout carries the JSON).
	c.Progress = func(format string, args ...any) {
		fmt.Fprintf(cmd.ErrOrStderr(), "%s "+format+"\n", append([]any{time.Now().Format("15:04:05")}, args...)...)
	}
	bo.Progress = c.Progress
	return bo, c, nil
}

// parseLoops sets c's profile, variants and top speed from the flags.
func (f *loopFlags) parseLoops(c *experiment.Common, usage func(string, ...any) error) error {
	var err error
	if c.Profile, err = cli.Profile(f.profile); err != nil {
		return usage("--profile: %v", err)
	}
	for _, spec := range f.variants {
		v, err := experiment.ParseVariant(c.Profile, spec)
		if err != nil {
			return usage("--variant %q: %v", spec, err)
		}
		c.Variants = append(c.Variants, v)
	}
	if f.maxRate != "" {
		c.MaxRate, err = units.ParseRate(f.maxRate)
		if err != nil || !(c.MaxRate > 0) || math.IsInf(c.MaxRate, 0) {
			return usage("--max-rate %q: want a positive finite rate such as 120MB/s", f.maxRate)
		}
	}
	return nil
}

// bed is the testbed's options from the flags.
func (f *loopFlags) bed(usage func(string, ...any) error) (testbed.Options, error) {
	bo := testbed.Options{CPUs: f.cpus, CPUShares: benchCPUShares, MemoryMB: f.memoryMB, ReadMBps: f.readMBps, ReadIOPS: f.readIOPS, ReleaseLimit: benchReleaseLimit}
	for _, kv := range f.settings {
		k, v, ok := strings.Cut(kv, "=")
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		if !ok || !settingName.MatchString(k) || v == "" {
			return bo, usage("--tenant-setting %q: want name=value, e.g. wal_init_zero=off", kv)
		}
		if bo.Settings == nil {
			bo.Settings = map[string]string{}
		}
		bo.Settings[k] = v
	}
	if err := bo.Check(); err != nil {
		return bo, usage("%v", err)
	}
	return bo, nil
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
