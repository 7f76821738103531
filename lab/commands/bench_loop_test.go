package commands

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"

	"github.com/sluicedb/sluice/lab/experiment"
)

// TestBenchLoopUsageErrors: bad flags of the closed-loop benchmarks exit 2
// with one line naming the flag (and a bad --variant its key), before any
// server is started or output written.
func TestBenchLoopUsageErrors(t *testing.T) {
	out := filepath.Join(t.TempDir(), "never")
	profile := filepath.Join(t.TempDir(), "tuned.yaml")
	if err := os.WriteFile(profile, []byte("name: sluice\nkx: 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"slack-sweep", "--variant", "kx=0.1"}, `--variant "kx=0.1": unknown key kx`},
		{[]string{"slack-sweep", "--variant", "ki=0.04", "--variant", "catch_up.boost=0.5"}, `--variant "catch_up.boost=0.5"`},
		{[]string{"slack-sweep", "--variant", "mean_horizon=soon"}, "mean_horizon=soon"},
		{[]string{"slack-sweep", "--variant", "latency=server"}, "latency=server"},
		{[]string{"slack-sweep", "--variant", "wal_relay=middle"}, "wal_relay=middle"},
		{[]string{"slack-sweep", "--variant", "checkpoint=slow"}, "checkpoint=slow"},
		{[]string{"slack-sweep", "--variant", "ki"}, `--variant "ki"`},
		{[]string{"step40", "--variant", "start_backoff=9"}, "start_backoff"},
		{[]string{"multitenant", "--variant", "ki=-1"}, "ki"},
		{[]string{"slack-sweep", "--profile", "tuned"}, "--profile"},
		{[]string{"step40", "--profile", profile}, "kx"},
		{[]string{"slack-sweep", "--size", "10kB"}, "--size"},
		{[]string{"slack-sweep", "--rounds", "0"}, "--rounds"},
		{[]string{"slack-sweep", "--rounds", "51"}, "--rounds"},
		{[]string{"slack-sweep", "--swing", "140%"}, `--swing "140%"`},
		{[]string{"slack-sweep", "--swing", "40"}, `--swing "40"`},
		{[]string{"slack-sweep", "--swing", "40%/1s"}, `--swing "40%/1s"`},
		{[]string{"slack-sweep", "--swing", "40%/often"}, "period"},
		{[]string{"slack-sweep", "--fixed-rates", "5MB/s,fast"}, "--fixed-rates"},
		{[]string{"slack-sweep", "--setpoints", "40ms,-5ms"}, "--setpoints"},
		{[]string{"slack-sweep", "--setpoints", "2x,40ms"}, "--setpoints"},
		{[]string{"slack-sweep", "--setpoints", "0.5x"}, "--setpoints"},
		{[]string{"slack-sweep", "--max-rate", "0"}, "--max-rate"},
		{[]string{"slack-sweep", "--keys", "pareto"}, "--keys"},
		{[]string{"slack-sweep", "--tps", "0"}, "--tps"},
		{[]string{"slack-sweep", "--memory", "64"}, "memory"},
		{[]string{"slack-sweep", "--calm", "0.5"}, "--calm"},
		{[]string{"slack-sweep", "--tenant-setting", "wal_init_zero="}, "--tenant-setting"},
		{[]string{"step40", "--factor", "0"}, "--factor"},
		{[]string{"step40", "--step-after", "soon"}, "--step-after"},
		{[]string{"step40", "--setpoint", "fast"}, "--setpoint"},
		{[]string{"step40", "--tenant-setting", "x; DROP=1"}, "--tenant-setting"},
		{[]string{"multitenant", "--tenants", "1"}, "--tenants"},
		{[]string{"multitenant", "--tenant-setting", "wal_init_zero"}, "--tenant-setting"},
	}
	for _, c := range cases {
		args := append([]string{"bench", c.args[0], "--out", out}, c.args[1:]...)
		code, stdout, stderr := labRunCLI(t, args...)
		if code != 2 || !strings.Contains(stderr, c.want) || !strings.Contains(stderr, c.args[0]) || strings.Count(stderr, "\n") != 1 || stdout != "" {
			t.Errorf("sluice %s: exit %d, stderr %q; want 2 and one line mentioning %q", strings.Join(args, " "), code, stderr, c.want)
		}
	}
	if _, err := os.Stat(out); !os.IsNotExist(err) {
		t.Errorf("a rejected run created %s", out)
	}
}

// TestBenchLoopFlags: the closed-loop benchmarks take decisions, not a flag
// per knob: the loop is a profile and variants of it.
func TestBenchLoopFlags(t *testing.T) {
	for _, c := range []struct {
		bench string
		most  int
	}{{"slack-sweep", 25}, {"step40", 25}, {"multitenant", 25}} {
		cmd, _, err := benchCmd.Find([]string{c.bench})
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		cmd.Flags().VisitAll(func(f *pflag.Flag) {
			if f.Name != "help" {
				names = append(names, f.Name)
			}
		})
		if len(names) > c.most {
			t.Errorf("%s has %d flags, want at most %d: %v", c.bench, len(names), c.most, names)
		}
		for _, want := range []string{"profile", "variant", "max-rate"} {
			if !slices.Contains(names, want) {
				t.Errorf("%s has no --%s", c.bench, want)
			}
		}
		for _, gone := range []string{"kp", "ki", "kd", "error-form", "mean-horizon", "start-growth", "latency-source", "handover-reserve", "compare-ki"} {
			if slices.Contains(names, gone) {
				t.Errorf("%s still has --%s", c.bench, gone)
			}
		}
	}
}

// TestParseSwing: a percentage with an optional period after a slash.
func TestParseSwing(t *testing.T) {
	for s, want := range map[string]experiment.Schedule{
		"":        {},
		"40%":     experiment.Swing(time.Minute, 0.4),
		"25%/90s": experiment.Swing(90*time.Second, 0.25),
	} {
		got, err := parseSwing(s)
		if err != nil || got.Period != want.Period || !slices.Equal(got.Levels, want.Levels) {
			t.Errorf("parseSwing(%q) = %+v, %v; want %+v", s, got, err, want)
		}
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
		{[]string{"--steal-limit", "0", "--steal-abort"}, "--steal-abort needs --steal-limit"},
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
