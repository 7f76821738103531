package pg

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/sluicedb/sluice/migration"
)

// Fence makes the source refuse writes.
//
// FenceReadOnly: pg_hba.conf keeps only local (Unix socket) and replication
// lines (the original is saved as pg_hba.conf.sluice-unfenced), ALTER SYSTEM
// SET default_transaction_read_only = on, reload; once this session sees the
// new setting the postmaster has reloaded too, so no client can connect over
// TCP any more; then every other client backend is terminated (waiting for
// each to exit); then a tiny synchronous commit of the fencing session flushes
// the WAL, so every acknowledged commit (even one acknowledged before its
// flush, with synchronous_commit = off) is at or below the flush LSN, which is
// returned.
//
// FenceStop: fast shutdown (SIGINT to the postmaster, as pg_ctl stop -m fast)
// and a tight wait for it to exit; the shutdown checkpoint is streamed to the
// standby before the walsender exits. Returns the shutdown checkpoint's LSN
// + 1: a standby that replayed past it has every record.
//
// After FenceEarly (pg_hba.conf already narrowed to the router's addresses)
// the read-only fence skips pg_hba.conf, ALTER SYSTEM and the reload: it
// terminates and flushes, returns, and then brings the source to the same
// end state in the background (fenceLate; Unfence, Retire and Close wait
// for it).
//
// spare (read-only fence only) names client backends a router holds idle
// (migration.Router.Hold): they are neither terminated nor waited for. The router sends
// them nothing before Release and moves their sessions away after a Switch;
// if the migration rolls back they carry on where they were. On a small
// server terminating them would be most of the freeze: each backend's exit
// costs milliseconds of CPU (docs/results.md).
func (s *LocalSource) Fence(ctx context.Context, mode migration.FenceMode, spare []int) (migration.LSN, error) {
	switch mode {
	case migration.FenceStop:
		return s.fenceStop(ctx)
	case migration.FenceReadOnly:
		return s.fenceReadOnly(ctx, spare)
	}
	return 0, fmt.Errorf("migration: fence: unknown mode %q", mode)
}

func (s *LocalSource) fenceReadOnly(ctx context.Context, spare []int) (migration.LSN, error) {
	s.mu.Lock()
	early := s.early
	s.mu.Unlock()
	var steps []any // step name, time it took: for Log
	last := time.Now()
	mark := func(step string) {
		now := time.Now()
		steps = append(steps, step, now.Sub(last).Round(100*time.Microsecond))
		last = now
	}
	if spare == nil {
		spare = []int{} // "pid <> ALL(NULL)" would match nothing
	}
	if !early {
		orig, err := s.originalHBA()
		if err != nil {
			return 0, fmt.Errorf("migration: fence: %w", err)
		}
		if err := s.C.WriteFile("pg_hba.conf", fencedHBA(orig)); err != nil {
			return 0, fmt.Errorf("migration: fence: %w", err)
		}
		mark("hba")
	}
	var lsn string
	err := s.withConn(ctx, func(c *pgx.Conn) error {
		mark("connect")
		if !early {
			if err := readOnlyReload(ctx, c, mark); err != nil {
				return err
			}
			mark("reload")
		}
		// Signal every client backend at once, then poll until they are gone
		// (pg_terminate_backend's own wait polls only every 100 ms).
		victims, err := terminateClients(ctx, c, spare)
		if err != nil {
			return err
		}
		for i := 0; ; i++ {
			var n int
			if err := c.QueryRow(ctx, countOthers, spare).Scan(&n); err != nil {
				return err
			}
			if n == 0 {
				break
			}
			if i > 5000 {
				return fmt.Errorf("%d client backends survive termination after 5 s", n)
			}
			if i%100 == 99 { // late arrivals (connected just before the reload)
				if _, err := c.Exec(ctx, terminateOthers, spare); err != nil {
					return err
				}
			}
			time.Sleep(time.Millisecond)
		}
		mark("terminate")
		steps = append(steps, "terminated", victims)
		// Flush WAL up to here: a tiny synchronous commit of our own flushes
		// every earlier commit record too, including those of clients that
		// were acknowledged before their flush (synchronous_commit = off).
		// The transaction must write WAL (a transactional logical message),
		// or PostgreSQL commits it without a flush.
		if _, err := c.Exec(ctx, "BEGIN READ WRITE; SET LOCAL synchronous_commit = on; SELECT pg_logical_emit_message(true, 'sluice', 'fence'); COMMIT"); err != nil {
			return err
		}
		err = c.QueryRow(ctx, "SELECT pg_current_wal_flush_lsn()::text").Scan(&lsn)
		mark("flush")
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("migration: fence read-only: %w", err)
	}
	if s.Log != nil {
		msg := "source fenced (read-only); time per step"
		if early {
			msg = "source fenced (read-only, pg_hba.conf narrowed before the hold); time per step"
		}
		s.Log.Info(msg, steps...)
	}
	if early {
		// Out of the freeze, bring the source to the full fence's state:
		// no TCP at all but replication, new sessions read-only.
		done := make(chan struct{})
		s.mu.Lock()
		s.late = done
		s.mu.Unlock()
		go func() {
			defer close(done)
			s.fenceLate(context.Background(), spare)
		}()
	}
	return migration.ParseLSN(lsn)
}

// unfencedHBA is where a fence saves the source's own pg_hba.conf, in its
// data directory, for Unfence to restore.
const unfencedHBA = "pg_hba.conf.sluice-unfenced"

// originalHBA returns the source's own pg_hba.conf: the copy a fence saved
// (pg_hba.conf.sluice-unfenced, which Unfence restores), saving it first if
// no fence has yet.
func (s *LocalSource) originalHBA() (string, error) {
	saved := filepath.Join(s.C.Dir, unfencedHBA)
	if _, err := os.Stat(saved); errors.Is(err, os.ErrNotExist) {
		orig, err := os.ReadFile(filepath.Join(s.C.Dir, "pg_hba.conf"))
		if err != nil {
			return "", err
		}
		if err := s.C.WriteFile(unfencedHBA, string(orig)); err != nil {
			return "", err
		}
	}
	orig, err := os.ReadFile(saved)
	return string(orig), err
}

// readOnlyReload sets default_transaction_read_only = on with ALTER SYSTEM
// (telling mark "alter_system", if mark is not nil), reloads the
// configuration, and returns once session c sees the new setting; the
// postmaster, which reloads first, has then reloaded pg_hba.conf too.
func readOnlyReload(ctx context.Context, c *pgx.Conn, mark func(string)) error {
	if _, err := c.Exec(ctx, "ALTER SYSTEM SET default_transaction_read_only = on"); err != nil {
		return err
	}
	if mark != nil {
		mark("alter_system")
	}
	if _, err := c.Exec(ctx, "SELECT pg_reload_conf()"); err != nil {
		return err
	}
	for i := 0; ; i++ {
		var ro string
		if err := c.QueryRow(ctx, "SHOW default_transaction_read_only").Scan(&ro); err != nil {
			return err
		}
		if ro == "on" {
			return nil
		}
		if i > 5000 {
			return errors.New("configuration reload not seen after 5 s")
		}
		time.Sleep(time.Millisecond)
	}
}

// terminateClients signals every client backend but c's own and spare's to
// terminate, without waiting, and names them (application(address)).
func terminateClients(ctx context.Context, c *pgx.Conn, spare []int) ([]string, error) {
	rows, err := c.Query(ctx, terminateOthers, spare)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

// The read-only fence's queries on the other client backends: all but the
// fencing session's own and the spared ones ($1, int[]).
const (
	otherClients    = "FROM pg_stat_activity WHERE backend_type = 'client backend' AND pid <> pg_backend_pid() AND pid <> ALL($1::int[])"
	terminateOthers = "SELECT format('%s(%s)', coalesce(nullif(application_name, ''), '-'), coalesce(host(client_addr), 'local')) FROM (SELECT pid, application_name, client_addr, pg_terminate_backend(pid) " + otherClients + ") t"
	countOthers     = "SELECT count(*) " + otherClients
)

// Unfence restarts a stopped source, or lifts a read-only fence: restores
// pg_hba.conf, resets default_transaction_read_only, reloads.
func (s *LocalSource) Unfence(ctx context.Context) error {
	s.waitLate()
	s.mu.Lock()
	s.early, s.late = false, nil
	s.mu.Unlock()
	saved := filepath.Join(s.C.Dir, unfencedHBA)
	orig, rerr := os.ReadFile(saved)
	if rerr == nil {
		if err := s.C.WriteFile("pg_hba.conf", string(orig)); err != nil {
			return fmt.Errorf("migration: unfence: %w", err)
		}
	}
	if !s.C.Running() {
		// A stopped source's read-only fence: ALTER SYSTEM RESET needs a
		// running server, so edit postgresql.auto.conf.
		if err := dropAutoConf(s.C, "default_transaction_read_only"); err != nil {
			return fmt.Errorf("migration: unfence: %w", err)
		}
		if err := s.C.Start(ctx); err != nil {
			return fmt.Errorf("migration: unfence: %w", err)
		}
	} else {
		err := s.withConn(ctx, func(c *pgx.Conn) error {
			if _, err := c.Exec(ctx, "ALTER SYSTEM RESET default_transaction_read_only"); err != nil {
				return err
			}
			_, err := c.Exec(ctx, "SELECT pg_reload_conf()")
			return err
		})
		if err != nil {
			return fmt.Errorf("migration: unfence: %w", err)
		}
	}
	if rerr == nil {
		os.Remove(saved)
	}
	return nil
}
