package commands

import (
	"errors"
	"fmt"
	"io"
	"math"
	"strings"

	"github.com/spf13/cobra"

	"github.com/sluicedb/sluice/control"
	"github.com/sluicedb/sluice/control/tune"
	"github.com/sluicedb/sluice/internal/cli"
	"github.com/sluicedb/sluice/internal/units"
	"github.com/sluicedb/sluice/lab/sim"
)

// tuneFlags are `sluice tune`'s flags.
type tuneFlags struct {
	scenario string
	setpoint string
	contract string
	seed     uint64
	pole     float64
	k        float64
	radius   float64
	force    bool
	json     bool
}

var tuneF tuneFlags

var tuneCmd = &cobra.Command{
	Use:   "tune",
	Short: "Profile a plant with fixed-rate steps, fit its gain and propose controller gains",
	Long: `tune profiles a plant (a simulator scenario) with a staircase of fixed rates,
stopping at the first step where a store exceeds its contract, fits the process gain G
(seconds of latency per byte/s) by linear regression over all steps (global, Aqueduct's
method) and over the operating region near the contract (local: the plant is convex, so
the slope where a controller works is steeper), and proposes, from the local fit:
  - Aqueduct's integral gain K = (1-p)/G for the pole --pole (stable iff 0 < K < 2/G),
  - velocity-form PID gains for the setpoint (control/tune.ProposePID, spectral radius --radius),
    a suggestion only: the PID runs a control profile, whose gains come from the real
    testbed (docs/control.md); to try these, write them into a profile file (name: sluice,
    kp, ki, kd) and pass it to sluice sim --profile,
  - a starting rate: the fastest step whose latency stayed under 75% of the contract.
An unstable choice (a pole outside (-1,1), or --k outside (0, 2/G)) is refused unless --force.
'sluice lab tune classifier' trains the interference controller's model on the lab's bed.`,
	Example: `  sluice tune --scenario multitenant
  sluice tune --scenario steady --setpoint 30ms --pole 0.5 --json
  sluice tune --scenario steady --k 5e8 --force`,
	Args: cobra.NoArgs,
	RunE: func(cmd *cobra.Command, _ []string) error {
		if err := checkTuneModes(cmd); err != nil {
			return err
		}
		if tuneLive.live {
			return runTuneLive(cmd, tuneF) // tune_live.go
		}
		return runTune(cmd, tuneF)
	},
}

func init() {
	f := tuneCmd.Flags()
	f.StringVar(&tuneF.scenario, "scenario", "steady", "scenario to profile: "+strings.Join(sim.ScenarioNames(), ", "))
	f.StringVar(&tuneF.setpoint, "setpoint", "", "latency setpoint for the PID proposal, e.g. 30ms (default: the scenario's)")
	f.StringVar(&tuneF.contract, "contract", "", "latency contract that ends the profile (default: each store's, else the setpoint)")
	f.Uint64Var(&tuneF.seed, "seed", 1, "random seed of the profiling run")
	f.Float64Var(&tuneF.pole, "pole", sim.DefaultPole, "closed-loop pole p for the integral gain K = (1-p)/G; stable iff -1 < p < 1")
	f.Float64Var(&tuneF.k, "k", 0, "check this integral gain K instead of proposing one ((bytes/s) per second of error)")
	f.Float64Var(&tuneF.radius, "radius", 0.5, "target spectral radius for the PID proposal, in (0,1)")
	f.BoolVar(&tuneF.force, "force", false, "accept an unstable pole or K")
	f.BoolVar(&tuneF.json, "json", false, "print the figures as one JSON object")
	Lab.AddCommand(tuneCmd)
}

// tuneFitJSON is one fit in tune's JSON.
type tuneFitJSON struct {
	G           float64 `json:"g_s_per_Bps"`
	GmsPerMBps  float64 `json:"g_ms_per_MBps"`
	InterceptMS float64 `json:"intercept_ms"`
	R2          float64 `json:"r2"`
	Points      int     `json:"points"`
	MinRate     float64 `json:"min_rate"`
	MaxRate     float64 `json:"max_rate"`
	// Fallback: the local rungs showed less slope than all, so this is the global fit.
	Fallback bool `json:"fallback,omitempty"`
}

// tunePointJSON is one profiling step.
type tunePointJSON struct {
	Rate      float64 `json:"rate"`
	LatencyMS float64 `json:"victim_latency_ms"`
	Victim    string  `json:"victim"`
	Over      bool    `json:"over_contract"`
}

// tuneJSON is `sluice tune --json`.
type tuneJSON struct {
	Scenario          string          `json:"scenario"`
	Seed              uint64          `json:"seed"`
	SetpointMS        float64         `json:"setpoint_ms"`
	Profile           []tunePointJSON `json:"profile"`
	Binding           string          `json:"binding_store"`
	BindingContractMS float64         `json:"binding_contract_ms"`
	Global            tuneFitJSON     `json:"global"`
	Local             tuneFitJSON     `json:"local"`
	Pole              float64         `json:"pole"`
	K                 float64         `json:"k"`
	KMax              float64         `json:"k_max"`
	Stable            bool            `json:"stable"`
	StartRate         float64         `json:"start_rate"`
	PIDKp             float64         `json:"pid_kp"`
	PIDKi             float64         `json:"pid_ki"`
	PIDKd             float64         `json:"pid_kd"`
	PIDRadius         float64         `json:"pid_radius"`
	PIDSettleSteps    int             `json:"pid_settle_steps"`
	PIDNormGain       float64         `json:"pid_norm_gain"`
}

func tuneFitToJSON(f sim.Fit) tuneFitJSON {
	return tuneFitJSON{G: f.G, GmsPerMBps: f.G * 1e3 * 1e6, InterceptMS: f.Intercept * 1e3, R2: f.R2, Points: f.Points, MinRate: f.MinRate, MaxRate: f.MaxRate, Fallback: f.Fallback}
}

func runTune(cmd *cobra.Command, f tuneFlags) error {
	scn, err := sim.Lookup(f.scenario)
	if err != nil {
		return cli.Usagef("tune: %v", err)
	}
	opt := sim.Options{Seed: f.seed, Setpoint: scn.Setpoint}
	if cmd.Flags().Changed("setpoint") {
		if opt.Setpoint, err = simParseLatency("setpoint", f.setpoint); err != nil {
			return err
		}
	}
	if cmd.Flags().Changed("contract") {
		if opt.Contract, err = simParseLatency("contract", f.contract); err != nil {
			return err
		}
	}
	if math.IsNaN(f.pole) || math.IsInf(f.pole, 0) {
		return cli.Usagef("tune: --pole must be a finite number")
	}
	if !(f.radius > 0 && f.radius < 1) {
		return cli.Usagef("tune: --radius must be in (0,1), got %v", f.radius)
	}
	if cmd.Flags().Changed("k") && (!(f.k > 0) || math.IsInf(f.k, 0)) {
		return cli.Usagef("tune: --k must be > 0, got %v", f.k)
	}
	if !(f.pole > -1 && f.pole < 1) && !f.force {
		return cli.Usagef("tune: pole %v is outside (-1, 1): the integral loop would be unstable (use --force to accept)", f.pole)
	}
	idle, per, err := sim.IdleLatency(scn, opt, 60e9)
	if err != nil {
		return cli.Usagef("tune: %v", err)
	}
	for _, d := range per {
		idle = max(idle, d)
	}
	if opt.Setpoint <= idle {
		return cli.Usagef("tune: setpoint %v is below the idle latency %v of scenario %s", opt.Setpoint, idle, scn.Name)
	}
	t, err := sim.Tune(scn, opt, f.pole, f.radius, f.force)
	if err != nil {
		if errors.Is(err, tune.ErrUnstable) {
			return cli.Usagef("tune: %v (use --force to accept)", err)
		}
		return fmt.Errorf("tune: %w", err)
	}
	G := t.Profile.Local.G
	if cmd.Flags().Changed("k") {
		t.K = f.k
		t.Pole = tune.Pole(G, f.k)
		if !tune.Stable(G, f.k) && !f.force {
			return cli.Usagef("tune: K=%.4g is outside (0, 2/G=%.4g) for the fitted G=%.4g s per byte/s: pole %.3f, unstable (use --force to accept)",
				f.k, 2/G, G, t.Pole)
		}
	}
	j := tuneJSON{
		Scenario: scn.Name, Seed: f.seed, SetpointMS: simMS(opt.Setpoint),
		Binding: t.Profile.Binding, BindingContractMS: simMS(t.Profile.BindingContract),
		Global: tuneFitToJSON(t.Profile.Global), Local: tuneFitToJSON(t.Profile.Local),
		Pole: t.Pole, K: t.K, KMax: 2 / G, Stable: tune.Stable(G, t.K), StartRate: t.Start,
		PIDKp: t.PID.Kp, PIDKi: t.PID.Ki, PIDKd: t.PID.Kd, PIDRadius: t.PID.Radius, PIDSettleSteps: t.PID.SettleSteps, PIDNormGain: t.PID.NormGain,
	}
	for _, p := range t.Profile.Points {
		j.Profile = append(j.Profile, tunePointJSON{Rate: p.Rate, LatencyMS: simMS(p.Latency), Victim: p.Victim, Over: p.Over})
	}
	out := cmd.OutOrStdout()
	if f.json {
		return cli.WriteJSON(out, j)
	}
	printTune(out, j)
	return nil
}

func printTune(w io.Writer, j tuneJSON) {
	fmt.Fprintf(w, "profile of %s (seed %d): fixed-rate steps until a store exceeds its contract\n", j.Scenario, j.Seed)
	fmt.Fprintf(w, "%12s %12s %8s\n", "rate", "victim ms", "victim")
	for _, p := range j.Profile {
		note := ""
		if p.Over {
			note = "  over contract: stop"
		}
		fmt.Fprintf(w, "%12s %12.2f %8s%s\n", units.FormatRate(p.Rate), p.LatencyMS, p.Victim, note)
	}
	fmt.Fprintf(w, "binding store %s (contract %.1f ms)\n", j.Binding, j.BindingContractMS)
	fmt.Fprintf(w, "global fit: G = %.3g s per byte/s (%.3f ms per MB/s), R² %.3f over %d steps\n", j.Global.G, j.Global.GmsPerMBps, j.Global.R2, j.Global.Points)
	fmt.Fprintf(w, "local fit:  G = %.3g s per byte/s (%.3f ms per MB/s), R² %.3f over %d steps (%s..%s)\n",
		j.Local.G, j.Local.GmsPerMBps, j.Local.R2, j.Local.Points, units.FormatRate(j.Local.MinRate), units.FormatRate(j.Local.MaxRate))
	if j.Local.Fallback {
		fmt.Fprintln(w, "  (the rungs near the contract showed less slope than all of them: the local fit is the global one)")
	}
	stable := "stable"
	if !j.Stable {
		stable = "UNSTABLE (forced)"
	}
	fmt.Fprintf(w, "integral: K = %.4g (bytes/s) per second of error for pole %.2f; stable iff 0 < K < %.4g: %s\n", j.K, j.Pole, j.KMax, stable)
	fmt.Fprintf(w, "start rate: %s\n", units.FormatRate(j.StartRate))
	fmt.Fprintf(w, "pid (setpoint %.1f ms): Kp %.4f  Ki %.4f  Kd %.4f  (normalised gain %.2f, radius %.2f, ~%d steps to settle)\n",
		j.SetpointMS, j.PIDKp, j.PIDKi, j.PIDKd, j.PIDNormGain, j.PIDRadius, j.PIDSettleSteps)
	def := control.DefaultProfile()
	fmt.Fprintf(w, "  a suggestion (the %s profile runs Kp %g  Ki %g  Kd %g): try it with sluice sim --profile FILE,\n", def.Name, def.Kp, def.Ki, def.Kd)
	fmt.Fprintf(w, "  FILE holding name: %s, kp: %.4g, ki: %.4g, kd: %.4g\n", def.Name, j.PIDKp, j.PIDKi, j.PIDKd)
}
