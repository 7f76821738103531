package commands

import (
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/sluicedb/sluice/internal/cli"
	"github.com/sluicedb/sluice/internal/units"
	"github.com/sluicedb/sluice/lab/demo"
)

func init() {
	var (
		o                 demo.Options
		size, maxRate, sp string
		asJSON            bool
	)
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Run sluice end to end: two servers, a proxy, a YCSB workload and a live migration paced to a latency setpoint",
		Long: `demo starts two "servers" (each a ` + "`sluice agent`" + ` in a cgroup v1 group that its tenants'
postmasters inherit, the source's CPU limited to --cpus cores, their data in memory when
/dev/shm has room), a proxy and a tenant of --size; loads Slacker's YCSB usertable through the
proxy; runs the workload (uniform keys) and measures its baseline latency; then migrates the
tenant live while the workload runs. The source agent's control loop, with the product's default
profile, sets the copy's speed every second from the latency the proxy measures, to hold the
clients at --setpoint (default: ` + fmt.Sprintf("%g × the baseline's lowest %v mean, at least %v above it", demo.SetpointFactor, demo.CalmWindow, demo.MinSetpointGap) + `).
At full speed the copy would need more CPU than the source's quota leaves it, so the setpoint
binds. The demo ends by checking every acknowledged write on the new server, row by row, and
writes summary.json, loop.csv, demo.png and the servers' logs into --out. Needs root and cgroup
v1 (it refuses to run without them). ` + "`sluice sim demo`" + ` shows the same loop on the simulator.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var err error
			if o.Size, err = units.ParseBytes(size); err != nil {
				return cli.Usagef("demo: --size: %v", err)
			}
			if maxRate != "" {
				if o.MaxRate, err = units.ParseRate(maxRate); err != nil || o.MaxRate <= 0 {
					return cli.Usagef("demo: --max-rate %q: want a positive rate such as 120MB/s", maxRate)
				}
			}
			if sp != "" {
				if o.Setpoint, err = time.ParseDuration(sp); err != nil || o.Setpoint <= 0 {
					return cli.Usagef("demo: --setpoint %q: want a positive duration such as 40ms", sp)
				}
			}
			if !asJSON {
				o.Progress = cmd.ErrOrStderr()
			}
			if err := o.Check(); err != nil {
				return cli.UsageError{Msg: err.Error()}
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt)
			defer stop()
			res, err := demo.Run(ctx, o)
			if err != nil {
				return err
			}
			if asJSON {
				return cli.WriteJSON(cmd.OutOrStdout(), res)
			}
			w := cmd.OutOrStdout()
			fmt.Fprintf(w, "\nsetpoint %.1f ms (baseline %.1f ms, calmest %.1f); clients during the copy %.1f ms (%+.1f %%; %.1f ms of it queued for a connection), the proxy's measure %.1f ms\n",
				res.SetpointMs, res.BaselineMeanLatencyMs, res.BaselineCalmLatencyMs, res.AchievedMeanLatencyMs, 100*(res.AchievedMeanLatencyMs/res.SetpointMs-1), res.ClientQueueMs, res.ProxyMeanLatencyMs)
			fmt.Fprintf(w, "migrated %s in %.1f s (copy %.1f s, %s mean); handover freeze %.0f ms; clients over the whole migration %.1f ms\n",
				units.FormatBytes(float64(res.BytesCopied)), res.MigrationSeconds, res.CopySeconds,
				units.FormatRate(float64(res.BytesCopied)/res.CopySeconds), res.FreezeMs, res.MigrationMeanLatencyMs)
			fmt.Fprintf(w, "writes acknowledged %d, missing %d, duplicated %d\n", res.WritesAcknowledged, res.WritesMissing, res.WritesDuplicated)
			fmt.Fprintf(w, "plot: %s\n", filepath.Join(o.Out, "demo.png"))
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.Out, "out", filepath.Join("out", "demo"), "directory for summary.json, loop.csv and demo.png")
	f.StringVar(&size, "size", fmt.Sprintf("%.0fMB", demo.DefaultSize/1e6), "tenant data to load and migrate")
	f.StringVar(&sp, "setpoint", "", fmt.Sprintf("clients' mean latency to hold during the copy (default: %g × the baseline's lowest %v mean, at least %v above it)", demo.SetpointFactor, demo.CalmWindow, demo.MinSetpointGap))
	f.StringVar(&maxRate, "max-rate", "", "the migration's top speed (default: the control profile's)")
	f.Float64Var(&o.TxRate, "tps", demo.DefaultTxRate, "workload arrivals per second")
	f.IntVar(&o.MPL, "mpl", demo.DefaultMPL, "workload connections")
	f.Float64Var(&o.CPUs, "cpus", demo.DefaultCPUs, "the source server's CPU quota, cores (cgroup v1; shared by its agent and postmaster)")
	f.Float64Var(&o.TargetCPUs, "target-cpus", demo.DefaultTargetCPUs, "the target server's CPU quota, cores; negative = none")
	f.StringVar(&o.Controller, "controller", "pid", "controller: pid, or fixed (at the top speed, to see what the loop spares the clients)")
	f.Uint64Var(&o.Seed, "seed", 1, "seed for data, arrivals and keys")
	f.BoolVar(&asJSON, "json", false, "print only the final figures, as JSON")
	Demo = cmd
}
