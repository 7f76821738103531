package experiment

import (
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/sluicedb/sluice/keyspace"
	"github.com/sluicedb/sluice/lab/workload"
)

func reshardParts(n int) []keyspace.Partition {
	var ps []keyspace.Partition
	for i := 1; i <= n; i++ {
		ps = append(ps, keyspace.Partition{Name: fmt.Sprintf("p%d", i), Tenant: fmt.Sprintf("rs%d", i)})
	}
	return ps
}

// TestReshardPlans checks every scenario's plans on both workloads' keyspaces:
// both valid, the moves going where the scenario says, and the share of
// the keys they cover the one the plan claims.
func TestReshardPlans(t *testing.T) {
	for _, sc := range ReshardScenarios {
		for _, wl := range []string{WorkloadYCSB, WorkloadTPCC} {
			t.Run(sc+"/"+wl, func(t *testing.T) {
				n, err := scenarioPartitions(sc)
				if err != nil {
					t.Fatal(err)
				}
				var ks *keyspace.Keyspace
				var p reshardPlan
				var lo, hi int64
				if wl == WorkloadYCSB {
					o := ReshardOptions{Scenario: sc, Workload: wl, MoveBytes: 8e6}
					lo, hi = 0, o.Records()
					ks, err = workload.YCSBKeyspace("ycsb", reshardParts(n), hi)
					if err == nil {
						p, err = buildPlan(sc, workload.Table, lo, hi, int64(float64(hi)*workload.HotSetFraction))
					}
				} else {
					lo, hi = 1, 25
					ks, err = workload.TPCCKeyspace("tpcc", reshardParts(n), workload.TPCCScale{Warehouses: 24})
					if err == nil {
						p, err = buildPlan(sc, "warehouse", lo, hi, 1+24/4)
					}
				}
				if err != nil {
					t.Fatal(err)
				}
				if p.parts != n {
					t.Fatalf("plan for %d partitions, scenario has %d", p.parts, n)
				}
				from, err := ks.WithPlan(p.old)
				if err != nil {
					t.Fatalf("old plan: %v", err)
				}
				to, err := from.WithPlan(p.new)
				if err != nil {
					t.Fatalf("new plan: %v", err)
				}
				moves, err := keyspace.Diff(from, to)
				if err != nil || len(moves) == 0 {
					t.Fatalf("diff: %d moves, %v", len(moves), err)
				}
				var keys int64
				for _, m := range moves {
					switch {
					case sc == ScenarioExpand && m.To != "p4",
						sc == ScenarioConsolidate && m.From != "p4",
						sc == ScenarioLoadBalance && m.From != "p1":
						t.Errorf("move %s %s → %s is not the scenario's", m.Range, m.From, m.To)
					}
					a, b := lo, hi
					if !m.Range.Lo.Inf {
						a = m.Range.Lo.Key.I
					}
					if !m.Range.Hi.Inf {
						b = m.Range.Hi.Key.I
					}
					keys += b - a
				}
				if got := float64(keys) / float64(hi-lo); math.Abs(got-p.moved) > 0.01 {
					t.Errorf("moves cover %.4f of the keys, the plan says %.4f", got, p.moved)
				}
				if sc == ScenarioExpand && len(from.PlanRanges()[from.Roots()[0]].Overlapping(keyspace.Bound{Inf: true}, keyspace.Bound{Inf: true})) != 3 {
					t.Errorf("expand's old plan should leave p4 empty")
				}
			})
		}
	}
}

// TestReshardFigures checks the figures on a made-up run: 100 commits a
// second of 2 ms, the change from 10 s to 13 s, one second of it without
// a commit and a slow second after.
func TestReshardFigures(t *testing.T) {
	var txs []workload.Tx
	for s := 0; s < 20; s++ {
		n, lat := 100, 2*time.Millisecond
		switch s {
		case 11:
			n = 0
		case 12:
			n, lat = 50, 20*time.Millisecond
		}
		for i := 0; i < n; i++ {
			end := time.Duration(s)*time.Second + time.Duration(i)*time.Second/time.Duration(n+1)
			txs = append(txs, workload.Tx{Arrival: end - lat, Begin: end - lat, End: end})
		}
	}
	txs = append(txs, workload.Tx{End: 5 * time.Second, Failed: true})
	secs := perSecond(txs, 20)
	if secs[5].Errors != 1 || secs[5].Commits != 100 || secs[12].P99Ms != 20 {
		t.Fatalf("second 5: %+v; second 12: %+v", secs[5], secs[12])
	}
	f := figures(txs, secs, window{Start: 10 * time.Second, End: 13 * time.Second, Before: 8 * time.Second, Warmup: 3 * time.Second})
	want := dipFigures{PreTPS: 100, MeanTPSDuring: 50, MinTPS1s: 0, ZeroCommitSeconds: 1, P99MsBefore: 2, P99MsDuring: 20}
	if f != want {
		t.Errorf("figures %+v, want %+v", f, want)
	}
	g := goals(f)
	if g.NoZeroSecond || g.DipPct != 50 || g.DipPctOK || g.P99Ratio != 10 || g.P99RatioOK || g.MinOverPre != 0 {
		t.Errorf("goals %+v", g)
	}
}
