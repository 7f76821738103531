package experiment

import (
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluicedb/sluice/loop"
	"github.com/sluicedb/sluice/workload"
)

// TestSourceCPUInReport: the loop's per-step CPU quota figure reaches the
// series CSV and a third panel of the trial's chart, and neither appears
// when the loop did not record it.
func TestSourceCPUInReport(t *testing.T) {
	secs := []workload.Second{{T: 0, Count: 10, MeanMs: 2}, {T: 1, Count: 10, MeanMs: 3}, {T: 2, Count: 10, MeanMs: 4}}
	share := 40.0
	with := Labeled{Name: "pid-8ms", SetpointMs: 8, Res: &TrialResult{Seconds: secs, MigStart: 0.2, MigEnd: 3,
		Loop: []loop.Point{{T: 0.3, Rate: 1e6, Phase: "snapshot"}, {T: 1.3, Rate: 2e6, Phase: "snapshot", CPUThrottledPct: &share}}}}
	without := Labeled{Name: "pid-9ms", SetpointMs: 9, Res: &TrialResult{Seconds: secs, MigStart: 0.2, MigEnd: 3,
		Loop: []loop.Point{{T: 0.3, Rate: 1e6, Phase: "snapshot"}}}}
	if n := len(trialChart(with, "t").Panels); n != 3 {
		t.Errorf("chart with the CPU figure has %d panels, want 3", n)
	}
	if n := len(trialChart(without, "t").Panels); n != 2 {
		t.Errorf("chart without it has %d panels, want 2", n)
	}
	dir := t.TempDir()
	if err := writeSeries(dir, []Labeled{with, without}); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, SeriesFile))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if !strings.HasSuffix(lines[0], ",source_cpu_throttled_pct") {
		t.Fatalf("header %q lacks source_cpu_throttled_pct", lines[0])
	}
	var got []string
	for _, l := range lines[1:] {
		if strings.HasSuffix(l, ",40.000") {
			got = append(got, l)
		}
	}
	// pid-8ms's seconds 1 and 2 (at 1.5 and 2.5 s) fall after its point at
	// 1.3 s; pid-9ms has no figure.
	if len(got) != 2 || !strings.HasPrefix(got[0], "pid-8ms,1,") || !strings.HasPrefix(got[1], "pid-8ms,2,") {
		t.Fatalf("rows with the CPU figure: %q", got)
	}
}

// TestStepChartTitles: the fixed trial's title heads its own first panel,
// after the PID trial's two or three panels.
func TestStepChartTitles(t *testing.T) {
	share := 10.0
	secs := []workload.Second{{T: 0, Count: 5, MeanMs: 2}}
	fixed := Labeled{Name: "fixed", Res: &TrialResult{Seconds: secs, MigStart: 0, MigEnd: 1}}
	for _, pts := range [][]loop.Point{{{T: 0.5, Rate: 1e6}}, {{T: 0.5, Rate: 1e6, CPUThrottledPct: &share}}} {
		pid := Labeled{Name: "pid", SetpointMs: 2, Res: &TrialResult{Seconds: secs, MigStart: 0, MigEnd: 1, Loop: pts}}
		c := stepChart(pid, fixed, "PID title", "fixed title", 5e6)
		n := len(c.Panels) - 2 // the fixed trial's two panels come last
		for i, p := range c.Panels {
			want := ""
			if i == n {
				want = "fixed title"
			}
			if p.Title != want {
				t.Errorf("%d PID panels: panel %d's title %q, want %q", n, i, p.Title, want)
			}
		}
		if got := c.Panels[n+1].Series[0].Y[0]; got != 5 {
			t.Errorf("fixed rate panel at %v MB/s, want 5", got)
		}
	}
}

func TestSignedPct(t *testing.T) {
	if got := signedPct(math.NaN(), 2.2); got != "–" {
		t.Errorf("signedPct(NaN) = %q, want –", got)
	}
	if got := signedPct(3.3, 2.2); got != "+50 %" {
		t.Errorf("signedPct(3.3, 2.2) = %q, want +50 %%", got)
	}
}
