package commands

import (
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/sluicedb/sluice/internal/cli"
	"github.com/sluicedb/sluice/internal/units"
	"github.com/sluicedb/sluice/lab/experiment"
)

// benchWANFlags are bench wan's flags.
type benchWANFlags struct {
	o         experiment.WANOptions
	size, rtt string
	asJSON    bool
}

func init() {
	var f benchWANFlags
	cmd := &cobra.Command{
		Use:   "wan",
		Short: "A tenant moved back and forth across a shaped, delayed link between hosts (network namespaces), under YCSB",
		Long: `wan makes three hosts on this machine (network namespaces, lab/netns; needs root): two servers,
each an agent with its tenants, whose path to each other is shaped to --link Mbit/s each way (tc
htb) with --rtt added by a user-space delay line (this kernel has no netem); and a proxy on the
third, whose paths to both are neither shaped nor delayed. It measures the servers' round trip (TCP handshakes) and one plain TCP stream over the
link (the baseline), loads a tenant of --size on host 1, runs YCSB (--tps over --mpl connections)
through the proxy the whole time, and moves the tenant --moves times, alternating direction, with
the product's defaults (no rate cap).

It prints link_mbit_s, rtt_ms, snapshot_mb_s (median of the moves: the bytes the snapshot sent
over the time it sent them), link_utilization (that over the link's capacity), freeze_p50_ms and
freeze_p99_ms (the agent's hold-to-release over every handover), and the ledger's
writes_acknowledged, writes_missing and writes_duplicated, checked row by row at the end (a
missing or duplicated write fails the run). The goals: link_utilization ≥ 0.9, freeze p99 ≤
250 ms + 2 RTT. --out gets summary.json, moves.csv, series.csv, report.md and wan.png.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runBenchWAN(cmd, f) },
	}
	f.register(cmd.Flags())
	benchCmd.AddCommand(cmd)
}

func (f *benchWANFlags) register(fs *pflag.FlagSet) {
	o := &f.o
	fs.StringVar(&o.Out, "out", filepath.Join("out", "bench", "wan"), "directory for summary.json, moves.csv, series.csv, report.md and wan.png")
	fs.Float64Var(&o.LinkMbit, "link", 200, "the servers' path, Mbit/s each way")
	fs.StringVar(&f.rtt, "rtt", "10ms", "round trip added between the two server hosts")
	fs.IntVar(&o.Moves, "moves", 8, "migrations (handovers), alternating direction")
	fs.StringVar(&f.size, "size", "250MB", "tenant data to load and move")
	fs.Float64Var(&o.TxRate, "tps", 100, "YCSB workload arrivals per second")
	fs.IntVar(&o.MPL, "mpl", 8, "YCSB workload connections")
	fs.Uint64Var(&o.Seed, "seed", 1, "seed for data, arrivals and keys")
	fs.BoolVar(&f.asJSON, "json", false, "print only the final figures, as JSON")
}

// parse checks the flags and returns the experiment's options.
func (f benchWANFlags) parse() (experiment.WANOptions, error) {
	o := f.o
	var err error
	if o.Size, err = units.ParseBytes(f.size); err != nil {
		return o, cli.Usagef("bench wan: --size: %v", err)
	}
	if o.RTT, err = time.ParseDuration(f.rtt); err != nil {
		return o, cli.Usagef("bench wan: --rtt %q: want a duration such as 10ms", f.rtt)
	}
	switch {
	case o.Out == "":
		return o, cli.Usagef("bench wan: --out must not be empty")
	case !(o.LinkMbit > 0):
		return o, cli.Usagef("bench wan: --link %v: want a positive rate in Mbit/s", o.LinkMbit)
	case o.RTT <= 0:
		return o, cli.Usagef("bench wan: --rtt %s: want a positive duration", f.rtt)
	case o.Moves < 1:
		return o, cli.Usagef("bench wan: --moves %d: want at least 1", o.Moves)
	case !(o.TxRate > 0):
		return o, cli.Usagef("bench wan: --tps %v: want a positive number of transactions/s", o.TxRate)
	case o.MPL < 1:
		return o, cli.Usagef("bench wan: --mpl %d: want at least 1", o.MPL)
	}
	if err := o.Check(); err != nil {
		return o, cli.UsageError{Msg: "bench " + err.Error()}
	}
	return o, nil
}

func runBenchWAN(cmd *cobra.Command, f benchWANFlags) error {
	o, err := f.parse()
	if err != nil {
		return err
	}
	if !f.asJSON {
		o.Progress = func(format string, args ...any) {
			fmt.Fprintf(cmd.ErrOrStderr(), "bench wan: "+format+"\n", args...)
		}
	}
	o.Command = downtimeCommandLine(cmd)
	ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt)
	defer stop()
	res, err := experiment.WAN(ctx, o)
	if err != nil {
		return err
	}
	if f.asJSON {
		return cli.WriteJSON(cmd.OutOrStdout(), res)
	}
	printWAN(cmd.OutOrStdout(), res, o.Out)
	return nil
}

func printWAN(w io.Writer, r experiment.WANResult, out string) {
	fmt.Fprintf(w, "link %.0f Mbit/s (%.1f MB/s), RTT %.2f ms; one plain TCP stream %.2f MB/s\n", r.LinkMbitS, r.LinkMbitS/8, r.RTTMs, r.LinkTCPMBs)
	fmt.Fprintf(w, "snapshot %.2f MB/s: link utilization %.3f (goal ≥ %.1f: %v)\n", r.SnapshotMBs, r.LinkUtilization, experiment.SnapshotGoalShare, r.SnapshotGoalMet)
	fmt.Fprintf(w, "freeze p50 %.1f ms, p99 %.1f ms over %d handovers (goal p99 ≤ %.0f ms: %v)\n", r.FreezeP50Ms, r.FreezeP99Ms, r.Handovers, r.FreezeGoalMs, r.FreezeGoalMet)
	fmt.Fprintf(w, "writes acknowledged %d, missing %d, duplicated %d\n", r.WritesAcknowledged, r.WritesMissing, r.WritesDuplicated)
	fmt.Fprintf(w, "report: %s\n", filepath.Join(out, experiment.ReportFile))
}
