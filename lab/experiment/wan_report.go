package experiment

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/sluicedb/sluice/lab/chart"
	"github.com/sluicedb/sluice/lab/workload"
	"github.com/sluicedb/sluice/migration"
)

// The WAN experiment's files besides SummaryFile and ReportFile.
const (
	WANMovesFile  = "moves.csv"
	WANSeriesFile = "series.csv"
	WANPlotFile   = "wan.png"
)

// wanSeries joins the workload's seconds with the bytes the snapshots sent
// in each (from consecutive progress samples of a move in its snapshot
// phase, credited to the second the later sample falls in).
func wanSeries(secs []workload.Second, samples []wanSample) []wanSecond {
	sent := map[int]int64{}
	for i := 1; i < len(samples); i++ {
		a, b := samples[i-1], samples[i]
		if a.Move == b.Move && a.Phase == string(migration.PhaseSnapshot) && b.Phase == a.Phase && b.Bytes > a.Bytes {
			sent[int(b.T)] += b.Bytes - a.Bytes
		}
	}
	out := make([]wanSecond, len(secs))
	for i, s := range secs {
		out[i] = wanSecond{Second: s, SnapshotMBs: float64(sent[s.T]) / 1e6}
	}
	return out
}

// writeWANOutputs writes summary.json, moves.csv, series.csv, report.md and
// wan.png into o.Out.
func writeWANOutputs(o WANOptions, r WANResult) error {
	if err := os.MkdirAll(o.Out, 0o755); err != nil {
		return fmt.Errorf("wan: %w", err)
	}
	if err := writeJSON(o.Out, SummaryFile, r); err != nil {
		return err
	}
	ff := func(x float64, d int) string { return strconv.FormatFloat(x, 'f', d, 64) }
	err := writeCSV(filepath.Join(o.Out, WANMovesFile),
		[]string{"n", "from", "to", "snapshot_bytes", "snapshot_s", "snapshot_mb_s", "agent_rate_mb_s", "link_utilization", "early_wal_bytes", "snapshot_and_wal_mb_s", "freeze_ms", "migration_s"},
		func(emit func([]string)) {
			for _, m := range r.Moves {
				emit([]string{strconv.Itoa(m.N), m.From, m.To, strconv.FormatInt(m.SnapshotBytes, 10), ff(m.SnapshotSeconds, 2),
					ff(m.SnapshotMBs, 2), ff(m.AgentRateMBs, 2), ff(m.SnapshotMBs/(o.LinkMbit/8), 3), strconv.FormatInt(m.EarlyWALBytes, 10), ff(m.SharedMBs, 2),
					ff(m.FreezeMs, 1), ff(m.Seconds, 1)})
			}
		})
	if err != nil {
		return err
	}
	err = writeCSV(filepath.Join(o.Out, WANSeriesFile), []string{"t", "transactions", "errors", "mean_ms", "p99_ms", "snapshot_mb_s"},
		func(emit func([]string)) {
			for _, s := range r.Series {
				emit([]string{strconv.Itoa(s.T), strconv.Itoa(s.Count), strconv.Itoa(s.Errors), ff(s.MeanMs, 2), ff(s.P99Ms, 2), ff(s.SnapshotMBs, 2)})
			}
		})
	if err != nil {
		return err
	}
	if err := writePNG(o.Out, WANPlotFile, wanChart(o, r)); err != nil {
		return err
	}
	return writeFile(o.Out, ReportFile, wanReport(o, r))
}

// wanChart: the snapshot's send rate per second against the link's
// capacity and one plain TCP stream's rate, and the workload's latency,
// with every handover marked.
func wanChart(o WANOptions, r WANResult) chart.Chart {
	var t, snap, mean, p99 []float64
	for _, s := range r.Series {
		x := float64(s.T) + 0.5
		t = append(t, x)
		snap = append(snap, s.SnapshotMBs)
		if s.Count > 0 {
			mean = append(mean, s.MeanMs)
			p99 = append(p99, s.P99Ms)
		} else {
			mean, p99 = append(mean, math.NaN()), append(p99, math.NaN())
		}
	}
	c := chart.Chart{
		Title:         fmt.Sprintf("sluice bench wan: %.0f Mbit/s, %.1f ms RTT, %d moves under YCSB", o.LinkMbit, r.RTTMs, len(r.Moves)),
		XLabel:        "seconds since the workload started",
		LegendOutside: true,
		Panels: []chart.Panel{
			{YLabel: "snapshot sent, MB/s", Series: []chart.Series{
				{Name: "snapshot (per second)", X: t, Y: snap},
				chart.Const(fmt.Sprintf("link capacity %.1f MB/s", o.LinkMbit/8), t, o.LinkMbit/8),
				chart.Const(fmt.Sprintf("goal %.0f%% of it", 100*SnapshotGoalShare), t, SnapshotGoalShare*o.LinkMbit/8),
				chart.Const(fmt.Sprintf("one plain TCP stream %.1f MB/s", r.LinkTCPMBs), t, r.LinkTCPMBs),
			}},
			{YLabel: "transaction latency, ms", Series: []chart.Series{
				{Name: "mean (1 s)", X: t, Y: mean}, {Name: "p99 (1 s)", X: t, Y: p99},
			}},
		},
	}
	c.Panels[0].Series[2].Dashed, c.Panels[0].Series[3].Dashed = true, true
	for i, m := range r.Moves {
		name := ""
		if i == 0 {
			name = "handover"
		}
		c.Marks = append(c.Marks, chart.Mark{Name: name, X: m.HeldS})
	}
	return c
}

// wanReport is report.md.
func wanReport(o WANOptions, r WANResult) string {
	var b strings.Builder
	b.WriteString(reportHeader("sluice bench wan", o.Command, r.started, r.bed))
	fmt.Fprintf(&b, "Tenant of %.0f MB (YCSB usertable) moved %d times between host 1 and host 2, YCSB at %.0f tx/s over %d connections through the proxy on its own host.\n\n",
		float64(o.Size)/1e6, o.Moves, o.TxRate, o.MPL)
	yes := func(ok bool) string {
		if ok {
			return "met"
		}
		return "**not met**"
	}
	b.WriteString("| figure | value | goal |\n|---|---|---|\n")
	fmt.Fprintf(&b, "| the servers' path (htb, each way) | %.0f Mbit/s = %.1f MB/s | |\n", r.LinkMbitS, r.LinkMbitS/8)
	fmt.Fprintf(&b, "| RTT between the servers (TCP handshake, median) | %.2f ms (delay line %.1f ms) | |\n", r.RTTMs, r.RTTConfiguredMs)
	fmt.Fprintf(&b, "| one plain TCP stream over the link (baseline) | %.2f MB/s | |\n", r.LinkTCPMBs)
	fmt.Fprintf(&b, "| snapshot rate (median of moves) | %.2f MB/s | |\n", r.SnapshotMBs)
	fmt.Fprintf(&b, "| link utilization | %.3f (%.3f of the plain TCP stream) | ≥ %.1f: %s |\n", r.LinkUtilization, r.TCPUtilization, SnapshotGoalShare, yes(r.SnapshotGoalMet))
	fmt.Fprintf(&b, "| snapshot and the WAL received meanwhile (median) | %.2f MB/s (%.3f of the link, %.3f of the plain TCP stream) | |\n", r.SharedMBs, r.SharedMBs/(r.LinkMbitS/8), r.SharedMBs/r.LinkTCPMBs)
	fmt.Fprintf(&b, "| freeze p50 / p99 / max (%d handovers) | %.1f / %.1f / %.1f ms | p99 ≤ %.0f ms: %s |\n", r.Handovers, r.FreezeP50Ms, r.FreezeP99Ms, r.FreezeMaxMs, r.FreezeGoalMs, yes(r.FreezeGoalMet))
	fmt.Fprintf(&b, "| writes acknowledged / missing / duplicated | %d / %d / %d | 0 missing, 0 duplicated |\n\n", r.WritesAcknowledged, r.WritesMissing, r.WritesDuplicated)
	fmt.Fprintf(&b, "Workload: %d transactions, %d errors, mean %.1f ms, p99 %.1f ms. Delay line: %d packets forwarded, %d dropped, %d overflowed.\n\n",
		r.Workload.Transactions, r.Workload.Errors, r.Workload.MeanMs, r.Workload.P99Ms, r.DelayLine.Forwarded, r.DelayLine.Dropped, r.DelayLine.Overflow)
	b.WriteString("| move | from → to | snapshot MB | s | MB/s | agent's MB/s | of link | early WAL MB | with WAL MB/s | freeze ms | migration s |\n|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, m := range r.Moves {
		fmt.Fprintf(&b, "| %d | %s → %s | %.1f | %.1f | %.2f | %.2f | %.2f | %.1f | %.2f | %.1f | %.1f |\n", m.N, m.From, m.To,
			float64(m.SnapshotBytes)/1e6, m.SnapshotSeconds, m.SnapshotMBs, m.AgentRateMBs, m.SnapshotMBs/(o.LinkMbit/8),
			float64(m.EarlyWALBytes)/1e6, m.SharedMBs, m.FreezeMs, m.Seconds)
	}
	fmt.Fprintf(&b, "\nThe snapshot rate is the bytes the snapshot phase reported sent between its first and last progress sample (every %v), over that time; MB = 10⁶ bytes. ", wanPoll)
	b.WriteString("The freeze is the agent's (hold to release). The link's capacity counts every byte the shaper lets through (headers included), so a payload stream tops out a few per cent under it; the plain TCP stream shows where.\n\n")
	fmt.Fprintf(&b, "![wan](%s)\n", WANPlotFile)
	return b.String()
}
