package pg

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/sluicedb/sluice/migration"
	"github.com/sluicedb/sluice/pgcluster"
)

// StandbyRetryInterval is wal_retrieve_retry_interval on a target standby
// (20 ms instead of 5 s): how long its startup process sleeps after losing the
// source before it checks for a promotion again.
const StandbyRetryInterval = "20ms"

// confSettings reads the settings of a copied sluice.conf, unquoted, without
// those that name the old server (port, addresses, socket directory, TLS
// files) or its upstream.
func confSettings(dir string) (map[string]string, error) {
	b, err := os.ReadFile(filepath.Join(dir, "sluice.conf"))
	if errors.Is(err, os.ErrNotExist) {
		return map[string]string{}, nil
	}
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			continue
		}
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		switch k {
		case "port", "listen_addresses", "unix_socket_directories", "primary_conninfo", "primary_slot_name":
			continue
		}
		if slices.Contains(pgcluster.TLSSettings, k) {
			continue // the old host's files; the target's cluster options bring its own
		}
		if len(v) >= 2 && v[0] == '\'' && v[len(v)-1] == '\'' {
			v = strings.ReplaceAll(v[1:len(v)-1], "''", "'")
		}
		out[k] = v
	}
	return out, nil
}

// StartStandby configures the received directory and starts it: as a
// streaming standby of primaryConnInfo on slot, or (primaryConnInfo == "")
// as a primary. A running server is left alone, except that a running
// standby whose primary_conninfo differs (the source's WAL relay moved when
// its agent restarted) gets the new one (ALTER SYSTEM and a reload: the
// walreceiver reconnects).
func (t *LocalTarget) StartStandby(ctx context.Context, m migration.Record, primaryConnInfo, slot string) error {
	c, err := t.cluster(m)
	if err != nil {
		return err
	}
	if c.Running() {
		if err := t.discardWAL(m); err != nil { // started before: it streams from the slot
			return fmt.Errorf("migration: start standby: %w", err)
		}
		if primaryConnInfo == "" {
			return nil
		}
		err := t.withConn(ctx, m, func(conn *pgx.Conn) error {
			var cur string
			var standby bool
			if err := conn.QueryRow(ctx, "SELECT current_setting('primary_conninfo'), pg_is_in_recovery()").Scan(&cur, &standby); err != nil {
				return fmt.Errorf("migration: start standby: %w", err)
			}
			if !standby || cur == primaryConnInfo {
				return nil
			}
			lit := "'" + strings.ReplaceAll(primaryConnInfo, "'", "''") + "'"
			if _, err := conn.Exec(ctx, "ALTER SYSTEM SET primary_conninfo = "+lit); err != nil {
				return fmt.Errorf("migration: start standby: new primary_conninfo: %w", err)
			}
			if _, err := conn.Exec(ctx, "SELECT pg_reload_conf()"); err != nil {
				return fmt.Errorf("migration: start standby: reload: %w", err)
			}
			return nil
		})
		if err == nil || !notYetConsistent(err) {
			return err
		}
		// Up but not yet consistent (a resumed migration): it refuses
		// connections, so it cannot be told its new primary over SQL, and
		// without one it never gets consistent. Restart it configured anew.
		if err := c.Stop(ctx, pgcluster.Fast); err != nil {
			return fmt.Errorf("migration: start standby: restart: %w", err)
		}
	}
	if segs, n, err := t.adoptWAL(m); err != nil {
		return fmt.Errorf("migration: start standby: %w", err)
	} else if segs > 0 && t.OnAdoptWAL != nil {
		t.OnAdoptWAL(m, segs, n)
	}
	// An earlier resume may have set primary_conninfo with ALTER SYSTEM,
	// which would override the one written below.
	if err := dropAutoConf(c, "primary_conninfo"); err != nil {
		return fmt.Errorf("migration: start standby: %w", err)
	}
	settings, err := confSettings(m.TargetDir)
	if err != nil {
		return fmt.Errorf("migration: start standby: %w", err)
	}
	for k, v := range t.Settings {
		settings[k] = v
	}
	os.Remove(filepath.Join(m.TargetDir, "standby.signal"))
	if primaryConnInfo != "" {
		// After a stop fence the walreceiver has lost its primary; the startup
		// process then sleeps wal_retrieve_retry_interval (default 5 s) between
		// attempts, and a promotion waits for that sleep. Keep it short.
		if _, ok := settings["wal_retrieve_retry_interval"]; !ok {
			settings["wal_retrieve_retry_interval"] = StandbyRetryInterval
		}
		settings["primary_conninfo"] = primaryConnInfo
		settings["primary_slot_name"] = slot
		if err := c.WriteFile("standby.signal", ""); err != nil {
			return fmt.Errorf("migration: start standby: %w", err)
		}
	}
	if err := c.Configure(settings); err != nil {
		return fmt.Errorf("migration: start standby: %w", err)
	}
	for _, d := range []string{"log", "pg_wal", "pg_replslot"} {
		p := filepath.Join(m.TargetDir, d)
		os.MkdirAll(p, 0o700)
		t.chown(p)
	}
	start := c.Start
	if primaryConnInfo != "" {
		// A streaming standby: up is enough. It accepts connections once
		// consistent (the WAL of the snapshot's span replayed); until then
		// Position reports the lag as unknown.
		start = c.StartRecovering
	}
	if err := start(ctx); err != nil {
		return fmt.Errorf("migration: start standby: %w", err)
	}
	return nil
}

// dropAutoConf removes setting key from c's postgresql.auto.conf (ALTER
// SYSTEM's file), if there.
func dropAutoConf(c *pgcluster.Cluster, key string) error {
	b, err := os.ReadFile(filepath.Join(c.Dir, "postgresql.auto.conf"))
	if err != nil {
		return nil
	}
	var out []string
	changed := false
	for _, line := range strings.Split(string(b), "\n") {
		if name, _, ok := strings.Cut(strings.TrimSpace(line), "="); ok && strings.TrimSpace(name) == key {
			changed = true
			continue
		}
		out = append(out, line)
	}
	if !changed {
		return nil
	}
	return c.WriteFile("postgresql.auto.conf", strings.Join(out, "\n"))
}
