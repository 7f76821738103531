package migration

import (
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"time"
)

// A retired data directory is deleted in the background and paced, the way
// RocksDB's delete scheduler deletes its files. BenchmarkPurgeNeighbour (an
// 8 KiB write+fdatasync every 10 ms beside the deletion of a 1 GiB file) on
// this machine's ext4, mounted with online discard, 2026-11-24: removed at
// once, the neighbour's fsync p99 was 32 ms (max 38), against 0.5 ms (max
// 1.8) idle; cut away by Purge at 64 or 256 MB/s, p99 3.1 and 2.9 ms (max 5.0
// and 5.7). Inside a handover's cleanup, removing a tenant's 1.1 GB
// directory took 0.8–1.2 s (the retire log line), on the disk the new owner
// had just started committing to.
const (
	// PurgeRate is how fast Purge frees file data, bytes/s: a testbed
	// tenant's 1.3–2 GB directory (its WAL included) in 5–8 s.
	PurgeRate = 256e6
	// PurgeStep is how much of a file one truncation frees, bytes.
	PurgeStep = 16 << 20
	// PurgeDelay is how long after a retire without grace its directory's
	// purge starts: the new owner first drains the freeze's backlog (the
	// clients' latency is back to normal within ~2 s of the release on the
	// testbed).
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
		if d := time.Until(due); d > 0 {
			return sleep(ctx, d)
		}
		return ctx.Err()
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
