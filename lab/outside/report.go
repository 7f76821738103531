package outside

import (
	"encoding/csv"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/sluicedb/sluice/lab/chart"
)

// writeOutputs writes summary.json, report.md, clients.csv (the clients'
// latency per second) and outside.png into dir.
func writeOutputs(dir string, res Result, txs []Tx) error {
	b, err := json.MarshalIndent(res, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "summary.json"), append(b, '\n'), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "report.md"), []byte(report(res)), 0o644); err != nil {
		return err
	}
	t0, secs := perSecond(txs)
	if err := writeSeconds(filepath.Join(dir, "clients.csv"), secs); err != nil {
		return err
	}
	f, err := os.Create(filepath.Join(dir, "outside.png"))
	if err != nil {
		return err
	}
	defer f.Close()
	return chart.WritePNG(f, plot(res, t0, secs))
}

// second is the clients' view of one second.
type second struct {
	T      float64 // seconds since the first transaction's second
	MeanMs float64 // NaN: none ended in it
	Count  int
}

// perSecond buckets txs by the second they ended in.
func perSecond(txs []Tx) (time.Time, []second) {
	if len(txs) == 0 {
		return time.Time{}, nil
	}
	sort.Slice(txs, func(i, j int) bool { return txs[i].End.Before(txs[j].End) })
	t0 := txs[0].End.Truncate(time.Second)
	n := int(txs[len(txs)-1].End.Sub(t0)/time.Second) + 1
	sum := make([]float64, n)
	out := make([]second, n)
	for _, t := range txs {
		k := int(t.End.Sub(t0) / time.Second)
		sum[k] += float64(t.Latency) / float64(time.Millisecond)
		out[k].Count++
	}
	for k := range out {
		out[k].T, out[k].MeanMs = float64(k), math.NaN()
		if out[k].Count > 0 {
			out[k].MeanMs = sum[k] / float64(out[k].Count)
		}
	}
	return t0, out
}

func writeSeconds(path string, secs []second) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	w := csv.NewWriter(f)
	w.Write([]string{"t", "mean_ms", "transactions"})
	for _, s := range secs {
		m := ""
		if !math.IsNaN(s.MeanMs) {
			m = strconv.FormatFloat(s.MeanMs, 'f', 3, 64)
		}
		w.Write([]string{strconv.FormatFloat(s.T, 'f', 0, 64), m, strconv.Itoa(s.Count)})
	}
	w.Flush()
	return w.Error()
}

// plot draws the clients' latency per second with the setpoint, and which
// migration ran when.
func plot(res Result, t0 time.Time, secs []second) chart.Chart {
	x := make([]float64, len(secs))
	lat := make([]float64, len(secs))
	free := make([]float64, len(secs))
	pid := make([]float64, len(secs))
	for k, s := range secs {
		x[k], lat[k], free[k], pid[k] = s.T, s.MeanMs, math.NaN(), math.NaN()
		at := t0.Add(time.Duration(s.T) * time.Second)
		for _, r := range res.Rounds {
			if !at.Before(r.Unthrottled.start) && at.Before(r.Unthrottled.end) {
				free[k] = 1
			}
			if !at.Before(r.Controlled.start) && at.Before(r.Controlled.end) {
				pid[k] = 1
			}
		}
	}
	return chart.Chart{
		Title:  fmt.Sprintf("pgbench %s through the proxy: the clients' own latency (setpoint %.2f ms = %.4g × idle)", res.PgbenchArg, res.SetpointMs, res.SetpointMs/res.IdleMeanMs),
		XLabel: "seconds",
		Panels: []chart.Panel{
			{YLabel: "latency, ms (1 s means)", YMax: 4 * res.SetpointMs, Series: []chart.Series{
				{Name: "pgbench latency", X: x, Y: lat},
				chart.Const("setpoint", x, res.SetpointMs),
			}},
			{YLabel: "migration running", YMin: 0, YMax: 1.5, Series: []chart.Series{
				{Name: "unthrottled", X: x, Y: free},
				{Name: "controlled (setpoint)", X: x, Y: pid},
			}},
		},
	}
}

// report is the Markdown report.
func report(res Result) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# sluice judged from outside: pgbench's own log\n\n`%s`\n\n%s; started %s.\n\n", res.Command, res.Machine, res.Started)
	fmt.Fprintf(&b, "pgbench scale %d (`pgbench -i -s %d`), `pgbench %s` through the proxy. Idle: %.2f ms mean (%d transactions); setpoint %.2f ms.\n\n",
		res.Scale, res.Scale, res.PgbenchArg, res.IdleMeanMs, res.Idle.Count, res.SetpointMs)
	b.WriteString("| round | migration | seconds | clients' mean ms | p95 ms | transactions | freeze ms |\n|---|---|---|---|---|---|---|\n")
	for i, r := range res.Rounds {
		for _, m := range []Migration{r.Unthrottled, r.Controlled} {
			name := "unthrottled"
			if m.Controlled {
				name = fmt.Sprintf("`--setpoint %.2fms`", m.SetpointMs)
			}
			fmt.Fprintf(&b, "| %d | %s | %.1f | %.2f | %.2f | %d | %.0f |\n", i+1, name, m.Seconds, m.Clients.MeanMs, m.Clients.P95Ms, m.Clients.Count, m.FreezeMs)
		}
	}
	b.WriteString("\n")
	for i, r := range res.Rounds {
		fmt.Fprintf(&b, "- Round %d: **%s** — %s.\n", i+1, map[bool]string{true: "pass", false: "fail"}[r.Verdict.Pass], r.Verdict.Why)
	}
	b.WriteString("\nRule: the clients' mean during the controlled migration within ±10 % of the setpoint; or, where even the unthrottled copy stays under the setpoint, the controlled migration no slower than 1.2 × the unthrottled one.\n")
	return b.String()
}
