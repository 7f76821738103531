package experiment

import (
	"context"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	agentclient "github.com/sluicedb/sluice/agent/client"
	"github.com/sluicedb/sluice/keyspace"
	"github.com/sluicedb/sluice/lab/testbed"
	"github.com/sluicedb/sluice/lab/workload"
)

// reshardRun is one bench run's state: the bed, its partitions' tenants
// (p<i+1> on server i), the scenario's plans.
type reshardRun struct {
	o       ReshardOptions
	bed     *testbed.Bed
	agent   *agentclient.Client // the keyspace's agent: server 0's
	tenants []agentclient.Tenant
	plan    reshardPlan
	records int64 // YCSB
	loaded  int64 // bytes loaded for the first method
	notes   []string
}

func newReshardRun(ctx context.Context, bed *testbed.Bed, o ReshardOptions) (*reshardRun, error) {
	n, _ := scenarioPartitions(o.Scenario)
	if need, _ := ReshardServers(o.Scenario, o.OneServer); len(bed.Servers) < need {
		return nil, fmt.Errorf("experiment: reshard: %s needs %d servers, the bed has %d", o.Scenario, need, len(bed.Servers))
	}
	x := &reshardRun{o: o, bed: bed, agent: bed.Servers[0].Client, records: o.Records()}
	var err error
	if o.Workload == WorkloadYCSB {
		x.plan, err = buildPlan(o.Scenario, workload.Table, 0, x.records, int64(float64(x.records)*workload.HotSetFraction))
	} else {
		w := int64(o.Warehouses)
		x.plan, err = buildPlan(o.Scenario, "warehouse", 1, w+1, 1+w/4)
	}
	if err != nil {
		return nil, err
	}
	for i := 0; i < n; i++ {
		name := fmt.Sprintf("rs%d", i+1)
		o.Progress("tenant %s (partition p%d) on %s", name, i+1, bed.Servers[x.server(i)].Name)
		tn, err := bed.AddTenant(ctx, x.server(i), name)
		if err != nil {
			return nil, err
		}
		x.tenants = append(x.tenants, tn)
	}
	return x, nil
}

// server is the index of the server partition i's tenant is on.
func (x *reshardRun) server(i int) int {
	if x.o.OneServer {
		return 0
	}
	return i
}

// ident is m as an SQL identifier's part.
func ident(m string) string { return strings.ReplaceAll(m, "-", "_") }

// fresh makes method m's keyspace: a database of its own in every
// partition's tenant, the keyspace recorded by the first agent with the
// scenario's old plan, loaded (the servers' caps lifted), vacuumed and
// checkpointed, and routed by the proxy. It returns the keyspace and the
// partitions' superuser DSNs.
func (x *reshardRun) fresh(ctx context.Context, m string) (*keyspace.Keyspace, map[string]string, error) {
	o := x.o
	db, name := "rs_"+ident(m), o.Workload+"_"+ident(m)
	dsns := map[string]string{}
	var parts []keyspace.Partition
	for i, tn := range x.tenants {
		if err := x.createDB(ctx, tn, db); err != nil {
			return nil, nil, err
		}
		p := keyspace.Partition{Name: fmt.Sprintf("p%d", i+1), Tenant: tn.Name, Database: db}
		if x.server(i) > 0 {
			p.Agent = x.bed.Servers[x.server(i)].Name
		}
		parts = append(parts, p)
		dsns[p.Name] = testbed.SuperDSN(tn, db)
	}
	var ks *keyspace.Keyspace
	var err error
	scale := workload.TPCCScale{Warehouses: o.Warehouses, Customers: o.Customers}
	if o.Workload == WorkloadYCSB {
		ks, err = workload.YCSBKeyspace(name, parts, x.records)
	} else {
		ks, err = workload.TPCCKeyspace(name, parts, scale)
	}
	if err != nil {
		return nil, nil, err
	}
	if ks, err = ks.WithPlan(x.plan.old); err != nil {
		return nil, nil, err
	}
	if ks, err = x.agent.CreateKeyspace(ctx, ks); err != nil {
		return nil, nil, fmt.Errorf("experiment: reshard: create keyspace %s: %w", name, err)
	}
	o.Progress("load keyspace %s (%s) on %d partitions", name, x.size(), len(parts))
	t0 := time.Now()
	err = x.bed.Unlimited(func() error {
		var err error
		if o.Workload == WorkloadYCSB {
			_, err = workload.LoadYCSB(ctx, ks, dsns, x.records, o.Seed)
		} else {
			_, err = workload.LoadTPCC(ctx, ks, dsns, scale, o.Seed)
		}
		if err != nil {
			return err
		}
		for _, dsn := range dsns {
			if err := execAll(ctx, dsn, "VACUUM (ANALYZE)", "CHECKPOINT"); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, nil, fmt.Errorf("experiment: reshard: load %s: %w", name, err)
	}
	if sz, err := x.agent.KeyspaceSizes(ctx, name); err == nil {
		o.Progress("  loaded %.0f MB in %.0f s", float64(sz.Bytes)/1e6, time.Since(t0).Seconds())
		if x.loaded == 0 {
			x.loaded = sz.Bytes
		}
	}
	return ks, dsns, x.waitRouted(ctx, ks)
}

func (x *reshardRun) size() string {
	if x.o.Workload == WorkloadYCSB {
		return fmt.Sprintf("%d records", x.records)
	}
	return fmt.Sprintf("%d warehouses, %d customers a district", x.o.Warehouses, x.o.Customers)
}

// createDB (re)creates database db in tenant tn, owned by the owner of
// the tenant's own database (the clients' user).
func (x *reshardRun) createDB(ctx context.Context, tn agentclient.Tenant, db string) error {
	conn, err := pgx.Connect(ctx, testbed.SuperDSN(tn, tn.Database))
	if err != nil {
		return fmt.Errorf("experiment: reshard: tenant %s: %w", tn.Name, err)
	}
	defer conn.Close(context.Background())
	var owner string
	if err := conn.QueryRow(ctx, "SELECT pg_get_userbyid(datdba) FROM pg_database WHERE datname = current_database()").Scan(&owner); err != nil {
		return fmt.Errorf("experiment: reshard: tenant %s: %w", tn.Name, err)
	}
	id := pgx.Identifier{db}.Sanitize()
	for _, q := range []string{"DROP DATABASE IF EXISTS " + id + " WITH (FORCE)", "CREATE DATABASE " + id + " OWNER " + pgx.Identifier{owner}.Sanitize()} {
		if _, err := conn.Exec(ctx, q); err != nil {
			return fmt.Errorf("experiment: reshard: tenant %s: %s: %w", tn.Name, q, err)
		}
	}
	return nil
}

// drop removes method m's keyspace record and databases, so that the next
// method's data has the servers' memory to itself. Failures are noted.
func (x *reshardRun) drop(ctx context.Context, m string) {
	ctx = context.WithoutCancel(ctx)
	name, db := x.o.Workload+"_"+ident(m), "rs_"+ident(m)
	if _, err := x.agent.DeleteKeyspace(ctx, name); err != nil {
		x.note("%s: delete keyspace %s: %v", m, name, err)
	}
	for _, tn := range x.tenants {
		if err := execAll(ctx, testbed.SuperDSN(tn, tn.Database), "DROP DATABASE IF EXISTS "+pgx.Identifier{db}.Sanitize()+" WITH (FORCE)"); err != nil {
			x.note("%s: drop database %s in %s: %v", m, db, tn.Name, err)
		}
	}
}

func (x *reshardRun) note(format string, args ...any) {
	s := fmt.Sprintf(format, args...)
	x.notes = append(x.notes, s)
	x.o.Progress("note: %s", s)
}

func execAll(ctx context.Context, dsn string, qs ...string) error {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	for _, q := range qs {
		if _, err := conn.Exec(ctx, q); err != nil {
			return fmt.Errorf("%s: %w", q, err)
		}
	}
	return nil
}

// waitRouted waits (up to a minute) until the proxy routes ks: a read of
// one key through its router answers.
func (x *reshardRun) waitRouted(ctx context.Context, ks *keyspace.Keyspace) error {
	q := "SELECT count(*) FROM " + workload.Table + " WHERE ycsb_key = 1"
	if x.o.Workload == WorkloadTPCC {
		q = "SELECT count(*) FROM warehouse WHERE w_id = 1"
	}
	var last error
	for end := time.Now().Add(time.Minute); time.Now().Before(end); time.Sleep(500 * time.Millisecond) {
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second) // a wedged proxy accepts and never answers
		last = execAll(pctx, x.bed.ClientDSN(ks.Name), q)
		cancel()
		if last == nil {
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
	return fmt.Errorf("experiment: reshard: the proxy does not route keyspace %s: %w", ks.Name, last)
}

// secondLog collects a run's per-second figures as they come, and says
// when the run has been going for a given time.
type secondLog struct {
	mu     sync.Mutex
	secs   []workload.Second
	at     int           // signal reached once the run completed this many seconds
	reach  chan struct{} // closed then
	closed bool
	prog   func(format string, args ...any)
}

func newSecondLog(at time.Duration, prog func(string, ...any)) *secondLog {
	return &secondLog{at: int(at / time.Second), reach: make(chan struct{}), prog: prog}
}

func (l *secondLog) each(s workload.Second) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.secs = append(l.secs, s)
	if s.T+1 >= l.at && !l.closed {
		l.closed = true
		close(l.reach)
	}
	if (s.T+1)%5 == 0 {
		l.prog("    t=%3d s: %d commits, %d errors, p50 %.1f ms, p99 %.1f ms", s.T+1, s.Count, s.Errors, s.P50Ms, s.P99Ms)
	}
}

// p99 is the median of the per-second p99s of seconds [from, to): the
// default setpoint's base, known before the run ends.
func (l *secondLog) p99(from, to int) float64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	var v []float64
	for _, s := range l.secs {
		if s.T >= from && s.T < to && s.Count > 0 {
			v = append(v, s.P99Ms)
		}
	}
	if len(v) == 0 {
		return 0
	}
	sort.Float64s(v)
	return v[len(v)/2]
}

// settled returns keyspace name once its reconfiguration has ended (done
// or failed; none at all): the ledger is read partition by partition, and
// a read racing a pull or a source's deletion would see a key on none or
// on two of them.
func (x *reshardRun) settled(ctx context.Context, name string) (*keyspace.Keyspace, error) {
	for {
		st, err := x.agent.ReshardStatus(ctx, name, false)
		if err != nil && agentclient.StatusOf(err) != http.StatusNotFound {
			return nil, err
		}
		if err != nil || (st.Phase != agentclient.PhasePreparing && st.Phase != agentclient.PhaseSwitching && st.Phase != agentclient.PhaseMoving) {
			return x.agent.Keyspace(ctx, name)
		}
		if !sleepCtx(ctx, 200*time.Millisecond) {
			return nil, ctx.Err()
		}
	}
}

// startWorkload starts the closed-loop workload on ks through the router,
// until stop closes (or max), verifying against the agent's keyspace as
// it stands at the end. The result arrives on the channel.
func (x *reshardRun) startWorkload(ctx context.Context, ks *keyspace.Keyspace, dsns map[string]string, stop <-chan struct{}, max time.Duration, each func(workload.Second)) <-chan wlResult {
	o := x.o
	arr := workload.Arrivals{MPL: o.MPL, Duration: max, Seed: o.Seed, Closed: true, Stop: stop}
	reach := workload.Reach{Partitions: dsns, Router: x.bed.ClientDSN(ks.Name),
		Final: func(ctx context.Context) (*keyspace.Keyspace, error) { return x.settled(ctx, ks.Name) }}
	out := make(chan wlResult, 1)
	go func() {
		var r wlResult
		if o.Workload == WorkloadYCSB {
			dist := workload.Zipfian
			if o.Scenario == ScenarioLoadBalance {
				dist = workload.HotSpot
			}
			r.res, r.err = workload.RunYCSB(ctx, workload.YCSBConfig{Arrivals: arr, Reach: reach, Keyspace: ks,
				Records: x.records, ReadFraction: o.ReadFraction, Distribution: dist}, each)
		} else {
			cfg := workload.TPCCConfig{Arrivals: arr, Reach: reach, Keyspace: ks,
				Scale: workload.TPCCScale{Warehouses: o.Warehouses, Customers: o.Customers}}
			if o.Scenario == ScenarioLoadBalance {
				cfg.HotWarehouses, cfg.HotFraction = o.Warehouses/4, o.HotFraction
			}
			r.res, r.err = workload.RunTPCC(ctx, cfg, each)
		}
		out <- r
	}()
	return out
}

type wlResult struct {
	res workload.KSResult
	err error
}
