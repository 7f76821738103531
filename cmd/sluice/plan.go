package main

import (
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/sluicedb/sluice/agent/client"
	"github.com/sluicedb/sluice/internal/cli"
	"github.com/sluicedb/sluice/internal/units"
	"github.com/sluicedb/sluice/plan"
)

// planFlags are the plan command's persistent flags.
type planFlags struct {
	agentURL string
	asJSON   bool
}

func init() {
	var f planFlags
	pc := &cobra.Command{
		Use:   "plan",
		Short: "Run a migration plan: many tenant moves between agents under per-store latency contracts (Aqueduct)",
		Long: `A plan is a list of moves of tenants between agents and of key ranges between
a keyspace's partitions (JSON or YAML):

  moves:
    - {tenant: acme, to: db2}
    - {tenant: 7, from: db1, to: db3}
    - {keyspace: shop, table: orders, range: "[5000,8000)", to: p3}
  contracts_ms: {acme: 20}     # per store (tenant); default: its server's contract_ms, else 10
  method: integral             # integral (default), pid, sub-store, whole-store
  sub_move_bytes: 33554432     # 32 MB, Aqueduct's sub-move
  k: 0                         # integral gain from 'sluice tune --live'; 0 = a first guess
  max_rate: 0                  # top aggregate speed, bytes/s; 0 = the control profile's

The agent it is applied to (--agent) drives it: each move is a live migration
started on its source agent; several run at once where they share no server, one
per server at a time, moves out of a server that others fill first, the largest
first. Every step the control loop reads the proxy's latency of every tenant on
every server the plan touches and sets the moving snapshots' rate from the worst
store's error against its contract (integral: Aqueduct; pid: Slacker). A key-range
move is a live reconfiguration of its keyspace (as 'sluice keyspace reconfigure')
whose pulls the same loop paces; a keyspace's moves run one at a time, in the
plan's order, and its partitions' tenants are stores like any. The plan is kept in
the agent's catalog: a restarted agent resumes it.`,
	}
	pc.PersistentFlags().StringVar(&f.agentURL, "agent", "", "agent API URL (default $SLUICE_AGENT or "+defaultAgentURL+")")
	pc.PersistentFlags().BoolVar(&f.asJSON, "json", false, "print the result as JSON")
	pc.PersistentFlags().StringVar(&tokenFile, "token-file", "", tokenFileUsage)
	pc.AddCommand(planApplyCmd(&f), planShowCmd(&f), planOpCmd(&f, "pause", "Hold a plan's moving snapshots and start no move"),
		planOpCmd(&f, "resume", "Resume a paused plan"), planOpCmd(&f, "abort", "Roll back a plan's running moves and start no more"))
	root.AddCommand(pc)
}

func planApplyCmd(f *planFlags) *cobra.Command {
	var detach bool
	cmd := &cobra.Command{
		Use:   "apply FILE",
		Short: "Validate a plan and run it, printing progress until it ends",
		Long: `Validates the plan against the agents' tenants and keyspaces — an unknown tenant,
agent, keyspace or partition, a move to the tenant's own server, a tenant in two
moves, keys that are their destination's already or lie in several partitions are
refused with exit 2 and nothing changes — then runs it, printing per move and in total the bytes moved,
the rate and the ETA every few seconds. --detach returns once it has started; the
plan runs on in the agent ('sluice plan show ID').`,
		Example: `  sluice plan apply rebalance.yaml
  sluice plan apply rebalance.json --detach --json`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			b, err := os.ReadFile(args[0])
			if err != nil {
				return cli.Usagef("plan apply: %v", err)
			}
			spec, err := plan.Parse(b)
			if err != nil {
				return cli.Usagef("plan apply: %s: %v", args[0], err)
			}
			c, err := agentClient(f.agentURL)
			if err != nil {
				return err
			}
			st, err := c.ApplyPlan(cmd.Context(), spec)
			if err != nil {
				return agentErr("plan apply", err)
			}
			return followPlan(cmd, c, f, st, detach)
		},
	}
	cmd.Flags().BoolVar(&detach, "detach", false, "return once the plan has started")
	return cmd
}

func planShowCmd(f *planFlags) *cobra.Command {
	return &cobra.Command{
		Use:   "show [ID]",
		Short: "Show a plan (without ID: every plan the agent drives or drove)",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := agentClient(f.agentURL)
			if err != nil {
				return err
			}
			if len(args) == 0 {
				ps, err := c.Plans(cmd.Context())
				if err != nil {
					return agentErr("plan show", err)
				}
				if f.asJSON {
					return cli.WriteJSON(cmd.OutOrStdout(), ps)
				}
				for _, st := range ps {
					fmt.Fprintln(cmd.OutOrStdout(), planTotalLine(st))
				}
				return nil
			}
			st, err := c.Plan(cmd.Context(), args[0])
			if err != nil {
				return agentErr("plan show", err)
			}
			return printMigrationPlan(cmd.OutOrStdout(), st, f.asJSON)
		},
	}
}

func planOpCmd(f *planFlags, op, short string) *cobra.Command {
	return &cobra.Command{
		Use:   op + " ID",
		Short: short,
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := agentClient(f.agentURL)
			if err != nil {
				return err
			}
			st, err := c.PlanOp(cmd.Context(), args[0], op)
			if err != nil {
				return agentErr("plan "+op, err)
			}
			return printMigrationPlan(cmd.OutOrStdout(), st, f.asJSON)
		},
	}
}

// followPlan prints the plan's progress every 2 s until it ends (or at
// once with detach), then its final state; a plan not done is exit 1.
func followPlan(cmd *cobra.Command, c *client.Client, f *planFlags, st client.PlanStatus, detach bool) error {
	out := cmd.OutOrStdout()
	if !f.asJSON {
		fmt.Fprintf(out, "plan %s: %d moves, %d stores watched, method %s\n", st.ID, len(st.Moves), len(st.Stores), st.Method)
	}
	for !detach && !st.State.Final() {
		select {
		case <-cmd.Context().Done():
			return cmd.Context().Err()
		case <-time.After(2 * time.Second):
		}
		next, err := c.Plan(cmd.Context(), st.ID)
		if err != nil {
			return fmt.Errorf("plan apply: following %s: %w", st.ID, err)
		}
		st = next
		if !f.asJSON {
			fmt.Fprintln(out, "  "+planTotalLine(st))
			for i, m := range st.Moves {
				if m.Status == plan.Running {
					fmt.Fprintln(out, "  "+planMoveLine(st, i))
				}
			}
		}
	}
	if err := printMigrationPlan(out, st, f.asJSON); err != nil {
		return err
	}
	if st.State == plan.StateFailed || st.State == plan.StateAborted {
		return fmt.Errorf("plan apply: plan %s %s", st.ID, st.State)
	}
	return nil
}

func planTotalLine(st client.PlanStatus) string {
	t := plan.Sum(st.Plan)
	s := fmt.Sprintf("%s %s  moves %d done, %d running, %d pending, %d failed  %s of %s", st.ID, st.State, t.Done, t.Running, t.Pending, t.Failed,
		units.FormatBytes(float64(st.MovedBytes)), units.FormatBytes(float64(st.Bytes)))
	if st.MeasuredRate > 0 {
		s += "  " + units.FormatRate(st.MeasuredRate)
	}
	switch {
	case st.Rate < 0:
		s += "  limit none"
	case st.Live:
		s += "  limit " + units.FormatRate(st.Rate)
	}
	if st.ETASeconds > 0 {
		s += fmt.Sprintf("  eta %.0fs", st.ETASeconds)
	}
	if st.Worst != "" {
		s += fmt.Sprintf("  worst %s %.1fms (contract %.0fms)", st.Worst, st.WorstLatencyMs, st.WorstContractMs)
	}
	return s
}

// planMoveLine is move i's line: tenant (or keys and partitions), servers,
// status, bytes, and while it runs its migration's (or reconfiguration's)
// phase, rate and ETA.
func planMoveLine(st client.PlanStatus, i int) string {
	m := st.Moves[i]
	what := m.What()
	if m.IsRange() {
		what += fmt.Sprintf(" %s → %s,", m.Source, m.Dest)
	}
	line := fmt.Sprintf("  move %d  %-12s %s → %s  %-8s %s of %s", i+1, what, m.From, m.To, m.Status,
		units.FormatBytes(float64(m.Moved)), units.FormatBytes(float64(m.Bytes)))
	if l, ok := st.MoveLive[i]; ok && m.Status == plan.Running {
		line += fmt.Sprintf("  %s %s", l.Phase, units.FormatRate(l.Rate))
		if l.ETASeconds > 0 {
			line += fmt.Sprintf(" eta %.0fs", l.ETASeconds)
		}
	}
	if m.Error != "" {
		line += "  error: " + m.Error
	}
	return line
}

func printMigrationPlan(out io.Writer, st client.PlanStatus, asJSON bool) error {
	if asJSON {
		return cli.WriteJSON(out, st)
	}
	fmt.Fprintln(out, planTotalLine(st))
	for i := range st.Moves {
		fmt.Fprintln(out, planMoveLine(st, i))
	}
	var stores []string
	for _, s := range st.Stores {
		stores = append(stores, fmt.Sprintf("%s@%s %gms", s.Name, s.Agent, s.ContractMs))
	}
	slices.Sort(stores)
	fmt.Fprintln(out, "  contracts: "+strings.Join(stores, ", "))
	return nil
}
