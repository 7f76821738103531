package commands

import (
	"context"

	"github.com/spf13/cobra"

	"github.com/sluicedb/sluice/internal/cli"
	"github.com/sluicedb/sluice/lab/experiment"
	"github.com/sluicedb/sluice/lab/testbed"
)

func init() {
	var f loopFlags
	var setpoint string
	var tenants int
	cmd := &cobra.Command{
		Use:   "multitenant [--out DIR] [--json]",
		Short: "Slacker Fig. 13b: five tenants on a server, one moves under the PID, server-wide latency",
		Long: `On two cgroup-limited servers (see slack-sweep), loads --tenants tenants on the
first (--size in all), runs a workload on each (--tps in all), measures the
server-wide baseline, then moves one tenant under the PID (--profile's loop),
whose process variable is the worst tenant's latency window on either server.
Each --variant moves it again (back first, unpaced and without load) with its
loop. Reports the server-wide and per-tenant mean latency during each
migration against the setpoint. Writes series.csv, summary.json, report.md
and multitenant.png.`,
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
	f.register(cmd.Flags(), "multitenant", multiBed)
	cmd.Flags().StringVar(&setpoint, "setpoint", "", "PID setpoint (e.g. 40ms); default 3 × the baseline server-wide mean latency")
	cmd.Flags().IntVar(&tenants, "tenants", 5, "tenants on the source server (one moves)")
	benchCmd.AddCommand(cmd)
}
