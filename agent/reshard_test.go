package agent

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/sluicedb/sluice/agent/client"
	"github.com/sluicedb/sluice/keyspace"
	"github.com/sluicedb/sluice/proxy"
)

// The keyspace of the reshard tests: acct sharded by k over p1, p2, p3
// (tenants r1, r2, r3 of one agent), acct_log following it, ref copied.
const (
	reshardSchema = `
CREATE TABLE acct (k int PRIMARY KEY, bal int NOT NULL, pad text NOT NULL);
CREATE TABLE acct_log (k int NOT NULL, n int NOT NULL, PRIMARY KEY (k, n));
CREATE TABLE ref (id int PRIMARY KEY);`
	reshardKeys = 3000
)

var reshardPlan0 = keyspace.PlanSpec{"acct": {"p1": "[,1000)", "p2": "[1000,2000)", "p3": "[2000,)"}}

// reshardRig is one agent with three tenants holding keyspace bank, and a
// proxy following the agent's catalog; or two agents (a1, which holds the
// keyspace, and its peer a2) sharing the tenants, and a proxy following
// both catalogs.
type reshardRig struct {
	cfg     Config
	a       *testAgent
	peerCfg Config
	peer    *testAgent // nil: one agent
	px      *proxy.Proxy
	pxCfg   proxy.Config
	cs      string            // the keyspace through the proxy
	ports   map[string]int    // partition → tenant port
	su      map[string]string // partition → superuser connection string (its "postgres" database)
}

// newReshardRig starts the one-agent rig with pad bytes of padding per
// acct row.
func newReshardRig(t *testing.T, pad int) *reshardRig { return newReshardRigOn(t, pad, nil) }

// newReshardRigOn starts the rig; on names the agent ("a1" or "a2") of
// each partition (nil: one agent, a1).
func newReshardRigOn(t *testing.T, pad int, on map[string]string) *reshardRig {
	t.Helper()
	r := &reshardRig{ports: map[string]int{}, su: map[string]string{}}
	catalogs := []string{}
	if on == nil {
		r.cfg = newTestConfig(t, "a1")
		r.cfg.Listen = freeAddrExcept(t)
		stopTenants(t, r.cfg.Root)
	} else {
		r.cfg, r.peerCfg = agentPair(t)
		catalogs = append(catalogs, "http://"+r.peerCfg.Listen)
	}
	catalogs = append([]string{"http://" + r.cfg.Listen}, catalogs...)
	r.pxCfg = proxy.Config{Listen: freeAddrExcept(t, r.cfg.Listen, r.peerCfg.Listen), APIListen: "127.0.0.1:0", Users: testProxyUsers(),
		Catalogs: catalogs, CatalogTokenFile: r.cfg.PeerTokenFile,
		CatalogPoll: 200 * time.Millisecond, TxLog: filepath.Join(t.TempDir(), "txlog"), Logf: t.Logf}
	r.startProxy(t)
	r.a = startAgent(t, r.cfg)
	if on != nil {
		r.peer = startAgent(t, r.peerCfg)
	}
	ctx := ctxT(t)
	var parts []keyspace.Partition
	for i := 1; i <= 3; i++ {
		part, ag := fmt.Sprint("p", i), r.a
		if on[part] == "a2" {
			ag = r.peer
		}
		tn, err := ag.c.CreateTenant(ctx, client.CreateTenant{ID: int64(i), Name: fmt.Sprint("r", i), Users: testUsers})
		if err != nil {
			t.Fatal(err)
		}
		r.ports[part], r.su[part] = tn.Port, ag.ConnString(tn.Port, "postgres")
		parts = append(parts, keyspace.Partition{Name: part, Tenant: fmt.Sprint("r", i), Agent: on[part]})
	}
	ks := &keyspace.Keyspace{Name: "bank", Schema: reshardSchema, Plan: reshardPlan0, Partitions: parts,
		Tables: []keyspace.Table{
			{Name: "acct", Kind: keyspace.Sharded, Column: "k", Type: keyspace.Int},
			{Name: "acct_log", Kind: keyspace.CoPartitioned, Column: "k", Root: "acct"},
			{Name: "ref", Kind: keyspace.Reference},
		}}
	if err := ks.Validate(); err != nil {
		t.Fatal(err)
	}
	if _, err := r.a.c.CreateKeyspace(ctx, ks); err != nil {
		t.Fatal(err)
	}
	for i, lo := range []int{0, 1000, 2000} {
		sqlOn(t, r.ports[fmt.Sprint("p", i+1)],
			fmt.Sprintf("INSERT INTO acct SELECT k, 0, repeat('x', %d) FROM generate_series(%d, %d) k", pad, lo, lo+999),
			"INSERT INTO ref SELECT generate_series(1, 10)", "ANALYZE")
	}
	r.cs = fmt.Sprintf("postgres://%s:%s@%s/bank?sslmode=disable", testUsers[0].Name, testUsers[0].Password, r.pxCfg.Listen)
	waitBankRouted(t, r.cs)
	return r
}

// waitBankRouted waits until a read through the proxy reaches every
// partition (the proxy has learnt the keyspace and its tenants' routes).
func waitBankRouted(t *testing.T, cs string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	var err error
	for time.Now().Before(deadline) {
		var conn *pgx.Conn
		if conn, err = pgx.Connect(ctxT(t), cs); err == nil {
			var ks []int
			rows, _ := conn.Query(ctxT(t), "SELECT k FROM acct WHERE k IN (1, 1001, 2001)")
			ks, err = pgx.CollectRows(rows, pgx.RowTo[int])
			conn.Close(ctxT(t))
			if err == nil && len(ks) == 3 {
				return
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("the proxy never routed keyspace bank: %v", err)
}

func (r *reshardRig) startProxy(t *testing.T) {
	t.Helper()
	px, err := proxy.New(r.pxCfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := px.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	if r.px == nil {
		t.Cleanup(func() { r.px.Close() })
		r.cfg.Proxy, r.cfg.ProxyTokenFile = "http://"+px.APIAddr(), writeTokenFile(t, px.Token())
	}
	r.px = px
}

// bankLoad increments balances of random keys through the router and
// appends to their logs: a ledger of acknowledged increments per key, and
// of those whose outcome is unknown (the connection broke at COMMIT).
type bankLoad struct {
	cs      string
	mu      sync.Mutex
	acked   map[int]int
	unknown map[int]int
	logs    map[int]int // acknowledged acct_log rows per key
	ops     int
	missed  int                  // UPDATEs that found no row (a misrouted transaction)
	errs    map[string]int       // refusals by SQLSTATE or message
	pick    func(*rand.Rand) int // the key of an operation (default: uniform)
}

func newBankLoad(cs string) *bankLoad {
	return &bankLoad{cs: cs, acked: map[int]int{}, unknown: map[int]int{}, logs: map[int]int{}, errs: map[string]int{}}
}

func (l *bankLoad) run(ctx context.Context, sessions int) {
	var wg sync.WaitGroup
	for w := range sessions {
		wg.Add(1)
		go func() { defer wg.Done(); l.session(ctx, uint64(w)) }()
	}
	wg.Wait()
}

func (l *bankLoad) session(ctx context.Context, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 9))
	var conn *pgx.Conn
	defer func() {
		if conn != nil {
			conn.Close(context.Background())
		}
	}()
	for n := int(seed) << 20; ctx.Err() == nil; n++ {
		if conn == nil {
			c, err := pgx.Connect(ctx, l.cs)
			if err != nil {
				time.Sleep(50 * time.Millisecond)
				continue
			}
			conn = c
		}
		k := rng.IntN(reshardKeys)
		if l.pick != nil {
			k = l.pick(rng)
		}
		octx, cancel := context.WithTimeout(context.Background(), opTimeout)
		var err error
		withLog := n%3 == 0
		if withLog {
			err = pgx.BeginFunc(octx, conn, func(tx pgx.Tx) error {
				if err := updated(tx.Exec(octx, "UPDATE acct SET bal = bal + 1 WHERE k = $1", k)); err != nil {
					return err
				}
				_, err := tx.Exec(octx, "INSERT INTO acct_log (k, n) VALUES ($1, $2)", k, n)
				return err
			})
		} else {
			err = updated(conn.Exec(octx, "UPDATE acct SET bal = bal + 1 WHERE k = $1", k))
		}
		cancel()
		l.note(k, withLog, err)
		if err != nil && conn.IsClosed() {
			conn = nil
		}
	}
}

// mostlyStaying picks keys that reshardPlan1 leaves where they are, and
// one in 50 anywhere: the asynchronous pulls do most of the moving.
func mostlyStaying(rng *rand.Rand) int {
	if rng.IntN(50) == 0 {
		return rng.IntN(reshardKeys)
	}
	return []int{rng.IntN(500), 1000 + rng.IntN(1000), 2500 + rng.IntN(500)}[rng.IntN(3)]
}

// updated fails an UPDATE that found no row: every key exists on its
// owner, so a miss is a transaction sent where the row is not.
func updated(tag pgconn.CommandTag, err error) error {
	if err == nil && tag.RowsAffected() != 1 {
		return fmt.Errorf("UPDATE found %d rows", tag.RowsAffected())
	}
	return err
}

// note records an operation's outcome: a server's error (SQLSTATE) means
// it did not commit; a broken connection leaves it unknown, and so does a
// connection exception the router reports for one (class 08: 08006, or
// 08007 at COMMIT) or a FATAL that ends the session (a crashed or
// terminated server backend), either of which may come after the commit.
func (l *bankLoad) note(k int, withLog bool, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.ops++
	var pe *pgconn.PgError
	switch {
	case err == nil:
		l.acked[k]++
		if withLog {
			l.logs[k]++
		}
	case errors.As(err, &pe) && !strings.HasPrefix(pe.Code, "08") && pe.Severity != "FATAL" && pe.Severity != "PANIC":
		l.errs[pe.Code+" "+pe.Message]++
	case strings.HasPrefix(err.Error(), "UPDATE found"):
		l.missed++
		l.errs[err.Error()]++
	default:
		l.unknown[k]++
		l.errs[err.Error()]++
	}
}

func (l *bankLoad) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, v := range l.acked {
		n += v
	}
	return n
}

func (l *bankLoad) waitAcked(t *testing.T, n int) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for l.count() < n {
		if time.Now().After(deadline) {
			t.Fatalf("load: %d of %d acknowledged in a minute; errors %v", l.count(), n, l.errs)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// verify checks every key on every partition against the ledger: on its
// owner under plan only, its balance between the acknowledged increments
// and those plus the unknown ones, its log rows at least the acknowledged.
func (l *bankLoad) verify(t *testing.T, r *reshardRig, plan keyspace.PlanSpec) {
	t.Helper()
	ks, err := (&keyspace.Keyspace{Name: "bank", Partitions: []keyspace.Partition{{Name: "p1", Tenant: "r1"}, {Name: "p2", Tenant: "r2"}, {Name: "p3", Tenant: "r3"}},
		Tables: []keyspace.Table{{Name: "acct", Kind: keyspace.Sharded, Column: "k", Type: keyspace.Int}}, Plan: plan}), error(nil)
	if err = ks.Validate(); err != nil {
		t.Fatal(err)
	}
	ctx := ctxT(t)
	seen := map[int]string{}
	logs := map[int]int{}
	for part, port := range r.ports {
		conn, err := pgx.Connect(ctx, appConnString(port))
		if err != nil {
			t.Fatal(err)
		}
		rows, _ := conn.Query(ctx, "SELECT k, bal FROM acct")
		var k, bal int
		_, err = pgx.ForEachRow(rows, []any{&k, &bal}, func() error {
			if prev, ok := seen[k]; ok {
				return fmt.Errorf("key %d on %s and %s", k, prev, part)
			}
			seen[k] = part
			owner, _ := ks.Owner("acct", keyspace.IntKey(int64(k)))
			if owner != part {
				return fmt.Errorf("key %d on %s, owner %s", k, part, owner)
			}
			if bal < l.acked[k] || bal > l.acked[k]+l.unknown[k] {
				return fmt.Errorf("key %d on %s: balance %d, acknowledged %d (+%d unknown)", k, part, bal, l.acked[k], l.unknown[k])
			}
			return nil
		})
		if err == nil {
			rows, _ = conn.Query(ctx, "SELECT k, count(*)::int FROM acct_log GROUP BY k")
			var n int
			_, err = pgx.ForEachRow(rows, []any{&k, &n}, func() error {
				if owner, _ := ks.Owner("acct", keyspace.IntKey(int64(k))); owner != part {
					return fmt.Errorf("acct_log of key %d on %s, owner %s", k, part, owner)
				}
				logs[k] += n
				return nil
			})
		}
		conn.Close(ctx)
		if err != nil {
			t.Fatal(err)
		}
	}
	if l.missed > 0 {
		t.Fatalf("%d UPDATEs found no row: sent to a partition the key had not reached", l.missed)
	}
	if len(seen) != reshardKeys {
		t.Fatalf("%d keys found, want %d", len(seen), reshardKeys)
	}
	for k, n := range l.logs {
		if logs[k] < n {
			t.Fatalf("key %d: %d log rows, %d acknowledged", k, logs[k], n)
		}
	}
	t.Logf("ledger exact: %d operations, %d acknowledged increments over %d keys; refusals %v", l.ops, l.count(), len(l.acked), l.errs)
}

// waitReshard follows keyspace bank's reconfiguration until stop says so
// or it ends.
func waitReshard(t *testing.T, c *client.Client, timeout time.Duration, stop func(client.ReshardStatus) bool) client.ReshardStatus {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var last client.ReshardStatus
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		st, err := c.ReshardStatus(ctx, "bank", false)
		cancel()
		if err == nil {
			last = st
			if !activePhase(st.Phase) || (stop != nil && stop(st)) {
				return st
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("reconfiguration did not finish in %s: %+v", timeout, last)
	return last
}

// fencesGone fails if a partition still has fence rows.
func (r *reshardRig) fencesGone(t *testing.T) {
	t.Helper()
	ctx := ctxT(t)
	for part, cs := range r.su {
		conn, err := pgx.Connect(ctx, cs)
		if err != nil {
			t.Fatal(err)
		}
		var n int
		err = conn.QueryRow(ctx, "SELECT count(*) FROM sluice_fence").Scan(&n)
		conn.Close(ctx)
		if err != nil || n != 0 {
			t.Fatalf("partition %s: %d fence rows left (%v)", part, n, err)
		}
	}
}

// doneUnderLoad waits for the reconfiguration to end done, lets the load
// acknowledge 300 more operations on the new plan, stops it, and checks
// the ledger against reshardPlan1, the keyspace's placement and that no
// fence is left.
func (r *reshardRig) doneUnderLoad(t *testing.T, load *bankLoad, stop func()) {
	t.Helper()
	st := waitReshard(t, r.a.c, 3*time.Minute, nil)
	if st.Phase != client.PhaseDone {
		t.Fatalf("reconfiguration ended %+v", st)
	}
	load.waitAcked(t, load.count()+300)
	stop()
	load.verify(t, r, reshardPlan1)
	r.checkClean(t)
	r.fencesGone(t)
}

func (r *reshardRig) checkClean(t *testing.T) {
	t.Helper()
	ck, err := r.a.c.CheckKeyspace(ctxT(t), "bank")
	if err != nil || !ck.OK || ck.Misplaced != 0 {
		t.Fatalf("keyspace check: %+v, %v", ck, err)
	}
}

var reshardPlan1 = keyspace.PlanSpec{"acct": {"p1": "[,500)", "p2": "[500,2500)", "p3": "[2500,)"}}

// TestReshardLive: bad plans refused with nothing changed; then a plan
// applied under load through the proxy (Squall's fixed pace, small
// chunks: many reactive and asynchronous pulls), a second one refused
// while it runs; at the end the ledger is exact, the keyspace check clean,
// no fence left, and the catalog's plan the new one.
func TestReshardLive(t *testing.T) {
	r := newReshardRig(t, 300)
	ctx := ctxT(t)
	for _, bad := range []struct {
		plan keyspace.PlanSpec
		want string
	}{
		{keyspace.PlanSpec{"acct": {"p1": "[,'m')", "p2": "['m',)"}}, "int"},
		{keyspace.PlanSpec{"acct": {"p1": "[,500)", "p2": "[500,2500)"}}, "no partition"},
		{keyspace.PlanSpec{"acct": {"p1": "[,1500)", "p2": "[1000,2500)", "p3": "[2500,)"}}, "overlap"},
		{reshardPlan0, "moves no key"},
	} {
		_, err := r.a.c.Reshard(ctx, "bank", client.ReshardRequest{Plan: bad.plan, Method: client.MethodSquall})
		if client.StatusOf(err) != 400 || !strings.Contains(err.Error(), bad.want) || strings.Contains(err.Error(), "\n") {
			t.Fatalf("plan %v: %v; want a one-line 400 naming %q", bad.plan, err, bad.want)
		}
	}
	if _, err := r.a.c.Reshard(ctx, "bank", client.ReshardRequest{Plan: reshardPlan1}); client.StatusOf(err) != 400 || !strings.Contains(err.Error(), "setpoint") {
		t.Fatalf("controlled without a setpoint: %v", err)
	}
	if _, err := r.a.c.ReshardStatus(ctx, "bank", false); client.StatusOf(err) != 404 {
		t.Fatalf("status after refusals: %v, want 404 (nothing recorded)", err)
	}
	r.fencesGone(t)
	// Another driver holds the keyspace's lock: refused, nothing recorded.
	lk, err := r.a.Catalog().TryLock(ctx, reshardLock("bank"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.a.c.Reshard(ctx, "bank", client.ReshardRequest{Plan: reshardPlan1, Method: client.MethodReactive}); client.StatusOf(err) != 409 || !strings.Contains(err.Error(), "another driver") {
		t.Fatalf("a reconfiguration while another driver holds the keyspace: %v, want 409", err)
	}
	lk.Unlock(ctx)
	if _, err := r.a.c.ReshardStatus(ctx, "bank", false); client.StatusOf(err) != 404 {
		t.Fatalf("status after the refusal: %v, want 404 (nothing recorded)", err)
	}

	load := newBankLoad(r.cs)
	stop := background(func(ctx context.Context) { load.run(ctx, 4) })
	defer stop()
	load.waitAcked(t, 300)
	st, err := r.a.c.Reshard(ctx, "bank", client.ReshardRequest{Plan: reshardPlan1, Method: client.MethodReactive, ChunkBytes: 64 << 10})
	if err != nil {
		t.Fatal(err)
	}
	if st.Progress.Chunks < 6 {
		t.Fatalf("chunks: %+v; want the 1000 moving keys (~330 KB) cut into 64 KiB chunks", st.Progress)
	}
	if _, err := r.a.c.Reshard(ctx, "bank", client.ReshardRequest{Plan: reshardPlan0, Method: client.MethodSquall}); client.StatusOf(err) != 409 {
		t.Fatalf("a second reconfiguration while one runs: %v, want 409", err)
	}
	if _, err := r.a.c.DeleteKeyspace(ctx, "bank"); client.StatusOf(err) != 409 {
		t.Fatalf("deleting the keyspace while it is reconfigured: %v, want 409", err)
	}
	if _, err := r.a.c.SetReshardPace(ctx, "bank", client.ReshardPace{Method: client.MethodControlled}); client.StatusOf(err) != 400 {
		t.Fatalf("re-pacing to controlled without a setpoint: %v, want 400", err)
	}
	if _, err := r.a.c.SetReshardPace(ctx, "bank", client.ReshardPace{Method: client.MethodSquall, PaceDelayMs: 10}); err != nil {
		t.Fatalf("re-pacing: %v", err)
	}
	st = waitReshard(t, r.a.c, 3*time.Minute, nil)
	n := load.count()
	load.waitAcked(t, n+300) // the load goes on on the new plan
	stop()
	if st.Phase != client.PhaseDone || st.Progress.Complete != st.Progress.Chunks || st.Progress.Cleaned != st.Progress.Chunks {
		t.Fatalf("reconfiguration ended %+v", st)
	}
	t.Logf("reconfiguration: %d chunks, switch hold %.1f ms, %s, %d reactive and %d asynchronous pulls, %d bytes copied",
		st.Progress.Chunks, st.SwitchMs, st.Finished.Sub(st.Started), st.ReactivePulls, st.AsyncPulls, st.BytesCopied)
	load.verify(t, r, reshardPlan1)
	r.checkClean(t)
	r.fencesGone(t)
	ks, err := r.a.c.Keyspace(ctx, "bank")
	if err != nil || ks.Epoch != 2 || ks.Plan["acct"]["p2"] != "[500,2500)" {
		t.Fatalf("keyspace after: %+v, %v", ks, err)
	}
}

// killPostmaster kills -9 the postmaster of tenant id of agent a.
func killPostmaster(t *testing.T, a *testAgent, id int64) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(a.cfg.Root, "tenants", strconv.FormatInt(id, 10), "postmaster.pid"))
	if err != nil {
		t.Fatalf("postmaster pid: %v", err)
	}
	line, _, _ := strings.Cut(string(b), "\n")
	pid, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
}

// TestReshardCrashes: in mid-reconfiguration under load, the destination's
// postmaster is killed -9, the driving agent stops abruptly and restarts,
// and the proxy restarts; each time the reconfiguration resumes (a chunk
// being pulled is redone), and at the end the ledger is exact and the
// keyspace check clean.
func TestReshardCrashes(t *testing.T) {
	r := newReshardRig(t, 1500) // below the TOAST threshold: stored as is, ~2 MB moving
	ctx := ctxT(t)
	load := newBankLoad(r.cs)
	load.pick = mostlyStaying
	stop := background(func(ctx context.Context) { load.run(ctx, 4) })
	defer stop()
	load.waitAcked(t, 300)
	// The control loop paces the pulls (at most 1 MB/s: the crashes land
	// in mid-reconfiguration); it restarts with the resumed driver.
	ctl := &client.Control{SetpointMs: 20, MaxRate: 1 << 20}
	if _, err := r.a.c.Reshard(ctx, "bank", client.ReshardRequest{Plan: reshardPlan1, Control: ctl, ChunkBytes: 64 << 10}); err != nil {
		t.Fatal(err)
	}
	progressed := func(n int) func(client.ReshardStatus) bool {
		return func(st client.ReshardStatus) bool { return st.Phase == client.PhaseMoving && st.Progress.Complete >= n }
	}
	st := waitReshard(t, r.a.c, time.Minute, progressed(1))
	killPostmaster(t, r.a, 2) // p2: the destination of every chunk
	t.Logf("killed p2's postmaster at %d/%d chunks (rate %.0f B/s, latency %.1f ms, setpoint %.0f ms)", st.Progress.Complete, st.Progress.Chunks, st.Rate, st.LatencyMs, st.SetpointMs)
	st = waitReshard(t, r.a.c, 2*time.Minute, progressed(st.Progress.Complete+2))

	r.a.stop() // the driver stops in mid-pull; the proxy's reactive pulls fail until it is back
	t.Logf("agent stopped at %d/%d chunks", st.Progress.Complete, st.Progress.Chunks)
	time.Sleep(500 * time.Millisecond)
	r.a = startAgent(t, r.cfg)
	st = waitReshard(t, r.a.c, 2*time.Minute, progressed(st.Progress.Complete+2))

	r.px.Close()
	t.Logf("proxy restarted at %d/%d chunks (rate %.0f B/s, latency %.1f ms, setpoint %.0f ms)", st.Progress.Complete, st.Progress.Chunks, st.Rate, st.LatencyMs, st.SetpointMs)
	r.startProxy(t)
	r.doneUnderLoad(t, load, stop)
}
