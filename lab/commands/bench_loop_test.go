package commands

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestBenchLoopUsageErrors: bad flags of the closed-loop benchmarks exit 2
// with one line, before any server is started or output written.
func TestBenchLoopUsageErrors(t *testing.T) {
	out := filepath.Join(t.TempDir(), "never")
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"bench", "slack-sweep", "--out", out, "--compare-start-growth", "1.2,0.5"}, "--compare-start-growth"},
		{[]string{"bench", "slack-sweep", "--out", out, "--compare-start-growth", "", "--compare-rearm-growth", "1.5,0"}, "--compare-rearm-growth"},
		{[]string{"bench", "slack-sweep", "--out", out, "--compare-rearm-growth", "", "--rearm-growth", "0.5"}, "--rearm-growth"},
		{[]string{"bench", "slack-sweep", "--out", out, "--rearm-growth", "1.5", "--start-backoff", "9"}, "--start-backoff"},
		{[]string{"bench", "slack-sweep", "--out", out, "--start-backoff", "3", "--idle-floor", "1"}, "--idle-floor"},
		{[]string{"bench", "slack-sweep", "--out", out, "--idle-floor", "0.5", "--size", "10kB"}, "--size"},
		{[]string{"bench", "slack-sweep", "--out", out, "--size", "1GB", "--rounds", "0"}, "--rounds"},
		{[]string{"bench", "slack-sweep", "--out", out, "--rounds", "51"}, "--rounds"},
		{[]string{"bench", "slack-sweep", "--out", out, "--rounds", "2", "--size", "10kB"}, "--size"},
		{[]string{"bench", "slack-sweep", "--out", out, "--size", "1GB", "--swing", "140%"}, "--swing \"140%\""},
		{[]string{"bench", "slack-sweep", "--out", out, "--swing", "40"}, "--swing \"40\""},
		{[]string{"bench", "slack-sweep", "--out", out, "--swing", "40%", "--swing-period", "1s"}, "--swing-period"},
		{[]string{"bench", "slack-sweep", "--out", out, "--swing", "", "--swing-period", "1m", "--fixed-rates", "5MB/s,fast"}, "--fixed-rates"},
		{[]string{"bench", "slack-sweep", "--out", out, "--fixed-rates", "5MB/s", "--setpoints", "40ms,-5ms"}, "--setpoints"},
		{[]string{"bench", "slack-sweep", "--out", out, "--setpoints", "2x,40ms"}, "--setpoints"},
		{[]string{"bench", "slack-sweep", "--out", out, "--setpoints", "0.5x"}, "--setpoints"},
		{[]string{"bench", "slack-sweep", "--out", out, "--setpoints", "40ms", "--max-rate", "0"}, "--max-rate"},
		{[]string{"bench", "slack-sweep", "--out", out, "--max-rate", "30MB/s", "--keys", "pareto"}, "--keys"},
		{[]string{"bench", "slack-sweep", "--out", out, "--keys", "uniform", "--tps", "0"}, "--tps"},
		{[]string{"bench", "slack-sweep", "--out", out, "--tps", "100", "--ki", "0"}, "--ki"},
		{[]string{"bench", "slack-sweep", "--out", out, "--ki", "0.1", "--memory", "64"}, "memory"},
		{[]string{"bench", "slack-sweep", "--out", out, "--memory", "2048", "--error-form", "quadratic"}, "--error-form"},
		{[]string{"bench", "slack-sweep", "--out", out, "--error-form", "linear", "--mean-horizon", "-1"}, "--mean-horizon"},
		{[]string{"bench", "slack-sweep", "--out", out, "--mean-horizon", "20", "--compare-mean-horizons", "0,x"}, "--compare-mean-horizons"},
		{[]string{"bench", "slack-sweep", "--out", out, "--compare-mean-horizons", "", "--compare-ki", "0.02,-1"}, "--compare-ki"},
		{[]string{"bench", "step40", "--out", out, "--start-backoff", "-1"}, "--start-backoff"},
		{[]string{"bench", "step40", "--out", out, "--start-backoff", "3", "--factor", "0"}, "--factor"},
		{[]string{"bench", "step40", "--out", out, "--factor", "1.4", "--step-after", "soon"}, "--step-after"},
		{[]string{"bench", "step40", "--out", out, "--step-after", "60s", "--setpoint", "fast"}, "--setpoint"},
		{[]string{"bench", "multitenant", "--out", out, "--tenants", "1"}, "--tenants"},
		{[]string{"bench", "multitenant", "--out", out, "--tenants", "5", "--tenant-setting", "wal_init_zero"}, "--tenant-setting"},
		{[]string{"bench", "slack-sweep", "--out", out, "--handover-reserve", "auto", "--compare-ki", "", "--compare-handover-reserves", "0,-5"}, "--compare-handover-reserves"},
		{[]string{"bench", "slack-sweep", "--out", out, "--compare-handover-reserves", "", "--compare-error-floors", "1,-1"}, "--compare-error-floors"},
		{[]string{"bench", "slack-sweep", "--out", out, "--compare-error-floors", "", "--compare-headroom", "0.25,x"}, "--compare-headroom"},
		{[]string{"bench", "slack-sweep", "--out", out, "--error-form", "linear", "--tenant-setting", "wal_init_zero="}, "--tenant-setting"},
		{[]string{"bench", "step40", "--out", out, "--setpoint", "40ms", "--tenant-setting", "x; DROP=1"}, "--tenant-setting"},
		{[]string{"bench", "slack-sweep", "--out", out, "--handover-reserve", "-1"}, "--handover-reserve"},
		{[]string{"bench", "slack-sweep", "--out", out, "--handover-reserve", "auto", "--error-floor", "-1"}, "--error-floor"},
		{[]string{"bench", "slack-sweep", "--out", out, "--error-floor", "0", "--headroom", "-0.1"}, "--headroom"},
		{[]string{"bench", "slack-sweep", "--out", out, "--headroom", "0", "--checkpoint", "30s"}, "--checkpoint"},
		{[]string{"bench", "step40", "--out", out, "--setpoint", "40ms", "--checkpoint", "slow"}, "--checkpoint"},
		{[]string{"bench", "slack-sweep", "--out", out, "--wal-relay", "middle"}, "--wal-relay \"middle\""},
		{[]string{"bench", "step40", "--out", out, "--handover-reserve", "lots"}, "--handover-reserve"},
		{[]string{"bench", "step40", "--out", out, "--handover-reserve", "auto", "--error-floor", "NaN"}, "--error-floor"},
		{[]string{"bench", "slack-sweep", "--out", out, "--headroom", "0", "--latency-source", "server"}, "--latency-source"},
		{[]string{"bench", "step40", "--out", out, "--error-floor", "0", "--latency-source", "clients"}, "--latency-source"},
	}
	for _, c := range cases {
		var stdout, errOut bytes.Buffer
		code := run(c.args, &stdout, &errOut)
		msg := errOut.String()
		if code != 2 || !strings.Contains(msg, c.want) || strings.Count(msg, "\n") != 1 {
			t.Errorf("sluice %s: exit %d, stderr %q; want 2 and one line mentioning %q", strings.Join(c.args, " "), code, msg, c.want)
		}
	}
	if _, err := os.Stat(out); !os.IsNotExist(err) {
		t.Errorf("a rejected run created %s", out)
	}
}

// TestSlackSweepStealFlags: slack-sweep's and step40's --steal-limit and --steal-retries out of range,
// and --steal-abort without a limit, are refused in one line before
// anything starts (each case from the flags' defaults).
func TestSlackSweepStealFlags(t *testing.T) {
	out := filepath.Join(t.TempDir(), "never")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--steal-limit", "100"}, "--steal-limit"},
		{[]string{"--steal-limit", "-1"}, "--steal-limit"},
		{[]string{"--steal-limit", "NaN"}, "--steal-limit"},
		{[]string{"--steal-limit", "25", "--steal-retries", "0"}, "--steal-retries"},
		{[]string{"--steal-retries", "11"}, "--steal-retries"},
		{[]string{"--steal-abort"}, "--steal-abort needs --steal-limit"},
	} {
		for _, bench := range []string{"slack-sweep", "step40"} {
			code, stdout, stderr := labRunCLI(t, append([]string{"bench", bench, "--out", out}, c.args...)...)
			if code != 2 || !strings.Contains(stderr, c.want) || !strings.Contains(stderr, bench) || strings.Count(stderr, "\n") != 1 || stdout != "" {
				t.Errorf("%s %v: exit %d, stderr %q; want 2 and one line mentioning %q", bench, c.args, code, stderr, c.want)
			}
		}
	}
	if _, err := os.Stat(out); !os.IsNotExist(err) {
		t.Errorf("a rejected run created %s", out)
	}
}

// The compare lists of floors, headrooms and reserves take 0 (the option
// off, as their help says), which parseList refuses.
func TestParseNonNegList(t *testing.T) {
	got, err := parseNonNegList(" 0, 0.25,1 ,", "x >= 0")
	if err != nil || !slices.Equal(got, []float64{0, 0.25, 1}) {
		t.Errorf("parseNonNegList(0,0.25,1) = %v, %v", got, err)
	}
	if got, err := parseNonNegList("", "x >= 0"); err != nil || got != nil {
		t.Errorf("parseNonNegList(\"\") = %v, %v; want nil, nil", got, err)
	}
	for _, bad := range []string{"-1", "NaN", "Inf", "x", "0,-0.5"} {
		if _, err := parseNonNegList(bad, "x >= 0"); err == nil || !strings.Contains(err.Error(), "want x >= 0") {
			t.Errorf("parseNonNegList(%q): %v, want an error saying what it wants", bad, err)
		}
	}
}
