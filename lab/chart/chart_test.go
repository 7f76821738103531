package chart

import (
	"bytes"
	"image/png"
	"math"
	"strings"
	"testing"
)

func TestWritePNG(t *testing.T) {
	var xs, lat, rate []float64
	for i := 0; i < 100; i++ {
		xs = append(xs, float64(i))
		lat = append(lat, 40+10*math.Sin(float64(i)/8))
		rate = append(rate, float64(i%30))
	}
	lat[50] = math.NaN()
	c := Chart{Title: "test", XLabel: "seconds", Panels: []Panel{
		{YLabel: "latency ms", Series: []Series{{Name: "latency", X: xs, Y: lat}, Const("setpoint", xs, 40)}},
		{YLabel: "rate MB/s", Series: []Series{{Name: "rate", X: xs, Y: rate}}},
	}}
	var buf bytes.Buffer
	if err := WritePNG(&buf, c); err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(&buf)
	if err != nil {
		t.Fatalf("not a PNG: %v", err)
	}
	if b := img.Bounds(); b.Dx() < 500 || b.Dy() < 500 {
		t.Fatalf("image %v too small", b)
	}
	if err := WritePNG(&buf, Chart{}); err == nil {
		t.Fatal("empty chart accepted")
	}
	bad := Chart{Panels: []Panel{{Series: []Series{{X: []float64{1, 2}, Y: []float64{1}}}}}}
	if err := WritePNG(&buf, bad); err == nil {
		t.Fatal("mismatched series accepted")
	}
}

// A chart with a band, a span, a mark, a fixed X range and its legend
// outside renders, wider, and differs from the same chart without them.
func TestWritePNGAnnotations(t *testing.T) {
	xs := []float64{0, 10, 20, 30, 40}
	plain := Chart{Panels: []Panel{{Series: []Series{{Name: "latency", X: xs, Y: []float64{1, 5, 4, 6, 5}}}}}}
	var a, b bytes.Buffer
	if err := WritePNG(&a, plain); err != nil {
		t.Fatal(err)
	}
	annotated := plain
	annotated.Panels = []Panel{{
		Series: []Series{{Name: "latency", X: xs, Y: []float64{1, 5, 4, 6, 5}, Width: 3}},
		Bands:  []Band{{Name: "setpoint ±10 %", Lo: 4.5, Hi: 5.5}},
	}}
	annotated.Spans = []Span{{Name: "copy", From: 10, To: 30}}
	annotated.Marks = []Mark{{Name: "handover", X: 30}}
	annotated.LegendOutside = true
	annotated.XMin, annotated.XMax = 5, 35
	if err := WritePNG(&b, annotated); err != nil {
		t.Fatal(err)
	}
	if bytes.Equal(a.Bytes(), b.Bytes()) {
		t.Fatal("annotations drew nothing")
	}
	pa, err := png.Decode(&a)
	if err != nil {
		t.Fatal(err)
	}
	pb, err := png.Decode(&b)
	if err != nil {
		t.Fatalf("not a PNG: %v", err)
	}
	if pb.Bounds().Dx() <= pa.Bounds().Dx() {
		t.Fatalf("legend outside: width %d, want more than %d", pb.Bounds().Dx(), pa.Bounds().Dx())
	}
}

// The axes' labels carry no trailing zeros whatever the span.
func TestPlainTicks(t *testing.T) {
	for _, c := range []struct {
		min, max float64
		want     []string
	}{
		{0, 57, []string{"0", "25", "50"}},
		{0, 0.3, []string{"0", "0.15", "0.3"}},
		{-1, 1, []string{"-1", "0", "1"}},
	} {
		var got []string
		for _, tk := range (plainTicks{}).Ticks(c.min, c.max) {
			if tk.Label != "" {
				got = append(got, tk.Label)
			}
		}
		if strings.Join(got, " ") != strings.Join(c.want, " ") {
			t.Errorf("ticks of [%v, %v]: %q, want %q", c.min, c.max, got, c.want)
		}
	}
}
