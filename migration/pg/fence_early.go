package pg

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
)

// FenceEarly does, ahead of the handover, the part of the read-only fence
// that needs a configuration reload, which on a small server is most of the
// fence's time (every process of the server re-reads its configuration).
// admit names the router's own backends (pids; migration.Router.Backends): pg_hba.conf
// keeps its local and replication lines and, for TCP, admits only the
// addresses those backends connect from, each under the lines that applied
// to it (admitHBA); then it reloads and waits until this session has
// re-read. Nothing else changes: every session keeps working, and the
// router's new sessions still connect. Fence then only terminates the
// backends the router does not hold idle and flushes the WAL: the router
// holds its own sessions, and no one else can connect over TCP.
//
// It fails, changing nothing, when none of admit is a backend of the source
// (a router with no session there: its address is unknown). A router
// instance that had no session on the source at WARM is refused from then
// until a rollback.
//
// What it gives up against Fence alone: from the flush until the reload
// that Fence starts right after it (fenceLate) takes effect, ~20–30 ms on a
// quarter core, a client that bypasses the router could still connect from
// the router's own address, or over the Unix socket without the read-only
// default. An error leaves Fence to do everything (pg_hba.conf may already
// be narrowed; Fence and Unfence work from the saved original).
func (s *LocalSource) FenceEarly(ctx context.Context, admit []int) error {
	start := time.Now()
	err := s.fenceEarly(ctx, admit)
	if s.Log != nil {
		if errors.Is(err, errNoRouterBackend) {
			// A tenant without clients: nothing is lost, the fence does it all.
			s.Log.Info("no early fence: the handover's fence will reload", "why", err)
		} else if err != nil {
			s.Log.Warn("early fence failed; the handover's fence will reload", "err", err)
		} else {
			s.Log.Info("source fenced early (pg_hba.conf admits only the router's addresses)", "took", time.Since(start).Round(100*time.Microsecond))
		}
	}
	return err
}

// errNoRouterBackend is FenceEarly's answer for a source where the router
// has no session (a tenant without clients): the usual case, not a fault.
var errNoRouterBackend = errors.New("none of the router's backends is on the source")

func (s *LocalSource) fenceEarly(ctx context.Context, admit []int) error {
	if admit == nil {
		admit = []int{}
	}
	err := s.withConn(ctx, func(c *pgx.Conn) error {
		var addrs []netip.Addr
		// One row per admitted backend that still exists; its address, or
		// NULL for the Unix socket (whose lines stay anyway).
		rows, err := c.Query(ctx, "SELECT host(client_addr) FROM pg_stat_activity WHERE pid = ANY($1::int[])", admit)
		if err != nil {
			return err
		}
		found := 0
		for rows.Next() {
			var h *string
			if err := rows.Scan(&h); err != nil {
				rows.Close()
				return err
			}
			found++
			if h == nil {
				continue
			}
			a, err := netip.ParseAddr(*h)
			if err != nil {
				rows.Close()
				return fmt.Errorf("client address %q: %w", *h, err)
			}
			if a = a.Unmap(); !slices.Contains(addrs, a) {
				addrs = append(addrs, a)
			}
		}
		if err := rows.Err(); err != nil {
			return err
		}
		if found == 0 {
			// Nothing tells where the router connects from: narrowing now
			// would refuse its next session.
			return errNoRouterBackend
		}
		orig, err := s.originalHBA()
		if err != nil {
			return err
		}
		narrowed, err := admitHBA(orig, addrs)
		if err != nil {
			return err
		}
		if err := s.C.WriteFile("pg_hba.conf", narrowed); err != nil {
			return err
		}
		var before time.Time
		if err := c.QueryRow(ctx, "SELECT pg_conf_load_time()").Scan(&before); err != nil {
			return err
		}
		if _, err := c.Exec(ctx, "SELECT pg_reload_conf()"); err != nil {
			return err
		}
		for i := 0; ; i++ {
			var at time.Time
			if err := c.QueryRow(ctx, "SELECT pg_conf_load_time()").Scan(&at); err != nil {
				return err
			}
			if at.After(before) {
				break
			}
			if i > 5000 {
				return errors.New("configuration reload not seen after 5 s")
			}
			time.Sleep(time.Millisecond)
		}
		return nil
	})
	if err != nil {
		return err
	}
	s.mu.Lock() // (withConn holds it while its function runs)
	s.early = true
	s.mu.Unlock()
	return nil
}

// fenceLate completes a fence that followed FenceEarly: pg_hba.conf keeps
// only the local and replication lines, ALTER SYSTEM SET
// default_transaction_read_only = on, reload, and once the reload is seen
// it terminates any client backend (but the spared ones) that connected
// meanwhile. It runs while the target replays and promotes (the source's
// part of the freeze is over); the reload takes effect ~20–30 ms later on
// a quarter core. Until then a client that bypasses the router could still
// connect from the router's own address, or over the Unix socket without
// the read-only default; such late arrivals are logged as a warning (what
// they wrote after the fence's flush is not on the target).
func (s *LocalSource) fenceLate(ctx context.Context, spare []int) {
	start := time.Now()
	var late []string
	err := func() error {
		orig, err := s.originalHBA()
		if err != nil {
			return err
		}
		if err := s.C.WriteFile("pg_hba.conf", fencedHBA(orig)); err != nil {
			return err
		}
		return s.withConn(ctx, func(c *pgx.Conn) error {
			if err := readOnlyReload(ctx, c, nil); err != nil {
				return err
			}
			late, err = terminateClients(ctx, c, spare)
			return err
		})
	}()
	if s.Log == nil {
		return
	}
	switch {
	case err != nil:
		s.Log.Warn("completing the fence after the early fence failed", "err", err)
	case len(late) > 0:
		s.Log.Warn("clients connected to the source between the fence's flush and its completion; terminated (their writes after the flush are not on the target)", "terminated", late)
	default:
		s.Log.Info("fence completed after the freeze's part (pg_hba.conf local and replication only, read-only default)", "took", time.Since(start).Round(100*time.Microsecond))
	}
}

// waitLate waits for a fenceLate in progress.
func (s *LocalSource) waitLate() {
	s.mu.Lock()
	late := s.late
	s.mu.Unlock()
	if late != nil {
		<-late
	}
}
