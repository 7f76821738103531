package commands

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/sluicedb/sluice/internal/cli"
	"github.com/sluicedb/sluice/keyspace"
	"github.com/sluicedb/sluice/lab/experiment"
	"github.com/sluicedb/sluice/pgcluster"
	"github.com/sluicedb/sluice/proxy"
)

// benchRouterOptions are bench router's flags.
type benchRouterOptions struct {
	o          experiment.RouterOptions
	procs      int
	syncCommit string
	jsonOut    bool
	keep       bool
}

func init() {
	var bf benchRouterOptions
	cmd := &cobra.Command{
		Use:   "router [--out DIR] [--json]",
		Short: "Single-partition YCSB through the keyspace router vs direct vs tenant routing; TPC-C-lite's distributed share",
		Long: `Starts two PostgreSQL 15 servers as partitions p1 and p2 (tenants t1 and t2) and one
sluice proxy (a child process running this binary's proxy command with
--proxy-procs as its --procs) routing both tenants and two keyspaces, ycsb and
tpcc, split evenly over the partitions. Loads YCSB (--records) and TPC-C-lite
(--warehouses) straight into the partitions, then measures YCSB with one
operation a transaction (every transaction on one partition), --read-fraction
reads, closed loop with --mpl connections, three ways: direct (each key's owner
straight), tenant proxy (the proxy, database = the owner's tenant: routing as
the proxy does for tenants) and router (the proxy, database = the keyspace:
every statement parsed to find its key). --rounds rounds of the three, the
order rotating, each --duration; figures are medians over rounds. Then runs
TPC-C-lite through the router for --tpcc-duration (remote new-orders and
payments span partitions and commit by two-phase commit) and checks every
ledger row by row. Everything runs on this machine, the client, the proxy and
both servers sharing its cores.

Prints direct_tps, router_tps, tenant_proxy_tps, direct_p50_ms, router_p50_ms,
distributed_tps and distributed_fraction (and more with --json), the ratio
router_tps / tenant_proxy_tps (goal ≥ 0.9) and the p50 the router adds over
direct. Writes runs.csv, summary.json, report.md and router.png into --out.
Exits 1 if a ledger verdict fails.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runBenchRouter(cmd, bf) },
	}
	f := cmd.Flags()
	f.DurationVar(&bf.o.Duration, "duration", 15*time.Second, "each YCSB run (one mode, one round)")
	f.IntVar(&bf.o.Rounds, "rounds", 3, "rounds of the three modes; medians are reported")
	f.DurationVar(&bf.o.Warmup, "warmup", 3*time.Second, "each mode once before the rounds, not recorded (0: none)")
	f.IntVar(&bf.o.MPL, "mpl", 8, "client connections of every run (closed loop)")
	f.Int64Var(&bf.o.Records, "records", 100000, "YCSB records")
	f.Float64Var(&bf.o.ReadFraction, "read-fraction", 0.95, "YCSB's share of reads (0.95: workload B; 0.5: A)")
	f.IntVar(&bf.o.Warehouses, "warehouses", 4, "TPC-C-lite warehouses")
	f.DurationVar(&bf.o.TPCCDuration, "tpcc-duration", 30*time.Second, "the TPC-C-lite run")
	f.StringVar(&bf.o.Out, "out", filepath.Join("out", "bench", "router"), "directory for runs.csv, summary.json, report.md and router.png")
	f.IntVar(&bf.procs, "proxy-procs", proxy.DefaultProcs, "--procs of the sluice proxy under test (GOMAXPROCS; 0 = one per core)")
	f.StringVar(&bf.syncCommit, "synchronous-commit", "off", "the servers' synchronous_commit: off (measures the path) or on")
	f.BoolVar(&bf.jsonOut, "json", false, "print results as JSON")
	f.BoolVar(&bf.keep, "keep", false, "keep the temp directory (logs) for inspection")
	benchCmd.AddCommand(cmd)
}

func runBenchRouter(cmd *cobra.Command, bf benchRouterOptions) error {
	switch {
	case bf.o.Duration < time.Second || bf.o.TPCCDuration < time.Second:
		return cli.Usagef("bench router: --duration and --tpcc-duration must be at least 1s")
	case bf.o.Rounds < 1 || bf.o.MPL < 1 || bf.o.Records < 2 || bf.o.Warehouses < 2:
		return cli.Usagef("bench router: --rounds and --mpl must be positive, --records and --warehouses at least 2")
	case bf.o.ReadFraction < 0 || bf.o.ReadFraction > 1:
		return cli.Usagef("bench router: --read-fraction must be in [0, 1]")
	case bf.procs < 0:
		return cli.Usagef("bench router: --proxy-procs must be 0 (one per core) or positive")
	case bf.syncCommit != "on" && bf.syncCommit != "off":
		return cli.Usagef("bench router: --synchronous-commit must be on or off, not %q", bf.syncCommit)
	}
	if bf.o.Warmup == 0 {
		bf.o.Warmup = -1 // the flag's 0 means none; the options' 0 the default
	}
	progress := func(format string, args ...any) {
		fmt.Fprintf(cmd.ErrOrStderr(), "bench router: "+format+"\n", args...)
	}
	bf.o.Progress = progress
	bf.o.Command = "sluice " + strings.Join(os.Args[1:], " ")
	ctx, cancel := context.WithCancel(cmd.Context())
	defer cancel()

	dir, done, err := benchDir("router", bf.keep, progress)
	if err != nil {
		return err
	}
	defer done()
	parts := []keyspace.Partition{{Name: "p1", Tenant: "t1"}, {Name: "p2", Tenant: "t2"}}
	rb := &routerBench{opt: bf, dir: dir, progress: progress}
	defer rb.stop()
	bed, err := rb.start(ctx, parts)
	if err != nil {
		return err
	}
	res, err := experiment.Router(ctx, bed, parts, bf.o)
	if err != nil {
		return err
	}
	if bf.jsonOut {
		err = cli.WriteJSON(cmd.OutOrStdout(), res)
	} else {
		printBenchRouter(cmd.OutOrStdout(), res)
	}
	if err == nil && !res.OK() {
		return fmt.Errorf("bench router: a ledger verdict failed (YCSB OK %v; TPC-C %s)", res.YCSBLedgerOK, res.TPCCVerdict)
	}
	return err
}

// routerBench is bench router's setup: two servers and the proxy. stop
// tears down what start set up, last first, even when start failed.
type routerBench struct {
	opt      benchRouterOptions
	dir      string
	progress func(format string, args ...any)
	stops    []func()
}

// start starts one PostgreSQL server per partition and the proxy routing
// their tenants and both keyspaces, and returns the bed the experiment
// runs on.
func (rb *routerBench) start(ctx context.Context, parts []keyspace.Partition) (experiment.RouterBed, error) {
	bed := experiment.RouterBed{Partitions: map[string]string{}, Tenants: map[string]string{}}
	var args []string
	for _, p := range parts {
		rb.progress("initdb and start PostgreSQL for partition %s (synchronous_commit %s)", p.Name, rb.opt.syncCommit)
		c, err := pgcluster.Init(ctx, filepath.Join(rb.dir, p.Name), pgcluster.Options{Settings: map[string]string{
			"max_connections": "100", "shared_buffers": "256MB", "synchronous_commit": rb.opt.syncCommit,
			"max_prepared_transactions": "50"}})
		if err != nil {
			return bed, err
		}
		if err := c.Start(ctx); err != nil {
			return bed, err
		}
		rb.stops = append(rb.stops, func() { c.Stop(context.Background(), pgcluster.Fast) })
		bed.Partitions[p.Name] = c.ConnString("postgres")
		args = append(args, "--route", p.Tenant+"="+c.Addr()+"/postgres")
	}
	yks, tks, err := experiment.RouterKeyspaces(parts, rb.opt.o)
	if err != nil {
		return bed, err
	}
	for _, ks := range []*keyspace.Keyspace{yks, tks} {
		path := filepath.Join(rb.dir, ks.Name+".keyspace.json")
		b, err := json.Marshal(ks)
		if err != nil {
			return bed, err
		}
		if err := os.WriteFile(path, b, 0o600); err != nil {
			return bed, err
		}
		args = append(args, "--keyspace", path)
	}
	args = append(args, "--txlog", filepath.Join(rb.dir, "txlog"))
	userlist := filepath.Join(rb.dir, "userlist.txt")
	if err := os.WriteFile(userlist, []byte(fmt.Sprintf("\"postgres\" \"%s\"\n", benchPassword)), 0o600); err != nil {
		return bed, err
	}
	rb.progress("start sluice proxy (--procs %d): tenants t1, t2; keyspaces %s, %s", rb.opt.procs, yks.Name, tks.Name)
	port, pid, stop, err := startSluiceProxy(ctx, rb.dir, userlist, rb.opt.procs, args...)
	if err != nil {
		return bed, err
	}
	rb.stops = append(rb.stops, stop)
	dsn := func(db string) string {
		u := url.URL{Scheme: "postgres", User: url.UserPassword("postgres", benchPassword),
			Host: net.JoinHostPort("127.0.0.1", port), Path: "/" + db, RawQuery: "sslmode=disable"}
		return u.String()
	}
	for _, p := range parts {
		bed.Tenants[p.Name] = dsn(p.Tenant)
	}
	bed.Router = dsn
	bed.ProxyCPU = func() time.Duration { return processCPU(pid) }
	bed.Note = fmt.Sprintf("2 PostgreSQL 15 servers (synchronous_commit %s), one sluice proxy (--procs %d), on this machine over TCP on 127.0.0.1",
		rb.opt.syncCommit, rb.opt.procs)
	return bed, nil
}

func (rb *routerBench) stop() {
	for i := len(rb.stops) - 1; i >= 0; i-- {
		rb.stops[i]()
	}
	rb.stops = nil
}

// printBenchRouter prints the modes' figures, the goal's ratio and
// TPC-C-lite's distributed share.
func printBenchRouter(w io.Writer, r experiment.RouterResult) {
	fmt.Fprintf(w, "%-14s %12s %10s %14s\n", "ycsb via", "tps", "p50 ms", "proxy µs/tx")
	fmt.Fprintf(w, "%-14s %12.1f %10.3f %14s\n", "direct", r.DirectTPS, r.DirectP50Ms, "–")
	fmt.Fprintf(w, "%-14s %12.1f %10.3f %14.1f\n", "tenant proxy", r.TenantProxyTPS, r.TenantProxyP50Ms, r.TenantProxyCPUUS)
	fmt.Fprintf(w, "%-14s %12.1f %10.3f %14.1f\n", "router", r.RouterTPS, r.RouterP50Ms, r.RouterCPUUS)
	goal := "met"
	if !r.GoalMet {
		goal = "NOT met"
	}
	fmt.Fprintf(w, "router_tps / tenant_proxy_tps = %.3f (goal ≥ 0.9: %s); router_p50 − direct_p50 = %+.3f ms\n",
		r.RouterOverTenantProxy, goal, r.RouterAddedP50Ms)
	fmt.Fprintf(w, "tpcc via router: %.1f tps, distributed %.1f tps (%.1f %%), p50 %.3f ms, p99 %.3f ms\n%s\n",
		r.TPCCTPS, r.DistributedTPS, 100*r.DistributedFraction, r.TPCCP50Ms, r.TPCCP99Ms, r.TPCCVerdict)
	fmt.Fprintf(w, "direct_tps=%.1f router_tps=%.1f tenant_proxy_tps=%.1f direct_p50_ms=%.3f router_p50_ms=%.3f distributed_tps=%.1f distributed_fraction=%.4f\n",
		r.DirectTPS, r.RouterTPS, r.TenantProxyTPS, r.DirectP50Ms, r.RouterP50Ms, r.DistributedTPS, r.DistributedFraction)
}
