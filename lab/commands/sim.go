package commands

import (
	"fmt"
	"io"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/sluicedb/sluice/control"
	"github.com/sluicedb/sluice/internal/cli"
	"github.com/sluicedb/sluice/internal/units"
	"github.com/sluicedb/sluice/lab/sim"
)

// simFlags are the flags `sluice sim` and `sluice sim sweep` share.
type simFlags struct {
	scenario   string
	controller string
	setpoint   string
	contract   string
	rate       string
	seed       uint64
	json       bool
	out        string
	png        string
	k          float64
	pole       float64
	steps      int
	window     string
	noise      float64
	profile    string
}

var simF simFlags

var simCmd = &cobra.Command{
	Use:   "sim",
	Short: "Run a controller against the simulated plant (virtual time, deterministic from --seed)",
	Long: `sim runs a migration on a simulated database server in virtual time and reports
how fast it moved and what it did to transaction latency (see package sim for the model).

Scenarios: ` + strings.Join(sim.ScenarioNames(), ", ") + `
Controllers: ` + strings.Join(sim.ControllerNames, ", ") + `

The PID runs a control profile, as sluice migrate does: the default (` + control.DefaultProfileName + `)
unless --profile names another built-in (` + strings.Join(control.Profiles(), ", ") + `) or a YAML/JSON
file naming a base and the fields it changes (docs/control.md). Every controller
runs inside a governor, as on an agent: the PID and the integral hold their initial
rate for the profile's settling time (settle_ms) after the first byte.

Without --json it prints a summary and an ASCII plot; --json prints one object with
scenario, controller, seed, setpoint_ms (pid and interference), idle_latency_ms, mean_latency_ms, p95_latency_ms,
p99_latency_ms, violation_fraction, migration_seconds, mean_rate (bytes/s) and completed.
Latency figures cover the time the migration ran; idle_latency_ms is the same workload
without a migration; violation_fraction is the share of 1 s windows whose mean latency
exceeds --contract (default: the setpoint; multitenant: each store's own contract, worst store).
--out DIR writes series.csv and summary.json, --png FILE a plot.

A flag the chosen controller does not use is refused, not ignored: --setpoint is the target
of pid and interference (the others are judged by --contract), --rate is fixed's, --k and
--pole are the integral's (--pole only when K is tuned, without --k), --profile is pid's,
--window and --noise are what a controller that steers by latency is shown. So is a
contract at or below some store's idle latency (no rate meets it); any contract above
works: the integral's profile refines its ladder of rates until it has points to fit.`,
	Example: `  sluice sim --scenario step40 --controller pid --setpoint 30ms
  sluice sim --scenario step40 --profile slacker
  sluice sim --scenario steady --controller fixed --rate 10MB/s --json
  sluice sim --scenario multitenant --controller integral --out out/mt --png out/mt.png`,
	Args: cobra.NoArgs,
	RunE: func(cmd *cobra.Command, _ []string) error { return runSim(cmd, simF) },
}

var simSweepCmd = &cobra.Command{
	Use:   "sweep",
	Short: "Find the fastest fixed rate that meets a setpoint and compare it with the PID",
	Long: `sweep runs a ladder of fixed rates (every 1/--steps of the plant's max rate, fastest
first, until one meets the setpoint: that is the best fixed rate) and the PID (the default
profile, or --profile's) on one scenario, and prints best_fixed_rate (bytes/s),
best_fixed_seconds, best_fixed_mean_latency_ms, pid_seconds and pid_mean_latency_ms.`,
	Example: `  sluice sim sweep --scenario bursty --setpoint 30ms --json`,
	Args:    cobra.NoArgs,
	RunE:    func(cmd *cobra.Command, _ []string) error { return runSweep(cmd, simF) },
}

func init() {
	for _, c := range []*cobra.Command{simCmd, simSweepCmd} {
		f := c.Flags()
		f.StringVar(&simF.scenario, "scenario", "steady", "scenario: "+strings.Join(sim.ScenarioNames(), ", "))
		f.StringVar(&simF.setpoint, "setpoint", "", "latency setpoint, e.g. 30ms (default: the scenario's)")
		f.Uint64Var(&simF.seed, "seed", 1, "random seed: same seed, same result")
		f.BoolVar(&simF.json, "json", false, "print the figures as one JSON object")
		f.StringVar(&simF.window, "window", sim.DefaultWindow.String(), "latency window the controller is shown, whole seconds (the proxy's: "+sim.DefaultWindow.String()+")")
		f.StringVar(&simF.profile, "profile", control.DefaultProfileName, "the PID's profile: "+strings.Join(control.Profiles(), ", ")+", or a YAML/JSON profile file")
		f.Float64Var(&simF.noise, "noise", sim.DefaultNoise, "relative measurement noise on the latency the controller sees (0 = exact)")
	}
	f := simCmd.Flags()
	f.StringVar(&simF.controller, "controller", "pid", "controller: "+strings.Join(sim.ControllerNames, ", "))
	f.StringVar(&simF.contract, "contract", "", "latency contract for violations, e.g. 33ms (default: the setpoint, or each store's)")
	f.StringVar(&simF.rate, "rate", "", "fixed controller's rate, e.g. 10MB/s (default: the plant's max, unthrottled)")
	f.StringVar(&simF.out, "out", "", "directory to write series.csv and summary.json into")
	f.StringVar(&simF.png, "png", "", "file to write a PNG plot of latency and rate to")
	f.Float64Var(&simF.k, "k", 0, "integral gain K, (bytes/s) per second of error (default: from the tune path)")
	f.Float64Var(&simF.pole, "pole", sim.DefaultPole, "integral: closed-loop pole the tuned K is chosen for, in (-1,1)")
	simSweepCmd.Flags().IntVar(&simF.steps, "steps", sim.DefaultSweepSteps, "ladder resolution: fixed rates at every max/steps")
	simCmd.AddCommand(simSweepCmd)
	Lab.AddCommand(simCmd)
}

// simSetup is a validated sim invocation.
type simSetup struct {
	scn  sim.Scenario
	opt  sim.Options
	ccfg sim.ControllerConfig
	prof control.Profile // the PID's
}

// parseSimFlags checks every flag before anything runs or is written.
func parseSimFlags(cmd *cobra.Command, f simFlags, withController bool) (simSetup, error) {
	var s simSetup
	scn, err := sim.Lookup(f.scenario)
	if err != nil {
		return s, cli.Usagef("sim: %v", err)
	}
	s.scn = scn
	s.opt = sim.Options{Seed: f.seed, Setpoint: scn.Setpoint, Noise: f.noise}
	if f.noise == 0 {
		s.opt.Noise = -1 // exact
	}
	if math.IsNaN(f.noise) || math.IsInf(f.noise, 0) || f.noise < 0 || f.noise > 1 {
		return s, cli.Usagef("sim: --noise must be in [0, 1], got %v", f.noise)
	}
	w, err := time.ParseDuration(strings.TrimSpace(f.window))
	if err != nil || w < time.Second || w%time.Second != 0 || w > time.Minute {
		return s, cli.Usagef("sim: --window %q: want whole seconds from 1s to 1m", f.window)
	}
	s.opt.Window = w
	if withController {
		if err := simFlagsUsed(cmd, f.controller); err != nil {
			return s, err
		}
	}
	if s.prof, err = simProfile(f.profile); err != nil {
		return s, err
	}
	s.opt.Step = s.prof.Step()
	if cmd.Flags().Changed("setpoint") {
		d, err := simParseLatency("setpoint", f.setpoint)
		if err != nil {
			return s, err
		}
		s.opt.Setpoint = d
	}
	if withController {
		if !slices.Contains(sim.ControllerNames, f.controller) {
			return s, cli.Usagef("sim: unknown controller %q (want one of %s)", f.controller, strings.Join(sim.ControllerNames, ", "))
		}
		if cmd.Flags().Changed("contract") {
			d, err := simParseLatency("contract", f.contract)
			if err != nil {
				return s, err
			}
			s.opt.Contract = d
		}
		s.ccfg = sim.ControllerConfig{Kind: f.controller, Setpoint: s.opt.Setpoint, Rate: -1, Profile: s.prof}
		if cmd.Flags().Changed("rate") {
			r, err := units.ParseRate(f.rate)
			if err != nil {
				return s, cli.Usagef("sim: --rate: %v", err)
			}
			if !math.IsInf(r, 1) && r > scn.Plant.MaxRate {
				return s, cli.Usagef("sim: --rate %s exceeds the plant's max rate %s", units.FormatRate(r), units.FormatRate(scn.Plant.MaxRate))
			}
			s.ccfg.Rate = r // 0 is legitimate: paused (the run then ends at the time limit)
		}
		if cmd.Flags().Changed("k") {
			if !(f.k > 0) || math.IsInf(f.k, 0) {
				return s, cli.Usagef("sim: --k must be > 0, got %v", f.k)
			}
			s.ccfg.K = f.k
		}
		if !(f.pole > -1 && f.pole < 1) {
			return s, cli.Usagef("sim: --pole must be in (-1, 1) for a stable integral loop, got %v", f.pole)
		}
		s.ccfg.Pole = f.pole
		if f.png != "" {
			if err := simCheckParentDir("png", f.png); err != nil {
				return s, err
			}
		}
	}
	// A setpoint the workload cannot meet even with no migration.
	idle, per, err := sim.IdleLatency(scn, s.opt, 60*time.Second)
	if err != nil {
		return s, cli.Usagef("sim: %v", err)
	}
	worst := idle
	for _, d := range per {
		worst = max(worst, d)
	}
	if s.opt.Setpoint <= worst {
		return s, cli.Usagef("sim: setpoint %v is below the idle latency %v of scenario %s (no migration at all would meet it)",
			s.opt.Setpoint, worst.Round(10*time.Microsecond), scn.Name)
	}
	// A contract some store misses with no migration at all: the integral
	// could never move a byte, and every window would count as a violation.
	for i, st := range scn.Stores {
		lc := st.Contract
		if s.opt.Contract > 0 || lc == 0 {
			lc = s.opt.Contract
		}
		if lc == 0 {
			lc = s.opt.Setpoint
		}
		if i < len(per) && lc <= per[i] {
			return s, cli.Usagef("sim: contract %v is at or below store %s's idle latency %v in scenario %s (no migration at all would meet it)",
				lc, st.Name, per[i].Round(10*time.Microsecond), scn.Name)
		}
	}
	return s, nil
}

// simFlagUsers names, for each flag only some controllers use, those
// controllers: any other refuses it rather than ignore it.
var simFlagUsers = map[string][]string{
	"setpoint": {"pid", "interference"}, // the target they steer to; the others are judged by --contract
	"profile":  {"pid"},
	"rate":     {"fixed"},
	"k":        {"integral"},
	"pole":     {"integral"},
	"window":   {"pid", "integral", "interference"}, // what a controller that steers by latency is shown
	"noise":    {"pid", "integral", "interference"},
}

// simFlagsUsed refuses a flag the controller does not use.
func simFlagsUsed(cmd *cobra.Command, controller string) error {
	if !slices.Contains(sim.ControllerNames, controller) {
		return nil // reported as unknown later
	}
	for _, name := range slices.Sorted(maps.Keys(simFlagUsers)) {
		users := simFlagUsers[name]
		if cmd.Flags().Changed(name) && !slices.Contains(users, controller) {
			hint := ""
			if name == "setpoint" {
				hint = " (--contract sets what the run is judged against)"
			}
			return cli.Usagef("sim: --%s applies to --controller %s only, not %s%s", name, strings.Join(users, ", "), controller, hint)
		}
	}
	if controller == "integral" && cmd.Flags().Changed("k") && cmd.Flags().Changed("pole") {
		return cli.Usagef("sim: --pole chooses the tuned K; with --k given it would be ignored")
	}
	return nil
}

// simProfile resolves --profile; the simulator steps in whole seconds.
func simProfile(arg string) (control.Profile, error) {
	p, err := cli.Profile(arg)
	if err != nil {
		return p, cli.Usagef("sim: --profile: %v", err)
	}
	if st := p.Step(); st%time.Second != 0 {
		return p, cli.Usagef("sim: --profile %s: step_ms %v: the simulator steps in whole seconds", p.Label(), p.StepMs)
	}
	return p, nil
}

// parseLatency parses a positive duration flag ("40ms", "0.03s").
func simParseLatency(name, v string) (time.Duration, error) {
	d, err := time.ParseDuration(strings.TrimSpace(v))
	if err != nil {
		return 0, cli.Usagef("sim: --%s %q: want a duration such as 30ms", name, v)
	}
	if d <= 0 {
		return 0, cli.Usagef("sim: --%s must be > 0, got %v", name, d)
	}
	return d, nil
}

// checkParentDir fails when path's directory does not exist.
func simCheckParentDir(flag, path string) error {
	dir := filepath.Dir(path)
	if st, err := os.Stat(dir); err != nil || !st.IsDir() {
		return cli.Usagef("sim: --%s %s: directory %s does not exist", flag, path, dir)
	}
	return nil
}

func runSim(cmd *cobra.Command, f simFlags) error {
	s, err := parseSimFlags(cmd, f, true)
	if err != nil {
		return err
	}
	var fit *sim.InterferenceFit
	if s.ccfg.Kind == "interference" {
		f, err := sim.FitInterference(s.scn, s.opt)
		if err != nil {
			return fmt.Errorf("sim: %w", err)
		}
		fit, s.ccfg.Model = &f, &f.Model
	}
	c, err := sim.NewController(s.scn, s.ccfg, s.opt)
	if err != nil {
		return fmt.Errorf("sim: %w", err)
	}
	r, err := sim.Run(s.scn, c, s.opt)
	if err != nil {
		return fmt.Errorf("sim: %w", err)
	}
	if err := writeSimFiles(r, f.out, f.png); err != nil {
		return err
	}
	out := cmd.OutOrStdout()
	if f.json {
		return cli.WriteJSON(out, r.Summary())
	}
	if fit != nil {
		fmt.Fprintf(out, "interference model fitted on %d steps of random rates (%d interfering: latency over the setpoint): %d-fold CV accuracy %.3f, F1 %.3f\n",
			fit.Samples, fit.Positive, fit.CV.Folds, fit.CV.MeanAccuracy, fit.CV.MeanF1)
	}
	printSimHuman(out, r, simControllerName(r.Controller, s.prof))
	return nil
}

// simControllerName is controller kind with its profile, for people.
func simControllerName(kind string, prof control.Profile) string {
	if kind != "pid" {
		return kind
	}
	return kind + " (profile " + prof.Label() + ")"
}

// writeSimFiles writes --out's CSV and summary and --png's plot.
func writeSimFiles(r sim.Result, dir, png string) error {
	if dir != "" {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("sim: --out: %w", err)
		}
		if err := simWriteFile(filepath.Join(dir, "series.csv"), func(w io.Writer) error { return sim.WriteCSV(w, r) }); err != nil {
			return err
		}
		if err := simWriteFile(filepath.Join(dir, "summary.json"), func(w io.Writer) error { return cli.WriteJSON(w, simDetail(r)) }); err != nil {
			return err
		}
	}
	if png != "" {
		if err := simWriteFile(png, func(w io.Writer) error { return sim.WritePNG(w, r) }); err != nil {
			return err
		}
	}
	return nil
}

// writeFile creates path and fills it with fill.
func simWriteFile(path string, fill func(io.Writer) error) error {
	fh, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("sim: %w", err)
	}
	if err := fill(fh); err != nil {
		fh.Close()
		return err
	}
	if err := fh.Close(); err != nil {
		return fmt.Errorf("sim: %w", err)
	}
	return nil
}

// simStoreJSON is one store's line in summary.json.
type simStoreJSON struct {
	Name              string  `json:"name"`
	Migrating         bool    `json:"migrating"`
	ContractMS        float64 `json:"contract_ms"`
	IdleLatencyMS     float64 `json:"idle_latency_ms"`
	MeanLatencyMS     float64 `json:"mean_latency_ms"`
	P95LatencyMS      float64 `json:"p95_latency_ms"`
	P99LatencyMS      float64 `json:"p99_latency_ms"`
	ViolationFraction float64 `json:"violation_fraction"`
	Transactions      int     `json:"transactions"`
}

// simDetailJSON is summary.json: the --json figures plus per-store ones.
type simDetailJSON struct {
	sim.Summary
	AvgVictimRatio     float64        `json:"avg_victim_ratio"`
	AvgVictimLatencyMS float64        `json:"avg_victim_latency_ms"`
	Steps              int            `json:"control_steps"`
	Stores             []simStoreJSON `json:"stores"`
}

func simDetail(r sim.Result) simDetailJSON {
	d := simDetailJSON{Summary: r.Summary(), AvgVictimRatio: r.AvgVictimRatio, AvgVictimLatencyMS: simMS(r.AvgVictimLatency), Steps: r.Steps}
	for _, s := range r.Stores {
		d.Stores = append(d.Stores, simStoreJSON{
			Name: s.Name, Migrating: s.Migrating, ContractMS: simMS(s.Contract), IdleLatencyMS: simMS(s.IdleLatency),
			MeanLatencyMS: simMS(s.MeanLatency), P95LatencyMS: simMS(s.P95Latency), P99LatencyMS: simMS(s.P99Latency),
			ViolationFraction: s.ViolationFraction, Transactions: s.Count,
		})
	}
	return d
}

// ms is d in milliseconds rounded to microseconds.
func simMS(d time.Duration) float64 { return math.Round(float64(d)/1e3) / 1e3 }

func printSimHuman(w io.Writer, r sim.Result, controller string) {
	done := "completed"
	if !r.Completed {
		done = "NOT completed (time limit)"
	}
	target := fmt.Sprintf("setpoint %v", r.Setpoint)
	if !sim.SteersToSetpoint(r.Controller) {
		target = "judged by each store's contract"
	}
	fmt.Fprintf(w, "scenario %s, controller %s, seed %d, %s\n", r.Scenario, controller, r.Seed, target)
	fmt.Fprintf(w, "migration %s in %.1f s at %s mean\n", done, r.MigrationSeconds, units.FormatRate(r.MeanRate))
	fmt.Fprintf(w, "latency during migration: mean %.2f ms (idle %.2f ms), p95 %.2f ms, p99 %.2f ms\n",
		simMS(r.MeanLatency), simMS(r.IdleLatency), simMS(r.P95Latency), simMS(r.P99Latency))
	fmt.Fprintf(w, "1 s windows over contract: %.1f%%\n", 100*r.ViolationFraction)
	if len(r.Stores) > 1 {
		fmt.Fprintf(w, "%-6s %9s %9s %9s %9s %9s\n", "store", "contract", "idle", "mean", "p99", "violated")
		for _, s := range r.Stores {
			mark := ""
			if s.Migrating {
				mark = " (moving)"
			}
			fmt.Fprintf(w, "%-6s %7.1fms %7.2fms %7.2fms %7.2fms %8.1f%%%s\n", s.Name, simMS(s.Contract), simMS(s.IdleLatency),
				simMS(s.MeanLatency), simMS(s.P99Latency), 100*s.ViolationFraction, mark)
		}
		fmt.Fprintf(w, "average victim latency %.2f ms, %.3f of its contract\n", simMS(r.AvgVictimLatency), r.AvgVictimRatio)
	}
	fmt.Fprintln(w)
	fmt.Fprint(w, sim.ASCIIPlot(r, 72))
}

func runSweep(cmd *cobra.Command, f simFlags) error {
	s, err := parseSimFlags(cmd, f, false)
	if err != nil {
		return err
	}
	if f.steps < 1 || f.steps > 1000 {
		return cli.Usagef("sim sweep: --steps must be in [1, 1000], got %d", f.steps)
	}
	sr, err := sim.Sweep(s.scn, s.opt, f.steps, s.prof)
	if err != nil {
		return fmt.Errorf("sim sweep: %w", err)
	}
	out := cmd.OutOrStdout()
	if f.json {
		return cli.WriteJSON(out, sr.Summary())
	}
	fmt.Fprintf(out, "scenario %s, setpoint %v, seed %d\n", sr.Scenario, sr.Setpoint, sr.Seed)
	fmt.Fprintf(out, "%12s %10s %12s %s\n", "fixed rate", "seconds", "mean ms", "meets")
	for _, g := range sr.Rungs {
		fmt.Fprintf(out, "%12s %10.1f %12.2f %v\n", units.FormatRate(g.Rate), g.Seconds, simMS(g.MeanLatency), g.Meets)
	}
	if sr.BestFixedRate == 0 {
		fmt.Fprintln(out, "no fixed rate on the ladder met the setpoint")
	} else {
		fmt.Fprintf(out, "best fixed: %s, %.1f s, mean %.2f ms\n", units.FormatRate(sr.BestFixedRate), sr.BestFixedSeconds, simMS(sr.BestFixedMeanLatency))
	}
	fmt.Fprintf(out, "%s: %s mean, %.1f s, mean %.2f ms (%.3f× the best fixed time)\n",
		simControllerName("pid", s.prof), units.FormatRate(sr.PID.MeanRate), sr.PID.MigrationSeconds, simMS(sr.PID.MeanLatency), sr.PID.MigrationSeconds/math.Max(sr.BestFixedSeconds, 1e-9))
	return nil
}
