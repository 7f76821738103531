package pgreshard

import (
	"context"
	"slices"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/sluicedb/sluice/keyspace"
	"github.com/sluicedb/sluice/reshard"
)

// fencedPair installs the fences on p1 (source) and p2 (destination) and
// fences chunks out of p1 and into p2 for reconfiguration "r".
func fencedPair(t *testing.T, ctx context.Context, src, dst *pgx.Conn, chunks ...reshard.Chunk) {
	t.Helper()
	ks := testKeyspace(t)
	for _, c := range []*pgx.Conn{src, dst} {
		if err := Install(ctx, c, ks); err != nil {
			t.Fatal(err)
		}
	}
	if err := FenceIn(ctx, dst, "r", chunks); err != nil {
		t.Fatal(err)
	}
	if err := FenceOut(ctx, src, "r", chunks); err != nil {
		t.Fatal(err)
	}
}

// rowsOf returns query's rows as text, sorted.
func rowsOf(t *testing.T, conn *pgx.Conn, query string) []string {
	t.Helper()
	rows, err := conn.Query(context.Background(), "SELECT r::text FROM ("+query+") r")
	if err != nil {
		t.Fatal(err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(out)
	return out
}

// TestPullAndClean: a chunk of two ranges moves from p1 to p2, which holds
// none of its rows but rows of its own: exactly the chunk's rows of acct
// and acct_log arrive (identity and generated values alike), the fence
// drops, Arrived says so; a second Pull is a no-op; then Clean deletes
// only the chunk's rows at the source, in batches, children first.
func TestPullAndClean(t *testing.T) {
	dsn := partitions(t)
	ctx := testCtx(t)
	ks := testKeyspace(t)
	src, dst := connect(t, ctx, dsn("p1")), connect(t, ctx, dsn("p2"))
	loadAccts(t, src, 0, 100, 3)
	loadAccts(t, dst, 100, 150, 2)
	chunk := acctChunk(7, intRange(ip(10), ip(20)), intRange(ip(40), ip(45)))
	other := acctChunk(8, intRange(ip(60), ip(70)))
	fencedPair(t, ctx, src, dst, chunk, other)

	arrived, err := Arrived(ctx, dst, "r", []reshard.Chunk{chunk, other})
	if err != nil || arrived[7] || arrived[8] {
		t.Fatalf("Arrived before the pull: %v, %v; want none", arrived, err)
	}
	const inChunk = "(acct_id >= 10 AND acct_id < 20) OR (acct_id >= 40 AND acct_id < 45)"
	wantAcct := rowsOf(t, src, "SELECT * FROM acct WHERE (id >= 10 AND id < 20) OR (id >= 40 AND id < 45)")
	wantLog := rowsOf(t, src, "SELECT * FROM acct_log WHERE "+inChunk)

	p, err := Pull(ctx, src, dst, "r", chunk, ks)
	if err != nil {
		t.Fatal(err)
	}
	if p.Already || p.Rows != 15+45 || p.Bytes <= 0 {
		t.Fatalf("Pull: %+v, want 60 rows copied and some bytes", p)
	}
	if got := rowsOf(t, dst, "SELECT * FROM acct WHERE id < 100"); !slices.Equal(got, wantAcct) {
		t.Fatalf("acct at the destination: %v\nwant %v", got, wantAcct)
	}
	if got := rowsOf(t, dst, "SELECT * FROM acct_log WHERE acct_id < 100"); !slices.Equal(got, wantLog) {
		t.Fatalf("acct_log at the destination: %v\nwant %v", got, wantLog)
	}
	if n := count(t, dst, "SELECT count(*) FROM acct WHERE id >= 100"); n != 50 {
		t.Fatalf("the destination's own acct rows: %d, want 50", n)
	}
	arrived, err = Arrived(ctx, dst, "r", []reshard.Chunk{chunk, other})
	if err != nil || !arrived[7] || arrived[8] {
		t.Fatalf("Arrived after the pull: %v, %v; want chunk 7 only", arrived, err)
	}
	mustExec(t, dst, "UPDATE acct SET v = 'mine now' WHERE id = 12") // the destination owns it
	mustExec(t, dst, "DELETE FROM acct_log WHERE acct_id = 13")

	again, err := Pull(ctx, src, dst, "r", chunk, ks)
	if err != nil || again != (Pulled{Already: true}) {
		t.Fatalf("second Pull: %+v, %v; want Already and nothing copied", again, err)
	}
	if n := count(t, dst, "SELECT count(*) FROM acct_log WHERE acct_id = 13"); n != 0 {
		t.Fatalf("second Pull brought back %d deleted acct_log rows", n)
	}

	srcAcct, srcLog := count(t, src, "SELECT count(*) FROM acct"), count(t, src, "SELECT count(*) FROM acct_log")
	var total int64
	batches := 0
	for {
		n, err := Clean(ctx, src, chunk, ks, 7)
		if err != nil {
			t.Fatal(err)
		}
		if n > 14 {
			t.Fatalf("Clean with limit 7 deleted %d rows from 2 tables", n)
		}
		if n == 0 {
			break
		}
		total += n
		batches++
	}
	if total != 60 || batches < 8 {
		t.Fatalf("Clean deleted %d rows in %d batches, want 60 in at least 8", total, batches)
	}
	if a, l := count(t, src, "SELECT count(*) FROM acct"), count(t, src, "SELECT count(*) FROM acct_log"); a != srcAcct-15 || l != srcLog-45 {
		t.Fatalf("after Clean the source holds %d acct and %d acct_log rows, want %d and %d", a, l, srcAcct-15, srcLog-45)
	}
	if n := count(t, src, "SELECT count(*) FROM acct_log WHERE "+inChunk); n != 0 {
		t.Fatalf("%d acct_log rows of the chunk left at the source", n)
	}
}

// TestPullConcurrent: two pulls of one chunk over separate connections
// copy it once; the other reports Already.
func TestPullConcurrent(t *testing.T) {
	dsn := partitions(t)
	ctx := testCtx(t)
	ks := testKeyspace(t)
	src, dst := connect(t, ctx, dsn("p1")), connect(t, ctx, dsn("p2"))
	loadAccts(t, src, 0, 100, 5)
	chunk := acctChunk(0, intRange(nil, ip(50)))
	fencedPair(t, ctx, src, dst, chunk)

	var wg sync.WaitGroup
	results := make([]Pulled, 2)
	errs := make([]error, 2)
	for i := range 2 {
		s, d := connect(t, ctx, dsn("p1")), connect(t, ctx, dsn("p2"))
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i], errs[i] = Pull(ctx, s, d, "r", chunk, ks)
		}()
	}
	wg.Wait()
	if errs[0] != nil || errs[1] != nil {
		t.Fatal(errs)
	}
	if results[0].Already == results[1].Already {
		t.Fatalf("pulls %+v: want exactly one Already", results)
	}
	for _, r := range results {
		if !r.Already && r.Rows != 50+250 {
			t.Fatalf("the pull that copied: %+v, want 300 rows", r)
		}
	}
	if a, l := count(t, dst, "SELECT count(*) FROM acct"), count(t, dst, "SELECT count(*) FROM acct_log"); a != 50 || l != 250 {
		t.Fatalf("destination holds %d acct and %d acct_log rows, want 50 and 250", a, l)
	}
}

// TestPullFails: a pull into a destination missing a table fails, leaves
// the chunk fenced and both connections usable; the pull succeeds once
// the table exists.
func TestPullFails(t *testing.T) {
	dsn := partitions(t)
	ctx := testCtx(t)
	ks := testKeyspace(t)
	src, dst := connect(t, ctx, dsn("p1")), connect(t, ctx, dsn("p2"))
	loadAccts(t, src, 0, 20, 1)
	chunk := acctChunk(0, intRange(ip(0), ip(20)))
	fencedPair(t, ctx, src, dst, chunk)
	mustExec(t, dst, "ALTER TABLE acct_log RENAME TO acct_log_away")
	if _, err := Pull(ctx, src, dst, "r", chunk, ks); err == nil {
		t.Fatal("Pull into a destination without acct_log: no error")
	}
	if n := count(t, dst, "SELECT count(*) FROM acct"); n != 0 {
		t.Fatalf("a failed pull left %d acct rows", n)
	}
	mustExec(t, dst, "ALTER TABLE acct_log_away RENAME TO acct_log")
	p, err := Pull(ctx, src, dst, "r", chunk, ks)
	if err != nil || p.Rows != 40 {
		t.Fatalf("Pull after the repair: %+v, %v; want 40 rows", p, err)
	}
}

// TestPullCleanTextKeys: a text chunk with quotes, non-ASCII keys and a
// one-key range (a bound holding NUL) moves exactly its keys.
func TestPullCleanTextKeys(t *testing.T) {
	dsn := partitions(t)
	ctx := testCtx(t)
	ks := testKeyspace(t)
	src, dst := connect(t, ctx, dsn("p1")), connect(t, ctx, dsn("p2"))
	keys := []string{"A", "B", "Zoë", "m", "o'brien", "o'z", "x'y", "x'y\x01", "x'yz", "é", "ø", "\u00ff"}
	for _, k := range keys {
		mustExec(t, src, "INSERT INTO users VALUES ($1, 1)", k)
	}
	x := keyspace.TextKey("x'y")
	chunk := textChunk(0, "['m','o''z'),['é',)")
	chunk.Ranges = append(chunk.Ranges[:1], keyspace.Range{Lo: keyspace.Bound{Key: x}, Hi: keyspace.Successor(x)}, chunk.Ranges[1])
	fencedPair(t, ctx, src, dst, chunk)
	p, err := Pull(ctx, src, dst, "r", chunk, ks)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"m", "o'brien", "x'y", "\u00ff", "é", "ø"}
	got := rowsOf(t, dst, "SELECT name FROM users")
	for i, k := range want {
		want[i] = "(" + k + ")" // a row's text form
	}
	slices.Sort(want)
	if p.Rows != int64(len(want)) || !slices.Equal(got, want) {
		t.Fatalf("pulled %+v: %q, want %q", p, got, want)
	}
	if n, err := Clean(ctx, src, chunk, ks, 100); err != nil || n != int64(len(want)) {
		t.Fatalf("Clean: %d, %v; want %d", n, err, len(want))
	}
	if got := rowsOf(t, src, "SELECT name FROM users"); len(got) != len(keys)-len(want) {
		t.Fatalf("source after Clean: %q", got)
	}
}
