package pgreshard

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/sluicedb/sluice/internal/pgtest"
	"github.com/sluicedb/sluice/keyspace"
	"github.com/sluicedb/sluice/pgcluster"
	"github.com/sluicedb/sluice/reshard"
)

func TestMain(m *testing.M) {
	code := m.Run()
	pgtest.Cleanup()
	os.Exit(code)
}

// testSchema is every partition's schema: acct (int key) with acct_log
// co-partitioned and referencing it (an identity column and a generated
// one, which a pull must carry and skip), users (text key), items
// (reference).
const testSchema = `
CREATE TABLE acct (id bigint PRIMARY KEY, v text);
CREATE TABLE acct_log (
	id bigint GENERATED ALWAYS AS IDENTITY,
	acct_id bigint NOT NULL REFERENCES acct (id),
	n int,
	twice int GENERATED ALWAYS AS (n * 2) STORED,
	PRIMARY KEY (acct_id, id));
CREATE TABLE users (name text PRIMARY KEY, v int);
CREATE TABLE items (sku text PRIMARY KEY);`

func testKeyspace(t testing.TB) *keyspace.Keyspace {
	t.Helper()
	ks := &keyspace.Keyspace{
		Name:       "ks",
		Partitions: []keyspace.Partition{{Name: "p1", Tenant: "t1"}, {Name: "p2", Tenant: "t2"}},
		Tables: []keyspace.Table{
			{Name: "acct", Kind: keyspace.Sharded, Column: "id", Type: keyspace.Int},
			{Name: "acct_log", Kind: keyspace.CoPartitioned, Column: "acct_id", Root: "acct"},
			{Name: "users", Kind: keyspace.Sharded, Column: "name", Type: keyspace.Text},
			{Name: "items", Kind: keyspace.Reference},
		},
		Plan: keyspace.PlanSpec{
			"acct":  {"p1": "[,100)", "p2": "[100,)"},
			"users": {"p1": "[,'m')", "p2": "['m',)"},
		},
	}
	if err := ks.Validate(); err != nil {
		t.Fatal(err)
	}
	return ks
}

// partitions starts a cluster holding databases p1 and p2 with
// testSchema and returns a connection string maker for them.
func partitions(t testing.TB) func(db string) string {
	t.Helper()
	c := pgtest.New(t, pgcluster.Options{})
	ctx := testCtx(t)
	admin := connect(t, ctx, c.ConnString("postgres"))
	for _, db := range []string{"p1", "p2"} {
		mustExec(t, admin, "CREATE DATABASE "+db)
		conn := connect(t, ctx, c.ConnString(db))
		mustExec(t, conn, testSchema)
	}
	return c.ConnString
}

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func connect(t testing.TB, ctx context.Context, dsn string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

func mustExec(t testing.TB, conn *pgx.Conn, sql string, args ...any) {
	t.Helper()
	if _, err := conn.Exec(context.Background(), sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

func count(t testing.TB, conn *pgx.Conn, sql string, args ...any) int64 {
	t.Helper()
	var n int64
	if err := conn.QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return n
}

// wantFenced fails unless err is the fence's SQLSTATE 40001 with a
// message holding every one of words.
func wantFenced(t testing.TB, what string, err error, words ...string) {
	t.Helper()
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || pe.Code != "40001" {
		t.Fatalf("%s: got %v, want SQLSTATE 40001", what, err)
	}
	for _, w := range words {
		if !strings.Contains(pe.Message, w) {
			t.Fatalf("%s: message %q does not mention %q", what, pe.Message, w)
		}
	}
	if strings.Contains(pe.Message, "\n") {
		t.Fatalf("%s: message %q is not one line", what, pe.Message)
	}
}

func intRange(lo, hi *int64) keyspace.Range {
	var r keyspace.Range
	r.Lo.Inf, r.Hi.Inf = lo == nil, hi == nil
	if lo != nil {
		r.Lo.Key = keyspace.IntKey(*lo)
	}
	if hi != nil {
		r.Hi.Key = keyspace.IntKey(*hi)
	}
	return r
}

func ip(v int64) *int64 { return &v }

func acctChunk(id int, rs ...keyspace.Range) reshard.Chunk {
	return reshard.Chunk{ID: id, Root: "acct", Type: keyspace.Int, Tables: []string{"acct", "acct_log"}, Ranges: rs, From: "p1", To: "p2"}
}

func textChunk(id int, ranges string) reshard.Chunk {
	rs, err := keyspace.ParseRanges(keyspace.Text, ranges)
	if err != nil {
		panic(err)
	}
	return reshard.Chunk{ID: id, Root: "users", Type: keyspace.Text, Tables: []string{"users"}, Ranges: rs, From: "p1", To: "p2"}
}

// loadAccts inserts acct rows [lo, hi) with perAcct acct_log rows each.
func loadAccts(t testing.TB, conn *pgx.Conn, lo, hi, perAcct int) {
	t.Helper()
	mustExec(t, conn, "INSERT INTO acct SELECT g, 'v' || g FROM generate_series($1::int, $2::int - 1) g", lo, hi)
	mustExec(t, conn, `INSERT INTO acct_log (acct_id, n)
		SELECT g, k FROM generate_series($1::int, $2::int - 1) g, generate_series(1, $3::int) k`, lo, hi, perAcct)
}
