package commands

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestSoakUsageErrors: bad flags of `sluice lab soak` (and of its alias
// `sluice lab bench soak`) exit 2 with one line naming what is wrong,
// before any server is started (no --out directory appears).
func TestSoakUsageErrors(t *testing.T) {
	out := filepath.Join(t.TempDir(), "never")
	good := []string{"--out", out, "--duration", "1h", "--size", "200MB", "--tps", "100", "--mpl", "8", "--setpoint", "",
		"--fixed-rate", "20MB/s", "--warmup", "2", "--settle", "10s", "--sample-every", "10s", "--cpus", "0.5", "--memory", "768"}
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"--duration", "30s"}, "duration"},
		{[]string{"--size", "lots"}, "--size"},
		{[]string{"--size", "10"}, "--size"},
		{[]string{"--fixed-rate", "fast"}, "--fixed-rate"},
		{[]string{"--setpoint", "-3ms"}, "--setpoint"},
		{[]string{"--tps", "-1"}, "workload rate"},
		{[]string{"--mpl", "200"}, "mpl"},
		{[]string{"--warmup", "-1"}, "warm-up"},
		{[]string{"--sample-every", "1ms"}, "sample"},
		{[]string{"--memory", "64"}, "memory"},
		{[]string{"extra"}, "unknown command"},
	}
	for _, cmd := range [][]string{{"soak"}, {"bench", "soak"}} {
		for _, c := range cases {
			args := append(append(append([]string(nil), cmd...), good...), c.args...)
			var stdout, stderr bytes.Buffer
			code := run(args, &stdout, &stderr)
			msg := stderr.String()
			if code != 2 || !strings.Contains(msg, c.want) || strings.Count(msg, "\n") != 1 {
				t.Errorf("sluice lab %s … %s: exit %d, stderr %q; want 2 and one line mentioning %q", strings.Join(cmd, " "), strings.Join(c.args, " "), code, msg, c.want)
			}
			if _, err := os.Stat(out); err == nil {
				t.Fatalf("%s: the output directory was created", strings.Join(c.args, " "))
			}
		}
	}
}
