package monitor

import (
	"math"
	"strings"
	"testing"
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
