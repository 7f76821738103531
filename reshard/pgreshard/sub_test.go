package pgreshard

import (
	"testing"

	"github.com/sluicedb/sluice/reshard"
)

// TestSubChunks: one acct key's rows split on acct_log's secondary column
// n into three sub-chunks. The first carries the acct row (and log rows
// with n NULL); the key stays fenced at the destination until every
// sub-chunk has arrived; cleaning the later sub-chunks first, then the
// first, never breaks acct_log's foreign key; Stats reports n's values.
func TestSubChunks(t *testing.T) {
	dsn := partitions(t)
	ctx := testCtx(t)
	ks := testKeyspace(t)
	for i := range ks.Tables {
		if ks.Tables[i].Name == "acct_log" {
			ks.Tables[i].Secondary = "n"
		}
	}
	if err := ks.Validate(); err != nil {
		t.Fatal(err)
	}
	src, dst := connect(t, ctx, dsn("p1")), connect(t, ctx, dsn("p2"))
	loadAccts(t, src, 50, 52, 30) // keys 50 and 51, n = 1…30
	mustExec(t, src, "INSERT INTO acct_log (acct_id, n) VALUES (50, NULL)")
	mustExec(t, src, "ANALYZE")
	st, err := Stats(ctx, src, ks, "acct")
	if err != nil || len(st.Secondary) < 10 || st.Secondary[0] != 1 || st.Secondary[len(st.Secondary)-1] != 30 {
		t.Fatalf("stats: %+v, %v; want acct_log.n's values 1…30", st, err)
	}
	key := intRange(ip(50), ip(51))
	sub := func(id int, lo, hi *int64) reshard.Chunk {
		c := acctChunk(id, key)
		r := intRange(lo, hi)
		c.Sub, c.Group = &r, 0
		return c
	}
	chunks := []reshard.Chunk{sub(0, nil, ip(10)), sub(1, ip(10), ip(20)), sub(2, ip(20), nil)}
	if err := Install(ctx, src, ks); err != nil {
		t.Fatal(err)
	}
	if err := Install(ctx, dst, ks); err != nil {
		t.Fatal(err)
	}
	if err := FenceIn(ctx, dst, "r", chunks); err != nil {
		t.Fatal(err)
	}
	pulled := func(c reshard.Chunk) {
		t.Helper()
		if p, err := Pull(ctx, src, dst, "r", c, ks); err != nil || p.Already {
			t.Fatalf("pull %v: %+v, %v", c, p, err)
		}
	}
	pulled(chunks[0])
	if n := count(t, dst, "SELECT count(*) FROM acct_log WHERE acct_id = 50"); n != 10 { // n 1…9 and NULL
		t.Fatalf("after the first sub-chunk: %d log rows of key 50, want 10", n)
	}
	if n := count(t, dst, "SELECT count(*) FROM acct WHERE id = 50"); n != 1 {
		t.Fatalf("the first sub-chunk did not carry the acct row")
	}
	_, err = dst.Exec(ctx, "INSERT INTO acct_log (acct_id, n) VALUES (50, 99)")
	wantFenced(t, "a write of key 50 before its last sub-chunk", err, "has not arrived")
	pulled(chunks[2])
	pulled(chunks[1])
	if n := count(t, dst, "SELECT count(*) FROM acct_log WHERE acct_id = 50"); n != 31 {
		t.Fatalf("after every sub-chunk: %d log rows of key 50, want 31", n)
	}
	if n := count(t, dst, "SELECT count(*) FROM acct_log WHERE acct_id = 51"); n != 0 {
		t.Fatalf("key 51 is not in the chunks, yet %d of its rows arrived", n)
	}
	if _, err := dst.Exec(ctx, "INSERT INTO acct_log (acct_id, n) VALUES (50, 99)"); err != nil {
		t.Fatalf("a write of key 50 once it has arrived: %v", err)
	}
	for _, id := range []int{2, 1, 0} {
		for {
			n, err := Clean(ctx, src, chunks[id], ks, 4)
			if err != nil {
				t.Fatalf("clean %v: %v", chunks[id], err)
			}
			if n == 0 {
				break
			}
		}
	}
	if n := count(t, src, "SELECT count(*) FROM acct_log WHERE acct_id = 50") + count(t, src, "SELECT count(*) FROM acct WHERE id = 50"); n != 0 {
		t.Fatalf("%d rows of key 50 left at the source", n)
	}
	if n := count(t, src, "SELECT count(*) FROM acct_log WHERE acct_id = 51"); n != 30 {
		t.Fatalf("cleaning key 50 removed rows of key 51: %d left", n)
	}
}
