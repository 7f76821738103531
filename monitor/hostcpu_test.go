package monitor

import (
	"math"
	"strings"
	"testing"
	"time"
)

func TestParseHostCPU(t *testing.T) {
	const stat = `cpu  100 5 50 800 20 3 2 40 7 0
cpu0 50 2 25 400 10 1 1 20 0 0
intr 12345
`
	c, err := ParseHostCPU(strings.NewReader(stat))
	if err != nil {
		t.Fatal(err)
	}
	// guest (7) is inside user already: not added again.
	if want := (HostCPU{Total: 100 + 5 + 50 + 800 + 20 + 3 + 2 + 40, Steal: 40}); c != want {
		t.Fatalf("got %+v, want %+v", c, want)
	}
	later := HostCPU{Total: c.Total + 200, Steal: c.Steal + 50}
	if got := later.StealShare(c); got != 0.25 {
		t.Fatalf("steal share %v, want 0.25", got)
	}
	if got := c.StealShare(c); !math.IsNaN(got) {
		t.Fatalf("no time passed: %v, want NaN", got)
	}
	if got := c.StealShare(later); !math.IsNaN(got) {
		t.Fatalf("counters backwards: %v, want NaN", got)
	}

	old, err := ParseHostCPU(strings.NewReader("cpu 1 2 3 4\n"))
	if err != nil || old != (HostCPU{Total: 10}) {
		t.Fatalf("a kernel without steal: %+v, %v", old, err)
	}
	for _, bad := range []string{"intr 1\n", "cpu 1 2 3\n", "cpu 1 x 3 4\n"} {
		if _, err := ParseHostCPU(strings.NewReader(bad)); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

func TestReadHostCPU(t *testing.T) {
	a, err := ReadHostCPU()
	if err != nil {
		t.Skipf("no /proc/stat here: %v", err)
	}
	if a.Total == 0 || a.Steal > a.Total {
		t.Fatalf("implausible reading %+v", a)
	}
}

func TestStealPeak(t *testing.T) {
	t0 := time.Unix(1000, 0)
	// Samples every 2 s; 100 ticks of CPU time per 2 s; steal per interval
	// in ticks: quiet, a 6 s burst at 40, quiet again.
	per := []uint64{1, 1, 40, 40, 40, 1, 1, 1}
	s := []HostCPUSample{{At: t0}}
	for i, st := range per {
		prev := s[len(s)-1].CPU
		s = append(s, HostCPUSample{At: t0.Add(time.Duration(2*(i+1)) * time.Second), CPU: HostCPU{Total: prev.Total + 100, Steal: prev.Steal + st}})
	}
	for _, tc := range []struct {
		span time.Duration
		want float64
	}{
		{2 * time.Second, 0.40},
		{6 * time.Second, 0.40},                   // the burst exactly
		{10 * time.Second, (1 + 120 + 1) / 500.0}, // the burst and one quiet interval on a side
		{16 * time.Second, (1 + 1 + 120 + 1 + 1 + 1) / 800.0},
		{3 * time.Second, 0.40}, // stretches of 4 s: two burst intervals
	} {
		if got := StealPeak(s, tc.span); math.Abs(got-tc.want) > 1e-9 {
			t.Errorf("span %v: peak %.4f, want %.4f", tc.span, got, tc.want)
		}
	}
	if got := StealPeak(s, 17*time.Second); !math.IsNaN(got) {
		t.Errorf("span longer than the run: %v, want NaN", got)
	}
	if got := StealPeak(s[:1], time.Second); !math.IsNaN(got) {
		t.Errorf("one sample: %v, want NaN", got)
	}
	// A reboot between samples (counters went backwards) is skipped.
	r := append([]HostCPUSample(nil), s[:3]...)
	r = append(r, HostCPUSample{At: t0.Add(6 * time.Second), CPU: HostCPU{Total: 10, Steal: 9}})
	if got := StealPeak(r, 2*time.Second); math.Abs(got-0.01) > 1e-9 {
		t.Errorf("with a reboot: %v, want 0.01 from the usable stretches", got)
	}
}
