package commands

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/sluicedb/sluice/internal/cli"
	"github.com/sluicedb/sluice/internal/units"
	"github.com/sluicedb/sluice/lab/experiment"
	"github.com/sluicedb/sluice/lab/testbed"
)

func init() {
	var f loopFlags
	var rates, setpoints, swing string
	var paired bool
	var rounds int
	var steal stealFlags
	cmd := &cobra.Command{
		Use:   "slack-sweep [--out DIR] [--json]",
		Short: "Slacker Fig. 11: fixed rates vs PID setpoints, latency and migration time",
		Long: `Starts two cgroup-limited servers (agent + tenant postmasters in one cgroup: CPU
quota, memory cap with the page cache, read bandwidth cap), loads a tenant
(Slacker's YCSB usertable, 1 GB by default), measures the workload's baseline,
then migrates the tenant back and forth under the workload: once per fixed rate
(--fixed-rates) and once per PID setpoint (--setpoints: durations, or multiples
of the baseline mean latency such as 2.5x). The PID runs
the product's loop, --profile (default sluice, what ` + "`sluice migrate --setpoint`" + `
runs); each --variant runs every setpoint again with another loop, right
after it on the same plant. Every migration's acknowledged writes are checked
row by row. Writes series.csv, summary.json, report.md and PNG plots to --out.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			bo, c, err := f.parse("slack-sweep", cmd)
			if err != nil {
				return err
			}
			o := experiment.SweepOptions{Common: c, Paired: paired, Rounds: rounds}
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
			if rounds < 1 || rounds > experiment.MaxRounds {
				return cli.Usagef("bench slack-sweep: --rounds %d: want 1 to %d", rounds, experiment.MaxRounds)
			}
			if o.Load, err = parseSwing(swing); err != nil {
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
	f.register(cmd.Flags(), "slack-sweep", sweepBed)
	cmd.Flags().StringVar(&rates, "fixed-rates", "", "fixed migration rates, comma-separated; default "+rateList(experiment.DefaultFixedRates))
	cmd.Flags().StringVar(&setpoints, "setpoints", "", "PID setpoints, comma-separated: durations (20ms,40ms) or multiples of the settled baseline's mean latency; default "+factorList(experiment.DefaultSetpointFactors))
	cmd.Flags().BoolVar(&paired, "paired", false, "after each PID trial of --profile's loop, a fixed-rate trial at that trial's copy rate, run right after it (the pair meets the same plant; reported side by side)")
	cmd.Flags().IntVar(&rounds, "rounds", 1, "run the whole order of trials (both ladders, the variants, the pairs) this many times on the one loaded tenant; with --paired the pairs of every round are summed up together")
	cmd.Flags().StringVar(&swing, "swing", "", "swing the arrival rate during every migration: AMPLITUDE% or AMPLITUDE%/PERIOD (40%/1m: --tps × 1.4 for half a period, then × 0.6, from the migration's start; the period defaults to 1m); empty = a steady load")
	steal.register(cmd.Flags(), sweepBed)
	benchCmd.AddCommand(cmd)
}

// parseSwing parses --swing: a percentage in (0, 100), optionally with the
// swing's period after a slash (default a minute); "" is a steady load.
func parseSwing(s string) (experiment.Schedule, error) {
	if s == "" {
		return experiment.Schedule{}, nil
	}
	amp, per, hasPeriod := strings.Cut(s, "/")
	v, err := strconv.ParseFloat(strings.TrimSuffix(amp, "%"), 64)
	if err != nil || !strings.HasSuffix(amp, "%") || !(v > 0 && v < 100) {
		return experiment.Schedule{}, fmt.Errorf("--swing %q: want a percentage of the arrival rate above 0 and under 100, with an optional period (40%% or 40%%/2m)", s)
	}
	period := time.Minute
	if hasPeriod {
		if period, err = time.ParseDuration(per); err != nil || period < 2*time.Second {
			return experiment.Schedule{}, fmt.Errorf("--swing %q: want a period of at least 2s after the slash (the control loop steps once a second)", s)
		}
	}
	return experiment.Swing(period, v/100), nil
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

// stealFlags are the host-steal guard's flags (experiment.StealGuard) of
// slack-sweep and step40.
type stealFlags struct {
	limit   float64 // percent
	retries int
	abort   bool
	fs      *pflag.FlagSet
}

func (s *stealFlags) register(fs *pflag.FlagSet, b bed) {
	s.fs = fs
	fs.Float64Var(&s.limit, "steal-limit", b.stealLimit, "re-run a trial in which the host's steal went above this percentage over some 10 s of its migration (a shared machine's burst slows the whole plant whatever the rate); every attempt is reported; 0 = off")
	fs.IntVar(&s.retries, "steal-retries", experiment.DefaultStealRetries, "with --steal-limit: re-runs a disturbed trial gets before it is kept, marked disturbed")
	fs.BoolVar(&s.abort, "steal-abort", b.stealLimit > 0, "with --steal-limit: abort a trial's migration (roll back, tenant stays on its source) as soon as its steal goes above the limit, while it has a re-run left, instead of letting it finish")
}

// parse checks the flags of bench name and returns the guard they set.
func (s *stealFlags) parse(name string) (experiment.StealGuard, error) {
	switch {
	case !(s.limit >= 0 && s.limit < 100):
		return experiment.StealGuard{}, cli.Usagef("bench %s: --steal-limit: %v: want a percentage in [0, 100) (0 = off)", name, s.limit)
	case s.retries < 1 || s.retries > 10:
		return experiment.StealGuard{}, cli.Usagef("bench %s: --steal-retries: %d: want 1 to 10", name, s.retries)
	case s.abort && s.limit == 0 && s.fs.Changed("steal-abort"):
		return experiment.StealGuard{}, cli.Usagef("bench %s: --steal-abort needs --steal-limit", name)
	case s.limit == 0:
		s.abort = false // off with the limit it goes with
	}
	return experiment.StealGuard{StealLimit: s.limit / 100, StealRetries: s.retries, StealAbort: s.abort}, nil
}

// rateList and factorList print a default list as the flags take it.
func rateList(xs []float64) string {
	var out []string
	for _, x := range xs {
		out = append(out, units.FormatRate(x))
	}
	return strings.Join(out, ",")
}

func factorList(xs []float64) string {
	var out []string
	for _, x := range xs {
		out = append(out, strconv.FormatFloat(x, 'f', -1, 64)+"x")
	}
	return strings.Join(out, ",")
}
