package pgreshard

import (
	"strings"
	"testing"

	"github.com/sluicedb/sluice/keyspace"
	"github.com/sluicedb/sluice/reshard"
)

// TestUninstall: after Uninstall (twice: idempotent) the fenced ranges are
// writable, no sluice trigger, function or fence table remains; Install
// again works.
func TestUninstall(t *testing.T) {
	dsn := partitions(t)
	ctx := testCtx(t)
	ks := testKeyspace(t)
	conn := connect(t, ctx, dsn("p1"))
	if err := Install(ctx, conn, ks); err != nil {
		t.Fatal(err)
	}
	if n := count(t, conn, "SELECT count(*) FROM pg_trigger WHERE tgname LIKE 'sluice_fence_%'"); n != 3 {
		t.Fatalf("%d fence triggers installed, want 3 (acct, acct_log, users)", n)
	}
	if err := FenceOut(ctx, conn, "r", []reshard.Chunk{acctChunk(0, intRange(nil, nil))}); err != nil {
		t.Fatal(err)
	}
	_, err := conn.Exec(ctx, "INSERT INTO acct VALUES (1, 'x')")
	wantFenced(t, "insert under a fence of every key", err)
	for range 2 {
		if err := Uninstall(ctx, conn, ks); err != nil {
			t.Fatal(err)
		}
	}
	mustExec(t, conn, "INSERT INTO acct VALUES (1, 'x')")
	mustExec(t, conn, "INSERT INTO acct_log (acct_id, n) VALUES (1, 1)")
	mustExec(t, conn, "DELETE FROM acct_log")
	if n := count(t, conn, `SELECT (SELECT count(*) FROM pg_trigger WHERE tgname LIKE 'sluice%')
		+ (SELECT count(*) FROM pg_proc WHERE proname LIKE 'sluice%')
		+ (SELECT count(*) FROM pg_class WHERE relname LIKE 'sluice%')`); n != 0 {
		t.Fatalf("%d sluice objects left after Uninstall", n)
	}
	if err := Install(ctx, conn, ks); err != nil {
		t.Fatal(err)
	}
}

func TestFenceName(t *testing.T) {
	long1 := strings.Repeat("a", 55) + "_one"
	long2 := strings.Repeat("a", 55) + "_two"
	for _, c := range []struct{ table, want string }{
		{"acct", "sluice_fence_acct"},
		{strings.Repeat("t", 50), "sluice_fence_" + strings.Repeat("t", 50)},
	} {
		if got := fenceName(c.table); got != c.want {
			t.Errorf("fenceName(%q) = %q, want %q", c.table, got, c.want)
		}
	}
	a, b := fenceName(long1), fenceName(long2)
	if len(a) > 63 || len(b) > 63 || a == b || !strings.HasPrefix(a, "sluice_fence_aaa") {
		t.Errorf("long names: %q and %q, want distinct, ≤ 63 bytes", a, b)
	}
}

func TestRangePredicate(t *testing.T) {
	x := keyspace.TextKey("o'b")
	for _, c := range []struct {
		name string
		col  string
		typ  keyspace.KeyType
		rs   []keyspace.Range
		want string
	}{
		{"none", "id", keyspace.Int, nil, "false"},
		{"unbounded", "id", keyspace.Int, []keyspace.Range{intRange(nil, nil)}, `"id" IS NOT NULL`},
		{"two", "id", keyspace.Int, []keyspace.Range{intRange(nil, ip(5)), intRange(ip(9), nil)}, `("id" < 5) OR ("id" >= 9)`},
		{"text successor", "na\"me", keyspace.Text, []keyspace.Range{{Lo: keyspace.Bound{Key: x}, Hi: keyspace.Successor(x)}},
			`("na""me" COLLATE "C" >= 'o''b' AND "na""me" COLLATE "C" < 'o''b` + "\x01')"},
	} {
		if got := RangePredicate(c.col, c.typ, c.rs); got != c.want {
			t.Errorf("%s: %s, want %s", c.name, got, c.want)
		}
	}
}
