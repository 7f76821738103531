package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/sluicedb/sluice/migration"
	proxyclient "github.com/sluicedb/sluice/proxy/client"
)

// router returns the handover Router of a migration of tenant id: the
// configured RouterFor (tests), else the proxy at Config.Proxy (with
// Config.Proxies, all of them: fanRouter), else
// migration.DirectRouter (clients find the new owner themselves; the fence
// turns their late writes into errors, never into lost acknowledged writes).
func (a *Agent) router(id int64) migration.Router {
	if a.cfg.RouterFor != nil {
		return a.cfg.RouterFor(id)
	}
	if a.cfg.Proxy == "" {
		return migration.DirectRouter{}
	}
	name := ""
	if tn, err := a.cat.Tenant(id); err == nil {
		name = tn.Name
	}
	first := proxyRouter{c: a.proxyClient(), name: name, db: a.cfg.Tenant.Database, log: a.log}
	if len(a.cfg.Proxies) == 0 {
		return first
	}
	f := fanRouter{names: []string{a.cfg.Proxy}, rs: []migration.Router{first}}
	for _, u := range a.cfg.Proxies {
		f.names = append(f.names, u)
		f.rs = append(f.rs, proxyRouter{c: a.proxyClientFor(u), name: name, db: a.cfg.Tenant.Database, log: a.log})
	}
	return f
}

// proxyRouter glues the proxy's client to migration.Router. The proxy knows
// tenants by name (from GET /v1/tenants); migration records carry the id.
//
// The proxy may have lost its memory (restarted) or never have known the
// tenant (it follows no catalog): Switch then creates the route, and Release
// of a tenant it does not know succeeds — nothing is held there, so a
// rollback or a roll-forward never waits on state that no longer exists.
type proxyRouter struct {
	c    *proxyclient.Client
	name string
	db   string       // the tenant's database on its server ("" = the proxy's default)
	log  *slog.Logger // nil: no slow-call warnings
}

// slowProxyCall is the proxy call time above which the agent logs a
// warning: Hold, Switch and Release run while clients wait.
const slowProxyCall = 20 * time.Millisecond

// timed runs a call to the proxy and warns when it was slow.
func (p proxyRouter) timed(call string, f func() error) error {
	start := time.Now()
	err := f()
	if d := time.Since(start); d > slowProxyCall && p.log != nil {
		p.log.Warn("slow proxy call", "call", call, "tenant", p.name, "took", d)
	}
	return err
}

var _ migration.Router = proxyRouter{}

// Backends names the proxy's backends of the tenant on its current server.
func (p proxyRouter) Backends(ctx context.Context, _ string) ([]int, error) {
	res, err := p.c.Backends(ctx, p.name)
	return res.PIDs, err
}

// Prepare opens a server session on addr for every session of the tenant;
// sessions it could not prepare make an error (not fatal to the migration).
func (p proxyRouter) Prepare(ctx context.Context, _ string, addr string) error {
	res, err := p.c.Prepare(ctx, p.name, addr)
	if err == nil && res.Failed > 0 {
		err = fmt.Errorf("proxy: prepared %d of %d sessions: %s", res.Opened, res.Sessions, res.FirstError)
	}
	return err
}

// Hold holds the tenant; the proxy names the source backends of the
// sessions it holds idle.
func (p proxyRouter) Hold(ctx context.Context, _ string, deadline time.Duration) ([]int, error) {
	var idle []int
	err := p.timed("hold", func() error {
		res, err := p.c.Hold(ctx, p.name, deadline)
		idle = res.IdleBackends
		return err
	})
	return idle, err
}

func (p proxyRouter) Switch(ctx context.Context, _ string, addr string) error {
	return p.timed("switch", func() error {
		var err error
		if e := placementEpoch(ctx); e > 0 {
			err = p.c.SwitchEpoch(ctx, p.name, addr, e)
		} else {
			err = p.c.Switch(ctx, p.name, addr)
		}
		if errors.Is(err, proxyclient.ErrUnknownTenant) {
			if p.log != nil {
				p.log.Warn("proxy does not know the tenant (restarted?); creating its route", "tenant", p.name, "addr", addr)
			}
			err = p.c.SetRoute(ctx, proxyclient.Route{Tenant: p.name, Addr: addr, Database: p.db})
		}
		return err
	})
}

// Holding asks the proxy whether it holds the tenant; a proxy that does not
// know it holds nothing.
func (p proxyRouter) Holding(ctx context.Context, _ string) (bool, error) {
	rs, err := p.c.Routes(ctx)
	if err != nil {
		return false, err
	}
	for _, r := range rs {
		if r.Tenant == p.name {
			return r.Held, nil
		}
	}
	return false, nil
}

// Release releases the tenant and says when the proxy let its sessions go,
// by the proxy's clock.
func (p proxyRouter) Release(ctx context.Context, _ string) (time.Time, error) {
	var at time.Time
	err := p.timed("release", func() error {
		var err error
		at, err = p.c.ReleaseAt(ctx, p.name)
		if errors.Is(err, proxyclient.ErrUnknownTenant) {
			return nil // nothing is held on a proxy that does not know the tenant
		}
		return err
	})
	return at, err
}

// releasingRouter notes when the driver begins a release of tenant id,
// before any proxy hears it. GET /v1/tenants says a tenant is held
// (client.Tenant.Held) from its record's hold until its record's release,
// which the driver writes only after the proxies answered: without the note,
// a proxy polling the catalog in between would read "held" after it was
// released and hold the tenant again.
type releasingRouter struct {
	migration.Router
	a  *Agent
	id int64
}

func (r releasingRouter) Release(ctx context.Context, tenant string) (time.Time, error) {
	r.a.releasing.Store(r.id, time.Now())
	return r.Router.Release(ctx, tenant)
}

// releasingSince reports whether a driver here began releasing tenant id
// after t.
func (a *Agent) releasingSince(id int64, t time.Time) bool {
	v, ok := a.releasing.Load(id)
	return ok && v.(time.Time).After(t)
}
