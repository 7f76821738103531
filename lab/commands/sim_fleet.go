package commands

import (
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/sluicedb/sluice/internal/cli"
	"github.com/sluicedb/sluice/internal/units"
	"github.com/sluicedb/sluice/lab/sim/fleet"
)

// fleetFlags are `sluice sim fleet`'s flags.
type fleetFlags struct {
	servers int
	tenants int
	seed    uint64
	target  float64
	variant string
	out     string
	json    bool
}

var fleetF fleetFlags

var simFleetCmd = &cobra.Command{
	Use:   "fleet",
	Short: "Rebalance a simulated fleet (1,000 servers, 10,000 tenants) under per-server integral controllers",
	Long: `fleet draws a fleet of servers and tenants of skewed sizes and loads (deterministic from
--seed), asks sluice's rebalancing planner (plan/rebalance) to move tenants off the servers
above --target onto servers with headroom, and executes the plan in virtual time: moves in
32 MiB sub-moves, several at once where they share no server, each at the lower of its two
servers' rates, each server's rate set by its own integral controller (Aqueduct) on its
worst store against that store's contract. Each server is a fluid queue stepped in 1 s
windows (see package lab/sim/fleet for the model).

It reports the plan's virtual duration, the oracle's (the same plan and start rule with
every move at the rate that puts both its servers' tightest store exactly at its contract,
knowing every server's load as it happens), the worst server's violation fraction (the
share of its 1 s windows during its moves with some store over its contract), and the
moves' count and bytes. --json prints servers, tenants, moves, bytes, plan_seconds,
oracle_seconds and worst_violation_fraction.

--variant changes the controllers for an experiment: p=F (the integral's reference
fraction of each contract, default 0.9) and pole=F (the pole K is tuned for, default 0.7),
comma-separated.

--out DIR writes series.csv (the plan and the oracle second by second: moves running, the
fleet's rate, servers over a contract), worst.csv (the worst server's seconds), summary.json
(every figure), report.md and fleet.png.`,
	Example: `  sluice sim fleet
  sluice sim fleet --seed 2 --json
  sluice sim fleet --servers 100 --tenants 1000 --variant p=0.85`,
	Args: cobra.NoArgs,
	RunE: func(cmd *cobra.Command, _ []string) error { return runSimFleet(cmd, fleetF) },
}

func init() {
	f := simFleetCmd.Flags()
	f.IntVar(&fleetF.servers, "servers", fleet.DefaultServers, "servers in the fleet")
	f.IntVar(&fleetF.tenants, "tenants", fleet.DefaultTenants, "tenants in the fleet")
	f.Uint64Var(&fleetF.seed, "seed", 1, "random seed: same seed, same fleet and result")
	f.Float64Var(&fleetF.target, "target", fleet.DefaultTarget, "load target: the share of a server's capacity above which it sheds tenants, in (0, 1]")
	f.StringVar(&fleetF.variant, "variant", "", "controller experiment: p=F,pole=F")
	f.StringVar(&fleetF.out, "out", "", "directory to write series.csv, worst.csv, summary.json, report.md and fleet.png into")
	f.BoolVar(&fleetF.json, "json", false, "print the figures as one JSON object")
	simCmd.AddCommand(simFleetCmd)
}

// fleetJSON is `sluice sim fleet --json`.
type fleetJSON struct {
	Servers                int     `json:"servers"`
	Tenants                int     `json:"tenants"`
	Moves                  int     `json:"moves"`
	Bytes                  int64   `json:"bytes"`
	PlanSeconds            float64 `json:"plan_seconds"`
	OracleSeconds          float64 `json:"oracle_seconds"`
	WorstViolationFraction float64 `json:"worst_violation_fraction"`
}

func runSimFleet(cmd *cobra.Command, f fleetFlags) error {
	c := fleet.Config{Servers: f.servers, Tenants: f.tenants, Seed: f.seed, Target: f.target}
	if f.servers < 2 || f.tenants < 1 { // 0 would mean the default to fleet.Config
		return cli.Usagef("sim fleet: want at least 2 servers and 1 tenant, got --servers %d --tenants %d", f.servers, f.tenants)
	}
	if !(f.target > 0 && f.target <= 1) {
		return cli.Usagef("sim fleet: --target must be in (0, 1], got %v", f.target)
	}
	if err := fleetVariant(f.variant, &c); err != nil {
		return err
	}
	if f.out != "" {
		if err := simCheckParentDir("out", filepath.Clean(f.out)); err != nil {
			return err
		}
	}
	fl, err := fleet.Generate(c)
	if err != nil {
		return cli.Usagef("sim %v", err)
	}
	plan, err := fl.Plan()
	if err != nil {
		return fmt.Errorf("sim fleet: %w", err)
	}
	r, err := fleet.Run(fl, plan)
	if err != nil {
		return fmt.Errorf("sim %w", err)
	}
	out := cmd.OutOrStdout()
	j := fleetJSON{
		Servers: r.Servers, Tenants: r.Tenants, Moves: r.Moves, Bytes: r.Bytes,
		PlanSeconds: round3(r.PlanSeconds), OracleSeconds: round3(r.OracleSeconds), WorstViolationFraction: round3(r.WorstViolation),
	}
	if f.out != "" {
		if err := writeFleetFiles(f.out, fl.Config, r, j); err != nil {
			return err
		}
	}
	if f.json {
		return cli.WriteJSON(out, j)
	}
	printFleet(out, fl.Config, r)
	return nil
}

// fleetVariant applies --variant's p= and pole= to c; bad input is a usage
// error naming the key.
func fleetVariant(v string, c *fleet.Config) error {
	if strings.TrimSpace(v) == "" {
		return nil
	}
	for _, kv := range strings.Split(v, ",") {
		k, val, ok := strings.Cut(strings.TrimSpace(kv), "=")
		x, err := strconv.ParseFloat(val, 64)
		if !ok || err != nil {
			return cli.Usagef("sim fleet: --variant %q: want key=number", kv)
		}
		switch k {
		case "p":
			if !(x > 0 && x <= 1) {
				return cli.Usagef("sim fleet: --variant p must be in (0, 1], got %v", x)
			}
			c.P = x
		case "pole":
			if !(x > -1 && x < 1) {
				return cli.Usagef("sim fleet: --variant pole must be in (-1, 1), got %v", x)
			}
			c.Pole = x
		default:
			return cli.Usagef("sim fleet: --variant: unknown key %q (want p or pole)", k)
		}
	}
	return nil
}

func printFleet(w io.Writer, c fleet.Config, r fleet.Result) {
	done := "completed"
	if !r.Completed {
		done = "NOT completed (time limit)"
	}
	fmt.Fprintf(w, "fleet: %d servers, %d tenants, seed %d; load target %.2f; integral P %.2f, pole %.2f\n",
		r.Servers, r.Tenants, c.Seed, c.Target, c.P, c.Pole)
	fmt.Fprintf(w, "plan: %d moves, %s in %d sub-moves; %d servers left over the target\n",
		r.Moves, units.FormatBytes(float64(r.Bytes)), r.SubMoves, r.Over)
	fmt.Fprintf(w, "plan %s in %.0f s of virtual time (%.1f min), up to %d moves at once, %s per move on average\n",
		done, r.PlanSeconds, r.PlanSeconds/60, r.MaxConcurrent, units.FormatRate(r.MeanRate))
	fmt.Fprintf(w, "oracle (perfect knowledge, every contract at 100%%): %.0f s; plan = %.3f × the oracle\n",
		r.OracleSeconds, r.PlanSeconds/math.Max(r.OracleSeconds, 1e-9))
	fmt.Fprintf(w, "1 s windows over contract during moves: worst server %.1f%% (%s), all moving servers %.2f%%; servers without moves %.1f%%\n",
		100*r.WorstViolation, r.WorstServer, 100*r.MeanViolation, 100*r.BystanderViolation)
}

// fleetDetailJSON is summary.json: the --json figures and the rest.
type fleetDetailJSON struct {
	fleetJSON
	Seed                       uint64  `json:"seed"`
	Target                     float64 `json:"target"`
	P                          float64 `json:"p"`
	Pole                       float64 `json:"pole"`
	SubMoves                   int     `json:"sub_moves"`
	LeftOver                   int     `json:"servers_left_over"`
	Completed                  bool    `json:"completed"`
	PlanOverOracle             float64 `json:"plan_over_oracle"`
	WorstServer                string  `json:"worst_server"`
	MovingViolationFraction    float64 `json:"moving_servers_violation_fraction"`
	BystanderViolationFraction float64 `json:"bystander_violation_fraction"`
	MaxConcurrent              int     `json:"max_concurrent_moves"`
	MeanRate                   float64 `json:"mean_rate_per_move"`
}

// writeFleetFiles writes --out's files.
func writeFleetFiles(dir string, c fleet.Config, r fleet.Result, j fleetJSON) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("sim fleet: --out: %w", err)
	}
	d := fleetDetailJSON{
		fleetJSON: j, Seed: c.Seed, Target: c.Target, P: c.P, Pole: c.Pole, SubMoves: r.SubMoves, LeftOver: r.Over,
		Completed: r.Completed, PlanOverOracle: round3(r.PlanSeconds / r.OracleSeconds), WorstServer: r.WorstServer,
		MovingViolationFraction: round3(r.MeanViolation), BystanderViolationFraction: round3(r.BystanderViolation),
		MaxConcurrent: r.MaxConcurrent, MeanRate: math.Round(r.MeanRate),
	}
	for name, fill := range map[string]func(io.Writer) error{
		"series.csv":   func(w io.Writer) error { return fleet.WriteSeriesCSV(w, r) },
		"worst.csv":    func(w io.Writer) error { return fleet.WriteWorstCSV(w, r) },
		"summary.json": func(w io.Writer) error { return cli.WriteJSON(w, d) },
		"report.md":    func(w io.Writer) error { return fleet.WriteReport(w, r, c, "fleet.png") },
		"fleet.png":    func(w io.Writer) error { return fleet.WritePNG(w, r, c) },
	} {
		if err := simWriteFile(filepath.Join(dir, name), fill); err != nil {
			return err
		}
	}
	return nil
}
