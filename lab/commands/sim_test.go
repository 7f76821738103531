package commands

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/sluicedb/sluice/internal/cli"
)

// labRunCLI runs the lab's command tree after resetting its flags (cobra
// keeps flag values between invocations in one process).
func labRunCLI(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	if err := cli.ResetFlags(Lab); err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	code = run(args, &out, &errb)
	return code, out.String(), errb.String()
}

// jsonKeys decodes one JSON object and returns its keys, sorted.
func simJSONKeys(t *testing.T, s string) (map[string]any, []string) {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(s), &m); err != nil {
		t.Fatalf("not one JSON object: %v\n%s", err, s)
	}
	var k []string
	for key := range m {
		k = append(k, key)
	}
	slices.Sort(k)
	return m, k
}

func TestSimJSONHasExactlyTheKeys(t *testing.T) {
	code, out, errs := labRunCLI(t, "sim", "--scenario", "steady", "--controller", "pid", "--setpoint", "30ms", "--seed", "2", "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	m, keys := simJSONKeys(t, out)
	want := []string{"completed", "controller", "idle_latency_ms", "mean_latency_ms", "mean_rate", "migration_seconds",
		"p95_latency_ms", "p99_latency_ms", "scenario", "seed", "setpoint_ms", "violation_fraction"}
	if !slices.Equal(keys, want) {
		t.Fatalf("keys %v, want %v", keys, want)
	}
	if m["scenario"] != "steady" || m["controller"] != "pid" || m["seed"] != 2.0 || m["setpoint_ms"] != 30.0 || m["completed"] != true {
		t.Fatalf("figures %v", m)
	}
	if idle, mean := m["idle_latency_ms"].(float64), m["mean_latency_ms"].(float64); !(idle > 0 && mean > idle) {
		t.Fatalf("idle %v mean %v", idle, mean)
	}
	// Same seed, same bytes.
	_, again, _ := labRunCLI(t, "sim", "--scenario", "steady", "--controller", "pid", "--setpoint", "30ms", "--seed", "2", "--json")
	if again != out {
		t.Fatalf("not deterministic:\n%s\n%s", out, again)
	}
}

func TestSimHumanOutputAndFiles(t *testing.T) {
	dir := t.TempDir()
	outDir, png := filepath.Join(dir, "run"), filepath.Join(dir, "plot.png")
	code, out, errs := labRunCLI(t, "sim", "--scenario", "multitenant", "--controller", "integral", "--out", outDir, "--png", png)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	for _, want := range []string{"controller integral", "migration completed", "s0", "average victim latency", "migration rate (MB/s)", "setpoint="} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	csv, err := os.ReadFile(filepath.Join(outDir, "series.csv"))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(csv)), "\n")
	if !strings.HasPrefix(lines[0], "t_s,phase,load,latency_ms,idle_latency_ms,") || !strings.Contains(lines[0], "s4_latency_ms") || len(lines) < 100 {
		t.Fatalf("csv: %d lines, header %q", len(lines), lines[0])
	}
	sum, err := os.ReadFile(filepath.Join(outDir, "summary.json"))
	if err != nil {
		t.Fatal(err)
	}
	if m, _ := simJSONKeys(t, string(sum)); len(m["stores"].([]any)) != 5 {
		t.Fatalf("summary.json stores: %v", m["stores"])
	}
	b, err := os.ReadFile(png)
	if err != nil || !bytes.HasPrefix(b, []byte("\x89PNG\r\n\x1a\n")) {
		t.Fatalf("png: %v, %d bytes", err, len(b))
	}
}

func TestSimBadInputWritesNothing(t *testing.T) {
	dir := t.TempDir()
	outDir := filepath.Join(dir, "out")
	png := filepath.Join(dir, "p.png")
	badProfile := filepath.Join(dir, "bad.yaml")
	halfStep := filepath.Join(dir, "half.yaml")
	for path, body := range map[string]string{badProfile: "kp: -1\n", halfStep: "step_ms: 1500\n"} {
		if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for name, args := range map[string][]string{
		"unknown profile":        {"sim", "--profile", "fast"},
		"profile out of range":   {"sim", "--profile", badProfile},
		"profile half a second":  {"sim", "--profile", halfStep},
		"profile with fixed":     {"sim", "--controller", "fixed", "--profile", "slacker"},
		"sweep unknown profile":  {"sim", "sweep", "--profile", "fast"},
		"unknown scenario":       {"sim", "--scenario", "nope"},
		"unknown controller":     {"sim", "--controller", "bangbang"},
		"zero setpoint":          {"sim", "--setpoint", "0s"},
		"negative setpoint":      {"sim", "--setpoint", "-30ms"},
		"setpoint not duration":  {"sim", "--setpoint", "fast"},
		"setpoint below idle":    {"sim", "--setpoint", "1ms"},
		"negative rate":          {"sim", "--controller", "fixed", "--rate", "-5MB/s"},
		"rate above max":         {"sim", "--controller", "fixed", "--rate", "1GB/s"},
		"rate with pid":          {"sim", "--controller", "pid", "--rate", "5MB/s"},
		"zero contract":          {"sim", "--contract", "0ms"},
		"bad pole":               {"sim", "--controller", "integral", "--pole", "1.5"},
		"negative seed":          {"sim", "--seed", "-1"},
		"png dir missing":        {"sim", "--png", filepath.Join(dir, "missing", "p.png")},
		"sweep unknown scenario": {"sim", "sweep", "--scenario", "nope"},
		"sweep negative sp":      {"sim", "sweep", "--setpoint", "-1ms"},
		"sweep sp below idle":    {"sim", "sweep", "--setpoint", "2ms"},
		"tune unknown scenario":  {"tune", "--scenario", "nope"},
		"tune zero setpoint":     {"tune", "--setpoint", "0"},
		"tune unstable pole":     {"tune", "--pole", "-1.2"},
		"tune unstable k":        {"tune", "--k", "1e12"},
		"stray argument":         {"sim", "extra"},
		"fractional window":      {"sim", "--window", "1500ms"},
		"negative noise":         {"sim", "--noise", "-0.1"},
	} {
		if args[0] == "sim" && args[1] != "sweep" {
			args = append(args, "--out", outDir)
			if !slices.Contains(args, "--png") {
				args = append(args, "--png", png)
			}
		}
		code, out, errs := labRunCLI(t, args...)
		if code != 2 {
			t.Errorf("%s: exit %d, want 2 (stderr %q)", name, code, errs)
		}
		if out != "" || strings.Count(errs, "\n") != 1 || !strings.HasPrefix(errs, "sluice: ") {
			t.Errorf("%s: want one stderr line and no stdout, got stdout %q stderr %q", name, out, errs)
		}
		if _, err := os.Stat(outDir); err == nil {
			t.Fatalf("%s: %s was created", name, outDir)
		}
		if _, err := os.Stat(png); err == nil {
			t.Fatalf("%s: %s was created", name, png)
		}
	}
}

// --profile picks the PID's profile, a built-in or a file, as migrate's does.
func TestSimProfile(t *testing.T) {
	file := filepath.Join(t.TempDir(), "p.yaml")
	if err := os.WriteFile(file, []byte("name: sluice\nki: 0.1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	runs := map[string][]string{
		"pid (profile sluice)":         {"sim", "--scenario", "steady"},
		"pid (profile slacker)":        {"sim", "--scenario", "steady", "--profile", "slacker"},
		"pid (profile sluice(ki=0.1))": {"sim", "--scenario", "steady", "--profile", file},
	}
	seen := map[string]string{}
	for want, args := range runs {
		code, out, errs := labRunCLI(t, args...)
		if code != 0 || !strings.Contains(out, "controller "+want) {
			t.Fatalf("%v: exit %d %s\n%s", args, code, errs, out)
		}
		line := out[strings.Index(out, "migration "):]
		seen[want] = line[:strings.Index(line, "\n")]
	}
	if seen["pid (profile sluice)"] == seen["pid (profile slacker)"] || seen["pid (profile sluice)"] == seen["pid (profile sluice(ki=0.1))"] {
		t.Fatalf("profiles made no difference: %v", seen)
	}
	code, out, errs := labRunCLI(t, "sim", "sweep", "--scenario", "steady", "--profile", "slacker")
	if code != 0 || !strings.Contains(out, "pid (profile slacker):") {
		t.Fatalf("sweep: exit %d %s\n%s", code, errs, out)
	}
}

func TestSweepJSONHasExactlyTheKeys(t *testing.T) {
	code, out, errs := labRunCLI(t, "sim", "sweep", "--scenario", "steady", "--setpoint", "30ms", "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	m, keys := simJSONKeys(t, out)
	want := []string{"best_fixed_mean_latency_ms", "best_fixed_rate", "best_fixed_seconds", "pid_mean_latency_ms", "pid_seconds"}
	if !slices.Equal(keys, want) {
		t.Fatalf("keys %v, want %v", keys, want)
	}
	if m["best_fixed_rate"].(float64) <= 0 || m["best_fixed_mean_latency_ms"].(float64) > 30 || m["pid_seconds"].(float64) <= 0 {
		t.Fatalf("figures %v", m)
	}
}

func TestTuneProposesAndRefusesUnstable(t *testing.T) {
	code, out, errs := labRunCLI(t, "tune", "--scenario", "multitenant", "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	m, _ := simJSONKeys(t, out)
	local := m["local"].(map[string]any)
	g, k, kmax := local["g_s_per_Bps"].(float64), m["k"].(float64), m["k_max"].(float64)
	if !(g > 0 && k > 0 && k < kmax && m["stable"] == true && local["r2"].(float64) > 0.9) {
		t.Fatalf("tune: %v", m)
	}
	if p := m["pole"].(float64); p < 0.69 || p > 0.71 {
		t.Fatalf("pole %v, want the default 0.7", p)
	}
	// An unstable K is refused, and accepted with --force.
	if code, _, errs := labRunCLI(t, "tune", "--scenario", "multitenant", "--k", "1e12"); code != 2 || !strings.Contains(errs, "unstable") {
		t.Fatalf("unstable K: exit %d %q", code, errs)
	}
	code, out, errs = labRunCLI(t, "tune", "--scenario", "multitenant", "--k", "1e12", "--force", "--json")
	if code != 0 {
		t.Fatalf("forced: exit %d %s", code, errs)
	}
	if m, _ := simJSONKeys(t, out); m["stable"] != false || m["pole"].(float64) > -1 {
		t.Fatalf("forced unstable K: %v", m)
	}
	// Human output names the fits and the stability range.
	code, out, _ = labRunCLI(t, "tune", "--scenario", "steady", "--setpoint", "30ms", "--pole", "0.5")
	if code != 0 || !strings.Contains(out, "local fit") || !strings.Contains(out, "stable iff 0 < K <") || !strings.Contains(out, "pid (setpoint 30.0 ms)") ||
		!strings.Contains(out, "a suggestion") {
		t.Fatalf("exit %d:\n%s", code, out)
	}
}

func TestSimInterferenceRuns(t *testing.T) {
	code, out, errs := labRunCLI(t, "sim", "--scenario", "bursty", "--controller", "interference", "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	if m, _ := simJSONKeys(t, out); m["controller"] != "interference" {
		t.Fatalf("%v", m)
	}
}

func TestDemoWritesPlots(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "demo")
	code, out, errs := labRunCLI(t, "sim", "demo", "--out", dir, "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	m, _ := simJSONKeys(t, out)
	for _, f := range []string{"pid.png", "fixed.png", "pid.csv", "fixed.csv", "summary.json"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Errorf("%s: %v", f, err)
		}
	}
	if m["profile"] != "sluice" {
		t.Errorf("demo runs profile %v, want the default", m["profile"])
	}
	if m["pid_after_step_ms"].(float64) >= m["fixed_after_step_ms"].(float64) {
		t.Fatalf("demo: PID after the step %v not below fixed %v", m["pid_after_step_ms"], m["fixed_after_step_ms"])
	}
}

// A flag the chosen controller does not use, and a contract some store
// misses with no migration at all, are refused with exit 2 and one line
// naming the reason, not echoed and ignored.
func TestSimRefusesUnusedFlagsAndImpossibleContracts(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"setpoint with integral", []string{"--controller", "integral", "--setpoint", "10ms"}, "--setpoint applies to --controller pid, interference only, not integral"},
		{"setpoint with fixed", []string{"--controller", "fixed", "--setpoint", "10ms"}, "--setpoint applies to"},
		{"k with pid", []string{"--controller", "pid", "--k", "3e8"}, "--k applies to --controller integral only, not pid"},
		{"pole with pid", []string{"--controller", "pid", "--pole", "0.5"}, "--pole applies to --controller integral only, not pid"},
		{"pole with interference", []string{"--controller", "interference", "--pole", "0.5"}, "--pole applies to"},
		{"rate with integral", []string{"--controller", "integral", "--rate", "3MB/s"}, "--rate applies to --controller fixed only, not integral"},
		{"rate with interference", []string{"--controller", "interference", "--rate", "3MB/s"}, "--rate applies to"},
		{"profile with integral", []string{"--controller", "integral", "--profile", "slacker"}, "--profile applies to --controller pid only"},
		{"noise with fixed", []string{"--controller", "fixed", "--noise", "0.1"}, "--noise applies to"},
		{"window with fixed", []string{"--controller", "fixed", "--window", "2s"}, "--window applies to"},
		{"pole with k", []string{"--controller", "integral", "--k", "3e8", "--pole", "0.5"}, "--pole chooses the tuned K"},
		{"contract 5ms, multitenant", []string{"--scenario", "multitenant", "--controller", "integral", "--contract", "5ms"}, "contract 5ms is at or below store s2's idle latency"},
		{"contract 7ms, multitenant", []string{"--scenario", "multitenant", "--controller", "integral", "--contract", "7ms"}, "contract 7ms is at or below store s4's idle latency"},
		{"contract at idle, steady", []string{"--scenario", "steady", "--controller", "integral", "--contract", "3.9ms"}, "at or below store tenant's idle latency"},
		{"contract below idle, pid", []string{"--scenario", "steady", "--controller", "pid", "--contract", "2ms"}, "at or below store tenant's idle latency"},
	} {
		code, out, errs := labRunCLI(t, append([]string{"sim"}, tc.args...)...)
		if code != 2 || out != "" || strings.Count(errs, "\n") != 1 || !strings.Contains(errs, tc.want) {
			t.Errorf("%s: exit %d, stdout %q, stderr %q; want exit 2, one line containing %q", tc.name, code, out, errs, tc.want)
		}
	}
}

// A contract of 1.5 × the idle latency works with the integral (the
// profile finds the gain at low rates), and the PID holds 2 × idle on the
// same plant.
func TestSimTightContract(t *testing.T) {
	for _, tc := range []struct {
		args  []string
		limit float64 // ms: the integral's contract, the PID's setpoint
	}{
		{[]string{"--scenario", "steady", "--controller", "integral", "--contract", "6ms"}, 6},
		{[]string{"--scenario", "diurnal", "--controller", "integral", "--contract", "6.5ms"}, 6.5},
		{[]string{"--scenario", "diurnal", "--controller", "integral", "--contract", "6.5ms", "--seed", "2"}, 6.5},
		{[]string{"--scenario", "multitenant", "--controller", "integral", "--contract", "12ms"}, 12},
		{[]string{"--scenario", "steady", "--controller", "pid", "--setpoint", "8ms"}, 8},
	} {
		args := tc.args
		code, out, errs := labRunCLI(t, append(append([]string{"sim"}, args...), "--json")...)
		if code != 0 {
			t.Fatalf("%v: exit %d: %s", args, code, errs)
		}
		m, _ := simJSONKeys(t, out)
		idle, mean := m["idle_latency_ms"].(float64), m["mean_latency_ms"].(float64)
		if m["completed"] != true || !(mean > idle) {
			t.Errorf("%v: %v", args, m)
		}
		switch args[3] {
		case "integral": // steers every store under its contract, rarely over it
			if vr := m["violation_fraction"].(float64); vr > 0.2 || mean > tc.limit {
				t.Errorf("%v: mean %v ms, violation fraction %v", args, mean, vr)
			}
		case "pid": // steers its mean to the setpoint
			if mean > tc.limit*1.05 {
				t.Errorf("%v: mean %v ms over %v ms", args, mean, tc.limit)
			}
		}
	}
}

func TestSimFleetJSONHasExactlyTheKeys(t *testing.T) {
	args := []string{"sim", "fleet", "--servers", "50", "--tenants", "500", "--seed", "3", "--json"}
	code, out, errs := labRunCLI(t, args...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	m, keys := simJSONKeys(t, out)
	want := []string{"bytes", "moves", "oracle_seconds", "plan_seconds", "servers", "tenants", "worst_violation_fraction"}
	if !slices.Equal(keys, want) {
		t.Fatalf("keys %v, want %v", keys, want)
	}
	plan, oracle, vr := m["plan_seconds"].(float64), m["oracle_seconds"].(float64), m["worst_violation_fraction"].(float64)
	if m["servers"] != 50.0 || m["tenants"] != 500.0 || m["moves"].(float64) < 1 || m["bytes"].(float64) <= 0 ||
		!(oracle > 0 && oracle <= plan) || vr < 0 || vr > 1 {
		t.Fatalf("figures %v", m)
	}
	if _, again, _ := labRunCLI(t, args...); again != out {
		t.Fatalf("not deterministic:\n%s\n%s", out, again)
	}
	dir := filepath.Join(t.TempDir(), "fleet")
	code, out, errs = labRunCLI(t, "sim", "fleet", "--servers", "50", "--tenants", "500", "--variant", "p=0.85,pole=0.6", "--out", dir)
	if code != 0 || !strings.Contains(out, "integral P 0.85, pole 0.60") || !strings.Contains(out, "× the oracle") {
		t.Fatalf("exit %d %s\n%s", code, errs, out)
	}
	for name, prefix := range map[string]string{"series.csv": "t_s,running,rate_MBps,", "worst.csv": "t_s,ratio,", "summary.json": "{",
		"report.md": "# sim fleet", "fleet.png": "\x89PNG"} {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil || !bytes.HasPrefix(b, []byte(prefix)) {
			t.Errorf("%s: %v, starts %q", name, err, b[:min(len(b), 20)])
		}
	}
}

func TestSimFleetBadInput(t *testing.T) {
	for name, args := range map[string][]string{
		"one server":    {"--servers", "1"},
		"no tenants":    {"--tenants", "0"},
		"target 0":      {"--target", "0"},
		"target 1.2":    {"--target", "1.2"},
		"variant key":   {"--variant", "k=3"},
		"variant value": {"--variant", "p=high"},
		"variant p":     {"--variant", "p=1.5"},
		"variant pole":  {"--variant", "pole=1"},
		"stray arg":     {"extra"},
		"out dir gone":  {"--out", "/nonexistent/dir/fleet"},
	} {
		code, out, errs := labRunCLI(t, append([]string{"sim", "fleet"}, args...)...)
		if code != 2 || out != "" || strings.Count(errs, "\n") != 1 {
			t.Errorf("%s: exit %d, stdout %q, stderr %q; want exit 2 and one line", name, code, out, errs)
		}
	}
}
