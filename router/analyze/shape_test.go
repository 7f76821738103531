package analyze

import (
	"fmt"
	"testing"

	"github.com/sluicedb/sluice/keyspace"
)

func TestShape(t *testing.T) {
	for _, tc := range []struct {
		in, want string
		lits     string
	}{
		{"SELECT v FROM kv WHERE k = 42", "SELECT v FROM kv WHERE k = $1", "[42]"},
		{"UPDATE kv SET v = 'it''s' WHERE k IN (1, -2, 3.5e2)", "UPDATE kv SET v = $1 WHERE k IN ($2, $3, $4)", "[it's 1 -2 3.5e2]"},
		{"SELECT * FROM kv WHERE k >= 10 ORDER BY k LIMIT 5 OFFSET 2", "SELECT * FROM kv WHERE k >= $1 ORDER BY k LIMIT 5 OFFSET 2", "[10]"},
		{"/* sluice.key=7 */ INSERT INTO t1 (k) VALUES (7)", "/* sluice.key=7 */ INSERT INTO t1 (k) VALUES ($1)", "[7]"},
		{"SELECT k-1 FROM kv WHERE k = 3", "SELECT k-$1 FROM kv WHERE k = $2", "[1 3]"},
		{"SELECT '5'::int", "SELECT '5'::int", "[]"},
		{"SELECT 1 WHERE k = '5'::int", "SELECT $1 WHERE k = $2::int", "[1 5]"},
		{`SELECT "col1" FROM kv -- 5 here`, `SELECT "col1" FROM kv -- 5 here`, "[]"},
		{"SELECT DATE '2020-01-01'", "SELECT DATE '2020-01-01'", "[]"},
	} {
		got, lits, ok := shape(tc.in)
		if !ok || got != tc.want || fmt.Sprintf("%s", lits) != tc.lits {
			t.Errorf("shape(%q) = %q %s %v; want %q %s", tc.in, got, lits, ok, tc.want, tc.lits)
		}
	}
	for _, in := range []string{"SELECT E'a\\n'", "SELECT $$x$$", "SELECT x'1f'", "SELECT $1", "SELECT 0x1f"} {
		if _, _, ok := shape(in); ok {
			t.Errorf("shape(%q) ok; want it parsed as it is", in)
		}
	}
}

func TestCacheQueryByShape(t *testing.T) {
	ks := bench(t)
	c := NewCache(ks, 16)
	for _, k := range []string{"1", "2", "3"} {
		stmts, params, err := c.Query("SELECT * FROM warehouse WHERE w_id = " + k)
		if err != nil || len(stmts) != 1 || len(stmts[0].Keys) != 1 {
			t.Fatalf("Query: %v %v", stmts, err)
		}
		key, err := KeyOf(keyspace.Int, stmts[0].Keys[0].Value, params, nil, nil)
		if err != nil || key.String() != k {
			t.Errorf("key %v, %v; want %s", key, err, k)
		}
	}
	if c.Len() != 1 {
		t.Errorf("%d entries cached, want the one shape", c.Len())
	}
}
