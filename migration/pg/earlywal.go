package pg

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"syscall"
	"time"

	"github.com/sluicedb/sluice/migration"
	"github.com/sluicedb/sluice/pgcluster"
)

// Early WAL. A standby can start only once the snapshot is complete, and
// until then the source keeps, in the migration's slot, all the WAL its
// clients write: a slow copy leaves a lag of the same order as the tenant,
// which CATCH-UP must then read back and ship in one go, at a rate the
// clients feel (docs/results.md). StreamWAL receives that WAL
// while the copy runs instead, as it is written (pg_receivewal on the
// slot, through the caller's paced relay), into a directory next to the
// tenant's; StartStandby moves it into the new data directory, so the
// standby replays it from its own disk and streams only what came after.

// walSegment matches a WAL segment file name, complete or partial.
var walSegment = regexp.MustCompile(`^[0-9A-F]{24}(\.partial)?$`)

// earlyWAL is a running pg_receivewal of one migration.
type earlyWAL struct {
	cmd    *exec.Cmd
	cancel context.CancelFunc
	done   chan struct{} // closed when it exited
}

// WALDir is where StreamWAL puts migration m's WAL until StartStandby
// adopts it: a sibling of m.TargetDir.
func WALDir(m migration.Record) string { return m.TargetDir + ".wal" }

// StreamWAL starts receiving the source's WAL from slot, at the server
// primaryConnInfo names (the caller's relay paces it), into WALDir(m),
// starting where the slot's WAL starts. A receiver already running for m is
// left alone. It runs until StartStandby or Abort stops it, or its stream
// breaks (then the standby streams all the rest from the slot, as without
// it).
func (t *LocalTarget) StreamWAL(m migration.Record, primaryConnInfo, slot string) error {
	if m.TargetDir == "" || m.TargetPort == 0 || slot == "" {
		return fmt.Errorf("migration: stream WAL: migration %s has no reserved directory or slot", m.ID)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if w := t.wal[m.ID]; w != nil {
		select {
		case <-w.done:
		default:
			return nil
		}
	}
	dir := WALDir(m)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("migration: stream WAL: %w", err)
	}
	if err := t.chown(dir); err != nil {
		return fmt.Errorf("migration: stream WAL: %w", err)
	}
	o := t.Options
	o.Port = m.TargetPort
	c, err := pgcluster.Open(m.TargetDir, o)
	if err != nil {
		return fmt.Errorf("migration: stream WAL: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	// --no-loop: a broken stream ends it; the slot keeps the rest.
	cmd, err := c.Command(ctx, "pg_receivewal", "-D", dir, "-d", primaryConnInfo, "-S", slot, "--no-loop", "-s", "1")
	if err != nil {
		cancel()
		return fmt.Errorf("migration: stream WAL: %w", err)
	}
	log, err := os.OpenFile(filepath.Join(dir, "pg_receivewal.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		cancel()
		return fmt.Errorf("migration: stream WAL: %w", err)
	}
	defer log.Close()
	cmd.Stdout, cmd.Stderr = log, log
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Pdeathsig = syscall.SIGTERM                           // dies with the agent
	cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) } // it flushes and exits
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Start(); err != nil {
		cancel()
		return fmt.Errorf("migration: stream WAL: %w", err)
	}
	w := &earlyWAL{cmd: cmd, cancel: cancel, done: make(chan struct{})}
	go func() { cmd.Wait(); close(w.done) }()
	if t.wal == nil {
		t.wal = map[string]*earlyWAL{}
	}
	t.wal[m.ID] = w
	return nil
}

// stopWAL stops migration m's receiver, if one runs, and waits for it.
func (t *LocalTarget) stopWAL(m migration.Record) {
	t.mu.Lock()
	w := t.wal[m.ID]
	delete(t.wal, m.ID)
	t.mu.Unlock()
	if w != nil {
		w.cancel()
		<-w.done
	}
}

// StopWAL stops every receiver (the agent's Close); what they received
// stays for StartStandby.
func (t *LocalTarget) StopWAL() {
	t.mu.Lock()
	ws := t.wal
	t.wal = nil
	t.mu.Unlock()
	for _, w := range ws {
		w.cancel()
		<-w.done
	}
}

// adoptWAL stops m's receiver and moves the segments it received into
// m.TargetDir's pg_wal (a partial last segment under its full name: the
// standby replays up to where it ends and then streams from there), then
// removes WALDir(m). It returns the segments moved and their bytes (a
// partial segment counts whole).
func (t *LocalTarget) adoptWAL(m migration.Record) (segments int, bytes int64, err error) {
	t.stopWAL(m)
	dir := WALDir(m)
	es, err := os.ReadDir(dir)
	if os.IsNotExist(err) {
		return 0, 0, nil
	}
	if err != nil {
		return 0, 0, fmt.Errorf("migration: adopt WAL: %w", err)
	}
	pgwal := filepath.Join(m.TargetDir, "pg_wal")
	if err := os.MkdirAll(pgwal, 0o700); err != nil {
		return 0, 0, fmt.Errorf("migration: adopt WAL: %w", err)
	}
	t.chown(pgwal)
	for _, e := range es {
		if !walSegment.MatchString(e.Name()) {
			continue
		}
		name := e.Name()[:24]
		dst := filepath.Join(pgwal, name)
		if _, err := os.Stat(dst); err == nil {
			continue // the snapshot brought it (or an earlier adoption)
		}
		src := filepath.Join(dir, e.Name())
		fi, err := e.Info()
		if err != nil {
			return segments, bytes, fmt.Errorf("migration: adopt WAL: %w", err)
		}
		if err := os.Rename(src, dst); err != nil {
			return segments, bytes, fmt.Errorf("migration: adopt WAL: %w", err)
		}
		t.chown(dst)
		segments++
		bytes += fi.Size()
	}
	if err := os.RemoveAll(dir); err != nil {
		return segments, bytes, fmt.Errorf("migration: adopt WAL: %w", err)
	}
	return segments, bytes, nil
}

// discardWAL stops m's receiver and removes what it received (Abort).
func (t *LocalTarget) discardWAL(m migration.Record) error {
	t.stopWAL(m)
	if m.TargetDir == "" {
		return nil
	}
	return os.RemoveAll(WALDir(m))
}
