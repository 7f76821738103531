package experiment

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	agentclient "github.com/sluicedb/sluice/agent/client"
	"github.com/sluicedb/sluice/control"
	"github.com/sluicedb/sluice/control/tune"
	"github.com/sluicedb/sluice/lab/sim"
	"github.com/sluicedb/sluice/lab/testbed"
	"github.com/sluicedb/sluice/lab/workload"
	"github.com/sluicedb/sluice/plan"
)

// `sluice bench plan`: Aqueduct's experiments (FAST 2002 §5, Fig. 6–8) on
// cgroup-limited servers. Four servers: a, b and c hold two moving stores
// and one fixed store each (not moved, sharing a server with moved ones);
// d holds the alone store (no migration on its server). A plan of six moves
// rotates the moving stores among a, b and c (every server a source twice
// and a target twice; with three servers every two moves share one, so they
// run one at a time); the next method's plan moves them back. Every store
// runs its own YCSB workload through the proxy for the whole run, and its
// ledger is checked row by row after each plan.

// PlanBenchOptions configure the bench. Zero values take the defaults noted.
type PlanBenchOptions struct {
	Out     string // output directory (required)
	Command string // the command line, for the report
	// StoreBytes is each store's YCSB data, bytes; default 48 MB (each
	// move's snapshot is that plus the tenant's catalog, about 25 MB; a
	// profiling rung must fit in one snapshot).
	StoreBytes int64
	// Rate is each store's arrival rate, transactions/s; default 12.
	Rate float64
	// MPL is each store's connections; default 4.
	MPL int
	// ContractMs is every store's contract; 0 = the larger of 2 × the
	// highest baseline mean of any store and 1.25 × the 95th percentile of
	// the stores' baseline window means (a contract the plant itself, with
	// no migration, meets in about 19 windows of 20 with a margin; on a
	// shared host the windows' noise, not the mean, binds), rounded up to a
	// whole ms.
	ContractMs float64
	// Methods run in order (plan.Methods); default all four, baselines first.
	Methods []string
	// K is the integral gain; 0 = profiled on the bed (LiveProfile, one
	// moving store migrated at fixed rates and rolled back), K = (1−p)/G
	// for Pole.
	K float64
	// Pole is the integral loop's pole for the profiled K; default
	// sim.DefaultPole, `sluice tune`'s.
	Pole float64
	// Baseline is the no-migration measurement; default 20 s.
	Baseline time.Duration
	// Warmup runs every workload before each plan; default 10 s.
	Warmup time.Duration
	// After runs them after each plan; default 3 s.
	After time.Duration
	// PlanBound cuts a plan that has not ended (aborted); default 6 min.
	PlanBound time.Duration
	Seed      uint64
	Progress  func(format string, args ...any)
}

// Store roles.
const (
	RoleMoving = "moving"
	RoleFixed  = "fixed"
	RoleAlone  = "alone"
)

// planStore is one store of the bench layout.
type planStore struct {
	name       string
	role       string
	home, dest int // servers: where it starts, where the forward plan moves it
	tn         testbed.Tenant
}

// planLayout is the bench's stores.
func planLayout() []planStore {
	return []planStore{
		{name: "m1", role: RoleMoving, home: 0, dest: 1}, {name: "m2", role: RoleMoving, home: 0, dest: 2}, {name: "f1", role: RoleFixed},
		{name: "m3", role: RoleMoving, home: 1, dest: 2}, {name: "m4", role: RoleMoving, home: 1, dest: 0}, {name: "f2", role: RoleFixed, home: 1},
		{name: "m5", role: RoleMoving, home: 2, dest: 0}, {name: "m6", role: RoleMoving, home: 2, dest: 1}, {name: "f3", role: RoleFixed, home: 2},
		{name: "alone", role: RoleAlone, home: 3},
	}
}

// PlanBenchServers is the bench's server count.
const PlanBenchServers = 4

func (o *PlanBenchOptions) defaults() error {
	if o.Out == "" {
		return errors.New("experiment: plan: no output directory")
	}
	if o.StoreBytes == 0 {
		o.StoreBytes = 48e6
	}
	if o.Rate == 0 {
		o.Rate = 12
	}
	if o.MPL == 0 {
		o.MPL = 4
	}
	if len(o.Methods) == 0 {
		o.Methods = []string{plan.MethodWholeStore, plan.MethodSubStore, plan.MethodIntegral, plan.MethodPID}
	}
	for _, m := range o.Methods {
		if !slices.Contains(plan.Methods, m) {
			return fmt.Errorf("experiment: plan: unknown method %q (want %v)", m, plan.Methods)
		}
	}
	if o.Pole == 0 {
		o.Pole = sim.DefaultPole
	}
	if !(o.Pole > -1 && o.Pole < 1) {
		return fmt.Errorf("experiment: plan: pole %v outside (-1, 1)", o.Pole)
	}
	for _, d := range []*time.Duration{&o.Baseline, &o.Warmup, &o.After, &o.PlanBound} {
		if *d < 0 {
			return errors.New("experiment: plan: negative duration")
		}
	}
	o.Baseline = cmpOr(o.Baseline, 20*time.Second)
	o.Warmup = cmpOr(o.Warmup, 10*time.Second)
	o.After = cmpOr(o.After, 3*time.Second)
	o.PlanBound = cmpOr(o.PlanBound, 6*time.Minute)
	if o.Progress == nil {
		o.Progress = func(string, ...any) {}
	}
	return nil
}

func cmpOr(d, def time.Duration) time.Duration {
	if d == 0 {
		return def
	}
	return d
}

// storeLoad is the workloads of every store for one session.
type storeLoad struct {
	runs   []*workload.Runner
	cancel context.CancelFunc
	wg     sync.WaitGroup
	errs   []error
	mu     sync.Mutex
}

// startLoads starts every store's workload (seeded per session and store).
func (o *PlanBenchOptions) startLoads(ctx context.Context, stores []planStore, session uint64) (*storeLoad, error) {
	wctx, cancel := context.WithCancel(ctx)
	l := &storeLoad{cancel: cancel}
	for i, s := range stores {
		r, err := workload.NewRunner(workload.Config{DSN: s.tn.DSN, Rate: o.Rate, MPL: o.MPL, Records: s.tn.Rows, Duration: time.Hour,
			Seed: o.Seed + session*100 + uint64(i) + 1})
		if err != nil {
			cancel()
			return nil, err
		}
		l.runs = append(l.runs, r)
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			if _, err := r.Run(wctx, nil); err != nil && wctx.Err() == nil {
				l.mu.Lock()
				l.errs = append(l.errs, fmt.Errorf("workload %s: %w", s.name, err))
				l.mu.Unlock()
			}
		}()
	}
	for _, r := range l.runs { // every clock started
		for r.Started().IsZero() && ctx.Err() == nil {
			time.Sleep(10 * time.Millisecond)
		}
	}
	return l, ctx.Err()
}

// stop ends the workloads and checks every store's ledger on its owner.
func (l *storeLoad) stop(ctx context.Context, stores []planStore) (workload.Check, error) {
	l.cancel()
	l.wg.Wait()
	var sum workload.Check
	if err := errors.Join(l.errs...); err != nil {
		return sum, err
	}
	for i, s := range stores {
		conn, err := pgx.Connect(ctx, s.tn.DSN)
		if err != nil {
			return sum, fmt.Errorf("experiment: verify %s: %w", s.name, err)
		}
		c, err := workload.Verify(ctx, conn, l.runs[i].Ledger)
		conn.Close(context.Background())
		if err != nil {
			return sum, fmt.Errorf("experiment: verify %s: %w", s.name, err)
		}
		sum.Acknowledged += c.Acknowledged
		sum.Missing += c.Missing
		sum.Duplicated += c.Duplicated
	}
	return sum, nil
}

// seconds is the run-relative second range of [from, to) for run r.
func seconds(r *workload.Runner, from, to time.Time) (int, int) {
	s := r.Started()
	return int(math.Floor(from.Sub(s).Seconds())), int(math.Ceil(to.Sub(s).Seconds()))
}

// PlanBench runs the bench on bed (PlanBenchServers servers).
func PlanBench(ctx context.Context, bed *testbed.Bed, o PlanBenchOptions) (PlanBenchResult, error) {
	var res PlanBenchResult
	if err := o.defaults(); err != nil {
		return res, err
	}
	if len(bed.Servers) != PlanBenchServers {
		return res, fmt.Errorf("experiment: plan: the bed has %d servers, want %d", len(bed.Servers), PlanBenchServers)
	}
	started := time.Now()
	say := o.Progress
	stores := planLayout()
	for i := range stores {
		s := &stores[i]
		if s.role != RoleMoving {
			s.dest = s.home
		}
		t, err := bed.CreateTenant(ctx, s.home, s.name, o.StoreBytes, o.Seed+uint64(i)+1)
		if err != nil {
			return res, err
		}
		s.tn = t
	}
	res.Servers, res.Stores, res.StoreBytes, res.RateTPS, res.MPL = PlanBenchServers, len(stores), o.StoreBytes, o.Rate, o.MPL
	for _, s := range stores {
		if s.role == RoleMoving {
			res.Moves++
		}
	}
	prof, err := o.baselineAndProfile(ctx, bed, stores, &res)
	if err != nil {
		return res, err
	}
	var outs []planOutput
	for k, m := range o.Methods {
		forward := k%2 == 0
		run, out, err := o.runMethod(ctx, bed, stores, m, forward, res.ContractMs, res.K, uint64(k+2))
		if err != nil {
			return res, fmt.Errorf("method %s: %w", m, err)
		}
		say("%s: %.0f s, worst VR %.2f, worst AVL %+.0f%%, fixed p99 %.1f ms, alone p99 %.1f ms, throughput ×%.2f, missing %d, duplicated %d",
			m, run.PlanSeconds, run.WorstViolationFraction, 100*run.WorstAVLFraction, run.FixedStoreP99Ms, run.AloneStoreP99Ms,
			run.ThroughputFraction, run.WritesMissing, run.WritesDuplicated)
		res.Methods = append(res.Methods, run)
		outs = append(outs, out)
	}
	res.Profile = prof
	return res, writePlanBench(o, bed.Describe(), res, outs, started)
}

// baselineAndProfile runs every workload without migration (the
// no-migration figures, the contract), then, unless K is given, profiles
// the plant's gain with LiveProfile and sets K = (1−p)/G.
func (o *PlanBenchOptions) baselineAndProfile(ctx context.Context, bed *testbed.Bed, stores []planStore, res *PlanBenchResult) (*LiveFit, error) {
	say := o.Progress
	say("baseline: %d stores, %.0f transactions/s each, %s", len(stores), o.Rate, o.Baseline+o.Warmup)
	l, err := o.startLoads(ctx, stores, 0)
	if err != nil {
		return nil, err
	}
	if !sleepCtx(ctx, o.Warmup) {
		return nil, ctx.Err()
	}
	from := time.Now()
	if !sleepCtx(ctx, o.Baseline) {
		return nil, ctx.Err()
	}
	base := measureBaseline(l, stores, from, time.Now())
	res.BaselineTPS = round(base.tps, 1)
	res.FixedBaselineP99Ms, res.AloneBaselineP99Ms = round(base.fixedP99, 2), round(base.aloneP99, 2)
	res.ContractMs = o.ContractMs
	if res.ContractMs == 0 {
		res.ContractMs = math.Ceil(max(2*base.maxMean, 1.25*base.window95))
	}
	res.BaselineWindow95Ms = round(base.window95, 2)
	say("baseline: highest store mean %.1f ms, 95th percentile of the stores' %d s windows %.1f ms; fixed p99 %.1f ms, alone p99 %.1f ms, %.0f transactions/s; contract %.0f ms",
		base.maxMean, PlanWindow, base.window95, base.fixedP99, base.aloneP99, base.tps, res.ContractMs)
	var prof *LiveFit
	res.K, res.Pole = o.K, o.Pole
	if o.K == 0 {
		s := stores[0]
		lp := LiveProfile{Agent: bed.Servers[s.home].Client, Proxy: bed.ProxyAPI, Tenant: tenantID(ctx, bed, s), To: bed.Servers[s.dest].Name,
			DefaultContract: time.Duration(res.ContractMs * float64(time.Millisecond)), Progress: say}
		fit, err := lp.Run(ctx)
		switch {
		case err == nil && fit.G > 0:
			prof = &fit
			res.K, _ = tune.ProposeK(fit.G, o.Pole)
			say("profile: G %.3f ms per MB/s (R² %.2f over %d rungs): K = %.3g for pole %.2f", fit.GmsPerMBps, fit.R2, len(fit.Points), res.K, o.Pole)
		default:
			res.K = control.HeuristicIntegralK(control.DefaultProfile().MaxRate, time.Duration(res.ContractMs*float64(time.Millisecond)))
			res.KNote = fmt.Sprintf("profile gave no gain (%v, G %v): K is control.HeuristicIntegralK", err, fit.G)
			say("%s = %.3g", res.KNote, res.K)
		}
	}
	chk, err := l.stop(ctx, stores)
	if err != nil {
		return prof, err
	}
	if !chk.OK() {
		return prof, fmt.Errorf("experiment: plan: baseline and profile: %d writes missing, %d duplicated", chk.Missing, chk.Duplicated)
	}
	return prof, nil
}

// tenantID is the ID of store s's tenant on its home server; 0 if unknown.
func tenantID(ctx context.Context, bed *testbed.Bed, s planStore) int64 {
	ts, err := bed.Servers[s.home].Client.Tenants(ctx, false)
	if err != nil {
		return 0
	}
	for _, t := range ts {
		if t.Name == s.name {
			return t.ID
		}
	}
	return 0
}

// planBaseline are the no-migration figures.
type planBaseline struct {
	tps, maxMean, fixedP99, aloneP99 float64
	// window95 is the 95th percentile of every store's PlanWindow means:
	// the plant's own noise as the contracts are judged.
	window95 float64
}

func measureBaseline(l *storeLoad, stores []planStore, from, to time.Time) planBaseline {
	var b planBaseline
	var fixed, alone, windows []float64
	n := 0
	for i, s := range stores {
		a, z := seconds(l.runs[i], from, to)
		xs := l.runs[i].Latencies(a, z)
		n += len(xs)
		b.maxMean = math.Max(b.maxMean, Describe(xs).Mean)
		for w := a; w+PlanWindow <= z; w += PlanWindow {
			if ys := l.runs[i].Latencies(w, w+PlanWindow); len(ys) > 0 {
				windows = append(windows, Describe(ys).Mean)
			}
		}
		switch s.role {
		case RoleFixed:
			fixed = append(fixed, xs...)
		case RoleAlone:
			alone = append(alone, xs...)
		}
	}
	b.tps = float64(n) / to.Sub(from).Seconds()
	b.fixedP99, b.aloneP99 = percentile(fixed, 0.99), percentile(alone, 0.99)
	b.window95 = percentile(windows, 0.95)
	return b
}

// waitServing waits (up to two minutes) until no store's tenant is
// migrating on any server: a method starts on a settled layout.
func waitServing(ctx context.Context, bed *testbed.Bed) error {
	deadline := time.Now().Add(2 * time.Minute)
	for {
		busy := ""
		for _, s := range bed.Servers {
			ts, err := s.Client.Tenants(ctx, false)
			if err != nil {
				busy = s.Name + ": " + err.Error()
				break
			}
			for _, t := range ts {
				if t.State == "migrating-out" || t.State == "migrating-in" {
					busy = t.Name + " " + t.State + " on " + s.Name
				}
			}
		}
		if busy == "" {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("experiment: plan: still migrating after 2 minutes: %s", busy)
		}
		if !sleepCtx(ctx, 500*time.Millisecond) {
			return ctx.Err()
		}
	}
}

// planSpec is the bench's plan: every moving store to its destination
// (forward) or home.
func planSpec(bed *testbed.Bed, stores []planStore, method string, forward bool, contractMs, k float64) plan.Spec {
	spec := plan.Spec{Method: method, ContractsMs: map[string]float64{}}
	if method == plan.MethodIntegral {
		spec.K = k
	}
	for _, s := range stores {
		spec.ContractsMs[s.name] = contractMs
		if s.role != RoleMoving {
			continue
		}
		to := s.dest
		if !forward {
			to = s.home
		}
		spec.Moves = append(spec.Moves, plan.MoveSpec{Tenant: s.name, To: bed.Servers[to].Name})
	}
	return spec
}

// planOutput is what a method's run leaves for the report's files.
type planOutput struct {
	method string
	start  time.Time // plan start (wall)
	series []agentclient.PlanPoint
	status []agentclient.PlanStatus // every second
	stores []storeSeries
}

// storeSeries is one store's window means over a method's plan.
type storeSeries struct {
	name string
	role string
	t    []float64 // seconds since the plan started (window start)
	ms   []float64
}
