// Package chart draws time-series PNG plots for sluice's reports: stacked
// panels sharing one time axis (latency with its setpoint above, migration
// rate below, as Slacker's Fig. 12), built on gonum/plot.
package chart

import (
	"fmt"
	"image/color"
	"io"
	"math"
	"strconv"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// Series is one line. X and Y have equal length; NaN Y values are gaps.
type Series struct {
	Name   string
	X, Y   []float64
	Color  color.Color // nil: a palette colour by position
	Dashed bool
}

// Panel is one plot area.
type Panel struct {
	Title  string
	YLabel string
	YMin   float64 // with YMax: fixed range; both 0 = automatic (from 0)
	YMax   float64
	Series []Series
}

// Chart is a stack of panels over a shared X axis.
type Chart struct {
	Title  string
	XLabel string
	Panels []Panel
	Width  vg.Length // default 10 inch
	Height vg.Length // per panel, default 3.2 inch
}

var palette = []color.Color{
	color.RGBA{R: 200, G: 30, B: 30, A: 255},
	color.RGBA{R: 30, G: 90, B: 200, A: 255},
	color.RGBA{R: 20, G: 150, B: 60, A: 255},
	color.RGBA{R: 150, G: 150, B: 150, A: 255},
	color.RGBA{R: 160, G: 60, B: 180, A: 255},
	color.RGBA{R: 230, G: 140, B: 0, A: 255},
}

// WritePNG renders c as a PNG image to w.
func WritePNG(w io.Writer, c Chart) error {
	if len(c.Panels) == 0 {
		return fmt.Errorf("chart: no panels")
	}
	if c.Width == 0 {
		c.Width = 10 * vg.Inch
	}
	if c.Height == 0 {
		c.Height = 3.2 * vg.Inch
	}
	xmin, xmax := math.Inf(1), math.Inf(-1)
	for _, p := range c.Panels {
		for _, s := range p.Series {
			for _, x := range s.X {
				xmin, xmax = math.Min(xmin, x), math.Max(xmax, x)
			}
		}
	}
	if math.IsInf(xmin, 0) {
		return fmt.Errorf("chart: no data")
	}
	plots := make([][]*plot.Plot, len(c.Panels))
	for i, p := range c.Panels {
		pl := plot.New()
		pl.Title.Text = p.Title
		if i == 0 && c.Title != "" {
			pl.Title.Text = c.Title
			if p.Title != "" {
				pl.Title.Text += "\n" + p.Title
			}
		}
		pl.Y.Label.Text = p.YLabel
		if i == len(c.Panels)-1 {
			pl.X.Label.Text = c.XLabel
		}
		pl.X.Min, pl.X.Max = xmin, xmax
		pl.X.Tick.Marker, pl.Y.Tick.Marker = plainTicks{}, plainTicks{}
		pl.Add(plotter.NewGrid())
		ymax := 0.0
		for k, s := range p.Series {
			if len(s.X) != len(s.Y) {
				return fmt.Errorf("chart: series %q has %d x and %d y values", s.Name, len(s.X), len(s.Y))
			}
			xy := make(plotter.XYs, 0, len(s.X))
			for j := range s.X {
				if math.IsNaN(s.Y[j]) || math.IsInf(s.Y[j], 0) {
					continue
				}
				y := s.Y[j]
				if p.YMax > p.YMin && y > p.YMax {
					y = p.YMax // clip runaway values at the frame
				}
				xy = append(xy, plotter.XY{X: s.X[j], Y: y})
				ymax = math.Max(ymax, y)
			}
			if len(xy) == 0 {
				continue
			}
			l, err := plotter.NewLine(xy)
			if err != nil {
				return fmt.Errorf("chart: %w", err)
			}
			l.Color = s.Color
			if l.Color == nil {
				l.Color = palette[k%len(palette)]
			}
			l.Width = vg.Points(1.4)
			if s.Dashed {
				l.Dashes = []vg.Length{vg.Points(6), vg.Points(4)}
			}
			pl.Add(l)
			if s.Name != "" {
				pl.Legend.Add(s.Name, l)
			}
		}
		pl.Legend.Top = true
		if p.YMax > p.YMin {
			pl.Y.Min, pl.Y.Max = p.YMin, p.YMax
		} else {
			pl.Y.Min, pl.Y.Max = 0, math.Max(ymax*1.1, 1e-9)
		}
		plots[i] = []*plot.Plot{pl}
	}
	img := vgimg.New(c.Width, c.Height*vg.Length(len(c.Panels)))
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: len(c.Panels), Cols: 1, PadTop: vg.Points(4), PadBottom: vg.Points(4), PadLeft: vg.Points(4), PadRight: vg.Points(8), PadY: vg.Points(6)}
	canvases := plot.Align(plots, tiles, dc)
	for i := range plots {
		plots[i][0].Draw(canvases[i][0])
	}
	png := vgimg.PngCanvas{Canvas: img}
	if _, err := png.WriteTo(w); err != nil {
		return fmt.Errorf("chart: write png: %w", err)
	}
	return nil
}

// plainTicks are gonum's default ticks labelled without trailing zeros:
// its labels carry the precision of the finest tick's step, so an axis
// from 0 to 57 read "0.00, 25.00, 50.00".
type plainTicks struct{}

// Ticks implements plot.Ticker.
func (plainTicks) Ticks(min, max float64) []plot.Tick {
	ts := plot.DefaultTicks{}.Ticks(min, max)
	for i, t := range ts {
		if t.Label != "" {
			ts[i].Label = plainLabel(t.Value)
		}
	}
	return ts
}

// plainLabel is v in the fewest digits, at most 6 decimals.
func plainLabel(v float64) string {
	v = math.Round(v*1e6) / 1e6
	if v == 0 {
		v = 0 // no "-0"
	}
	return strconv.FormatFloat(v, 'f', -1, 64)
}

// Const returns a horizontal line at y over xs' span, e.g. a setpoint.
func Const(name string, xs []float64, y float64) Series {
	if len(xs) == 0 {
		return Series{Name: name}
	}
	return Series{Name: name, X: []float64{xs[0], xs[len(xs)-1]}, Y: []float64{y, y}, Color: color.Black, Dashed: true}
}
