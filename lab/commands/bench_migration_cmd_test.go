package commands

import (
	"strings"
	"testing"
)

// TestBenchMigrationUsageErrors: bad flags of `sluice bench handover` and
// `sluice bench warm` exit 2 with one line, before any cluster is started.
// (Cobra keeps flag values between runs: each case resets what it relies on.)
func TestBenchMigrationUsageErrors(t *testing.T) {
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"bench", "handover", "--handovers", "0"}, "--handovers"},
		{[]string{"bench", "handover", "--handovers", "2", "--rate", "-1"}, "--rate"},
		{[]string{"bench", "handover", "--rate", "500", "--fence", "maybe"}, "--fence"},
		{[]string{"bench", "handover", "--fence", "stop", "--wal-segsize", "3"}, "--wal-segsize"},
		{[]string{"bench", "handover", "--variant", "hold_deadline=5m"}, "hold_deadline"},
		{[]string{"bench", "handover", "--variant", "hold_grace=0s"}, "hold_grace"},
		{[]string{"bench", "handover", "--variant", "kp=1"}, "unknown key kp"},
		{[]string{"bench", "handover", "--long-cursor", "--via", "direct"}, "--long-cursor"},
		{[]string{"bench", "warm", "--size", "100", "--shared-buffers", "128"}, "--size"},
		{[]string{"bench", "warm", "--size", "512", "--hot", "0"}, "--hot"},
		{[]string{"bench", "warm", "--hot", "96", "--memory", "64"}, "--memory"},
	}
	for _, c := range cases {
		code, _, msg := labRunCLI(t, c.args...)
		if code != 2 || !strings.Contains(msg, c.want) || strings.Count(msg, "\n") != 1 {
			t.Errorf("sluice %s: exit %d, stderr %q; want 2 and one line mentioning %q", strings.Join(c.args, " "), code, msg, c.want)
		}
	}
}

func TestFreezePercentile(t *testing.T) {
	xs := []float64{5, 1, 4, 2, 3}
	for _, c := range []struct{ p, want float64 }{{50, 3}, {99, 5}, {0, 1}, {100, 5}} {
		if got := migPercentile(xs, c.p); got != c.want {
			t.Errorf("p%.0f = %v, want %v", c.p, got, c.want)
		}
	}
	if migPercentile(nil, 50) != 0 {
		t.Error("empty input")
	}
}
