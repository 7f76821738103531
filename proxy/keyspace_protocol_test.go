package proxy

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgconn/ctxwatch"
	"github.com/sluicedb/sluice/pgcluster"
)

// The keyspace router and the protocol's less common paths: keys in an
// array (key = ANY($1)), pipelines refused half-way, cancel requests.

// queryKeys runs sql with args on conn and returns the int column of its rows.
func queryKeys(t *testing.T, conn *pgx.Conn, sql string, args ...any) ([]int32, error) {
	t.Helper()
	rows, _ := conn.Query(context.Background(), sql, args...)
	return pgx.CollectRows(rows, pgx.RowTo[int32])
}

// key = ANY(array) routes to the owners of the array's elements: an array
// parameter (pgx sends it in binary with a prepared statement, as text
// with the simple protocol), ARRAY[…] and a '{…}' literal; one partition,
// a scatter read in key order, a write on both (two-phase commit). An
// empty array matches nothing; a NULL element is refused (22P02).
func TestKeyspaceAnyArray(t *testing.T) {
	r := newKsRig(t, false, nil)
	ctx := context.Background()
	seed := r.connect(t, pgx.QueryExecModeCacheStatement)
	for _, k := range []int{1, 2, 150, 151} {
		if _, err := seed.Exec(ctx, "INSERT INTO kv (k, v) VALUES ($1, $2)", k, fmt.Sprint("v", k)); err != nil {
			t.Fatal(err)
		}
	}
	for _, mode := range execModes {
		conn := r.connect(t, mode)
		for _, tc := range []struct {
			sql  string
			args []any
			want string
		}{
			{"SELECT k FROM kv WHERE k = ANY($1) ORDER BY k", []any{[]int32{151, 150}}, "[150 151]"},
			{"SELECT k FROM kv WHERE k = ANY($1) ORDER BY k", []any{[]int64{151, 1, 2}}, "[1 2 151]"},
			{"SELECT k FROM kv WHERE k = ANY($1::int[]) ORDER BY k DESC", []any{[]int32{2, 150}}, "[150 2]"},
			{"SELECT k FROM kv WHERE k = ANY($1) ORDER BY k", []any{[]int32{}}, "[]"},
			{"SELECT k FROM kv WHERE k = ANY(ARRAY[1, 151]) ORDER BY k", nil, "[1 151]"},
			{"SELECT k FROM kv WHERE k = ANY('{1,150}'::int[]) ORDER BY k DESC", nil, "[150 1]"},
			{"SELECT k FROM kv WHERE k = ANY(ARRAY[$1::int, $2]) ORDER BY k", []any{2, 151}, "[2 151]"},
		} {
			ks, err := queryKeys(t, conn, tc.sql, tc.args...)
			if err != nil || fmt.Sprint(ks) != tc.want {
				t.Errorf("%v: %s %v: %v, %v; want %s", mode, tc.sql, tc.args, ks, err, tc.want)
			}
		}
		tag, err := conn.Exec(ctx, "UPDATE kv SET v = v || '+' WHERE k = ANY($1)", []int32{2, 150})
		if err != nil || tag.String() != "UPDATE 2" {
			t.Errorf("%v: update on both partitions: %v, %v", mode, tag, err)
		}
		one := int32(1)
		_, err = conn.Exec(ctx, "SELECT k FROM kv WHERE k = ANY($1)", []*int32{&one, nil})
		wantCode(t, fmt.Sprintf("%v: a NULL element", mode), err, "22P02")
	}
	r.wantPlacement(t, map[int]string{1: "v1", 2: "v2+++", 150: "v150+++", 151: "v151"})
}

// A pipeline the router refuses at a Bind is answered as PostgreSQL
// answers one failing there: the messages before it are answered and
// done (a statement prepared in it exists), the error undoes the batch's
// implicit transaction.
func TestKeyspaceRefusedPipeline(t *testing.T) {
	r := newKsRig(t, false, nil)
	ctx := context.Background()
	conn := r.connect(t, pgx.QueryExecModeCacheStatement)
	if _, err := conn.Exec(ctx, "INSERT INTO kv (k, v) VALUES (150, 'v150')"); err != nil {
		t.Fatal(err)
	}
	pc := conn.PgConn()

	// Parse and Describe of s1, then a Bind of it with a key of the wrong
	// type: s1 is described, then the Bind fails, and s1 exists after.
	p := pc.StartPipeline(ctx)
	p.SendPrepare("s1", "SELECT v FROM kv WHERE k = $1", nil)
	p.SendQueryPrepared("s1", [][]byte{[]byte("abc")}, nil, nil)
	if err := p.Sync(); err != nil {
		t.Fatal(err)
	}
	res, err := p.GetResults()
	if sd, ok := res.(*pgconn.StatementDescription); !ok || err != nil || len(sd.Fields) != 1 {
		t.Errorf("prepare in the refused pipeline: %#v, %v; want its description", res, err)
	}
	res, err = p.GetResults()
	if rr, ok := res.(*pgconn.ResultReader); ok {
		_, err = rr.Close()
	}
	wantCode(t, "the refused Bind", err, "22P02")
	if res, err = p.GetResults(); err != nil {
		t.Errorf("the pipeline's sync: %T, %v", res, err)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	rr := pc.ExecPrepared(ctx, "s1", [][]byte{[]byte("150")}, nil, nil).Read()
	if rr.Err != nil || len(rr.Rows) != 1 || string(rr.Rows[0][0]) != "v150" {
		t.Errorf("s1 after the refused pipeline: %v, %v; want v150", rr.Rows, rr.Err)
	}

	// Two inserts on different partitions in one pipeline: the second is
	// refused, after the first ran; the error rolls the first back.
	p = pc.StartPipeline(ctx)
	p.SendQueryParams("INSERT INTO kv (k, v) VALUES ($1, 'first')", [][]byte{[]byte("5")}, nil, nil, nil)
	p.SendQueryParams("INSERT INTO kv (k, v) VALUES ($1, 'second')", [][]byte{[]byte("155")}, nil, nil, nil)
	if err := p.Sync(); err != nil {
		t.Fatal(err)
	}
	res, err = p.GetResults()
	if rr, ok := res.(*pgconn.ResultReader); !ok || err != nil {
		t.Errorf("first insert: %T, %v", res, err)
	} else if tag, err := rr.Close(); err != nil || tag.String() != "INSERT 0 1" {
		t.Errorf("first insert: %v, %v", tag, err)
	}
	res, err = p.GetResults()
	if rr, ok := res.(*pgconn.ResultReader); ok {
		_, err = rr.Close()
	}
	wantCode(t, "the insert on the other partition", err, "0A000")
	if res, err = p.GetResults(); err != nil {
		t.Errorf("the pipeline's sync: %T, %v", res, err)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM kv WHERE k = $1", 5).Scan(&n); err != nil || n != 0 {
		t.Errorf("the refused pipeline's first insert: %d rows, %v; want it rolled back", n, err)
	}
	r.wantPlacement(t, map[int]string{150: "v150"})
}

// waitActive waits until c runs a query starting with prefix; it fails
// the test only if that never happens (a generous bound, not a timing).
func waitActive(t *testing.T, c *pgcluster.Cluster, prefix string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, c.ConnString("postgres"))
	if err != nil {
		t.Error(err)
		return
	}
	defer conn.Close(context.Background())
	for ctx.Err() == nil {
		var n int
		conn.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE state = 'active' AND starts_with(query, $1)", prefix).Scan(&n)
		if n > 0 {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Errorf("%s: no query %q running", c.Addr(), prefix)
}

// A client's cancel request (pgx sends one when the context of a query
// ends) reaches the server session running its statement through the
// router, on one partition or on each of a scatter; the statement fails
// with 57014 and the session goes on.
func TestKeyspaceCancel(t *testing.T) {
	r := newKsRig(t, false, nil)
	cfg, err := pgx.ParseConfig(proxyURL(r.p, "kv", "disable"))
	if err != nil {
		t.Fatal(err)
	}
	cfg.BuildContextWatcherHandler = func(pc *pgconn.PgConn) ctxwatch.Handler {
		return &pgconn.CancelRequestContextWatcherHandler{Conn: pc, DeadlineDelay: time.Minute}
	}
	conn, err := pgx.ConnectConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	for _, k := range []int{5, 150} {
		if _, err := conn.Exec(context.Background(), "INSERT INTO kv (k, v) VALUES ($1, 'x')", k); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		sql     string
		servers []*pgcluster.Cluster
	}{
		{"SELECT pg_sleep(30) FROM kv WHERE k = 150", []*pgcluster.Cluster{r.c2}},
		{"SELECT pg_sleep(30) FROM kv WHERE k IN (5, 150)", []*pgcluster.Cluster{r.c1, r.c2}},
	} {
		ctx, cancel := context.WithCancel(context.Background())
		go func() {
			defer cancel()
			for _, c := range tc.servers {
				waitActive(t, c, "SELECT pg_sleep(30)")
			}
		}()
		_, err := conn.Exec(ctx, tc.sql)
		cancel()
		wantCode(t, tc.sql, err, "57014")
		var v string
		if err := conn.QueryRow(context.Background(), "SELECT v FROM kv WHERE k = $1", 150).Scan(&v); err != nil || v != "x" {
			t.Errorf("after cancelling %s: %q, %v", tc.sql, v, err)
		}
	}
	if n := r.p.cancels.Load(); n < 3 {
		t.Errorf("%d cancel requests sent to servers, want 3 (one, then one per partition of the scatter)", n)
	}
}
