package proxy

import (
	"context"
	"fmt"
	"maps"
	"math/rand"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// TestKeyspaceConcurrentLedger is pgx under concurrent load: workers
// sessions (the exec modes in turn) each write their own keys on both
// partitions — inserts, upserts, updates, deletes, transactions spanning
// both partitions committed (2PC) or rolled back — and keep a ledger of
// the writes acknowledged to them, checking their reads against it on the
// way. Afterwards every acknowledged row is on the partition the plan
// names for its key, with its last acknowledged value, and on no other;
// nothing else is on either server, and no transaction is left prepared.
// Workers own disjoint keys: two transactions locking keys of both
// partitions in opposite orders would wait on each other across servers,
// a deadlock neither server can see.
func TestKeyspaceConcurrentLedger(t *testing.T) {
	r := newKsRig(t, false, nil)
	const workers, ops = 8, 60
	ledgers := make([]map[int]string, workers)
	spanned := make([]int, workers)
	errs := make([]error, workers)
	var wg sync.WaitGroup
	for w := range workers {
		conn := r.connect(t, execModes[w%len(execModes)])
		wg.Add(1)
		go func() {
			defer wg.Done()
			lw := &ledgerWorker{conn: conn, id: w, rng: rand.New(rand.NewSource(int64(w) + 1)), acked: map[int]string{}}
			errs[w] = lw.run(context.Background(), ops)
			ledgers[w], spanned[w] = lw.acked, lw.spanned
		}()
	}
	wg.Wait()
	all := map[int]string{}
	for w := range workers {
		if errs[w] != nil {
			t.Errorf("worker %d (%v): %v", w, execModes[w%len(execModes)], errs[w])
		}
		maps.Copy(all, ledgers[w])
	}
	if n := sumInts(spanned); len(all) == 0 || n == 0 {
		t.Fatalf("%d keys and %d transactions across partitions acknowledged: the load did not run", len(all), n)
	}
	t.Logf("%d keys, %d transactions across partitions acknowledged", len(all), sumInts(spanned))
	r.wantPlacement(t, all)
}

// ledgerWorker writes its own keys (p1: id*keysPerWorker+j, p2: those
// plus 100) and keeps acked, the value of each key as acknowledged.
type ledgerWorker struct {
	conn  *pgx.Conn
	id    int
	rng   *rand.Rand
	acked map[int]string
	n     int // values written, for unique values
	// spanned counts the acknowledged commits of transactions that wrote
	// on both partitions.
	spanned int
}

func sumInts(xs []int) (n int) {
	for _, x := range xs {
		n += x
	}
	return n
}

const keysPerWorker = 4

// key returns one of the worker's keys on p1 (hi false) or p2.
func (lw *ledgerWorker) key(hi bool) int {
	k := lw.id*keysPerWorker + lw.rng.Intn(keysPerWorker)
	if hi {
		k += 100
	}
	return k
}

func (lw *ledgerWorker) value() string {
	lw.n++
	return fmt.Sprintf("w%d-%d", lw.id, lw.n)
}

// execer is a connection or a transaction.
type execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// write sets key k to v in ex (insert, upsert, update or delete, by what
// the ledger holds) and records it in pending.
func (lw *ledgerWorker) write(ctx context.Context, ex execer, k int, pending map[int]*string) error {
	_, present := lw.acked[k]
	if p, ok := pending[k]; ok {
		present = p != nil
	}
	v := lw.value()
	var tag pgconn.CommandTag
	var err error
	switch op := lw.rng.Intn(4); {
	case !present && op < 2:
		tag, err = ex.Exec(ctx, "INSERT INTO kv (k, v) VALUES ($1, $2)", k, v)
	case op == 0 || !present:
		tag, err = ex.Exec(ctx, "INSERT INTO kv (k, v) VALUES ($1, $2) ON CONFLICT (k) DO UPDATE SET v = excluded.v", k, v)
	case op == 1:
		tag, err = ex.Exec(ctx, "DELETE FROM kv WHERE k = $1", k)
		pending[k] = nil
		return checkTag(tag, err, "delete", k)
	default:
		tag, err = ex.Exec(ctx, "UPDATE kv SET v = $2 WHERE k = $1", k, v)
	}
	pending[k] = &v
	return checkTag(tag, err, "write", k)
}

func checkTag(tag pgconn.CommandTag, err error, what string, k int) error {
	if err != nil {
		return fmt.Errorf("%s %d: %w", what, k, err)
	}
	if tag.RowsAffected() != 1 {
		return fmt.Errorf("%s %d: %s, want one row", what, k, tag)
	}
	return nil
}

// ack makes pending writes acknowledged.
func (lw *ledgerWorker) ack(pending map[int]*string) {
	for k, v := range pending {
		if v == nil {
			delete(lw.acked, k)
		} else {
			lw.acked[k] = *v
		}
	}
}

func (lw *ledgerWorker) run(ctx context.Context, ops int) error {
	for i := 0; i < ops; i++ {
		pending := map[int]*string{}
		switch op := lw.rng.Intn(5); op {
		case 0: // one statement, its own transaction
			if err := lw.write(ctx, lw.conn, lw.key(lw.rng.Intn(2) == 0), pending); err != nil {
				return err
			}
			lw.ack(pending)
		case 1, 2: // a transaction spanning both partitions; one in three rolled back
			tx, err := lw.conn.Begin(ctx)
			if err != nil {
				return err
			}
			for _, hi := range []bool{false, true, lw.rng.Intn(2) == 0} {
				if err := lw.write(ctx, tx, lw.key(hi), pending); err != nil {
					tx.Rollback(ctx)
					return err
				}
			}
			if lw.rng.Intn(3) == 0 {
				if err := tx.Rollback(ctx); err != nil {
					return fmt.Errorf("rollback: %w", err)
				}
				continue
			}
			if err := tx.Commit(ctx); err != nil {
				return fmt.Errorf("commit: %w", err)
			}
			lw.ack(pending)
			lw.spanned++
		case 3: // a transaction on one partition
			tx, err := lw.conn.Begin(ctx)
			if err != nil {
				return err
			}
			hi := lw.rng.Intn(2) == 0
			for range 2 {
				if err := lw.write(ctx, tx, lw.key(hi), pending); err != nil {
					tx.Rollback(ctx)
					return err
				}
			}
			if err := tx.Commit(ctx); err != nil {
				return fmt.Errorf("commit: %w", err)
			}
			lw.ack(pending)
		case 4: // read every key of the worker's over both partitions
			if err := lw.check(ctx); err != nil {
				return err
			}
		}
	}
	return lw.check(ctx)
}

// check reads the worker's keys through the router, in key order, and
// compares them with the ledger.
func (lw *ledgerWorker) check(ctx context.Context) error {
	var keys []int
	for j := range keysPerWorker {
		keys = append(keys, lw.id*keysPerWorker+j, 100+lw.id*keysPerWorker+j)
	}
	args := make([]any, len(keys))
	params := make([]string, len(keys))
	for i, k := range keys {
		args[i], params[i] = k, "$"+strconv.Itoa(i+1)
	}
	rows, _ := lw.conn.Query(ctx, "SELECT k, v FROM kv WHERE k IN ("+strings.Join(params, ", ")+") ORDER BY k", args...)
	var got []string
	for rows.Next() {
		var k int
		var v string
		if err := rows.Scan(&k, &v); err != nil {
			return err
		}
		got = append(got, fmt.Sprintf("%d=%s", k, v))
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("read: %w", err)
	}
	var want []string
	for _, k := range slices.Sorted(maps.Keys(lw.acked)) {
		want = append(want, fmt.Sprintf("%d=%s", k, lw.acked[k]))
	}
	if !slices.Equal(got, want) {
		return fmt.Errorf("read %v, ledger %v", got, want)
	}
	return nil
}
