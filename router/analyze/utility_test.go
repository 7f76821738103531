package analyze

import "testing"

func TestTransactionControl(t *testing.T) {
	runParse(t, []parseCase{
		{"begin", `BEGIN`, one("begin")},
		{"begin options", `BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY`, one("begin")},
		{"start", `START TRANSACTION`, one("begin")},
		{"commit", `COMMIT`, one("commit")},
		{"end", `END`, one("commit")},
		{"commit and chain", `COMMIT AND CHAIN`, one("commit")},
		{"rollback", `ROLLBACK`, one("rollback")},
		{"abort", `ABORT`, one("rollback")},
		{"savepoint", `SAVEPOINT s1`, one("savepoint")},
		{"release", `RELEASE s1`, one("savepoint")},
		{"release savepoint", `RELEASE SAVEPOINT s1`, one("savepoint")},
		{"rollback to", `ROLLBACK TO s1`, one("savepoint")},
		{"rollback to savepoint", `ROLLBACK TO SAVEPOINT s1`, one("savepoint")},
		{"prepare transaction", `PREPARE TRANSACTION 'gx'`, one("twophase")},
		{"commit prepared", `COMMIT PREPARED 'gx'`, one("twophase")},
		{"rollback prepared", `ROLLBACK PREPARED 'gx'`, one("twophase")},
	})
}

func TestSet(t *testing.T) {
	runParse(t, []parseCase{
		{"set key", `SET sluice.key = 42`, one("setkey set=42")},
		{"set key to text", `SET sluice.key TO 'north'`, one("setkey set=north")},
		{"set session key", `SET SESSION sluice.key = -7`, one("setkey set=-7")},
		{"set local key", `SET LOCAL sluice.key = 'user3'`, one("setkey set=user3 local")},
		{"case", `set Sluice.Key = 5`, one("setkey set=5")},
		{"reset key", `RESET sluice.key`, one("setkey")},
		{"key to default", `SET sluice.key TO DEFAULT`, one("setkey")},
		{"other setting", `SET search_path TO public, "$user"`, one("session")},
		{"application name", `SET application_name = 'psql'`, one("session")},
		{"time zone", `SET TIME ZONE 'UTC'`, one("session")},
		{"reset", `RESET statement_timeout`, one("session")},
		{"reset all", `RESET ALL`, one("session")},
		{"session characteristics", `SET SESSION CHARACTERISTICS AS TRANSACTION ISOLATION LEVEL SERIALIZABLE`, one("session")},
		{"set transaction", `SET TRANSACTION ISOLATION LEVEL SERIALIZABLE`, one("other")},
		{"set local", `SET LOCAL statement_timeout = 0`, one("other")},
		{"show", `SHOW search_path`, one("other")},
		{"set_config is a query", `SELECT set_config('sluice.key', '4', false)`, one("select ro")},
	})
}

func TestOtherStatements(t *testing.T) {
	runParse(t, []parseCase{
		{"ddl", `CREATE TABLE t (a int)`, one("other")},
		{"copy", `COPY warehouse FROM STDIN`, one("other")},
		{"explain", `EXPLAIN SELECT * FROM warehouse WHERE w_id = 1`, one("other")},
		{"explain analyze runs its statement", `EXPLAIN ANALYZE INSERT INTO warehouse (w_id) VALUES (7)`,
			one("insert sharded=warehouse keys=warehouse:7")},
		{"explain (analyze)", `EXPLAIN (ANALYZE, BUFFERS) SELECT * FROM warehouse WHERE w_id = $1`,
			one("select ro sharded=warehouse keys=warehouse:$1 params=1")},
		{"explain (analyze on)", `EXPLAIN (ANALYZE on) DELETE FROM warehouse`, one("delete sharded=warehouse missing=warehouse.w_id")},
		{"explain (analyze false)", `EXPLAIN (ANALYZE false) DELETE FROM warehouse`, one("other")},
		{"explain analyze of a utility", `EXPLAIN ANALYZE EXECUTE q(1)`, one("other")},
		{"prepare", `PREPARE q AS SELECT * FROM warehouse WHERE w_id = $1`, one("other params=1")},
		{"listen", `LISTEN ch`, one("other")},
		{"merge", `MERGE INTO stock s USING item i ON s.s_i_id = i.i_id AND s.s_w_id = 1 WHEN MATCHED THEN UPDATE SET s_quantity = 0`,
			one("plain-other sharded=stock ref=item missing=stock.s_w_id")},
		{"no table", `SELECT 1`, one("select ro")},
	})
}

// A DECLARE is routed by its query; FETCH, MOVE and CLOSE name the cursor.
func TestCursors(t *testing.T) {
	runParse(t, []parseCase{
		{"declare", `DECLARE c CURSOR FOR SELECT * FROM warehouse WHERE w_id = $1`,
			one("select ro sharded=warehouse keys=warehouse:$1 cursor=c params=1")},
		{"psycopg2's named cursor", `DECLARE "big" CURSOR WITHOUT HOLD FOR SELECT ycsb_key FROM usertable WHERE ycsb_key = 'user7' ORDER BY ycsb_key`,
			one("select ro sharded=usertable keys=usertable:'user7' order=ycsb_key cursor=big")},
		{"with hold", `DECLARE c NO SCROLL CURSOR WITH HOLD FOR SELECT * FROM item`, one("select ro ref=item cursor=c hold")},
		{"for update", `DECLARE c CURSOR FOR SELECT * FROM warehouse WHERE w_id = 1 FOR UPDATE`,
			one("select sharded=warehouse keys=warehouse:1 cursor=c")},
		{"no key", `DECLARE c CURSOR FOR SELECT * FROM warehouse`, one("select ro sharded=warehouse missing=warehouse.w_id cursor=c")},
		{"fetch", `FETCH FORWARD 2000 FROM "big"`, one("cursor ro cursor=big")},
		{"fetch all", `FETCH ALL IN c`, one("cursor ro cursor=c")},
		{"move", `MOVE BACKWARD 5 IN c`, one("cursor ro cursor=c")},
		{"close", `CLOSE c`, one("cursor ro cursor=c close")},
		{"close all", `CLOSE ALL`, one("cursor ro cursor= close")},
		{"values", `VALUES (1), (2)`, one("select ro")},
	})
}

func TestShapes(t *testing.T) {
	runParse(t, []parseCase{
		{"group by", `SELECT d_w_id, sum(d_ytd) FROM district WHERE d_w_id IN (1, 2) GROUP BY d_w_id`,
			one("select ro agg sharded=district keys=district:1,district:2")},
		{"distinct", `SELECT DISTINCT c_last FROM customer WHERE c_w_id = 1`,
			one("select ro agg sharded=customer keys=customer:1")},
		{"window", `SELECT w_id, row_number() OVER (ORDER BY w_ytd) FROM warehouse WHERE w_id = 1`,
			one("select ro agg sharded=warehouse keys=warehouse:1")},
		{"having", `SELECT 1 FROM warehouse WHERE w_id = 1 HAVING true`,
			one("select ro agg sharded=warehouse keys=warehouse:1")},
		{"union all concatenates", `SELECT w_id FROM warehouse WHERE w_id = 1 UNION ALL SELECT d_w_id FROM district WHERE d_w_id = 2`,
			one("select ro sharded=district,warehouse keys=district:2,warehouse:1")},
		{"union dedups", `SELECT w_id FROM warehouse WHERE w_id = 1 UNION SELECT d_w_id FROM district WHERE d_w_id = 2 ORDER BY 1 LIMIT 2`,
			one("select ro agg sharded=district,warehouse keys=district:2,warehouse:1 limit=2")},
		{"subquery keyed for itself", `SELECT * FROM warehouse WHERE w_id = $1 AND w_ytd > (SELECT sum(d_ytd) FROM district WHERE d_w_id = $1)`,
			one("select ro agg sharded=district,warehouse keys=district:$1,warehouse:$1 params=1")},
		{"outer key in a subquery does not count", `SELECT * FROM warehouse w WHERE EXISTS (SELECT 1 FROM district d WHERE d.d_w_id = w.w_id AND w.w_id = 5)`,
			one("select ro sharded=district,warehouse missing=district.d_w_id")},
		{"subquery in from", `SELECT * FROM (SELECT * FROM district WHERE d_w_id = 2) d WHERE d.d_w_id = 2`,
			one("select ro sharded=district keys=district:2")},
		{"cte shadows a table", `WITH warehouse AS (SELECT 1 AS w_id) SELECT * FROM warehouse WHERE w_id = 1`,
			one("select ro")},
		{"data-modifying cte", `WITH d AS (DELETE FROM new_order WHERE no_w_id = $1 RETURNING no_o_id) SELECT * FROM d`,
			one("select sharded=new_order keys=new_order:$1 params=1")},
		{"order by output name", `SELECT w_id AS id FROM warehouse WHERE w_id > 3 ORDER BY id DESC`,
			one("select ro sharded=warehouse range=warehouse:(3,) order=id desc")},
		{"order by qualified key under t.*", `SELECT w.* FROM warehouse w WHERE w.w_id < 3 ORDER BY w.w_id`,
			one("select ro sharded=warehouse range=warehouse:(,3) order=w_id")},
		{"select into writes", `SELECT * INTO copy FROM warehouse WHERE w_id = 1`,
			one("select sharded=warehouse keys=warehouse:1")},
		{"locking", `SELECT * FROM warehouse WHERE w_id = 1 FOR SHARE`,
			one("select sharded=warehouse keys=warehouse:1")},
	})
}

func TestHints(t *testing.T) {
	runParse(t, []parseCase{
		{"block", `/* sluice.key=42 */ SELECT * FROM warehouse`,
			one("select ro sharded=warehouse missing=warehouse.w_id hint=42")},
		{"line", "-- sluice.key = 'user7'\nSELECT * FROM usertable",
			one("select ro sharded=usertable missing=usertable.ycsb_key hint=user7")},
		{"after another comment", "/* app: checkout */\n  /* SLUICE.KEY=9 */ SELECT 1",
			one("select ro hint=9")},
		{"nested comment", `/* outer /* sluice.key=1 */ */ SELECT 1`, one("select ro")},
		{"nested comment before", `/* a /* b */ c */ /* sluice.key=2 */ SELECT 1`, one("select ro hint=2")},
		{"not leading", `SELECT 1 /* sluice.key=3 */`, one("select ro")},
		{"other text", `/* sluice.keys=3 */ SELECT 1`, one("select ro")},
		{"empty", `/* sluice.key= */ SELECT 1`, one("select ro")},
	})
}

func TestMultiStatement(t *testing.T) {
	ks := bench(t)
	sql := "BEGIN;\n SELECT * FROM warehouse WHERE w_id = 1 ;\n/* sluice.key=2 */ UPDATE district SET d_ytd = 0;;COMMIT"
	stmts, err := Parse(sql, ks)
	if err != nil {
		t.Fatal(err)
	}
	want := []struct{ text, desc string }{
		{"BEGIN", "begin"},
		{"SELECT * FROM warehouse WHERE w_id = 1", "select ro sharded=warehouse keys=warehouse:1"},
		{"/* sluice.key=2 */ UPDATE district SET d_ytd = 0", "update sharded=district missing=district.d_w_id hint=2"},
		{"COMMIT", "commit"},
	}
	if len(stmts) != len(want) {
		t.Fatalf("Parse(%q): %d statements, want %d", sql, len(stmts), len(want))
	}
	for i, w := range want {
		if stmts[i].Text != w.text || describe(stmts[i]) != w.desc {
			t.Errorf("statement %d: got %q %q, want %q %q", i, stmts[i].Text, describe(stmts[i]), w.text, w.desc)
		}
	}
	for _, empty := range []string{"", " ; ;", "-- nothing\n"} {
		if stmts, err := Parse(empty, ks); err != nil || len(stmts) != 0 {
			t.Errorf("Parse(%q) = %d statements, %v; want none", empty, len(stmts), err)
		}
	}
}

// TestCatalogQueries: what psql sends for \d and \d warehouse touches no
// keyspace table, so nothing is sharded and nothing missing.
func TestCatalogQueries(t *testing.T) {
	runParse(t, []parseCase{
		{`\d`, `SELECT n.nspname as "Schema",
  c.relname as "Name",
  CASE c.relkind WHEN 'r' THEN 'table' WHEN 'v' THEN 'view' WHEN 'm' THEN 'materialized view' WHEN 'i' THEN 'index' WHEN 'S' THEN 'sequence' WHEN 't' THEN 'TOAST table' WHEN 'f' THEN 'foreign table' WHEN 'p' THEN 'partitioned table' WHEN 'I' THEN 'partitioned index' END as "Type",
  pg_catalog.pg_get_userbyid(c.relowner) as "Owner"
FROM pg_catalog.pg_class c
     LEFT JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
     LEFT JOIN pg_catalog.pg_am am ON am.oid = c.relam
WHERE c.relkind IN ('r','p','v','m','S','f','')
      AND n.nspname <> 'pg_catalog'
      AND n.nspname !~ '^pg_toast'
      AND n.nspname <> 'information_schema'
  AND pg_catalog.pg_table_is_visible(c.oid)
ORDER BY 1,2;`, one("select ro")},
		{`\d warehouse`, `SELECT c.oid,
  n.nspname,
  c.relname
FROM pg_catalog.pg_class c
     LEFT JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
WHERE c.relname OPERATOR(pg_catalog.~) '^(warehouse)$' COLLATE pg_catalog.default
  AND pg_catalog.pg_table_is_visible(c.oid)
ORDER BY 2, 3;`, one("select ro")},
		{`\d warehouse columns`, `SELECT a.attname,
  pg_catalog.format_type(a.atttypid, a.atttypmod),
  (SELECT pg_catalog.pg_get_expr(d.adbin, d.adrelid, true)
   FROM pg_catalog.pg_attrdef d
   WHERE d.adrelid = a.attrelid AND d.adnum = a.attnum AND a.atthasdef),
  a.attnotnull
FROM pg_catalog.pg_attribute a
WHERE a.attrelid = '16384' AND a.attnum > 0 AND NOT a.attisdropped
ORDER BY a.attnum;`, one("select ro")},
		{"version", `SELECT version()`, one("select ro")},
		{"information schema", `SELECT table_name FROM information_schema.tables WHERE table_schema = 'public'`, one("select ro")},
	})
}

func TestSyntaxError(t *testing.T) {
	ks := bench(t)
	for _, sql := range []string{
		`SELEC 1`,
		`SELECT * FROM warehouse WHERE`,
		`BEGIN; SELECT (; COMMIT`,
		`SELECT 'unterminated`,
	} {
		stmts, err := Parse(sql, ks)
		if err == nil || stmts != nil {
			t.Errorf("Parse(%q) = %d statements, %v; want an error", sql, len(stmts), err)
		}
	}
}
