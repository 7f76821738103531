package cgroup

import (
	"os/exec"
	"testing"
	"time"

	"github.com/sluicedb/sluice/monitor"
)

// TestRealCPUStat runs a busy loop in a group allowed 10 % of a CPU: it is
// throttled in most periods.
func TestRealCPUStat(t *testing.T) {
	g := realGroup(t, "cpu", "cpu.stat", "sluice-test-cpu-")
	if err := g.SetCPUQuota(10*time.Millisecond, time.Millisecond); err != nil {
		t.Fatal(err)
	}
	before, err := g.CPUStat()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("sh", "-c", "while :; do :; done")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	if err := g.AddPID(cmd.Process.Pid); err != nil {
		t.Fatal(err)
	}
	var s monitor.CPUStat
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if s, err = g.CPUStat(); err != nil {
			t.Fatal(err)
		}
		if s.Periods-before.Periods >= 30 {
			break
		}
	}
	if s.Periods-before.Periods < 30 {
		t.Fatalf("only %d periods elapsed", s.Periods-before.Periods)
	}
	if share := s.ThrottledShare(before); !(share > 0.5) || s.Time <= before.Time {
		t.Fatalf("busy loop at 10 %% of a CPU: throttled share %v, time %v → %v; want most periods throttled", share, before.Time, s.Time)
	}
}
