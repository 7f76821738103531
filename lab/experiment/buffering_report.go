package experiment

import (
	"fmt"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/sluicedb/sluice/lab/chart"
)

// WriteBuffering writes Buffering's outputs to dir: methods.csv (a row per
// method, profile and start), summary.json, report.md, buffering.png (the
// figures per scenario) and one timeline PNG per buffering trial with fio
// (timeline-<profile>-<start>.png).
func WriteBuffering(dir string, res *BufferingResult) error {
	f := func(x float64) string { return strconv.FormatFloat(x, 'f', 3, 64) }
	err := writeCSV(filepath.Join(dir, "methods.csv"), []string{"method", "profile", "fio_start_s", "migration_s", "migration_normalized", "colocated_mbps", "colocated_normalized", "overlap_s", "locked_steps"}, func(emit func([]string)) {
		for _, r := range res.Methods {
			emit([]string{r.Method, r.Profile, f(r.FioAtS), f(r.MigrationSeconds), f(r.MigrationSecondsNormalized), f(r.ColocatedThroughput), f(r.ColocatedThroughputNormalized), strconv.Itoa(r.OverlapSeconds), strconv.Itoa(r.LockedSteps)})
		}
	})
	if err != nil {
		return err
	}
	if err := writeJSON(dir, "summary.json", res); err != nil {
		return err
	}
	if err := writeFile(dir, "report.md", bufferingReport(res)); err != nil {
		return err
	}
	if err := writePNG(dir, "buffering.png", bufferingChart(res)); err != nil {
		return err
	}
	for _, r := range res.Methods {
		if r.Method == "buffering" && r.res != nil {
			name := fmt.Sprintf("timeline-%s-%.0fs.png", r.Profile, r.FioAtS)
			if err := writePNG(dir, name, bufferingTimeline(r)); err != nil {
				return err
			}
		}
	}
	return nil
}

func bufferingReport(res *BufferingResult) string {
	var b strings.Builder
	b.WriteString(reportHeader("Migration buffering against co-located fio", res.Command, res.Started, res.Bed))
	fmt.Fprintf(&b, "Tenant %.0f MB, files dropped from the page cache before each migration; top speed %.1f MB/s (fixed rate %.1f MB/s), PID setpoint %.1f ms, profile %s, disk %s. fio runs %.0f s in the source server's disk group, started with the migration and %.0f s into it.\n\n",
		float64(res.TenantBytes)/1e6, res.MaxRate/1e6, res.FixedRate/1e6, res.SetpointMs, res.Profile, res.Device, res.FioSeconds, res.LateStartS)
	fmt.Fprintf(&b, "Classifier (%s), held-out samples: trained accuracy %.3f, F1 %.3f; the thesis's coefficients %.3f, F1 %.3f.\n\n",
		res.Model, res.ClassifierAccuracy, res.ClassifierF1, res.DefaultModelAccuracy, res.DefaultModelF1)
	b.WriteString("Alone: ")
	for _, m := range BufferingMethods {
		fmt.Fprintf(&b, "%s %.1f s; ", m, res.AloneSeconds[m])
	}
	for p, v := range res.FioNominalMBps {
		fmt.Fprintf(&b, "fio %s %.2f MB/s; ", p, v)
	}
	b.WriteString("\n\n| fio profile | fio start, s | method | migration, s | ÷ alone | fio MB/s | ÷ fio alone | overlap, s | locked steps |\n|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range res.Methods {
		fmt.Fprintf(&b, "| %s | %.0f | %s | %.1f | %.2f | %.2f | %.3f | %d | %d |\n", r.Profile, r.FioAtS, r.Method, r.MigrationSeconds,
			r.MigrationSecondsNormalized, r.ColocatedThroughput, r.ColocatedThroughputNormalized, r.OverlapSeconds, r.LockedSteps)
	}
	b.WriteString("\n## Goals\n\n")
	for _, g := range res.Goals {
		met := "not met"
		if g.Met {
			met = "met"
		}
		fmt.Fprintf(&b, "- %s: **%s** (%s)\n", g.Name, met, g.Note)
	}
	return b.String()
}

// bufferingChart plots, per method, the co-located throughput and the
// migration time (both normalized) for each scenario (profile × start).
func bufferingChart(res *BufferingResult) chart.Chart {
	idx := map[string]float64{}
	var names []string
	thr := map[string]*chart.Series{}
	mig := map[string]*chart.Series{}
	for _, m := range BufferingMethods {
		thr[m] = &chart.Series{Name: m, Points: true}
		mig[m] = &chart.Series{Name: m, Points: true}
	}
	for _, r := range res.Methods {
		key := fmt.Sprintf("%s@%.0fs", r.Profile, r.FioAtS)
		x, ok := idx[key]
		if !ok {
			x = float64(len(idx) + 1)
			idx[key] = x
			names = append(names, fmt.Sprintf("%.0f=%s", x, key))
		}
		thr[r.Method].X = append(thr[r.Method].X, x)
		thr[r.Method].Y = append(thr[r.Method].Y, r.ColocatedThroughputNormalized)
		mig[r.Method].X = append(mig[r.Method].X, x)
		mig[r.Method].Y = append(mig[r.Method].Y, r.MigrationSecondsNormalized)
	}
	var ts, ms []chart.Series
	for _, m := range BufferingMethods {
		ts, ms = append(ts, *thr[m]), append(ms, *mig[m])
	}
	n := float64(len(idx))
	ts = append(ts, chart.Series{Name: "goal 0.95", X: []float64{1, n}, Y: []float64{0.95, 0.95}, Dashed: true})
	ms = append(ms, chart.Series{Name: "goal 1.2 (late start)", X: []float64{1, n}, Y: []float64{1.2, 1.2}, Dashed: true})
	return chart.Chart{
		Title:         "Migration buffering vs fio: " + strings.Join(names, ", "),
		XLabel:        "scenario (fio profile @ start after the migration's)",
		LegendOutside: true,
		Panels: []chart.Panel{
			{YLabel: "fio throughput ÷ alone", Series: ts},
			{YLabel: "migration time ÷ alone", Series: ms},
		},
	}
}

// bufferingTimeline is one buffering trial: fio's throughput per second,
// and the loop's send and read-ahead rates.
func bufferingTimeline(r BufferingRow) chart.Chart {
	var ft, fy, lt, rate, pre []float64
	for i, v := range r.fio.PerSecond {
		ft = append(ft, r.fioStart+float64(i)+0.5)
		fy = append(fy, v/1e6)
	}
	for _, p := range r.res.Loop {
		lt = append(lt, p.T)
		rate = append(rate, p.Rate/1e6)
		pre = append(pre, p.Prefetch/1e6)
	}
	return chart.Chart{
		Title:  fmt.Sprintf("buffering, fio %s from %.0f s after the migration's start", r.Profile, r.FioAtS),
		XLabel: "seconds since the workload started",
		Spans:  []chart.Span{{Name: "migration", From: r.res.MigStart, To: r.res.MigEnd}},
		Panels: []chart.Panel{
			{YLabel: "fio MB/s", Series: []chart.Series{{Name: "fio throughput (1 s)", X: ft, Y: fy}}},
			{YLabel: "MB/s", Series: []chart.Series{{Name: "send rate", X: lt, Y: rate}, {Name: "read-ahead (prefetch) rate", X: lt, Y: pre, Dashed: true}}},
		},
	}
}
