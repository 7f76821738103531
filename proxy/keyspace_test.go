package proxy

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/sluicedb/sluice/internal/pgtest"
	"github.com/sluicedb/sluice/keyspace"
	"github.com/sluicedb/sluice/pgcluster"
)

// ksRig is two PostgreSQL servers as partitions p1 (keys below 100) and p2
// of keyspace "kv", behind a proxy routing tenants t1 and t2 to them.
type ksRig struct {
	p      *Proxy
	c1, c2 *pgcluster.Cluster
	ks     *keyspace.Keyspace
}

const ksSchema = `CREATE TABLE kv (k int PRIMARY KEY, v text);
CREATE TABLE ref (id int PRIMARY KEY, name text);`

func newKsRig(t *testing.T, noTwoPC bool, mod func(*Config)) *ksRig {
	t.Helper()
	opts := pgcluster.Options{Password: testPassword, AuthMethod: "scram-sha-256",
		Settings: map[string]string{"max_prepared_transactions": "10"}}
	r := &ksRig{c1: pgtest.New(t, opts), c2: pgtest.New(t, opts)}
	ctx := context.Background()
	for _, c := range []*pgcluster.Cluster{r.c1, r.c2} {
		conn, err := pgx.Connect(ctx, c.ConnString("postgres"))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := conn.Exec(ctx, ksSchema); err != nil {
			t.Fatal(err)
		}
		conn.Close(ctx)
	}
	r.ks = &keyspace.Keyspace{Name: "kv", NoTwoPC: noTwoPC,
		Partitions: []keyspace.Partition{{Name: "p1", Tenant: "t1"}, {Name: "p2", Tenant: "t2"}},
		Tables: []keyspace.Table{{Name: "kv", Kind: keyspace.Sharded, Column: "k", Type: keyspace.Int},
			{Name: "ref", Kind: keyspace.Reference}},
		Plan: keyspace.PlanSpec{"kv": {"p1": "[,100)", "p2": "[100,)"}}}
	if err := r.ks.Validate(); err != nil {
		t.Fatal(err)
	}
	r.p = startProxy(t, r.c1, func(c *Config) {
		c.Routes = []RouteConfig{{Tenant: "t1", Addr: r.c1.Addr(), Database: "postgres"}, {Tenant: "t2", Addr: r.c2.Addr(), Database: "postgres"}}
		c.Keyspaces = []*keyspace.Keyspace{r.ks}
		c.TxLog = filepath.Join(t.TempDir(), "txlog")
		if mod != nil {
			mod(c)
		}
	})
	return r
}

func (r *ksRig) connect(t *testing.T, mode pgx.QueryExecMode) *pgx.Conn {
	t.Helper()
	cfg, err := pgx.ParseConfig(proxyURL(r.p, "kv", "disable"))
	if err != nil {
		t.Fatal(err)
	}
	cfg.DefaultQueryExecMode = mode
	conn, err := pgx.ConnectConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

// direct opens a session straight to c; the caller closes it.
func direct(t *testing.T, c *pgcluster.Cluster) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), c.ConnString("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	return conn
}

// rowsOn returns the keys of kv on c, and fails the test if c has a
// prepared transaction left.
func rowsOn(t *testing.T, c *pgcluster.Cluster) map[int]string {
	t.Helper()
	ctx := context.Background()
	conn := direct(t, c)
	defer conn.Close(ctx)
	rows, _ := conn.Query(ctx, "SELECT k, v FROM kv")
	out := map[int]string{}
	for rows.Next() {
		var k int
		var v string
		if err := rows.Scan(&k, &v); err != nil {
			t.Fatal(err)
		}
		out[k] = v
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if n := preparedCount(t, c); n != 0 {
		t.Errorf("%s: %d prepared transactions left", c.Addr(), n)
	}
	return out
}

func wantCode(t *testing.T, what string, err error, code string) {
	t.Helper()
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || pe.Code != code {
		t.Errorf("%s: %v, want SQLSTATE %s", what, err, code)
	}
}

var execModes = []pgx.QueryExecMode{pgx.QueryExecModeCacheStatement, pgx.QueryExecModeSimpleProtocol, pgx.QueryExecModeExec}

func TestKeyspaceRoutesByKey(t *testing.T) {
	r := newKsRig(t, false, nil)
	ctx := context.Background()
	for i, mode := range execModes {
		conn := r.connect(t, mode)
		base := i * 1000
		lo, hi := 1+i, 100+base
		if _, err := conn.Exec(ctx, "INSERT INTO kv (k, v) VALUES ($1, $2)", lo, mode.String()); err != nil {
			t.Fatalf("%v: insert %d: %v", mode, lo, err)
		}
		if _, err := conn.Exec(ctx, "INSERT INTO kv (k, v) VALUES ($1, $2)", hi, mode.String()); err != nil {
			t.Fatalf("%v: insert %d: %v", mode, hi, err)
		}
		var v string
		if err := conn.QueryRow(ctx, "SELECT v FROM kv WHERE k = $1", hi).Scan(&v); err != nil || v != mode.String() {
			t.Errorf("%v: select %d: %q, %v", mode, hi, v, err)
		}
		// One transaction writing on both partitions: two-phase commit.
		tx, err := conn.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range []int{lo, hi} {
			if _, err := tx.Exec(ctx, "UPDATE kv SET v = v || '+' WHERE k = $1", k); err != nil {
				t.Fatalf("%v: update %d: %v", mode, k, err)
			}
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatalf("%v: commit across partitions: %v", mode, err)
		}
		// A rolled-back one changes nothing.
		tx, _ = conn.Begin(ctx)
		tx.Exec(ctx, "UPDATE kv SET v = 'rolled back' WHERE k = $1", lo)
		tx.Exec(ctx, "UPDATE kv SET v = 'rolled back' WHERE k = $1", hi)
		if err := tx.Rollback(ctx); err != nil {
			t.Fatal(err)
		}
		// A read over both, in key order.
		rows, _ := conn.Query(ctx, "SELECT k FROM kv WHERE k IN ($1, $2) ORDER BY k DESC", lo, hi)
		ks, err := pgx.CollectRows(rows, pgx.RowTo[int32])
		if err != nil || len(ks) != 2 || ks[0] != int32(hi) || ks[1] != int32(lo) {
			t.Errorf("%v: scatter read: %v, %v", mode, ks, err)
		}
	}
	// A range over both partitions, in key order, limited after the merge.
	for _, mode := range execModes {
		conn := r.connect(t, mode)
		rows, _ := conn.Query(ctx, "SELECT k FROM kv WHERE k >= $1 AND k < $2 ORDER BY k LIMIT 4", 2, 2000)
		ks, err := pgx.CollectRows(rows, pgx.RowTo[int32])
		if err != nil || fmt.Sprint(ks) != "[2 3 100 1100]" {
			t.Errorf("%v: range read: %v, %v; want [2 3 100 1100]", mode, ks, err)
		}
	}
	on1, on2 := rowsOn(t, r.c1), rowsOn(t, r.c2)
	for i, mode := range execModes {
		lo, hi := 1+i, 100+i*1000
		if on1[lo] != mode.String()+"+" || on2[hi] != mode.String()+"+" {
			t.Errorf("%v: p1[%d]=%q p2[%d]=%q, want %q on each", mode, lo, on1[lo], hi, on2[hi], mode.String()+"+")
		}
		if _, ok := on2[lo]; ok {
			t.Errorf("key %d on p2 too", lo)
		}
		if _, ok := on1[hi]; ok {
			t.Errorf("key %d on p1 too", hi)
		}
	}
}

func TestKeyspaceRefusesBadInput(t *testing.T) {
	r := newKsRig(t, true, nil)
	ctx := context.Background()
	for _, mode := range execModes {
		conn := r.connect(t, mode)
		_, err := conn.Exec(ctx, "UPDATE kv SET v = 'x'")
		wantCode(t, fmt.Sprintf("%v: no key", mode), err, "0A000")
		_, err = conn.Exec(ctx, "SELECT v FROM kv WHERE k = 'abc'")
		wantCode(t, fmt.Sprintf("%v: wrong key type", mode), err, "22P02")
		tx, _ := conn.Begin(ctx)
		if _, err := tx.Exec(ctx, "UPDATE kv SET v = 'x' WHERE k = $1", 1); err != nil {
			t.Fatal(err)
		}
		_, err = tx.Exec(ctx, "UPDATE kv SET v = 'x' WHERE k = $1", 200)
		wantCode(t, fmt.Sprintf("%v: spanning without 2PC", mode), err, "0A000")
		if err := tx.Rollback(ctx); err != nil {
			t.Fatal(err)
		}
		// The session still works.
		var one int
		if err := conn.QueryRow(ctx, "SELECT 1").Scan(&one); err != nil || one != 1 {
			t.Errorf("%v: after errors: %v", mode, err)
		}
	}
	if n := len(rowsOn(t, r.c1)) + len(rowsOn(t, r.c2)); n != 0 {
		t.Errorf("%d rows written by refused statements", n)
	}
}

func TestKeyspaceHints(t *testing.T) {
	r := newKsRig(t, false, nil)
	ctx := context.Background()
	conn := r.connect(t, pgx.QueryExecModeSimpleProtocol)
	_, err := conn.Exec(ctx, "INSERT INTO kv VALUES (150, 'h')")
	wantCode(t, "insert without a column list", err, "0A000")
	if _, err := conn.Exec(ctx, "SET sluice.key = 150"); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, "INSERT INTO kv VALUES (150, 'set')"); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, "/* sluice.key=5 */ INSERT INTO kv VALUES (5, 'comment')"); err != nil {
		t.Fatal(err)
	}
	// A reference table is read from any partition and written to all.
	if _, err := conn.Exec(ctx, "INSERT INTO ref VALUES (1, 'one')"); err != nil {
		t.Fatal(err)
	}
	var name string
	if err := conn.QueryRow(ctx, "SELECT name FROM ref WHERE id = 1").Scan(&name); err != nil || name != "one" {
		t.Errorf("reference read: %q, %v", name, err)
	}
	if on1, on2 := rowsOn(t, r.c1), rowsOn(t, r.c2); on2[150] != "set" || on1[5] != "comment" || len(on1)+len(on2) != 2 {
		t.Errorf("p1 %v, p2 %v", on1, on2)
	}
	for _, c := range []*pgcluster.Cluster{r.c1, r.c2} {
		conn, _ := pgx.Connect(ctx, c.ConnString("postgres"))
		var n int
		conn.QueryRow(ctx, "SELECT count(*) FROM ref").Scan(&n)
		conn.Close(ctx)
		if n != 1 {
			t.Errorf("%s: ref has %d rows, want 1", c.Addr(), n)
		}
	}
}

// A SQL cursor lives on the partition its DECLARE's query names; FETCH,
// MOVE and CLOSE, which name no table, go there (psycopg2's named cursors),
// even when the transaction began on another partition. A cursor over
// several partitions is refused.
func TestKeyspaceCursors(t *testing.T) {
	r := newKsRig(t, false, nil)
	ctx := context.Background()
	for _, mode := range execModes {
		conn := r.connect(t, mode)
		conn.Exec(ctx, "DELETE FROM kv WHERE k IN (5, 150, 151)")
		for _, k := range []int{5, 150, 151} {
			if _, err := conn.Exec(ctx, "INSERT INTO kv (k, v) VALUES ($1, $2)", k, fmt.Sprint("v", k)); err != nil {
				t.Fatal(err)
			}
		}
		tx, err := conn.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var v string
		if err := tx.QueryRow(ctx, "SELECT v FROM kv WHERE k = $1", 5).Scan(&v); err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec(ctx, "DECLARE c CURSOR FOR SELECT v FROM kv WHERE k IN ($1, $2) ORDER BY k", 150, 151); err != nil {
			t.Fatalf("%v: declare: %v", mode, err)
		}
		var got []string
		for range 2 {
			if err := tx.QueryRow(ctx, "FETCH 1 FROM c").Scan(&v); err != nil {
				t.Fatalf("%v: fetch: %v", mode, err)
			}
			got = append(got, v)
		}
		if _, err := tx.Exec(ctx, "MOVE BACKWARD 1 IN c"); err != nil {
			t.Errorf("%v: move: %v", mode, err)
		}
		if _, err := tx.Exec(ctx, "CLOSE c"); err != nil {
			t.Errorf("%v: close: %v", mode, err)
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		if len(got) != 2 || got[0] != "v150" || got[1] != "v151" {
			t.Errorf("%v: fetched %v, want [v150 v151]", mode, got)
		}
		// WITH HOLD: the cursor outlives its transaction, and stays on p2.
		if _, err := conn.Exec(ctx, "DECLARE h CURSOR WITH HOLD FOR SELECT v FROM kv WHERE k = $1", 151); err != nil {
			t.Fatalf("%v: declare with hold: %v", mode, err)
		}
		conn.QueryRow(ctx, "SELECT v FROM kv WHERE k = $1", 5).Scan(&v)
		if err := conn.QueryRow(ctx, "FETCH NEXT FROM h").Scan(&v); err != nil || v != "v151" {
			t.Errorf("%v: fetch from a held cursor: %q, %v", mode, v, err)
		}
		if _, err := conn.Exec(ctx, "CLOSE ALL"); err != nil {
			t.Errorf("%v: close all: %v", mode, err)
		}
		tx, _ = conn.Begin(ctx)
		_, err = tx.Exec(ctx, "DECLARE s CURSOR FOR SELECT v FROM kv WHERE k IN ($1, $2)", 5, 150)
		wantCode(t, fmt.Sprintf("%v: a cursor over both partitions", mode), err, "0A000")
		tx.Rollback(ctx)
	}
}

// EXPLAIN ANALYZE runs its statement, so it goes where the statement
// would; a plain EXPLAIN runs nothing and any partition answers it.
func TestKeyspaceExplainAnalyze(t *testing.T) {
	r := newKsRig(t, false, nil)
	ctx := context.Background()
	conn := r.connect(t, pgx.QueryExecModeSimpleProtocol)
	for _, sql := range []string{
		"EXPLAIN ANALYZE INSERT INTO kv (k, v) VALUES (150, 'explained')",
		"EXPLAIN (ANALYZE, COSTS off) INSERT INTO kv (k, v) VALUES (5, 'explained')",
		"EXPLAIN INSERT INTO kv (k, v) VALUES (151, 'not run')",
	} {
		if _, err := conn.Exec(ctx, sql); err != nil {
			t.Errorf("%s: %v", sql, err)
		}
	}
	_, err := conn.Exec(ctx, "EXPLAIN ANALYZE UPDATE kv SET v = 'x'")
	wantCode(t, "EXPLAIN ANALYZE without a key", err, "0A000")
	if on1, on2 := rowsOn(t, r.c1), rowsOn(t, r.c2); len(on1) != 1 || on1[5] != "explained" || len(on2) != 1 || on2[150] != "explained" {
		t.Errorf("p1 %v, p2 %v: want 5 on p1 and 150 on p2", on1, on2)
	}
}

// Two transactions that each hold a row on one partition and want the
// other's on the other partition: no server sees the cycle, so the lock
// timeout of transactions that span partitions breaks it (55P03) and the
// other commits.
func TestKeyspaceDistributedDeadlock(t *testing.T) {
	r := newKsRig(t, false, nil)
	ctx := context.Background()
	seed := r.connect(t, pgx.QueryExecModeCacheStatement)
	for _, k := range []int{1, 150} {
		if _, err := seed.Exec(ctx, "INSERT INTO kv (k, v) VALUES ($1, 'seed')", k); err != nil {
			t.Fatal(err)
		}
	}
	a, b := r.connect(t, pgx.QueryExecModeCacheStatement), r.connect(t, pgx.QueryExecModeSimpleProtocol)
	ta, _ := a.Begin(ctx)
	tb, _ := b.Begin(ctx)
	if _, err := ta.Exec(ctx, "UPDATE kv SET v = 'a' WHERE k = $1", 1); err != nil {
		t.Fatal(err)
	}
	if _, err := tb.Exec(ctx, "UPDATE kv SET v = 'b' WHERE k = $1", 150); err != nil {
		t.Fatal(err)
	}
	errs := make(chan error, 2)
	go func() {
		_, err := ta.Exec(ctx, "UPDATE kv SET v = 'a' WHERE k = $1", 150)
		if err == nil {
			err = ta.Commit(ctx)
		} else {
			ta.Rollback(ctx)
		}
		errs <- err
	}()
	go func() {
		_, err := tb.Exec(ctx, "UPDATE kv SET v = 'b' WHERE k = $1", 1)
		if err == nil {
			err = tb.Commit(ctx)
		} else {
			tb.Rollback(ctx)
		}
		errs <- err
	}()
	e1, e2 := <-errs, <-errs
	if e1 != nil && e2 != nil { // both timed out together: both rolled back
		wantCode(t, "first", e1, "55P03")
		wantCode(t, "second", e2, "55P03")
	} else if e1 != nil || e2 != nil {
		failed := e1
		if failed == nil {
			failed = e2
		}
		wantCode(t, "the loser of the deadlock", failed, "55P03")
	} else {
		t.Fatal("both transactions of a deadlock committed")
	}
	on1, on2 := rowsOn(t, r.c1), rowsOn(t, r.c2)
	if on1[1] != on2[150] {
		t.Errorf("after the deadlock: k=1 %q, k=150 %q; want both the winner's, or both 'seed'", on1[1], on2[150])
	}
}
