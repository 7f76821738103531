package experiment

import (
	"fmt"
	"image/color"
	"strconv"
	"strings"
	"time"

	"github.com/sluicedb/sluice/lab/chart"
	"github.com/sluicedb/sluice/plan"
)

// writePlanBench writes summary.json, methods.csv, stores.csv, series.csv
// (each plan's control loop, one row a step), windows.csv (each store's
// window means), plan-METHOD.png and report.md into o.Out.
func writePlanBench(o PlanBenchOptions, bedNote string, res PlanBenchResult, outs []planOutput, started time.Time) error {
	g := func(x float64) string { return strconv.FormatFloat(x, 'g', 6, 64) }
	for _, w := range []func() error{
		func() error { return writeJSON(o.Out, SummaryFile, res) },
		func() error {
			return writeCSV(o.Out+"/methods.csv", []string{"method", "state", "plan_seconds", "worst_violation_fraction", "worst_avl_fraction",
				"fixed_store_p99_ms", "alone_store_p99_ms", "throughput_fraction", "writes_acknowledged", "writes_missing", "writes_duplicated", "moved_bytes", "mean_rate_mb_s", "rollbacks"},
				func(emit func([]string)) {
					for _, m := range res.Methods {
						emit([]string{m.Method, m.State, g(m.PlanSeconds), g(m.WorstViolationFraction), g(m.WorstAVLFraction), g(m.FixedStoreP99Ms),
							g(m.AloneStoreP99Ms), g(m.ThroughputFraction), g(float64(m.WritesAcknowledged)), g(float64(m.WritesMissing)),
							g(float64(m.WritesDuplicated)), g(float64(m.MovedBytes)), g(m.MeanRateMBs), strconv.Itoa(m.Rollbacks)})
					}
				})
		},
		func() error {
			return writeCSV(o.Out+"/stores.csv", []string{"method", "store", "role", "contract_ms", "mean_ms", "avl_ms", "avl_fraction", "violation_fraction", "p95_ms", "p99_ms", "windows", "moved_bytes"},
				func(emit func([]string)) {
					for _, m := range res.Methods {
						for _, s := range m.Stores {
							emit([]string{m.Method, s.Name, s.Role, g(s.ContractMs), g(s.MeanMs), g(s.AVLMs), g(s.AVLFraction), g(s.VR), g(s.P95Ms), g(s.P99Ms),
								strconv.Itoa(s.Windows), g(float64(s.MovedBytes))})
						}
					}
				})
		},
		func() error {
			return writeCSV(o.Out+"/series.csv", []string{"method", "t", "rate_mb_s", "running", "moved_mb", "worst_store", "reason"}, func(emit func([]string)) {
				for _, out := range outs {
					for _, p := range out.series {
						emit([]string{out.method, g(round(p.At.Sub(out.start).Seconds(), 2)), g(round(p.Rate/1e6, 3)), strconv.Itoa(p.Running),
							g(round(float64(p.Moved)/1e6, 2)), p.Worst, p.Reason})
					}
				}
			})
		},
		func() error {
			return writeCSV(o.Out+"/windows.csv", []string{"method", "store", "role", "t", "mean_ms"}, func(emit func([]string)) {
				for _, out := range outs {
					for _, s := range out.stores {
						for i := range s.t {
							emit([]string{out.method, s.name, s.role, g(s.t[i]), g(round(s.ms[i], 2))})
						}
					}
				}
			})
		},
	} {
		if err := w(); err != nil {
			return err
		}
	}
	var b strings.Builder
	b.WriteString(reportHeader("sluice bench plan (Aqueduct, FAST 2002, §5)", o.Command, started, bedNote))
	fmt.Fprintf(&b, "Four servers; a, b, c hold two moving stores and one fixed store each, d the alone store. A plan of six moves rotates the moving stores among a, b and c (one move per server at a time); the next method moves them back. "+
		"Every store: %.0f MB of YCSB data, %.0f transactions/s (MPL %d) through the proxy, contract %.0f ms on its mean latency over %d s windows. "+
		"No-migration baseline: %.1f transactions/s in all, the stores' window means' 95th percentile %.2f ms, fixed stores' p99 %.2f ms, alone store's p99 %.2f ms.\n\n",
		float64(res.StoreBytes)/1e6, res.RateTPS, res.MPL, res.ContractMs, PlanWindow, res.BaselineTPS, res.BaselineWindow95Ms, res.FixedBaselineP99Ms, res.AloneBaselineP99Ms)
	if res.Profile != nil {
		fmt.Fprintf(&b, "Integral gain: profiled on the bed (one moving store migrated at fixed rates, rolled back): G = %.3f ms per MB/s (R² %.2f, %d rungs), K = (1−p)/G = %.3g for pole %.2f.\n\n",
			res.Profile.GmsPerMBps, res.Profile.R2, len(res.Profile.Points), res.K, res.Pole)
	} else {
		fmt.Fprintf(&b, "Integral gain K = %.3g. %s\n\n", res.K, res.KNote)
	}
	b.WriteString("| method | plan s | worst VR | worst AVL vs contract | fixed p99 ms | alone p99 ms | throughput × | MB/s | missing | duplicated | rollbacks |\n|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, m := range res.Methods {
		fmt.Fprintf(&b, "| %s | %.0f | %.2f | %+.0f%% | %.2f | %.2f | %.3f | %.1f | %d | %d | %d |\n", m.Method, m.PlanSeconds, m.WorstViolationFraction,
			100*m.WorstAVLFraction, m.FixedStoreP99Ms, m.AloneStoreP99Ms, m.ThroughputFraction, m.MeanRateMBs, m.WritesMissing, m.WritesDuplicated, m.Rollbacks)
	}
	b.WriteString("\n" + planGoals(res) + "\n")
	for k, m := range res.Methods {
		name := "plan-" + fileName(m.Method) + ".png"
		if err := writePNG(o.Out, name, planChart(outs[k], res.ContractMs)); err != nil {
			return err
		}
		fmt.Fprintf(&b, "## %s (%s, %.0f s, %.0f MB moved)\n\n| store | role | mean ms | AVL ms | VR | p95 ms | p99 ms | MB moved |\n|---|---|---|---|---|---|---|---|\n",
			m.Method, m.State, m.PlanSeconds, float64(m.MovedBytes)/1e6)
		for _, s := range m.Stores {
			fmt.Fprintf(&b, "| %s | %s | %.2f | %.2f | %.2f | %.2f | %.2f | %.0f |\n", s.Name, s.Role, s.MeanMs, s.AVLMs, s.VR, s.P95Ms, s.P99Ms, float64(s.MovedBytes)/1e6)
		}
		fmt.Fprintf(&b, "\n![%s](%s)\n\n", m.Method, name)
	}
	return writeFile(o.Out, ReportFile, b.String())
}

// planGoals states the goals against this run.
func planGoals(res PlanBenchResult) string {
	var b strings.Builder
	b.WriteString("Goals (issue 50; this run):\n\n")
	mark := func(ok bool) string {
		if ok {
			return "met"
		}
		return "NOT met"
	}
	for _, m := range res.Methods {
		switch m.Method {
		case plan.MethodIntegral:
			fmt.Fprintf(&b, "- sluice (integral) worst store VR %.2f ≤ 0.10: %s\n", m.WorstViolationFraction, mark(m.WorstViolationFraction >= 0 && m.WorstViolationFraction <= 0.10))
			fmt.Fprintf(&b, "- sluice (integral) worst AVL %+.0f%% of the contract, within 10%% under it: %s\n", 100*m.WorstAVLFraction, mark(m.WorstAVLFraction <= 0 && m.WorstAVLFraction >= -0.10))
			fmt.Fprintf(&b, "- sluice (integral) fixed stores' p99 %.2f ms within 10%% of %.2f: %s; alone store's %.2f within 10%% of %.2f: %s\n",
				m.FixedStoreP99Ms, res.FixedBaselineP99Ms, mark(m.FixedStoreP99Ms <= 1.1*res.FixedBaselineP99Ms),
				m.AloneStoreP99Ms, res.AloneBaselineP99Ms, mark(m.AloneStoreP99Ms <= 1.1*res.AloneBaselineP99Ms))
			fmt.Fprintf(&b, "- sluice (integral) throughput × %.3f ≥ 0.95: %s\n", m.ThroughputFraction, mark(m.ThroughputFraction >= 0.95))
		case plan.MethodWholeStore, plan.MethodSubStore:
			fmt.Fprintf(&b, "- %s violating (worst VR %.2f > 0): %s\n", m.Method, m.WorstViolationFraction, mark(m.WorstViolationFraction > 0))
		}
		fmt.Fprintf(&b, "- %s ledger exact (%d writes; %d missing, %d duplicated): %s\n", m.Method, m.WritesAcknowledged, m.WritesMissing, m.WritesDuplicated,
			mark(m.WritesMissing == 0 && m.WritesDuplicated == 0))
	}
	return b.String()
}

// planChart is a method's chart: the moving stores' window means, the
// fixed and alone stores', each against the contract, and the plan's rate.
func planChart(out planOutput, contractMs float64) chart.Chart {
	c := chart.Chart{Title: "bench plan: " + out.method, XLabel: "seconds since the plan started", LegendOutside: true, Panels: []chart.Panel{
		{Title: "moving stores", YLabel: "mean latency ms (3 s windows)"},
		{Title: "fixed and alone stores", YLabel: "mean latency ms (3 s windows)"},
		{Title: "plan rate", YLabel: "MB/s"},
	}}
	var xmax float64
	for _, s := range out.stores {
		i := 0
		if s.role != RoleMoving {
			i = 1
		}
		c.Panels[i].Series = append(c.Panels[i].Series, chart.Series{Name: s.name + " (" + s.role + ")", X: s.t, Y: s.ms})
		if n := len(s.t); n > 0 {
			xmax = max(xmax, s.t[n-1])
		}
	}
	for i := range 2 {
		c.Panels[i].Series = append(c.Panels[i].Series, chart.Series{Name: "contract", X: []float64{0, xmax}, Y: []float64{contractMs, contractMs}, Dashed: true, Color: color.Black})
	}
	var x, lim, meas []float64
	var prevMoved float64
	for i, st := range out.status { // one a second
		t := float64(i + 1)
		x = append(x, t)
		lim = append(lim, max(st.Rate, 0)/1e6)
		m := float64(st.MovedBytes) / 1e6
		meas = append(meas, max(0, m-prevMoved))
		prevMoved = m
	}
	c.Panels[2].Series = []chart.Series{{Name: "controller's rate (0 = unlimited)", X: x, Y: lim}, {Name: "snapshot sent, MB/s", X: x, Y: meas}}
	return c
}
