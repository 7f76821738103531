package commands

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestBenchDowntimeUsageErrors: bad flags of `sluice bench downtime` exit 2
// with one line naming the flag, before any server is started (no --out
// directory appears). Cobra keeps flag values between runs: each case sets
// the flags it relies on back to good values.
func TestBenchDowntimeUsageErrors(t *testing.T) {
	out := filepath.Join(t.TempDir(), "never")
	good := []string{"bench", "downtime", "--out", out, "--runs", "3", "--size", "200MB", "--tps", "200", "--mpl", "8",
		"--rate", "0", "--probe-interval", "5ms", "--window", "1s", "--settle", "3s", "--baseline", "10s", "--recover", "60s", "--cpus", "0.5", "--memory", "768"}
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"--runs", "0"}, "--runs"},
		{[]string{"--size", "10"}, "--size"},
		{[]string{"--size", "lots"}, "--size"},
		{[]string{"--tps", "-1"}, "--tps"},
		{[]string{"--mpl", "0"}, "--mpl"},
		{[]string{"--rate", "fast"}, "--rate"},
		{[]string{"--probe-interval", "0s"}, "--probe-interval"},
		{[]string{"--probe-interval", "100us"}, "--probe-interval"},
		{[]string{"--window", "soon"}, "--window"},
		{[]string{"--baseline", "1s"}, "baseline"},
		{[]string{"--memory", "64"}, "memory"},
		{[]string{"--cpus", "0.001"}, "CPU"},
		{[]string{"extra"}, "unknown command"},
	}
	for _, c := range cases {
		args := append(append([]string(nil), good...), c.args...)
		var stdout, stderr bytes.Buffer
		code := run(args, &stdout, &stderr)
		msg := stderr.String()
		if code != 2 || !strings.Contains(msg, c.want) || strings.Count(msg, "\n") != 1 {
			t.Errorf("sluice bench downtime … %s: exit %d, stderr %q; want 2 and one line mentioning %q", strings.Join(c.args, " "), code, msg, c.want)
		}
		if _, err := os.Stat(out); err == nil {
			t.Fatalf("%s: the output directory was created", strings.Join(c.args, " "))
		}
	}
}
