package pg

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/sluicedb/sluice/migration"
)

// run is one contiguous range of blocks of one relation fork.
type run struct {
	db, ts, fn  uint32
	fork        int16
	first, last uint32
}

// mergeRuns sorts blocks and merges them into contiguous runs.
func mergeRuns(blocks []migration.Block) []run {
	bs := append([]migration.Block(nil), blocks...)
	sort.Slice(bs, func(i, j int) bool {
		a, b := bs[i], bs[j]
		if a.Database != b.Database {
			return a.Database < b.Database
		}
		if a.Tablespace != b.Tablespace {
			return a.Tablespace < b.Tablespace
		}
		if a.Filenode != b.Filenode {
			return a.Filenode < b.Filenode
		}
		if a.Fork != b.Fork {
			return a.Fork < b.Fork
		}
		return a.Block < b.Block
	})
	var out []run
	for _, b := range bs {
		if n := len(out); n > 0 {
			r := &out[n-1]
			if r.db == b.Database && r.ts == b.Tablespace && r.fn == b.Filenode && r.fork == b.Fork && b.Block <= r.last+1 {
				r.last = max(r.last, b.Block)
				continue
			}
		}
		out = append(out, run{b.Database, b.Tablespace, b.Filenode, b.Fork, b.Block, b.Block})
	}
	return out
}

var forkNames = map[int16]string{0: "main", 1: "fsm", 2: "vm", 3: "init"}

// Prewarm maps each block's filenode to its relation in its database
// (pg_filenode_relation) and loads contiguous runs with pg_prewarm(…,
// 'buffer', fork, first, last). Blocks of relations that no longer exist, or
// beyond a relation's end, are skipped. pg_prewarm must exist in each database
// (LocalSource.BufferBlocks creates it on the source; it waits up to 10 s for
// the standby to replay that).
func (t *LocalTarget) Prewarm(ctx context.Context, m migration.Record, blocks []migration.Block) error {
	runs := mergeRuns(blocks)
	names := map[uint32]string{}
	err := t.withConn(ctx, m, func(conn *pgx.Conn) error {
		rows, err := conn.Query(ctx, "SELECT oid::int8, datname FROM pg_database WHERE datallowconn")
		if err != nil {
			return err
		}
		for rows.Next() {
			var oid int64
			var n string
			if err := rows.Scan(&oid, &n); err != nil {
				return err
			}
			names[uint32(oid)] = n
		}
		return rows.Err()
	})
	if err != nil {
		return fmt.Errorf("migration: prewarm: %w", err)
	}
	for i := 0; i < len(runs); {
		j := i
		for j < len(runs) && runs[j].db == runs[i].db {
			j++
		}
		name, ok := names[runs[i].db]
		if ok {
			batch := runs[i:j]
			if err := t.withDBConn(ctx, m, name, func(conn *pgx.Conn) error { return prewarmDB(ctx, conn, batch) }); err != nil {
				return fmt.Errorf("migration: prewarm %s: %w", name, err)
			}
		}
		i = j
	}
	return nil
}

func prewarmDB(ctx context.Context, conn *pgx.Conn, runs []run) error {
	for i := 0; ; i++ {
		var ok bool
		if err := conn.QueryRow(ctx, "SELECT to_regproc('pg_prewarm') IS NOT NULL").Scan(&ok); err != nil {
			return err
		}
		if ok {
			break
		}
		if i > 1000 {
			return errors.New("extension pg_prewarm not replayed after 10 s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	for _, r := range runs {
		// Clamp to the relation's current size; skip vanished relations.
		_, err := conn.Exec(ctx, `SELECT pg_prewarm(rel, 'buffer', $3, $4, least($5::int8, nb - 1))
			FROM (SELECT rel, pg_relation_size(rel, $3) / current_setting('block_size')::int8 AS nb
			      FROM pg_filenode_relation($1::oid, $2::oid) AS rel WHERE rel IS NOT NULL) s
			WHERE nb > $4::int8`,
			int64(r.ts), int64(r.fn), forkNames[r.fork], int64(r.first), int64(r.last))
		if err != nil {
			return err
		}
	}
	return nil
}
