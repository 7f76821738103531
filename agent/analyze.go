package agent

import (
	"context"
	"net/url"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sluicedb/sluice/catalog"
	"github.com/sluicedb/sluice/internal/clock"
)

// AnalyzeCostDelay is the vacuum_cost_delay of the ANALYZE a received
// tenant gets (Config.AnalyzeAfter): autovacuum's own default, so the
// re-estimate reads its sample pages at autovacuum's pace, not at the
// disk's.
const AnalyzeCostDelay = "2ms"

// analyzeLater runs ANALYZE in every database of tenant id once
// Config.AnalyzeAfter has passed, if the tenant still serves here then and
// is not migrating; it returns at once. Close cancels a pending or running
// one. Failures are logged: the tenant serves either way, and autovacuum
// catches up by itself once enough new changes accumulate.
func (a *Agent) analyzeLater(id int64) {
	after := a.cfg.AnalyzeAfter.D()
	if after <= 0 {
		return
	}
	a.bg.Add(1)
	go func() {
		defer a.bg.Done()
		if clock.Sleep(a.bgCtx, after) != nil {
			return
		}
		start := time.Now()
		n, err := a.analyzeTenant(a.bgCtx, id)
		if err != nil {
			a.log.Warn("analyze after migration", "tenant", id, "err", err)
			return
		}
		if n > 0 {
			a.log.Info("analyzed after migration", "tenant", id, "databases", n, "seconds", time.Since(start).Seconds())
		}
	}()
}

// analyzeTenant runs a cost-limited ANALYZE in every database of tenant id
// that accepts connections (templates left out) and returns how many it
// analyzed; 0 if the tenant no longer runs here, or is migrating.
func (a *Agent) analyzeTenant(ctx context.Context, id int64) (int, error) {
	tn, err := a.cat.Tenant(id)
	if err != nil || tn.State != catalog.Running {
		return 0, nil
	}
	conn, err := pgx.Connect(ctx, a.ConnString(tn.Port, ""))
	if err != nil {
		return 0, err
	}
	rows, err := conn.Query(ctx, "SELECT datname FROM pg_database WHERE datallowconn AND NOT datistemplate ORDER BY datname")
	var dbs []string
	if err == nil {
		dbs, err = pgx.CollectRows(rows, pgx.RowTo[string])
	}
	conn.Close(ctx)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, db := range dbs {
		c, err := pgx.Connect(ctx, a.ConnString(tn.Port, url.PathEscape(db)))
		if err != nil {
			return n, err
		}
		_, err = c.Exec(ctx, "SET vacuum_cost_delay = '"+AnalyzeCostDelay+"'")
		if err == nil {
			_, err = c.Exec(ctx, "ANALYZE")
		}
		c.Close(context.Background())
		if err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}
