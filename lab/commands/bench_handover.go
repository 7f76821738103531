package commands

import (
	"context"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"sort"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/spf13/cobra"

	"github.com/sluicedb/sluice/internal/cli"
	"github.com/sluicedb/sluice/lab/ledger"
	"github.com/sluicedb/sluice/migration"
	"github.com/sluicedb/sluice/migration/pg"
	"github.com/sluicedb/sluice/pgcluster"
	"github.com/sluicedb/sluice/proxy"
	proxyclient "github.com/sluicedb/sluice/proxy/client"
)

// benchHandoverOptions are bench handover's flags.
type benchHandoverOptions struct {
	handovers int
	rate      float64
	workers   int
	sizeMB    int
	fence     string
	walSegMB  int
	via       string
	mode      string
	jsonOut   bool
	keep      bool
	// longCursor keeps one session with a long cursor open (longCursor);
	// variants run the handovers again with other hold configs; out, if
	// set, gets the outputs (writeHandoverOutputs).
	longCursor bool
	variants   []string
	out        string
}

var benchHandoverFlags benchHandoverOptions

var benchHandoverCmd = &cobra.Command{
	Use:   "handover",
	Short: "Live-migrate one tenant back and forth under a write load; freeze percentiles and a ledger check",
	Long: `Starts its own PostgreSQL 15 tenant (default settings, fsync on) in a temp
directory with about --size MB of data, runs a write workload of --rate single-row
INSERT transactions per second over --workers connections, and live-migrates the
tenant --handovers times between two "hosts" (two directories on this machine), each
time the full way: slot, hot snapshot, streaming catch-up, warm, handover, cleanup.

Clients reach the tenant through an in-process sluice proxy (--via proxy: one
connection per worker to the proxy, which holds, re-routes and releases the sessions)
or through an in-process gate router (--via direct: each transaction asks
migration.GateRouter for the address and waits while held; clients reconnect when
it changes). The freeze is the driver's view: from asking for the hold to the
release, in ms. --mode stop-and-copy runs the baseline instead (hold, stop, copy,
start, switch, release): its freeze is the downtime.

--long-cursor keeps one more session through the proxy inside a transaction with
a cursor open across every handover, as psycopg2's named cursor does (BEGIN,
DECLARE, FETCH 100 every 20 ms): the hold's deadline ends it (57P01) and it opens
a new one. Each --variant (hold_deadline=D, hold_grace=G) runs --handovers more
with that hold, after the default's (the migration's default deadline, the
proxy's default grace), on the same tenant and workload. Per run: the freeze
(hold → release) and the other sessions' stall (per handover, the slowest write
that started during the hold), p50, p99 and max. --out gets handovers.csv,
summary.json, report.md and handover.png.

Every acknowledged INSERT is remembered; at the end the table on the final owner is
read and compared row by row: missing = acknowledged but absent, duplicated = ids
present more than once.`,
	Args: cobra.NoArgs,
	RunE: runBenchHandover,
}

func init() {
	f := benchHandoverCmd.Flags()
	f.IntVar(&benchHandoverFlags.handovers, "handovers", 20, "number of migrations (alternating between the two hosts)")
	f.Float64Var(&benchHandoverFlags.rate, "rate", 500, "write transactions per second")
	f.IntVar(&benchHandoverFlags.workers, "workers", 4, "client connections")
	f.IntVar(&benchHandoverFlags.sizeMB, "size", 64, "approximate tenant data, MB")
	f.StringVar(&benchHandoverFlags.fence, "fence", string(migration.FenceReadOnly), "source fence: read-only or stop")
	f.IntVar(&benchHandoverFlags.walSegMB, "wal-segsize", 1, "WAL segment size of the tenant, MB (power of 2, 1..1024; 1 = what sluice agents give tenants, 16 = PostgreSQL's default)")
	f.StringVar(&benchHandoverFlags.via, "via", "proxy", "how clients reach the tenant: proxy (an in-process sluice proxy, sessions kept across the handover) or direct (gate router, reconnect on switch)")
	f.StringVar(&benchHandoverFlags.mode, "mode", string(migration.Live), "migration mode: live, or stop-and-copy (the baseline; its freeze is the downtime)")
	f.BoolVar(&benchHandoverFlags.jsonOut, "json", false, "print results as JSON")
	f.BoolVar(&benchHandoverFlags.keep, "keep", false, "keep the temp directory for inspection")
	f.BoolVar(&benchHandoverFlags.longCursor, "long-cursor", false, "keep one session inside a transaction with a long cursor open across every handover (--via proxy)")
	f.StringArrayVar(&benchHandoverFlags.variants, "variant", nil, "run the handovers again with this hold: hold_deadline=D,hold_grace=G (repeatable; e.g. hold_deadline=2.5s, the freeze of the old 500 ms deadline + 2 s grace for an idle cursor)")
	f.StringVar(&benchHandoverFlags.out, "out", "", "directory for handovers.csv, summary.json, report.md and handover.png (default none)")
	benchCmd.AddCommand(benchHandoverCmd)
}

// benchHandoverResult is the JSON contract of `sluice bench handover --json`.
// The top-level figures are the default hold's run (Runs[0]).
type benchHandoverResult struct {
	Handovers          int           `json:"handovers"`
	FreezeP50ms        float64       `json:"freeze_p50_ms"`
	FreezeP99ms        float64       `json:"freeze_p99_ms"`
	WritesAcknowledged int           `json:"writes_acknowledged"`
	WritesMissing      int           `json:"writes_missing"`
	WritesDuplicated   int           `json:"writes_duplicated"`
	LongCursor         bool          `json:"long_cursor"`
	Runs               []handoverRun `json:"runs"` // the default hold's, then one per --variant
}

func runBenchHandover(cmd *cobra.Command, _ []string) error {
	bf := benchHandoverFlags
	configs, err := bf.check()
	if err != nil {
		return err
	}
	progress := func(format string, args ...any) {
		fmt.Fprintf(cmd.ErrOrStderr(), "bench handover: "+format+"\n", args...)
	}
	ctx := cmd.Context()
	if ctx == nil {
		ctx = context.Background()
	}
	start := time.Now()
	b, err := newMigHosts("sluice-bench-handover-", bf.keep, progress)
	if err != nil {
		return err
	}
	defer b.close()
	hb := &handoverBench{opt: bf, progress: progress, hosts: b}
	hb.writes = &ledger.Workload{Rate: bf.rate, Workers: bf.workers}
	if err := hb.loadTenant(ctx); err != nil {
		return err
	}
	res := benchHandoverResult{LongCursor: bf.longCursor}
	for _, c := range configs {
		ended, err := hb.runConfig(ctx, c)
		if err != nil {
			return err
		}
		res.Runs = append(res.Runs, summariseHandovers(c, hb.samples, ended))
	}
	st := hb.writes.Stats()
	progress("workload: %d writes acknowledged, %d failed attempts (%d with unknown outcome), slowest acknowledged %.0f ms; last error: %s",
		st.Acknowledged, st.Errors, st.Uncertain, float64(st.MaxLatency)/float64(time.Millisecond), st.LastError)
	rep, err := hb.writes.Verify(ctx, hb.hosts.current.ConnString("postgres"))
	if err != nil {
		return err
	}
	base := res.Runs[0]
	res.Handovers, res.FreezeP50ms, res.FreezeP99ms = base.Handovers, base.FreezeP50, base.FreezeP99
	res.WritesAcknowledged, res.WritesMissing, res.WritesDuplicated = rep.Acknowledged, rep.Missing, rep.Duplicated
	if bf.out != "" {
		if err := writeHandoverOutputs(bf.out, downtimeCommandLine(cmd), start, res, hb.samples); err != nil {
			return err
		}
	}
	if bf.jsonOut {
		return cli.WriteJSON(cmd.OutOrStdout(), res)
	}
	printBenchHandover(cmd.OutOrStdout(), res)
	return nil
}

// runConfig runs --handovers handovers holding with c: its own router
// (a proxy with c's grace), the workload and, with --long-cursor, the
// cursor through it. It returns how many times the cursor's transaction
// was ended.
func (hb *handoverBench) runConfig(ctx context.Context, c holdConfig) (cursorEnded int, err error) {
	hb.progress("hold %s: deadline %v, grace %v", c.Label, c.Deadline, c.Grace)
	stopRouter, err := hb.startRouter(ctx, c)
	if err != nil {
		return 0, err
	}
	defer stopRouter()
	stopWrites := hb.startWrites(ctx)
	defer stopWrites()
	var lc *longCursor
	if hb.opt.longCursor {
		lc = &longCursor{dsn: hb.writes.ConnString(hb.proxyAddr)}
		cctx, stopCursor := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() { lc.run(cctx); close(done) }()
		defer func() { stopCursor(); <-done }()
	}
	time.Sleep(time.Second)
	for range hb.opt.handovers {
		s, err := hb.handover(ctx, c)
		if err != nil {
			return 0, err
		}
		hb.samples = append(hb.samples, s)
		time.Sleep(500 * time.Millisecond) // let the workload run on the new owner
	}
	if lc == nil {
		return 0, nil
	}
	if e := lc.err.Load(); e != nil {
		hb.progress("long cursor: last unexpected error: %v", *e)
	}
	return int(lc.ended.Load()), nil
}

// check reports the first bad flag, or returns the hold configs to run:
// the default, then each --variant.
func (bf benchHandoverOptions) check() ([]holdConfig, error) {
	configs := []holdConfig{{Label: "default", Deadline: migration.DefaultHoldDeadline, Grace: proxy.DefaultHoldGrace}}
	for _, v := range bf.variants {
		c, err := parseHoldVariant(v)
		if err != nil {
			return nil, cli.Usagef("bench handover: --variant %q: %v", v, err)
		}
		configs = append(configs, c)
	}
	switch {
	case bf.longCursor && bf.via != "proxy":
		return nil, cli.Usagef("bench handover: --long-cursor needs --via proxy")
	case len(bf.variants) > 0 && bf.via != "proxy":
		return nil, cli.Usagef("bench handover: --variant needs --via proxy (the grace is the proxy's)")
	}
	return configs, bf.checkLoad()
}

// checkLoad reports the first bad flag of the load and the migration.
func (bf benchHandoverOptions) checkLoad() error {
	switch {
	case bf.handovers < 1:
		return cli.Usagef("bench handover: --handovers must be at least 1")
	case bf.rate <= 0 || math.IsInf(bf.rate, 0) || math.IsNaN(bf.rate):
		return cli.Usagef("bench handover: --rate must be a positive number of transactions per second")
	case bf.workers < 1:
		return cli.Usagef("bench handover: --workers must be at least 1")
	case bf.sizeMB < 0:
		return cli.Usagef("bench handover: --size must not be negative")
	case bf.fence != string(migration.FenceReadOnly) && bf.fence != string(migration.FenceStop):
		return cli.Usagef("bench handover: --fence must be %q or %q", migration.FenceReadOnly, migration.FenceStop)
	case bf.walSegMB < 1 || bf.walSegMB > 1024 || bf.walSegMB&(bf.walSegMB-1) != 0:
		return cli.Usagef("bench handover: --wal-segsize must be a power of 2 from 1 to 1024")
	case bf.via != "proxy" && bf.via != "direct":
		return cli.Usagef("bench handover: --via must be proxy or direct")
	case bf.mode != string(migration.Live) && bf.mode != string(migration.StopAndCopy):
		return cli.Usagef("bench handover: --mode must be %q or %q", migration.Live, migration.StopAndCopy)
	}
	return nil
}

// handoverBench is bench handover's setup: the tenant on one of two hosts,
// the router the migrations hold and switch, and the ledger workload that
// writes to the tenant through it.
type handoverBench struct {
	opt      benchHandoverOptions
	progress func(format string, args ...any)

	hosts     *migHosts // hosts.current is the tenant
	router    migration.Router
	proxy     *proxyRouter // the router when --via proxy
	proxyAddr string       // its client address
	writes    *ledger.Workload
	n         int              // handovers so far, all configs
	samples   []handoverSample // every handover so far
}

// loadTenant starts the tenant on the first host, loads --size of filler
// and sets up the ledger's table.
func (hb *handoverBench) loadTenant(ctx context.Context) error {
	c, err := hb.hosts.initTenant(ctx, map[string]string{"shared_buffers": "32MB"}, hb.opt.walSegMB)
	if err != nil {
		return err
	}
	hb.progress("loading about %d MB", hb.opt.sizeMB)
	if err := migLoadFiller(ctx, c, hb.opt.sizeMB); err != nil {
		return err
	}
	return ledger.Setup(ctx, c.ConnString("postgres"))
}

// startRouter makes the router of --via (a gate router, or an in-process
// sluice proxy) and the workload that goes through it, and returns what
// stops the router.
func (hb *handoverBench) startRouter(ctx context.Context, c holdConfig) (stop func(), err error) {
	if hb.opt.via == "direct" {
		g := migration.NewGateRouter(hb.hosts.current.Addr())
		hb.router, hb.writes.Router = g, g
		hb.writes.ConnString = func(addr string) string { return "postgres://postgres@" + addr + "/postgres?sslmode=disable" }
		return func() {}, nil
	}
	p, err := proxy.New(proxy.Config{Listen: "127.0.0.1:0", Trust: true, HoldGrace: c.Grace,
		Routes: []proxy.RouteConfig{{Tenant: "bench", Addr: hb.hosts.current.Addr(), Database: "postgres"}}})
	if err != nil {
		return nil, err
	}
	pctx, stopP := context.WithCancel(ctx)
	if err := p.Start(pctx); err != nil {
		stopP()
		return nil, err
	}
	hb.proxy, hb.proxyAddr = &proxyRouter{p: p}, p.Addr()
	hb.router, hb.writes.Router = hb.proxy, fixedRoute(p.Addr())
	hb.writes.ConnString = func(addr string) string { return "postgres://postgres@" + addr + "/bench?sslmode=disable" }
	return func() { p.Close(); stopP() }, nil
}

// startWrites starts the ledger workload and returns what stops it and
// waits for it to end; stopping twice is harmless.
func (hb *handoverBench) startWrites(ctx context.Context) (stop func()) {
	wctx, stopW := context.WithCancel(ctx)
	wdone := make(chan struct{})
	go func() { hb.writes.Run(wctx); close(wdone) }()
	return func() { stopW(); <-wdone }
}

// handover runs the bench's next migration of the tenant to the other host,
// holding with c, and returns its figures: the freeze (live) or downtime
// (stop-and-copy), the others' stall, the hold's counters.
func (hb *handoverBench) handover(ctx context.Context, c holdConfig) (handoverSample, error) {
	bf, b := hb.opt, hb.hosts
	i := hb.n
	hb.n++
	host := b.hosts[(i+1)%2]
	rec := migration.New(fmt.Sprintf("h%d", i+1), "bench", b.names[i%2], b.names[(i+1)%2], migration.Mode(bf.mode), time.Now())
	rec.HoldDeadline = c.Deadline
	if rec.Mode == migration.Live {
		rec.Fence = migration.FenceMode(bf.fence)
	}
	tgt := pg.NewLocalTarget(host, pgcluster.Options{})
	out, err := b.migrate(ctx, rec, tgt, hb.router, fmt.Sprintf("bench handover: migration %d", i+1))
	if err != nil {
		return handoverSample{}, err
	}
	s := handoverSample{Config: c.Label, N: i + 1, Freeze: float64(out.Freeze) / float64(time.Millisecond), Others: -1}
	if d, n := hb.writes.Longest(out.HeldAt, out.ReleasedAt); n > 0 {
		s.Others = float64(d) / float64(time.Millisecond)
	}
	if hb.proxy != nil {
		hr := hb.proxy.last
		s.Hold, s.Cancelled, s.Terminated, s.TerminatedIdle = hr.WaitedMS, hr.Cancelled, hr.Terminated, hr.TerminatedIdle
	}
	st := hb.writes.Stats()
	if rec.Mode == migration.Live {
		hb.progress("handover %d (%s) %s→%s: freeze %.1f ms, others' stall %.1f ms (hold %.1f, fence %.1f, replay %.1f, promote %.1f; cancelled %d, terminated %d; snapshot %d MB; acknowledged writes so far %d)",
			i+1, c.Label, rec.Source, rec.Target, s.Freeze, s.Others, migMs(out.HeldAt, out.FlushAt), migMs(out.FlushAt, out.FencedAt), migMs(out.FencedAt, out.ReplayedAt),
			migMs(out.ReplayedAt, out.PromotedAt), s.Cancelled, s.Terminated, out.SnapshotBytes>>20, st.Acknowledged)
	} else {
		hb.progress("stop-and-copy %d %s→%s: downtime %.1f ms (hold+stop %.1f, copy %.1f of %d MB, start %.1f; acknowledged writes so far %d)",
			i+1, rec.Source, rec.Target, s.Freeze, migMs(out.HeldAt, out.FencedAt), migMs(out.FencedAt, out.CopiedAt),
			out.CopyBytes>>20, migMs(out.CopiedAt, out.PromotedAt), st.Acknowledged)
	}
	return s, nil
}

// printBenchHandover prints res, one figure a line.
func printBenchHandover(o io.Writer, res benchHandoverResult) {
	for _, r := range res.Runs {
		fmt.Fprintf(o, "hold %s (deadline %.0f ms, grace %.0f ms): %d handovers\n", r.Label, r.DeadlineMs, r.GraceMs, r.Handovers)
		fmt.Fprintf(o, "  freeze          p50 %.1f  p99 %.1f  max %.1f ms\n", r.FreezeP50, r.FreezeP99, r.FreezeMax)
		fmt.Fprintf(o, "  others' stall   p50 %.1f  p99 %.1f  max %.1f ms\n", r.OthersP50, r.OthersP99, r.OthersMax)
		fmt.Fprintf(o, "  cancelled %d, terminated %d, long cursor ended %d\n", r.Cancelled, r.Terminated, r.CursorEnded)
	}
	fmt.Fprintf(o, "writes acknowledged  %d\n", res.WritesAcknowledged)
	fmt.Fprintf(o, "writes missing       %d\n", res.WritesMissing)
	fmt.Fprintf(o, "writes duplicated    %d\n", res.WritesDuplicated)
}

// migPercentile is the nearest-rank p-th percentile of xs (0 for none).
func migPercentile(xs []float64, p float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	k := int(math.Ceil(p/100*float64(len(s)))) - 1
	return s[max(0, min(k, len(s)-1))]
}

func migRound1(x float64) float64 { return math.Round(x*10) / 10 }

// migHosts is a temp directory with two "host" directories a tenant moves
// between, and the tenant's current cluster (stopped on close).
type migHosts struct {
	dir      string
	hosts    [2]string
	names    [2]string
	keep     bool
	current  *pgcluster.Cluster
	progress func(string, ...any)
}

func newMigHosts(prefix string, keep bool, progress func(string, ...any)) (*migHosts, error) {
	dir, err := os.MkdirTemp("", prefix)
	if err != nil {
		return nil, err
	}
	b := &migHosts{dir: dir, keep: keep, names: [2]string{"hostA", "hostB"}, progress: progress}
	uid, gid, asRoot, err := pgcluster.OSUserIDs("")
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	os.Chmod(dir, 0o755)
	for i, n := range b.names {
		b.hosts[i] = filepath.Join(dir, n)
		if err := os.MkdirAll(b.hosts[i], 0o755); err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
		if asRoot {
			os.Chown(b.hosts[i], uid, gid)
		}
	}
	if asRoot {
		os.Chown(dir, uid, gid)
	}
	return b, nil
}

// initTenant initdb's the tenant on hostA (with a WAL segment size of
// walSegMB), starts it and returns it.
func (b *migHosts) initTenant(ctx context.Context, settings map[string]string, walSegMB int) (*pgcluster.Cluster, error) {
	b.progress("initdb and start PostgreSQL in %s", b.dir)
	c, err := pgcluster.Init(ctx, filepath.Join(b.hosts[0], "tenant"), pgcluster.Options{Settings: settings, WALSegSizeMB: walSegMB})
	if err != nil {
		return nil, err
	}
	if err := c.Start(ctx); err != nil {
		return nil, err
	}
	b.current = c
	return c, nil
}

// migrate moves the tenant from b.current to tgt with rec, holding and
// switching router, and makes the target's cluster current. A failed
// migration's error starts with op.
func (b *migHosts) migrate(ctx context.Context, rec migration.Record, tgt migration.Target, router migration.Router, op string) (migration.Record, error) {
	src := pg.NewLocalSource(b.current)
	out, err := migration.Run(ctx, rec, migration.Env{Source: src, Target: tgt, Router: router})
	src.Close()
	if err != nil {
		return out, fmt.Errorf("%s: %w", op, err)
	}
	c, err := pgcluster.Open(out.TargetDir, pgcluster.Options{Port: out.TargetPort})
	if err != nil {
		return out, err
	}
	b.current = c
	return out, nil
}

// close stops every postmaster under the temp directory and removes it,
// unless kept.
func (b *migHosts) close() {
	// Stop every postmaster under the temp directory (the current tenant, and
	// anything a failed migration left behind).
	ms, _ := filepath.Glob(filepath.Join(b.dir, "*", "*", "postmaster.pid"))
	for _, m := range ms {
		if c, err := pgcluster.Open(filepath.Dir(m), pgcluster.Options{Port: 1}); err == nil {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			c.Stop(ctx, pgcluster.Immediate)
			cancel()
		}
	}
	if b.keep {
		b.progress("keeping %s", b.dir)
		return
	}
	os.RemoveAll(b.dir)
}

// migLoadFiller creates table filler of about mb MB.
func migLoadFiller(ctx context.Context, c *pgcluster.Cluster, mb int) error {
	conn, err := pgx.Connect(ctx, c.ConnString("postgres"))
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	// A row of 200 bytes of padding takes about 250 bytes on disk: 4000 rows per MB.
	_, err = conn.Exec(ctx, "CREATE TABLE filler AS SELECT g AS id, repeat(md5(g::text), 6) AS pad FROM generate_series(1, $1::int) g", mb*4000)
	if err != nil {
		return fmt.Errorf("load filler: %w", err)
	}
	_, err = conn.Exec(ctx, "CHECKPOINT")
	return err
}

// proxyRouter is migration.Router over an in-process sluice proxy. It
// neither prepares sessions nor lists backends (no early fence), as the
// benchmark has always run. last is the last hold's answer.
type proxyRouter struct {
	p    *proxy.Proxy
	last proxyclient.HoldResult
}

var _ migration.Router = (*proxyRouter)(nil)

func (r *proxyRouter) Prepare(context.Context, string, string) error { return migration.ErrUnsupported }
func (r *proxyRouter) Backends(context.Context, string) ([]int, error) {
	return nil, migration.ErrUnsupported
}

// Hold holds the tenant and names the backends the proxy holds idle.
func (r *proxyRouter) Hold(ctx context.Context, tenant string, deadline time.Duration) ([]int, error) {
	res, err := r.p.Hold(ctx, tenant, deadline)
	if err != nil {
		return nil, err
	}
	r.last = res
	if res.InFlight > 0 {
		return nil, fmt.Errorf("proxy hold %s: %d transactions still in flight", tenant, res.InFlight)
	}
	return res.IdleBackends, nil
}
func (r *proxyRouter) Switch(_ context.Context, tenant, addr string) error {
	return r.p.Switch(tenant, addr, "")
}

// Release releases the tenant; it does not say when (zero time).
func (r *proxyRouter) Release(_ context.Context, tenant string) (time.Time, error) {
	return time.Time{}, r.p.Release(tenant)
}

// Holding asks the proxy whether it holds the tenant.
func (r *proxyRouter) Holding(ctx context.Context, tenant string) (bool, error) {
	rs, err := r.p.APIClient().Routes(ctx)
	if err != nil {
		return false, err
	}
	for _, rt := range rs {
		if rt.Tenant == tenant {
			return rt.Held, nil
		}
	}
	return false, nil
}

// fixedRoute is a ledger.Router that always answers the same address (the
// proxy's) and never waits: the proxy does the holding.
type fixedRoute string

func (f fixedRoute) Enter(ctx context.Context) (string, error) { return string(f), ctx.Err() }
func (fixedRoute) Leave()                                      {}

func migMs(a, b time.Time) float64 { return float64(b.Sub(a)) / float64(time.Millisecond) }
