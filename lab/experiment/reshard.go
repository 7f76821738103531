package experiment

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"time"

	agentclient "github.com/sluicedb/sluice/agent/client"
	"github.com/sluicedb/sluice/lab/testbed"
	"github.com/sluicedb/sluice/lab/workload"
)

// The live reconfiguration's benchmark (`sluice bench reshard`): the Squall
// paper's §7 experiments on this machine's scale. A keyspace over tenants
// of cgroup-limited servers (one per server, or all on the first with
// OneServer; the keyspace lives in the first server's agent,
// whose driver runs the change) is loaded,
// a closed-loop workload runs through the proxy's keyspace router, and
// after Before the keyspace is reconfigured to the scenario's new plan by
// each method in turn, each on a freshly loaded keyspace (the same data,
// the same seed). Per method: throughput and p50/p99 latency per second,
// the figures Squall's Fig. 9–11 compare, the ledger checked row by row
// and the keyspace's placement check. Goals are reported, not asserted.

// Workloads.
const (
	WorkloadYCSB = "ycsb"
	WorkloadTPCC = "tpcc"
)

// ReshardMethods are the methods every run compares, in the order they
// run: pure reactive last, so that its bound (it never finishes on its
// own) can be 3 × the longest other.
var ReshardMethods = []string{
	agentclient.MethodStopAndCopy, agentclient.MethodSquall, agentclient.MethodZephyr,
	agentclient.MethodControlled, agentclient.MethodReactive,
}

// ErrReshardNotBuilt is returned when the agent cannot reconfigure yet:
// POST …/reshard answered 404, 405 or 501, or said a part is "not built".
var ErrReshardNotBuilt = errors.New("experiment: reshard: the agent's reconfiguration driver is not built")

// ReshardOptions configure the bench. Zero fields take the defaults noted.
type ReshardOptions struct {
	Scenario string   // loadbalance, expand or consolidate; required
	Workload string   // ycsb (default) or tpcc
	Methods  []string // default ReshardMethods
	// MoveBytes sizes YCSB's data so the change moves about this much
	// (usertable rows at workload.RowBytesOnDisk); default 100 MB.
	MoveBytes int64
	// TPC-C-lite's size: Warehouses (a multiple of 12, default 12) and
	// Customers per district (default 3000, TPC-C's).
	Warehouses, Customers int
	MPL                   int     // workload connections (closed loop); default 8
	ReadFraction          float64 // YCSB's reads; default 0.85
	// HotFraction is loadbalance's TPC-C share of transactions on the hot
	// warehouses; default 0.6. (YCSB's hot set takes workload.HotOpFraction.)
	HotFraction float64
	Before      time.Duration // workload before the change; default 20 s
	After       time.Duration // workload after it finished; default 10 s
	Warmup      time.Duration // the run's first seconds, not in "before"; default 3 s
	// Bound cuts a method short: 0 = 3 × the longest method that finished
	// before it, at least MinBound; > 0 = this for every method.
	Bound    time.Duration
	MinBound time.Duration // default 120 s
	// FinishWait bounds the wait, after a cut, for the change to finish
	// (its remaining chunks pulled, the workload stopped); default 3 min.
	FinishWait time.Duration
	// DrainWait bounds the wait for the workload's transactions in flight
	// to end once it is stopped; past it they are cancelled and the ledger
	// is not verified (reported); default 60 s.
	DrainWait time.Duration
	// SetpointMs is controlled's setpoint (its PID on the p99 of the
	// proxy's windows); 0 = SetpointFactor × the run's p99 before.
	SetpointMs     float64
	SetpointFactor float64 // default 1.25
	ChunkBytes     int64   // 0 = the driver's (8 MiB)
	// OneServer puts every partition's tenant on the first server; by
	// default each is on a server of its own (the driver pulls between
	// agents).
	OneServer bool
	Seed      uint64 // data and workload; default 1
	Out       string // output directory; required
	Command   string // the command line, for the report
	Progress  func(format string, args ...any)
}

// reshardDefaults are the options' defaults, in one place: defaults
// fills zero fields from it and the command's flags start from it.
var reshardDefaults = ReshardOptions{
	Workload: WorkloadYCSB, Methods: ReshardMethods,
	MoveBytes: 100e6, Warehouses: 12, Customers: 3000, MPL: DefaultMPL,
	ReadFraction: 0.85, HotFraction: 0.6,
	Before: 20 * time.Second, After: 10 * time.Second, Warmup: 3 * time.Second,
	MinBound: 120 * time.Second, FinishWait: 3 * time.Minute, DrainWait: time.Minute,
	SetpointFactor: 1.25, Seed: 1,
}

// ReshardDefaults returns the options' defaults (no scenario, no output).
func ReshardDefaults() ReshardOptions { return reshardDefaults }

func (o *ReshardOptions) defaults() error {
	d := reshardDefaults
	if o.Workload == "" {
		o.Workload = d.Workload
	}
	if len(o.Methods) == 0 {
		o.Methods = d.Methods
	}
	for _, f := range []struct{ v, d *int }{{&o.Warehouses, &d.Warehouses}, {&o.Customers, &d.Customers}, {&o.MPL, &d.MPL}} {
		if *f.v == 0 {
			*f.v = *f.d
		}
	}
	for _, f := range []struct{ v, d *time.Duration }{{&o.Before, &d.Before}, {&o.After, &d.After}, {&o.Warmup, &d.Warmup},
		{&o.MinBound, &d.MinBound}, {&o.FinishWait, &d.FinishWait}, {&o.DrainWait, &d.DrainWait}} {
		if *f.v == 0 {
			*f.v = *f.d
		}
	}
	for _, f := range []struct{ v, d *float64 }{{&o.ReadFraction, &d.ReadFraction}, {&o.HotFraction, &d.HotFraction},
		{&o.SetpointFactor, &d.SetpointFactor}} {
		if *f.v == 0 {
			*f.v = *f.d
		}
	}
	if o.MoveBytes == 0 {
		o.MoveBytes = d.MoveBytes
	}
	if o.Seed == 0 {
		o.Seed = d.Seed
	}
	if o.Progress == nil {
		o.Progress = func(string, ...any) {}
	}
	if _, err := scenarioPartitions(o.Scenario); err != nil {
		return err
	}
	for _, m := range o.Methods {
		if !isMethod(m) {
			return fmt.Errorf("experiment: reshard: method %q: want %s", m, strings.Join(ReshardMethods, ", "))
		}
	}
	switch {
	case o.Out == "":
		return fmt.Errorf("experiment: reshard: no output directory")
	case o.Workload != WorkloadYCSB && o.Workload != WorkloadTPCC:
		return fmt.Errorf("experiment: reshard: workload %q: want ycsb or tpcc", o.Workload)
	case o.Warehouses < 12 || o.Warehouses%12 != 0:
		return fmt.Errorf("experiment: reshard: %d warehouses: want a multiple of 12", o.Warehouses)
	case o.MoveBytes < 1e6:
		return fmt.Errorf("experiment: reshard: move size %d bytes is below 1 MB", o.MoveBytes)
	case o.MPL < 1 || o.Customers < 1:
		return fmt.Errorf("experiment: reshard: mpl and customers must be ≥ 1")
	case o.Before < 5*time.Second || o.Warmup >= o.Before:
		return fmt.Errorf("experiment: reshard: before %v must be ≥ 5s and longer than the warm-up %v", o.Before, o.Warmup)
	case o.ReadFraction < 0 || o.ReadFraction > 1 || o.HotFraction < 0 || o.HotFraction > 1:
		return fmt.Errorf("experiment: reshard: read and hot fractions must be in [0, 1]")
	case o.SetpointMs < 0 || o.SetpointFactor <= 0 || o.Bound < 0:
		return fmt.Errorf("experiment: reshard: setpoint, setpoint factor and bound must not be negative")
	}
	return nil
}

func isMethod(m string) bool {
	for _, x := range ReshardMethods {
		if m == x {
			return true
		}
	}
	return false
}

// Records is YCSB's usertable size for o: MoveBytes over the share of the
// keys the scenario moves.
func (o ReshardOptions) Records() int64 {
	return max(int64(float64(o.MoveBytes)/movedShare(o.Scenario, o.Workload)/workload.RowBytesOnDisk), 1200)
}

// ReshardMethodResult is one method's run. The first eleven fields are
// the bench's contract.
type ReshardMethodResult struct {
	Method string `json:"method"`
	// ReconfigSeconds is from the request to the driver's done (its own
	// Started/Finished when it reports them); cut at the bound when the
	// method did not finish by then (Finished false).
	ReconfigSeconds    float64 `json:"reconfig_seconds"`
	PreTPS             float64 `json:"pre_tps"`
	MeanTPSDuring      float64 `json:"mean_tps_during"`
	MinTPS1s           float64 `json:"min_tps_1s"`
	ZeroCommitSeconds  int     `json:"zero_commit_seconds"`
	P99MsBefore        float64 `json:"p99_ms_before"`
	P99MsDuring        float64 `json:"p99_ms_during"`
	WritesAcknowledged int64   `json:"writes_acknowledged"`
	WritesMissing      int64   `json:"writes_missing"`
	WritesDuplicated   int64   `json:"writes_duplicated"`

	// Finished: the driver reported done within the bound. When not,
	// FinishedBy says how it ended after the workload stopped.
	Finished   bool    `json:"finished"`
	BoundS     float64 `json:"bound_s"`
	FinishedBy string  `json:"finished_by,omitempty"`
	Phase      string  `json:"phase"` // the driver's last
	Error      string  `json:"error,omitempty"`

	StartS        float64 `json:"start_s"` // the change's start and end, seconds since the workload started
	EndS          float64 `json:"end_s"`
	SwitchMs      float64 `json:"switch_ms"`
	BytesCopied   int64   `json:"bytes_copied"`
	Chunks        int     `json:"chunks"`
	ReactivePulls int64   `json:"reactive_pulls"`
	AsyncPulls    int64   `json:"async_pulls"`
	SetpointMs    float64 `json:"setpoint_ms,omitempty"` // controlled's

	WritesMisplaced   int64        `json:"writes_misplaced"`
	LedgerOK          bool         `json:"ledger_ok"`
	Verdict           string       `json:"verdict"`
	KeyspaceCheckOK   bool         `json:"keyspace_check_ok"`
	KeyspaceMisplaced int64        `json:"keyspace_misplaced_rows"`
	ReferenceEqual    bool         `json:"reference_tables_equal"`
	Transactions      int64        `json:"transactions"`
	Errors            int64        `json:"errors"`
	Goals             ReshardGoals `json:"goals"`

	Seconds []ReshardSecond `json:"-"` // to series.csv
	Status  []ReshardPoint  `json:"-"` // to status.csv
}

// ReshardPoint is one poll of the driver's status.
type ReshardPoint struct {
	T           float64 // seconds since the workload started
	Phase       string
	Complete    int // chunks
	Chunks      int
	BytesCopied int64
	Rate        float64 // bytes/s; -1 unlimited
	LatencyMs   float64
}

// ReshardResult is `sluice bench reshard --json`.
type ReshardResult struct {
	Scenario string                `json:"scenario"`
	Workload string                `json:"workload"`
	Methods  []ReshardMethodResult `json:"methods"`

	Partitions  int      `json:"partitions"`
	Records     int64    `json:"records,omitempty"`    // YCSB
	Warehouses  int      `json:"warehouses,omitempty"` // TPC-C
	MovedShare  float64  `json:"moved_share"`          // of the root's keys
	LoadedBytes int64    `json:"loaded_bytes"`         // the first method's keyspace, all partitions
	MPL         int      `json:"mpl"`
	BeforeS     float64  `json:"before_s"`
	Notes       []string `json:"notes,omitempty"`
}

// Reshard runs o's scenario with every method on bed (o.Scenario's
// partitions' worth of servers, FollowCatalogs set) and writes its outputs
// into o.Out. ErrReshardNotBuilt when the agent cannot reconfigure.
func Reshard(ctx context.Context, bed *testbed.Bed, o ReshardOptions) (ReshardResult, error) {
	var res ReshardResult
	if err := o.defaults(); err != nil {
		return res, err
	}
	if err := os.MkdirAll(o.Out, 0o755); err != nil {
		return res, err
	}
	started := time.Now()
	x, err := newReshardRun(ctx, bed, o)
	if err != nil {
		return res, err
	}
	res = ReshardResult{Scenario: o.Scenario, Workload: o.Workload, Partitions: x.plan.parts,
		MovedShare: round(x.plan.moved, 4), MPL: o.MPL, BeforeS: o.Before.Seconds()}
	if o.Workload == WorkloadYCSB {
		res.Records = x.records
	} else {
		res.Warehouses = o.Warehouses
	}
	longest := time.Duration(0)
	for _, m := range o.Methods {
		bound := o.Bound
		if bound == 0 {
			bound = max(o.MinBound, 3*longest)
		}
		o.Progress("%s, %s: method %s (bound %v)", o.Scenario, o.Workload, m, bound)
		mr, err := x.method(ctx, m, bound)
		if err != nil {
			// The bed is broken (a wedged proxy, a dead agent): what ran
			// so far is written, and no further method runs.
			x.note("%s: %v; no further method ran", m, err)
			res.LoadedBytes, res.Notes = x.loaded, x.notes
			if werr := writeReshardOutputs(o, bed, res, started); werr != nil {
				o.Progress("writing the outputs: %v", werr)
			}
			return res, err
		}
		if mr.Finished {
			longest = max(longest, time.Duration(mr.ReconfigSeconds*float64(time.Second)))
		}
		o.Progress("  %s: %.1f s (finished %v), tps %.0f → mean %.0f, min %.0f, %d zero seconds, p99 %.1f → %.1f ms; %s; keyspace check OK %v",
			m, mr.ReconfigSeconds, mr.Finished, mr.PreTPS, mr.MeanTPSDuring, mr.MinTPS1s, mr.ZeroCommitSeconds,
			mr.P99MsBefore, mr.P99MsDuring, mr.Verdict, mr.KeyspaceCheckOK)
		res.Methods = append(res.Methods, mr)
	}
	res.LoadedBytes = x.loaded
	res.judgeSquall()
	res.Notes = x.notes
	return res, writeReshardOutputs(o, bed, res, started)
}

// judgeSquall sets controlled's VsSquall goal.
func (r *ReshardResult) judgeSquall() {
	var sq, ct *ReshardMethodResult
	for i := range r.Methods {
		switch r.Methods[i].Method {
		case agentclient.MethodSquall:
			sq = &r.Methods[i]
		case agentclient.MethodControlled:
			ct = &r.Methods[i]
		}
	}
	if sq == nil || ct == nil || !sq.Finished || !ct.Finished {
		return
	}
	ok := ct.ReconfigSeconds <= sq.ReconfigSeconds && ct.Goals.DipPct <= sq.Goals.DipPct
	ct.Goals.VsSquall = &ok
}

// OK reports whether every method's ledger and keyspace check held.
func (r ReshardResult) OK() bool {
	for _, m := range r.Methods {
		if !m.LedgerOK || !m.KeyspaceCheckOK {
			return false
		}
	}
	return true
}

// notBuilt reports whether err says the agent cannot reconfigure yet:
// the endpoint not served (404, 405, 501), or an answer naming a part of
// the driver "not built" (a stub adapter).
func notBuilt(err error) bool {
	switch agentclient.StatusOf(err) {
	case http.StatusNotFound, http.StatusMethodNotAllowed, http.StatusNotImplemented:
		return true
	}
	return err != nil && strings.Contains(err.Error(), "not built")
}

// Check fills o's defaults and reports the first bad option.
func (o *ReshardOptions) Check() error { return o.defaults() }

// ReshardServers is how many servers scenario needs: one per partition,
// or one (oneServer).
func ReshardServers(scenario string, oneServer bool) (int, error) {
	n, err := scenarioPartitions(scenario)
	if oneServer {
		n = 1
	}
	return n, err
}
