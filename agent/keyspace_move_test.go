package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sluicedb/sluice/agent/client"
	"github.com/sluicedb/sluice/migration"
	proxyclient "github.com/sluicedb/sluice/proxy/client"
)

// The keyspace of TestKeyspacePartitionMigrates: kv sharded by k (p1 owns
// keys below ksSplit), kv_hist following kv's key, ref copied to both.
const (
	ksMoveSchema = `
CREATE TABLE kv (k int PRIMARY KEY, v text);
CREATE TABLE kv_hist (k int, n int, PRIMARY KEY (k, n));
CREATE TABLE ref (id int PRIMARY KEY, name text);`
	ksSplit = 1_000_000
)

func ksMoveSpec(t *testing.T) []byte {
	t.Helper()
	b, err := json.Marshal(map[string]any{
		"name": "orders",
		"partitions": []map[string]any{
			{"name": "p1", "tenant": "ks-a"},
			{"name": "p2", "tenant": "ks-b", "agent": "a2"},
		},
		"tables": []map[string]any{
			{"name": "kv", "kind": "sharded", "column": "k", "type": "int"},
			{"name": "kv_hist", "kind": "copartitioned", "column": "k", "root": "kv"},
			{"name": "ref", "kind": "reference"},
		},
		"schema": ksMoveSchema,
		"plan":   map[string]any{"kv": map[string]string{"p1": fmt.Sprintf("[1,%d)", ksSplit), "p2": fmt.Sprintf("[%d,)", ksSplit)}},
	})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestKeyspacePartitionMigrates: a keyspace over two agents (p1 on a1's
// tenant ks-a, p2 on a2's ks-b; the keyspace is a1's) under writes through
// the proxy's router — single-partition transactions on both, transactions
// spanning both (two-phase commit) and reference-table writes — while ks-a
// migrates from a1 to a2 with the proxy handing it over. Afterwards every
// acknowledged write is on its owner partition only, nothing is left
// prepared, the keyspace's check (coordinated by a1, which no longer runs
// p1) passes, and the proxy keeps the keyspace's latency per partition and
// the moved tenant's on its new server. What the router's clients saw
// during the handover is logged, with the router's server sessions the
// hold named idle (the fence spared them).
func TestKeyspacePartitionMigrates(t *testing.T) {
	c1, c2 := agentPair(t)
	px := catalogProxy(t, &c1, c2)
	defer px.Close()
	a1, a2 := startAgent(t, c1), startAgent(t, c2)
	ctx := ctxT(t)
	ta, err := a1.c.CreateTenant(ctx, client.CreateTenant{ID: 1, Name: "ks-a", Users: testUsers})
	if err != nil {
		t.Fatal(err)
	}
	tb, err := a2.c.CreateTenant(ctx, client.CreateTenant{ID: 2, Name: "ks-b", Users: testUsers})
	if err != nil {
		t.Fatal(err)
	}
	if err := postKeyspace(ctx, a1.c, ksMoveSpec(t)); err != nil {
		t.Fatal(err)
	}
	cs := fmt.Sprintf("postgres://%s:%s@%s/orders?sslmode=disable", testUsers[0].Name, testUsers[0].Password, px.Addr())
	waitKeyspaceRouted(t, cs)

	load := &ksLoad{cs: cs}
	stop := background(func(ctx context.Context) { load.run(ctx, 4) })
	defer stop()
	load.waitAcked(t, 200)

	m, err := a1.c.StartMigration(ctx, client.StartMigration{Tenant: ta.ID, To: "a2"})
	if err != nil {
		t.Fatal(err)
	}
	m = waitMigration(t, a1.c, m.ID, 3*time.Minute, nil)
	if m.Outcome != "committed" {
		t.Fatalf("migration of p1's tenant ended %s: %s", m.Outcome, m.Error)
	}
	var rec migration.Record
	json.Unmarshal(m.Record, &rec)
	before := load.acked()
	load.waitAcked(t, before+200) // and on p1's new home: every op writes p1 or ref
	stop()

	sum := load.summary(rec.HeldAt, rec.ReleasedAt)
	t.Logf("handover: freeze %.0f ms; hold→fence %v, →switched %v, →released %v; held idle backends %v",
		m.Summary.FreezeMS, rec.FencedAt.Sub(rec.HeldAt), rec.SwitchedAt.Sub(rec.HeldAt), rec.ReleasedAt.Sub(rec.HeldAt), rec.HeldIdle)
	t.Logf("router clients: %s", sum)
	if load.hung() {
		t.Fatalf("a router client's operation did not return: %s", sum)
	}

	pa, pb := a2.TenantPort(ta.ID), tb.Port
	p1, p2 := a2.ConnString(pa, "postgres"), a2.ConnString(pb, "postgres")
	waitSettled(t, p1, p2)
	load.verify(t, p1, p2)

	ck, err := a1.c.CheckKeyspace(ctx, "orders")
	if err != nil || !ck.OK || ck.Misplaced != 0 || len(ck.Reference) != 1 || !ck.Reference[0].Equal {
		t.Fatalf("check after the migration: %+v, %v", ck, err)
	}
	if p := ck.Partitions[0]; p.Agent != "a2" || p.Error != "" {
		t.Fatalf("check's p1: %+v, want it checked on a2", p)
	}
	if sz, err := a1.c.KeyspaceSizes(ctx, "orders"); err != nil || sz.Partitions[0].Agent != "a2" || sz.Partitions[0].Error != "" {
		t.Fatalf("sizes after the migration: %+v, %v", sz, err)
	}

	// A keyspace created now on the same partitions (its record says p1 is
	// a1's) is probed, prepared and committed on a2, where ks-a lives.
	var spec map[string]any
	json.Unmarshal(ksMoveSpec(t), &spec)
	spec["name"], spec["schema"] = "orders2", "CREATE TABLE kv2 (k int PRIMARY KEY)"
	spec["tables"] = []map[string]any{{"name": "kv2", "kind": "sharded", "column": "k", "type": "int"}}
	spec["plan"] = map[string]any{"kv2": spec["plan"].(map[string]any)["kv"]}
	body, _ := json.Marshal(spec)
	if err := postKeyspace(ctx, a1.c, body); err != nil {
		t.Fatalf("a keyspace on the moved tenant: %v", err)
	}
	sqlOn(t, pa, "SELECT FROM kv2")

	api := px.APIClient()
	ws, err := api.Latency(ctx, "orders")
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	for _, w := range ws {
		seen[w.Server] = w.Count
	}
	if seen["p1"] == 0 || seen["p2"] == 0 {
		t.Fatalf("keyspace latency windows %+v: want p1 and p2", ws)
	}
	ws, err = api.Latency(ctx, "ks-a")
	if err != nil {
		t.Fatal(err)
	}
	newHome := "127.0.0.1:" + strconv.Itoa(pa)
	if !slices.ContainsFunc(ws, func(w proxyclient.Window) bool { return w.Server == newHome && w.Count > 0 }) {
		t.Fatalf("ks-a's latency windows %+v: want transactions on its new server %s", ws, newHome)
	}
}

// waitKeyspaceRouted waits until a write through the proxy reaches both
// partitions (the proxy has learnt the keyspace and both tenants' routes).
func waitKeyspaceRouted(t *testing.T, cs string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	var err error
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		var conn *pgx.Conn
		if conn, err = pgx.Connect(ctx, cs); err == nil {
			_, err = conn.Exec(ctx, "SELECT k FROM kv WHERE k IN (1, $1)", ksSplit)
			conn.Close(ctx)
		}
		cancel()
		if err == nil {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("the proxy never routed keyspace orders: %v", err)
}

// waitSettled waits until no transaction is open or prepared on any of the
// databases css (superuser connection strings), twice in a row 200 ms
// apart. The load's clients are cut off mid-operation when it stops, but
// the router finishes a two-phase commit it began (its COMMIT PREPAREDs
// land one partition at a time) and the proxy resolves in-doubt ones every
// few seconds: reading the partitions before that would see one half of a
// transaction committed and not yet the other.
func waitSettled(t *testing.T, css ...string) {
	t.Helper()
	const q = `SELECT (SELECT count(*) FROM pg_prepared_xacts)
		+ (SELECT count(*) FROM pg_stat_activity
		   WHERE backend_type = 'client backend' AND pid <> pg_backend_pid() AND xact_start IS NOT NULL)`
	deadline := time.Now().Add(time.Minute)
	for calm := 0; calm < 2; {
		open := 0
		for _, cs := range css {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			conn, err := pgx.Connect(ctx, cs)
			var n int
			if err == nil {
				err = conn.QueryRow(ctx, q).Scan(&n)
				conn.Close(ctx)
			}
			cancel()
			if err != nil {
				t.Fatal(err)
			}
			open += n
		}
		if open == 0 {
			calm++
		} else {
			calm = 0
		}
		if time.Now().After(deadline) {
			t.Fatalf("transactions still open or prepared a minute after the load stopped: %d", open)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// opTimeout bounds one operation of ksLoad: far beyond any hold, it only
// tells a hung router from a slow one.
const opTimeout = time.Minute

// ksLoad is a keyspace workload of several sessions through the router with
// a ledger of acknowledged writes. Each operation writes fresh keys:
//
//	0: BEGIN; kv k1 (p1); kv_hist k1 (p1); COMMIT        one partition, a block
//	1: kv k2 (p2)                                        one partition, autocommit
//	2: BEGIN; kv k1 (p1); kv k2 (p2); COMMIT             two-phase commit
//	3: ref id (p1 and p2)                                 two-phase commit, the router's own block
type ksLoad struct {
	cs string

	mu      sync.Mutex
	kv      map[int]bool // key → acknowledged (false: attempted, outcome unknown)
	hist    map[int]bool
	ref     map[int]bool
	acks    int
	errs    []opError
	timeout int // operations that hit opTimeout
}

type opError struct {
	at  time.Time
	op  int
	msg string
}

func (l *ksLoad) run(ctx context.Context, sessions int) {
	l.mu.Lock()
	l.kv, l.hist, l.ref = map[int]bool{}, map[int]bool{}, map[int]bool{}
	l.mu.Unlock()
	var wg sync.WaitGroup
	for w := range sessions {
		wg.Add(1)
		go func() { defer wg.Done(); l.session(ctx, w) }()
	}
	wg.Wait()
}

func (l *ksLoad) session(ctx context.Context, w int) {
	var conn *pgx.Conn
	defer func() {
		if conn != nil {
			conn.Close(context.Background())
		}
	}()
	for i := 1; ctx.Err() == nil; i++ {
		if conn == nil {
			cctx, cancel := context.WithTimeout(ctx, opTimeout)
			c, err := pgx.Connect(cctx, l.cs)
			cancel()
			if err != nil {
				l.fail(ctx, -1, err)
				sleepCtx(ctx, 20*time.Millisecond)
				continue
			}
			conn = c
		}
		op := i % 4
		k1, k2 := w*100_000+i, ksSplit+w*100_000+i
		keys := map[string][]int{}
		switch op {
		case 0:
			keys["kv"], keys["hist"] = []int{k1}, []int{k1}
		case 1:
			keys["kv"] = []int{k2}
		case 2:
			keys["kv"] = []int{k1, k2}
		case 3:
			keys["ref"] = []int{k1}
		}
		l.note(keys, false)
		octx, cancel := context.WithTimeout(ctx, opTimeout)
		err := ksOp(octx, conn, op, k1, k2)
		cancel()
		if err != nil {
			l.fail(ctx, op, err)
			conn.Close(context.Background())
			conn = nil
			continue
		}
		l.note(keys, true)
	}
}

// ksOp runs operation op (see ksLoad) with keys k1 (p1) and k2 (p2).
func ksOp(ctx context.Context, conn *pgx.Conn, op, k1, k2 int) error {
	v := "v" + strconv.Itoa(k1)
	switch op {
	case 1:
		_, err := conn.Exec(ctx, "INSERT INTO kv (k, v) VALUES ($1, $2)", k2, v)
		return err
	case 3:
		_, err := conn.Exec(ctx, "INSERT INTO ref (id, name) VALUES ($1, $2)", k1, v)
		return err
	}
	return pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "INSERT INTO kv (k, v) VALUES ($1, $2)", k1, v); err != nil {
			return err
		}
		var err error
		if op == 0 {
			_, err = tx.Exec(ctx, "INSERT INTO kv_hist (k, n) VALUES ($1, 1)", k1)
		} else {
			_, err = tx.Exec(ctx, "INSERT INTO kv (k, v) VALUES ($1, $2)", k2, v)
		}
		return err
	})
}

// note records keys (by table) as attempted, or as acknowledged.
func (l *ksLoad) note(keys map[string][]int, acked bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for table, ks := range keys {
		m := map[string]map[int]bool{"kv": l.kv, "hist": l.hist, "ref": l.ref}[table]
		for _, k := range ks {
			m[k] = acked
		}
	}
	if acked {
		l.acks++
	}
}

func (l *ksLoad) fail(ctx context.Context, op int, err error) {
	if ctx.Err() != nil {
		return // the load is stopping
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.errs = append(l.errs, opError{at: time.Now(), op: op, msg: err.Error()})
	if strings.Contains(err.Error(), "deadline exceeded") || strings.Contains(err.Error(), "timeout") {
		l.timeout++
	}
}

func (l *ksLoad) acked() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.acks
}

func (l *ksLoad) hung() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.timeout > 0
}

// waitAcked waits until n operations were acknowledged in all.
func (l *ksLoad) waitAcked(t *testing.T, n int) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for l.acked() < n {
		if time.Now().After(deadline) {
			t.Fatalf("the load reached %d acknowledged operations, not %d: %s", l.acked(), n, l.summary(time.Time{}, time.Time{}))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// summary counts acknowledged operations and errors, and lists the errors
// with their time relative to the hold (held, released: the handover).
func (l *ksLoad) summary(held, released time.Time) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var b strings.Builder
	fmt.Fprintf(&b, "%d operations acknowledged, %d errors", l.acks, len(l.errs))
	for _, e := range l.errs {
		when := "before the hold"
		switch {
		case held.IsZero():
			when = ""
		case !e.at.Before(held) && !e.at.After(released):
			when = "during the handover"
		case e.at.After(released):
			when = "after the release"
		}
		fmt.Fprintf(&b, "; op %d at hold%+v (%s): %s", e.op, e.at.Sub(held).Round(time.Millisecond), when, e.msg)
	}
	return b.String()
}

// verify checks each table on the two partitions (superuser connection
// strings): every acknowledged key is on its owner and not on the other
// partition (ref: on both), and no key is there that was never written.
func (l *ksLoad) verify(t *testing.T, p1, p2 string) {
	t.Helper()
	rows := func(cs, table, col string) map[int]bool {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		conn, err := pgx.Connect(ctx, cs)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(ctx)
		var ks []int
		if err := conn.QueryRow(ctx, fmt.Sprintf("SELECT coalesce(array_agg(%s), '{}') FROM %s", col, table)).Scan(&ks); err != nil {
			t.Fatal(err)
		}
		out := map[int]bool{}
		for _, k := range ks {
			out[k] = true
		}
		return out
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, tc := range []struct {
		table, col string
		ledger     map[int]bool
		sharded    bool
	}{{"kv", "k", l.kv, true}, {"kv_hist", "k", l.hist, true}, {"ref", "id", l.ref, false}} {
		on := [2]map[int]bool{rows(p1, tc.table, tc.col), rows(p2, tc.table, tc.col)}
		acked, unknown := 0, 0
		for k, ok := range tc.ledger {
			owners := [2]bool{true, true}
			if tc.sharded {
				owners = [2]bool{k < ksSplit, k >= ksSplit}
			}
			for i := range on {
				switch {
				case ok && owners[i] && !on[i][k]:
					t.Errorf("%s %d: acknowledged, missing on p%d", tc.table, k, i+1)
				case !owners[i] && on[i][k]:
					t.Errorf("%s %d: on p%d, which does not own it", tc.table, k, i+1)
				}
			}
			if ok {
				acked++
			} else if on[0][k] || on[1][k] {
				unknown++
			}
		}
		if tc.table == "kv" {
			for k := range tc.ledger {
				// Operation 2's keys (i%4 == 2): both committed or neither.
				if k < ksSplit && k%100_000%4 == 2 && on[0][k] != on[1][k+ksSplit] {
					t.Errorf("kv %d on p1 %t, its two-phase partner %d on p2 %t", k, on[0][k], k+ksSplit, on[1][k+ksSplit])
				}
			}
		}
		for i := range on {
			for k := range on[i] {
				if _, ok := tc.ledger[k]; !ok {
					t.Errorf("%s %d: on p%d, never written", tc.table, k, i+1)
				}
			}
		}
		t.Logf("verify %s: %d acknowledged keys on their owners; %d keys of unacknowledged operations present (failed, or cut off when the load stopped)", tc.table, acked, unknown)
	}
}
