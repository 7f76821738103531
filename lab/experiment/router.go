package experiment

import (
	"context"
	"fmt"
	"os"
	"sort"
	"time"

	"github.com/sluicedb/sluice/keyspace"
	"github.com/sluicedb/sluice/lab/workload"
)

// The keyspace router's benchmark (`sluice bench router`): single-partition
// YCSB sent three ways — straight to each partition's owner (direct),
// through the proxy to each partition's tenant (tenant proxy: the proxy as
// it routes tenants, the same client code as direct), and through the
// proxy's keyspace router (router: one DSN, every statement parsed to find
// its key) — in interleaved rounds, saturating (closed loop); then
// TPC-C-lite through the router, whose remote new-orders and payments span
// partitions and commit by two-phase commit. The caller starts the servers
// and the proxy (RouterBed); this file loads, measures and judges.

// Keyspace names the bench's clients give as their database.
const (
	RouterYCSBKeyspace = "ycsb"
	RouterTPCCKeyspace = "tpcc"
)

// The modes YCSB is measured in, in the order of the first round.
const (
	ModeDirect      = "direct"
	ModeTenantProxy = "tenant_proxy"
	ModeRouter      = "router"
)

var routerModes = []string{ModeDirect, ModeTenantProxy, ModeRouter}

// RouterBed is what the router bench runs against.
type RouterBed struct {
	// Partitions: partition name → DSN of its database, straight to its
	// server (loading, verification and the direct mode).
	Partitions map[string]string
	// Tenants: partition name → DSN of the proxy with the partition's
	// tenant as database.
	Tenants map[string]string
	// Router returns the proxy's DSN with a keyspace's name as database.
	Router func(keyspace string) string
	// ProxyCPU returns the proxy process's CPU time (user+system) so far;
	// nil: the proxy's CPU per transaction is not reported.
	ProxyCPU func() time.Duration
	// Note describes the servers and the proxy for the report.
	Note string
}

// RouterOptions configure the router bench. Zero fields take the defaults
// noted.
type RouterOptions struct {
	Records      int64         // YCSB keys loaded; default 100000
	ReadFraction float64       // YCSB's reads; default 0.95 (workload B)
	MPL          int           // connections of every run; default 8
	Duration     time.Duration // each YCSB run; default 15 s
	Rounds       int           // rounds of the three modes; default 3
	Warmup       time.Duration // each mode once, unrecorded, first; default 3 s, negative none
	Warehouses   int           // TPC-C-lite's; default 4
	TPCCDuration time.Duration // default 30 s
	Seed         uint64        // data, keys; default 1
	Out          string        // output directory; required by Router
	Command      string        // the command line, for the report
	Progress     func(format string, args ...any)
}

func (o *RouterOptions) defaults() error {
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	def(&o.MPL, 8)
	def(&o.Rounds, 3)
	def(&o.Warehouses, 4)
	if o.Records == 0 {
		o.Records = 100000
	}
	if o.ReadFraction == 0 {
		o.ReadFraction = 0.95
	}
	if o.Duration == 0 {
		o.Duration = 15 * time.Second
	}
	if o.Warmup == 0 {
		o.Warmup = 3 * time.Second
	}
	if o.TPCCDuration == 0 {
		o.TPCCDuration = 30 * time.Second
	}
	if o.Seed == 0 {
		o.Seed = 1
	}
	if o.Progress == nil {
		o.Progress = func(string, ...any) {}
	}
	switch {
	case o.MPL < 1 || o.Rounds < 1:
		return fmt.Errorf("experiment: router: mpl and rounds must be ≥ 1, got %d and %d", o.MPL, o.Rounds)
	case o.Duration < time.Second || o.TPCCDuration < time.Second:
		return fmt.Errorf("experiment: router: durations must be ≥ 1s, got %v and %v", o.Duration, o.TPCCDuration)
	case o.ReadFraction < 0 || o.ReadFraction > 1:
		return fmt.Errorf("experiment: router: read fraction must be in [0, 1], got %v", o.ReadFraction)
	}
	return nil
}

// RouterKeyspaces returns the bench's two keyspaces over parts (their
// tenants set): YCSB's usertable over o.Records keys and TPC-C-lite over
// o.Warehouses warehouses, each split evenly in the order given. The
// proxy under test must route both.
func RouterKeyspaces(parts []keyspace.Partition, o RouterOptions) (ycsb, tpcc *keyspace.Keyspace, err error) {
	if err := o.defaults(); err != nil {
		return nil, nil, err
	}
	if ycsb, err = workload.YCSBKeyspace(RouterYCSBKeyspace, parts, o.Records); err != nil {
		return nil, nil, err
	}
	tpcc, err = workload.TPCCKeyspace(RouterTPCCKeyspace, parts, workload.TPCCScale{Warehouses: o.Warehouses})
	return ycsb, tpcc, err
}

// RouterRun is one YCSB run in one mode.
type RouterRun struct {
	Round        int     `json:"round"`
	Mode         string  `json:"mode"`
	TPS          float64 `json:"tps"`
	P50Ms        float64 `json:"p50_ms"`
	P99Ms        float64 `json:"p99_ms"`
	Transactions int64   `json:"transactions"`
	Errors       int64   `json:"errors"`
	// ProxyCPUUS is the proxy's CPU (user+system) per transaction, µs;
	// 0 in direct mode or when not measured.
	ProxyCPUUS float64 `json:"proxy_cpu_us_per_tx"`
	LedgerOK   bool    `json:"ledger_ok"`
}

// RouterResult is `sluice bench router --json`. The first seven fields are
// the bench's contract; YCSB's figures are medians over rounds (by TPS for
// each mode's TPS, by p50 for its p50).
type RouterResult struct {
	DirectTPS           float64 `json:"direct_tps"`
	RouterTPS           float64 `json:"router_tps"`
	TenantProxyTPS      float64 `json:"tenant_proxy_tps"`
	DirectP50Ms         float64 `json:"direct_p50_ms"`
	RouterP50Ms         float64 `json:"router_p50_ms"`
	DistributedTPS      float64 `json:"distributed_tps"`      // TPC-C-lite's acknowledged transactions across partitions a second
	DistributedFraction float64 `json:"distributed_fraction"` // their share of TPC-C-lite's transactions

	TenantProxyP50Ms float64 `json:"tenant_proxy_p50_ms"`
	// RouterOverTenantProxy is RouterTPS / TenantProxyTPS; the goal is ≥ 0.9.
	RouterOverTenantProxy float64 `json:"router_over_tenant_proxy"`
	GoalMet               bool    `json:"goal_met"`
	// RouterAddedP50Ms is RouterP50Ms − DirectP50Ms.
	RouterAddedP50Ms float64 `json:"router_added_p50_ms"`
	// Proxy CPU per transaction, µs: medians over rounds.
	TenantProxyCPUUS float64 `json:"tenant_proxy_cpu_us_per_tx"`
	RouterCPUUS      float64 `json:"router_cpu_us_per_tx"`
	YCSBLedgerOK     bool    `json:"ycsb_ledger_ok"` // every YCSB run's verdict OK

	TPCCTPS     float64 `json:"tpcc_tps"`
	TPCCP50Ms   float64 `json:"tpcc_p50_ms"`
	TPCCP99Ms   float64 `json:"tpcc_p99_ms"`
	TPCCErrors  int64   `json:"tpcc_errors"`
	TPCCVerdict string  `json:"tpcc_verdict"`
	TPCCOK      bool    `json:"tpcc_ok"`

	ReadFraction float64           `json:"read_fraction"`
	MPL          int               `json:"mpl"`
	Records      int64             `json:"records"`
	Warehouses   int               `json:"warehouses"`
	Seconds      float64           `json:"seconds_per_run"`
	Rounds       int               `json:"rounds"`
	Runs         []RouterRun       `json:"runs"`
	TPCC         workload.KSResult `json:"tpcc"`
}

// OK reports whether every ledger verdict held.
func (r RouterResult) OK() bool { return r.YCSBLedgerOK && r.TPCCOK }

// Router loads both keyspaces (made by RouterKeyspaces with the same o)
// on bed's partitions, measures YCSB in every mode o.Rounds times, the
// modes' order rotating each round, then runs TPC-C-lite through the
// router. Writes RouterCSV, SummaryFile, ReportFile and RouterPNG into
// o.Out. A failed verdict is in the result, not an error.
func Router(ctx context.Context, bed RouterBed, parts []keyspace.Partition, o RouterOptions) (RouterResult, error) {
	var res RouterResult
	if err := o.defaults(); err != nil {
		return res, err
	}
	if o.Out == "" {
		return res, fmt.Errorf("experiment: router: no output directory")
	}
	if err := os.MkdirAll(o.Out, 0o755); err != nil {
		return res, err
	}
	started := time.Now()
	yks, tks, err := RouterKeyspaces(parts, o)
	if err != nil {
		return res, err
	}
	o.Progress("load YCSB (%d records) and TPC-C-lite (%d warehouses) on %d partitions", o.Records, o.Warehouses, len(parts))
	if _, err := workload.LoadYCSB(ctx, yks, bed.Partitions, o.Records, o.Seed); err != nil {
		return res, err
	}
	scale := workload.TPCCScale{Warehouses: o.Warehouses}
	if _, err := workload.LoadTPCC(ctx, tks, bed.Partitions, scale, o.Seed); err != nil {
		return res, err
	}
	if o.Warmup > 0 {
		for _, m := range routerModes {
			o.Progress("warm-up via %s, %v", m, o.Warmup)
			if _, err := ycsbRun(ctx, bed, yks, o, m, o.Warmup, 0); err != nil {
				return res, err
			}
		}
	}
	res.YCSBLedgerOK = true
	for r := 0; r < o.Rounds; r++ {
		for k := range routerModes {
			m := routerModes[(k+r)%len(routerModes)]
			o.Progress("ycsb via %s, round %d/%d, %v", m, r+1, o.Rounds, o.Duration)
			run, err := ycsbRun(ctx, bed, yks, o, m, o.Duration, r+1)
			if err != nil {
				return res, err
			}
			o.Progress("  %.0f tps, p50 %.3f ms, p99 %.3f ms, proxy CPU %.1f µs/tx, %d errors, ledger OK %v",
				run.TPS, run.P50Ms, run.P99Ms, run.ProxyCPUUS, run.Errors, run.LedgerOK)
			res.Runs = append(res.Runs, run)
			res.YCSBLedgerOK = res.YCSBLedgerOK && run.LedgerOK
		}
	}
	o.Progress("tpcc via router (%d warehouses), %v", o.Warehouses, o.TPCCDuration)
	res.TPCC, err = workload.RunTPCC(ctx, workload.TPCCConfig{
		Arrivals: workload.Arrivals{MPL: o.MPL, Duration: o.TPCCDuration, Seed: o.Seed, Closed: true},
		Reach:    workload.Reach{Partitions: bed.Partitions, Router: bed.Router(RouterTPCCKeyspace)},
		Keyspace: tks, Scale: scale,
	}, nil)
	if err != nil {
		return res, fmt.Errorf("experiment: router: tpcc: %w", err)
	}
	res.summarize(o)
	o.Progress("  %.0f tps (%.0f across partitions, %.1f %%), p50 %.3f ms, p99 %.3f ms; %s",
		res.TPCCTPS, res.DistributedTPS, 100*res.DistributedFraction, res.TPCCP50Ms, res.TPCCP99Ms, res.TPCCVerdict)
	return res, writeRouterOutputs(o, bed, res, started)
}

// ycsbRun runs single-partition YCSB in mode m for d and reports it as
// round r.
func ycsbRun(ctx context.Context, bed RouterBed, ks *keyspace.Keyspace, o RouterOptions, m string, d time.Duration, r int) (RouterRun, error) {
	reach := workload.Reach{Partitions: bed.Partitions}
	switch m {
	case ModeTenantProxy:
		reach.Client = bed.Tenants
	case ModeRouter:
		reach.Router = bed.Router(RouterYCSBKeyspace)
	}
	cpu := func() time.Duration {
		if bed.ProxyCPU == nil || m == ModeDirect {
			return 0
		}
		return bed.ProxyCPU()
	}
	cpu0 := cpu()
	res, err := workload.RunYCSB(ctx, workload.YCSBConfig{
		Arrivals: workload.Arrivals{MPL: o.MPL, Duration: d, Seed: o.Seed + uint64(r), Closed: true},
		Reach:    reach, Keyspace: ks, Records: o.Records, OpsPerTx: 1, ReadFraction: o.ReadFraction,
	}, nil)
	used := cpu() - cpu0 // includes verification's few statements: none go through the proxy
	if err != nil {
		return RouterRun{}, fmt.Errorf("experiment: router: ycsb via %s: %w", m, err)
	}
	run := RouterRun{Round: r, Mode: m, TPS: res.ThroughputTPS, P50Ms: res.P50Ms, P99Ms: res.P99Ms,
		Transactions: res.Transactions, Errors: res.Errors, LedgerOK: res.Verdict.OK()}
	if n := res.Transactions + res.Errors; n > 0 && used > 0 {
		run.ProxyCPUUS = used.Seconds() * 1e6 / float64(n)
	}
	return run, nil
}

// summarize fills res's medians and TPC-C figures from its runs.
func (res *RouterResult) summarize(o RouterOptions) {
	med := func(m string, f func(RouterRun) float64) float64 {
		var v []float64
		for _, r := range res.Runs {
			if r.Mode == m {
				v = append(v, f(r))
			}
		}
		if len(v) == 0 {
			return 0
		}
		sort.Float64s(v)
		return v[len(v)/2]
	}
	tps := func(r RouterRun) float64 { return r.TPS }
	p50 := func(r RouterRun) float64 { return r.P50Ms }
	cpu := func(r RouterRun) float64 { return r.ProxyCPUUS }
	res.DirectTPS, res.TenantProxyTPS, res.RouterTPS = round(med(ModeDirect, tps), 1), round(med(ModeTenantProxy, tps), 1), round(med(ModeRouter, tps), 1)
	res.DirectP50Ms, res.TenantProxyP50Ms, res.RouterP50Ms = round(med(ModeDirect, p50), 3), round(med(ModeTenantProxy, p50), 3), round(med(ModeRouter, p50), 3)
	res.TenantProxyCPUUS, res.RouterCPUUS = round(med(ModeTenantProxy, cpu), 1), round(med(ModeRouter, cpu), 1)
	if res.TenantProxyTPS > 0 {
		res.RouterOverTenantProxy = round(res.RouterTPS/res.TenantProxyTPS, 3)
	}
	res.GoalMet = res.RouterOverTenantProxy >= 0.9
	res.RouterAddedP50Ms = round(res.RouterP50Ms-res.DirectP50Ms, 3)

	t := res.TPCC
	res.DistributedTPS, res.DistributedFraction = round(t.DistributedTPS, 1), round(t.DistributedFraction, 4)
	res.TPCCTPS, res.TPCCP50Ms, res.TPCCP99Ms, res.TPCCErrors = round(t.ThroughputTPS, 1), round(t.P50Ms, 3), round(t.P99Ms, 3), t.Errors
	res.TPCCVerdict, res.TPCCOK = t.Verdict.String(), t.Verdict.OK()

	res.ReadFraction, res.MPL, res.Records, res.Warehouses = o.ReadFraction, o.MPL, o.Records, o.Warehouses
	res.Seconds, res.Rounds = o.Duration.Seconds(), o.Rounds
}
