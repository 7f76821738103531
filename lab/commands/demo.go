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
		Short: "Run sluice end to end: two servers, a proxy, a YCSB workload and a PID-controlled live migration",
		Long: `demo starts two agents (two "servers"), a proxy and a tenant of --size, loads Slacker's YCSB
usertable through the proxy, measures the workload's baseline latency, then migrates the tenant
live while the workload runs. The source agent's control loop sets the migration's speed every
second from the latency the proxy measures, to hold it at --setpoint (default: twice the
baseline). It ends by checking every acknowledged write on the new server, row by row, and writes
summary.json, loop.csv and demo.png into --out. ` + "`sluice sim demo`" + ` shows the same loop on the simulator.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var err error
			if o.Size, err = units.ParseBytes(size); err != nil {
				return cli.Usagef("demo: --size: %v", err)
			}
			if o.MaxRate, err = units.ParseRate(maxRate); err != nil {
				return cli.Usagef("demo: --max-rate: %v", err)
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
			fmt.Fprintf(w, "\nsetpoint %.1f ms; baseline mean latency %.1f ms; during the migration %.1f ms\n", res.SetpointMs, res.BaselineMeanLatencyMs, res.AchievedMeanLatencyMs)
			fmt.Fprintf(w, "migrated %s in %.1f s (%s mean); handover freeze %.0f ms\n", units.FormatBytes(float64(res.BytesCopied)), res.MigrationSeconds,
				units.FormatRate(float64(res.BytesCopied)/res.MigrationSeconds), res.FreezeMs)
			fmt.Fprintf(w, "writes acknowledged %d, missing %d, duplicated %d\n", res.WritesAcknowledged, res.WritesMissing, res.WritesDuplicated)
			fmt.Fprintf(w, "plot: %s\n", filepath.Join(o.Out, "demo.png"))
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.Out, "out", filepath.Join("out", "demo"), "directory for summary.json, loop.csv and demo.png")
	f.StringVar(&size, "size", "200MB", "tenant data to load and migrate")
	f.StringVar(&sp, "setpoint", "", "latency to hold during the migration (default: 2 × the measured baseline)")
	f.StringVar(&maxRate, "max-rate", "100MB/s", "the migration's top speed")
	f.Float64Var(&o.TxRate, "tps", 200, "workload arrivals per second")
	f.IntVar(&o.MPL, "mpl", 8, "workload connections")
	f.StringVar(&o.Controller, "controller", "pid", "controller: pid, fixed (at --max-rate) or integral")
	f.Uint64Var(&o.Seed, "seed", 1, "seed for data, arrivals and keys")
	f.BoolVar(&asJSON, "json", false, "print only the final figures, as JSON")
	Demo = cmd
}
