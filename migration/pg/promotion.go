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

	"github.com/jackc/pgx/v5"
	"github.com/sluicedb/sluice/migration"
)

// PromotionBytes is how much WAL past the replay position PreparePromotion
// creates on the new timeline, bytes: 32 MiB, in whole segments and at least
// two (PromotionSegments). That is 10–30 s of WAL at 1–3 MB/s, the rate a
// new primary writes after a release (the promotion requests a checkpoint,
// and every page's first change after it is a full page image): past the
// handover's backlog. A count of segments instead would cover far less with
// small (1 MiB) segments.
const PromotionBytes = 32 << 20

// PromotionSegments is how many segments of segSize bytes PreparePromotion
// creates: PromotionBytes rounded up, at least 2.
func PromotionSegments(segSize uint64) uint64 {
	if segSize == 0 {
		return 2
	}
	return max(2, (PromotionBytes+segSize-1)/segSize)
}

// segmentSyncBytes is how much of a new segment is written between fdatasyncs
// (bytes): the disk is shared with the source's reads, so the zeros go out
// in small bursts rather than one 16 MiB one.
const segmentSyncBytes = 2 << 20

// PreparePromotion creates, if missing, the first WAL segments the standby
// of m will write once promoted, after the one it is replaying: named for
// its new timeline, zero-filled and synced. A server not in recovery is
// left alone.
//
// Why: a promoted server writes its WAL on a new timeline, and none of the
// segment files it has are named for it (the ones a standby recycles at its
// restartpoints carry the timeline it was replaying). Without this, its
// first segments after the promotion are created on demand, zero-filled
// (wal_init_zero) and synced while WAL insertion waits — just as the held
// transactions arrive (docs/results.md).
func (t *LocalTarget) PreparePromotion(ctx context.Context, m migration.Record) error {
	c, err := t.cluster(m)
	if err != nil {
		return err
	}
	var (
		inRecovery bool
		replay     string
		tli        uint32
		segSize    uint64
	)
	err = t.withConn(ctx, m, func(conn *pgx.Conn) error {
		return conn.QueryRow(ctx, `SELECT pg_is_in_recovery(), coalesce(pg_last_wal_replay_lsn()::text, ''),
			(SELECT timeline_id FROM pg_control_checkpoint()), (SELECT bytes_per_wal_segment FROM pg_control_init())`).
			Scan(&inRecovery, &replay, &tli, &segSize)
	})
	if err != nil {
		return fmt.Errorf("migration: prepare promotion: %w", err)
	}
	if !inRecovery || replay == "" {
		return nil
	}
	lsn, err := migration.ParseLSN(replay)
	if err != nil {
		return fmt.Errorf("migration: prepare promotion: %w", err)
	}
	walDir := filepath.Join(m.TargetDir, "pg_wal")
	entries, err := os.ReadDir(walDir)
	if err != nil {
		return fmt.Errorf("migration: prepare promotion: %w", err)
	}
	names := make([]string, len(entries))
	for i, e := range entries {
		names[i] = e.Name()
	}
	next := NextTimeline(tli, names)
	created := false
	for i := uint64(1); i <= PromotionSegments(segSize); i++ {
		name := WALFileName(next, uint64(lsn)/segSize+i, segSize)
		ok, err := createZeroSegment(ctx, walDir, name, int64(segSize), c.Chown)
		if err != nil {
			return fmt.Errorf("migration: prepare promotion: %s: %w", name, err)
		}
		created = created || ok
	}
	if created {
		// One directory sync for all the new names (a name lost to a
		// crash before it costs nothing: the server creates its own).
		if err := syncDir(walDir); err != nil {
			return fmt.Errorf("migration: prepare promotion: %w", err)
		}
	}
	return nil
}

// NextTimeline is the timeline a standby replaying timeline tli takes when
// promoted, given the file names in its pg_wal: one above the newest
// timeline it knows of, its own or one with a history file there (as
// PostgreSQL's findNewestTimeLine with recovery_target_timeline 'latest').
func NextTimeline(tli uint32, walNames []string) uint32 {
	newest := tli
	for _, n := range walNames {
		h, ok := strings.CutSuffix(n, ".history")
		if !ok || len(h) != 8 {
			continue
		}
		if v, err := strconv.ParseUint(h, 16, 32); err == nil && uint32(v) > newest {
			newest = uint32(v)
		}
	}
	return newest + 1
}

// WALFileName is PostgreSQL's name for segment segno of timeline tli with
// segments of segSize bytes (XLogFileName).
func WALFileName(tli uint32, segno, segSize uint64) string {
	perID := (uint64(1) << 32) / segSize
	return fmt.Sprintf("%08X%08X%08X", tli, uint32(segno/perID), uint32(segno%perID))
}

// createZeroSegment creates dir/name as size zero bytes, synced and given to
// the server's OS user, unless it exists; it reports whether it created it.
// The file is written under a temporary name and linked into place, so a
// segment the server created meanwhile is never replaced, and a crash leaves
// no partial segment under a segment's name. The caller syncs dir to make
// the new name durable.
func createZeroSegment(ctx context.Context, dir, name string, size int64, chown func(string) error) (bool, error) {
	path := filepath.Join(dir, name)
	if _, err := os.Lstat(path); err == nil {
		return false, nil
	} else if !errors.Is(err, fs.ErrNotExist) {
		return false, err
	}
	tmp := filepath.Join(dir, "sluice-xlogtemp."+name)
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return false, err
	}
	defer os.Remove(tmp)
	zeros := make([]byte, 256<<10)
	var sinceSync int64
	for off := int64(0); off < size; {
		if err := ctx.Err(); err != nil {
			f.Close()
			return false, err
		}
		n, err := f.Write(zeros[:min(int64(len(zeros)), size-off)])
		if err != nil {
			f.Close()
			return false, err
		}
		off += int64(n)
		if sinceSync += int64(n); sinceSync >= segmentSyncBytes || off == size {
			if err := f.Sync(); err != nil {
				f.Close()
				return false, err
			}
			sinceSync = 0
		}
	}
	if err := f.Close(); err != nil {
		return false, err
	}
	if err := chown(tmp); err != nil {
		return false, err
	}
	if err := os.Link(tmp, path); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return false, nil
		}
		return false, err
	}
	return true, nil
}

// syncDir fsyncs a directory, making a new entry in it durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// Promote ends recovery with pg_promote(wait => false) over the persistent
// connection (no pg_ctl process, no 100 ms polling inside pg_promote) and
// polls pg_is_in_recovery() every PollInterval until it is false. A server
// already out of recovery returns at once.
func (t *LocalTarget) Promote(ctx context.Context, m migration.Record) error {
	err := t.withConn(ctx, m, func(c *pgx.Conn) error {
		var rec bool
		if err := c.QueryRow(ctx, "SELECT pg_is_in_recovery()").Scan(&rec); err != nil {
			return err
		}
		if !rec {
			return nil
		}
		if _, err := c.Exec(ctx, "SELECT pg_promote(false)"); err != nil {
			return err
		}
		for rec {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(t.poll()):
			}
			if err := c.QueryRow(ctx, "SELECT pg_is_in_recovery()").Scan(&rec); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("migration: promote: %w", err)
	}
	return nil
}
