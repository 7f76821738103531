package sim

import (
	"fmt"
	"image/color"
	"io"
	"math"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// WritePNG draws r as a PNG: latency (with the idle twin and the setpoint)
// above the migration rate, both against time since the migration started.
func WritePNG(w io.Writer, r Result) error {
	idleAt := map[float64]time.Duration{}
	for _, p := range r.Idle {
		idleAt[p.T] = p.Latency
	}
	var lat, idle, rate plotter.XYs
	for _, p := range r.Points {
		if p.Count > 0 {
			lat = append(lat, plotter.XY{X: p.T, Y: float64(p.Latency) / 1e6})
		}
		if d, ok := idleAt[p.T]; ok && d > 0 {
			idle = append(idle, plotter.XY{X: p.T, Y: float64(d) / 1e6})
		}
		rate = append(rate, plotter.XY{X: p.T, Y: p.Rate / 1e6})
	}
	if len(lat) == 0 {
		return fmt.Errorf("sim: png: no latency points")
	}
	sp, spName := float64(r.Setpoint)/1e6, "setpoint"
	if !SteersToSetpoint(r.Controller) && len(r.Stores) > 0 {
		lc := r.Stores[0].Contract
		for _, st := range r.Stores {
			lc = min(lc, st.Contract)
		}
		sp, spName = float64(lc)/1e6, "contract"
	}
	x0, x1 := lat[0].X, lat[len(lat)-1].X

	top := plot.New()
	top.Title.Text = fmt.Sprintf("sluice sim: %s, %s controller, seed %d — %.1f s, mean %.1f ms (idle %.1f ms)",
		r.Scenario, r.Controller, r.Seed, r.MigrationSeconds, float64(r.MeanLatency)/1e6, float64(r.IdleLatency)/1e6)
	top.Y.Label.Text = "latency, ms (1 s windows)"
	top.Y.Min, top.Y.Max = 0, math.Max(3*sp, 1)
	for i := range lat {
		lat[i].Y = math.Min(lat[i].Y, top.Y.Max) // runaway queues are clipped at the frame
	}
	ll, err := plotter.NewLine(lat)
	if err != nil {
		return fmt.Errorf("sim: png: %w", err)
	}
	ll.Color = color.RGBA{R: 200, A: 255}
	il, err := plotter.NewLine(idle)
	if err != nil {
		return fmt.Errorf("sim: png: %w", err)
	}
	il.Color = color.RGBA{R: 150, G: 150, B: 150, A: 255}
	spl, err := plotter.NewLine(plotter.XYs{{X: x0, Y: sp}, {X: x1, Y: sp}})
	if err != nil {
		return fmt.Errorf("sim: png: %w", err)
	}
	spl.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
	top.Add(plotter.NewGrid(), il, ll, spl)
	top.Legend.Add("latency", ll)
	top.Legend.Add("idle twin", il)
	top.Legend.Add(fmt.Sprintf("%s %.0f ms", spName, sp), spl)
	top.Legend.Top = true

	bot := plot.New()
	bot.X.Label.Text = "time since the migration started, s"
	bot.Y.Label.Text = "migration rate, MB/s"
	bot.Y.Min = 0
	rl, err := plotter.NewLine(rate)
	if err != nil {
		return fmt.Errorf("sim: png: %w", err)
	}
	rl.Color = color.RGBA{B: 200, A: 255}
	bot.Add(plotter.NewGrid(), rl)
	top.X.Min, top.X.Max, bot.X.Min, bot.X.Max = x0, x1, x0, x1

	const width, height = 10 * vg.Inch, 7 * vg.Inch
	img := vgimg.New(width, height)
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: 2, Cols: 1, PadTop: vg.Points(4), PadBottom: vg.Points(4), PadLeft: vg.Points(4), PadRight: vg.Points(8), PadY: vg.Points(6)}
	canvases := plot.Align([][]*plot.Plot{{top}, {bot}}, tiles, dc)
	top.Draw(canvases[0][0])
	bot.Draw(canvases[1][0])
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(w); err != nil {
		return fmt.Errorf("sim: png: %w", err)
	}
	return nil
}
