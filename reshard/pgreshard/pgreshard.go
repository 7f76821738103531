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
package pgreshard

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"

	"github.com/sluicedb/sluice/keyspace"
	"github.com/sluicedb/sluice/reshard"
)

var errTODO = errors.New("pgreshard: not built")

// Install creates the fence table and the fence triggers of keyspace ks's
// sharded and co-partitioned tables on the partition conn is connected
// to. Idempotent. DDL takes its locks with a short lock_timeout and is
// retried until ctx ends, so it never queues behind a long transaction
// while blocking every other one.
func Install(ctx context.Context, conn *pgx.Conn, ks *keyspace.Keyspace) error { return errTODO }

// Uninstall drops what Install made (same lock discipline).
func Uninstall(ctx context.Context, conn *pgx.Conn, ks *keyspace.Keyspace) error { return errTODO }

// FenceIn inserts the incoming fence of chunks (this partition is their
// destination) for reconfiguration id. Idempotent.
func FenceIn(ctx context.Context, conn *pgx.Conn, id string, chunks []reshard.Chunk) error {
	return errTODO
}

// FenceOut inserts the outgoing fence of chunks (this partition is their
// source) for reconfiguration id, in a transaction that first takes SHARE
// locks on every table of the chunks: it commits only after every writer
// that started before it has ended, and every writer after it sees the
// fence. Short lock_timeout, retried until ctx ends. Idempotent.
func FenceOut(ctx context.Context, conn *pgx.Conn, id string, chunks []reshard.Chunk) error {
	return errTODO
}

// Unfence deletes reconfiguration id's fence rows of side ("in", "out", or
// "" for both).
func Unfence(ctx context.Context, conn *pgx.Conn, id, side string) error { return errTODO }

// Arrived returns which of reconfiguration id's chunks destined to this
// partition have no incoming fence left (their pull committed here), of
// those listed.
func Arrived(ctx context.Context, conn *pgx.Conn, id string, chunks []reshard.Chunk) (map[int]bool, error) {
	return nil, errTODO
}

// Stats returns root's reshard.Stats on this partition: reltuples,
// histogram_bounds of its key column from pg_stats, and the total size of
// root and its co-partitioned tables. No scan of the data.
func Stats(ctx context.Context, conn *pgx.Conn, ks *keyspace.Keyspace, root string) (reshard.Stats, error) {
	return reshard.Stats{}, errTODO
}

// Pulled is what a Pull did.
type Pulled struct {
	Rows    int64 // rows copied, all tables
	Bytes   int64 // binary COPY payload
	Already bool  // the chunk had arrived: nothing copied
}

// Pull copies chunk c of reconfiguration id from src (one REPEATABLE READ
// snapshot, binary COPY of each table's rows in the chunk's ranges) into
// dst (staging table, INSERT … ON CONFLICT DO NOTHING, root first) and drops
// the chunk's incoming fence in the same transaction at dst, which first
// locks that fence row: concurrent or repeated pulls of one chunk copy it
// once. The chunk is Complete when Pull returns nil.
func Pull(ctx context.Context, src, dst *pgx.Conn, id string, c reshard.Chunk, ks *keyspace.Keyspace) (Pulled, error) {
	return Pulled{}, errTODO
}

// Clean deletes at most limit rows of each of chunk c's tables at its
// source (co-partitioned tables first, the root last), past the fence;
// it returns the rows deleted (0: the chunk is gone from the source).
func Clean(ctx context.Context, src *pgx.Conn, c reshard.Chunk, ks *keyspace.Keyspace, limit int) (int64, error) {
	return 0, errTODO
}
