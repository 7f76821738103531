package pgreshard

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sluicedb/sluice/reshard"
)

// benchFence runs op as a sub-benchmark for each state of acct's fence:
// no trigger, the trigger over an empty fence, and the trigger over 100
// fence rows of acct on ranges the benchmarks' keys miss.
func benchFence(b *testing.B, op func(b *testing.B, ctx context.Context, conn *pgx.Conn)) {
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
			op(b, ctx, conn)
			if err := Unfence(context.Background(), conn, "bench", ""); c.install && err != nil {
				b.Fatal(err)
			}
		})
	}
}

// BenchmarkFenceWrite measures a single-row INSERT in autocommit into
// acct in each state of the fence: the difference is the fence's cost per
// write, commit included.
func BenchmarkFenceWrite(b *testing.B) {
	benchFence(b, func(b *testing.B, ctx context.Context, conn *pgx.Conn) {
		b.ResetTimer()
		for i := range b.N {
			if _, err := conn.Exec(ctx, "INSERT INTO acct VALUES ($1, 'v')", int64(i)); err != nil {
				b.Fatal(err)
			}
		}
		b.StopTimer()
		b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N), "µs/write")
	})
}

// BenchmarkFenceRows measures the fence trigger's CPU cost per row apart
// from a commit's: each op INSERTs 1000 rows in one statement (and
// truncates them, untimed), so the per-row figure is what the trigger adds
// to every row written.
func BenchmarkFenceRows(b *testing.B) {
	benchFence(b, func(b *testing.B, ctx context.Context, conn *pgx.Conn) {
		var inserting time.Duration
		b.ResetTimer()
		for range b.N {
			start := time.Now()
			if _, err := conn.Exec(ctx, "INSERT INTO acct SELECT k, 'v' FROM generate_series(1, 1000) k"); err != nil {
				b.Fatal(err)
			}
			inserting += time.Since(start)
			b.StopTimer()
			mustExec(b, conn, "TRUNCATE acct, acct_log")
			b.StartTimer()
		}
		b.StopTimer()
		b.ReportMetric(float64(inserting.Microseconds())/float64(b.N*1000), "µs/row")
	})
}
