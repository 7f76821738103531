package agent

import (
	"context"
	"fmt"
	"os"
	"strconv"

	"github.com/sluicedb/sluice/catalog"
	"github.com/sluicedb/sluice/migration"
	"github.com/sluicedb/sluice/migration/pg"
	"github.com/sluicedb/sluice/pgcluster"
)

// agentTarget is package pg's LocalTarget with the agent's
// placement rules: tenant N lives in Root/tenants/N on port base_port+N (as
// every tenant created here does), and Info reports the agent's own space
// (capacity_bytes honoured) and PostgreSQL version.
type agentTarget struct {
	*pg.LocalTarget
	a *Agent
}

var _ migration.Target = agentTarget{}

// localTarget returns the Target this agent serves to source agents.
func (a *Agent) localTarget() migration.Target {
	a.tgtOnce.Do(func() {
		lt := pg.NewLocalTarget(a.cfg.Root+"/tenants", pgcluster.Options{BinDir: a.cfg.PGBinDir, OSUser: a.cfg.OSUser, ListenAddr: a.cfg.Tenant.ListenAddr, Secure: true, TLS: a.pgTLS})
		lt.Settings = a.cfg.Tenant.Settings
		lt.OnAdoptWAL = a.adoptedWAL
		a.tgt = agentTarget{LocalTarget: lt, a: a}
	})
	return a.tgt
}

// Info reports this agent's PostgreSQL major version and free space.
func (t agentTarget) Info(ctx context.Context, tenant string) (migration.TargetInfo, error) {
	info, err := t.a.Info()
	if err != nil {
		return migration.TargetInfo{}, fmt.Errorf("agent: target info: %w", err)
	}
	ti := migration.TargetInfo{Major: info.PGMajor, FreeBytes: info.FreeBytes}
	if id, err := strconv.ParseInt(tenant, 10, 64); err == nil {
		if tn, err := t.a.cat.Tenant(id); err == nil && tn.State != catalog.Deleted && tn.State != catalog.Moved {
			ti.Taken = string(tn.State)
		}
	}
	return ti, nil
}

// Reserve empties the tenant's directory (a previous attempt's or a moved
// tenant's leftovers) and returns it with the tenant's port.
func (t agentTarget) Reserve(ctx context.Context, m migration.Record) (string, int, error) {
	id, err := strconv.ParseInt(m.Tenant, 10, 64)
	if err != nil || id <= 0 {
		return "", 0, errf(400, "migration %s: tenant %q is not a tenant id", m.ID, m.Tenant)
	}
	dir, port := t.a.TenantDir(id), t.a.TenantPort(id)
	if err := t.Abort(ctx, migration.Record{ID: m.ID, Tenant: m.Tenant, TargetDir: dir, TargetPort: port}); err != nil {
		return "", 0, err
	}
	if err := portFree(t.a.cfg.Tenant.ListenAddr, port); err != nil {
		return "", 0, errf(409, "agent %s: port %d for tenant %d is in use", t.a.cfg.Name, port, id)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", 0, fmt.Errorf("agent: reserve: %w", err)
	}
	if uid, gid, ok, err := pgcluster.OSUserIDs(t.a.cfg.OSUser); err != nil {
		return "", 0, err
	} else if ok {
		if err := os.Lchown(dir, uid, gid); err != nil {
			return "", 0, fmt.Errorf("agent: reserve: %w", err)
		}
	}
	return dir, port, nil
}

// Abort stops and removes the reserved directory (the tenant's, when the
// record has none yet).
func (t agentTarget) Abort(ctx context.Context, m migration.Record) error {
	if m.TargetDir == "" {
		if id, err := strconv.ParseInt(m.Tenant, 10, 64); err == nil && id > 0 {
			m.TargetDir, m.TargetPort = t.a.TenantDir(id), t.a.TenantPort(id)
		}
	}
	return t.LocalTarget.Abort(ctx, m)
}
