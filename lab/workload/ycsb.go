// Package workload is Slacker's transactional YCSB: the foreground load that
// sluice's migrations must not hurt, and the ledger that proves they lost
// nothing.
//
// The table is YCSB's usertable: a bigint key and ten 100-byte text fields.
// A transaction is OpsPerTx operations, each a read of a whole record
// (ReadFraction of them) or an update of one field, on keys drawn from a
// uniform, zipfian or hot-spot distribution. Transactions arrive open-loop as a
// Poisson process at a set rate and are served by a fixed multiprogramming level
// (MPL) of connections from one FIFO queue, so latency = queue wait + execution,
// as in Slacker's evaluation.
//
// Every transaction that updates also inserts one row with a client-chosen
// unique id into sluice_ledger (no unique constraint, so a duplicate would
// show). The ids of transactions whose COMMIT was acknowledged form the
// Ledger; Verify checks, row by row, that each acknowledged id is present
// exactly once on whichever server now owns the data.
//
// The same runner drives a keyspace (ks.go): YCSB (ksycsb.go) and
// TPC-C-lite (tpcc_*.go), loaded onto each partition by the plan's
// owner, sent through the keyspace router or routed by the workload itself,
// and verified row by row on every partition (Verdict).
package workload

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"

	"github.com/jackc/pgx/v5"
)

// Schema constants.
const (
	Table       = "usertable"
	LedgerTable = "sluice_ledger"
	Fields      = 10  // field0 … field9
	FieldBytes  = 100 // bytes per field
	// RowBytesOnDisk is the approximate heap+index footprint of one row,
	// used to turn a target size into a row count.
	RowBytesOnDisk = 1160
)

// CreateSchema creates usertable and the ledger table if they do not exist.
func CreateSchema(ctx context.Context, conn *pgx.Conn) error {
	var cols strings.Builder
	for i := 0; i < Fields; i++ {
		fmt.Fprintf(&cols, ", field%d text not null", i)
	}
	stmts := []string{
		fmt.Sprintf("CREATE TABLE IF NOT EXISTS %s (ycsb_key bigint PRIMARY KEY%s)", Table, cols.String()),
		fmt.Sprintf("CREATE TABLE IF NOT EXISTS %s (id bigint NOT NULL, at timestamptz NOT NULL DEFAULT now())", LedgerTable),
	}
	for _, s := range stmts {
		if _, err := conn.Exec(ctx, s); err != nil {
			return fmt.Errorf("workload: create schema: %w", err)
		}
	}
	return nil
}

// RowsForSize returns how many usertable rows make about size bytes on disk.
func RowsForSize(size int64) int64 {
	n := size / RowBytesOnDisk
	if n < 1 {
		n = 1
	}
	return n
}

// LoadResult reports a load phase.
type LoadResult struct {
	Rows  int64 `json:"rows"`
	Bytes int64 `json:"bytes"` // pg_total_relation_size of usertable after the load
}

// Load creates the schema and fills usertable with rows [0, rows) by COPY,
// with field values drawn from a generator seeded by seed. It replaces any
// existing rows. progress, if not nil, is called with the rows copied so far.
func Load(ctx context.Context, conn *pgx.Conn, rows int64, seed uint64, progress func(done int64)) (LoadResult, error) {
	if rows <= 0 {
		return LoadResult{}, fmt.Errorf("workload: load: rows must be positive, got %d", rows)
	}
	if err := CreateSchema(ctx, conn); err != nil {
		return LoadResult{}, err
	}
	if _, err := conn.Exec(ctx, "TRUNCATE "+Table+", "+LedgerTable); err != nil {
		return LoadResult{}, fmt.Errorf("workload: load: %w", err)
	}
	cols := []string{"ycsb_key"}
	for i := 0; i < Fields; i++ {
		cols = append(cols, fmt.Sprintf("field%d", i))
	}
	src := &rowSource{n: rows, rng: rand.New(rand.NewPCG(seed, 0x5eed)), progress: progress}
	if _, err := conn.CopyFrom(ctx, pgx.Identifier{Table}, cols, src); err != nil {
		return LoadResult{}, fmt.Errorf("workload: load: copy: %w", err)
	}
	if _, err := conn.Exec(ctx, "ANALYZE "+Table); err != nil {
		return LoadResult{}, fmt.Errorf("workload: load: %w", err)
	}
	res := LoadResult{Rows: rows}
	if err := conn.QueryRow(ctx, "SELECT pg_total_relation_size($1::regclass)", Table).Scan(&res.Bytes); err != nil {
		return res, fmt.Errorf("workload: load: size: %w", err)
	}
	return res, nil
}

// rowSource feeds COPY without materialising the table.
type rowSource struct {
	n, i     int64
	rng      *rand.Rand
	row      []any
	buf      [Fields][FieldBytes]byte
	progress func(int64)
}

func (s *rowSource) Next() bool {
	if s.i >= s.n {
		if s.progress != nil {
			s.progress(s.i)
		}
		return false
	}
	if s.row == nil {
		s.row = make([]any, Fields+1)
	}
	s.row[0] = s.i
	for f := 0; f < Fields; f++ {
		fillValue(s.rng, s.buf[f][:])
		s.row[f+1] = string(s.buf[f][:])
	}
	s.i++
	if s.progress != nil && s.i%50000 == 0 {
		s.progress(s.i)
	}
	return true
}

func (s *rowSource) Values() ([]any, error) { return s.row, nil }
func (s *rowSource) Err() error             { return nil }

const alphabet = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_"

// fillValue fills b with printable characters from r (6 bits per char).
func fillValue(r *rand.Rand, b []byte) {
	for i := 0; i < len(b); {
		v := r.Uint64()
		for j := 0; j < 10 && i < len(b); j++ {
			b[i] = alphabet[v&63]
			v >>= 6
			i++
		}
	}
}
