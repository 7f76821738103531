package demo

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"testing"
	"time"

	"github.com/sluicedb/sluice/internal/pgtest"
)

func TestMain(m *testing.M) {
	code := m.Run()
	pgtest.Cleanup()
	os.Exit(code)
}

// TestDemoSmall runs the whole demo on a small tenant: agents, proxy, load,
// baseline, PID-controlled live migration, ledger check, outputs.
func TestDemoSmall(t *testing.T) {
	out := filepath.Join(t.TempDir(), "demo")
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	res, err := Run(ctx, Options{Out: out, Size: 8e6, Baseline: 2 * time.Second, TxRate: 50, MPL: 2, MaxRate: 20e6})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%+v", res)
	if res.WritesAcknowledged == 0 || res.WritesMissing != 0 || res.WritesDuplicated != 0 {
		t.Fatalf("ledger: %+v", res)
	}
	if res.BytesCopied < 8e6 || res.MigrationSeconds <= 0 || res.FreezeMs <= 0 || res.SetpointMs <= res.BaselineMeanLatencyMs {
		t.Fatalf("figures: %+v", res)
	}
	b, err := os.ReadFile(filepath.Join(out, "summary.json"))
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	var keys []string
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	want := []string{"achieved_mean_latency_ms", "baseline_mean_latency_ms", "bytes_copied", "freeze_ms", "migration_seconds",
		"setpoint_ms", "writes_acknowledged", "writes_duplicated", "writes_missing"}
	if !reflect.DeepEqual(keys, want) {
		t.Fatalf("summary keys %v, want %v", keys, want)
	}
	for _, f := range []string{"loop.csv", "demo.png"} {
		if st, err := os.Stat(filepath.Join(out, f)); err != nil || st.Size() == 0 {
			t.Fatalf("%s: %v", f, err)
		}
	}
}

func TestOptionsCheck(t *testing.T) {
	for name, o := range map[string]Options{
		"tiny":       {Size: 10},
		"setpoint":   {Setpoint: -time.Millisecond},
		"tps":        {TxRate: -1},
		"max rate":   {MaxRate: -1},
		"controller": {Controller: "bangbang"},
	} {
		if err := o.Check(); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if err := (Options{}).Check(); err != nil {
		t.Fatalf("defaults rejected: %v", err)
	}
}
