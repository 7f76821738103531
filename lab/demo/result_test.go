package demo

import (
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	agentclient "github.com/sluicedb/sluice/agent/client"
	"github.com/sluicedb/sluice/lab/cgroup"
	"github.com/sluicedb/sluice/lab/workload"
	"github.com/sluicedb/sluice/loop"
)

// fakeTxs serves fixed transactions as workload.Runner.Transactions does:
// those that ended in [from, to).
type fakeTxs []workload.Tx

var _ txSource = fakeTxs(nil)

func (f fakeTxs) Transactions(from, to time.Duration) []workload.Tx {
	var out []workload.Tx
	for _, tx := range f {
		if tx.End >= from && tx.End < to {
			out = append(out, tx)
		}
	}
	return out
}

func tx(arrival, begin, end float64, failed bool) workload.Tx {
	s := func(x float64) time.Duration { return time.Duration(x * float64(time.Second)) }
	return workload.Tx{Arrival: s(arrival), Begin: s(begin), End: s(end), Failed: failed}
}

// The copy is [start, hold): a transaction counts by when it ended, the
// handover's held ones (ending after the hold) only in the whole
// migration's mean, failed ones in neither.
func TestMeasure(t *testing.T) {
	txs := fakeTxs{
		tx(9.0, 9.0, 9.010, false),      // before the migration
		tx(10.0, 10.0, 10.010, false),   // the copy: 10 ms
		tx(20.0, 20.004, 20.020, false), // the copy: 20 ms, 4 of them queued
		tx(29.9, 29.9, 30.5, false),     // held by the handover: ends after the hold
		tx(25.0, 25.0, 25.5, true),      // failed
		tx(31.0, 31.0, 31.010, false),   // after the migration
	}
	mr := migrated{
		start: 10 * time.Second, hold: 30 * time.Second, end: 31 * time.Second,
		series: []loop.Point{{T: 1, LatencyMs: 12}, {T: 2, LatencyMs: -1}, {T: 3, LatencyMs: 18}, {T: 20, LatencyMs: 500}},
		m:      agentclient.Migration{Summary: &agentclient.Summary{Bytes: 42, FreezeMS: 80}},
	}
	var r Result
	r.measure(mr, txs)
	near := func(got, want float64) bool { return math.Abs(got-want) < 1e-6 }
	switch {
	case !near(r.AchievedMeanLatencyMs, 15) || !near(r.ClientQueueMs, 2):
		t.Errorf("during the copy: mean %v ms, queue %v ms; want 15, 2", r.AchievedMeanLatencyMs, r.ClientQueueMs)
	case !near(r.MigrationMeanLatencyMs, 210):
		t.Errorf("whole migration: %v ms, want 210", r.MigrationMeanLatencyMs)
	case !near(r.ProxyMeanLatencyMs, 15):
		t.Errorf("proxy: %v ms, want 15 (the steps with data, before the hold)", r.ProxyMeanLatencyMs)
	case r.CopySeconds != 20 || r.MigrationSeconds != 21 || r.BytesCopied != 42 || r.FreezeMs != 80:
		t.Errorf("figures: %+v", r)
	}
	var none Result
	none.measure(migrated{start: time.Second, hold: 2 * time.Second, end: 3 * time.Second}, fakeTxs{})
	if none.AchievedMeanLatencyMs != -1 || none.ProxyMeanLatencyMs != -1 || none.ClientQueueMs != -1 {
		t.Errorf("no data: %+v, want -1 for each latency", none)
	}
}

func TestSetpointRule(t *testing.T) {
	for _, c := range []struct{ base, want time.Duration }{
		{10 * time.Millisecond, time.Duration(SetpointFactor * float64(10*time.Millisecond))},
		{time.Millisecond, time.Millisecond + MinSetpointGap},
	} {
		if got := SetpointRule(c.base); got != c.want {
			t.Errorf("SetpointRule(%v) = %v, want %v", c.base, got, c.want)
		}
	}
}

// Without cgroup v1 the demo refuses in one line rather than run unlimited.
func TestCheckHostWithoutCgroupV1(t *testing.T) {
	if os.Geteuid() != 0 {
		if err := CheckHost(); err == nil || !strings.Contains(err.Error(), "root") {
			t.Fatalf("as a user: %v", err)
		}
		return
	}
	defer func(r string) { cgroup.Root = r }(cgroup.Root)
	cgroup.Root = t.TempDir()
	os.MkdirAll(filepath.Join(cgroup.Root, "unified"), 0o755) // a v2-only host
	err := CheckHost()
	if err == nil || !strings.Contains(err.Error(), "cgroup v1") || strings.Contains(err.Error(), "\n") {
		t.Fatalf("CheckHost on a host without cgroup v1: %q", err)
	}
}
