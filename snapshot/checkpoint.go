package snapshot

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sluicedb/sluice/pgcluster"
)

// A base backup starts with a checkpoint: pg_backup_start returns once
// every buffer dirtied before its redo point is on disk. Asked for a fast
// checkpoint, PostgreSQL writes them all at once; on a server with little
// CPU that is a burst its clients feel (a quarter-core server wrote 2572–3517
// buffers in 0.14–0.22 s, its clients' transactions at 15–50 ms against 1 ms
// for the 0.4 s around it). Asked for a
// spread one, it paces the writes over checkpoint_completion_target ×
// checkpoint_timeout — 4.5 minutes by default, whatever the number of
// buffers. CheckpointPace sits between: for the backup's checkpoint only,
// the checkpointer runs with checkpoint_timeout = paceTimeout and a
// completion target of pace/paceTimeout, so the writes are spread over about
// pace (up to a second less: PostgreSQL counts a checkpoint's elapsed time from
// its start's whole second). The settings go into pgcluster.TransientConf and only the
// checkpointer is told to reload (SIGHUP), so no other process of the server
// parses its configuration; they are removed, and the checkpointer told
// again, as soon as pg_backup_start returns.
//
// A checkpoint already running when the settings arrive (a timed one, or
// the spread one a promotion starts) is behind the new schedule and writes
// what it has left at once, as a fast request would have made it do; the
// backup's own checkpoint, which follows it, is the one paced.

// paceTimeout is the checkpoint_timeout a paced checkpoint runs under:
// PostgreSQL's least, so that the completion target (≤ 0.9 of it, its
// usual ceiling) can reach the longest pace.
const paceTimeout = 30 * time.Second

// MaxCheckpointPace is the longest CheckpointPace: 0.9 × paceTimeout.
const MaxCheckpointPace = 27 * time.Second

// ParseCheckpoint reads how a snapshot's checkpoint is taken, as the
// command line and the agent's API name it: "fast" (pg_basebackup's
// --checkpoint=fast: every dirty buffer written at once), "spread"
// (--checkpoint=spread: the server's own pacing, minutes by default), or a
// duration such as "3s": paced over about that long (SendOptions.
// CheckpointPace), up to MaxCheckpointPace.
func ParseCheckpoint(s string) (spread bool, pace time.Duration, err error) {
	switch strings.TrimSpace(s) {
	case "fast":
		return false, 0, nil
	case "spread":
		return true, 0, nil
	}
	d, err := time.ParseDuration(strings.TrimSpace(s))
	if err != nil {
		return false, 0, fmt.Errorf("checkpoint %q is not fast, spread or a duration such as 3s", s)
	}
	if d <= 0 || d > MaxCheckpointPace {
		return false, 0, fmt.Errorf("checkpoint pace %v is outside (0, %v]", d, MaxCheckpointPace)
	}
	return false, d, nil
}

// CheckpointName names a checkpoint as Result.Checkpoint does when it is
// taken as asked: "fast", "spread", or "paced 3s" for a pace.
func CheckpointName(spread bool, pace time.Duration) string {
	switch {
	case pace > 0:
		return "paced " + pace.String()
	case spread:
		return "spread"
	}
	return "fast"
}

// checkpointSettings are the transient settings that pace the next
// checkpoint over about pace.
func checkpointSettings(pace time.Duration) map[string]string {
	return map[string]string{
		"checkpoint_timeout":           fmt.Sprintf("%ds", int(paceTimeout/time.Second)),
		"checkpoint_completion_target": fmt.Sprintf("%.4f", pace.Seconds()/paceTimeout.Seconds()),
	}
}

// paceCheckpoint gives the checkpointer of src the settings that pace the
// next checkpoint over about pace and returns the function that takes them
// back. ok is false when the pace cannot apply: checkpoint_timeout or
// checkpoint_completion_target is set with ALTER SYSTEM, which wins over
// the transient file; nothing is changed then.
func paceCheckpoint(ctx context.Context, conn *pgx.Conn, src *pgcluster.Cluster, pace time.Duration) (restore func() error, ok bool, err error) {
	var altered int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_settings
		WHERE name IN ('checkpoint_timeout', 'checkpoint_completion_target') AND sourcefile LIKE '%postgresql.auto.conf'`).Scan(&altered); err != nil {
		return nil, false, fmt.Errorf("snapshot: send: checkpoint settings: %w", err)
	}
	if altered > 0 {
		return nil, false, nil
	}
	if err := src.SetTransient(checkpointSettings(pace)); err != nil {
		return nil, false, fmt.Errorf("snapshot: send: pace the checkpoint: %w", err)
	}
	restore = func() error {
		err := src.SetTransient(nil)
		// The session may be gone with ctx; the checkpointer is told on a
		// fresh context either way.
		rctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		return errors.Join(err, reloadCheckpointer(rctx, conn, src))
	}
	if err := reloadCheckpointer(ctx, conn, src); err != nil {
		return nil, false, errors.Join(err, restore())
	}
	return restore, true, nil
}

// reloadCheckpointer makes src's checkpointer read its configuration again:
// a SIGHUP to it alone, or pg_reload_conf() (every process) when it cannot
// be signalled (the agent runs as another OS user than the server).
func reloadCheckpointer(ctx context.Context, conn *pgx.Conn, src *pgcluster.Cluster) error {
	var pid int
	err := conn.QueryRow(ctx, "SELECT pid FROM pg_stat_activity WHERE backend_type = 'checkpointer'").Scan(&pid)
	if err == nil && pid > 0 && syscall.Kill(pid, syscall.SIGHUP) == nil {
		return nil
	}
	if _, err := conn.Exec(ctx, "SELECT pg_reload_conf()"); err != nil {
		return fmt.Errorf("snapshot: send: reload the checkpointer's settings: %w", err)
	}
	return nil
}

// clearTransient removes a pgcluster.TransientConf left behind (a process
// that paced a checkpoint died before it took the settings back) and tells
// the checkpointer, so that an unpaced snapshot does not run under them.
func clearTransient(ctx context.Context, conn *pgx.Conn, src *pgcluster.Cluster) error {
	if _, err := os.Stat(filepath.Join(src.Dir, pgcluster.TransientConf)); err != nil {
		return nil
	}
	if err := src.SetTransient(nil); err != nil {
		return fmt.Errorf("snapshot: send: %w", err)
	}
	return reloadCheckpointer(ctx, conn, src)
}
