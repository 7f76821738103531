package pg

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/sluicedb/sluice/pgcluster"
	"golang.org/x/sys/unix"
)

// Retire stops the source for good, renames its data directory to
// DIR.retired-UNIXTIME and purges that copy (Purge: paced, in the
// background) once RetireGrace has passed, and no sooner than PurgeDelay:
// not inside the handover. With a grace longer than WritebackDelay the copy's
// page cache is dropped once the kernel has written it back (dropCache).
//
// The stop is immediate: no shutdown checkpoint. Retire runs after the
// release, when the target already serves the tenant, and a fast shutdown's
// checkpoint (every dirty buffer written and fsynced) competes for the disk
// with the new primary's first WAL writes and segment fsyncs just when its
// clients arrive with the freeze's backlog. Nothing is lost: the fence
// flushed the source's WAL, the target replayed all of it, and nothing was
// written since; a copy kept for its grace recovers from its WAL if it is
// ever started.
func (s *LocalSource) Retire(ctx context.Context) error {
	s.Close()
	start := time.Now()
	if err := s.C.Stop(ctx, pgcluster.Immediate); err != nil {
		return fmt.Errorf("migration: retire: %w", err)
	}
	stopped := time.Now()
	if _, err := os.Stat(s.C.Dir); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	old := s.C.Dir + ".retired-" + strconv.FormatInt(time.Now().Unix(), 10)
	if err := os.Rename(s.C.Dir, old); err != nil {
		return fmt.Errorf("migration: retire: %w", err)
	}
	purgeIn, dropIn := max(s.RetireGrace, PurgeDelay), WritebackDelay()
	if s.purgeAfter > 0 {
		purgeIn = max(s.RetireGrace, s.purgeAfter)
	}
	if s.cacheDropAfter > 0 {
		dropIn = s.cacheDropAfter
	}
	if s.Log != nil {
		s.Log.Info("source retired: stopped, data directory renamed", "dir", old, "stop", stopped.Sub(start).Round(100*time.Microsecond), "purge_in", purgeIn)
	}
	time.AfterFunc(purgeIn, func() {
		began := time.Now()
		n, err := Purge(context.Background(), old, PurgeRate)
		if s.Log != nil {
			if err != nil {
				s.Log.Warn("purging a retired data directory failed; the agent's next start removes what is left", "dir", old, "err", err)
			} else {
				s.Log.Info("retired data directory purged", "dir", old, "bytes", n, "took", time.Since(began).Round(time.Millisecond))
			}
		}
	})
	if dropIn < purgeIn {
		time.AfterFunc(dropIn, func() { dropCache(old) })
	}
	return nil
}

// dropCache asks the kernel to drop the page cache of every file under dir
// (POSIX_FADV_DONTNEED). A retired copy kept for its grace period would
// otherwise hold its cached pages — as much as the tenant's hot data — and
// the server's memory (its cgroup's limit, on a shared host) would evict the
// live tenants' pages first. Best effort: errors are ignored.
//
// DONTNEED drops only clean pages, and starts (does not wait for) the
// writeback of dirty ones. Retire therefore calls it once the kernel has
// written the copy's dirty pages back on its own (WritebackDelay), not at
// the handover: there, an fdatasync of every file or DONTNEED's writeback
// would put the old copy's dirty pages on the disk in one burst, just as the
// new primary's first commits wait for their WAL fsyncs.
func dropCache(dir string) {
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return nil
		}
		if f, err := os.Open(p); err == nil {
			unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED)
			f.Close()
		}
		return nil
	})
}

// WritebackDelay is how long after a file's last write the kernel has
// written its dirty pages back by itself: vm.dirty_expire_centisecs (the age
// at which a dirty page is written) plus two periods of the flusher,
// vm.dirty_writeback_centisecs. Defaults (30 s and 5 s, the kernel's) stand
// in for a value that can't be read or is 0; the result is 40 s then.
func WritebackDelay() time.Duration {
	return writebackDelay(readCentisecs("/proc/sys/vm/dirty_expire_centisecs"), readCentisecs("/proc/sys/vm/dirty_writeback_centisecs"))
}

// writebackDelay is WritebackDelay's rule on the two settings, centiseconds
// (<= 0: unknown or off, the kernel's default used).
func writebackDelay(expire, period int) time.Duration {
	if expire <= 0 {
		expire = 3000
	}
	if period <= 0 {
		period = 500
	}
	return time.Duration(expire+2*period) * 10 * time.Millisecond
}

// readCentisecs reads one integer sysctl file; -1 if it can't.
func readCentisecs(path string) int {
	b, err := os.ReadFile(path)
	if err != nil {
		return -1
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return -1
	}
	return n
}

// RemoveRetired removes directories next to dir that Retire renamed more than
// grace ago (for an agent that restarted while a grace timer was pending).
func RemoveRetired(dir string, grace time.Duration, now time.Time) error {
	ms, err := filepath.Glob(dir + ".retired-*")
	if err != nil {
		return err
	}
	for _, m := range ms {
		ts, err := strconv.ParseInt(m[strings.LastIndex(m, "-")+1:], 10, 64)
		if err != nil || now.Sub(time.Unix(ts, 0)) < grace {
			continue
		}
		if err := os.RemoveAll(m); err != nil {
			return fmt.Errorf("migration: remove retired %s: %w", m, err)
		}
	}
	return nil
}
