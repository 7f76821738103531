package experiment

import (
	"fmt"
	"image/color"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// The router bench's own output files (besides SummaryFile and
// ReportFile): every run's figures, and bars of TPS and p50 per mode.
const (
	RouterCSV = "runs.csv"
	RouterPNG = "router.png"
)

var modeLabel = map[string]string{ModeDirect: "direct", ModeTenantProxy: "tenant proxy", ModeRouter: "router"}

func writeRouterOutputs(o RouterOptions, bed RouterBed, res RouterResult, started time.Time) error {
	ff := func(x float64, d int) string { return strconv.FormatFloat(x, 'f', d, 64) }
	err := writeCSV(filepath.Join(o.Out, RouterCSV),
		[]string{"workload", "round", "mode", "tps", "p50_ms", "p99_ms", "transactions", "errors", "proxy_cpu_us_per_tx", "distributed_tps", "distributed_fraction", "ledger_ok"},
		func(emit func([]string)) {
			for _, r := range res.Runs {
				emit([]string{"ycsb", strconv.Itoa(r.Round), r.Mode, ff(r.TPS, 1), ff(r.P50Ms, 3), ff(r.P99Ms, 3),
					strconv.FormatInt(r.Transactions, 10), strconv.FormatInt(r.Errors, 10), ff(r.ProxyCPUUS, 1), "", "", strconv.FormatBool(r.LedgerOK)})
			}
			t := res.TPCC
			emit([]string{"tpcc", "1", ModeRouter, ff(t.ThroughputTPS, 1), ff(t.P50Ms, 3), ff(t.P99Ms, 3),
				strconv.FormatInt(t.Transactions, 10), strconv.FormatInt(t.Errors, 10), "", ff(t.DistributedTPS, 1), ff(t.DistributedFraction, 4), strconv.FormatBool(t.Verdict.OK())})
		})
	if err != nil {
		return err
	}
	if err := writeJSON(o.Out, SummaryFile, res); err != nil {
		return err
	}
	if err := writeRouterPNG(filepath.Join(o.Out, RouterPNG), res); err != nil {
		return err
	}
	return writeFile(o.Out, ReportFile, routerReport(o, bed, res, started))
}

// routerReport is report.md: the setup, the table of modes, the goal's
// verdict and TPC-C-lite's figures.
func routerReport(o RouterOptions, bed RouterBed, res RouterResult, started time.Time) string {
	var b strings.Builder
	b.WriteString(reportHeader("sluice bench router", o.Command, started, bed.Note))
	fmt.Fprintf(&b, "YCSB, one operation a transaction (single-partition), read fraction %.2f, zipfian over %d keys split evenly over 2 partitions; "+
		"closed loop, %d connections; %d rounds × 3 modes × %v, the modes' order rotating; medians over rounds.\n\n",
		o.ReadFraction, o.Records, o.MPL, o.Rounds, o.Duration)
	b.WriteString("| mode | tps | p50 ms | proxy CPU µs/tx |\n|---|---:|---:|---:|\n")
	fmt.Fprintf(&b, "| direct (each owner) | %.1f | %.3f | – |\n", res.DirectTPS, res.DirectP50Ms)
	fmt.Fprintf(&b, "| tenant proxy | %.1f | %.3f | %.1f |\n", res.TenantProxyTPS, res.TenantProxyP50Ms, res.TenantProxyCPUUS)
	fmt.Fprintf(&b, "| keyspace router | %.1f | %.3f | %.1f |\n\n", res.RouterTPS, res.RouterP50Ms, res.RouterCPUUS)
	verdict := "met"
	if !res.GoalMet {
		verdict = "NOT met"
	}
	fmt.Fprintf(&b, "router_tps / tenant_proxy_tps = %.3f (goal ≥ 0.9: %s); the router adds %.3f ms to direct's p50 (%.3f ms over the tenant proxy's).\n\n",
		res.RouterOverTenantProxy, verdict, res.RouterAddedP50Ms, res.RouterP50Ms-res.TenantProxyP50Ms)
	fmt.Fprintf(&b, "YCSB ledgers: every run's verdict OK: %v.\n\n", res.YCSBLedgerOK)
	fmt.Fprintf(&b, "TPC-C-lite through the router, %d warehouses over 2 partitions, default mix and remote shares, closed loop, %d connections, %v: "+
		"%.1f tps, %.1f of them across partitions (two-phase commit; %.1f %% of transactions), p50 %.3f ms, p99 %.3f ms, %d errors.\n\n%s\n\n",
		o.Warehouses, o.MPL, o.TPCCDuration, res.TPCCTPS, res.DistributedTPS, 100*res.DistributedFraction, res.TPCCP50Ms, res.TPCCP99Ms, res.TPCCErrors, res.TPCCVerdict)
	b.WriteString("Every run: " + RouterCSV + ". Plot: " + RouterPNG + ".\n")
	return b.String()
}

// writeRouterPNG draws three bar panels: YCSB's TPS per mode, its p50 per
// mode (bars the medians, dots each round), and TPC-C-lite's TPS, all and
// across partitions.
func writeRouterPNG(path string, res RouterResult) error {
	per := func(f func(RouterRun) float64) (pts plotter.XYs) {
		for i, m := range routerModes {
			for _, r := range res.Runs {
				if r.Mode == m {
					pts = append(pts, plotter.XY{X: float64(i), Y: f(r)})
				}
			}
		}
		return pts
	}
	labels := []string{modeLabel[ModeDirect], modeLabel[ModeTenantProxy], modeLabel[ModeRouter]}
	tpsPts := per(func(r RouterRun) float64 { return r.TPS })
	p50Pts := per(func(r RouterRun) float64 { return r.P50Ms })
	tpsP, err := barPanel(fmt.Sprintf("YCSB single-partition: tps (router/tenant proxy %.2f; dots: rounds)", res.RouterOverTenantProxy), "transactions/s",
		labels, []float64{res.DirectTPS, res.TenantProxyTPS, res.RouterTPS}, tpsPts)
	if err != nil {
		return err
	}
	p50P, err := barPanel(fmt.Sprintf("YCSB: p50 latency (router +%.3f ms over direct)", res.RouterAddedP50Ms), "ms",
		labels, []float64{res.DirectP50Ms, res.TenantProxyP50Ms, res.RouterP50Ms}, p50Pts)
	if err != nil {
		return err
	}
	tpccP, err := barPanel(fmt.Sprintf("TPC-C-lite via router: %.1f %% distributed", 100*res.DistributedFraction), "transactions/s",
		[]string{"all", "across partitions"}, []float64{res.TPCCTPS, res.DistributedTPS}, nil)
	if err != nil {
		return err
	}
	const w, h = 15 * vg.Inch, 4.5 * vg.Inch
	img := vgimg.New(w, h)
	dc := draw.New(img)
	plots := [][]*plot.Plot{{tpsP, p50P, tpccP}}
	tiles := draw.Tiles{Rows: 1, Cols: 3, PadTop: vg.Points(6), PadBottom: vg.Points(6), PadLeft: vg.Points(6), PadRight: vg.Points(10), PadX: vg.Points(24)}
	canvases := plot.Align(plots, tiles, dc)
	for i, p := range plots[0] {
		p.Draw(canvases[0][i])
	}
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("experiment: %w", err)
	}
	defer f.Close()
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		return fmt.Errorf("experiment: %s: %w", filepath.Base(path), err)
	}
	return nil
}

var barColors = []color.Color{
	color.RGBA{R: 150, G: 150, B: 150, A: 255},
	color.RGBA{R: 30, G: 90, B: 200, A: 255},
	color.RGBA{R: 200, G: 30, B: 30, A: 255},
}

// plainMarker is gonum's default ticks labelled without trailing zeros.
type plainMarker struct{}

func (plainMarker) Ticks(lo, hi float64) []plot.Tick {
	ts := plot.DefaultTicks{}.Ticks(lo, hi)
	for i := range ts {
		if ts[i].Label != "" {
			ts[i].Label = strconv.FormatFloat(ts[i].Value, 'g', -1, 64)
		}
	}
	return ts
}

// barPanel is one bar per value, named by labels, with pts (x = the bar's
// index: each round's figure) drawn over them as dots.
func barPanel(title, ylabel string, labels []string, values []float64, pts plotter.XYs) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = title
	p.Y.Label.Text = ylabel
	p.Y.Min = 0
	p.Add(plotter.NewGrid())
	for i, v := range values {
		bar, err := plotter.NewBarChart(plotter.Values{v}, vg.Points(50))
		if err != nil {
			return nil, fmt.Errorf("experiment: bar %s: %w", labels[i], err)
		}
		bar.XMin = float64(i)
		bar.Color = barColors[i%len(barColors)]
		bar.LineStyle.Width = 0
		p.Add(bar)
	}
	if len(pts) > 0 {
		sc, err := plotter.NewScatter(pts)
		if err != nil {
			return nil, fmt.Errorf("experiment: rounds: %w", err)
		}
		sc.GlyphStyle.Shape = draw.CircleGlyph{}
		sc.GlyphStyle.Radius = vg.Points(3)
		sc.GlyphStyle.Color = color.Black
		p.Add(sc)
	}
	top := 0.0
	for _, v := range values {
		top = max(top, v)
	}
	for _, pt := range pts {
		top = max(top, pt.Y)
	}
	p.Y.Max = 1.15 * top
	p.Y.Tick.Marker = plainMarker{}
	p.NominalX(labels...)
	p.X.Min, p.X.Max = -0.6, float64(len(values))-0.4
	return p, nil
}
