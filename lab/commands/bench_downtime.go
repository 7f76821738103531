package commands

import (
	"context"
	"fmt"
	"io"
	"math"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/sluicedb/sluice/internal/cli"
	"github.com/sluicedb/sluice/internal/units"
	"github.com/sluicedb/sluice/lab/experiment"
	"github.com/sluicedb/sluice/lab/testbed"
)

// benchDowntimeFlags are bench downtime's flags: the experiment's options
// bound directly, and those parse checks and converts.
type benchDowntimeFlags struct {
	o                     experiment.DowntimeOptions
	size, rate            string
	probe, window, settle string
	baseline, recover     string
	bed                   bedFlags
	asJSON                bool
}

func init() {
	var f benchDowntimeFlags
	cmd := &cobra.Command{
		Use:   "downtime",
		Short: "Live migration vs stop-and-copy: the agent's freeze/downtime and what clients saw, with a ledger check",
		Long: `downtime starts two cgroup-limited servers (--cpus, --memory each) and a proxy, creates one
tenant of --size with Slacker's YCSB usertable, runs the YCSB workload (--tps arrivals/s over
--mpl connections) through the proxy the whole time, and moves the tenant --runs times live and
--runs times by stop-and-copy, alternately, each time to the other server.

For every move it reports the agent's figure (the live handover's freeze, or stop-and-copy's
downtime: hold to release) and what clients saw: a separate probe connection through the proxy
issues SELECT 1 every --probe-interval, and the longest probe and the longest gap between
successful probes within --window of the hold and release are the client-visible stall; the
longest YCSB transaction completed in those seconds is reported too. At the end every
acknowledged write is checked row by row on the final owner; a missing or duplicated one fails
the run. --json prints the medians (live_freeze_ms, stop_and_copy_downtime_ms, …), the ledger
counts and every run. After each move the next waits until the workload has recovered (a whole
second with no arrival queued and a mean latency ≤ 2× the --baseline mean; at most --recover);
that time is reported as recovery_s. --out gets summary.json, probe.csv, workload.csv, report.md
and downtime.png.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runBenchDowntime(cmd, f) },
	}
	f.register(cmd.Flags())
	benchCmd.AddCommand(cmd)
}

// register defines the flags on fs, bound to f.
func (f *benchDowntimeFlags) register(fs *pflag.FlagSet) {
	o := &f.o
	fs.StringVar(&o.Out, "out", filepath.Join("out", "bench", "downtime"), "directory for summary.json, probe.csv, report.md and downtime.png")
	fs.StringVar(&f.size, "size", "200MB", "tenant data to load and move")
	fs.IntVar(&o.Runs, "runs", 3, "migrations of each mode (live, stop-and-copy), alternating")
	fs.Float64Var(&o.TxRate, "tps", 200, "YCSB workload arrivals per second")
	fs.IntVar(&o.MPL, "mpl", 8, "YCSB workload connections")
	fs.StringVar(&f.rate, "rate", "0", "live migration copy rate cap (e.g. 50MB/s); 0 = unlimited (stop-and-copy is never capped)")
	fs.StringVar(&f.probe, "probe-interval", "5ms", "how often the probe connection issues SELECT 1 through the proxy")
	fs.StringVar(&f.window, "window", "1s", "how far before the hold and after the release the client-visible stall is looked for")
	fs.StringVar(&f.settle, "settle", "3s", "least workload time on the new owner between moves")
	fs.StringVar(&f.baseline, "baseline", "10s", "workload time before the first move (its mean latency is the baseline)")
	fs.StringVar(&f.recover, "recover", "60s", "longest wait after a move for the workload to recover (a second with an empty queue and a mean ≤ 2× the baseline)")
	f.bed.register(fs)
	fs.Uint64Var(&o.Seed, "seed", 1, "seed for data, arrivals and keys")
	fs.BoolVar(&f.asJSON, "json", false, "print only the final figures, as JSON")
}

// parse checks the flags and returns the experiment's and the bed's
// options.
func (f benchDowntimeFlags) parse() (experiment.DowntimeOptions, testbed.Options, error) {
	o := f.o
	var err error
	if o.Size, err = units.ParseBytes(f.size); err != nil {
		return o, testbed.Options{}, cli.Usagef("bench downtime: --size: %v", err)
	}
	if o.Size < 1e6 {
		return o, testbed.Options{}, cli.Usagef("bench downtime: --size %s: want at least 1MB", f.size)
	}
	if f.rate != "" && f.rate != "0" && f.rate != "unlimited" {
		if o.Rate, err = units.ParseRate(f.rate); err != nil || !(o.Rate > 0) {
			return o, testbed.Options{}, cli.Usagef("bench downtime: --rate %q: want a positive rate such as 50MB/s, or 0 for unlimited", f.rate)
		}
	}
	for _, d := range []struct {
		name, v string
		to      *time.Duration
	}{{"--probe-interval", f.probe, &o.ProbeInterval}, {"--window", f.window, &o.Window}, {"--settle", f.settle, &o.Settle},
		{"--baseline", f.baseline, &o.Baseline}, {"--recover", f.recover, &o.Recover}} {
		if *d.to, err = time.ParseDuration(d.v); err != nil || *d.to < time.Millisecond {
			return o, testbed.Options{}, cli.Usagef("bench downtime: %s %q: want a duration of at least 1ms, such as 5ms", d.name, d.v)
		}
	}
	if o.Runs < 1 {
		return o, testbed.Options{}, cli.Usagef("bench downtime: --runs %d: want at least 1", o.Runs)
	}
	if !(o.TxRate > 0) || math.IsInf(o.TxRate, 0) {
		return o, testbed.Options{}, cli.Usagef("bench downtime: --tps %v: want a positive number of transactions/s", o.TxRate)
	}
	if o.MPL < 1 {
		return o, testbed.Options{}, cli.Usagef("bench downtime: --mpl %d: want at least 1", o.MPL)
	}
	if o.Out == "" {
		return o, testbed.Options{}, cli.Usagef("bench downtime: --out must not be empty")
	}
	bo, err := f.bed.options("bench downtime", o.Out)
	if err != nil {
		return o, bo, err
	}
	if err := o.Check(); err != nil {
		return o, bo, cli.UsageError{Msg: "bench " + err.Error()}
	}
	return o, bo, nil
}

// runBenchDowntime starts the bed, runs the experiment and prints its
// result.
func runBenchDowntime(cmd *cobra.Command, f benchDowntimeFlags) error {
	o, bo, err := f.parse()
	if err != nil {
		return err
	}
	progress := func(format string, args ...any) {
		fmt.Fprintf(cmd.ErrOrStderr(), "bench downtime: "+format+"\n", args...)
	}
	if !f.asJSON {
		o.Progress, bo.Progress = progress, progress
	}
	o.Command = downtimeCommandLine(cmd)
	var res experiment.DowntimeResult
	err = onBed(cmd, bo, func(ctx context.Context, bed *testbed.Bed) (err error) {
		res, err = experiment.Downtime(ctx, bed, o)
		return err
	})
	if err != nil {
		return err
	}
	if f.asJSON {
		return cli.WriteJSON(cmd.OutOrStdout(), res)
	}
	printDowntime(cmd.OutOrStdout(), res, o.Out)
	return nil
}

// downtimeCommandLine is the command as run, with the flags that were set,
// for the report.
func downtimeCommandLine(cmd *cobra.Command) string {
	parts := []string{cmd.CommandPath()}
	cmd.Flags().Visit(func(f *pflag.Flag) {
		if sv, ok := f.Value.(pflag.SliceValue); ok {
			for _, v := range sv.GetSlice() {
				parts = append(parts, "--"+f.Name+" "+v)
			}
		} else if f.Value.Type() == "bool" {
			parts = append(parts, "--"+f.Name)
		} else {
			parts = append(parts, "--"+f.Name+" "+f.Value.String())
		}
	})
	return strings.Join(parts, " ")
}

// printDowntime prints the medians of res and where its report is.
func printDowntime(w io.Writer, res experiment.DowntimeResult, out string) {
	fmt.Fprintf(w, "\n%-14s %10s %14s %14s %16s %11s %12s\n", "mode", "agent ms", "probe max ms", "probe gap ms", "workload max ms", "recovery s", "migration s")
	fmt.Fprintf(w, "%-14s %10.1f %14.1f %14.1f %16.1f %11.2f %12.1f\n", "live", res.LiveFreezeMs, res.LiveProbeMaxMs, res.LiveProbeGapMs, res.LiveWorkloadMaxMs, res.LiveRecoveryS, res.LiveSeconds)
	fmt.Fprintf(w, "%-14s %10.1f %14.1f %14.1f %16.1f %11.2f %12.1f\n", "stop-and-copy", res.StopAndCopyDowntimeMs, res.StopAndCopyProbeMaxMs, res.StopAndCopyProbeGapMs, res.StopAndCopyWorkloadMaxMs, res.StopAndCopyRecoveryS, res.StopAndCopySeconds)
	fmt.Fprintf(w, "(baseline mean latency %.1f ms; recovered = a second with no queue and a mean ≤ %.1f ms)\n", res.BaselineMeanMs, res.RecoveryLimitMs)
	fmt.Fprintf(w, "(medians of %d runs each; stop-and-copy's downtime is %.1f× the live freeze)\n", len(res.Live), res.DowntimeRatio)
	fmt.Fprintf(w, "writes acknowledged %d, missing %d, duplicated %d\n", res.WritesAcknowledged, res.WritesMissing, res.WritesDuplicated)
	fmt.Fprintf(w, "report: %s\n", filepath.Join(out, "report.md"))
}

// onBed starts a testbed with bo, runs f on it until it returns or ^C, and
// closes the bed; f's error comes first.
func onBed(cmd *cobra.Command, bo testbed.Options, f func(context.Context, *testbed.Bed) error) error {
	ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt)
	defer stop()
	bed, err := testbed.Start(ctx, bo)
	if err != nil {
		return err
	}
	err = f(ctx, bed)
	if cerr := bed.Close(); err == nil && cerr != nil {
		err = cerr
	}
	return err
}

// bedFlags are the flags of a two-server testbed that an experiment starts
// (downtime, soak): each server's cgroup caps and where its directories go.
type bedFlags struct {
	root     string
	cpus     float64
	memoryMB int
}

func (b *bedFlags) register(fs *pflag.FlagSet) {
	fs.Float64Var(&b.cpus, "cpus", 0.5, "each server's cgroup CPU quota, cores (0 = no cap)")
	fs.IntVar(&b.memoryMB, "memory", 768, "each server's cgroup memory cap incl. page cache, MiB (0 = no cap)")
	fs.StringVar(&b.root, "root", "", "keep the servers' directories (agent logs, tenant data) in this directory; default a temp dir removed at the end")
}

// options returns the bed's options, its agents' logs under out/agents; a
// bad value is a usage error prefixed with cmd.
func (b bedFlags) options(cmd, out string) (testbed.Options, error) {
	bo := testbed.Options{CPUs: b.cpus, MemoryMB: b.memoryMB, Root: b.root, LogDir: filepath.Join(out, "agents")}
	if b.cpus == 0 {
		bo.CPUs = -1
	}
	if b.memoryMB == 0 {
		bo.MemoryMB = -1
	}
	if err := bo.Check(); err != nil {
		return bo, cli.UsageError{Msg: cmd + ": " + err.Error()}
	}
	return bo, nil
}
