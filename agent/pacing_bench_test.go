package agent

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/sluicedb/sluice/migration"
	"github.com/sluicedb/sluice/throttle"
	"github.com/sluicedb/sluice/transfer"
)

// splitLimiter hides the limiter's burst, so package transfer paces it in
// steps of transfer.MaxWait, as it did before it asked for whole chunks.
type splitLimiter struct{ l *throttle.Limiter }

func (s splitLimiter) WaitN(ctx context.Context, n int) error { return s.l.WaitN(ctx, n) }

// processCPU is this process's user + system CPU time.
func processCPU() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkPacedSnapshotCPU measures the CPU a snapshot stream costs per MB
// at the rates a control loop paces it at (2, 10, 40 MB/s): package
// transfer's reader and sender with the agent's two limiters (disk reads and
// wire), through RemoteTarget's chunked POST into an agent whose target
// discards the stream — both ends in this process, as on one host. The CPU
// is the process's (getrusage), over about 3 s of pacing per rate. Variants:
//
//	before  256 KiB chunks, limiters with a fixed 64 KiB burst (the old auto
//	        burst's floor; above 3.3 MB/s the old auto burst was larger, but
//	        it too was waited on in 64 KiB steps), GOMAXPROCS 2
//	after   the defaults: 256 KiB chunks, the auto burst (512 KiB floor)
//	        waited on a frame at a time, GOMAXPROCS 1 (`sluice agent --procs`
//	        default)
//	after-2procs  the defaults but GOMAXPROCS 2: what the --procs default
//	        alone saves
//	raw     the baseline in the same run: 1 MiB reads paced by one limiter
//	        and written to a loopback TCP connection drained by io.Copy
//
// Reported: cpu-ms/MB and cpu-ms/s (of the run's wall time). Run with
// -benchtime=1x; the figures to compare are the ratios to raw.
func BenchmarkPacedSnapshotCPU(b *testing.B) {
	rec := migration.New("bench2", "1", "src", "bench", migration.Live, time.Now())
	rt := &RemoteTarget{c: discardAgent(b, newTestConfig(b, "bench"), rec).c}
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(0))

	const seconds = 3
	for _, rate := range []float64{2e6, 10e6, 40e6} {
		// A directory of rate × 3 s in 8 MB files, read once so it is cached.
		root := b.TempDir()
		size := int64(rate * seconds)
		buf := make([]byte, 8<<20)
		for i := range buf {
			buf[i] = byte(i * 7)
		}
		for i, left := 0, size; left > 0; i++ {
			n := min(left, int64(len(buf)))
			if err := os.WriteFile(filepath.Join(root, fmt.Sprintf("f%03d", i)), buf[:n], 0o600); err != nil {
				b.Fatal(err)
			}
			left -= n
		}
		entries, err := transfer.Walk(root, nil)
		if err != nil {
			b.Fatal(err)
		}
		report := func(b *testing.B, cpu, wall time.Duration, bytes int64) {
			mb := float64(bytes) / 1e6
			b.ReportMetric(float64(cpu)/float64(time.Millisecond)/mb, "cpu-ms/MB")
			b.ReportMetric(float64(cpu)/float64(time.Millisecond)/wall.Seconds(), "cpu-ms/s")
			b.ReportMetric(mb/wall.Seconds(), "MB/s")
		}
		for _, v := range []struct {
			name  string
			procs int
			chunk int
			old   bool
		}{{"before", 2, 256 << 10, true}, {"after", 1, 0, false}, {"after-2procs", 2, 0, false}} {
			b.Run(fmt.Sprintf("%s/%gMBps", v.name, rate/1e6), func(b *testing.B) {
				runtime.GOMAXPROCS(v.procs)
				var cpu, wall time.Duration
				var bytes int64
				for i := 0; i < b.N; i++ {
					var lim, pre transfer.Limiter
					if v.old {
						lim, pre = splitLimiter{throttle.NewLimiter(rate, 64<<10)}, splitLimiter{throttle.NewLimiter(rate, 64<<10)}
					} else {
						lim, pre = throttle.NewLimiter(rate, 0), throttle.NewLimiter(rate, 0)
					}
					c0, t0 := processCPU(), time.Now()
					w, err := rt.OpenSnapshot(context.Background(), rec)
					if err != nil {
						b.Fatal(err)
					}
					st, err := transfer.Send(context.Background(), w, root, entries, transfer.SendOptions{ChunkSize: v.chunk, Limiter: lim, Prefetch: pre})
					if cerr := w.Close(); err == nil {
						err = cerr
					}
					if err != nil {
						b.Fatal(err)
					}
					cpu += processCPU() - c0
					wall += time.Since(t0)
					bytes += st.Bytes
				}
				report(b, cpu, wall, bytes)
			})
		}
		b.Run(fmt.Sprintf("raw/%gMBps", rate/1e6), func(b *testing.B) {
			runtime.GOMAXPROCS(1)
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				b.Fatal(err)
			}
			defer ln.Close()
			go func() {
				for {
					c, err := ln.Accept()
					if err != nil {
						return
					}
					io.Copy(io.Discard, c)
					c.Close()
				}
			}()
			var cpu, wall time.Duration
			var bytes int64
			rbuf := make([]byte, 1<<20)
			for i := 0; i < b.N; i++ {
				lim := throttle.NewLimiter(rate, 0)
				c0, t0 := processCPU(), time.Now()
				c, err := net.Dial("tcp", ln.Addr().String())
				if err != nil {
					b.Fatal(err)
				}
				for _, e := range entries {
					if e.Dir {
						continue
					}
					f, err := os.Open(filepath.Join(root, e.Path))
					if err != nil {
						b.Fatal(err)
					}
					for {
						n, err := io.ReadFull(f, rbuf)
						if n > 0 {
							if werr := lim.WaitN(context.Background(), n); werr != nil {
								b.Fatal(werr)
							}
							if _, werr := c.Write(rbuf[:n]); werr != nil {
								b.Fatal(werr)
							}
							bytes += int64(n)
						}
						if err != nil {
							break
						}
					}
					f.Close()
				}
				c.Close()
				cpu += processCPU() - c0
				wall += time.Since(t0)
			}
			report(b, cpu, wall, bytes)
		})
	}
}
