package pgreshard

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sluicedb/sluice/keyspace"
	"github.com/sluicedb/sluice/reshard"
)

// TestFenceIntKeys: with acct's [10,20) fenced out and [100,) fenced in,
// a plain session can neither insert, update nor delete a fenced key of
// acct or of its co-partitioned acct_log (old or new key), may write
// every other key, and passes with sluice.fence = 'off'; Unfence lifts
// one side.
func TestFenceIntKeys(t *testing.T) {
	dsn := partitions(t)
	ctx := testCtx(t)
	ks := testKeyspace(t)
	conn := connect(t, ctx, dsn("p1"))
	loadAccts(t, conn, 0, 30, 1)
	for i := 0; i < 2; i++ { // idempotent
		if err := Install(ctx, conn, ks); err != nil {
			t.Fatal(err)
		}
	}
	out := acctChunk(3, intRange(ip(10), ip(20)))
	in := acctChunk(4, intRange(ip(100), nil))
	for i := 0; i < 2; i++ {
		if err := FenceOut(ctx, conn, "r1", []reshard.Chunk{out}); err != nil {
			t.Fatal(err)
		}
		if err := FenceIn(ctx, conn, "r1", []reshard.Chunk{in}); err != nil {
			t.Fatal(err)
		}
	}
	if n := count(t, conn, "SELECT count(*) FROM sluice_fence"); n != 2 {
		t.Fatalf("%d fence rows after fencing twice, want 2", n)
	}

	refused := []struct{ name, sql, side string }{
		{"insert out", "INSERT INTO acct VALUES (15, 'x')", "is leaving"},
		{"insert lower bound", "INSERT INTO acct VALUES (10, 'x')", "is leaving"},
		{"update out", "UPDATE acct SET v = 'y' WHERE id = 12", "is leaving"},
		{"delete out", "DELETE FROM acct WHERE id = 19", "is leaving"},
		{"update into out", "UPDATE acct SET id = 11 WHERE id = 5", "is leaving"},
		{"insert in, unbounded", "INSERT INTO acct VALUES (1000000, 'x')", "has not arrived"},
		{"child insert", "INSERT INTO acct_log (acct_id, n) VALUES (15, 1)", "is leaving"},
		{"child delete", "DELETE FROM acct_log WHERE acct_id = 15", "is leaving"},
		{"child update out of", "UPDATE acct_log SET acct_id = 5 WHERE acct_id = 15", "is leaving"},
	}
	for _, c := range refused {
		_, err := conn.Exec(ctx, c.sql)
		wantFenced(t, c.name, err, c.side, "key", "reconfiguration r1")
	}
	_, err := conn.Exec(ctx, "INSERT INTO acct_log (acct_id, n) VALUES (15, 1)")
	wantFenced(t, "child names its table", err, "table acct_log", "key 15")

	allowed := []string{
		"INSERT INTO acct VALUES (40, 'x'), (41, 'x'), (99, 'x')",
		"UPDATE acct SET v = 'y' WHERE id < 10 OR id >= 20",
		"UPDATE acct SET id = 31 WHERE id = 41",
		"DELETE FROM acct_log WHERE acct_id = 5",
		"DELETE FROM acct WHERE id = 5",
		"INSERT INTO items VALUES ('any')",
	}
	for _, sql := range allowed {
		mustExec(t, conn, sql)
	}

	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, sql := range []string{"SET LOCAL sluice.fence = 'off'", "DELETE FROM acct_log WHERE acct_id = 16", "DELETE FROM acct WHERE id = 16",
		"INSERT INTO acct VALUES (16, 'x'), (1000000, 'x')", "UPDATE acct SET v = 'z' WHERE id = 15"} {
		if _, err := tx.Exec(ctx, sql); err != nil {
			t.Fatalf("bypass: %s: %v", sql, err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}

	if err := Unfence(ctx, conn, "r1", "out"); err != nil {
		t.Fatal(err)
	}
	mustExec(t, conn, "UPDATE acct SET v = 'w' WHERE id = 17")
	_, err = conn.Exec(ctx, "INSERT INTO acct VALUES (1000001, 'x')")
	wantFenced(t, "in after unfencing out", err)
	if err := Unfence(ctx, conn, "r1", ""); err != nil {
		t.Fatal(err)
	}
	mustExec(t, conn, "INSERT INTO acct VALUES (1000001, 'x')")
	if err := Unfence(ctx, conn, "r1", "sideways"); err == nil {
		t.Fatal("Unfence with side sideways: no error")
	}
}

// TestFenceTextKeys: text keys compare bytewise (non-ASCII above 'z'),
// quotes in keys and bounds, unbounded ranges, and a bound holding NUL
// (keyspace.Successor) fencing exactly one key.
func TestFenceTextKeys(t *testing.T) {
	dsn := partitions(t)
	ctx := testCtx(t)
	ks := testKeyspace(t)
	conn := connect(t, ctx, dsn("p1"))
	if err := Install(ctx, conn, ks); err != nil {
		t.Fatal(err)
	}
	x := keyspace.TextKey("x'y")
	one := reshard.Chunk{ID: 2, Root: "users", Type: keyspace.Text, Tables: []string{"users"},
		Ranges: []keyspace.Range{{Lo: keyspace.Bound{Key: x}, Hi: keyspace.Successor(x)}}}
	chunks := []reshard.Chunk{textChunk(0, "['m','o''z')"), textChunk(1, "['é',)"), textChunk(3, "[,'B')"), one}
	if err := FenceOut(ctx, conn, "r2", chunks); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"m", "o'brien", "o'", "é", "ø-north", "\u00ff", "x'y", "A", ""} {
		_, err := conn.Exec(ctx, "INSERT INTO users VALUES ($1, 1)", k)
		wantFenced(t, "insert "+k, err, "table users", "is leaving")
	}
	_, err := conn.Exec(ctx, "INSERT INTO users VALUES ($1, 1)", "o'b")
	wantFenced(t, "quoted key in message", err, `key 'o''b'`)
	for _, k := range []string{"B", "Zoë", "lzz", "o'z", "o'za", "p", "x'y\x01", "x'yz", "x'", "zzz"} {
		if _, err := conn.Exec(ctx, "INSERT INTO users VALUES ($1, 1)", k); err != nil {
			t.Fatalf("insert %q: %v", k, err)
		}
	}
	mustExec(t, conn, "UPDATE users SET v = 2 WHERE name = 'Zoë'")
	_, err = conn.Exec(ctx, "UPDATE users SET name = 'é' WHERE name = 'Zoë'")
	wantFenced(t, "update into é", err)
}

// TestFenceOutWaitsForWriters: FenceOut cannot commit while a transaction
// that wrote one of the chunk's tables is open (it retries its lock
// timeout); it commits after that writer does, whose write made before
// the fence stands, and a writer after it is refused. With the writer
// open until ctx ends, FenceOut returns ctx's error.
func TestFenceOutWaitsForWriters(t *testing.T) {
	dsn := partitions(t)
	ctx := testCtx(t)
	ks := testKeyspace(t)
	conn := connect(t, ctx, dsn("p1"))
	writer := connect(t, ctx, dsn("p1"))
	if err := Install(ctx, conn, ks); err != nil {
		t.Fatal(err)
	}
	chunk := acctChunk(0, intRange(ip(10), ip(20)))

	tx, err := writer.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, "INSERT INTO acct VALUES (50, 'x')"); err != nil {
		t.Fatal(err)
	}
	// A connection of its own: a transaction cut by its context closes it.
	short, cancel := context.WithTimeout(ctx, 400*time.Millisecond)
	err = FenceOut(short, connect(t, ctx, dsn("p1")), "r3", []reshard.Chunk{chunk})
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("FenceOut behind an open writer until ctx ends: %v, want deadline exceeded", err)
	}

	done := make(chan error, 1)
	go func() { done <- FenceOut(ctx, conn, "r3", []reshard.Chunk{chunk}) }()
	// The writer's transaction holds ROW EXCLUSIVE on acct: FenceOut's
	// SHARE lock cannot be granted, whatever the timing, until it ends.
	// Watched from a connection outside any transaction: inside one,
	// pg_stat_activity is the snapshot its first read took.
	waitFor(t, ctx, connect(t, ctx, dsn("p1")), "SELECT count(*) FROM pg_stat_activity WHERE query LIKE 'LOCK TABLE%' AND wait_event_type = 'Lock'")
	select {
	case err := <-done:
		t.Fatalf("FenceOut returned %v while a writer was open", err)
	default:
	}
	if _, err := tx.Exec(ctx, "INSERT INTO acct VALUES (15, 'before the fence')"); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	_, err = writer.Exec(ctx, "INSERT INTO acct VALUES (16, 'after the fence')")
	wantFenced(t, "writer after FenceOut", err, "is leaving")
	if n := count(t, writer, "SELECT count(*) FROM acct WHERE id = 15"); n != 1 {
		t.Fatalf("the write before the fence: %d rows, want 1", n)
	}
}

// waitFor polls query (a count) on conn, which must be outside a
// transaction (each poll a fresh view), until it is positive.
func waitFor(t *testing.T, ctx context.Context, conn *pgx.Conn, query string) {
	t.Helper()
	for count(t, conn, query) == 0 {
		select {
		case <-ctx.Done():
			t.Fatalf("waiting for %s: %v", query, ctx.Err())
		case <-time.After(5 * time.Millisecond):
		}
	}
}
