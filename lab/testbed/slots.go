package testbed

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	agentclient "github.com/sluicedb/sluice/agent/client"
)

// Slot is a replication slot found on a tenant postmaster.
type Slot struct {
	Server string `json:"server"` // the server's name
	Tenant string `json:"tenant"`
	Name   string `json:"slot_name"`
	Type   string `json:"slot_type"` // physical or logical
	Active bool   `json:"active"`
	// HeldBytes is the WAL the slot keeps from being recycled: the
	// server's current WAL position (on a standby, the last received) minus
	// the slot's restart_lsn, bytes; 0 when it has none yet.
	HeldBytes int64 `json:"wal_held_bytes"`
}

// WALDir is one tenant postmaster's pg_wal, for a report beside its slots.
type WALDir struct {
	Server string `json:"server"`
	Tenant string `json:"tenant"`
	Bytes  int64  `json:"bytes"` // sum of pg_ls_waldir()'s sizes
}

// tenantDSN is the connection string of tenant t's postmaster itself (not
// through the proxy), database db, as the postgres user over its Unix
// socket (peer authentication: the only way in as the superuser).
func tenantDSN(t agentclient.Tenant, db string) string {
	return fmt.Sprintf("host=%s port=%d user=postgres dbname=%s sslmode=disable", t.Dir, t.Port, db)
}

// Slots lists the replication slots on every running tenant postmaster of
// every server, and each postmaster's pg_wal size. A postmaster that does
// not answer is an error: its slots are unknown, not absent.
func (b *Bed) Slots(ctx context.Context) ([]Slot, []WALDir, error) {
	var slots []Slot
	var dirs []WALDir
	for _, s := range b.Servers {
		ts, err := s.Client.Tenants(ctx, false)
		if err != nil {
			return nil, nil, fmt.Errorf("testbed: tenants of %s: %w", s.Name, err)
		}
		for _, t := range ts {
			if !t.Alive {
				continue
			}
			ss, d, err := tenantSlots(ctx, t)
			if err != nil {
				return nil, nil, fmt.Errorf("testbed: slots of tenant %s on %s: %w", t.Name, s.Name, err)
			}
			for i := range ss {
				ss[i].Server = s.Name
			}
			slots = append(slots, ss...)
			dirs = append(dirs, WALDir{Server: s.Name, Tenant: t.Name, Bytes: d})
		}
	}
	return slots, dirs, nil
}

// tenantSlots reads t's replication slots (Server left empty) and the size
// of its pg_wal, bytes.
func tenantSlots(ctx context.Context, t agentclient.Tenant) ([]Slot, int64, error) {
	c, err := pgx.Connect(ctx, tenantDSN(t, "postgres"))
	if err != nil {
		return nil, 0, err
	}
	defer c.Close(context.Background())
	rows, err := c.Query(ctx, `SELECT slot_name, slot_type, active,
	  coalesce(pg_wal_lsn_diff(CASE WHEN pg_is_in_recovery() THEN pg_last_wal_receive_lsn() ELSE pg_current_wal_lsn() END, restart_lsn), 0)::bigint
	  FROM pg_replication_slots ORDER BY slot_name`)
	if err != nil {
		return nil, 0, err
	}
	var out []Slot
	for rows.Next() {
		sl := Slot{Tenant: t.Name}
		if err := rows.Scan(&sl.Name, &sl.Type, &sl.Active, &sl.HeldBytes); err != nil {
			rows.Close()
			return nil, 0, err
		}
		out = append(out, sl)
	}
	if err := rows.Err(); err != nil {
		return nil, 0, err
	}
	var dir int64
	if err := c.QueryRow(ctx, "SELECT coalesce(sum(size), 0)::bigint FROM pg_ls_waldir()").Scan(&dir); err != nil {
		return nil, 0, err
	}
	return out, dir, nil
}
