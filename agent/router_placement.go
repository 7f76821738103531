package agent

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/sluicedb/sluice/catalog"
	"github.com/sluicedb/sluice/migration"
)

// With an etcd catalog, a handover's switch is a catalog write: the
// driver moves the tenant's placement to the target's address under its
// tenant lock (a driver that lost the lock cannot move the route), and
// proxies watching the catalog route by it (proxy --catalog etcd://…).
// The hold and the release stay calls to the proxies (Config.Proxy,
// Proxies): a hold is a synchronous pause that a watch cannot give. The
// switch's call to those proxies carries the placement's epoch, so that a
// proxy watching the catalog answers only once its watch has the new
// placement — the handover releases only proxies that route to the target
// — and one that does not watch switches as told.

// switchRouter is the Router of the migration of tenant id driven under
// lk: router(id), its Release noted first (releasingRouter), its Switch
// preceded by the placement's write with an etcd catalog.
func (a *Agent) switchRouter(id int64, lk *catalog.Lock) migration.Router {
	var r migration.Router = releasingRouter{Router: a.router(id), a: a, id: id}
	if !strings.HasPrefix(a.cat.Path(), "etcd://") {
		return r
	}
	return placementRouter{Router: r, lk: lk, id: id}
}

// placementRouter is a Router whose Switch first writes the tenant's
// placement (catalog.Tx.SwitchPlacement) through the driver's lock.
type placementRouter struct {
	migration.Router
	lk *catalog.Lock
	id int64
}

func (p placementRouter) Switch(ctx context.Context, tenant, addr string) error {
	var epoch int64
	err := p.lk.Update(func(tx *catalog.Tx) error {
		var err error
		epoch, err = tx.SwitchPlacement(p.id, addr)
		return err
	})
	if errors.Is(err, catalog.ErrNotFound) {
		epoch, err = 0, nil // no placement (a catalog from before them): the proxies are told
	}
	if err != nil {
		return fmt.Errorf("agent: switch: placement of tenant %d: %w", p.id, err)
	}
	return p.Router.Switch(withPlacementEpoch(ctx, epoch), tenant, addr)
}

type placementEpochKey struct{}

// withPlacementEpoch carries the placement epoch a switch wrote to the
// proxyRouter calls of that switch (0: none written).
func withPlacementEpoch(ctx context.Context, epoch int64) context.Context {
	if epoch == 0 {
		return ctx
	}
	return context.WithValue(ctx, placementEpochKey{}, epoch)
}

func placementEpoch(ctx context.Context) int64 {
	e, _ := ctx.Value(placementEpochKey{}).(int64)
	return e
}
