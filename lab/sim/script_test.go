package sim

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"

	"github.com/sluicedb/sluice/control"
	"github.com/sluicedb/sluice/internal/cli"
)

// TestScripts runs the datadriven transcripts in testdata/scripts: each
// directive runs the simulator and prints its figures and plots. Regenerate
// with `go test ./lab/sim -run TestScripts -rewrite` and review the diff.
//
//	run scenario=S controller=C [setpoint=D] [contract=D] [rate=R] [seed=N] [profile=P]
//	sweep scenario=S [setpoint=D] [seed=N] [profile=P]
//	profile scenario=S [setpoint=D] [seed=N]
//
// profile=P is the PID's profile, as `sluice sim --profile` takes it: a
// built-in name or a file (testdata/profiles/…); default the default profile.
func TestScripts(t *testing.T) {
	datadriven.Walk(t, "testdata/scripts", func(t *testing.T, path string) {
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			return script(t, d)
		})
	})
}

func script(t *testing.T, d *datadriven.TestData) string {
	var scn, ctrl string
	var sp, contract time.Duration
	var seed uint64 = 1
	var prof control.Profile
	rate := -1.0
	for _, a := range d.CmdArgs {
		v := ""
		if len(a.Vals) > 0 {
			v = a.Vals[0]
		}
		var err error
		switch a.Key {
		case "scenario":
			scn = v
		case "controller":
			ctrl = v
		case "setpoint":
			sp, err = time.ParseDuration(v)
		case "contract":
			contract, err = time.ParseDuration(v)
		case "rate":
			_, err = fmt.Sscanf(strings.TrimSuffix(v, "MB/s"), "%g", &rate)
			rate *= 1e6
		case "seed":
			_, err = fmt.Sscanf(v, "%d", &seed)
		case "profile":
			prof, err = cli.Profile(v)
		default:
			d.Fatalf(t, "unknown argument %q", a.Key)
		}
		if err != nil {
			d.Fatalf(t, "%s=%s: %v", a.Key, v, err)
		}
	}
	s, err := Lookup(scn)
	if err != nil {
		d.Fatalf(t, "%v", err)
	}
	o := Options{Seed: seed, Setpoint: sp, Contract: contract}
	var b strings.Builder
	switch d.Cmd {
	case "run":
		c, err := NewController(s, ControllerConfig{Kind: ctrl, Setpoint: sp, Rate: rate, Profile: prof}, o)
		if err != nil {
			d.Fatalf(t, "%v", err)
		}
		r, err := Run(s, c, o)
		if err != nil {
			d.Fatalf(t, "%v", err)
		}
		fmt.Fprintf(&b, "%s/%s: %.1f s at %.2f MB/s, completed %v; latency mean %.2f ms (idle %.2f), p95 %.2f, p99 %.2f; violations %.3f\n",
			r.Scenario, r.Controller, r.MigrationSeconds, r.MeanRate/1e6, r.Completed, ms(r.MeanLatency), ms(r.IdleLatency),
			ms(r.P95Latency), ms(r.P99Latency), r.ViolationFraction)
		if len(r.Stores) > 1 {
			for _, st := range r.Stores {
				fmt.Fprintf(&b, "  %s contract %.0f ms: mean %.2f ms, violations %.3f\n", st.Name, ms(st.Contract), ms(st.MeanLatency), st.ViolationFraction)
			}
			fmt.Fprintf(&b, "  average victim latency %.2f ms = %.3f of its contract\n", ms(r.AvgVictimLatency), r.AvgVictimRatio)
		}
		b.WriteString(ASCIIPlot(r, 60))
	case "sweep":
		sw, err := Sweep(s, o, 0, prof)
		if err != nil {
			d.Fatalf(t, "%v", err)
		}
		for _, g := range sw.Rungs {
			fmt.Fprintf(&b, "fixed %5.2f MB/s: %6.1f s, mean %9.2f ms, meets %v\n", g.Rate/1e6, g.Seconds, ms(g.MeanLatency), g.Meets)
		}
		fmt.Fprintf(&b, "best fixed %.2f MB/s: %.1f s, mean %.2f ms\n", sw.BestFixedRate/1e6, sw.BestFixedSeconds, ms(sw.BestFixedMeanLatency))
		fmt.Fprintf(&b, "pid: %.1f s (%.3f× best fixed), mean %.2f ms\n", sw.PID.MigrationSeconds, sw.PID.MigrationSeconds/sw.BestFixedSeconds, ms(sw.PID.MeanLatency))
	case "profile":
		p, err := ProfilePlant(s, ProfileOptions{}, o)
		if err != nil {
			d.Fatalf(t, "%v", err)
		}
		for _, pt := range p.Points {
			fmt.Fprintf(&b, "%5.2f MB/s: victim %s %7.2f ms over %v\n", pt.Rate/1e6, pt.Victim, ms(pt.Latency), pt.Over)
		}
		fmt.Fprintf(&b, "binding %s, contract %.0f ms\n", p.Binding, ms(p.BindingContract))
		fmt.Fprintf(&b, "global G %.3g s/(B/s) R² %.3f (%d steps); local G %.3g R² %.3f (%d steps)\n",
			p.Global.G, p.Global.R2, p.Global.Points, p.Local.G, p.Local.R2, p.Local.Points)
	default:
		d.Fatalf(t, "unknown directive %q", d.Cmd)
	}
	return b.String()
}

func ms(d time.Duration) float64 { return float64(d) / 1e6 }
