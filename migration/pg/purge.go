package pg

import (
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/sluicedb/sluice/internal/clock"
)

// A retired data directory is deleted in the background and paced, the way
// RocksDB's delete scheduler deletes its files: removing a large file at once
// (on ext4 with online discard) stalls a neighbour's fsyncs by tens of
// milliseconds, and a tenant's directory is removed on the disk its new owner
// has just started committing to. Cut away in steps, the stall is a few
// milliseconds (BenchmarkPurgeNeighbour; docs/results.md).
const (
	// PurgeRate is how fast Purge frees file data, bytes/s: a 1.3–2 GB
	// tenant directory (its WAL included) in 5–8 s.
	PurgeRate = 256e6
	// PurgeStep is how much of a file one truncation frees, bytes.
	PurgeStep = 16 << 20
	// PurgeDelay is how long after a retire without grace its directory's
	// purge starts: the new owner first drains the freeze's backlog (the
	// clients' latency is back to normal within seconds of the release).
	PurgeDelay = 5 * time.Second
)

// Purge deletes the tree at dir, freeing file data at no more than rate
// bytes/s (<= 0: PurgeRate): each regular file is cut from its end in
// PurgeStep steps, then removed, then the emptied tree is. It returns the
// bytes freed. When ctx ends it stops and returns ctx's error; what is left
// stays for a later purge (an agent's start removes retired copies whose
// grace has passed: RemoveRetired). A dir that does not exist is no error.
func Purge(ctx context.Context, dir string, rate float64) (int64, error) {
	if rate <= 0 {
		rate = PurgeRate
	}
	var freed int64
	start := time.Now()
	pace := func() error {
		due := start.Add(time.Duration(float64(freed) / rate * float64(time.Second)))
		return clock.Sleep(ctx, time.Until(due))
	}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if os.IsNotExist(err) {
				return nil
			}
			return err
		}
		if !d.Type().IsRegular() {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return nil // gone meanwhile
		}
		for size := info.Size(); size > 0; {
			next := max(0, size-PurgeStep)
			if err := os.Truncate(p, next); err != nil {
				return err
			}
			freed += size - next
			size = next
			if err := pace(); err != nil {
				return err
			}
		}
		return os.Remove(p)
	})
	if err != nil {
		return freed, err
	}
	return freed, os.RemoveAll(dir)
}
