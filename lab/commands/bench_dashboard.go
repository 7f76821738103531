package commands

import (
	"context"
	"time"

	"github.com/spf13/cobra"

	"github.com/sluicedb/sluice/internal/cli"
	"github.com/sluicedb/sluice/lab/experiment"
	"github.com/sluicedb/sluice/lab/testbed"
)

// dashBed is bench dashboard's bed: a tenant small enough that a migration
// takes tens of seconds on a 0.5-core server.
var dashBed = bed{size: "512MB", memoryMB: 1024, mpl: experiment.DefaultMPL, cpus: 0.5, tps: 100}

func init() {
	var f loopFlags
	var pairs int
	var poll time.Duration
	var shot string
	cmd := &cobra.Command{
		Use:   "dashboard [--out DIR] [--json]",
		Short: "The operator's page and /metrics: answer times during migrations, and what serving them costs a migration",
		Long: `On two cgroup-limited servers (see slack-sweep), loads a tenant (--size), runs
a workload on it (--tps), then moves it back and forth unthrottled --pairs times
twice: in each pair one migration runs with a poller on the source agent and one
without, in ABBA order. An unthrottled copy takes whatever CPU the source's quota
leaves, so anything the agent serves meanwhile would slow it. The poller asks,
every --poll, what an open dashboard page and a Prometheus scrape ask: GET
/v1/overview, the running migration's GET …/series?since=T, and GET /metrics.

Then it moves the tenant once more as the product does by default, under the PID
(--profile, --max-rate) at the demo's setpoint rule over the proxy's window before it, with
the poller. Reports each endpoint's p50, p99 and max answer time during the
unthrottled migrations (the worst case) and during the controlled one (target:
p99 under 50 ms), and the unthrottled migration times with and without the
poller against the spread of those without. --screenshot FILE saves the page
(headless chromium) 80 % into the controlled migration's copy.
Writes requests.csv, summary.json, report.md and dashboard.png. Every
acknowledged write is checked on the final owner.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			bo, c, err := f.parse("dashboard", cmd)
			if err != nil {
				return err
			}
			switch {
			case pairs < 1 || pairs > 20:
				return cli.Usagef("bench dashboard: --pairs must be in 1..20")
			case poll < 10*time.Millisecond || poll > time.Minute:
				return cli.Usagef("bench dashboard: --poll %v: want 10ms..1m", poll)
			}
			o := experiment.DashboardOptions{Common: c, Pairs: pairs, Poll: poll, Screenshot: shot}
			return runOnBed(cmd, &f, bo, func(ctx context.Context, bed *testbed.Bed) (any, error) {
				return experiment.Dashboard(ctx, bed, o)
			})
		},
	}
	f.register(cmd.Flags(), "dashboard", dashBed)
	cmd.Flags().IntVar(&pairs, "pairs", 2, "pairs of migrations (one with the poller, one without)")
	cmd.Flags().DurationVar(&poll, "poll", 100*time.Millisecond, "the poller's period (an open page polls each second)")
	cmd.Flags().StringVar(&shot, "screenshot", "", "save the page, taken during one more migration under the PID, as this PNG (needs chromium)")
	benchCmd.AddCommand(cmd)
}
