package pgreshard

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"

	"github.com/sluicedb/sluice/keyspace"
	"github.com/sluicedb/sluice/reshard"
)

// The SQL this package runs, built from a validated keyspace and chunks
// only: identifiers are quoted, keys are SQL literals of the key's type,
// text compares under the "C" collation as package keyspace compares keys.

// quoteIdent quotes an SQL identifier.
func quoteIdent(s string) string { return `"` + strings.ReplaceAll(s, `"`, `""`) + `"` }

// quoteLiteral quotes an SQL string literal (standard_conforming_strings on,
// PostgreSQL's default).
func quoteLiteral(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// pgText maps a text bound to one PostgreSQL can hold and that orders
// every storable key the same way. PostgreSQL text holds no NUL byte, but
// a keyspace bound may (keyspace.Successor(k) is k+"\x00"). For any bound
// b = p+"\x00"+rest and any key k without NUL, k < b ⟺ k ≤ p ⟺ k < p+"\x01"
// (no storable key lies strictly between p and p+"\x01"), so b is replaced
// by p+"\x01" both as a lower and as an upper bound.
func pgText(s string) string {
	if i := strings.IndexByte(s, 0); i >= 0 {
		return s[:i] + "\x01"
	}
	return s
}

// keyLiteral is k as an SQL literal of its type.
func keyLiteral(k keyspace.Key) string {
	if k.Type == keyspace.Text {
		return quoteLiteral(pgText(k.S))
	}
	return strconv.FormatInt(k.I, 10)
}

// RangePredicate returns a boolean SQL expression over column col, true
// exactly for the rows whose key lies in one of rs ("false" for none; a
// NULL key is in no range).
func RangePredicate(col string, t keyspace.KeyType, rs []keyspace.Range) string {
	if len(rs) == 0 {
		return "false"
	}
	c := quoteIdent(col)
	if t == keyspace.Text {
		c += ` COLLATE "C"`
	}
	terms := make([]string, 0, len(rs))
	for _, r := range rs {
		var conds []string
		if !r.Lo.Inf {
			conds = append(conds, c+" >= "+keyLiteral(r.Lo.Key))
		}
		if !r.Hi.Inf {
			conds = append(conds, c+" < "+keyLiteral(r.Hi.Key))
		}
		if len(conds) == 0 {
			return c + " IS NOT NULL"
		}
		terms = append(terms, "("+strings.Join(conds, " AND ")+")")
	}
	return strings.Join(terms, " OR ")
}

// chunkPredicate is true exactly for table t's rows in chunk c: keys in
// its ranges, and, for a key's sub-chunk (reshard.Chunk.Sub), secondary
// values in its range — rows without a secondary column or value go with
// the key's first sub-chunk.
func chunkPredicate(t keyspace.Table, c reshard.Chunk) string {
	p := RangePredicate(t.Column, t.Type, c.Ranges)
	switch {
	case c.Sub == nil:
		return p
	case t.Secondary == "" && c.First():
		return p
	case t.Secondary == "":
		return "false"
	}
	sec := RangePredicate(t.Secondary, keyspace.Int, []keyspace.Range{*c.Sub})
	if c.First() {
		sec = quoteIdent(t.Secondary) + " IS NULL OR " + sec
	}
	return "(" + p + ") AND (" + sec + ")"
}

// fenceName is the name of table's fence trigger and trigger function:
// sluice_fence_<table>, or, when that exceeds PostgreSQL's 63-byte
// identifiers, a prefix of the table's name and a hash of all of it, so
// two long names never share a function.
func fenceName(table string) string {
	const prefix, max = "sluice_fence_", 63
	if len(prefix)+len(table) <= max {
		return prefix + table
	}
	sum := sha256.Sum256([]byte(table))
	h := hex.EncodeToString(sum[:4])
	return prefix + table[:max-len(prefix)-1-len(h)] + "_" + h
}

// fenceTableSQL creates the fence table. A NULL bound is unbounded; int
// roots use lo_i/hi_i, text roots lo_t/hi_t. The unique index (NULLS NOT
// DISTINCT, PostgreSQL 15) makes inserting a chunk's fence twice a no-op;
// the index on root serves the triggers' lookup. Every role may read it:
// the triggers run as the writing client's role.
const fenceTableSQL = `
CREATE TABLE IF NOT EXISTS public.sluice_fence (
	reshard text NOT NULL,
	chunk   int  NOT NULL,
	side    text NOT NULL CHECK (side IN ('in', 'out')),
	root    text NOT NULL,
	lo_i    bigint,
	hi_i    bigint,
	lo_t    text COLLATE "C",
	hi_t    text COLLATE "C"
);
CREATE UNIQUE INDEX IF NOT EXISTS sluice_fence_range ON public.sluice_fence
	(reshard, chunk, side, root, lo_i, lo_t) NULLS NOT DISTINCT;
CREATE INDEX IF NOT EXISTS sluice_fence_root ON public.sluice_fence (root);
GRANT SELECT ON public.sluice_fence TO PUBLIC`

// triggerFuncSQL creates table t's fence function: the key column is
// written into the body (static SQL: plpgsql caches its plan), compared
// with the fence rows of t's root. A volatile function's queries see a
// fresh snapshot per statement under READ COMMITTED, so a fence committed
// after the writer's transaction began still stops it.
func triggerFuncSQL(t keyspace.Table) string {
	key := func(row string) string { return row + "." + quoteIdent(t.Column) }
	check := func(row string) string {
		k, show := key(row), "%s"
		var match string
		if t.Type == keyspace.Text {
			k, show = k+` COLLATE "C"`, "%L"
			match = "(lo_t IS NULL OR lo_t <= " + k + ") AND (hi_t IS NULL OR " + k + " < hi_t)"
		} else {
			match = "(lo_i IS NULL OR lo_i <= " + k + ") AND (hi_i IS NULL OR " + k + " < hi_i)"
		}
		return fmt.Sprintf(`
		SELECT side, reshard, chunk INTO f FROM public.sluice_fence
		WHERE root = %s AND %s LIMIT 1;
		IF FOUND THEN
			RAISE EXCEPTION USING ERRCODE = '40001', MESSAGE = format(
				'sluice: table %%s key %s %%s (reconfiguration %%s, chunk %%s)', %s, %s,
				CASE f.side WHEN 'out' THEN 'is leaving this partition' ELSE 'has not arrived at this partition yet' END,
				f.reshard, f.chunk);
		END IF;`, quoteLiteral(t.Root), match, show, quoteLiteral(t.Name), key(row))
	}
	return fmt.Sprintf(`CREATE OR REPLACE FUNCTION public.%s() RETURNS trigger LANGUAGE plpgsql AS $sluice$
DECLARE
	f record;
BEGIN
	IF current_setting('sluice.fence', true) = 'off' THEN
		IF TG_OP = 'DELETE' THEN RETURN OLD; END IF;
		RETURN NEW;
	END IF;
	IF TG_OP <> 'INSERT' AND %[2]s IS NOT NULL THEN%[4]s
	END IF;
	IF TG_OP = 'DELETE' THEN RETURN OLD; END IF;
	IF %[3]s IS NOT NULL AND (TG_OP = 'INSERT' OR %[3]s IS DISTINCT FROM %[2]s) THEN%[5]s
	END IF;
	RETURN NEW;
END
$sluice$`, quoteIdent(fenceName(t.Name)), key("OLD"), key("NEW"), check("OLD"), check("NEW"))
}

// triggerSQL attaches table t's fence function (CREATE OR REPLACE
// TRIGGER: PostgreSQL 14+).
func triggerSQL(t keyspace.Table) string {
	n := quoteIdent(fenceName(t.Name))
	return fmt.Sprintf("CREATE OR REPLACE TRIGGER %s BEFORE INSERT OR UPDATE OR DELETE ON %s FOR EACH ROW EXECUTE FUNCTION public.%s()",
		n, quoteIdent(t.Name), n)
}

// fencedTables returns ks's sharded and co-partitioned tables, in order.
func fencedTables(ks *keyspace.Keyspace) []keyspace.Table {
	var out []keyspace.Table
	for _, t := range ks.Tables {
		if t.Kind == keyspace.Sharded || t.Kind == keyspace.CoPartitioned {
			out = append(out, t)
		}
	}
	return out
}

// fenceRow is one fence row's bounds as query arguments (nil: unbounded).
type fenceRow struct {
	loI, hiI, loT, hiT any
}

func rowOf(r keyspace.Range) fenceRow {
	var f fenceRow
	bound := func(b keyspace.Bound, i, s *any) {
		switch {
		case b.Inf:
		case b.Key.Type == keyspace.Text:
			*s = pgText(b.Key.S)
		default:
			*i = b.Key.I
		}
	}
	bound(r.Lo, &f.loI, &f.loT)
	bound(r.Hi, &f.hiI, &f.hiT)
	return f
}
