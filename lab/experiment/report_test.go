package experiment

import (
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicedb/sluice/lab/workload"
	"github.com/sluicedb/sluice/loop"
)

// TestSourceCPUInReport: the loop's per-step CPU quota figure reaches the
// series CSV and a third panel of the trial's chart, and neither appears
// when the loop did not record it; each row carries its step's reason.
func TestSourceCPUInReport(t *testing.T) {
	secs := []workload.Second{{T: 0, Count: 10, MeanMs: 2}, {T: 1, Count: 10, MeanMs: 3}, {T: 2, Count: 10, MeanMs: 4}}
	share := 40.0
	with := Labeled{Name: "pid-8ms", SetpointMs: 8, Res: &TrialResult{Seconds: secs, MigStart: 0.2, MigEnd: 3,
		Loop: []loop.Point{{T: 0.3, Rate: 1e6, Phase: "snapshot", Reason: "pid slow start"}, {T: 1.3, Rate: 2e6, Phase: "snapshot", CPUThrottledPct: &share, Reason: "pid pv=3ms"}}}}
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
	if !strings.HasSuffix(lines[0], ",source_cpu_throttled_pct,reason") {
		t.Fatalf("header %q lacks source_cpu_throttled_pct,reason", lines[0])
	}
	var got []string
	for _, l := range lines[1:] {
		if strings.HasSuffix(l, ",40.000,pid pv=3ms") {
			got = append(got, l)
		}
	}
	// pid-8ms's seconds 1 and 2 (at 1.5 and 2.5 s) fall after its point at
	// 1.3 s; pid-9ms has no figure.
	if len(got) != 2 || !strings.HasPrefix(got[0], "pid-8ms,1,") || !strings.HasPrefix(got[1], "pid-8ms,2,") {
		t.Fatalf("rows with the CPU figure: %q", got)
	}
}

// msDur is x milliseconds.
func msDur(x float64) time.Duration { return time.Duration(x * float64(time.Millisecond)) }

// txWindow stands in for a workload's Transactions: those of all that
// ended in [from, to).
func txWindow(all []workload.Tx) func(from, to time.Duration) []workload.Tx {
	return func(from, to time.Duration) []workload.Tx {
		var out []workload.Tx
		for _, tx := range all {
			if tx.End >= from && tx.End < to {
				out = append(out, tx)
			}
		}
		return out
	}
}

// TestHandoverTrace: the transactions around a trial's handover reach
// handover.csv with times from the hold, and the summary line names the
// slowest; a trial without a known hold writes no rows.
func TestHandoverTrace(t *testing.T) {
	all := []workload.Tx{
		{Arrival: msDur(8000), Begin: msDur(8000), End: msDur(8002)},               // before the window
		{Arrival: msDur(9500), Begin: msDur(9500), End: msDur(9502)},               // 0.5 s before the hold
		{Arrival: msDur(10010), Begin: msDur(10011), End: msDur(10230), Worker: 3}, // held, then slow
		{Arrival: msDur(10300), Begin: msDur(10300), End: msDur(10301), Failed: true},
		{Arrival: msDur(13500), Begin: msDur(13500), End: msDur(13501)}, // after the window
	}
	src := txWindow(all)
	with := Labeled{Name: "pid-3ms", Res: &TrialResult{HoldAt: 10, FreezeMs: 50, transactions: src}}
	unknown := Labeled{Name: "fixed-40MBps", Res: &TrialResult{HoldAt: 10, transactions: src}}
	txs := with.Res.HandoverTxs()
	if len(txs) != 3 || txs[1].Arrival != msDur(10) || txs[1].End != msDur(230) {
		t.Fatalf("HandoverTxs = %+v, want the three that ended in [9 s, 13 s), relative to the hold at 10 s", txs)
	}
	if got, want := describeTxs(txs, "the hold"), "1 of 3 transactions around it took over 50 ms; the slowest 220 ms (arrived +10 ms from the hold, began +11, ended +230)"; got != want {
		t.Errorf("describeTxs = %q, want %q", got, want)
	}
	dir := t.TempDir()
	if err := writeHandovers(dir, []Labeled{with, unknown}); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, HandoverFile))
	if err != nil {
		t.Fatal(err)
	}
	want := `trial,freeze_ms,arrival_ms,begin_ms,end_ms,latency_ms,queue_ms,execution_ms,worker,failed
pid-3ms,50.0,-500.000,-500.000,-498.000,2.000,0.000,2.000,0,false
pid-3ms,50.0,10.000,11.000,230.000,220.000,1.000,219.000,3,false
pid-3ms,50.0,300.000,300.000,301.000,1.000,0.000,1.000,0,true
`
	if string(b) != want {
		t.Errorf("%s:\n%s\nwant\n%s", HandoverFile, b, want)
	}
}

// TestStartTrace: the transactions around a migration's start reach
// start.csv with times from the start, for every trial (the start is
// always known), without a freeze column.
func TestStartTrace(t *testing.T) {
	all := []workload.Tx{
		{Arrival: msDur(3900), Begin: msDur(3900), End: msDur(3902)},               // before the window
		{Arrival: msDur(4500), Begin: msDur(4500), End: msDur(4501)},               // 0.5 s before the start
		{Arrival: msDur(5020), Begin: msDur(5020), End: msDur(5120), Worker: 7},    // slowed by the start
		{Arrival: msDur(7999), Begin: msDur(7999), End: msDur(8000), Failed: true}, // at the window's end: out
	}
	src := txWindow(all)
	tr := Labeled{Name: "fixed-40MBps", Res: &TrialResult{MigStart: 5, transactions: src}}
	txs := tr.Res.StartTxs()
	if len(txs) != 2 || txs[1].Arrival != msDur(20) || txs[1].End != msDur(120) {
		t.Fatalf("StartTxs = %+v, want the two that ended in [4 s, 8 s), relative to the start at 5 s", txs)
	}
	if got, want := describeTxs(txs, "the migration's start"), "1 of 2 transactions around it took over 50 ms; the slowest 100 ms (arrived +20 ms from the migration's start, began +20, ended +120)"; got != want {
		t.Errorf("describeTxs = %q, want %q", got, want)
	}
	dir := t.TempDir()
	if err := writeStarts(dir, []Labeled{tr}); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, StartFile))
	if err != nil {
		t.Fatal(err)
	}
	want := `trial,arrival_ms,begin_ms,end_ms,latency_ms,queue_ms,execution_ms,worker,failed
fixed-40MBps,-500.000,-500.000,-499.000,1.000,0.000,1.000,0,false
fixed-40MBps,20.000,20.000,120.000,100.000,0.000,100.000,7,false
`
	if string(b) != want {
		t.Errorf("%s:\n%s\nwant\n%s", StartFile, b, want)
	}
}

// TestStartExcess: the start's cost is the latency above the level of the
// PreWindow before it, of the transactions that ended in the HandoverAfter
// after it, over the arrival rate before it; failed ones and those outside
// both windows do not count.
func TestStartExcess(t *testing.T) {
	var all []workload.Tx
	tx := func(arrivalMs, latencyMs float64, failed bool) {
		all = append(all, workload.Tx{Arrival: msDur(arrivalMs), Begin: msDur(arrivalMs), End: msDur(arrivalMs + latencyMs), Failed: failed})
	}
	tx(500, 50, false) // before the level's window (start 12 s − 10 s)
	for i := range 20 {
		tx(2000+float64(i)*500, 2, false) // 2 per second at 2 ms: level 2 ms, rate 2/s
	}
	tx(11000, 400, true)  // failed
	tx(12010, 42, false)  // +40
	tx(12500, 12, false)  // +10
	tx(14900, 2, false)   // +0
	tx(14995, 100, false) // ends after the window
	r := &TrialResult{MigStart: 12, transactions: txWindow(all)}
	if got, want := r.StartExcessMsS(), 25.0; math.Abs(got-want) > 1e-9 {
		t.Errorf("StartExcessMsS = %v, want %v (50 ms above the level over 2 arrivals/s)", got, want)
	}
	if got := (&TrialResult{MigStart: 12, transactions: txWindow(all[:1])}).StartExcessMsS(); !math.IsNaN(got) {
		t.Errorf("StartExcessMsS without transactions in the windows = %v, want NaN", got)
	}
	if got := (&TrialResult{MigStart: 12}).StartExcessMsS(); !math.IsNaN(got) {
		t.Errorf("StartExcessMsS without a record = %v, want NaN", got)
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
