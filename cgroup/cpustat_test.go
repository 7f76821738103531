package cgroup

import (
	"math"
	"os/exec"
	"strings"
	"testing"
	"time"
)

func TestParseCPUStat(t *testing.T) {
	s, err := ParseCPUStat(strings.NewReader("nr_periods 120\nnr_throttled 30\nthrottled_time 4500000000\nnr_bursts 0\n"))
	if err != nil {
		t.Fatal(err)
	}
	if want := (CPUStat{Periods: 120, Throttled: 30, Time: 4500 * time.Millisecond}); s != want {
		t.Fatalf("ParseCPUStat = %+v, want %+v", s, want)
	}
	if _, err := ParseCPUStat(strings.NewReader("nr_periods x\n")); err == nil {
		t.Fatal("a malformed count parsed")
	}
	before := CPUStat{Periods: 100, Throttled: 10}
	if got := s.ThrottledShare(before); got != 1 {
		t.Fatalf("ThrottledShare = %v, want 1 (20 of 20 periods)", got)
	}
	for _, b := range []CPUStat{s, {Periods: 200}, {Periods: 100, Throttled: 40}} {
		if got := s.ThrottledShare(b); !math.IsNaN(got) {
			t.Fatalf("ThrottledShare(%+v) = %v, want NaN", b, got)
		}
	}
}

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
	var s CPUStat
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
