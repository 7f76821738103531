package agent

import (
	"strings"
	"testing"

	"github.com/sluicedb/sluice/keyspace"
	"github.com/sluicedb/sluice/reshard/pgreshard"
)

func TestOwnedPredicate(t *testing.T) {
	ks := &keyspace.Keyspace{Name: "kv",
		Partitions: []keyspace.Partition{{Name: "a", Tenant: "t1"}, {Name: "b", Tenant: "t2"}},
		Tables: []keyspace.Table{
			{Name: "kv", Kind: keyspace.Sharded, Column: "k", Type: keyspace.Text},
			{Name: "n", Kind: keyspace.Sharded, Column: "id", Type: keyspace.Int},
		},
		Plan: keyspace.PlanSpec{"kv": {"a": "[,'it''s'),['x',)", "b": "['it''s','x')"}, "n": {"a": "[,)"}},
	}
	if err := ks.Validate(); err != nil {
		t.Fatal(err)
	}
	p := ks.PlanRanges()
	for _, tc := range []struct {
		name string
		got  string
		want string
	}{
		{"text, two ranges", pgreshard.RangePredicate("k", keyspace.Text, p["kv"].Ranges("a")),
			`("k" COLLATE "C" < 'it''s') OR ("k" COLLATE "C" >= 'x')`},
		{"text, bounded", pgreshard.RangePredicate("k", keyspace.Text, p["kv"].Ranges("b")),
			`("k" COLLATE "C" >= 'it''s' AND "k" COLLATE "C" < 'x')`},
		{"everything (a NULL key is in no range)", pgreshard.RangePredicate("id", keyspace.Int, p["n"].Ranges("a")), `"id" IS NOT NULL`},
		{"nothing", pgreshard.RangePredicate("id", keyspace.Int, p["n"].Ranges("b")), "false"},
		{"odd identifier", misplacedSQL(keyspace.Table{Name: `we"ird`, Column: "c", Type: keyspace.Int},
			[]keyspace.Range{{Lo: keyspace.Bound{Key: keyspace.IntKey(-3)}, Hi: keyspace.Bound{Inf: true}}}),
			`SELECT count(*), count(*) FILTER (WHERE (("c" >= -3)) IS NOT TRUE) FROM "we""ird"`},
	} {
		if tc.got != tc.want {
			t.Errorf("%s:\n got %s\nwant %s", tc.name, tc.got, tc.want)
		}
	}
}

func TestCheckSchema(t *testing.T) {
	for _, tc := range []struct {
		sql, err string
	}{
		{"CREATE TABLE a (x int); CREATE INDEX ON a (x);", ""},
		{"", ""},
		{"CREATE TABLE a (x int", "schema: syntax error at end of input"},
		{"CREATE TABLE a (x int); ROLLBACK;", "transaction control (ROLLBACK)"},
		{"begin; create table a (x int)", "transaction control (BEGIN)"},
	} {
		err := checkSchema(tc.sql)
		if (tc.err == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.err)) {
			t.Errorf("checkSchema(%q) = %v, want %q", tc.sql, err, tc.err)
		}
	}
}
