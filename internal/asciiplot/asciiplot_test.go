package asciiplot

import (
	"math"
	"strings"
	"testing"
)

func TestRenderGolden(t *testing.T) {
	y := []float64{0, 1, 2, 3, 4, 5, 4, 3, 2, 1}
	got := RenderOpts([]Series{{Name: "tri", Y: y, Mark: 'o'}}, Options{Width: 20, Height: 6, Refs: []Ref{{Name: "sp", Y: 4}}})
	want := "" +
		"5.00 +     o\n" +
		"     |----o-o---\n" +
		"3.00 +   o   o\n" +
		"     |  o     o\n" +
		"     | o       o\n" +
		"   0 +o\n" +
		"     +----------\n" +
		"      0        9 step\n" +
		"      o tri   - sp=4.00\n"
	if got != want {
		t.Fatalf("got:\n%s\nwant:\n%s", got, want)
	}
}

func TestRenderBucketsLongSeries(t *testing.T) {
	y := make([]float64, 100)
	for i := range y {
		y[i] = float64(i)
	}
	got := Render([]Series{{Name: "ramp", Y: y}}, 10, 5)
	lines := strings.Split(got, "\n")
	// 5 rows, axis, x labels, legend, trailing empty string.
	if len(lines) != 9 {
		t.Fatalf("want 9 lines, got %d:\n%s", len(lines), got)
	}
	if !strings.Contains(got, "(10 per column)") {
		t.Fatalf("missing bucket note:\n%s", got)
	}
	// Column means are 4.5 .. 94.5: the top label is the last bucket's mean.
	if !strings.HasPrefix(lines[0], "94.5 +") {
		t.Fatalf("top label: %q", lines[0])
	}
}

func TestRenderSkipsNaNAndConstant(t *testing.T) {
	got := Render([]Series{{Name: "c", Y: []float64{2, math.NaN(), 2}}}, 10, 3)
	if strings.Count(got, "*") != 3 { // two points + legend
		t.Fatalf("want 2 points and a legend mark:\n%s", got)
	}
	if Render(nil, 10, 3) == "" {
		t.Fatal("empty input must still render an axis")
	}
}

// FuzzRender checks that any input renders without panicking, with exactly
// Height plot rows plus the axis, the x labels and the legend.
func FuzzRender(f *testing.F) {
	f.Add(3.0, -1.0, 1e300, 7, 4, 10, 0.0, 0.0)
	f.Add(math.NaN(), math.Inf(1), 0.0, 1, 1, 1, 5.0, 1.0)
	f.Add(1.0, 2.0, 3.0, 500, 60, 3, -1.0, 1.0)
	f.Fuzz(func(t *testing.T, a, b, c float64, n, width, height int, ymin, ymax float64) {
		n, width, height = n%2000, width%200, height%50
		if n < 0 || width < 0 || height < 0 {
			t.Skip()
		}
		y := make([]float64, n)
		for i := range y {
			y[i] = []float64{a, b, c}[i%3]
		}
		out := RenderOpts([]Series{{Name: "s", Y: y}}, Options{Width: width, Height: height, YMin: ymin, YMax: ymax, Refs: []Ref{{Name: "r", Y: c}}})
		h := height
		if h <= 0 {
			h = 10
		}
		if got := strings.Count(out, "\n"); got != h+3 {
			t.Fatalf("%d lines, want %d:\n%s", got, h+3, out)
		}
	})
}
