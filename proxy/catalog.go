package proxy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// followCatalog polls an agent's GET /v1/tenants and follows the route of
// every tenant that agent serves (servedStates), until ctx ends.
func (p *Proxy) followCatalog(ctx context.Context, base string) {
	base = strings.TrimRight(base, "/")
	if !strings.Contains(base, "://") {
		base = "http://" + base
	}
	hc := p.catalogClient(base)
	tick := time.NewTicker(p.cfg.CatalogPoll)
	defer tick.Stop()
	lastErr := ""
	for {
		if err := p.pollCatalog(ctx, hc, base); err != nil && err.Error() != lastErr {
			lastErr = err.Error()
			p.cfg.Logf("proxy: catalog %s: %v", base, err)
		} else if err == nil {
			lastErr = ""
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// catalogTenant is one entry of an agent's GET /v1/tenants.
type catalogTenant struct {
	ID       int64  `json:"id"`
	Name     string `json:"name"`
	Host     string `json:"host"`
	Port     int    `json:"port"`
	Database string `json:"database"`
	State    string `json:"state"`
	ServedAt string `json:"served_at"` // host:port of the writable copy when not this agent's (switched, not finished)
	Held     bool   `json:"held"`      // a handover holds the tenant until its agent releases it
}

func (p *Proxy) pollCatalog(ctx context.Context, hc *http.Client, base string) error {
	var ts []catalogTenant
	asked := time.Now()
	if found, err := getJSON(ctx, hc, base+"/v1/tenants", &ts); err != nil {
		return err
	} else if !found {
		return fmt.Errorf("GET /v1/tenants: 404 Not Found")
	}
	if err := p.applyCatalog(base, ts, asked); err != nil {
		return err
	}
	return p.pollKeyspaces(ctx, hc, base)
}

// getJSON GETs url into v; found is false on 404 (v untouched).
func getJSON(ctx context.Context, hc *http.Client, url string, v any) (found bool, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return false, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return false, err
	}
	defer resp.Body.Close()
	path := req.URL.Path
	switch {
	case resp.StatusCode == http.StatusNotFound:
		return false, nil
	case resp.StatusCode != http.StatusOK:
		return false, fmt.Errorf("GET %s: %s", path, resp.Status)
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 16<<20)).Decode(v); err != nil {
		return false, fmt.Errorf("GET %s: %w", path, err)
	}
	return true, nil
}

// servedStates are the catalog states in which an agent's tenant serves its
// clients: running, and migrating-out — the source keeps serving until the
// handover switches the route, so a proxy that learns of the tenant only
// then (started late, restarted, or slower than a short migration) must
// still route it there, or the handover has nothing to hold. From the
// switch until the migration ends, the source's entry names the target's
// address (served_at): the catalog always says where the writable copy is.
var servedStates = map[string]bool{"running": true, "migrating-out": true}

// applyCatalog routes every served tenant to where the catalog at base
// says, in an answer to a question asked at asked. It is edge-triggered: a
// tenant's route changes only when that catalog reports a location
// different from the last one it reported, so a route switched through the
// API is not reverted by a catalog that has not caught up yet. A tenant the
// catalog no longer serves is forgotten: a hold this catalog asserted is
// lifted (its handover is over), and if the tenant comes back (migrated
// back) it is routed afresh.
func (p *Proxy) applyCatalog(base string, ts []catalogTenant, asked time.Time) error {
	var errs []error
	served := map[string]bool{}
	for _, ct := range ts {
		if !servedStates[ct.State] || ct.Name == "" || ct.Port == 0 {
			continue
		}
		served[ct.Name] = true
		host := ct.Host
		if host == "" {
			host = "127.0.0.1"
		}
		addr := net.JoinHostPort(host, strconv.Itoa(ct.Port))
		if ct.ServedAt != "" {
			addr = ct.ServedAt
		}
		db := ct.Database
		if db == "" {
			db = "postgres"
		}
		seenKey, cur := base+"\x00"+ct.Name, catalogState{loc: addr + "/" + db, held: ct.Held}
		p.catMu.Lock()
		last, seen := p.catSeen[seenKey]
		p.catSeen[seenKey] = cur
		p.catMu.Unlock()
		if seen && last == cur {
			continue
		}
		if !seen || last.loc != cur.loc {
			if err := p.followRoute(ct.Name, addr, db); err != nil {
				errs = append(errs, err)
				continue
			}
		}
		if t := p.tenantByName(ct.Name); t != nil && cur.held != (seen && last.held) {
			p.followHold(t, cur.held, asked)
		}
	}
	p.forgetUnserved(base, served)
	return errors.Join(errs...)
}

// forgetUnserved drops what the catalog at base last said of the tenants
// it no longer serves (moved, dropped), lifting a hold it had asserted.
func (p *Proxy) forgetUnserved(base string, served map[string]bool) {
	prefix := base + "\x00"
	var lift []string
	p.catMu.Lock()
	for k, st := range p.catSeen {
		name, ok := strings.CutPrefix(k, prefix)
		if !ok || served[name] {
			continue
		}
		delete(p.catSeen, k)
		if st.held {
			lift = append(lift, name)
		}
	}
	p.catMu.Unlock()
	for _, name := range lift {
		if t := p.tenantByName(name); t != nil {
			p.followHold(t, false, time.Time{})
		}
	}
}

// catalogState is what applyCatalog last saw of one tenant in one catalog.
type catalogState struct {
	loc  string // addr/database
	held bool
}

// followRoute routes tenant name to addr/db as a catalog says.
func (p *Proxy) followRoute(name, addr, db string) error {
	if t := p.tenantByName(name); t != nil {
		if t.setRoute(addr, db, false) {
			p.cfg.Logf("proxy: catalog: tenant %s now at %s/%s", name, addr, db)
		}
		return nil
	}
	return p.setRoute(RouteConfig{Tenant: name, Addr: addr, Database: db}, false)
}

// followHold holds the tenant's new transactions when its catalog starts
// saying a handover holds it, and lets them go when it stops saying so. A
// proxy that restarted mid-handover thus holds what its predecessor held:
// no write reaches the source between the hold and the fence, which a
// router's hold is what keeps out. The agent's own hold and release (the
// API) come first in every other case, and this one is then a no-op. A
// "held" answered to a question asked before the tenant's last release is
// stale (the poll crossed the release) and ignored: heeding it would hold
// the tenant after its handover ended, with nothing left to release it.
func (p *Proxy) followHold(t *tenant, held bool, asked time.Time) {
	if held {
		if t.holdNewUnlessReleasedSince(asked) {
			p.cfg.Logf("proxy: catalog: tenant %s is in a handover: holding its new transactions until its agent releases it", t.name)
		}
		return
	}
	t.mu.Lock()
	was := t.mu.held
	t.mu.Unlock()
	if was {
		t.release(0, 0)
		p.cfg.Logf("proxy: catalog: tenant %s's handover is over: released", t.name)
	}
}
