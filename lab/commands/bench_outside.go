package commands

import (
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/sluicedb/sluice/internal/cli"
	"github.com/sluicedb/sluice/lab/experiment"
	"github.com/sluicedb/sluice/lab/outside"
)

func init() {
	var (
		o      outside.Options
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "outside",
		Short: "Judge a default migration from outside: pgbench's own log through the proxy, unthrottled against a setpoint",
		Long: `outside starts two sluice agents and a sluice proxy as processes, loads a pgbench tenant,
measures pgbench's idle latency through the proxy, then, while pgbench -R … -l runs through
the proxy, migrates the tenant with sluice migrate twice: unthrottled, then with
--setpoint at --factor × the idle mean and nothing else (the default profile). The
clients' latency during each migration is read from pgbench's own per-transaction log.
It passes when the controlled migration's clients' mean is within ±10 % of the setpoint,
or, where even the unthrottled copy stays under the setpoint, when the controlled one is
no slower than 1.2 × the unthrottled one. Writes summary.json, report.md, clients.csv and
outside.png into --out.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := o.Check(); err != nil {
				return cli.Usagef("bench outside: %v", strings.TrimPrefix(err.Error(), "outside: "))
			}
			if !asJSON {
				o.Progress = func(format string, args ...any) {
					fmt.Fprintf(cmd.ErrOrStderr(), "%s "+format+"\n", append([]any{time.Now().Format("15:04:05")}, args...)...)
				}
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt)
			defer stop()
			res, err := outside.Run(ctx, o, "sluice "+strings.Join(os.Args[1:], " "), experiment.Machine())
			if err != nil {
				return err
			}
			if asJSON {
				return cli.WriteJSON(cmd.OutOrStdout(), res)
			}
			b, err := os.ReadFile(filepath.Join(o.Out, "report.md"))
			if err != nil {
				return err
			}
			_, err = cmd.OutOrStdout().Write(b)
			return err
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.Out, "out", filepath.Join("out", "bench", "outside"), "output directory")
	f.IntVar(&o.Scale, "scale", 44, "pgbench scale factor (44: about 660 MB)")
	f.IntVar(&o.Clients, "clients", 4, "pgbench clients (-c)")
	f.IntVar(&o.Threads, "threads", 2, "pgbench threads (-j)")
	f.Float64Var(&o.Rate, "tps", 50, "pgbench's schedule, transactions/s (-R)")
	f.Float64Var(&o.Factor, "factor", 2.5, "the setpoint as a multiple of the idle mean latency")
	f.DurationVar(&o.Idle, "idle", 20*time.Second, "the idle measurement's length")
	f.IntVar(&o.Rounds, "rounds", 1, "pairs of migrations (unthrottled, then at the setpoint), moving the tenant back and forth")
	f.BoolVar(&asJSON, "json", false, "print the summary as JSON")
	benchCmd.AddCommand(cmd)
}
