package pg

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/sluicedb/sluice/migration"
)

// CreateSlot drops a slot of that name if any, then creates it reserving WAL now.
func (s *LocalSource) CreateSlot(ctx context.Context, name string) (migration.LSN, error) {
	var lsn string
	err := s.withConn(ctx, func(c *pgx.Conn) error {
		if _, err := c.Exec(ctx, "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1 AND NOT active", name); err != nil {
			return err
		}
		return c.QueryRow(ctx, "SELECT lsn::text FROM pg_create_physical_replication_slot($1, true)", name).Scan(&lsn)
	})
	if err != nil {
		return 0, fmt.Errorf("migration: create slot %s: %w", name, err)
	}
	return migration.ParseLSN(lsn)
}

// SlotStatus returns the slot's wal_status ("reserved", "extended",
// "unreserved" or "lost"; "" when there is no such slot). A slot is lost when
// the source removed WAL the slot still needed because it exceeded
// max_slot_wal_keep_size: the standby can never catch up from it.
func (s *LocalSource) SlotStatus(ctx context.Context, name string) (string, error) {
	st, err := s.slotColumn(ctx, name, "wal_status")
	if err != nil {
		return "", fmt.Errorf("migration: slot status %s: %w", name, err)
	}
	return st, nil
}

// SlotRestartLSN returns the slot's restart_lsn: for the standby's physical
// slot, the WAL position up to which the standby has confirmed receiving
// (flushing) — known while it streams, before it reaches a consistent state
// and accepts the queries Position needs. 0 when the slot or its position is
// missing.
func (s *LocalSource) SlotRestartLSN(ctx context.Context, name string) (migration.LSN, error) {
	l, err := s.slotColumn(ctx, name, "restart_lsn")
	if err != nil {
		return 0, fmt.Errorf("migration: slot restart lsn %s: %w", name, err)
	}
	if l == "" {
		return 0, nil
	}
	return migration.ParseLSN(l)
}

// slotColumn reads column col of slot name in pg_replication_slots as text;
// "" when the slot or the value is missing. col is one of this file's
// constants, never input.
func (s *LocalSource) slotColumn(ctx context.Context, name, col string) (string, error) {
	var v string
	err := s.withConn(ctx, func(c *pgx.Conn) error {
		err := c.QueryRow(ctx, "SELECT coalesce("+col+"::text, '') FROM pg_replication_slots WHERE slot_name = $1", name).Scan(&v)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		return err
	})
	return v, err
}

// DropSlot drops the slot if it exists; a stopped source has nothing to drop
// from (its directory goes with Retire).
func (s *LocalSource) DropSlot(ctx context.Context, name string) error {
	if !s.C.Running() {
		return nil
	}
	err := s.withConn(ctx, func(c *pgx.Conn) error {
		// A walsender may still hold the slot for a moment after its standby
		// stopped: end it first.
		if _, err := c.Exec(ctx, "SELECT pg_terminate_backend(active_pid, 2000) FROM pg_replication_slots WHERE slot_name = $1 AND active_pid IS NOT NULL", name); err != nil {
			return err
		}
		_, err := c.Exec(ctx, "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1", name)
		return err
	})
	if err != nil {
		return fmt.Errorf("migration: drop slot %s: %w", name, err)
	}
	return nil
}

// FlushLSN returns pg_current_wal_flush_lsn().
func (s *LocalSource) FlushLSN(ctx context.Context) (migration.LSN, error) {
	var l string
	err := s.withConn(ctx, func(c *pgx.Conn) error {
		return c.QueryRow(ctx, "SELECT pg_current_wal_flush_lsn()::text").Scan(&l)
	})
	if err != nil {
		return 0, fmt.Errorf("migration: flush lsn: %w", err)
	}
	return migration.ParseLSN(l)
}
