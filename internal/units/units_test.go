package units

import (
	"math"
	"testing"
)

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		in   string
		size int64
		ok   bool
	}{
		{"4096", 4096, true}, {"200MB", 200e6, true}, {"200mb", 200e6, true}, {"1.5GiB", 3 << 29, true},
		{"64k", 64000, true}, {"64KiB", 65536, true}, {"-1MB", 0, false}, {"12XB", 0, false},
		{"", 0, false}, {"MB", 0, false}, {"NaN", 0, false},
	} {
		got, err := ParseBytes(tc.in)
		if (err == nil) != tc.ok || got != tc.size {
			t.Errorf("ParseBytes(%q) = %d, %v; want %d ok=%v", tc.in, got, err, tc.size, tc.ok)
		}
	}
	for _, tc := range []struct {
		in   string
		rate float64
		ok   bool
	}{
		{"20MB/s", 20e6, true}, {"20MB", 20e6, true}, {"20MBps", 20e6, true}, {"0", 0, true},
		{"unlimited", math.Inf(1), true}, {"-3MB/s", 0, false}, {"fast", 0, false},
	} {
		got, err := ParseRate(tc.in)
		if (err == nil) != tc.ok || got != tc.rate {
			t.Errorf("ParseRate(%q) = %v, %v; want %v ok=%v", tc.in, got, err, tc.rate, tc.ok)
		}
	}
}

func TestFormat(t *testing.T) {
	if got := FormatBytes(212.4e6); got != "212.4 MB" {
		t.Errorf("FormatBytes = %q", got)
	}
	if got := FormatRate(math.Inf(1)); got != "unlimited" {
		t.Errorf("FormatRate(inf) = %q", got)
	}
}
