package monitor

import (
	"errors"
	"math"
	"os"
	"path/filepath"
	"testing"
)

func TestCPUQuotaSample(t *testing.T) {
	stat := filepath.Join(t.TempDir(), "cpu.stat")
	q := &CPUQuota{Stat: stat}
	if c := q.Sample(); c.Err == nil {
		t.Fatalf("sample of a missing file = %+v, want an error", c)
	}
	write := func(s string) {
		t.Helper()
		if err := os.WriteFile(stat, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("nr_periods 100\nnr_throttled 10\nthrottled_time 5000\n")
	if c := q.Sample(); !errors.Is(c.Err, errNoCPUBaseline) {
		t.Fatalf("first sample = %+v, want errNoCPUBaseline", c)
	}
	write("nr_periods 200\nnr_throttled 35\nthrottled_time 9000\n")
	if c := q.Sample(); c.Err != nil || math.Abs(c.Throttled-0.25) > 1e-12 {
		t.Fatalf("second sample = %+v, want 25 of 100 periods throttled", c)
	}
	if c := q.Sample(); !errors.Is(c.Err, ErrNoQuotaPeriods) {
		t.Fatalf("sample without new periods = %+v, want ErrNoQuotaPeriods", c)
	}
	write("nr_periods 10\nnr_throttled 1\n") // the group was recreated
	if c := q.Sample(); !errors.Is(c.Err, ErrNoQuotaPeriods) {
		t.Fatalf("sample after the counters went back = %+v, want ErrNoQuotaPeriods", c)
	}
	write("nr_periods 20\nnr_throttled 6\n")
	if c := q.Sample(); c.Err != nil || math.Abs(c.Throttled-0.5) > 1e-12 {
		t.Fatalf("sample after the reset = %+v, want 5 of 10 periods throttled", c)
	}
	write("nr_periods lots\n")
	if c := q.Sample(); c.Err == nil {
		t.Fatalf("sample of a malformed cpu.stat = %+v, want an error", c)
	}
}

func TestCPUStatOf(t *testing.T) {
	root := t.TempDir()
	mk := func(p string) string {
		t.Helper()
		p = filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("nr_periods 0\nnr_throttled 0\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	v1 := mk("cpu/bed/server-a/cpu.stat")
	v2 := mk("unified/svc/db.scope/cpu.stat")
	for _, c := range []struct{ name, proc, want string }{
		{"v1 cpu", "4:memory:/m\n1:cpu:/bed/server-a\n0::/svc/db.scope\n", v1},
		{"v1 co-mounted", "2:cpu,cpuacct:/bed/server-a\n", v1},
		{"v2 only", "0::/svc/db.scope\n", v2},
		{"v1 group gone, v2 there", "1:cpu:/gone\n0::/svc/db.scope\n", v2},
		{"cpuacct is not cpu", "2:cpuacct:/bed/server-a\n", ""},
		{"none", "1:cpu:/gone\n", ""},
	} {
		proc := filepath.Join(t.TempDir(), "cgroup")
		if err := os.WriteFile(proc, []byte(c.proc), 0o644); err != nil {
			t.Fatal(err)
		}
		got, err := cpuStatOf(proc, root)
		switch {
		case c.want == "" && err == nil:
			t.Errorf("%s: found %s, want an error", c.name, got)
		case c.want != "" && (err != nil || got != c.want):
			t.Errorf("%s: got %q, %v; want %s", c.name, got, err, c.want)
		}
	}
}
