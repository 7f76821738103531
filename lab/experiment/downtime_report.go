package experiment

import (
	"cmp"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sluicedb/sluice/internal/units"
	"github.com/sluicedb/sluice/lab/chart"
	"github.com/sluicedb/sluice/lab/workload"
)

// writeDowntimeOutputs writes summary.json, probe.csv, workload.csv,
// report.md and downtime.png into opt.Out.
func writeDowntimeOutputs(opt DowntimeOptions, bed string, start time.Time, res DowntimeResult, samples []dtSample, wStart time.Time, secs []workload.Second) error {
	b, _ := json.MarshalIndent(res, "", "  ")
	if err := os.WriteFile(filepath.Join(opt.Out, "summary.json"), append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("downtime: %w", err)
	}
	runs := append(slices.Clone(res.Live), res.StopAndCopy...)
	slices.SortFunc(runs, func(a, b DowntimeRun) int { return cmp.Compare(a.HeldAtS, b.HeldAtS) })
	if err := writeDowntimeCSV(filepath.Join(opt.Out, "probe.csv"), start, samples, runs, opt.Window); err != nil {
		return err
	}
	if err := writeDowntimeWorkloadCSV(filepath.Join(opt.Out, "workload.csv"), wStart.Sub(start), secs); err != nil {
		return err
	}
	if err := writeDowntimePNG(filepath.Join(opt.Out, "downtime.png"), start, samples, res, opt.Window, opt.ProbeInterval); err != nil {
		return err
	}
	return writeFile(opt.Out, "report.md", downtimeReport(opt, start, res, bed))
}

// writeDowntimeCSV writes one row per probe: t_s (issue time, seconds since
// the bench started), latency_ms, ok, and — for probes within a move's
// window — the move (mode, run, migration id) and the time since its hold.
func writeDowntimeCSV(path string, start time.Time, samples []dtSample, runs []DowntimeRun, window time.Duration) error {
	header := []string{"t_s", "latency_ms", "ok", "mode", "run", "migration_id", "since_hold_s"}
	ws := window.Seconds()
	return writeCSV(path, header, func(emit func([]string)) {
		j := 0
		for _, s := range samples {
			t := s.At.Sub(start).Seconds()
			for j < len(runs) && t > runs[j].ReleasedAtS+ws {
				j++
			}
			row := []string{strconv.FormatFloat(t, 'f', 4, 64), strconv.FormatFloat(dtMs(s.Latency), 'f', 3, 64), strconv.FormatBool(!s.Err), "", "", "", ""}
			if j < len(runs) && t >= runs[j].HeldAtS-ws {
				r := runs[j]
				row[3], row[4], row[5], row[6] = r.Mode, strconv.Itoa(r.Run), r.ID, strconv.FormatFloat(t-r.HeldAtS, 'f', 4, 64)
			}
			emit(row)
		}
	})
}

// writeDowntimeWorkloadCSV writes the workload's seconds: t_s (the second's
// start, seconds since the bench started; offset is the workload's start
// on that clock), then the workload's own figures.
func writeDowntimeWorkloadCSV(path string, offset time.Duration, secs []workload.Second) error {
	header := []string{"t_s", "count", "errors", "mean_ms", "p50_ms", "p99_ms", "queue_ms", "queue_len"}
	ff := func(x float64) string { return strconv.FormatFloat(x, 'f', 3, 64) }
	return writeCSV(path, header, func(emit func([]string)) {
		for _, s := range secs {
			emit([]string{ff((offset + time.Duration(s.T)*time.Second).Seconds()), strconv.Itoa(s.Count), strconv.Itoa(s.Errors),
				ff(s.MeanMs), ff(s.P50Ms), ff(s.P99Ms), ff(s.QueueMs), strconv.Itoa(s.QueueLen)})
		}
	})
}

// writeDowntimePNG plots, against time since the hold, how long the probe in
// flight has been waiting (a sawtooth: each probe's wait grows from its issue
// to its completion), one line per move, live above and stop-and-copy below,
// with the agent's median figure dashed.
func writeDowntimePNG(path string, start time.Time, samples []dtSample, res DowntimeResult, window, every time.Duration) error {
	panel := func(title string, runs []DowntimeRun, agentMs float64) chart.Panel {
		p := chart.Panel{Title: title, YLabel: "probe's wait so far, ms"}
		ws := window.Seconds()
		var xmax float64
		for _, r := range runs {
			var xs, ys []float64
			for _, s := range samples {
				t := s.At.Sub(start).Seconds()
				if t < r.HeldAtS-ws || t > r.ReleasedAtS+ws {
					continue
				}
				// The probe's wait rises from 0 at its issue to its latency at
				// its completion (a failed probe leaves a gap).
				x0, y1 := t-r.HeldAtS, dtMs(s.Latency)
				if s.Err {
					y1 = math.NaN()
				}
				xs, ys = append(xs, x0, x0+s.Latency.Seconds()), append(ys, 0, y1)
			}
			xmax = max(xmax, r.ReleasedAtS-r.HeldAtS+ws)
			p.Series = append(p.Series, chart.Series{Name: fmt.Sprintf("run %d (%s→%s)", r.Run, dtServer(r.From), dtServer(r.To)), X: xs, Y: ys})
		}
		p.Series = append(p.Series, chart.Series{Name: fmt.Sprintf("agent's median %.0f ms", agentMs), X: []float64{-ws, xmax}, Y: []float64{agentMs, agentMs}, Dashed: true})
		return p
	}
	c := chart.Chart{
		Title: fmt.Sprintf("sluice bench downtime: %s tenant under YCSB — live freeze %.0f ms vs stop-and-copy downtime %.0f ms (medians)",
			units.FormatBytes(float64(res.TenantBytes)), res.LiveFreezeMs, res.StopAndCopyDowntimeMs),
		XLabel: fmt.Sprintf("seconds since the proxy held the tenant (probe: SELECT 1 through the proxy every %v)", every),
		Panels: []chart.Panel{
			panel("live migration", res.Live, res.LiveFreezeMs),
			panel("stop-and-copy", res.StopAndCopy, res.StopAndCopyDowntimeMs),
		},
	}
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("downtime: %w", err)
	}
	if err := chart.WritePNG(f, c); err != nil {
		f.Close()
		return fmt.Errorf("downtime: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("downtime: %w", err)
	}
	return nil
}

func dtServer(i int) string { return string(rune('A' + i)) }

// downtimeReport is the Markdown report.
func downtimeReport(opt DowntimeOptions, start time.Time, res DowntimeResult, bed string) string {
	var b strings.Builder
	cmdline := opt.Command
	if cmdline == "" {
		cmdline = "(library call)"
	}
	rate := "unlimited"
	if opt.Rate > 0 {
		rate = units.FormatRate(opt.Rate)
	}
	b.WriteString(reportHeader("sluice bench downtime: live migration vs stop-and-copy", cmdline, start, bed))
	fmt.Fprintf(&b, "One tenant of %s (requested %s) under Slacker's YCSB workload (%.0f transactions/s, MPL %d) through the proxy, "+
		"moved between two servers alternately by %d live migrations (copy rate %s) and %d stop-and-copy ones. "+
		"*Agent* is the agent's hold → release time (live: the handover freeze; stop-and-copy: the downtime). "+
		"*Probe* is a separate connection through the proxy issuing `SELECT 1` every %v: the longest probe, and the longest gap "+
		"between successful probes, within %v of the hold and release. *Workload max* is the longest YCSB transaction (queue + execution) "+
		"completed in the seconds overlapping the same window. *Recovery* is the time from the release to the end of the first whole second "+
		"whose YCSB transactions had a mean latency ≤ %.1f ms (%.1f× the baseline mean of %.1f ms, at least +5 ms) with no arrival left queued; "+
		"the next move waits for it (at most %v; -1 = not recovered by then). Medians over the runs:\n\n",
		units.FormatBytes(float64(res.TenantBytes)), units.FormatBytes(float64(opt.Size)), opt.TxRate, opt.MPL,
		len(res.Live), rate, len(res.StopAndCopy), opt.ProbeInterval, opt.Window, res.RecoveryLimitMs, opt.RecoverFactor, res.BaselineMeanMs, opt.Recover)
	fmt.Fprintf(&b, "| mode | agent, ms | probe max, ms | probe gap, ms | workload max, ms | recovery, s | migration, s |\n|---|---:|---:|---:|---:|---:|---:|\n")
	fmt.Fprintf(&b, "| live | %.1f | %.1f | %.1f | %.1f | %.2f | %.1f |\n", res.LiveFreezeMs, res.LiveProbeMaxMs, res.LiveProbeGapMs, res.LiveWorkloadMaxMs, res.LiveRecoveryS, res.LiveSeconds)
	fmt.Fprintf(&b, "| stop-and-copy | %.1f | %.1f | %.1f | %.1f | %.2f | %.1f |\n\n", res.StopAndCopyDowntimeMs, res.StopAndCopyProbeMaxMs, res.StopAndCopyProbeGapMs, res.StopAndCopyWorkloadMaxMs, res.StopAndCopyRecoveryS, res.StopAndCopySeconds)
	if res.DowntimeRatio > 0 {
		fmt.Fprintf(&b, "Stop-and-copy's downtime is %.1f× the live freeze.\n\n", res.DowntimeRatio)
	}
	fmt.Fprintf(&b, "Every run:\n\n| mode | run | from→to | agent, ms | probe max, ms | probe gap, ms | probe errors | workload max, ms | workload errors | recovery, s | migration, s | bytes |\n|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, r := range append(slices.Clone(res.Live), res.StopAndCopy...) {
		fmt.Fprintf(&b, "| %s | %d | %s→%s | %.1f | %.1f | %.1f | %d | %.1f | %d | %.2f | %.1f | %s |\n", r.Mode, r.Run, dtServer(r.From), dtServer(r.To),
			r.AgentMs, r.ProbeMaxMs, r.ProbeGapMs, r.ProbeErrors, r.WorkloadMaxMs, r.WorkloadErrors, r.RecoveryS, r.Seconds, units.FormatBytes(float64(r.Bytes)))
	}
	fmt.Fprintf(&b, "\nLedger, checked row by row on the final owner: %d writes acknowledged, %d missing, %d duplicated (%d failed transactions over the run).\n",
		res.WritesAcknowledged, res.WritesMissing, res.WritesDuplicated, res.WorkloadErrors)
	fmt.Fprintf(&b, "\nFiles: summary.json, probe.csv (every probe; mode/run/since_hold_s set within a move's window), workload.csv (the YCSB workload per second), downtime.png.\n")
	return b.String()
}
