package experiment

import (
	"encoding/csv"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/sluicedb/sluice/lab/chart"
	"github.com/sluicedb/sluice/lab/workload"
	"github.com/sluicedb/sluice/loop"
)

// Output files every experiment writes into its directory: the per-second
// time series of all its trials, the summary (the command's --json), a
// Markdown report, and PNG plots.
const (
	SeriesFile  = "series.csv"
	SummaryFile = "summary.json"
	ReportFile  = "report.md"
	// HandoverFile lists, per trial with a handover, every transaction
	// that ended around it (TrialResult.HandoverTxs).
	HandoverFile = "handover.csv"
	// StartFile lists, per trial, every transaction that ended around its
	// migration's start (TrialResult.StartTxs).
	StartFile = "start.csv"
)

// Labeled is a trial with the name it has in the outputs.
type Labeled struct {
	Name       string
	SetpointMs float64 // 0 = none
	Res        *TrialResult
}

// writeHandovers writes HandoverFile: one row per transaction that ended
// around a trial's handover, its times in ms from the hold (negative =
// before), its queue wait and execution (ms), the workload connection that
// ran it, and whether it failed.
func writeHandovers(dir string, trials []Labeled) error {
	return writeTxs(filepath.Join(dir, HandoverFile), trials, "freeze_ms", (*TrialResult).HandoverTxs)
}

// writeStarts writes StartFile: writeHandovers' rows for the transactions
// around each trial's migration start, times in ms from it, without the
// freeze column.
func writeStarts(dir string, trials []Labeled) error {
	return writeTxs(filepath.Join(dir, StartFile), trials, "", (*TrialResult).StartTxs)
}

// writeTxs writes the transactions pick returns for each trial; with
// freeze set (its column's name), each row carries the trial's FreezeMs.
func writeTxs(path string, trials []Labeled, freeze string, pick func(*TrialResult) []workload.Tx) error {
	header := []string{"trial"}
	if freeze != "" {
		header = append(header, freeze)
	}
	header = append(header, "arrival_ms", "begin_ms", "end_ms", "latency_ms", "queue_ms", "execution_ms", "worker", "failed")
	ms := func(d time.Duration) string { return strconv.FormatFloat(float64(d.Microseconds())/1000, 'f', 3, 64) }
	return writeCSV(path, header, func(emit func([]string)) {
		for _, tr := range trials {
			for _, tx := range pick(tr.Res) {
				row := []string{tr.Name}
				if freeze != "" {
					row = append(row, strconv.FormatFloat(tr.Res.FreezeMs, 'f', 1, 64))
				}
				emit(append(row, ms(tx.Arrival), ms(tx.Begin), ms(tx.End),
					ms(tx.End-tx.Arrival), ms(tx.Begin-tx.Arrival), ms(tx.End-tx.Begin), strconv.Itoa(tx.Worker), strconv.FormatBool(tx.Failed)))
			}
		}
	})
}

// writeCSV creates the file at path and writes header, then every row rows
// emits. It returns the first error of creating, writing or closing the
// file.
func writeCSV(path string, header []string, rows func(emit func([]string))) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("experiment: %w", err)
	}
	w := csv.NewWriter(f)
	w.Write(header)
	rows(func(r []string) { w.Write(r) })
	w.Flush()
	if err := w.Error(); err != nil {
		f.Close()
		return fmt.Errorf("experiment: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("experiment: %w", err)
	}
	return nil
}

// writeSeries writes one row per trial second: the workload's latency and
// throughput, the control loop's rate and process variable at that second,
// the phase, and the controller's reason for that step's rate (the PID's
// working setpoint, error and output: how a trial's latency came about).
func writeSeries(dir string, trials []Labeled) error {
	header := []string{"trial", "t", "migrating", "tps", "mean_latency_ms", "p95_latency_ms", "queue_ms", "arrival_rate", "setpoint_ms", "loop_latency_ms", "rate_mb_s", "phase", "source_cpu_throttled_pct", "reason"}
	ff := func(x float64) string {
		if math.IsNaN(x) {
			return ""
		}
		return strconv.FormatFloat(x, 'f', 3, 64)
	}
	return writeCSV(filepath.Join(dir, SeriesFile), header, func(emit func([]string)) {
		for _, tr := range trials {
			r := tr.Res
			for _, s := range r.Seconds {
				t := float64(s.T) + 0.5
				mig := t >= r.MigStart && t < r.MigEnd
				lat, p95, q := math.NaN(), math.NaN(), math.NaN()
				if s.Count > 0 {
					lat, p95, q = s.MeanMs, s.P95Ms, s.QueueMs
				}
				p, ok := pointAt(r.Loop, t)
				rate, pv, phase, cpu, why := math.NaN(), math.NaN(), "", math.NaN(), ""
				if ok && mig {
					rate, phase, why = p.Rate/1e6, p.Phase, p.Reason
					if p.LatencyMs >= 0 {
						pv = p.LatencyMs
					}
					if p.CPUThrottledPct != nil {
						cpu = *p.CPUThrottledPct
					}
				}
				m := "0"
				if mig {
					m = "1"
				}
				sp := math.NaN()
				if tr.SetpointMs > 0 {
					sp = tr.SetpointMs
				}
				emit([]string{tr.Name, strconv.Itoa(s.T), m, strconv.Itoa(s.Count), ff(lat), ff(p95), ff(q), ff(s.Rate), ff(sp), ff(pv), ff(rate), phase, ff(cpu), why})
			}
		}
	})
}

// pointAt returns the last loop point at or before t.
func pointAt(ps []loop.Point, t float64) (loop.Point, bool) {
	i := sort.Search(len(ps), func(i int) bool { return ps[i].T > t })
	if i == 0 {
		return loop.Point{}, false
	}
	return ps[i-1], true
}

// writeJSON writes v, indented, to dir/name.
func writeJSON(dir, name string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, name), append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("experiment: %w", err)
	}
	return nil
}

// trialChart is Slacker's Fig. 12 for one trial: latency (1 s means) with
// the setpoint over time, and the migration rate the loop set; and, when the
// loop recorded it, the share of the source server's CPU quota periods
// throttled at each step.
func trialChart(tr Labeled, title string) chart.Chart {
	r := tr.Res
	var t, lat, rt, rate, ct, cpu []float64
	for _, s := range r.Seconds {
		if s.Count > 0 {
			t = append(t, float64(s.T)+0.5)
			lat = append(lat, s.MeanMs)
		}
	}
	for _, p := range r.Loop {
		rt = append(rt, p.T)
		rate = append(rate, p.Rate/1e6)
		if p.CPUThrottledPct != nil {
			ct = append(ct, p.T)
			cpu = append(cpu, *p.CPUThrottledPct)
		}
	}
	end := float64(len(r.Seconds))
	latS := []chart.Series{{Name: "mean transaction latency (1 s)", X: t, Y: lat}}
	ymax := 0.0
	if tr.SetpointMs > 0 {
		latS = append(latS, chart.Series{Name: "setpoint", X: []float64{0, end}, Y: []float64{tr.SetpointMs, tr.SetpointMs}, Dashed: true})
		ymax = 4 * tr.SetpointMs
	}
	c := chart.Chart{
		Title:  title,
		XLabel: "seconds since the workload started",
		Panels: []chart.Panel{
			{YLabel: "latency, ms", YMax: ymax, Series: latS},
			{YLabel: "migration rate, MB/s", Series: []chart.Series{{Name: "rate set by the loop", X: rt, Y: rate}}},
		},
	}
	if len(cpu) > 0 {
		c.Panels = append(c.Panels, chart.Panel{YLabel: "CPU quota throttled, %", YMax: 100,
			Series: []chart.Series{{Name: "source server's periods throttled (per step)", X: ct, Y: cpu}}})
	}
	return c
}

func writePNG(dir, name string, c chart.Chart) error {
	f, err := os.Create(filepath.Join(dir, name))
	if err != nil {
		return fmt.Errorf("experiment: %w", err)
	}
	defer f.Close()
	if err := chart.WritePNG(f, c); err != nil {
		return fmt.Errorf("experiment: %s: %w", name, err)
	}
	return nil
}

// Machine describes this host for reports: cores and memory.
func Machine() string {
	mem := ""
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if f := strings.Fields(l); len(f) >= 2 && f[0] == "MemTotal:" {
				if kb, err := strconv.ParseFloat(f[1], 64); err == nil {
					mem = fmt.Sprintf(", %.0f GiB", kb/(1<<20))
				}
			}
		}
	}
	load := ""
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		if f := strings.Fields(string(b)); len(f) >= 3 {
			load = fmt.Sprintf(", load average %s %s %s at the end", f[0], f[1], f[2])
		}
	}
	return fmt.Sprintf("%d cores%s, shared%s", runtime.NumCPU(), mem, load)
}

// reportHeader is the top of every report.md: what ran, when, where.
func reportHeader(title, command string, started time.Time, bed string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# %s\n\n", title)
	fmt.Fprintf(&b, "- command: `%s`\n", command)
	fmt.Fprintf(&b, "- date: %s (%.0f s)\n", started.UTC().Format("2006-01-02 15:04 UTC"), time.Since(started).Seconds())
	fmt.Fprintf(&b, "- machine: %s\n", Machine())
	fmt.Fprintf(&b, "- servers: %s\n\n", bed)
	return b.String()
}

func f1(x float64) string {
	if math.IsNaN(x) {
		return "–"
	}
	return strconv.FormatFloat(x, 'f', 1, 64)
}

// round rounds to d decimals; NaN stays NaN (JSON writers must map it).
func round(x float64, d int) float64 {
	p := math.Pow(10, float64(d))
	return math.Round(x*p) / p
}

func writeFile(dir, name, text string) error {
	if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
		return fmt.Errorf("experiment: %w", err)
	}
	return nil
}
