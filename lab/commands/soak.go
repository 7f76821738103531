package commands

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/sluicedb/sluice/internal/cli"
	"github.com/sluicedb/sluice/internal/units"
	"github.com/sluicedb/sluice/lab/experiment"
	"github.com/sluicedb/sluice/lab/testbed"
)

// soakFlags are soak's flags: the experiment's options bound directly, and
// those parse checks and converts.
type soakFlags struct {
	o                         experiment.SoakOptions
	size, fixedRate, setpoint string
	bed                       bedFlags
	asJSON                    bool
}

// errSoakFailed is soak's error when it ran to its end but a check failed
// (the checks are printed).
var errSoakFailed = errors.New("soak: a check failed")

const soakLong = `soak starts two cgroup-limited servers (--cpus, --memory each; every agent a ` + "`sluice agent`" + `
process) and a proxy (a ` + "`sluice proxy`" + ` process), creates one tenant of --size with Slacker's YCSB
usertable, runs the YCSB workload (--tps arrivals/s over --mpl connections, every acknowledged
write in a ledger) through the proxy the whole time, and moves the tenant from server to server
for --duration, the PID controller (the default profile; --setpoint, default 3 × the baseline
mean) and a fixed rate (--fixed-rate) alternating migration by migration, --settle apart. It then
runs on to the first migration that leaves the tenant where the warm-up left it.

Every --sample-every it reads each agent's and the proxy's RSS (VmRSS in /proc/PID/status) and
open fds (/proc/PID/fd); the start reading is taken after --warmup migrations, the end reading
after the last. At the end it lists the replication slots on every running postmaster of both
servers with the WAL they hold, and checks the ledger row by row on the final owner.

It prints pass/fail lines for the issue's must-show: at least 30 committed migrations per hour,
none failed, 0 writes lost, 0 duplicated, each process's RSS and fds at the end within 10 % of
the start, no slot left behind; it exits 1 if one fails. --json prints the summary. --out gets
summary.json, migrations.csv, usage.csv, workload.csv, report.md and soak.png, and the servers'
logs under agents/. ` + "`sluice lab bench soak`" + ` (so ` + "`sluice bench soak`" + `) is the same command.`

// newSoakCmd builds the soak command; it is registered as `lab soak` and,
// hidden, as `lab bench soak`.
func newSoakCmd(hidden bool) *cobra.Command {
	var f soakFlags
	cmd := &cobra.Command{
		Use:    "soak",
		Short:  "A tenant moved back and forth under load for an hour: migrations, freezes, agents' and proxy's memory and fds, slots, ledger",
		Long:   soakLong,
		Args:   cobra.NoArgs,
		Hidden: hidden,
		RunE:   func(cmd *cobra.Command, _ []string) error { return runSoak(cmd, f) },
	}
	f.register(cmd.Flags())
	return cmd
}

func init() {
	Lab.AddCommand(newSoakCmd(false))
	benchCmd.AddCommand(newSoakCmd(true))
}

// register defines the flags on fs, bound to f.
func (f *soakFlags) register(fs *pflag.FlagSet) {
	o := &f.o
	fs.StringVar(&o.Out, "out", filepath.Join("out", "lab", "soak"), "directory for summary.json, the CSVs, report.md and soak.png")
	fs.DurationVar(&o.Duration, "duration", time.Hour, "how long migrations keep starting")
	fs.StringVar(&f.size, "size", "200MB", "tenant data to load and move")
	fs.Float64Var(&o.TxRate, "tps", 100, "YCSB workload arrivals per second")
	fs.IntVar(&o.MPL, "mpl", experiment.DefaultMPL, "YCSB workload connections")
	fs.StringVar(&f.setpoint, "setpoint", "", "the PID's setpoint (e.g. 20ms); default 3 × the baseline mean latency")
	fs.StringVar(&f.fixedRate, "fixed-rate", "20MB/s", "the fixed controller's copy rate")
	fs.IntVar(&o.Warmup, "warmup", 2, "migrations before the start reading of RSS and fds")
	fs.DurationVar(&o.Settle, "settle", 10*time.Second, "pause after each migration")
	fs.DurationVar(&o.SampleEvery, "sample-every", 10*time.Second, "how often RSS and fds are read")
	f.bed.register(fs)
	fs.Uint64Var(&o.Seed, "seed", 1, "seed for data, arrivals and keys")
	fs.BoolVar(&f.asJSON, "json", false, "print only the summary, as JSON")
}

// parse checks the flags and returns the experiment's and the bed's
// options.
func (f soakFlags) parse() (experiment.SoakOptions, testbed.Options, error) {
	o := f.o
	var err error
	if o.Size, err = units.ParseBytes(f.size); err != nil || o.Size < 1e6 {
		return o, testbed.Options{}, cli.Usagef("soak: --size %q: want a size of at least 1MB, such as 200MB", f.size)
	}
	if o.FixedRate, err = units.ParseRate(f.fixedRate); err != nil || !(o.FixedRate > 0) {
		return o, testbed.Options{}, cli.Usagef("soak: --fixed-rate %q: want a positive rate such as 20MB/s", f.fixedRate)
	}
	if f.setpoint != "" {
		if o.SetpointMs, err = parseMs(f.setpoint); err != nil || !(o.SetpointMs > 0) {
			return o, testbed.Options{}, cli.Usagef("soak: --setpoint %q: want a positive duration such as 20ms", f.setpoint)
		}
	}
	if o.Out == "" {
		return o, testbed.Options{}, cli.Usagef("soak: --out must not be empty")
	}
	bo, err := f.bed.options("soak", o.Out)
	if err != nil {
		return o, bo, err
	}
	bo.ProxyProcess = true
	if err := o.Check(); err != nil {
		return o, bo, cli.UsageError{Msg: err.Error()}
	}
	return o, bo, nil
}

// runSoak starts the bed, runs the soak and prints its result.
func runSoak(cmd *cobra.Command, f soakFlags) error {
	o, bo, err := f.parse()
	if err != nil {
		return err
	}
	began := time.Now()
	progress := func(format string, args ...any) {
		fmt.Fprintf(cmd.ErrOrStderr(), "soak [%5.0fs] "+format+"\n", append([]any{time.Since(began).Seconds()}, args...)...)
	}
	// Progress goes to stderr, also with --json: an hour without a line is
	// too long to wait blind.
	o.Progress, bo.Progress = progress, progress
	o.Command = downtimeCommandLine(cmd)
	var res experiment.SoakResult
	err = onBed(cmd, bo, func(ctx context.Context, bed *testbed.Bed) (err error) {
		res, err = experiment.Soak(ctx, bed, o)
		return err
	})
	if err != nil {
		return err
	}
	if f.asJSON {
		if err := cli.WriteJSON(cmd.OutOrStdout(), res); err != nil {
			return err
		}
	} else {
		printSoak(cmd.OutOrStdout(), res, o.Out)
	}
	if !res.Pass {
		return errSoakFailed
	}
	return nil
}

// printSoak prints res's figures and checks and where its report is.
func printSoak(w io.Writer, res experiment.SoakResult, out string) {
	fmt.Fprintf(w, "\n%d migrations in %.0f s (%d PID, %d fixed; %d failed)\n", res.Committed, res.Seconds,
		res.ByController[experiment.SoakPID], res.ByController[experiment.SoakFixed], res.Failed)
	fmt.Fprintf(w, "freeze p50 %.1f ms, p99 %.1f ms, max %.1f ms\n", res.Freeze.P50Ms, res.Freeze.P99Ms, res.Freeze.MaxMs)
	for _, c := range res.Checks {
		fmt.Fprintln(w, c.Line())
	}
	fmt.Fprintf(w, "report: %s\n", filepath.Join(out, experiment.ReportFile))
}
