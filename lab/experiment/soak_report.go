package experiment

import (
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/sluicedb/sluice/internal/units"
	"github.com/sluicedb/sluice/lab/chart"
	"github.com/sluicedb/sluice/lab/workload"
)

// Soak's output files, besides SummaryFile and ReportFile.
const (
	SoakMigrationsFile = "migrations.csv" // one row per migration
	SoakUsageFile      = "usage.csv"      // one row per reading of a process
	SoakWorkloadFile   = "workload.csv"   // the workload per second
	SoakPlotFile       = "soak.png"
)

// writeSoakOutputs writes the summary, the CSVs, the report and the plot
// into opt.Out. start is the soak's clock's zero; wStart the workload's.
func writeSoakOutputs(opt SoakOptions, bed string, start time.Time, res SoakResult, samples []SoakSample, wStart time.Time, secs []workload.Second) error {
	if err := writeJSON(opt.Out, SummaryFile, res); err != nil {
		return err
	}
	if err := writeSoakMigrations(filepath.Join(opt.Out, SoakMigrationsFile), res.Migrations); err != nil {
		return err
	}
	if err := writeSoakUsage(filepath.Join(opt.Out, SoakUsageFile), samples); err != nil {
		return err
	}
	if err := writeDowntimeWorkloadCSV(filepath.Join(opt.Out, SoakWorkloadFile), wStart.Sub(start), secs); err != nil {
		return err
	}
	if err := writePNG(opt.Out, SoakPlotFile, soakChart(res, samples)); err != nil {
		return err
	}
	return writeFile(opt.Out, ReportFile, soakReport(opt, start, res, bed))
}

func writeSoakMigrations(path string, ms []SoakMigration) error {
	header := []string{"n", "controller", "migration_id", "from", "to", "committed", "start_s", "end_s", "migration_seconds", "bytes", "freeze_ms", "error"}
	ff := func(x float64, d int) string { return strconv.FormatFloat(x, 'f', d, 64) }
	return writeCSV(path, header, func(emit func([]string)) {
		for _, m := range ms {
			emit([]string{strconv.Itoa(m.N), m.Controller, m.ID, m.From, m.To, strconv.FormatBool(m.Committed), ff(m.StartS, 2), ff(m.EndS, 2),
				ff(m.Seconds, 2), strconv.FormatInt(m.Bytes, 10), ff(m.FreezeMs, 1), m.Error})
		}
	})
}

func writeSoakUsage(path string, ss []SoakSample) error {
	header := []string{"t_s", "process", "pid", "rss_bytes", "fds", "mark", "error"}
	return writeCSV(path, header, func(emit func([]string)) {
		for _, s := range ss {
			emit([]string{strconv.FormatFloat(s.T, 'f', 2, 64), s.Process, strconv.Itoa(s.PID), strconv.FormatInt(s.RSSBytes, 10), strconv.Itoa(s.FDs), s.Mark, s.Error})
		}
	})
}

// soakChart plots, over the soak's minutes, each process's RSS and open
// fds, and each committed migration's freeze by controller, with the start
// and end readings marked.
func soakChart(res SoakResult, samples []SoakSample) chart.Chart {
	var names []string
	rss, fds := map[string]*chart.Series{}, map[string]*chart.Series{}
	for _, s := range samples {
		if s.Error != "" {
			continue
		}
		if rss[s.Process] == nil {
			names = append(names, s.Process)
			rss[s.Process], fds[s.Process] = &chart.Series{Name: s.Process}, &chart.Series{Name: s.Process}
		}
		x := s.T / 60
		rss[s.Process].X, rss[s.Process].Y = append(rss[s.Process].X, x), append(rss[s.Process].Y, float64(s.RSSBytes)/1e6)
		fds[s.Process].X, fds[s.Process].Y = append(fds[s.Process].X, x), append(fds[s.Process].Y, float64(s.FDs))
	}
	memP := chart.Panel{YLabel: "RSS, MB"}
	fdP := chart.Panel{YLabel: "open fds"}
	for _, n := range names {
		memP.Series, fdP.Series = append(memP.Series, *rss[n]), append(fdP.Series, *fds[n])
	}
	frP := chart.Panel{YLabel: "handover freeze, ms"}
	for _, c := range []string{SoakPID, SoakFixed} {
		s := chart.Series{Name: fmt.Sprintf("%s (p50 %.0f, p99 %.0f ms)", c, res.FreezeBy[c].P50Ms, res.FreezeBy[c].P99Ms), Points: true, Width: 0.5}
		for _, m := range res.Migrations {
			if m.Committed && m.Controller == c {
				s.X, s.Y = append(s.X, m.EndS/60), append(s.Y, m.FreezeMs)
			}
		}
		if len(s.X) > 0 {
			frP.Series = append(frP.Series, s)
		}
	}
	c := chart.Chart{
		Title: fmt.Sprintf("sluice lab soak: %d migrations of a %s tenant under YCSB in %.0f min — agents' and proxy's memory, fds, freezes",
			res.Committed, units.FormatBytes(float64(res.TenantBytes)), res.Seconds/60),
		XLabel:        "minutes since the soak began",
		Panels:        []chart.Panel{memP, fdP},
		LegendOutside: true,
	}
	if len(frP.Series) > 0 {
		c.Panels = append(c.Panels, frP)
	}
	for _, r := range []struct {
		name string
		ss   []SoakSample
	}{{"start reading (after the warm-up)", res.Start}, {"end reading", res.End}} {
		if len(r.ss) > 0 {
			c.Marks = append(c.Marks, chart.Mark{Name: r.name, X: r.ss[0].T / 60})
		}
	}
	return c
}

// trendText is a signed slope, or "n/a" for nil.
func trendText(x *float64) string {
	if x == nil {
		return "n/a"
	}
	return fmt.Sprintf("%+.1f", *x)
}

// soakReport is the Markdown report.
func soakReport(opt SoakOptions, start time.Time, res SoakResult, bed string) string {
	var b strings.Builder
	cmdline := opt.Command
	if cmdline == "" {
		cmdline = "(library call)"
	}
	b.WriteString(reportHeader("sluice lab soak: a tenant moved back and forth under load", cmdline, start, bed))
	fmt.Fprintf(&b, "One tenant of %s under Slacker's YCSB workload (%.0f transactions/s, MPL %d, uniform keys) through the proxy, "+
		"moved between two servers for %v (then to the next migration that brings it back where the warm-up left it), "+
		"the PID controller (the default profile, setpoint %.1f ms = 3 × the baseline mean %.1f ms unless given) and a fixed rate of %s alternating, "+
		"%v apart. The agents and the proxy are `sluice` processes of their own; their RSS (VmRSS) and open fds are read from /proc every %v, "+
		"the start reading after %d migrations, the end reading after the last.\n\n",
		units.FormatBytes(float64(res.TenantBytes)), opt.TxRate, opt.MPL, opt.Duration, res.SetpointMs, res.BaselineMeanMs,
		units.FormatRate(opt.FixedRate), opt.Settle, opt.SampleEvery, opt.Warmup)
	b.WriteString("## Checks\n\n")
	for _, c := range res.Checks {
		fmt.Fprintf(&b, "- %s\n", c.Line())
	}
	fmt.Fprintf(&b, "\n## Migrations and freezes\n\n%d committed in %.0f s (%d failed).\n\n", res.Committed, res.Seconds, res.Failed)
	b.WriteString("| controller | migrations | freeze p50, ms | p99, ms | max, ms |\n|---|---:|---:|---:|---:|\n")
	for _, c := range []string{SoakPID, SoakFixed} {
		f := res.FreezeBy[c]
		fmt.Fprintf(&b, "| %s | %d | %.1f | %.1f | %.1f |\n", c, f.N, f.P50Ms, f.P99Ms, f.MaxMs)
	}
	fmt.Fprintf(&b, "| all | %d | %.1f | %.1f | %.1f |\n", res.Freeze.N, res.Freeze.P50Ms, res.Freeze.P99Ms, res.Freeze.MaxMs)
	b.WriteString("\n## Processes\n\nStart and end: the medians of 5 reads 1 s apart. Trend: the least-squares slope of every reading between them.\n\n" +
		"| process | RSS start | RSS end | change | trend, MB/h | fds start | fds end | change | trend, fds/h |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, u := range res.Processes {
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %d | %d | %s | %s |\n", u.Process, units.FormatBytes(float64(u.StartRSSBytes)), units.FormatBytes(float64(u.EndRSSBytes)),
			pctText(u.RSSChangePct), trendText(u.RSSTrendMBPerHour), u.StartFDs, u.EndFDs, pctText(u.FDChangePct), trendText(u.FDTrendPerHour))
	}
	fmt.Fprintf(&b, "\n## Replication slots and WAL at the end\n\n%d slots, holding %s of WAL.", res.SlotsLeft, units.FormatBytes(float64(res.WALHeldBytes)))
	for _, d := range res.WALDirs {
		fmt.Fprintf(&b, " pg_wal of %s on %s: %s.", d.Tenant, d.Server, units.FormatBytes(float64(d.Bytes)))
	}
	fmt.Fprintf(&b, "\n\n## Ledger\n\nChecked row by row on the final owner: %d writes acknowledged, %d missing, %d duplicated (%d failed transactions over the run).\n",
		res.WritesAcknowledged, res.WritesMissing, res.WritesDuplicated, res.WorkloadErrors)
	fmt.Fprintf(&b, "\nFiles: %s, %s (every migration), %s (every reading of every process), %s (the workload per second), %s.\n",
		SummaryFile, SoakMigrationsFile, SoakUsageFile, SoakWorkloadFile, SoakPlotFile)
	return b.String()
}
