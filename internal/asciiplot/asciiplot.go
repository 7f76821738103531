// Package asciiplot draws small line charts as plain ASCII text, for test
// transcripts (control/testdata) and terminal output (sluice sim).
//
// The output is deterministic: the same series and options give the same
// bytes, so plots can be compared in golden files. Only ASCII characters are
// used, so column widths are exact in every terminal and diff tool.
//
// A chart has Height rows and Width plot columns. X is the sample index: when a
// series has more points than Width, each column shows the mean of its bucket of
// consecutive points; when it has fewer, the chart is as wide as the longest
// series. NaN and ±Inf points are not drawn. All series share one y axis, so
// plot quantities with different units in separate charts.
package asciiplot

import (
	"fmt"
	"math"
	"strings"
)

// Series is one line of a chart.
type Series struct {
	Name string    // legend text
	Y    []float64 // values at x = 0, 1, 2, ...
	Mark rune      // character drawn for this series; 0 means '*'
}

// Ref is a horizontal reference line, e.g. a setpoint.
type Ref struct {
	Name string  // legend text
	Y    float64 // height of the line
	Mark rune    // character drawn; 0 means '-'
}

// Options controls a chart. The zero value of each field picks a default.
type Options struct {
	Width  int   // plot columns (not counting the axis labels); default 60
	Height int   // plot rows; default 10
	Refs   []Ref // horizontal reference lines, drawn under the series
	// YMin and YMax fix the y range when YMin < YMax; otherwise the range is
	// the data's (and the refs') min and max.
	YMin, YMax float64
	// XLabel names the x unit in the footer, e.g. "s"; default "step".
	XLabel string
}

// Render draws series on a width x height chart with no reference lines.
// It is shorthand for RenderOpts(series, Options{Width: width, Height: height}).
func Render(series []Series, width, height int) string {
	return RenderOpts(series, Options{Width: width, Height: height})
}

// RenderOpts draws series with the given options. Later series are drawn over
// earlier ones where they share a cell. The result ends with a newline.
func RenderOpts(series []Series, o Options) string {
	o = o.withDefaults()
	n, cols, per := layout(series, o.Width)
	binned := make([][]float64, len(series))
	for i, s := range series {
		binned[i] = bin(s.Y, cols, per)
	}
	lo, hi := yRange(binned, o)
	grid := draw(series, binned, o, cols, lo, hi)

	var b strings.Builder
	lw := writeRows(&b, grid, lo, hi)
	writeXAxis(&b, lw, n, cols, per, o.XLabel)
	writeLegend(&b, lw, series, o.Refs)
	return b.String()
}

// withDefaults fills the zero fields of o with their defaults.
func (o Options) withDefaults() Options {
	if o.Width <= 0 {
		o.Width = 60
	}
	if o.Height <= 0 {
		o.Height = 10
	}
	if o.XLabel == "" {
		o.XLabel = "step"
	}
	return o
}

// mark is the character drawn for s.
func (s Series) mark() rune {
	if s.Mark == 0 {
		return '*'
	}
	return s.Mark
}

// mark is the character drawn for r.
func (r Ref) mark() rune {
	if r.Mark == 0 {
		return '-'
	}
	return r.Mark
}

// layout returns the longest series' length n, the number of plot columns
// (at least 1, at most width) and how many consecutive points each column
// averages.
func layout(series []Series, width int) (n, cols, per int) {
	for _, s := range series {
		n = max(n, len(s.Y))
	}
	cols = min(n, width)
	if cols == 0 {
		cols = 1
	}
	per = 1
	if n > width {
		per = (n + width - 1) / width
		cols = (n + per - 1) / per
	}
	return n, cols, per
}

// bin returns the mean of each column's per points of y, skipping NaN and
// ±Inf; a column with no finite point is NaN.
func bin(y []float64, cols, per int) []float64 {
	out := make([]float64, cols)
	for c := range cols {
		sum, k := 0.0, 0
		for j := c * per; j < min((c+1)*per, len(y)); j++ {
			if v := y[j]; !math.IsNaN(v) && !math.IsInf(v, 0) {
				sum += v
				k++
			}
		}
		if k == 0 {
			out[c] = math.NaN()
			continue
		}
		out[c] = sum / float64(k)
	}
	return out
}

// yRange returns the y axis' bottom and top: o.YMin and o.YMax when they
// form a range, else the span of the binned values and the refs, widened to
// a non-empty range.
func yRange(binned [][]float64, o Options) (lo, hi float64) {
	lo, hi = math.Inf(1), math.Inf(-1)
	for _, col := range binned {
		for _, v := range col {
			if !math.IsNaN(v) {
				lo, hi = math.Min(lo, v), math.Max(hi, v)
			}
		}
	}
	for _, r := range o.Refs {
		lo, hi = math.Min(lo, r.Y), math.Max(hi, r.Y)
	}
	if o.YMin < o.YMax {
		lo, hi = o.YMin, o.YMax
	}
	if math.IsInf(lo, 0) || math.IsInf(hi, 0) {
		lo, hi = 0, 1
	}
	if hi == lo {
		lo, hi = lo-1, hi+1
	}
	return lo, hi
}

// draw returns the plot area, o.Height rows of cols cells: the refs first,
// then the series in order, each over the ones before it.
func draw(series []Series, binned [][]float64, o Options, cols int, lo, hi float64) [][]rune {
	grid := make([][]rune, o.Height)
	for r := range grid {
		grid[r] = []rune(strings.Repeat(" ", cols))
	}
	row := func(v float64) int {
		// Row 0 is the top (hi), row Height-1 the bottom (lo).
		f := (hi - v) / (hi - lo) * float64(o.Height-1)
		r := int(math.Round(f))
		return max(0, min(o.Height-1, r))
	}
	for _, r := range o.Refs {
		y := row(r.Y)
		for c := range cols {
			grid[y][c] = r.mark()
		}
	}
	for i, s := range series {
		for c, v := range binned[i] {
			if !math.IsNaN(v) {
				grid[row(v)][c] = s.mark()
			}
		}
	}
	return grid
}

// writeRows writes the grid's rows after the y axis; the top, middle and
// bottom rows carry their values. It returns the labels' width.
func writeRows(b *strings.Builder, grid [][]rune, lo, hi float64) (lw int) {
	height := len(grid)
	labels := make([]string, height)
	for r := range labels {
		if r == 0 || r == height-1 || r == (height-1)/2 {
			v := hi - (hi-lo)*float64(r)/float64(height-1)
			labels[r] = formatValue(v)
			lw = max(lw, len(labels[r]))
		}
	}
	for r := range grid {
		tick := '|'
		if labels[r] != "" {
			tick = '+'
		}
		fmt.Fprintf(b, "%*s %c%s\n", lw, labels[r], tick, strings.TrimRight(string(grid[r]), " "))
	}
	return lw
}

// writeXAxis writes the x axis line and its labels: the first and last
// sample index, the unit, and the points per column when more than one.
func writeXAxis(b *strings.Builder, lw, n, cols, per int, xlabel string) {
	fmt.Fprintf(b, "%*s +%s\n", lw, "", strings.Repeat("-", cols))
	last := fmt.Sprintf("%d", max(n-1, 0))
	gap := max(1, cols-1-len(last)+1)
	fmt.Fprintf(b, "%*s  0%*s %s", lw, "", gap, last, xlabel)
	if per > 1 {
		fmt.Fprintf(b, " (%d per column)", per)
	}
	b.WriteByte('\n')
}

// writeLegend writes one line naming each series' and each ref's mark, if
// there are any.
func writeLegend(b *strings.Builder, lw int, series []Series, refs []Ref) {
	var legend []string
	for _, s := range series {
		legend = append(legend, fmt.Sprintf("%c %s", s.mark(), s.Name))
	}
	for _, r := range refs {
		legend = append(legend, fmt.Sprintf("%c %s=%s", r.mark(), r.Name, formatValue(r.Y)))
	}
	if len(legend) > 0 {
		fmt.Fprintf(b, "%*s  %s\n", lw, "", strings.Join(legend, "   "))
	}
}

// formatValue prints an axis value compactly with 3 significant digits.
func formatValue(v float64) string {
	if v == 0 {
		return "0"
	}
	a := math.Abs(v)
	switch {
	case a >= 1e6 || a < 1e-3:
		return fmt.Sprintf("%.2e", v)
	case a >= 100:
		return fmt.Sprintf("%.0f", v)
	case a >= 10:
		return fmt.Sprintf("%.1f", v)
	default:
		return fmt.Sprintf("%.2f", v)
	}
}
