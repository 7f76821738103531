package pg

import (
	"context"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/sluicedb/sluice/migration"
	"github.com/sluicedb/sluice/snapshot"
)

// SendSnapshot takes an online backup with package snapshot (pg_backup_start
// and pg_backup_stop in one session, pg_basebackup's exclusions, per-file
// checksums, a read-ahead buffer), paced by lim on the wire.
func (s *LocalSource) SendSnapshot(ctx context.Context, w io.Writer, lim migration.Limiter, done func(int64)) (migration.SnapshotInfo, error) {
	var info migration.SnapshotInfo
	prog := &snapshot.Progress{}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	if done != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			t := time.NewTicker(100 * time.Millisecond)
			defer t.Stop()
			for {
				select {
				case <-stop:
					return
				case <-t.C:
					done(prog.BytesSent.Load())
				}
			}
		}()
	}
	opts := snapshot.SendOptions{Label: "sluice migration", Progress: prog}
	opts.Started = func(r snapshot.Result) {
		if s.Log != nil {
			s.Log.Info("snapshot started", "checkpoint", r.Checkpoint, "took", r.StartDuration.Round(time.Millisecond), "start_lsn", r.StartLSN)
		}
		if s.OnBackupStart != nil {
			s.OnBackupStart(true, r.Checkpoint)
		}
	}
	if s.Checkpoint != "" {
		var err error
		if opts.SpreadCheckpoint, opts.CheckpointPace, err = snapshot.ParseCheckpoint(s.Checkpoint); err != nil {
			return info, fmt.Errorf("migration: snapshot: %w", err)
		}
	}
	if s.OnBackupStart != nil {
		s.OnBackupStart(false, snapshot.CheckpointName(opts.SpreadCheckpoint, opts.CheckpointPace))
	}
	if lim != nil {
		opts.Limiter = lim
	}
	if s.Prefetch != nil {
		opts.Prefetch = s.Prefetch
	}
	if s.ReadAhead > 0 {
		opts.ReadAhead = s.ReadAhead
	}
	res, err := snapshot.Send(ctx, s.C, w, opts)
	close(stop)
	wg.Wait()
	info.Bytes, info.Checkpoint, info.StartSeconds = res.Bytes, res.Checkpoint, res.StartDuration.Seconds()
	if err != nil {
		return info, fmt.Errorf("migration: snapshot: %w", err)
	}
	if done != nil {
		done(res.Bytes)
	}
	if info.StartLSN, err = migration.ParseLSN(res.StartLSN); err != nil {
		return info, fmt.Errorf("migration: snapshot: %w", err)
	}
	return info, nil
}

// SendCold streams the stopped source's directory, WAL included.
func (s *LocalSource) SendCold(ctx context.Context, w io.Writer, lim migration.Limiter, done func(int64)) (int64, error) {
	if s.C.Running() {
		return 0, fmt.Errorf("migration: cold copy: source %s is running", s.C.Dir)
	}
	sw := &streamWriter{ctx: ctx, w: w, lim: lim, done: done}
	err := sendDir(ctx, s.C.Dir, sw, coldEmptyDirs, nil)
	return sw.n, err
}
