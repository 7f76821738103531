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

// Pull copies chunk c of reconfiguration id from src into dst: Load with
// src's CopyOut as the source. It reads src in one REPEATABLE READ
// snapshot (binary COPY of each table's rows in the chunk's ranges) and
// writes dst (staging table, INSERT … ON CONFLICT DO NOTHING, root first)
// in a transaction that also drops the chunk's incoming fence and first
// locks that fence row: concurrent or repeated pulls of one chunk copy it
// once. The chunk is Complete when Pull returns nil.
//
// On error both transactions are rolled back and the error returned; the
// caller retries later. src and dst stay usable unless the error is their
// connection's or ctx's. Rows counts the rows read from src (a row dst
// already held counts but is not inserted again).
func Pull(ctx context.Context, src, dst *pgx.Conn, id string, c reshard.Chunk, ks *keyspace.Keyspace) (Pulled, error) {
	return Load(ctx, dst, id, c, ks, ConnSource(src, c, ks))
}

// Source opens the stream of a chunk's rows (CopyOut's format) for Load,
// which calls it at most once, after it has locked the chunk's incoming
// fence, and closes what it returns.
type Source func(ctx context.Context) (io.ReadCloser, error)

// ConnSource is chunk c's stream read from src (CopyOut) as Load needs it.
// Closing it reads what Load left of the stream, so that src's COPY runs
// to its end rather than fail its write (which would close src).
func ConnSource(src *pgx.Conn, c reshard.Chunk, ks *keyspace.Keyspace) Source {
	return func(ctx context.Context) (io.ReadCloser, error) {
		pr, pw := io.Pipe()
		done := make(chan error, 1)
		go func() {
			err := CopyOut(ctx, src, c, ks, pw)
			pw.CloseWithError(err) // nil: EOF for the reader
			done <- err
		}()
		return &connStream{PipeReader: pr, done: done}, nil
	}
}

type connStream struct {
	*io.PipeReader
	done chan error
}

func (s *connStream) Close() error {
	io.Copy(io.Discard, s.PipeReader)
	return <-s.done
}

// Load is the destination half of a pull of chunk c of reconfiguration
// id into dst: in one transaction it locks the chunk's incoming fence rows
// (none left: Already, open is not called), opens the source, loads each
// table of the stream through a staging table (INSERT … ON CONFLICT DO
// NOTHING), deletes the fence rows and commits. A stream that fails, is
// cut short, or whose tables, rows or bytes are not those it announces
// rolls the transaction back: nothing of the chunk is loaded.
func Load(ctx context.Context, dst *pgx.Conn, id string, c reshard.Chunk, ks *keyspace.Keyspace, open Source) (Pulled, error) {
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
		rc, err := open(ctx)
		if err != nil {
			return fmt.Errorf("source: %w", err)
		}
		defer rc.Close()
		sr := newStreamReader(rc)
		for i, t := range tables {
			n, b, err := loadTable(ctx, dtx, sr, i, t)
			if err != nil {
				return fmt.Errorf("table %s: %w", t.Name, err)
			}
			p.Rows += n
			p.Bytes += b
		}
		if err := sr.done(); err != nil {
			return err
		}
		_, err = dtx.Exec(ctx, "DELETE FROM public.sluice_fence WHERE reshard = $1 AND chunk = $2 AND side = 'in'", id, c.ID)
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

// loadTable loads the stream's next table, which must be t, into dtx
// through staging table number i. It returns the rows and binary COPY
// bytes the stream carried.
func loadTable(ctx context.Context, dtx pgx.Tx, sr *streamReader, i int, t keyspace.Table) (int64, int64, error) {
	h, err := sr.table()
	if err != nil {
		return 0, 0, err
	}
	if h.Table != t.Name {
		return 0, 0, fmt.Errorf("the stream has table %s here", h.Table)
	}
	cols, err := insertableColumns(ctx, dtx, t.Name)
	if err != nil {
		return 0, 0, err
	}
	if a, b := slices.Sorted(slices.Values(h.Columns)), slices.Sorted(slices.Values(cols)); !slices.Equal(a, b) {
		return 0, 0, fmt.Errorf("columns (%s) at the source, (%s) at the destination", strings.Join(h.Columns, ", "), strings.Join(cols, ", "))
	}
	// The source's column order, each name the destination's own string.
	list := make([]string, len(h.Columns))
	for j, c := range h.Columns {
		list[j] = cols[slices.Index(cols, c)]
	}
	stage := quoteIdent(fmt.Sprintf("sluice_stage_%d", i))
	if _, err := dtx.Exec(ctx, fmt.Sprintf("CREATE TEMP TABLE %s (LIKE %s) ON COMMIT DROP", stage, quoteIdent(t.Name))); err != nil {
		return 0, 0, err
	}
	cl := strings.Join(list, ", ")
	data := &tableData{s: sr}
	tag, err := dtx.Conn().PgConn().CopyFrom(ctx, data, fmt.Sprintf("COPY %s (%s) FROM STDIN (FORMAT binary)", stage, cl))
	if data.err != nil {
		return 0, 0, data.err
	}
	if err != nil {
		return 0, 0, err
	}
	if data.end == nil {
		return 0, 0, errors.New("chunk stream: the table's data did not end")
	}
	if tag.RowsAffected() != data.end.Rows || data.n != data.end.Bytes {
		return 0, 0, fmt.Errorf("chunk stream: %d rows in %d bytes loaded, the source sent %d rows in %d bytes",
			tag.RowsAffected(), data.n, data.end.Rows, data.end.Bytes)
	}
	_, err = dtx.Exec(ctx, fmt.Sprintf("INSERT INTO %s (%s) OVERRIDING SYSTEM VALUE SELECT %s FROM %s ON CONFLICT DO NOTHING",
		quoteIdent(t.Name), cl, cl, stage))
	if err != nil {
		return 0, 0, err
	}
	if err := advanceSequences(ctx, dtx, t.Name, stage); err != nil {
		return 0, 0, err
	}
	return tag.RowsAffected(), data.n, nil
}

// advanceSequences moves every sequence owned by a column of table (serial
// and identity columns) past the largest value the rows staged in stage
// carry, so the destination never hands out a value a moved row holds.
// Only the staged rows are read.
func advanceSequences(ctx context.Context, tx pgx.Tx, table, stage string) error {
	rows, err := tx.Query(ctx, `SELECT quote_ident(a.attname), pg_get_serial_sequence($1, a.attname)
		FROM pg_attribute a WHERE a.attrelid = to_regclass($1) AND a.attnum > 0 AND NOT a.attisdropped
		AND pg_get_serial_sequence($1, a.attname) IS NOT NULL`, quoteIdent(table))
	if err != nil {
		return err
	}
	type seqCol struct{ Col, Seq string }
	cols, err := pgx.CollectRows(rows, pgx.RowToStructByPos[seqCol])
	if err != nil {
		return err
	}
	for _, c := range cols {
		_, err := tx.Exec(ctx, fmt.Sprintf(`SELECT setval($1::regclass, m) FROM (SELECT max(%s)::int8 AS m FROM %s) x
			WHERE m IS NOT NULL AND m > coalesce(pg_sequence_last_value($1::regclass), 0)`, c.Col, stage), c.Seq)
		if err != nil {
			return fmt.Errorf("sequence %s of %s: %w", c.Seq, table, err)
		}
	}
	return nil
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
				name, name, chunkPredicate(t, c), limit))
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
