package experiment

import (
	"fmt"
	"image/color"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/sluicedb/sluice/lab/chart"
	"github.com/sluicedb/sluice/lab/testbed"
)

// The reshard bench's outputs in Out: series.csv (per method and second:
// commits, errors, p50, p99, whether the change was in progress),
// status.csv (the driver's polled status), summary.json (the result),
// report.md, and reshard.png (Squall's Fig. 9–11: throughput and p99 over
// time, one line per method, the change's start and each method's end
// marked).
const (
	ReshardStatusFile = "status.csv"
	ReshardPNG        = "reshard.png"
)

// methodColor gives each method the same colour in every figure.
var methodColor = map[string]color.Color{
	"stop-and-copy": color.RGBA{R: 150, G: 150, B: 150, A: 255},
	"reactive":      color.RGBA{R: 230, G: 140, B: 0, A: 255},
	"zephyr":        color.RGBA{R: 160, G: 60, B: 180, A: 255},
	"squall":        color.RGBA{R: 30, G: 90, B: 200, A: 255},
	"controlled":    color.RGBA{R: 200, G: 30, B: 30, A: 255},
}

func writeReshardOutputs(o ReshardOptions, bed *testbed.Bed, r ReshardResult, started time.Time) error {
	ff := func(x float64) string { return strconv.FormatFloat(x, 'f', -1, 64) }
	err := writeCSV(filepath.Join(o.Out, SeriesFile),
		[]string{"method", "t", "t_since_change_s", "commits", "errors", "p50_ms", "p99_ms", "reconfiguring"},
		func(emit func([]string)) {
			for _, m := range r.Methods {
				for _, s := range m.Seconds {
					in := float64(s.T+1) > m.StartS && float64(s.T) < m.EndS
					emit([]string{m.Method, strconv.Itoa(s.T), ff(round(float64(s.T)-m.StartS, 2)), strconv.Itoa(s.Commits),
						strconv.Itoa(s.Errors), ff(s.P50Ms), ff(s.P99Ms), strconv.FormatBool(in)})
				}
			}
		})
	if err != nil {
		return err
	}
	err = writeCSV(filepath.Join(o.Out, ReshardStatusFile),
		[]string{"method", "t", "phase", "chunks_complete", "chunks", "bytes_copied", "rate_bytes_s", "latency_ms"},
		func(emit func([]string)) {
			for _, m := range r.Methods {
				for _, p := range m.Status {
					emit([]string{m.Method, ff(p.T), p.Phase, strconv.Itoa(p.Complete), strconv.Itoa(p.Chunks),
						strconv.FormatInt(p.BytesCopied, 10), ff(p.Rate), ff(p.LatencyMs)})
				}
			}
		})
	if err != nil {
		return err
	}
	if err := writeJSON(o.Out, SummaryFile, r); err != nil {
		return err
	}
	if err := writePNG(o.Out, ReshardPNG, reshardChart(r)); err != nil {
		return err
	}
	return writeFile(o.Out, ReportFile, reshardReport(o, bed, r, started))
}

// reshardChart is Squall's Fig. 9–11 for one scenario: every method's
// throughput and p99 a second, on time since its change was requested.
func reshardChart(r ReshardResult) chart.Chart {
	var tps, p99 []chart.Series
	marks := []chart.Mark{{Name: "change requested", X: 0}}
	for _, m := range r.Methods {
		var x, y, xl, yl []float64
		for _, s := range m.Seconds {
			x = append(x, float64(s.T)+0.5-m.StartS)
			y = append(y, float64(s.Commits))
			if s.Commits > 0 { // a second without commits has no latency: no point
				xl = append(xl, float64(s.T)+0.5-m.StartS)
				yl = append(yl, s.P99Ms)
			}
		}
		c := methodColor[m.Method]
		tps = append(tps, chart.Series{Name: m.Method, X: x, Y: y, Color: c})
		p99 = append(p99, chart.Series{Name: m.Method, X: xl, Y: yl, Color: c, Points: true})
		end := m.Method + " done"
		switch {
		case m.Phase == "failed":
			end = m.Method + " failed (rolled back)"
		case !m.Finished:
			end = m.Method + " cut at its bound"
		}
		marks = append(marks, chart.Mark{Name: end, X: m.EndS - m.StartS, Color: c})
	}
	return chart.Chart{
		Title:  fmt.Sprintf("%s, %s: live reconfiguration by method (Squall Fig. 9–11)", r.Scenario, r.Workload),
		XLabel: "seconds since the change was requested",
		Panels: []chart.Panel{
			{YLabel: "throughput, commits/s", Series: tps},
			{YLabel: "p99 latency (1 s), ms", Series: p99},
		},
		Marks:         marks,
		LegendOutside: true,
	}
}

// reshardReport is report.md.
func reshardReport(o ReshardOptions, bed *testbed.Bed, r ReshardResult, started time.Time) string {
	var b strings.Builder
	b.WriteString(reportHeader(fmt.Sprintf("Live reconfiguration: %s, %s", r.Scenario, r.Workload), o.Command, started, bed.Describe()))
	size := fmt.Sprintf("%d YCSB records", r.Records)
	if r.Workload == WorkloadTPCC {
		size = fmt.Sprintf("%d warehouses, %d customers a district", r.Warehouses, o.Customers)
	}
	layout := "one server each; the keyspace's agent, which drives the change, is " + bed.Servers[0].Name + "'s"
	if o.OneServer {
		layout = "all on server " + bed.Servers[0].Name + ", whose agent holds the keyspace and drives the change"
	}
	fmt.Fprintf(&b, "%d partitions (one tenant each, %s); %s, %.0f MB loaded; the change moves %.1f %% of the keys (≈ %.0f MB). Closed loop, %d connections through the proxy's keyspace router; the change is requested after %.0f s. Each method on a freshly loaded keyspace (same data, same seed).\n\n",
		r.Partitions, layout, size, float64(r.LoadedBytes)/1e6, 100*r.MovedShare, r.MovedShare*float64(r.LoadedBytes)/1e6, r.MPL, r.BeforeS)
	b.WriteString("| method | reconfig s | finished | pre tps | mean tps during | min 1 s tps | zero-commit s | p99 before ms | p99 during ms | writes acked | missing | duplicated | keyspace check |\n")
	b.WriteString("|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|\n")
	for _, m := range r.Methods {
		fin := "yes"
		if !m.Finished {
			fin = "no: " + m.FinishedBy
			if m.Error != "" {
				fin = "failed: " + m.Error
			}
		}
		ck := "OK"
		if !m.KeyspaceCheckOK {
			ck = fmt.Sprintf("FAILED (%d misplaced, reference equal %v)", m.KeyspaceMisplaced, m.ReferenceEqual)
		}
		fmt.Fprintf(&b, "| %s | %.1f | %s | %.0f | %.0f | %.0f | %d | %.1f | %.1f | %d | %d | %d | %s |\n",
			m.Method, m.ReconfigSeconds, fin, m.PreTPS, m.MeanTPSDuring, m.MinTPS1s, m.ZeroCommitSeconds,
			m.P99MsBefore, m.P99MsDuring, m.WritesAcknowledged, m.WritesMissing, m.WritesDuplicated, ck)
	}
	b.WriteString("\n## Goals (reported, not asserted)\n\n")
	b.WriteString("controlled: never a second without commits; min 1 s throughput ≥ 0.9 × pre-change; mean dip ≤ 10 %; p99 during ≤ 1.5 × before; no slower than squall at an equal or smaller dip. stop-and-copy shows its zero-commit seconds.\n\n")
	b.WriteString("| method | no zero second | min / pre | dip % | p99 during / before | vs squall | switch ms | MB copied | chunks | reactive pulls | async pulls |\n")
	b.WriteString("|---|---|---:|---:|---:|---|---:|---:|---:|---:|---:|\n")
	for _, m := range r.Methods {
		vs := "–"
		if m.Goals.VsSquall != nil {
			vs = fmt.Sprint(*m.Goals.VsSquall)
		}
		fmt.Fprintf(&b, "| %s | %v | %.3f %s | %.1f %s | %.2f %s | %s | %.0f | %.1f | %d | %d | %d |\n",
			m.Method, m.Goals.NoZeroSecond, m.Goals.MinOverPre, tick(m.Goals.MinOverPreOK), m.Goals.DipPct, tick(m.Goals.DipPctOK),
			m.Goals.P99Ratio, tick(m.Goals.P99RatioOK), vs, m.SwitchMs, float64(m.BytesCopied)/1e6, m.Chunks, m.ReactivePulls, m.AsyncPulls)
	}
	b.WriteString("\n## Ledgers\n\n")
	for _, m := range r.Methods {
		fmt.Fprintf(&b, "- %s: %s; %d transactions, %d errors", m.Method, m.Verdict, m.Transactions, m.Errors)
		if m.SetpointMs > 0 {
			fmt.Fprintf(&b, "; setpoint %.1f ms (p99)", m.SetpointMs)
		}
		b.WriteString("\n")
	}
	b.WriteString("\nA method not finished within its bound (3 × the longest earlier method, at least the minimum bound, or --bound) is reported with reconfig_seconds measured to the bound and finished false; the workload then stops and every chunk not yet complete is pulled on request (client.ReshardPull), then the change is followed to done before the checks.\n")
	if len(r.Notes) > 0 {
		b.WriteString("\n## Notes\n\n")
		for _, n := range r.Notes {
			fmt.Fprintf(&b, "- %s\n", n)
		}
	}
	fmt.Fprintf(&b, "\nFiles: %s, %s, %s, %s.\n\n![](%s)\n", SeriesFile, ReshardStatusFile, SummaryFile, ReshardPNG, ReshardPNG)
	return b.String()
}

func tick(ok bool) string {
	if ok {
		return "✓"
	}
	return "✗"
}
