package fleet

import (
	"encoding/csv"
	"fmt"
	"image/color"
	"io"
	"strconv"

	"github.com/sluicedb/sluice/lab/chart"
)

// WriteSeriesCSV writes the run and its oracle second by second:
// t_s, running, rate_MBps, violating_servers, oracle_running,
// oracle_rate_MBps (empty where one of them had ended).
func WriteSeriesCSV(w io.Writer, r Result) error {
	cw := csv.NewWriter(w)
	_ = cw.Write([]string{"t_s", "running", "rate_MBps", "violating_servers", "oracle_running", "oracle_rate_MBps"})
	n := max(len(r.Series), len(r.OracleSeries))
	for t := range n {
		row := []string{strconv.Itoa(t), "", "", "", "", ""}
		if t < len(r.Series) {
			s := r.Series[t]
			row[1], row[2], row[3] = strconv.Itoa(s.Running), f3(s.Rate/1e6), strconv.Itoa(s.Violating)
		}
		if t < len(r.OracleSeries) {
			s := r.OracleSeries[t]
			row[4], row[5] = strconv.Itoa(s.Running), f3(s.Rate/1e6)
		}
		_ = cw.Write(row)
	}
	cw.Flush()
	return cw.Error()
}

// WriteWorstCSV writes the worst server's seconds: t_s, ratio (its largest
// store window latency ÷ contract), rate_MBps, in_move.
func WriteWorstCSV(w io.Writer, r Result) error {
	cw := csv.NewWriter(w)
	_ = cw.Write([]string{"t_s", "ratio", "rate_MBps", "in_move"})
	for _, s := range r.Worst {
		_ = cw.Write([]string{strconv.Itoa(s.T), f3(s.Ratio), f3(s.Rate / 1e6), strconv.FormatBool(s.InMove)})
	}
	cw.Flush()
	return cw.Error()
}

// WritePNG draws the plan against its oracle (moves running, the fleet's
// migration rate) above the worst server's latency ÷ contract and rate.
func WritePNG(w io.Writer, r Result, c Config) error {
	var t, run, rate, viol, ot, orun, orate []float64
	for _, s := range r.Series {
		t = append(t, float64(s.T))
		run = append(run, float64(s.Running))
		rate = append(rate, s.Rate/1e9)
		viol = append(viol, float64(s.Violating))
	}
	for _, s := range r.OracleSeries {
		ot = append(ot, float64(s.T))
		orun = append(orun, float64(s.Running))
		orate = append(orate, s.Rate/1e9)
	}
	var wt, ratio, wrate []float64
	for _, s := range r.Worst {
		wt = append(wt, float64(s.T))
		ratio = append(ratio, s.Ratio)
		wrate = append(wrate, s.Rate/1e6)
	}
	grey := color.RGBA{R: 110, G: 110, B: 110, A: 255}
	ch := chart.Chart{
		Title:  fmt.Sprintf("sim fleet: %d servers, %d tenants, seed %d, P %.2f: plan %.0f s, oracle %.0f s", r.Servers, r.Tenants, c.Seed, c.P, r.PlanSeconds, r.OracleSeconds),
		XLabel: "seconds since the plan started",
		Panels: []chart.Panel{
			{Title: "moves running", YLabel: "moves", Series: []chart.Series{
				{Name: "plan", X: t, Y: run},
				{Name: "oracle", X: ot, Y: orun, Color: grey, Dashed: true},
				{Name: "servers in a move over a contract", X: t, Y: viol},
			}},
			{Title: "the fleet's migration rate", YLabel: "GB/s", Series: []chart.Series{
				{Name: "plan", X: t, Y: rate},
				{Name: "oracle", X: ot, Y: orate, Color: grey, Dashed: true},
			}},
			{Title: fmt.Sprintf("worst server %s (violation fraction %.3f): largest store latency ÷ its contract", r.WorstServer, r.WorstViolation),
				YLabel: "latency / contract", Series: []chart.Series{
					{Name: "1 s window", X: wt, Y: ratio},
					chart.Const("contract", wt, 1),
					chart.Const(fmt.Sprintf("reference P = %.2f", c.P), wt, c.P),
				}},
			{Title: "worst server's move rate", YLabel: "MB/s", Series: []chart.Series{{Name: "rate", X: wt, Y: wrate}}},
		},
		LegendOutside: true,
	}
	return chart.WritePNG(w, ch)
}

// WriteReport writes a Markdown summary of r.
func WriteReport(w io.Writer, r Result, c Config, png string) error {
	_, err := fmt.Fprintf(w, `# sim fleet

%d servers, %d tenants, seed %d; load target %.2f; integral P %.2f, pole %.2f.

| figure | value |
|---|---|
| moves | %d (%d sub-moves of 32 MiB) |
| bytes | %.1f GB |
| servers left over the target | %d |
| plan | %.1f s (completed %v) |
| oracle | %.1f s |
| plan ÷ oracle | %.3f |
| worst server's violation fraction | %.3f (%s) |
| all moving servers' violation fraction | %.4f |
| servers without moves, worst violation fraction | %.3f |
| most moves at once | %d |
| mean rate per move | %.1f MB/s |

![plan and oracle](%s)
`, r.Servers, r.Tenants, c.Seed, c.Target, c.P, c.Pole, r.Moves, r.SubMoves, float64(r.Bytes)/1e9, r.Over,
		r.PlanSeconds, r.Completed, r.OracleSeconds, r.PlanSeconds/r.OracleSeconds, r.WorstViolation, r.WorstServer,
		r.MeanViolation, r.BystanderViolation, r.MaxConcurrent, r.MeanRate/1e6, png)
	return err
}

func f3(v float64) string { return strconv.FormatFloat(v, 'f', 3, 64) }
