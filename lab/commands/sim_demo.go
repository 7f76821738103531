package commands

import (
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/sluicedb/sluice/control"
	"github.com/sluicedb/sluice/internal/cli"
	"github.com/sluicedb/sluice/internal/units"
	"github.com/sluicedb/sluice/lab/sim"
)

// demoFlags are `sluice demo`'s flags.
type demoFlags struct {
	out  string
	seed uint64
	json bool
}

var demoF demoFlags

// demoCmd demonstrates the control loop on the simulator (Slacker's Fig. 13a
// experiment); `sluice demo` is the real thing.
var demoCmd = &cobra.Command{
	Use:   "demo",
	Short: "Demonstrate the control loop: +40% load mid-migration, PID vs the best fixed rate (simulated)",
	Long: `sim demo finds the fastest fixed rate that meets the setpoint on the steady workload, then runs the
step40 scenario (arrivals +40% one minute into the migration, Slacker Fig. 13a) with that
fixed rate and with the PID on the default profile (` + control.DefaultProfileName + `), as sluice migrate runs it.
It prints both summaries and the PID's plot, and writes pid.png, fixed.png, pid.csv,
fixed.csv and summary.json into --out.`,
	Args: cobra.NoArgs,
	RunE: func(cmd *cobra.Command, _ []string) error { return runDemo(cmd, demoF) },
}

func init() {
	f := demoCmd.Flags()
	f.StringVar(&demoF.out, "out", filepath.Join("out", "sim-demo"), "directory for plots, series and the summary")
	f.Uint64Var(&demoF.seed, "seed", 1, "random seed")
	f.BoolVar(&demoF.json, "json", false, "print the figures as one JSON object")
	simCmd.AddCommand(demoCmd)
}

// demoJSON is `sluice sim demo --json` and summary.json.
type demoJSON struct {
	Scenario   string      `json:"scenario"`
	Profile    string      `json:"profile"` // the PID's
	SetpointMS float64     `json:"setpoint_ms"`
	FixedRate  float64     `json:"fixed_rate"`
	PID        sim.Summary `json:"pid"`
	Fixed      sim.Summary `json:"fixed"`
	// After the step: the mean latency from 10 s after it to the end.
	PIDAfterStepMS   float64  `json:"pid_after_step_ms"`
	FixedAfterStepMS float64  `json:"fixed_after_step_ms"`
	Files            []string `json:"files"`
}

func runDemo(cmd *cobra.Command, f demoFlags) error {
	if f.out == "" {
		return cli.Usagef("demo: --out must name a directory")
	}
	steady, err := sim.Lookup("steady")
	if err != nil {
		return err
	}
	step, err := sim.Lookup("step40")
	if err != nil {
		return err
	}
	prof := control.DefaultProfile()
	opt := sim.Options{Seed: f.seed, Setpoint: step.Setpoint, Step: prof.Step()}
	errOut := cmd.ErrOrStderr()
	if !f.json {
		fmt.Fprintf(errOut, "demo: finding the best fixed rate for %v on the steady workload...\n", opt.Setpoint)
	}
	sw, err := sim.Sweep(steady, opt, 0, prof)
	if err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	if sw.BestFixedRate == 0 {
		return fmt.Errorf("demo: no fixed rate meets %v on steady", opt.Setpoint)
	}
	run := func(cfg sim.ControllerConfig) (sim.Result, error) {
		c, err := sim.NewController(step, cfg, opt)
		if err != nil {
			return sim.Result{}, err
		}
		return sim.Run(step, c, opt)
	}
	if !f.json {
		fmt.Fprintf(errOut, "demo: running step40 with fixed %s and with the PID (profile %s)...\n", units.FormatRate(sw.BestFixedRate), prof.Label())
	}
	fixed, err := run(sim.ControllerConfig{Kind: "fixed", Rate: sw.BestFixedRate})
	if err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	pid, err := run(sim.ControllerConfig{Kind: "pid", Setpoint: opt.Setpoint, Profile: prof})
	if err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	const stepAt = 60.0 // s: step40's load step
	j := demoJSON{
		Scenario: step.Name, Profile: prof.Label(), SetpointMS: simMS(opt.Setpoint), FixedRate: sw.BestFixedRate,
		PID: pid.Summary(), Fixed: fixed.Summary(),
		PIDAfterStepMS:   simMS(sim.MeanBetween(pid.Points, stepAt+10, pid.MigrationSeconds)),
		FixedAfterStepMS: simMS(sim.MeanBetween(fixed.Points, stepAt+10, fixed.MigrationSeconds)),
	}
	if err := os.MkdirAll(f.out, 0o755); err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	for _, w := range []struct {
		name string
		fill func(io.Writer) error
	}{
		{"pid.png", func(w io.Writer) error { return sim.WritePNG(w, pid) }},
		{"fixed.png", func(w io.Writer) error { return sim.WritePNG(w, fixed) }},
		{"pid.csv", func(w io.Writer) error { return sim.WriteCSV(w, pid) }},
		{"fixed.csv", func(w io.Writer) error { return sim.WriteCSV(w, fixed) }},
	} {
		p := filepath.Join(f.out, w.name)
		if err := simWriteFile(p, w.fill); err != nil {
			return fmt.Errorf("demo: %w", err)
		}
		j.Files = append(j.Files, p)
	}
	sum := filepath.Join(f.out, "summary.json")
	j.Files = append(j.Files, sum)
	if err := simWriteFile(sum, func(w io.Writer) error { return cli.WriteJSON(w, j) }); err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	out := cmd.OutOrStdout()
	if f.json {
		return cli.WriteJSON(out, j)
	}
	fmt.Fprintf(out, "sluice demo (simulated): %s, setpoint %v, arrivals +40%% at %.0f s; PID profile %s\n\n", step.Name, opt.Setpoint, stepAt, prof.Label())
	fmt.Fprintf(out, "%-28s %14s %14s\n", "", "fixed", "pid")
	fmt.Fprintf(out, "%-28s %14s %14s\n", "rate", units.FormatRate(sw.BestFixedRate), units.FormatRate(pid.MeanRate)+" avg")
	fmt.Fprintf(out, "%-28s %13.1fs %13.1fs\n", "migration time", fixed.MigrationSeconds, pid.MigrationSeconds)
	fmt.Fprintf(out, "%-28s %12.1fms %12.1fms\n", "mean latency", simMS(fixed.MeanLatency), simMS(pid.MeanLatency))
	fmt.Fprintf(out, "%-28s %12.1fms %12.1fms\n", "mean latency after the step", j.FixedAfterStepMS, j.PIDAfterStepMS)
	fmt.Fprintf(out, "%-28s %12.1fms %12.1fms\n", "p99 latency", simMS(fixed.P99Latency), simMS(pid.P99Latency))
	fmt.Fprintf(out, "%-28s %13.1f%% %13.1f%%\n", "1 s windows over setpoint", 100*fixed.ViolationFraction, 100*pid.ViolationFraction)
	fmt.Fprintf(out, "\n%s:\n%s\nfiles: %v\n", simControllerName("pid", prof), sim.ASCIIPlot(pid, 72), j.Files)
	return nil
}
