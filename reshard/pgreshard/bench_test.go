package pgreshard

import (
	"context"
	"testing"
	"time"

	"github.com/sluicedb/sluice/reshard"
)

// BenchmarkFenceWrite measures a single-row INSERT in autocommit into
// acct: without the fence trigger, with it and an empty fence table, and
// with 100 fence rows of acct on ranges the inserted keys miss. The
// difference is the fence's cost per write.
func BenchmarkFenceWrite(b *testing.B) {
	dsn := partitions(b)
	ctx := testCtx(b)
	ks := testKeyspace(b)
	conn := connect(b, ctx, dsn("p1"))
	var fence []reshard.Chunk
	for j := range int64(100) {
		lo := int64(1e12) + 10*j
		fence = append(fence, acctChunk(int(j), intRange(ip(lo), ip(lo+5))))
	}
	for _, c := range []struct {
		name    string
		install bool
		fence   []reshard.Chunk
	}{
		{"no-trigger", false, nil},
		{"empty-fence", true, nil},
		{"100-fence-rows", true, fence},
	} {
		b.Run(c.name, func(b *testing.B) {
			mustExec(b, conn, "TRUNCATE acct, acct_log")
			if c.install {
				if err := Install(ctx, conn, ks); err != nil {
					b.Fatal(err)
				}
				if err := FenceOut(ctx, conn, "bench", c.fence); err != nil {
					b.Fatal(err)
				}
				mustExec(b, conn, "ANALYZE sluice_fence")
			} else if err := Uninstall(ctx, conn, ks); err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			for i := range b.N {
				if _, err := conn.Exec(ctx, "INSERT INTO acct VALUES ($1, 'v')", int64(i)); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N), "µs/write")
			if err := Unfence(context.Background(), conn, "bench", ""); c.install && err != nil {
				b.Fatal(err)
			}
		})
	}
}

// BenchmarkFenceRows measures the fence trigger's CPU cost per row apart
// from a commit's: each op INSERTs 1000 rows in one statement (and
// deletes them), so the per-row figure is what the trigger adds to every
// row written. Cases as BenchmarkFenceWrite.
func BenchmarkFenceRows(b *testing.B) {
	dsn := partitions(b)
	ctx := testCtx(b)
	ks := testKeyspace(b)
	conn := connect(b, ctx, dsn("p1"))
	var fence []reshard.Chunk
	for j := range int64(100) {
		lo := int64(1e12) + 10*j
		fence = append(fence, acctChunk(int(j), intRange(ip(lo), ip(lo+5))))
	}
	for _, c := range []struct {
		name    string
		install bool
		fence   []reshard.Chunk
	}{
		{"no-trigger", false, nil},
		{"empty-fence", true, nil},
		{"100-fence-rows", true, fence},
	} {
		b.Run(c.name, func(b *testing.B) {
			mustExec(b, conn, "TRUNCATE acct, acct_log")
			if c.install {
				if err := Install(ctx, conn, ks); err != nil {
					b.Fatal(err)
				}
				if err := FenceOut(ctx, conn, "bench", c.fence); err != nil {
					b.Fatal(err)
				}
				mustExec(b, conn, "ANALYZE sluice_fence")
			} else if err := Uninstall(ctx, conn, ks); err != nil {
				b.Fatal(err)
			}
			var inserting int64
			b.ResetTimer()
			for range b.N {
				start := time.Now()
				if _, err := conn.Exec(ctx, "INSERT INTO acct SELECT k, 'v' FROM generate_series(1, 1000) k"); err != nil {
					b.Fatal(err)
				}
				inserting += int64(time.Since(start))
				b.StopTimer()
				mustExec(b, conn, "TRUNCATE acct, acct_log")
				b.StartTimer()
			}
			b.StopTimer()
			b.ReportMetric(float64(inserting)/1e3/float64(b.N*1000), "µs/row")
			if err := Unfence(context.Background(), conn, "bench", ""); c.install && err != nil {
				b.Fatal(err)
			}
		})
	}
}
