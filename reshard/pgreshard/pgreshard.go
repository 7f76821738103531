// Package pgreshard does a reconfiguration's work on PostgreSQL partitions
// (package reshard is the pure core): the fences that make a partition
// refuse writes to keys it does not own now, chunk sizes from the planner's
// statistics, pulls of a chunk from its source into its destination, and
// the deletion of a pulled chunk's rows at its source.
//
// # The fence
//
// Every partition of a keyspace under reconfiguration has a table
// sluice_fence (reshard id, chunk, side "in" or "out", root, bounds) and, on
// every sharded and co-partitioned table, a BEFORE INSERT OR UPDATE OR DELETE
// row trigger that raises SQLSTATE 40001 when the row's key (old or new)
// lies in a fenced range of its root. "in" rows are a destination's chunks
// not yet arrived; "out" rows a source's chunks given away. Sessions of the
// reconfiguration itself pass with SET LOCAL sluice.fence = 'off'.
//
// Row triggers fire for INSERT, UPDATE, DELETE, COPY FROM and INSERT … ON
// CONFLICT, not for TRUNCATE: a TRUNCATE of a fenced table is not refused.
package pgreshard

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/sluicedb/sluice/keyspace"
	"github.com/sluicedb/sluice/reshard"
)

// Lock discipline of the statements that lock tables (Install, Uninstall,
// FenceOut): each waits at most lockTimeout for a lock, then the whole
// transaction is rolled back and retried after a backoff growing from
// minBackoff to maxBackoff, until ctx ends. A session never queues for
// long behind a long transaction while every later writer queues behind it.
const (
	lockTimeout = "100ms"
	minBackoff  = 10 * time.Millisecond
	maxBackoff  = 200 * time.Millisecond
)

// Install creates the fence table and the fence triggers of keyspace ks's
// sharded and co-partitioned tables on the partition conn is connected
// to. Idempotent. DDL takes its locks with a short lock_timeout and is
// retried until ctx ends, so it never queues behind a long transaction
// while blocking every other one.
func Install(ctx context.Context, conn *pgx.Conn, ks *keyspace.Keyspace) error {
	err := withLockRetry(ctx, conn, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, fenceTableSQL)
		return err
	})
	if err != nil {
		return fmt.Errorf("pgreshard: install fence table: %w", err)
	}
	// One transaction per table: a table busy with a long transaction
	// delays its own trigger only. A trigger already there is kept (its
	// function replaced, which locks no table): a keyspace created by
	// sluice has them from the start (InstallSQL), so a reconfiguration
	// takes no table lock to arm its fence.
	for _, t := range fencedTables(ks) {
		err := withLockRetry(ctx, conn, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, triggerFuncSQL(t)); err != nil {
				return err
			}
			var has bool
			if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_trigger WHERE tgrelid = to_regclass($1) AND tgname = $2)`,
				quoteIdent(t.Name), fenceName(t.Name)).Scan(&has); err != nil || has {
				return err
			}
			_, err := tx.Exec(ctx, triggerSQL(t))
			return err
		})
		if err != nil {
			return fmt.Errorf("pgreshard: install fence of table %s: %w", t.Name, err)
		}
	}
	return nil
}

// InstallSQL is what Install makes, as statements to run in the
// transaction that creates keyspace ks's tables (no lock waits there).
func InstallSQL(ks *keyspace.Keyspace) string {
	out := []string{fenceTableSQL}
	for _, t := range fencedTables(ks) {
		out = append(out, triggerFuncSQL(t), triggerSQL(t))
	}
	return strings.Join(out, ";\n")
}

// Uninstall drops what Install made (same lock discipline).
func Uninstall(ctx context.Context, conn *pgx.Conn, ks *keyspace.Keyspace) error {
	for _, t := range fencedTables(ks) {
		n := quoteIdent(fenceName(t.Name))
		err := withLockRetry(ctx, conn, func(tx pgx.Tx) error {
			var exists bool
			if err := tx.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", quoteIdent(t.Name)).Scan(&exists); err != nil {
				return err
			}
			if exists {
				if _, err := tx.Exec(ctx, fmt.Sprintf("DROP TRIGGER IF EXISTS %s ON %s", n, quoteIdent(t.Name))); err != nil {
					return err
				}
			}
			_, err := tx.Exec(ctx, "DROP FUNCTION IF EXISTS public."+n+"()")
			return err
		})
		if err != nil {
			return fmt.Errorf("pgreshard: uninstall fence of table %s: %w", t.Name, err)
		}
	}
	err := withLockRetry(ctx, conn, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, "DROP TABLE IF EXISTS public.sluice_fence")
		return err
	})
	if err != nil {
		return fmt.Errorf("pgreshard: uninstall fence table: %w", err)
	}
	return nil
}

// FenceIn inserts the incoming fence of chunks (this partition is their
// destination) for reconfiguration id. Idempotent.
func FenceIn(ctx context.Context, conn *pgx.Conn, id string, chunks []reshard.Chunk) error {
	err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error { return insertFence(ctx, tx, id, "in", chunks) })
	if err != nil {
		return fmt.Errorf("pgreshard: fence in %s: %w", id, err)
	}
	return nil
}

// FenceOut inserts the outgoing fence of chunks (this partition is their
// source) for reconfiguration id, in a transaction that first takes SHARE
// locks on every table of the chunks: it commits only after every writer
// that started before it has ended, and every writer after it sees the
// fence. Short lock_timeout, retried until ctx ends. Idempotent.
//
// "Every writer after it" means every statement whose snapshot is taken
// after the commit: a REPEATABLE READ or SERIALIZABLE transaction whose
// snapshot predates the fence and that first writes a table of the chunks
// after the commit does not see it.
func FenceOut(ctx context.Context, conn *pgx.Conn, id string, chunks []reshard.Chunk) error {
	var tables []string
	for _, c := range chunks {
		for _, t := range c.Tables {
			if !slices.Contains(tables, t) {
				tables = append(tables, t)
			}
		}
	}
	slices.Sort(tables) // one lock order for every caller
	lock := "LOCK TABLE "
	for i, t := range tables {
		if i > 0 {
			lock += ", "
		}
		lock += quoteIdent(t)
	}
	lock += " IN SHARE MODE"
	err := withLockRetry(ctx, conn, func(tx pgx.Tx) error {
		if len(tables) > 0 {
			if _, err := tx.Exec(ctx, lock); err != nil {
				return err
			}
		}
		return insertFence(ctx, tx, id, "out", chunks)
	})
	if err != nil {
		return fmt.Errorf("pgreshard: fence out %s: %w", id, err)
	}
	return nil
}

// insertFence inserts one fence row per range of each chunk; rows already
// there are left alone.
func insertFence(ctx context.Context, tx pgx.Tx, id, side string, chunks []reshard.Chunk) error {
	const q = `INSERT INTO public.sluice_fence (reshard, chunk, side, root, lo_i, hi_i, lo_t, hi_t)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8) ON CONFLICT DO NOTHING`
	var b pgx.Batch
	for _, c := range chunks {
		for _, r := range c.Ranges {
			f := rowOf(r)
			b.Queue(q, id, c.ID, side, c.Root, f.loI, f.hiI, f.loT, f.hiT)
		}
	}
	if b.Len() == 0 {
		return nil
	}
	return tx.SendBatch(ctx, &b).Close()
}

// Unfence deletes reconfiguration id's fence rows of side ("in", "out", or
// "" for both).
func Unfence(ctx context.Context, conn *pgx.Conn, id, side string) error {
	if side != "" && side != "in" && side != "out" {
		return fmt.Errorf("pgreshard: unfence %s: side %q: want in, out or empty", id, side)
	}
	_, err := conn.Exec(ctx, "DELETE FROM public.sluice_fence WHERE reshard = $1 AND ($2 = '' OR side = $2)", id, side)
	if err != nil {
		return fmt.Errorf("pgreshard: unfence %s: %w", id, err)
	}
	return nil
}

// Arrived returns which of reconfiguration id's chunks destined to this
// partition have no incoming fence left (their pull committed here), of
// those listed.
func Arrived(ctx context.Context, conn *pgx.Conn, id string, chunks []reshard.Chunk) (map[int]bool, error) {
	ids := make([]int32, len(chunks))
	for i, c := range chunks {
		ids[i] = int32(c.ID)
	}
	rows, err := conn.Query(ctx, `SELECT DISTINCT chunk FROM public.sluice_fence
		WHERE reshard = $1 AND side = 'in' AND chunk = ANY($2)`, id, ids)
	if err != nil {
		return nil, fmt.Errorf("pgreshard: arrived %s: %w", id, err)
	}
	fenced, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	if err != nil {
		return nil, fmt.Errorf("pgreshard: arrived %s: %w", id, err)
	}
	out := make(map[int]bool, len(chunks))
	for _, c := range chunks {
		out[c.ID] = !slices.Contains(fenced, int32(c.ID))
	}
	return out, nil
}

// withLockRetry runs f in a transaction whose lock waits end after
// lockTimeout, and retries the whole transaction after a lock timeout or a
// deadlock until it commits or ctx ends. Other errors return at once.
func withLockRetry(ctx context.Context, conn *pgx.Conn, f func(tx pgx.Tx) error) error {
	backoff := minBackoff
	for {
		err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, "SET LOCAL lock_timeout = '"+lockTimeout+"'"); err != nil {
				return err
			}
			return f(tx)
		})
		if err == nil || !isLockConflict(err) {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last: %v)", ctx.Err(), err)
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, maxBackoff)
	}
}

// isLockConflict reports a lock_timeout (55P03) or deadlock (40P01) error.
func isLockConflict(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && (pe.Code == "55P03" || pe.Code == "40P01")
}
