package fleet

import (
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"
)

// TestScripts runs the datadriven transcripts in testdata: small fleets,
// deterministic from their seed. Regenerate with
// `go test ./lab/sim/fleet -run TestScripts -rewrite` and review the diff.
//
//	plan servers=N tenants=N seed=N [target=F]   the fleet and its moves
//	run servers=N tenants=N seed=N [p=F] [pole=F] the plan executed, and its oracle
func TestScripts(t *testing.T) {
	datadriven.Walk(t, "testdata", func(t *testing.T, path string) {
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			var c Config
			for _, a := range d.CmdArgs {
				var err error
				switch a.Key {
				case "servers":
					_, err = fmt.Sscan(a.Vals[0], &c.Servers)
				case "tenants":
					_, err = fmt.Sscan(a.Vals[0], &c.Tenants)
				case "seed":
					_, err = fmt.Sscan(a.Vals[0], &c.Seed)
				case "target":
					_, err = fmt.Sscan(a.Vals[0], &c.Target)
				case "p":
					_, err = fmt.Sscan(a.Vals[0], &c.P)
				case "pole":
					_, err = fmt.Sscan(a.Vals[0], &c.Pole)
				default:
					d.Fatalf(t, "unknown argument %q", a.Key)
				}
				if err != nil {
					d.Fatalf(t, "%s: %v", a.Key, err)
				}
			}
			f, err := Generate(c)
			if err != nil {
				return "error: " + err.Error() + "\n"
			}
			plan, err := f.Plan()
			if err != nil {
				d.Fatalf(t, "%v", err)
			}
			var b strings.Builder
			switch d.Cmd {
			case "plan":
				load := make([]float64, len(f.Servers))
				for _, st := range f.Stores {
					load[st.Server] += st.Load
				}
				over := 0
				for _, l := range load {
					if l > f.Config.Target {
						over++
					}
				}
				fmt.Fprintf(&b, "%d servers, %d tenants; %d servers over the target %.2f; %d moves, %.1f GB, %d left over\n",
					len(f.Servers), len(f.Stores), over, f.Config.Target, len(plan.Moves), float64(plan.Bytes)/1e9, len(plan.Over))
				for _, m := range plan.Moves {
					fmt.Fprintf(&b, "  %s %s → %s  %6.2f GB  load %.3f\n", m.Tenant, m.From, m.To, float64(m.Bytes)/1e9, m.Load)
				}
			case "run":
				r, err := Run(f, plan)
				if err != nil {
					d.Fatalf(t, "%v", err)
				}
				fmt.Fprintf(&b, "%d moves (%d sub-moves, %.1f GB), at most %d at once, %.1f MB/s per move\n",
					r.Moves, r.SubMoves, float64(r.Bytes)/1e9, r.MaxConcurrent, r.MeanRate/1e6)
				fmt.Fprintf(&b, "plan %.1f s (completed %v), oracle %.1f s: %.3f × the oracle\n",
					r.PlanSeconds, r.Completed, r.OracleSeconds, r.PlanSeconds/r.OracleSeconds)
				fmt.Fprintf(&b, "violation fraction: worst server %.3f (%s), all moving servers %.4f, bystanders %.3f\n",
					r.WorstViolation, r.WorstServer, r.MeanViolation, r.BystanderViolation)
			default:
				d.Fatalf(t, "unknown directive %q", d.Cmd)
			}
			return b.String()
		})
	})
}

// Properties over small fleets of several seeds: the plan completes, the
// oracle is not slower than the controllers, bystanders see no violation,
// fractions are fractions, and a run is a function of its seed.
func TestRunProperties(t *testing.T) {
	for seed := range uint64(6) {
		f, err := Generate(Config{Servers: 60, Tenants: 600, Seed: seed})
		if err != nil {
			t.Fatal(err)
		}
		plan, err := f.Plan()
		if err != nil {
			t.Fatal(err)
		}
		if len(plan.Moves) == 0 {
			t.Fatalf("seed %d: no moves: the fleet is not skewed", seed)
		}
		r, err := Run(f, plan)
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case !r.Completed:
			t.Errorf("seed %d: plan not completed: %+v", seed, r)
		case !(r.OracleSeconds > 0 && r.OracleSeconds <= r.PlanSeconds):
			t.Errorf("seed %d: oracle %.1f s vs plan %.1f s", seed, r.OracleSeconds, r.PlanSeconds)
		case r.BystanderViolation != 0:
			t.Errorf("seed %d: a server without moves violated %.3f of its windows", seed, r.BystanderViolation)
		case r.WorstViolation < 0 || r.WorstViolation > 1 || r.MeanViolation > r.WorstViolation:
			t.Errorf("seed %d: violation fractions %+v", seed, r)
		case r.Moves != len(plan.Moves) || r.Bytes != plan.Bytes || r.SubMoves < r.Moves:
			t.Errorf("seed %d: counts %+v", seed, r)
		}
		again, _ := Run(f, plan)
		if !reflect.DeepEqual(r, again) {
			t.Fatalf("seed %d: not deterministic:\n%+v\n%+v", seed, r, again)
		}
	}
}

func TestConfigRefused(t *testing.T) {
	for _, c := range []Config{{Servers: 1}, {Tenants: -1}, {Target: 1.5}, {P: 2}, {Pole: 1}, {Tenants: 2000000}, {Servers: 200000}} {
		if _, err := Generate(c); err == nil {
			t.Errorf("%+v: no error", c)
		}
	}
}
