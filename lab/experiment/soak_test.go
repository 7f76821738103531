package experiment

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/sluicedb/sluice/lab/testbed"
)

func TestSoakOptionsCheck(t *testing.T) {
	for name, o := range map[string]SoakOptions{
		"short":      {Duration: 30 * time.Second},
		"tiny":       {Size: 1000},
		"rate":       {TxRate: -1},
		"mpl":        {MPL: 81},
		"setpoint":   {SetpointMs: -1},
		"fixed rate": {FixedRate: -5},
		"warmup":     {Warmup: -1},
		"sample":     {SampleEvery: time.Millisecond},
		"tolerance":  {Tolerance: 1.5},
	} {
		if err := o.Check(); err == nil {
			t.Errorf("%s: %+v: no error", name, o)
		}
	}
	if err := (SoakOptions{}).Check(); err != nil {
		t.Errorf("defaults: %v", err)
	}
}

func TestSoakDone(t *testing.T) {
	h := time.Hour
	for _, tc := range []struct {
		name    string
		n       int
		elapsed time.Duration
		want    bool
	}{
		{"before the duration", 40, 50 * time.Minute, false},
		{"back where the warm-up left it", 40, h, true},
		{"on the other server: one more", 41, h, false},
		{"warm-up not over", 2, h, false},
		{"warm-up over and back", 4, h, true},
	} {
		if got := soakDone(tc.n, 2, tc.elapsed, h); got != tc.want {
			t.Errorf("%s: soakDone(%d, 2, %v) = %v, want %v", tc.name, tc.n, tc.elapsed, got, tc.want)
		}
	}
}

func TestFreezes(t *testing.T) {
	if f := freezes(nil); f != (Freezes{}) {
		t.Fatalf("none: %+v", f)
	}
	xs := make([]float64, 0, 200)
	for i := 200; i >= 1; i-- {
		xs = append(xs, float64(i))
	}
	if f := freezes(xs); f != (Freezes{N: 200, P50Ms: 100, P99Ms: 198, MaxMs: 200}) {
		t.Fatalf("1..200: %+v", f)
	}
	if f := freezes([]float64{70, 50, 900}); f != (Freezes{N: 3, P50Ms: 70, P99Ms: 900, MaxMs: 900}) {
		t.Fatalf("three: %+v", f)
	}
}

// soakFixture is a finished soak of 32 migrations (one failed) whose agent
// grew by 5 % and whose proxy gained 6 fds of 30 (20 %).
func soakFixture() SoakResult {
	r := SoakResult{Seconds: 3600, LedgerChecked: true, SlotsRead: true, WritesAcknowledged: 360000}
	for i := range 32 {
		c := SoakPID
		if i%2 == 1 {
			c = SoakFixed
		}
		r.Migrations = append(r.Migrations, SoakMigration{N: i + 1, Controller: c, Committed: i != 7, FreezeMs: float64(50 + i)})
	}
	r.Start = []SoakSample{{Process: "proxy", RSSBytes: 20 << 20, FDs: 30}, {Process: "agent server-a", RSSBytes: 40 << 20, FDs: 20}}
	r.End = []SoakSample{{Process: "agent server-a", RSSBytes: 42 << 20, FDs: 20}, {Process: "proxy", RSSBytes: 20 << 20, FDs: 36}}
	return r
}

func TestSoakSummary(t *testing.T) {
	o, _ := SoakOptions{}.withDefaults()
	r := soakFixture()
	r.summarise(o, nil)
	if r.Committed != 31 || r.Failed != 1 || r.ByController[SoakPID] != 16 || r.ByController[SoakFixed] != 15 {
		t.Fatalf("counts: %d committed (%v), %d failed", r.Committed, r.ByController, r.Failed)
	}
	if r.Freeze != (Freezes{N: 31, P50Ms: 66, P99Ms: 81, MaxMs: 81}) || r.FreezeBy[SoakFixed].N != 15 {
		t.Fatalf("freezes: %+v by %+v", r.Freeze, r.FreezeBy)
	}
	want := map[string]bool{
		"migrations": true, "no migration failed": false, "writes lost": true, "writes duplicated": true,
		"proxy RSS": true, "proxy fds": false, "agent server-a RSS": true, "agent server-a fds": true, "no slot left behind": true,
	}
	if len(r.Checks) != len(want) {
		t.Fatalf("%d checks, want %d: %+v", len(r.Checks), len(want), r.Checks)
	}
	for _, c := range r.Checks {
		if p, ok := want[c.Name]; !ok || p != c.Pass {
			t.Errorf("check %q: pass %v, want %v (%s)", c.Name, c.Pass, p, c.Detail)
		}
	}
	if r.Pass {
		t.Error("a failed check, yet the soak passes")
	}
	if u := r.Processes[1]; u.Process != "agent server-a" || u.RSSChangePct == nil || *u.RSSChangePct != 5 || *u.FDChangePct != 0 {
		t.Errorf("agent's usage: %+v", u)
	}
	if l := r.Checks[5].Line(); !strings.HasPrefix(l, "FAIL  proxy fds: 30 → 36 (+20.0 %)") {
		t.Errorf("proxy fds line: %q", l)
	}
	// The summary is the command's --json: it must marshal (no NaN).
	if _, err := json.Marshal(r); err != nil {
		t.Fatal(err)
	}
}

func TestSoakChecksFail(t *testing.T) {
	o, _ := SoakOptions{}.withDefaults()
	r := SoakResult{Seconds: 3600, SlotsRead: true, Slots: []testbed.Slot{{Server: "server-a", Tenant: "soak", Name: "sluice_1", HeldBytes: 64 << 20}},
		LedgerChecked: true, WritesAcknowledged: 10, WritesMissing: 1}
	r.Migrations = []SoakMigration{{N: 1, Controller: SoakPID, Committed: true}}
	// An end reading of a process that is gone: no change, a failed check.
	r.Start = []SoakSample{{Process: "proxy", RSSBytes: 1 << 20, FDs: 10}}
	r.End = []SoakSample{{Process: "proxy", Error: "no such process"}}
	r.summarise(o, nil)
	fails := map[string]bool{}
	for _, c := range r.Checks {
		if !c.Pass {
			fails[c.Name] = true
		}
	}
	for _, n := range []string{"migrations", "writes lost", "proxy RSS", "proxy fds", "no slot left behind"} {
		if !fails[n] {
			t.Errorf("%q passed: %+v", n, r.Checks)
		}
	}
	if fails["writes duplicated"] || r.SlotsLeft != 1 || r.WALHeldBytes != 64<<20 {
		t.Errorf("duplicated failed or slots %d holding %d: %+v", r.SlotsLeft, r.WALHeldBytes, r.Checks)
	}
	r.LedgerChecked, r.SlotsRead, r.Slots = false, false, nil
	r.summarise(o, nil)
	for _, c := range r.Checks {
		if (c.Name == "writes duplicated" || c.Name == "no slot left behind") && c.Pass {
			t.Errorf("%q passes unread: %s", c.Name, c.Detail)
		}
	}
}

func TestSoakReportAndChart(t *testing.T) {
	o, _ := SoakOptions{}.withDefaults()
	r := soakFixture()
	r.summarise(o, nil)
	md := soakReport(o, time.Unix(0, 0), r, "test bed")
	for _, s := range []string{"FAIL  proxy fds", "| pid | 16 |", "| agent server-a | 41.9 MB |", "0 slots"} {
		if !strings.Contains(md, s) {
			t.Errorf("report lacks %q:\n%s", s, md)
		}
	}
	samples := append(append([]SoakSample(nil), r.Start...), r.End...)
	samples[0].T, samples[1].T, samples[2].T, samples[3].T = 60, 60, 3600, 3600
	c := soakChart(r, samples)
	if len(c.Panels) != 3 || len(c.Panels[0].Series) != 2 || len(c.Panels[2].Series) != 2 {
		t.Fatalf("chart: %d panels", len(c.Panels))
	}
}

func TestMedianReading(t *testing.T) {
	read := func(rss int64, fds int, err string) []SoakSample {
		return []SoakSample{{Process: "proxy", RSSBytes: rss, FDs: fds, Error: err}, {Process: "agent", Error: "gone"}}
	}
	// A transient connection (fds 40) and a failed read do not move the
	// median; a process never read keeps its error.
	got := medianReading([][]SoakSample{read(10, 30, ""), read(12, 40, ""), read(0, 0, "busy"), read(11, 30, "")})
	if got[0].RSSBytes != 11 || got[0].FDs != 30 || got[0].Error != "" || got[1].Error != "gone" {
		t.Fatalf("median reading: %+v", got)
	}
	if medianReading(nil) != nil {
		t.Fatal("no reads: a reading")
	}
}

// TestSoakTrend: a process whose readings climb 1 MB and 2 fds every 6
// minutes between the start and end readings trends +10 MB/h and +20
// fds/h; readings outside them, or failed, do not count.
func TestSoakTrend(t *testing.T) {
	var samples []SoakSample
	for i := range 11 {
		samples = append(samples, SoakSample{T: float64(360 * i), Process: "agent", RSSBytes: int64(50e6 + 1e6*i), FDs: 20 + 2*i})
	}
	samples = append(samples, SoakSample{T: 7200, Process: "agent", RSSBytes: 1e9, FDs: 900}, SoakSample{T: 100, Process: "agent", Error: "gone"})
	u := usage(samples[:1], samples[10:11], samples)
	if len(u) != 1 || u[0].RSSTrendMBPerHour == nil || *u[0].RSSTrendMBPerHour != 10 || *u[0].FDTrendPerHour != 20 {
		t.Fatalf("trend: %+v", u)
	}
	if slope([]float64{1, 1, 1}, []float64{1, 2, 3}) != nil || slope([]float64{1, 2}, []float64{1, 2}) != nil {
		t.Fatal("a slope without spread or with two points")
	}
}
