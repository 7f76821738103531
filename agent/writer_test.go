package agent

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// ledgerWriter is a steady write workload that remembers every write the
// database acknowledged. Each write inserts a fresh id into ledger (no unique
// constraint: a write applied twice shows up as a duplicate). It knows the
// tenant's possible homes (source and target addresses) and, on any error,
// reconnects to the next one: only the current owner accepts writes (the
// source is fenced read-only, the target is a read-only standby until it is
// promoted), so it follows the tenant without a proxy.
type ledgerWriter struct {
	conns []string      // libpq URLs of the candidate homes
	pause time.Duration // between writes
	pad   atomic.Int64  // bytes of random (incompressible) padding per row, default 100: WAL volume
	first int64         // ids start after it (writers sharing one ledger take disjoint ranges)

	mu     sync.Mutex
	acked  []int64
	errs   int
	last   string      // last error seen
	byHome map[int]int // acknowledged writes per home index
}

const ledgerDDL = "CREATE TABLE IF NOT EXISTS ledger (id bigint NOT NULL, pad text)"

func (w *ledgerWriter) run(ctx context.Context) {
	w.mu.Lock()
	w.byHome = map[int]int{}
	w.mu.Unlock()
	var conn *pgx.Conn
	home := 0
	next := w.first + 1
	for ctx.Err() == nil {
		if conn == nil {
			cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			c, err := pgx.Connect(cctx, w.conns[home])
			cancel()
			if err != nil {
				w.fail(err)
				home = (home + 1) % len(w.conns)
				sleepCtx(ctx, 20*time.Millisecond)
				continue
			}
			conn = c
		}
		id := next
		next++
		ectx, cancel := context.WithTimeout(ctx, 5*time.Second)
		pad := w.pad.Load()
		if pad <= 0 {
			pad = 100
		}
		_, err := conn.Exec(ectx, "INSERT INTO ledger (id, pad) SELECT $1, string_agg(md5(random()::text), '') FROM generate_series(1, $2::int / 32)", id, pad)
		cancel()
		if err != nil {
			w.fail(err)
			conn.Close(context.Background())
			conn = nil
			home = (home + 1) % len(w.conns)
			sleepCtx(ctx, 10*time.Millisecond)
			continue
		}
		w.mu.Lock()
		w.acked = append(w.acked, id)
		w.byHome[home]++
		w.mu.Unlock()
		sleepCtx(ctx, w.pause)
	}
	if conn != nil {
		conn.Close(context.Background())
	}
}

func (w *ledgerWriter) fail(err error) {
	w.mu.Lock()
	w.errs++
	w.last = err.Error()
	w.mu.Unlock()
}

func (w *ledgerWriter) stats() (acked int, errs int, byHome map[int]int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	m := map[int]int{}
	for k, v := range w.byHome {
		m[k] = v
	}
	return len(w.acked), w.errs, m
}

// verify checks, row by row, that every acknowledged id is present exactly
// once in ledger on the server at cs.
func (w *ledgerWriter) verify(t *testing.T, cs string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, cs)
	if err != nil {
		t.Fatalf("verify: %v", err)
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, "SELECT id, count(*) FROM ledger GROUP BY id")
	if err != nil {
		t.Fatalf("verify: %v", err)
	}
	present := map[int64]int64{}
	for rows.Next() {
		var id, n int64
		if err := rows.Scan(&id, &n); err != nil {
			t.Fatal(err)
		}
		present[id] = n
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	w.mu.Lock()
	acked := append([]int64(nil), w.acked...)
	w.mu.Unlock()
	sort.Slice(acked, func(i, j int) bool { return acked[i] < acked[j] })
	var missing, dup []int64
	for _, id := range acked {
		switch present[id] {
		case 0:
			missing = append(missing, id)
		case 1:
		default:
			dup = append(dup, id)
		}
	}
	if len(acked) == 0 {
		t.Fatal("verify: no write was acknowledged; the workload did not run")
	}
	if len(missing) > 0 || len(dup) > 0 {
		t.Fatalf("verify: %d acknowledged writes; missing %d %v; duplicated %d %v", len(acked), len(missing), head(missing), len(dup), head(dup))
	}
	t.Logf("verify: all %d acknowledged writes present exactly once (%d rows on the server)", len(acked), len(present))
}

func head(ids []int64) string {
	if len(ids) > 10 {
		return fmt.Sprint(ids[:10], "…")
	}
	return fmt.Sprint(ids)
}

// loadData fills the tenant with about mb MiB so that a snapshot takes a while.
func loadData(t *testing.T, cs string, mb int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, cs)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	for _, q := range []string{
		ledgerDDL,
		"CREATE TABLE IF NOT EXISTS bulk (id bigint PRIMARY KEY, v text)",
		fmt.Sprintf("INSERT INTO bulk SELECT g, md5(g::text) || repeat('y', 900) FROM generate_series(1, %d) g", mb*1000),
		// The tests' clients log in as testUsers[0] where the tenant has it.
		"DO $$ BEGIN IF EXISTS (SELECT FROM pg_roles WHERE rolname = 'app') THEN ALTER TABLE ledger OWNER TO app; ALTER TABLE bulk OWNER TO app; END IF; END $$",
		"CHECKPOINT",
	} {
		if _, err := conn.Exec(ctx, q); err != nil {
			t.Fatalf("load: %s: %v", q, err)
		}
	}
}
