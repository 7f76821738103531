package pgreshard

import (
	"context"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"

	"github.com/sluicedb/sluice/keyspace"
	"github.com/sluicedb/sluice/reshard"
)

// Stats returns root's reshard.Stats on this partition: reltuples,
// histogram_bounds of its key column from pg_stats, and the total size of
// root and its co-partitioned tables. No scan of the data.
func Stats(ctx context.Context, conn *pgx.Conn, ks *keyspace.Keyspace, root string) (reshard.Stats, error) {
	rt, ok := ks.Table(root)
	if !ok || rt.Kind != keyspace.Sharded {
		return reshard.Stats{}, fmt.Errorf("pgreshard: stats: %s is not a sharded table of keyspace %s", root, ks.Name)
	}
	names := []string{quoteIdent(root)}
	for _, t := range ks.Tables {
		if t.Kind == keyspace.CoPartitioned && t.Root == root {
			names = append(names, quoteIdent(t.Name))
		}
	}
	var st reshard.Stats
	var bounds []string
	// reltuples is -1 before the first VACUUM or ANALYZE (PostgreSQL 14+).
	// pg_stats of the table itself, not of an inheritance tree.
	err := conn.QueryRow(ctx, `
		SELECT c.reltuples::float8,
			(SELECT s.histogram_bounds::text::text[] FROM pg_stats s
			 WHERE s.schemaname = n.nspname AND s.tablename = c.relname AND s.attname = $2 AND NOT s.inherited),
			(SELECT coalesce(sum(pg_total_relation_size(to_regclass(x))), 0)::int8 FROM unnest($3::text[]) x)
		FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE c.oid = to_regclass($1)`,
		quoteIdent(root), rt.Column, names).Scan(&st.Rows, &bounds, &st.Bytes)
	if err == pgx.ErrNoRows {
		return reshard.Stats{}, fmt.Errorf("pgreshard: stats: no table %s on this partition", root)
	}
	if err != nil {
		return reshard.Stats{}, fmt.Errorf("pgreshard: stats of %s: %w", root, err)
	}
	st.Bounds, err = parseBounds(rt.Type, bounds)
	if err != nil {
		return reshard.Stats{}, fmt.Errorf("pgreshard: stats of %s: histogram of %s: %w", root, rt.Column, err)
	}
	if st.Secondary, err = secondaryValues(ctx, conn, ks, root); err != nil {
		return reshard.Stats{}, fmt.Errorf("pgreshard: stats of %s: %w", root, err)
	}
	return st, nil
}

// secondaryValues returns the values pg_stats knows of the secondary
// column of root's largest co-partitioned table that has one (its
// histogram bounds and most common values), sorted, distinct; none when
// no table has a secondary column or PostgreSQL has no statistics.
func secondaryValues(ctx context.Context, conn *pgx.Conn, ks *keyspace.Keyspace, root string) ([]int64, error) {
	var tables, cols []string
	for _, t := range ks.Tables {
		if t.Kind == keyspace.CoPartitioned && t.Root == root && t.Secondary != "" {
			tables, cols = append(tables, t.Name), append(cols, t.Secondary)
		}
	}
	if len(tables) == 0 {
		return nil, nil
	}
	var vals []int64
	err := conn.QueryRow(ctx, `
		WITH t AS (SELECT x.tbl, x.col FROM unnest($1::text[], $2::text[]) AS x(tbl, col)
			ORDER BY pg_total_relation_size(to_regclass(quote_ident(x.tbl))) DESC NULLS LAST LIMIT 1)
		SELECT coalesce(array_agg(DISTINCT v ORDER BY v), '{}') FROM (
			SELECT unnest(coalesce(s.histogram_bounds::text::int8[], '{}') || coalesce(s.most_common_vals::text::int8[], '{}')) AS v
			FROM pg_stats s JOIN t ON s.tablename = t.tbl AND s.attname = t.col
			WHERE s.schemaname = 'public' AND NOT s.inherited) AS vs`, tables, cols).Scan(&vals)
	if err != nil {
		return nil, fmt.Errorf("secondary column statistics: %w", err)
	}
	return vals, nil
}

// parseBounds reads histogram bounds as keys of type t, sorted as package
// keyspace orders keys, without duplicates. PostgreSQL orders a text
// histogram by the column's collation, which need not be "C".
func parseBounds(t keyspace.KeyType, bounds []string) ([]keyspace.Key, error) {
	out := make([]keyspace.Key, 0, len(bounds))
	for _, b := range bounds {
		k, err := keyspace.ParseKey(t, b)
		if err != nil {
			return nil, err
		}
		out = append(out, k)
	}
	slices.SortFunc(out, keyspace.Key.Compare)
	out = slices.CompactFunc(out, func(a, b keyspace.Key) bool { return a.Compare(b) == 0 })
	if len(out) == 0 {
		return nil, nil
	}
	return out, nil
}
