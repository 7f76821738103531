package pg

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/sluicedb/sluice/migration"
)

// fenceStop is Fence's FenceStop: a fast shutdown, waited for tightly, and
// the shutdown checkpoint's LSN + 1 read from pg_control.
func (s *LocalSource) fenceStop(ctx context.Context) (migration.LSN, error) {
	s.Close()
	pidFile := filepath.Join(s.C.Dir, "postmaster.pid")
	pid, err := s.C.PID()
	if err == nil && syscall.Kill(pid, 0) == nil {
		if err := syscall.Kill(pid, syscall.SIGINT); err != nil {
			return 0, fmt.Errorf("migration: fence stop: %w", err)
		}
		// The postmaster removes postmaster.pid as it exits. (Polling the pid
		// instead would also wait for whoever reaps the zombie.)
		for {
			if _, err := os.Stat(pidFile); errors.Is(err, os.ErrNotExist) {
				break
			}
			if syscall.Kill(pid, 0) != nil {
				break
			}
			select {
			case <-ctx.Done():
				return 0, fmt.Errorf("migration: fence stop: %w", ctx.Err())
			case <-time.After(time.Millisecond):
			}
		}
	}
	ckpt, state, err := readControl(s.C.Dir)
	if err != nil {
		return 0, fmt.Errorf("migration: fence stop: %w", err)
	}
	if state != dbShutdowned {
		return 0, fmt.Errorf("migration: fence stop: source not cleanly shut down (pg_control state %d)", state)
	}
	return ckpt + 1, nil
}

// pg_control's DBState for a clean shutdown (DB_SHUTDOWNED).
const dbShutdowned = 1

// readControl reads the latest checkpoint location and the cluster state from
// global/pg_control (PostgreSQL 15 layout: system_identifier u64,
// pg_control_version u32, catalog_version_no u32, state i32, pad, time i64,
// checkPoint u64 — little-endian on this host).
func readControl(dir string) (migration.LSN, int, error) {
	b, err := os.ReadFile(filepath.Join(dir, "global", "pg_control"))
	if err != nil {
		return 0, 0, err
	}
	if len(b) < 40 {
		return 0, 0, errors.New("pg_control too short")
	}
	if v := binary.LittleEndian.Uint32(b[8:]); v != 1300 {
		return 0, 0, fmt.Errorf("pg_control version %d, want 1300 (PostgreSQL 15)", v)
	}
	return migration.LSN(binary.LittleEndian.Uint64(b[32:])), int(int32(binary.LittleEndian.Uint32(b[16:]))), nil
}
