package experiment

import (
	"fmt"

	"github.com/sluicedb/sluice/keyspace"
	"github.com/sluicedb/sluice/lab/workload"
)

// The reshard bench's scenarios (the Squall paper §7, scaled to one
// machine). Each is a pair of plans over one root table's keys [lo, hi)
// (YCSB's usertable keys 0 … records, TPC-C's warehouses 1 … W+1), cut at
// twelfths b(i) = lo + (hi−lo)·i/12 so that TPC-C's warehouses (W a
// multiple of 12) fall on the cuts:
//
//	loadbalance  3 partitions, even thirds. The hot range [lo, hot) (YCSB's
//	             hot set, the first fifth of the keys; TPC-C's first W/4
//	             warehouses), all on p1, is spread in thirds: p2 and p3
//	             each take one. Moves 2/3 of the hot range.
//	expand       3 partitions with data, p4 empty; p4 takes the top
//	             twelfth of each old third: 3 → 4. Moves 1/4 of the keys.
//	consolidate  4 partitions, even quarters; p4's quarter is cut in three
//	             and given to p1, p2, p3: 4 → 3. Moves 1/4 of the keys.
//
// The last range is unbounded above (YCSB inserts past records) and the
// first below.
const (
	ScenarioLoadBalance = "loadbalance"
	ScenarioExpand      = "expand"
	ScenarioConsolidate = "consolidate"
)

// ReshardScenarios are the scenarios, in the order the docs list them.
var ReshardScenarios = []string{ScenarioLoadBalance, ScenarioExpand, ScenarioConsolidate}

// reshardPlan is a scenario's shape over one root table.
type reshardPlan struct {
	parts    int               // partitions p1 … pN, one per server
	old, new keyspace.PlanSpec // before and after
	moved    float64           // the share of the keys that move
}

// scenarioPartitions is how many partitions (and servers) scenario uses.
func scenarioPartitions(scenario string) (int, error) {
	switch scenario {
	case ScenarioLoadBalance:
		return 3, nil
	case ScenarioExpand, ScenarioConsolidate:
		return 4, nil
	}
	return 0, fmt.Errorf("experiment: reshard: scenario %q: want loadbalance, expand or consolidate", scenario)
}

// movedShare is the share of the root's keys scenario moves, with YCSB's
// hot set for loadbalance (TPC-C's hot warehouses are W/4 of W: 1/6 moves).
func movedShare(scenario, wl string) float64 {
	switch {
	case scenario == ScenarioLoadBalance && wl == WorkloadYCSB:
		return 2.0 / 3 * workload.HotSetFraction
	case scenario == ScenarioLoadBalance:
		return 1.0 / 6
	}
	return 0.25
}

// buildPlan returns scenario's plans for root over keys [lo, hi) with the
// hot range [lo, hot) (loadbalance only). REQUIRES: hi−lo ≥ 12 and, for
// loadbalance, lo+3 ≤ hot < b(4).
func buildPlan(scenario, root string, lo, hi, hot int64) (reshardPlan, error) {
	if hi-lo < 12 {
		return reshardPlan{}, fmt.Errorf("experiment: reshard: %d keys of %s: want at least 12", hi-lo, root)
	}
	b := func(i int64) string {
		switch i {
		case 0:
			return ""
		case 12:
			return ""
		}
		return fmt.Sprint(lo + (hi-lo)*i/12)
	}
	r := func(x, y string) string { return "[" + x + "," + y + ")" }
	spec := func(m map[string]string) keyspace.PlanSpec { return keyspace.PlanSpec{root: m} }
	var p reshardPlan
	switch scenario {
	case ScenarioLoadBalance:
		if hot < lo+3 || hot >= lo+(hi-lo)*4/12 {
			return p, fmt.Errorf("experiment: reshard: hot range [%d,%d) of %s must hold 3 keys and lie in p1's third", lo, hot, root)
		}
		h1, h2, h3 := fmt.Sprint(lo+(hot-lo)/3), fmt.Sprint(lo+2*(hot-lo)/3), fmt.Sprint(hot)
		p.parts = 3
		p.old = spec(map[string]string{"p1": r("", b(4)), "p2": r(b(4), b(8)), "p3": r(b(8), "")})
		p.new = spec(map[string]string{
			"p1": r("", h1) + "," + r(h3, b(4)),
			"p2": r(h1, h2) + "," + r(b(4), b(8)),
			"p3": r(h2, h3) + "," + r(b(8), ""),
		})
		p.moved = float64(hot-lo) * 2 / 3 / float64(hi-lo)
	case ScenarioExpand:
		p.parts = 4
		p.old = spec(map[string]string{"p1": r("", b(4)), "p2": r(b(4), b(8)), "p3": r(b(8), "")})
		p.new = spec(map[string]string{
			"p1": r("", b(3)), "p2": r(b(4), b(7)), "p3": r(b(8), b(11)),
			"p4": r(b(3), b(4)) + "," + r(b(7), b(8)) + "," + r(b(11), ""),
		})
		p.moved = 0.25
	case ScenarioConsolidate:
		p.parts = 4
		p.old = spec(map[string]string{"p1": r("", b(3)), "p2": r(b(3), b(6)), "p3": r(b(6), b(9)), "p4": r(b(9), "")})
		p.new = spec(map[string]string{
			"p1": r("", b(3)) + "," + r(b(9), b(10)),
			"p2": r(b(3), b(6)) + "," + r(b(10), b(11)),
			"p3": r(b(6), b(9)) + "," + r(b(11), ""),
		})
		p.moved = 0.25
	default:
		_, err := scenarioPartitions(scenario)
		return p, err
	}
	return p, nil
}
