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
	if o.Width <= 0 {
		o.Width = 60
	}
	if o.Height <= 0 {
		o.Height = 10
	}
	if o.XLabel == "" {
		o.XLabel = "step"
	}
	n := 0
	for _, s := range series {
		n = max(n, len(s.Y))
	}
	cols := min(n, o.Width)
	if cols == 0 {
		cols = 1
	}
	per := 1
	if n > o.Width {
		per = (n + o.Width - 1) / o.Width
		cols = (n + per - 1) / per
	}

	// Bucket every series into columns.
	binned := make([][]float64, len(series))
	lo, hi := math.Inf(1), math.Inf(-1)
	for i, s := range series {
		binned[i] = make([]float64, cols)
		for c := range cols {
			sum, k := 0.0, 0
			for j := c * per; j < min((c+1)*per, len(s.Y)); j++ {
				if v := s.Y[j]; !math.IsNaN(v) && !math.IsInf(v, 0) {
					sum += v
					k++
				}
			}
			if k == 0 {
				binned[i][c] = math.NaN()
				continue
			}
			v := sum / float64(k)
			binned[i][c] = v
			lo, hi = math.Min(lo, v), math.Max(hi, v)
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
		m := r.Mark
		if m == 0 {
			m = '-'
		}
		y := row(r.Y)
		for c := range cols {
			grid[y][c] = m
		}
	}
	for i, s := range series {
		m := s.Mark
		if m == 0 {
			m = '*'
		}
		for c, v := range binned[i] {
			if !math.IsNaN(v) {
				grid[row(v)][c] = m
			}
		}
	}

	// Axis labels: top, middle and bottom rows carry values.
	labels := make([]string, o.Height)
	lw := 0
	for r := range labels {
		if r == 0 || r == o.Height-1 || r == (o.Height-1)/2 {
			v := hi - (hi-lo)*float64(r)/float64(o.Height-1)
			labels[r] = formatValue(v)
			lw = max(lw, len(labels[r]))
		}
	}
	var b strings.Builder
	for r := range grid {
		tick := '|'
		if labels[r] != "" {
			tick = '+'
		}
		fmt.Fprintf(&b, "%*s %c%s\n", lw, labels[r], tick, strings.TrimRight(string(grid[r]), " "))
	}
	fmt.Fprintf(&b, "%*s +%s\n", lw, "", strings.Repeat("-", cols))
	last := fmt.Sprintf("%d", max(n-1, 0))
	gap := max(1, cols-1-len(last)+1)
	fmt.Fprintf(&b, "%*s  0%*s %s", lw, "", gap, last, o.XLabel)
	if per > 1 {
		fmt.Fprintf(&b, " (%d per column)", per)
	}
	b.WriteByte('\n')
	var legend []string
	for _, s := range series {
		m := s.Mark
		if m == 0 {
			m = '*'
		}
		legend = append(legend, fmt.Sprintf("%c %s", m, s.Name))
	}
	for _, r := range o.Refs {
		m := r.Mark
		if m == 0 {
			m = '-'
		}
		legend = append(legend, fmt.Sprintf("%c %s=%s", m, r.Name, formatValue(r.Y)))
	}
	if len(legend) > 0 {
		fmt.Fprintf(&b, "%*s  %s\n", lw, "", strings.Join(legend, "   "))
	}
	return b.String()
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
