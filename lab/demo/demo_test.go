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
	"github.com/sluicedb/sluice/lab/internal/testbin"
)

func TestMain(m *testing.M) {
	code := m.Run()
	pgtest.Cleanup()
	testbin.Remove()
	os.Exit(code)
}

// TestDemoSmall runs the whole demo on a small tenant: cgroup-limited
// servers, proxy, load, baseline, a live migration under the default
// profile, ledger check, outputs. It checks what the demo must always
// deliver — an exact ledger, consistent figures, its files — and nothing
// about timing or how close the loop came to its setpoint: a tenant this
// small is copied before the loop settles.
func TestDemoSmall(t *testing.T) {
	if err := CheckHost(); err != nil {
		t.Skip(err)
	}
	out := filepath.Join(t.TempDir(), "demo")
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	res, err := Run(ctx, Options{Out: out, Binary: testbin.Sluice(t), Size: 30e6, Baseline: 2 * time.Second, TxRate: 50, MPL: 4})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%+v", res)
	if res.WritesAcknowledged == 0 || res.WritesMissing != 0 || res.WritesDuplicated != 0 {
		t.Fatalf("ledger: %+v", res)
	}
	switch {
	case res.BytesCopied < 30e6, res.FreezeMs <= 0, res.SourceCPUs != DefaultCPUs:
		t.Fatalf("migration figures: %+v", res)
	case res.CopySeconds <= 0 || res.CopySeconds > res.MigrationSeconds:
		t.Fatalf("the copy (%v s) is not within the migration (%v s)", res.CopySeconds, res.MigrationSeconds)
	case res.SetpointMs != ms(SetpointRule(time.Duration(res.BaselineCalmLatencyMs*float64(time.Millisecond)))):
		t.Fatalf("setpoint %v ms is not the rule's for a calmest baseline of %v ms", res.SetpointMs, res.BaselineCalmLatencyMs)
	case res.BaselineCalmLatencyMs <= 0 || res.BaselineCalmLatencyMs > res.BaselineMeanLatencyMs:
		t.Fatalf("baseline: mean %v ms, calmest %v ms", res.BaselineMeanLatencyMs, res.BaselineCalmLatencyMs)
	case res.AchievedMeanLatencyMs <= 0 || res.ProxyMeanLatencyMs <= 0 || res.ClientQueueMs < 0 || res.ClientQueueMs > res.AchievedMeanLatencyMs:
		t.Fatalf("latencies: %+v", res)
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
	want := []string{"achieved_mean_latency_ms", "baseline_calm_latency_ms", "baseline_mean_latency_ms", "bytes_copied", "client_queue_ms", "copy_seconds",
		"freeze_ms", "migration_mean_latency_ms", "migration_seconds", "proxy_mean_latency_ms", "setpoint_ms", "source_cpus",
		"writes_acknowledged", "writes_duplicated", "writes_missing"}
	if !reflect.DeepEqual(keys, want) {
		t.Fatalf("summary keys %v, want %v", keys, want)
	}
	for _, f := range []string{"loop.csv", "demo.png", "logs/server-a.log", "logs/server-b.log"} {
		if st, err := os.Stat(filepath.Join(out, f)); err != nil || st.Size() == 0 {
			t.Fatalf("%s: %v", f, err)
		}
	}
}

func TestOptionsCheck(t *testing.T) {
	for name, o := range map[string]Options{
		"tiny":        {Size: 10},
		"setpoint":    {Setpoint: -time.Millisecond},
		"tps":         {TxRate: -1},
		"mpl":         {MPL: -1},
		"max rate":    {MaxRate: -1},
		"controller":  {Controller: "bangbang"},
		"no limit":    {CPUs: -1},
		"target cpus": {TargetCPUs: 100},
		"baseline":    {Baseline: time.Millisecond},
	} {
		if err := o.Check(); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if err := (Options{}).Check(); err != nil {
		t.Fatalf("defaults rejected: %v", err)
	}
}
