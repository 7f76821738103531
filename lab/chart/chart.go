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
	Width  vg.Length // line width; 0 = 1.4 points
	Points bool      // also a dot at each point (a series of one point shows)
}

// Band is a horizontal band of a panel from Lo to Hi across the whole X
// axis, shaded under the panel's lines: a tolerance around a setpoint.
type Band struct {
	Name   string
	Lo, Hi float64
	Color  color.Color // nil: light green
}

// Span is an interval of the X axis shaded in every panel, under the
// lines, and named in the top panel's legend: a phase of a run.
type Span struct {
	Name     string
	From, To float64
	Color    color.Color // nil: light grey
}

// Mark is a vertical line at X in every panel, named in the top panel's
// legend: an event of a run.
type Mark struct {
	Name  string
	X     float64
	Color color.Color // nil: black
}

// Panel is one plot area.
type Panel struct {
	Title  string
	YLabel string
	YMin   float64 // with YMax: fixed range; both 0 = automatic (from 0)
	YMax   float64
	Series []Series
	Bands  []Band
}

// Chart is a stack of panels over a shared X axis.
type Chart struct {
	Title  string
	XLabel string
	Panels []Panel
	Spans  []Span
	Marks  []Mark
	// LegendOutside draws each panel's legend in a strip right of the
	// panels, LegendWidth wide, instead of over its top right corner.
	LegendOutside bool
	LegendWidth   vg.Length // default 3 inch
	// XMin, XMax fix the X axis; both 0 = the series' span.
	XMin, XMax float64
	Width      vg.Length // default 10 inch
	Height     vg.Length // per panel, default 3.2 inch
}

var (
	bandColor = color.RGBA{R: 200, G: 235, B: 200, A: 255}
	spanColor = color.RGBA{R: 232, G: 232, B: 232, A: 255}
)

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
	if c.XMax > c.XMin {
		xmin, xmax = c.XMin, c.XMax
	}
	plots := make([][]*plot.Plot, len(c.Panels))
	legends := make([]plot.Legend, len(c.Panels))
	for i, p := range c.Panels {
		pl, leg, err := c.panel(i, p, xmin, xmax)
		if err != nil {
			return err
		}
		plots[i], legends[i] = []*plot.Plot{pl}, leg
	}
	width := c.Width
	if c.LegendOutside {
		if c.LegendWidth == 0 {
			c.LegendWidth = 3 * vg.Inch
		}
		width += c.LegendWidth
	}
	img := vgimg.New(width, c.Height*vg.Length(len(c.Panels)))
	dc := draw.New(img)
	area := dc
	area.Max.X -= width - c.Width
	tiles := draw.Tiles{Rows: len(c.Panels), Cols: 1, PadTop: vg.Points(4), PadBottom: vg.Points(4), PadLeft: vg.Points(4), PadRight: vg.Points(8), PadY: vg.Points(6)}
	canvases := plot.Align(plots, tiles, area)
	for i := range plots {
		plots[i][0].Draw(canvases[i][0])
		if c.LegendOutside {
			lc := canvases[i][0]
			lc.Min.X, lc.Max.X = area.Max.X, dc.Max.X
			legends[i].Draw(lc)
		}
	}
	png := vgimg.PngCanvas{Canvas: img}
	if _, err := png.WriteTo(w); err != nil {
		return fmt.Errorf("chart: write png: %w", err)
	}
	return nil
}

// panel builds panel p, the i-th of c, over [xmin, xmax]: spans and bands
// first, then the grid, the series and the marks, so the lines stay on top.
// Its legend is the plot's own, or (LegendOutside) returned apart.
func (c Chart) panel(i int, p Panel, xmin, xmax float64) (*plot.Plot, plot.Legend, error) {
	pl := plot.New()
	leg := &pl.Legend
	if c.LegendOutside {
		outside := plot.NewLegend()
		outside.Top, outside.Left, outside.Padding = true, true, vg.Points(3)
		leg = &outside
	}
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
	pl.X.Tick.Marker, pl.Y.Tick.Marker = plainTicks{}, plainTicks{}
	lines := make([]plotter.XYs, len(p.Series))
	ymax := 0.0
	for k, s := range p.Series {
		if len(s.X) != len(s.Y) {
			return nil, plot.Legend{}, fmt.Errorf("chart: series %q has %d x and %d y values", s.Name, len(s.X), len(s.Y))
		}
		for j := range s.X {
			if math.IsNaN(s.Y[j]) || math.IsInf(s.Y[j], 0) {
				continue
			}
			y := s.Y[j]
			if p.YMax > p.YMin && y > p.YMax {
				y = p.YMax // clip runaway values at the frame
			}
			lines[k] = append(lines[k], plotter.XY{X: s.X[j], Y: y})
			ymax = math.Max(ymax, y)
		}
	}
	for _, b := range p.Bands {
		ymax = math.Max(ymax, b.Hi)
	}
	ylo, yhi := 0.0, math.Max(ymax*1.1, 1e-9)
	if p.YMax > p.YMin {
		ylo, yhi = p.YMin, p.YMax
	}
	for _, s := range c.Spans {
		if err := addArea(pl, leg, i == 0, s.Name, s.From, s.To, ylo, yhi, s.Color, spanColor); err != nil {
			return nil, plot.Legend{}, err
		}
	}
	for _, b := range p.Bands {
		if err := addArea(pl, leg, true, b.Name, xmin, xmax, b.Lo, b.Hi, b.Color, bandColor); err != nil {
			return nil, plot.Legend{}, err
		}
	}
	pl.Add(plotter.NewGrid())
	for k, s := range p.Series {
		if len(lines[k]) == 0 {
			continue
		}
		l, err := plotter.NewLine(lines[k])
		if err != nil {
			return nil, plot.Legend{}, fmt.Errorf("chart: %w", err)
		}
		l.Color = s.Color
		if l.Color == nil {
			l.Color = palette[k%len(palette)]
		}
		l.Width = s.Width
		if l.Width == 0 {
			l.Width = vg.Points(1.4)
		}
		if s.Dashed {
			l.Dashes = []vg.Length{vg.Points(6), vg.Points(4)}
		}
		pl.Add(l)
		thumb := []plot.Thumbnailer{l}
		if s.Points {
			sc, err := plotter.NewScatter(lines[k])
			if err != nil {
				return nil, plot.Legend{}, fmt.Errorf("chart: %w", err)
			}
			sc.GlyphStyle = draw.GlyphStyle{Color: l.Color, Radius: vg.Points(2.5), Shape: draw.CircleGlyph{}}
			pl.Add(sc)
			thumb = append(thumb, sc)
		}
		if s.Name != "" {
			leg.Add(s.Name, thumb...)
		}
	}
	for _, m := range c.Marks {
		l, err := plotter.NewLine(plotter.XYs{{X: m.X, Y: ylo}, {X: m.X, Y: yhi}})
		if err != nil {
			return nil, plot.Legend{}, fmt.Errorf("chart: %w", err)
		}
		l.Color = m.Color
		if l.Color == nil {
			l.Color = color.Black
		}
		l.Width = vg.Points(1)
		l.Dashes = []vg.Length{vg.Points(2), vg.Points(2)}
		pl.Add(l)
		if i == 0 && m.Name != "" {
			leg.Add(m.Name, l)
		}
	}
	pl.Legend.Top = true
	// Last: every plotter added widens the axes to its data.
	pl.X.Min, pl.X.Max = xmin, xmax
	pl.Y.Min, pl.Y.Max = ylo, yhi
	return pl, *leg, nil
}

// addArea shades the rectangle [x0, x1] × [y0, y1] of pl in col (def when
// nil), named in leg when named is set.
func addArea(pl *plot.Plot, leg *plot.Legend, named bool, name string, x0, x1, y0, y1 float64, col, def color.Color) error {
	if col == nil {
		col = def
	}
	poly, err := plotter.NewPolygon(plotter.XYs{{X: x0, Y: y0}, {X: x1, Y: y0}, {X: x1, Y: y1}, {X: x0, Y: y1}})
	if err != nil {
		return fmt.Errorf("chart: %w", err)
	}
	poly.Color = col
	poly.LineStyle.Width = 0
	pl.Add(poly)
	if named && name != "" {
		leg.Add(name, poly)
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
