package pg

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/sluicedb/sluice/migration"
)

// BufferBlocks lists the source's shared buffers (pg_buffercache) in every
// database, sorted. It creates the pg_buffercache extension in database
// postgres and pg_prewarm in every database that has cached blocks: WAL
// carries them to the standby, which cannot create extensions itself.
func (s *LocalSource) BufferBlocks(ctx context.Context) ([]migration.Block, error) {
	var out []migration.Block
	err := s.withConn(ctx, func(c *pgx.Conn) error {
		if _, err := c.Exec(ctx, "CREATE EXTENSION IF NOT EXISTS pg_buffercache"); err != nil {
			return err
		}
		rows, err := c.Query(ctx, `SELECT reldatabase::int8, reltablespace::int8, relfilenode::int8, relforknumber, relblocknumber::int8
			FROM pg_buffercache WHERE relfilenode IS NOT NULL AND reldatabase <> 0
			ORDER BY 1, 2, 3, 4, 5`)
		if err != nil {
			return err
		}
		for rows.Next() {
			var b migration.Block
			var db, ts, fn, blk int64
			if err := rows.Scan(&db, &ts, &fn, &b.Fork, &blk); err != nil {
				return err
			}
			b.Database, b.Tablespace, b.Filenode, b.Block = uint32(db), uint32(ts), uint32(fn), uint32(blk)
			out = append(out, b)
		}
		if err := rows.Err(); err != nil {
			return err
		}
		var names []string
		rows, err = c.Query(ctx, "SELECT datname FROM pg_database WHERE datallowconn AND oid = ANY($1::oid[])", dbOIDs(out))
		if err != nil {
			return err
		}
		for rows.Next() {
			var n string
			if err := rows.Scan(&n); err != nil {
				return err
			}
			names = append(names, n)
		}
		if err := rows.Err(); err != nil {
			return err
		}
		for _, n := range names {
			dc, err := pgx.Connect(ctx, socketConnString(s.C, n))
			if err != nil {
				return err
			}
			_, err = dc.Exec(ctx, "CREATE EXTENSION IF NOT EXISTS pg_prewarm")
			dc.Close(context.Background())
			if err != nil {
				return fmt.Errorf("database %s: %w", n, err)
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("migration: buffer blocks: %w", err)
	}
	return out, nil
}

func dbOIDs(bs []migration.Block) []int64 {
	var out []int64
	for i, b := range bs {
		if i == 0 || b.Database != bs[i-1].Database {
			out = append(out, int64(b.Database))
		}
	}
	return out
}
