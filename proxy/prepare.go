package proxy

import (
	"context"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/sluicedb/sluice/proxy/client"
)

// Prepared server sessions.
//
// Opening a server session costs a backend fork, authentication and a cold
// catalog cache: tens of milliseconds of the new server's CPU, hundreds on a
// CPU-capped one (a promotion resets the catalog caches again; see
// session.prepare). Without preparation every session pays that at its first
// transaction after a switch, all at once, and the clients see it on top of
// the freeze. Prepare opens them before the hold, on the target while it is
// still a hot standby (sessions opened during recovery become read-write at
// promotion: PostgreSQL decides read-only per transaction), so the switch
// only swaps connections.

// prepareParallel bounds how many server sessions Prepare opens at once, so
// a tenant with hundreds of sessions does not fork hundreds of backends on
// the target in the same instant.
const prepareParallel = 16

// Prepare opens, for every current session of tenant, a server session on
// addr (database "" = the tenant's current database) to be used when the
// tenant is switched there. It returns when all are open or have failed, or
// ctx ends; failures are counted, not fatal (such a session dials at its
// next transaction, as without preparation). Sessions that arrive later dial
// as usual. Prepared sessions that are not used by the next release (the
// switch did not happen, or went elsewhere) are closed then.
func (p *Proxy) Prepare(ctx context.Context, tenantName, addr, database string) (client.PrepareResult, error) {
	start := time.Now()
	t := p.tenantByName(tenantName)
	if t == nil {
		return client.PrepareResult{}, fmt.Errorf("proxy: prepare: %w %q", ErrUnknownTenant, tenantName)
	}
	if _, _, err := net.SplitHostPort(addr); err != nil {
		return client.PrepareResult{}, fmt.Errorf("proxy: prepare: addr %q: want host:port", addr)
	}
	cur, _ := t.routeNow()
	r := cur
	r.Addr = addr
	if database != "" {
		r.Database = database
	}
	sessions := t.sessionList()
	var res client.PrepareResult
	res.Sessions = len(sessions)
	var mu sync.Mutex
	var wg sync.WaitGroup
	sem := make(chan struct{}, prepareParallel)
	for _, s := range sessions {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			stmts, err := s.prepare(ctx, r)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				res.Failed++
				if res.FirstError == "" {
					res.FirstError = err.Error()
				}
				return
			}
			res.Opened++
			res.Statements += stmts
		}()
	}
	wg.Wait()
	res.WaitedMS = float64(time.Since(start).Microseconds()) / 1000
	p.cfg.Logf("proxy: tenant %s: prepared %d of %d sessions on %s in %.1f ms", tenantName, res.Opened, res.Sessions, addr, res.WaitedMS)
	return res, nil
}

// startupFor returns the startup parameters a new server session of s needs:
// the client's startup parameters, overridden by the settable parameters the
// session has changed since (SET application_name, search_path, ...).
func (s *session) startupFor() map[string]string {
	s.mu.Lock()
	defer s.mu.Unlock()
	params := make(map[string]string, len(s.startupParams)+len(settableParams))
	for k, v := range s.startupParams {
		params[k] = v
	}
	for _, k := range settableParams {
		if v, ok := s.mu.params[k]; ok {
			params[k] = v
		}
	}
	return params
}

// prepare opens s's server session on route r, creates there the named
// prepared statements s has now, and keeps it as s.mu.next, replacing (and
// closing) an earlier prepared one (on a hot standby too: parse analysis
// takes at most RowExclusiveLock, which recovery allows). Statements the
// server refuses are left to the switch, which replays what is missing
// (replayParses).
//
// Parsing loads the new backend's catalog caches, but when the target is a
// standby that is promoted afterwards the promotion throws them away:
// PostgreSQL 15 resets every backend's catalog, relation and plan caches at
// the end of recovery (each backend's first transaction after pg_promote runs
// InvalidateSystemCachesExtended, even with no WAL replayed since it
// opened), and the session rebuilds them at its first transaction, ~1 ms of
// CPU unthrottled. What preparing saves there is the fork and the startup.
func (s *session) prepare(ctx context.Context, r RouteConfig) (statements int, err error) {
	sc, err := s.p.dialServer(ctx, r, s.user, s.startupFor())
	if err != nil {
		return 0, err
	}
	s.parseMu.Lock()
	names := make([]string, 0, len(s.parses))
	msgs := make([][]byte, 0, len(s.parses))
	for name, raw := range s.parses {
		names, msgs = append(names, name), append(msgs, raw)
	}
	s.parseMu.Unlock()
	if len(msgs) > 0 {
		timeout := s.p.cfg.DialTimeout
		if dl, ok := ctx.Deadline(); ok {
			timeout = min(timeout, time.Until(dl))
		}
		failed, err := sc.pipeline(msgs, timeout)
		if err != nil {
			sc.close()
			return 0, fmt.Errorf("proxy: prepare: statements: %w", err)
		}
		sc.stmts = make(map[string][]byte, len(msgs))
		for i, bad := range failed {
			if !bad {
				sc.stmts[names[i]] = msgs[i]
			}
		}
	}
	s.mu.Lock()
	if s.mu.ended {
		s.mu.Unlock()
		sc.close()
		return 0, fmt.Errorf("proxy: prepare: session %d ended", s.key)
	}
	old := s.mu.next
	s.mu.next = sc
	s.mu.Unlock()
	if old != nil {
		old.close()
	}
	return len(sc.stmts), nil
}

// takeNext removes and returns s's prepared server session if it is for
// route r; a prepared session for another route is closed. nil when none.
func (s *session) takeNext(r RouteConfig) *serverConn {
	s.mu.Lock()
	sc := s.mu.next
	s.mu.next = nil
	s.mu.Unlock()
	if sc == nil {
		return nil
	}
	if !sc.serves(r) {
		sc.close()
		return nil
	}
	return sc
}

// dropNextUnless closes s's prepared server session unless it is for r.
func (s *session) dropNextUnless(r RouteConfig) {
	s.mu.Lock()
	sc := s.mu.next
	if sc != nil && !sc.serves(r) {
		s.mu.next = nil
	} else {
		sc = nil
	}
	s.mu.Unlock()
	if sc != nil {
		sc.close()
	}
}

// serves reports whether sc is a session on route r's server and database.
func (sc *serverConn) serves(r RouteConfig) bool {
	return sc.addr == r.Addr && sc.database == r.Database
}
