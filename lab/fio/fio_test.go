package fio

import (
	"context"
	"os/exec"
	"testing"
	"time"
)

// TestFioRun runs each profile for 3 s on a small file: the bandwidth log
// parses into per-second throughput near the profile's demand.
func TestFioRun(t *testing.T) {
	if _, err := exec.LookPath("fio"); err != nil {
		t.Skip("fio not installed (scripts/install-deps.sh bench)")
	}
	for _, p := range Profiles {
		f := Workload{Profile: p, Dir: t.TempDir(), FileMB: 32, Duration: 3 * time.Second}
		if err := f.Prepare(context.Background()); err != nil {
			t.Fatal(err)
		}
		r, err := f.Run(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if len(r.PerSecond) < 2 || len(r.PerSecond) > 4 {
			t.Fatalf("%s: %d seconds logged: %v", p.Name, len(r.PerSecond), r.PerSecond)
		}
		if m := r.Mean(0, 3); !(m > 1e6) {
			t.Errorf("%s: mean %.0f B/s over 3 s", p.Name, m)
		}
		t.Logf("%s: %.1f MB/s %v", p.Name, r.Mean(0, 3)/1e6, r.PerSecond)
	}
	if _, err := ProfileNamed("nope"); err == nil {
		t.Fatal("unknown profile accepted")
	}
}
