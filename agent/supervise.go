package agent

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/sluicedb/sluice/catalog"
	"github.com/sluicedb/sluice/pgcluster"
)

// superviseEvery is how often a running agent looks for crashed tenant
// postmasters (2 s): a crash costs the tenant at most that plus PostgreSQL's
// crash recovery.
const superviseEvery = 2 * time.Second

// supervise restarts, while the agent runs, every tenant postmaster that
// crashed: one whose postmaster.pid outlived its process (kill -9, the OOM
// killer). A postmaster stopped on purpose — tenant stop, a fence by stop,
// an abort, a retired source — removes that file and is left alone. Tenants
// that serve (running, migrating-out) and incoming standbys (migrating-in)
// are watched; crash recovery brings a standby back streaming from its slot.
func (a *Agent) supervise(ctx context.Context) {
	t := time.NewTicker(superviseEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		ts, err := a.cat.Tenants()
		if err != nil {
			continue
		}
		for _, tn := range ts {
			if tn.State.Serving() || tn.State == catalog.MigratingIn {
				a.restartCrashed(ctx, tn)
			}
		}
	}
}

// restartCrashed starts tn's postmaster if it crashed (see supervise).
func (a *Agent) restartCrashed(ctx context.Context, tn catalog.Tenant) {
	if tn.Dir == "" {
		return
	}
	if _, err := os.Stat(filepath.Join(tn.Dir, "postmaster.pid")); err != nil {
		return // never started, or stopped on purpose
	}
	unlock := a.lockTenant(tn.ID)
	defer unlock()
	c, err := a.cluster(tn)
	if err != nil || c.Running() {
		return
	}
	if _, err := c.PID(); errors.Is(err, pgcluster.ErrNotRunning) {
		return // removed meanwhile: stopped on purpose
	}
	a.log.Warn("tenant postmaster crashed; restarting it", "tenant", tn.ID, "state", tn.State)
	sctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := c.Start(sctx); err != nil {
		// Its old backends may still hold the shared memory: next round.
		a.log.Warn("restarting crashed postmaster failed; retrying", "tenant", tn.ID, "err", err)
	}
}

// postmasterDown reports whether err says a local postmaster is not
// there or not accepting connections yet: no connection could be made, or
// it is starting up, shutting down or recovering from a crash (SQLSTATE
// class 57P: 57P01–57P03).
func postmasterDown(err error) bool {
	var ce *pgconn.ConnectError
	if errors.As(err, &ce) {
		return true
	}
	var pe *pgconn.PgError
	return errors.As(err, &pe) && strings.HasPrefix(pe.Code, "57P")
}
