package pg

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// BenchmarkPurgeNeighbour measures what deleting a 1 GiB file does to a
// neighbour on the same file system: an 8 KiB write+fdatasync every 10 ms
// (a small commit) while the file is left alone ("idle", the baseline), removed
// at once ("removeall"), or cut away by Purge at 64 and 256 MB/s. Metrics:
// the neighbour's fsync p99 and max, ms. Run it with -benchtime 1x (each
// iteration writes and deletes 1 GiB):
//
//	go test -run XXX -bench PurgeNeighbour -benchtime 1x ./migration/pg
func BenchmarkPurgeNeighbour(b *testing.B) {
	for _, mode := range []struct {
		name string
		rate float64 // 0: os.RemoveAll; -1: nothing deleted
	}{{"idle", -1}, {"removeall", 0}, {"paced64", 64e6}, {"paced256", 256e6}} {
		b.Run(mode.name, func(b *testing.B) {
			var lat []float64
			for range b.N {
				dir := filepath.Join(b.TempDir(), "t.retired-1")
				writeFile(b, filepath.Join(dir, "base", "1", "16384"), 1<<30)
				lat = append(lat, neighbourDuring(b, func() {
					switch {
					case mode.rate < 0:
						time.Sleep(2 * time.Second)
					case mode.rate == 0:
						os.RemoveAll(dir)
					default:
						if _, err := Purge(context.Background(), dir, mode.rate); err != nil {
							b.Fatal(err)
						}
					}
				})...)
			}
			slices.Sort(lat)
			b.ReportMetric(lat[len(lat)*99/100], "p99-ms")
			b.ReportMetric(lat[len(lat)-1], "max-ms")
		})
	}
}

// writeFile writes n bytes to path and syncs it (its pages clean, as a
// retired copy's are once written back).
func writeFile(b *testing.B, path string, n int64) {
	b.Helper()
	os.MkdirAll(filepath.Dir(path), 0o755)
	f, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 1<<20)
	for i := range buf {
		buf[i] = byte(i * 7)
	}
	for w := int64(0); w < n; w += int64(len(buf)) {
		if _, err := f.Write(buf); err != nil {
			b.Fatal(err)
		}
	}
	if err := f.Sync(); err != nil {
		b.Fatal(err)
	}
}

// neighbourDuring runs op while a neighbour writes 8 KiB and fdatasyncs it
// every 10 ms, from 0.5 s before op to 1 s after; it returns each fsync's
// latency, ms.
func neighbourDuring(b *testing.B, op func()) []float64 {
	b.Helper()
	f, err := os.Create(filepath.Join(b.TempDir(), "wal"))
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	stop, done := make(chan struct{}), make(chan []float64)
	go func() {
		var lat []float64
		page := make([]byte, 8192)
		for {
			select {
			case <-stop:
				done <- lat
				return
			default:
			}
			t := time.Now()
			f.WriteAt(page, 0)
			f.Sync()
			lat = append(lat, float64(time.Since(t).Microseconds())/1000)
			time.Sleep(10 * time.Millisecond)
		}
	}()
	time.Sleep(500 * time.Millisecond)
	op()
	time.Sleep(time.Second)
	close(stop)
	return <-done
}
