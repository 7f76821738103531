package experiment

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluicedb/sluice/lab/fio"
	"github.com/sluicedb/sluice/loop"
)

// TestBufferingGoalsAndOutputs: the goals are judged from the rows (the
// late start only for the migration-time goal), and every output file is
// written from a result.
func TestBufferingGoalsAndOutputs(t *testing.T) {
	tr := &TrialResult{MigStart: 3, MigEnd: 20, Loop: []loop.Point{{T: 4, Rate: 16e6, Prefetch: 32e6}, {T: 5, Rate: 16e6, Reason: "interference p=0.9 locked"}}}
	fr := fio.Result{PerSecond: []float64{5e6, 5e6, 4e6}}
	row := func(m, p string, at, mig, thr float64) BufferingRow {
		return BufferingRow{Method: m, Profile: p, FioAtS: at, MigrationSecondsNormalized: mig, ColocatedThroughputNormalized: thr, OverlapSeconds: 3, res: tr, fio: fr}
	}
	res := &BufferingResult{LateStartS: 12, ClassifierAccuracy: 0.8, ClassifierF1: 0.5, DefaultModelAccuracy: 0.7, DefaultModelF1: 0,
		AloneSeconds: map[string]float64{"buffering": 20}, FioNominalMBps: map[string]float64{"randread": 5},
		Methods: []BufferingRow{
			row("unthrottled", "randread", 0, 1, 0.4), row("buffering", "randread", 0, 1.9, 0.97),
			row("unthrottled", "randread", 12, 1, 0.9), row("buffering", "randread", 12, 1.1, 0.96),
		}}
	gs := bufferingGoals(res)
	want := []bool{true, true, true, true}
	for i, g := range gs {
		if g.Met != want[i] {
			t.Errorf("goal %q: met %v, want %v (%s)", g.Name, g.Met, want[i], g.Note)
		}
	}
	res.Methods[3].MigrationSecondsNormalized = 1.3 // late start too slow
	res.Methods[1].ColocatedThroughputNormalized = 0.9
	gs = bufferingGoals(res)
	if gs[0].Met || gs[1].Met || !strings.Contains(gs[0].Note, "0.900 (randread at 0 s)") {
		t.Errorf("goals %+v", gs)
	}
	res.Goals = gs
	dir := t.TempDir()
	if err := WriteBuffering(dir, res); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"methods.csv", "summary.json", "report.md", "buffering.png", "timeline-randread-0s.png", "timeline-randread-12s.png"} {
		if st, err := os.Stat(filepath.Join(dir, f)); err != nil || st.Size() == 0 {
			t.Errorf("%s: %v", f, err)
		}
	}
}
