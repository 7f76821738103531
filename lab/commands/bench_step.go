package commands

import (
	"context"
	"math"
	"time"

	"github.com/spf13/cobra"

	"github.com/sluicedb/sluice/internal/cli"
	"github.com/sluicedb/sluice/lab/experiment"
	"github.com/sluicedb/sluice/lab/testbed"
)

func init() {
	var f loopFlags
	var setpoint, after string
	var factor float64
	var steal stealFlags
	cmd := &cobra.Command{
		Use:   "step40 [--out DIR] [--json]",
		Short: "Slacker Fig. 13a: +40% arrivals during the migration, PID vs the fixed rate of equal speed",
		Long: `On two cgroup-limited servers (see slack-sweep), migrates a tenant under the PID
(--profile's loop) while the workload's arrival rate steps up by --factor
(+40 %) --step-after into the migration; then migrates it back at a fixed rate
equal to the PID's mean rate before the step, with the same step. The PID
slows down and returns to its setpoint; the fixed rate does not. Each
--variant runs such a pair again with its loop. --tps is the load after the
step (by default 210, so 150 before it: the bed carries 150 with slack and
210 without); before the step the workload runs at --tps ÷ --factor. Before the trials it measures the stepped load's latency without
a migration (baseline_after_step_ms): a setpoint under it cannot be held
after the step. Writes series.csv, summary.json, report.md and step.png to
--out.`,
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
	f.register(cmd.Flags(), "step40", stepBed)
	cmd.Flags().StringVar(&setpoint, "setpoint", "", "PID setpoint (e.g. 40ms); default 3 × the baseline mean latency")
	cmd.Flags().StringVar(&after, "step-after", "20s", "when the arrival rate steps up, after the migration starts (Slacker: a minute; the bed's 3 GB copy lasts 80–110 s, and the fixed trial, at the PID's pre-step speed, must still be copying well after it)")
	cmd.Flags().Float64Var(&factor, "factor", 1.4, "arrival rate multiplier at the step")
	tps := cmd.Flags().Lookup("tps")
	tps.Usage = "workload arrivals per second after the step (Poisson); before it, this ÷ --factor"
	steal.register(cmd.Flags(), stepBed)
	benchCmd.AddCommand(cmd)
}
