package testbed

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	agentclient "github.com/sluicedb/sluice/agent/client"
	"github.com/sluicedb/sluice/lab/workload"
	proxyclient "github.com/sluicedb/sluice/proxy/client"
)

// Tenant is a tenant the bed created.
type Tenant struct {
	Name  string
	DSN   string // through the proxy
	Rows  int64  // YCSB usertable rows loaded
	Bytes int64  // the loaded table's size on disk, bytes
}

// CreateTenant creates tenant name on Servers[server] with an ID unique
// across the bed's servers, routes it in the
// proxy, and loads Slacker's YCSB usertable to about size bytes through the
// proxy (then VACUUM and CHECKPOINT, so the copy and the workload start
// from a clean state).
func (b *Bed) CreateTenant(ctx context.Context, server int, name string, size int64, seed uint64) (Tenant, error) {
	if server < 0 || server >= len(b.Servers) {
		return Tenant{}, fmt.Errorf("testbed: no server %d", server)
	}
	s := b.Servers[server]
	tn, err := s.Client.CreateTenant(ctx, agentclient.CreateTenant{ID: b.lastID.Add(1), Name: name, Users: []agentclient.User{b.user}})
	if err != nil {
		return Tenant{}, fmt.Errorf("testbed: create tenant %s on %s: %w", name, s.Name, err)
	}
	if err := b.setRoute(ctx, proxyclient.Route{Tenant: tn.Name, Addr: net.JoinHostPort(tn.Host, strconv.Itoa(tn.Port)), Database: tn.Database}); err != nil {
		return Tenant{}, err
	}
	// Loading is setup, not the experiment: the server's limits are lifted
	// meanwhile.
	if err := b.setLimits(s, false); err != nil {
		return Tenant{}, err
	}
	defer b.setLimits(s, true)
	t := Tenant{Name: tn.Name, DSN: fmt.Sprintf("postgres://%s:%s@%s/%s?sslmode=disable", b.user.Name, b.user.Password, b.proxyAddr, tn.Name)}
	conn, err := pgx.Connect(ctx, t.DSN)
	if err != nil {
		return t, fmt.Errorf("testbed: connect to %s through the proxy: %w", name, err)
	}
	defer conn.Close(context.Background())
	lr, err := workload.Load(ctx, conn, workload.RowsForSize(size), seed, nil)
	if err != nil {
		return t, fmt.Errorf("testbed: load %s: %w", name, err)
	}
	// VACUUM sets the hint bits and the visibility map now, so the first
	// trial does not pay for them; CHECKPOINT writes them out.
	if _, err := conn.Exec(ctx, "VACUUM (ANALYZE) usertable"); err != nil {
		return t, fmt.Errorf("testbed: %s: %w", name, err)
	}
	if err := checkpoint(ctx, tn); err != nil {
		return t, fmt.Errorf("testbed: %s: %w", name, err)
	}
	t.Rows, t.Bytes = lr.Rows, lr.Bytes
	b.Opt.Progress("tenant %s on %s: %d rows, %.0f MB", name, s.Name, lr.Rows, float64(lr.Bytes)/1e6)
	return t, nil
}

// AddTenant creates an empty tenant name on Servers[server] and routes it
// in the proxy (a keyspace's partition: its data comes later).
func (b *Bed) AddTenant(ctx context.Context, server int, name string) (agentclient.Tenant, error) {
	if server < 0 || server >= len(b.Servers) {
		return agentclient.Tenant{}, fmt.Errorf("testbed: no server %d", server)
	}
	s := b.Servers[server]
	tn, err := s.Client.CreateTenant(ctx, agentclient.CreateTenant{ID: b.lastID.Add(1), Name: name, Users: []agentclient.User{b.user}})
	if err != nil {
		return tn, fmt.Errorf("testbed: create tenant %s on %s: %w", name, s.Name, err)
	}
	err = b.setRoute(ctx, proxyclient.Route{Tenant: tn.Name, Addr: net.JoinHostPort(tn.Host, strconv.Itoa(tn.Port)), Database: tn.Database})
	return tn, err
}

// SuperDSN is the connection string of tenant t's postmaster itself, not
// through the proxy, database db, as its superuser over its Unix socket:
// for loading, checking and dropping what the proxy must not see.
func SuperDSN(t agentclient.Tenant, db string) string { return tenantDSN(t, db) }

// ClientDSN is the proxy's connection string for database db (a tenant's
// name or a keyspace's), as the tenants' user.
func (b *Bed) ClientDSN(db string) string {
	return fmt.Sprintf("postgres://%s:%s@%s/%s?sslmode=disable", b.user.Name, b.user.Password, b.proxyAddr, db)
}

// Unlimited runs fn with every server's CPU and disk caps lifted (loading
// is setup, not the experiment), and puts them back.
func (b *Bed) Unlimited(fn func() error) error {
	for _, s := range b.Servers {
		if err := b.setLimits(s, false); err != nil {
			return err
		}
		defer b.setLimits(s, true)
	}
	return fn()
}

// RetiredDirs lists the migrated-away tenant data directories still on the
// servers' disk (agent: tenants/<id>.retired-<unix>, purged PurgeDelay after
// their migration, at migration.PurgeRate).
func (b *Bed) RetiredDirs() []string {
	ms, _ := filepath.Glob(filepath.Join(b.root, "*", "tenants", "*.retired-*"))
	return ms
}

// WaitPurged waits, up to max, until no retired tenant directory is left on
// the servers' disk, and returns how long it waited. The purge frees ~2 GB
// in 8–10 s of the one disk the servers share, and the moved tenant's
// clients see their latency climb meanwhile: a trial that starts then starts
// on a disturbed plant. An error only when ctx ends; at max it returns with
// the directories left.
func (b *Bed) WaitPurged(ctx context.Context, max time.Duration) (time.Duration, error) {
	start := time.Now()
	for len(b.RetiredDirs()) > 0 && time.Since(start) < max {
		t := time.NewTimer(200 * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return time.Since(start), ctx.Err()
		case <-t.C:
		}
	}
	return time.Since(start), nil
}

// Owner returns the index of the server that serves t, and t's id there.
func (b *Bed) Owner(ctx context.Context, t Tenant) (int, int64, error) {
	for i, s := range b.Servers {
		ts, err := s.Client.Tenants(ctx, false)
		if err != nil {
			return -1, 0, fmt.Errorf("testbed: %s: %w", s.Name, err)
		}
		for _, x := range ts {
			if x.Name == t.Name && x.State == "running" {
				return i, x.ID, nil
			}
		}
	}
	return -1, 0, fmt.Errorf("testbed: no server runs tenant %s", t.Name)
}

// Migrate moves t from its owner to Servers[to] with req (its Tenant and To
// are filled in), polling about twice a second and calling each (if set)
// with every record. It returns the final record; an outcome other than
// "committed" is an error.
func (b *Bed) Migrate(ctx context.Context, t Tenant, to int, req agentclient.StartMigration, each func(agentclient.Migration)) (agentclient.Migration, error) {
	from, id, err := b.Owner(ctx, t)
	if err != nil {
		return agentclient.Migration{}, err
	}
	if to < 0 || to >= len(b.Servers) || to == from {
		return agentclient.Migration{}, fmt.Errorf("testbed: cannot move %s from server %d to %d", t.Name, from, to)
	}
	src := b.Servers[from].Client
	req.Tenant, req.To = id, b.Servers[to].Name
	m, err := src.StartMigration(ctx, req)
	if err != nil {
		return m, fmt.Errorf("testbed: start migration of %s: %w", t.Name, err)
	}
	for !m.Done {
		select {
		case <-ctx.Done():
			src.AbortMigration(context.Background(), m.ID)
			return m, ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
		if m, err = src.Migration(ctx, m.ID); err != nil {
			return m, err
		}
		if each != nil {
			each(m)
		}
	}
	if m.Outcome != "committed" {
		return m, fmt.Errorf("testbed: migration %s of %s ended %s: %s", m.ID, t.Name, m.Outcome, m.Error)
	}
	return m, nil
}

// checkpoint runs CHECKPOINT in tenant tn as its superuser, over its Unix
// socket (the bed runs on the servers' host, as the agents do): the
// tenant's own user may not.
func checkpoint(ctx context.Context, tn agentclient.Tenant) error {
	conn, err := pgx.Connect(ctx, fmt.Sprintf("host=%s port=%d user=postgres dbname=postgres sslmode=disable", tn.Dir, tn.Port))
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	_, err = conn.Exec(ctx, "CHECKPOINT")
	return err
}

// ClientDSNAt returns, for database db, the connection string through the
// proxy at a host:port (one of ProxyAddrs), as the tenants' user.
func (b *Bed) ClientDSNAt(db string) func(addr string) string {
	return func(addr string) string {
		return fmt.Sprintf("postgres://%s:%s@%s/%s?sslmode=disable", b.user.Name, b.user.Password, addr, db)
	}
}
