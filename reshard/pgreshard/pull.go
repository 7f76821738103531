package pgreshard

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/sluicedb/sluice/keyspace"
	"github.com/sluicedb/sluice/reshard"
)

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
//
// On error both transactions are rolled back and the error returned; the
// caller retries later. src and dst stay usable unless the error is their
// connection's or ctx's. Rows counts the rows read from src (a row dst
// already held counts but is not inserted again).
func Pull(ctx context.Context, src, dst *pgx.Conn, id string, c reshard.Chunk, ks *keyspace.Keyspace) (Pulled, error) {
	tables, err := chunkTables(ks, c)
	if err != nil {
		return Pulled{}, fmt.Errorf("pgreshard: pull %s: %w", c, err)
	}
	var p Pulled
	err = pgx.BeginFunc(ctx, dst, func(dtx pgx.Tx) error {
		if _, err := dtx.Exec(ctx, "SET LOCAL sluice.fence = 'off'"); err != nil {
			return err
		}
		rows, err := dtx.Query(ctx, `SELECT 1 FROM public.sluice_fence
			WHERE reshard = $1 AND chunk = $2 AND side = 'in' FOR UPDATE`, id, c.ID)
		if err != nil {
			return err
		}
		fenced, err := pgx.CollectRows(rows, pgx.RowTo[int32])
		if err != nil {
			return err
		}
		if len(fenced) == 0 {
			p.Already = true // a pull committed before ours; nothing to do
			return nil
		}
		err = pgx.BeginTxFunc(ctx, src, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(pgx.Tx) error {
			for i, t := range tables {
				n, b, err := pullTable(ctx, src, dtx, i, t, c.Ranges)
				if err != nil {
					return fmt.Errorf("table %s: %w", t.Name, err)
				}
				p.Rows += n
				p.Bytes += b
			}
			_, err := dtx.Exec(ctx, "DELETE FROM public.sluice_fence WHERE reshard = $1 AND chunk = $2 AND side = 'in'", id, c.ID)
			return err
		})
		return err
	})
	if err != nil {
		return Pulled{}, fmt.Errorf("pgreshard: pull %s of %s: %w", c, id, err)
	}
	return p, nil
}

// chunkTables returns the keyspace tables of chunk c, in c's order (root first).
func chunkTables(ks *keyspace.Keyspace, c reshard.Chunk) ([]keyspace.Table, error) {
	out := make([]keyspace.Table, 0, len(c.Tables))
	for _, name := range c.Tables {
		t, ok := ks.Table(name)
		if !ok || (t.Kind != keyspace.Sharded && t.Kind != keyspace.CoPartitioned) || t.Root != c.Root {
			return nil, fmt.Errorf("table %s is not root %s or co-partitioned with it in keyspace %s", name, c.Root, ks.Name)
		}
		out = append(out, *t)
	}
	return out, nil
}

// pullTable copies table t's rows in ranges rs from src's open snapshot
// into dst's transaction dtx, through staging table number i. It returns
// the rows and binary COPY bytes read from src.
func pullTable(ctx context.Context, src *pgx.Conn, dtx pgx.Tx, i int, t keyspace.Table, rs []keyspace.Range) (int64, int64, error) {
	cols, err := insertableColumns(ctx, dtx, t.Name)
	if err != nil {
		return 0, 0, err
	}
	stage := quoteIdent(fmt.Sprintf("sluice_stage_%d", i))
	if _, err := dtx.Exec(ctx, fmt.Sprintf("CREATE TEMP TABLE %s (LIKE %s) ON COMMIT DROP", stage, quoteIdent(t.Name))); err != nil {
		return 0, 0, err
	}
	list := strings.Join(cols, ", ")
	copyOut := fmt.Sprintf("COPY (SELECT %s FROM %s WHERE %s) TO STDOUT (FORMAT binary)",
		list, quoteIdent(t.Name), rangePredicate(t.Column, t.Type, rs))
	copyIn := fmt.Sprintf("COPY %s (%s) FROM STDIN (FORMAT binary)", stage, list)

	pr, pw := io.Pipe()
	cw := &countingWriter{w: pw}
	done := make(chan error, 1)
	go func() {
		_, err := src.PgConn().CopyTo(ctx, cw, copyOut)
		pw.CloseWithError(err) // nil: EOF for the reader
		done <- err
	}()
	tag, inErr := dtx.Conn().PgConn().CopyFrom(ctx, pr, copyIn)
	if inErr != nil {
		// Let src's COPY run to its end rather than fail its write, which
		// would close src's connection.
		io.Copy(io.Discard, pr)
	}
	outErr := <-done
	if err := errors.Join(outErr, inErr); err != nil {
		return 0, 0, err
	}
	_, err = dtx.Exec(ctx, fmt.Sprintf("INSERT INTO %s (%s) OVERRIDING SYSTEM VALUE SELECT %s FROM %s ON CONFLICT DO NOTHING",
		quoteIdent(t.Name), list, list, stage))
	if err != nil {
		return 0, 0, err
	}
	return tag.RowsAffected(), cw.n, nil
}

// insertableColumns returns table's columns that an INSERT may set (not
// dropped, not generated), quoted, in order.
func insertableColumns(ctx context.Context, tx pgx.Tx, table string) ([]string, error) {
	rows, err := tx.Query(ctx, `SELECT quote_ident(attname) FROM pg_attribute
		WHERE attrelid = to_regclass($1) AND attnum > 0 AND NOT attisdropped AND attgenerated = ''
		ORDER BY attnum`, quoteIdent(table))
	if err != nil {
		return nil, err
	}
	cols, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err == nil && len(cols) == 0 {
		err = fmt.Errorf("no table %s on the destination", table)
	}
	return cols, err
}

type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// Clean deletes at most limit rows of each of chunk c's tables at its
// source (co-partitioned tables first, the root last), past the fence;
// it returns the rows deleted (0: the chunk is gone from the source).
//
// Tables are visited so that a table comes before every table it
// references by a foreign key; a batch stops after the first table that
// still may hold rows of the chunk (limit rows deleted), so no row is
// deleted while a row referencing it remains.
func Clean(ctx context.Context, src *pgx.Conn, c reshard.Chunk, ks *keyspace.Keyspace, limit int) (int64, error) {
	if limit <= 0 {
		return 0, fmt.Errorf("pgreshard: clean %s: limit %d: want > 0", c, limit)
	}
	tables, err := chunkTables(ks, c)
	if err != nil {
		return 0, fmt.Errorf("pgreshard: clean %s: %w", c, err)
	}
	var total int64
	err = pgx.BeginFunc(ctx, src, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SET LOCAL sluice.fence = 'off'"); err != nil {
			return err
		}
		order, err := deleteOrder(ctx, tx, tables)
		if err != nil {
			return err
		}
		for _, t := range order {
			name := quoteIdent(t.Name)
			tag, err := tx.Exec(ctx, fmt.Sprintf("DELETE FROM %s WHERE ctid = ANY(ARRAY(SELECT ctid FROM %s WHERE %s LIMIT %d))",
				name, name, rangePredicate(t.Column, t.Type, c.Ranges), limit))
			if err != nil {
				return fmt.Errorf("table %s: %w", t.Name, err)
			}
			total += tag.RowsAffected()
			if tag.RowsAffected() >= int64(limit) {
				break
			}
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("pgreshard: clean %s: %w", c, err)
	}
	return total, nil
}

// deleteOrder orders tables (root first, as a chunk lists them) for
// deletion: co-partitioned tables before the root, and every table before
// the tables it references by a foreign key (a cycle keeps the base order).
func deleteOrder(ctx context.Context, tx pgx.Tx, tables []keyspace.Table) ([]keyspace.Table, error) {
	names := make([]string, len(tables))
	for i, t := range tables {
		names[i] = quoteIdent(t.Name)
	}
	rows, err := tx.Query(ctx, `
		WITH t AS (SELECT i, to_regclass(n) AS oid FROM unnest($1::text[]) WITH ORDINALITY AS u(n, i))
		SELECT DISTINCT a.i::int, b.i::int FROM pg_constraint k
		JOIN t a ON a.oid = k.conrelid JOIN t b ON b.oid = k.confrelid
		WHERE k.contype = 'f' AND a.i <> b.i`, names)
	if err != nil {
		return nil, err
	}
	refs := map[int][]int{} // 1-based index of a referenced table → those referencing it
	var from, to int
	_, err = pgx.ForEachRow(rows, []any{&from, &to}, func() error {
		refs[to-1] = append(refs[to-1], from-1)
		return nil
	})
	if err != nil {
		return nil, err
	}
	base := make([]int, len(tables))
	for i := range base {
		base[i] = len(tables) - 1 - i // reversed: co-partitioned first, root last
	}
	var out []keyspace.Table
	for len(base) > 0 {
		pick := 0 // the first table no remaining table references; else a cycle
		for j, i := range base {
			if !slices.ContainsFunc(refs[i], func(r int) bool { return slices.Contains(base, r) }) {
				pick = j
				break
			}
		}
		out = append(out, tables[base[pick]])
		base = slices.Delete(base, pick, pick+1)
	}
	return out, nil
}
