package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"

	"github.com/jackc/pgx/v5"

	"github.com/sluicedb/sluice/agent/client"
	"github.com/sluicedb/sluice/catalog"
	"github.com/sluicedb/sluice/migration"
	"github.com/sluicedb/sluice/pgcluster"
)

// tenantExtensions are created in every tenant's database at creation: the
// WARM phase reads pg_buffercache on the source and runs pg_prewarm on the target.
var tenantExtensions = []string{"pg_buffercache", "pg_prewarm"}

// TenantDir returns the data directory tenant id has on this agent.
func (a *Agent) TenantDir(id int64) string {
	return filepath.Join(a.cfg.Root, "tenants", strconv.FormatInt(id, 10))
}

// TenantPort returns the port tenant id has on this agent (base_port + id).
func (a *Agent) TenantPort(id int64) int { return a.cfg.Tenant.BasePort + int(id) }

// pgOptions returns the pgcluster options for a tenant on port.
func (a *Agent) pgOptions(port int, settings map[string]string) pgcluster.Options {
	return pgcluster.Options{BinDir: a.cfg.PGBinDir, Port: port, ListenAddr: a.cfg.Tenant.ListenAddr, OSUser: a.cfg.OSUser, Settings: settings, WALSegSizeMB: a.cfg.Tenant.WALSegSizeMB, Secure: true, TLS: a.pgTLS}
}

// cluster opens tenant tn's data directory.
func (a *Agent) cluster(tn catalog.Tenant) (*pgcluster.Cluster, error) {
	c, err := pgcluster.Open(tn.Dir, a.pgOptions(tn.Port, tn.Settings))
	if err != nil {
		return nil, fmt.Errorf("agent: tenant %d: %w", tn.ID, err)
	}
	return c, nil
}

// ConnString returns a libpq conninfo for database db ("" = the tenants'
// default) of the tenant on port, as the superuser over its Unix socket:
// the one way in for the superuser (peer authentication, pgcluster
// Options.Secure). Only this host's root and PostgreSQL OS user can use it.
func (a *Agent) ConnString(port int, db string) string {
	if db == "" {
		db = a.cfg.Tenant.Database
	}
	return fmt.Sprintf("host=%s port=%d user=postgres dbname=%s sslmode=disable", a.TenantDir(int64(port-a.cfg.Tenant.BasePort)), port, db)
}

// defaultMaxPreparedTransactions is new tenants' max_prepared_transactions
// unless the agent's or the request's settings say otherwise: PostgreSQL's
// default max_connections, so that every session may hold a prepared
// transaction (a keyspace's schema and the router's cross-partition
// commits are two-phase). PostgreSQL's own default, 0, refuses PREPARE
// TRANSACTION. A tenant keeps the value it was created with.
const defaultMaxPreparedTransactions = "100"

// tenantSettings merges the agent's defaults with a request's overrides.
func (a *Agent) tenantSettings(over map[string]string) map[string]string {
	s := map[string]string{"shared_buffers": a.cfg.Tenant.SharedBuffers, "max_prepared_transactions": defaultMaxPreparedTransactions}
	maps.Copy(s, a.cfg.Tenant.Settings)
	maps.Copy(s, over)
	return s
}

// view renders a catalog tenant for the API.
func (a *Agent) view(tn catalog.Tenant) client.Tenant {
	v := client.Tenant{
		ID: tn.ID, Name: tn.Name, Host: a.cfg.Tenant.AdvertiseHost, Port: tn.Port, Database: a.cfg.Tenant.Database,
		State: string(tn.State), Dir: tn.Dir, Settings: tn.Settings, Migration: tn.Migration, Created: tn.Created, Updated: tn.Updated,
	}
	if tn.State != catalog.Deleted && tn.State != catalog.Moved {
		if c, err := a.cluster(tn); err == nil {
			v.Alive = c.Running()
		}
	}
	if tn.State == catalog.MigratingOut && tn.Migration != "" {
		if m, err := a.cat.Migration(tn.Migration); err == nil && m.Role == catalog.Source {
			var rec migration.Record
			if json.Unmarshal(m.Record, &rec) == nil {
				if rec.Switched() {
					v.ServedAt = rec.SwitchedTo
				}
				v.Held = rec.Phase == migration.PhaseHandover && !rec.HeldAt.IsZero() && rec.ReleasedAt.IsZero() &&
					!a.releasingSince(tn.ID, rec.HeldAt)
			}
		}
	}
	return v
}

// Tenants lists tenants; deleted ones only when all is set.
func (a *Agent) Tenants(all bool) ([]client.Tenant, error) {
	ts, err := a.cat.Tenants()
	if err != nil {
		return nil, err
	}
	out := []client.Tenant{}
	for _, tn := range ts {
		if tn.State == catalog.Deleted && !all {
			continue
		}
		out = append(out, a.view(tn))
	}
	return out, nil
}

// Tenant returns one tenant; a deleted one is reported as not found.
func (a *Agent) Tenant(id int64) (client.Tenant, error) {
	tn, err := a.cat.Tenant(id)
	if err != nil {
		return client.Tenant{}, errf(http.StatusNotFound, "unknown tenant %d on agent %s", id, a.cfg.Name)
	}
	if tn.State == catalog.Deleted {
		return client.Tenant{}, errf(http.StatusNotFound, "tenant %d on agent %s was deleted", id, a.cfg.Name)
	}
	return a.view(tn), nil
}

// CreateTenant creates, configures and starts a tenant postmaster and
// returns it running. On failure nothing is left behind (the catalog keeps a
// deleted tombstone when the ID had been recorded).
func (a *Agent) CreateTenant(ctx context.Context, req client.CreateTenant) (client.Tenant, error) {
	if req.ID < 0 {
		return client.Tenant{}, errf(http.StatusBadRequest, "tenant id %d must be > 0", req.ID)
	}
	if req.Name != "" && !nameRE.MatchString(req.Name) {
		return client.Tenant{}, errf(http.StatusBadRequest, "tenant name %q must be 1-63 letters, digits, '_', '.', '-'", req.Name)
	}
	if err := checkSettings(req.Settings); err != nil {
		return client.Tenant{}, errf(http.StatusBadRequest, "tenant settings: %v", err)
	}
	if err := req.Validate(); err != nil {
		return client.Tenant{}, errf(http.StatusBadRequest, "tenant: %v", err)
	}
	if err := pgcluster.CheckSettings(ctx, a.pgOptions(0, nil), req.Settings); err != nil {
		var se *pgcluster.SettingError
		if errors.As(err, &se) {
			return client.Tenant{}, errf(http.StatusBadRequest, "tenant settings: %v", err)
		}
		return client.Tenant{}, err
	}
	var tn catalog.Tenant
	err := a.cat.Update(func(tx *catalog.Tx) error {
		id := req.ID
		if id == 0 {
			id = tx.MaxTenantID() + 1
		}
		port := a.TenantPort(id)
		if port > 65535 {
			return errf(http.StatusBadRequest, "tenant id %d gives port %d > 65535 (base_port %d)", id, port, a.cfg.Tenant.BasePort)
		}
		name := req.Name
		if name == "" {
			name = "tenant-" + strconv.FormatInt(id, 10)
		}
		tn = catalog.Tenant{ID: id, Name: name, Port: port, Dir: a.TenantDir(id), State: catalog.Creating, Settings: a.tenantSettings(req.Settings)}
		if err := tx.CreateTenant(tn); err != nil {
			old, _ := tx.Tenant(id)
			return errf(http.StatusConflict, "tenant %d already exists on agent %s (state %s)", id, a.cfg.Name, old.State)
		}
		return nil
	})
	if err != nil {
		return client.Tenant{}, err
	}
	unlock := a.lockTenant(tn.ID)
	defer unlock()
	// fail rolls the creation back and answers err in one line: its first
	// line and PostgreSQL's first error message (pgcluster.Brief); the
	// agent's log has the whole output.
	fail := func(err error) (client.Tenant, error) {
		if derr := a.discardTenant(context.WithoutCancel(ctx), tn); derr != nil {
			a.log.Error("create: roll back", "tenant", tn.ID, "err", derr)
		}
		var ae *apiError
		if errors.As(err, &ae) {
			return client.Tenant{}, err
		}
		a.log.Error("create tenant failed", "tenant", tn.ID, "err", err)
		return client.Tenant{}, errf(statusOf(err), "%s", pgcluster.Brief(err.Error()))
	}
	if err := portFree(a.cfg.Tenant.ListenAddr, tn.Port); err != nil {
		return fail(errf(http.StatusConflict, "tenant %d: port %d is in use on this server", tn.ID, tn.Port))
	}
	if _, err := os.Stat(tn.Dir); err == nil {
		return fail(errf(http.StatusConflict, "tenant %d: directory %s already exists; remove it or pick another id", tn.ID, tn.Dir))
	}
	c, err := a.initCluster(ctx, tn)
	if err != nil {
		return fail(err)
	}
	if err := c.Start(ctx); err != nil {
		return fail(fmt.Errorf("agent: create tenant %d: %w", tn.ID, err))
	}
	if err := a.setupTenant(ctx, tn.Port, req.Users); err != nil {
		return fail(err)
	}
	tn, err = a.cat.SetTenantState(tn.ID, catalog.Running)
	if err != nil {
		return fail(err)
	}
	a.log.Info("tenant created", "tenant", tn.ID, "port", tn.Port, "dir", tn.Dir)
	return a.view(tn), nil
}

// initCluster makes tn's data directory: a copy of the agent's initdb
// template (initdb runs once per agent; a copy is much faster), configured
// with tn's port and settings.
func (a *Agent) initCluster(ctx context.Context, tn catalog.Tenant) (*pgcluster.Cluster, error) {
	tmpl, err := a.template(ctx)
	if err != nil {
		return nil, err
	}
	if out, err := exec.CommandContext(ctx, "cp", "-a", tmpl, tn.Dir).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("agent: create tenant %d: copy template: %v: %s", tn.ID, err, out)
	}
	c, err := pgcluster.Open(tn.Dir, a.pgOptions(tn.Port, tn.Settings))
	if err != nil {
		return nil, fmt.Errorf("agent: create tenant %d: %w", tn.ID, err)
	}
	if err := c.Configure(tn.Settings); err != nil {
		return nil, fmt.Errorf("agent: create tenant %d: %w", tn.ID, err)
	}
	return c, nil
}

// template returns the agent's initdb template directory, creating it once.
func (a *Agent) template(ctx context.Context) (string, error) {
	a.tmplMu.Lock()
	defer a.tmplMu.Unlock()
	dir := filepath.Join(a.cfg.Root, "template")
	if _, err := os.Stat(filepath.Join(dir, "PG_VERSION")); err == nil {
		return dir, nil
	}
	tmp := dir + ".tmp"
	os.RemoveAll(tmp)
	a.log.Info("initdb template", "dir", dir)
	if _, err := pgcluster.Init(ctx, tmp, a.pgOptions(1, nil)); err != nil {
		os.RemoveAll(tmp)
		return "", fmt.Errorf("agent: initdb: %w", err)
	}
	if err := os.Rename(tmp, dir); err != nil {
		return "", fmt.Errorf("agent: initdb: %w", err)
	}
	return dir, nil
}

// setupTenant installs tenantExtensions in the tenant's database and makes
// its roles (setupRoles).
func (a *Agent) setupTenant(ctx context.Context, port int, users []client.User) error {
	conn, err := pgx.Connect(ctx, a.ConnString(port, ""))
	if err != nil {
		return fmt.Errorf("agent: connect to tenant on port %d: %w", port, err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	for _, e := range tenantExtensions {
		if _, err := conn.Exec(ctx, "CREATE EXTENSION IF NOT EXISTS "+e); err != nil {
			return fmt.Errorf("agent: create extension %s: %w", e, err)
		}
	}
	return a.setupRoles(ctx, conn, a.cfg.Tenant.Database, users)
}

// discardTenant stops tn's postmaster (if any), removes its directory and
// marks it deleted.
func (a *Agent) discardTenant(ctx context.Context, tn catalog.Tenant) error {
	if c, err := a.cluster(tn); err == nil {
		if err := c.Stop(ctx, pgcluster.Immediate); err != nil {
			return err
		}
	} else if pidAlive(tn.Dir) {
		return err
	}
	if err := os.RemoveAll(tn.Dir); err != nil {
		return fmt.Errorf("agent: remove %s: %w", tn.Dir, err)
	}
	return a.cat.Update(func(tx *catalog.Tx) error {
		cur, err := tx.Tenant(tn.ID)
		if err != nil {
			return err
		}
		cur.State = catalog.Deleted
		cur.Migration = ""
		return tx.PutTenant(cur)
	})
}

// StartTenant starts a stopped tenant (or restarts the postmaster of a
// running one that died).
func (a *Agent) StartTenant(ctx context.Context, id int64) (client.Tenant, error) {
	unlock := a.lockTenant(id)
	defer unlock()
	tn, err := a.liveTenant(id)
	if err != nil {
		return client.Tenant{}, err
	}
	if tn.State != catalog.Stopped && !tn.State.Serving() {
		return client.Tenant{}, errf(http.StatusConflict, "tenant %d is %s; only a stopped tenant can be started", id, tn.State)
	}
	c, err := a.cluster(tn)
	if err != nil {
		return client.Tenant{}, err
	}
	if !c.Running() {
		if err := c.Start(ctx); err != nil {
			return client.Tenant{}, fmt.Errorf("agent: start tenant %d: %w", id, err)
		}
	}
	if tn.State == catalog.Stopped {
		if tn, err = a.cat.SetTenantState(id, catalog.Running); err != nil {
			return client.Tenant{}, err
		}
	}
	a.log.Info("tenant started", "tenant", id)
	return a.view(tn), nil
}

// StopTenant stops a running tenant's postmaster (fast shutdown).
func (a *Agent) StopTenant(ctx context.Context, id int64) (client.Tenant, error) {
	unlock := a.lockTenant(id)
	defer unlock()
	tn, err := a.liveTenant(id)
	if err != nil {
		return client.Tenant{}, err
	}
	if tn.State != catalog.Running && tn.State != catalog.Stopped {
		return client.Tenant{}, errf(http.StatusConflict, "tenant %d is %s; only a running tenant can be stopped", id, tn.State)
	}
	c, err := a.cluster(tn)
	if err != nil {
		return client.Tenant{}, err
	}
	if err := c.Stop(ctx, pgcluster.Fast); err != nil {
		return client.Tenant{}, fmt.Errorf("agent: stop tenant %d: %w", id, err)
	}
	if tn, err = a.cat.SetTenantState(id, catalog.Stopped); err != nil {
		return client.Tenant{}, err
	}
	a.log.Info("tenant stopped", "tenant", id)
	return a.view(tn), nil
}

// DeleteTenant stops a tenant, removes its data directory and marks it
// deleted. A migrating tenant cannot be deleted; abort the migration first.
func (a *Agent) DeleteTenant(ctx context.Context, id int64) (client.Tenant, error) {
	unlock := a.lockTenant(id)
	defer unlock()
	tn, err := a.liveTenant(id)
	if err != nil {
		return client.Tenant{}, err
	}
	if tn.State == catalog.MigratingIn || tn.State == catalog.MigratingOut {
		return client.Tenant{}, errf(http.StatusConflict, "tenant %d is %s (migration %s); abort the migration first", id, tn.State, tn.Migration)
	}
	if err := a.discardTenant(ctx, tn); err != nil {
		return client.Tenant{}, err
	}
	tn, err = a.cat.Tenant(id)
	if err != nil {
		return client.Tenant{}, err
	}
	a.log.Info("tenant deleted", "tenant", id)
	return a.view(tn), nil
}

// liveTenant reads tenant id, answering 404 for unknown or deleted tenants.
func (a *Agent) liveTenant(id int64) (catalog.Tenant, error) {
	tn, err := a.cat.Tenant(id)
	if err != nil || tn.State == catalog.Deleted {
		return tn, errf(http.StatusNotFound, "unknown tenant %d on agent %s", id, a.cfg.Name)
	}
	return tn, nil
}

// portFree reports an error when nothing may bind host:port right now.
func portFree(host string, port int) error {
	if host == "*" || host == "" {
		host = "0.0.0.0"
	}
	l, err := net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(port)))
	if err != nil {
		return err
	}
	return l.Close()
}

// pidAlive reports whether dir's postmaster.pid names a live process.
func pidAlive(dir string) bool {
	b, err := os.ReadFile(filepath.Join(dir, "postmaster.pid"))
	if err != nil {
		return false
	}
	var pid int
	if _, err := fmt.Sscan(string(b), &pid); err != nil || pid <= 0 {
		return false
	}
	return syscall.Kill(pid, 0) == nil
}
