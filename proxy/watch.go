package proxy

import (
	"context"
	"fmt"
	"strings"
	"sync"

	"github.com/sluicedb/sluice/catalog"
)

// A Config.Catalogs entry etcd://host:port[,…]/prefix is an etcd catalog
// shared by agents: the proxy watches its placement records
// (catalog.WatchPlacements) and routes every tenant where its placement
// says, instead of polling agents. A placement's epoch orders its routes:
// the proxy applies a placement only when its epoch is newer than the one
// it routes the tenant by, so an old record read again (a re-read after a
// compaction) never moves a route back. The watch is authoritative while a
// tenant is held as well: the handover's switch is the driver's write of
// the placement (under its lock), and the hold and release stay the
// agents' calls to the proxy's API.

// isEtcdCatalog reports whether a Catalogs entry names an etcd catalog.
func isEtcdCatalog(u string) bool { return strings.HasPrefix(u, "etcd://") }

// placementRoutes is what the proxy last applied of the etcd catalogs'
// placements: tenant name → epoch, and waiters for a tenant to reach one.
type placementRoutes struct {
	mu      sync.Mutex
	epoch   map[string]int64
	changed chan struct{} // closed and replaced at every applied change
}

// epochOf returns the epoch tenant is routed by (0: none from a catalog)
// and a channel closed at the next change.
func (r *placementRoutes) epochOf(tenant string) (int64, <-chan struct{}) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.changed == nil {
		r.changed = make(chan struct{})
	}
	return r.epoch[tenant], r.changed
}

// advance records tenant at epoch if that is newer; it reports whether it was.
func (r *placementRoutes) advance(tenant string, epoch int64) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.epoch == nil {
		r.epoch = map[string]int64{}
	}
	if cur, ok := r.epoch[tenant]; ok && epoch <= cur {
		return false
	}
	r.epoch[tenant] = epoch
	if r.changed != nil {
		close(r.changed)
	}
	r.changed = make(chan struct{})
	return true
}

// watchCatalog follows the placements of etcd catalog spec until ctx ends.
func (p *Proxy) watchCatalog(ctx context.Context, spec catalog.Spec) {
	o := catalog.WatchOptions{Endpoints: spec.Endpoints, Prefix: spec.Prefix, TLS: p.peerTLS, Logf: p.cfg.Logf}
	if err := catalog.WatchPlacements(ctx, o, p.applyPlacements); err != nil {
		p.cfg.Logf("proxy: catalog %s: %v", spec, err)
	}
}

// applyPlacements routes every served tenant of a change where its
// placement says, when its epoch is newer than the route's.
func (p *Proxy) applyPlacements(ch catalog.PlacementChange) {
	for _, pl := range ch.Put {
		if pl.Name == "" || pl.Addr == "" || pl.Epoch == 0 || !servedStates[string(pl.State)] {
			continue
		}
		// A tenant's placement keeps its epoch across owners' records
		// (catalog.Tx.place); advance only on a newer one.
		if !p.placed.advance(pl.Name, pl.Epoch) {
			continue
		}
		db := pl.Database
		if db == "" {
			db = "postgres"
		}
		if t := p.tenantByName(pl.Name); t != nil {
			if t.setRoute(pl.Addr, db, true) {
				p.cfg.Logf("proxy: catalog: tenant %s now at %s/%s (epoch %d)", pl.Name, pl.Addr, db, pl.Epoch)
			}
			continue
		}
		if err := p.setRoute(RouteConfig{Tenant: pl.Name, Addr: pl.Addr, Database: db}, false); err != nil {
			p.cfg.Logf("proxy: catalog: tenant %s: %v", pl.Name, err)
		}
	}
}

// watchesEtcd reports whether the proxy watches an etcd catalog.
func (p *Proxy) watchesEtcd() bool {
	for _, u := range p.cfg.Catalogs {
		if isEtcdCatalog(u) {
			return true
		}
	}
	return false
}

// awaitPlacement waits until the watch routes tenant by placement epoch
// or a later one, until ctx ends: a handover's switch, as the driver wrote
// it to the catalog, has reached this proxy.
func (p *Proxy) awaitPlacement(ctx context.Context, tenant string, epoch int64) error {
	for {
		cur, changed := p.placed.epochOf(tenant)
		if cur >= epoch {
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return fmt.Errorf("proxy: tenant %s: the catalog's placement epoch %d has not reached this proxy (it routes by epoch %d): %w", tenant, epoch, cur, ctx.Err())
		}
	}
}
