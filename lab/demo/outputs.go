package demo

import (
	"encoding/json"
	"fmt"
	"image/color"
	"math"
	"os"
	"path/filepath"
	"sort"
	"time"

	"gonum.org/v1/plot/vg"

	"github.com/sluicedb/sluice/lab/chart"
	"github.com/sluicedb/sluice/lab/workload"
	"github.com/sluicedb/sluice/loop"
)

// Band is the tolerance drawn around the setpoint in demo.png: ±10 %.
const Band = 0.10

// writeOutputs writes into dir summary.json (res), loop.csv (the control
// loop's record as the agent serves it: t in seconds since the migration
// started) and demo.png (demoChart).
func writeOutputs(dir string, res Result, secs []workload.Second, mr migrated, base [2]time.Duration) error {
	b, err := json.MarshalIndent(res, "", "  ")
	if err != nil {
		return fmt.Errorf("demo: summary: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "summary.json"), append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	f, err := os.Create(filepath.Join(dir, "loop.csv"))
	if err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	loop.WriteCSV(f, mr.series)
	if err := f.Close(); err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	pf, err := os.Create(filepath.Join(dir, "demo.png"))
	if err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	if err := chart.WritePNG(pf, demoChart(res, secs, mr, base)); err != nil {
		pf.Close()
		return err
	}
	return pf.Close()
}

var (
	clientColor   = color.RGBA{R: 200, G: 30, B: 30, A: 255}
	proxyColor    = color.RGBA{R: 120, G: 150, B: 220, A: 255}
	meanColor     = color.RGBA{R: 20, G: 120, B: 40, A: 255}
	rateColor     = color.RGBA{R: 30, G: 90, B: 200, A: 255}
	topColor      = color.RGBA{R: 150, G: 150, B: 150, A: 255}
	baselineColor = color.RGBA{R: 225, G: 235, B: 250, A: 255}
)

// demoChart is demo.png, from the baseline's start (base[0], on the
// workload's clock) to the workload's end: above, the clients' latency each
// second against the setpoint and its ±Band, with the proxy's windows the
// loop steers by and the clients' mean over the copy drawn across it;
// below, the copy speed the loop set each step under the top speed. The
// baseline and the copy are shaded and the handover marked in both.
func demoChart(res Result, secs []workload.Second, mr migrated, base [2]time.Duration) chart.Chart {
	var t, lat []float64
	for _, s := range secs {
		if s.Count > 0 {
			t = append(t, float64(s.T)+0.5) // a second's mean, at its middle
			lat = append(lat, s.MeanMs)
		}
	}
	series := append([]loop.Point(nil), mr.series...)
	sort.Slice(series, func(i, j int) bool { return series[i].T < series[j].T })
	start, hold := mr.start.Seconds(), mr.hold.Seconds()
	var lt, ll, rt, rate []float64
	for _, p := range series {
		x := p.T + start
		rt, rate = append(rt, x), append(rate, p.Rate/1e6)
		if p.LatencyMs >= 0 {
			lt, ll = append(lt, x), append(ll, p.LatencyMs)
		}
	}
	sp := res.SetpointMs
	latency := chart.Panel{
		Title: fmt.Sprintf("clients during the copy %.1f ms, %+.1f %% of the setpoint (the proxy's measure %.1f ms); writes: %d acknowledged, %d missing, %d duplicated",
			res.AchievedMeanLatencyMs, 100*(res.AchievedMeanLatencyMs/sp-1), res.ProxyMeanLatencyMs, res.WritesAcknowledged, res.WritesMissing, res.WritesDuplicated),
		YLabel: "transaction latency, ms",
		YMax:   3 * sp,
		Bands:  []chart.Band{{Name: fmt.Sprintf("setpoint %.1f ms ±%.0f %%", sp, 100*Band), Lo: (1 - Band) * sp, Hi: (1 + Band) * sp}},
		Series: []chart.Series{
			{Name: "clients, each second", X: t, Y: lat, Color: clientColor},
			{Name: "proxy, 3 s windows (the loop's input)", X: lt, Y: ll, Color: proxyColor, Width: vg.Points(0.8)},
			chart.Const("", t, sp),
			{Name: "clients' mean during the copy", X: []float64{start, hold}, Y: []float64{res.AchievedMeanLatencyMs, res.AchievedMeanLatencyMs}, Color: meanColor, Width: vg.Points(3)},
		},
	}
	speed := chart.Panel{YLabel: "copy speed, MB/s", Series: []chart.Series{
		{Name: "set by the loop each second", X: rt, Y: rate, Color: rateColor},
	}}
	if mr.maxRate > 0 && len(rt) > 0 {
		top := chart.Const(fmt.Sprintf("top speed %.0f MB/s", mr.maxRate/1e6), []float64{start, hold}, mr.maxRate/1e6)
		top.Color = topColor
		speed.Series = append(speed.Series, top)
	}
	return chart.Chart{
		Title: fmt.Sprintf("sluice demo: %s moved off a %.2g-CPU server in %.0f s, the copy's speed set every second to hold the clients at %.1f ms",
			mb(res.BytesCopied), res.SourceCPUs, res.MigrationSeconds, sp),
		XLabel: "seconds since the workload started",
		Panels: []chart.Panel{latency, speed},
		Spans: []chart.Span{
			{Name: fmt.Sprintf("baseline %.1f ms, calmest %v %.1f ms", res.BaselineMeanLatencyMs, CalmWindow, res.BaselineCalmLatencyMs), From: base[0].Seconds(), To: base[1].Seconds(), Color: baselineColor},
			{Name: fmt.Sprintf("the copy, %.0f s", res.CopySeconds), From: start, To: hold},
		},
		Marks:         []chart.Mark{{Name: fmt.Sprintf("handover, freeze %.0f ms", res.FreezeMs), X: hold}},
		LegendOutside: true,
		XMin:          base[0].Seconds(),
		XMax:          math.Max(hold, float64(len(secs))),
	}
}

func mb(b int64) string { return fmt.Sprintf("%.0f MB", float64(b)/1e6) }
