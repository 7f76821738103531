package proxy

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgproto3"
	"github.com/sluicedb/sluice/keyspace"
	"github.com/sluicedb/sluice/router"
	"github.com/sluicedb/sluice/router/txlog"
)

// Keyspaces: a client whose startup names a keyspace (not a tenant alias)
// as its database is served by package router, which sends each of its
// transactions to the partitions owning its keys. Partitions are databases
// in tenants this proxy routes, so a partition follows its tenant through a
// migration and a handover holds its transactions like a tenant session's.
// Keyspaces come from Config.Keyspaces and from every catalog's
// GET /v1/keyspaces. Transactions that wrote on several partitions commit
// with two-phase commit; the decisions are logged in Config.TxLog, and the
// proxy resolves its in-doubt transactions at start and every
// recoverEvery.

// analysisCacheSize bounds each keyspace's cache of analysed statements.
const analysisCacheSize = 4096

// recoverEvery is how often the proxy resolves its in-doubt transactions
// (those whose COMMIT PREPARED failed, or left by a crash).
const recoverEvery = 10 * time.Second

func (p *Proxy) keyspace(name string) *router.Keyspace {
	p.ksMu.Lock()
	defer p.ksMu.Unlock()
	return p.keyspaces[name]
}

func (p *Proxy) keyspaceList() []*router.Keyspace {
	p.ksMu.Lock()
	defer p.ksMu.Unlock()
	out := make([]*router.Keyspace, 0, len(p.keyspaces))
	for _, k := range p.keyspaces {
		out = append(out, k)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].KS.Name < out[j].KS.Name })
	return out
}

// openTxLog opens the two-phase commit decision log.
func (p *Proxy) openTxLog() error {
	path := p.cfg.TxLog
	if path == "" {
		dir, err := os.UserCacheDir()
		if err != nil {
			dir = os.TempDir()
		}
		_, port, _ := strings.Cut(p.Addr(), ":")
		path = filepath.Join(dir, "sluice", "proxy-"+port+".txlog")
	}
	l, err := txlog.Open(path)
	if err != nil {
		return fmt.Errorf("proxy: %w", err)
	}
	p.txlog = l
	p.coord = router.NewCoordinator(l)
	p.coord.Hook = p.cfg.TwoPCHook
	return nil
}

// pollKeyspaces reads an agent's GET /v1/keyspaces (404: an agent without
// keyspaces).
func (p *Proxy) pollKeyspaces(ctx context.Context, hc *http.Client, base string) error {
	var raw []json.RawMessage
	if _, err := getJSON(ctx, hc, base+"/v1/keyspaces", &raw); err != nil {
		return err
	}
	listed := map[string]bool{}
	for _, r := range raw {
		ks, err := keyspace.Decode(r)
		if err != nil {
			return fmt.Errorf("GET /v1/keyspaces: %w", err)
		}
		listed[ks.Name] = true
		// The reshard status is read after the keyspace: a new epoch is
		// installed with the reconfiguration that brought it (reshard.go).
		old := p.keyspace(ks.Name)
		if old != nil && old.KS.Epoch == ks.Epoch && old.Moving == nil {
			p.ksMu.Lock()
			p.ksFrom[ks.Name] = base // installed by its agent's call: this catalog has it
			p.ksMu.Unlock()
			continue
		}
		var v *reshardView
		if _, err := getJSON(ctx, hc, base+"/v1/keyspaces/"+url.PathEscape(ks.Name)+"/reshard?chunks=1", &v); err != nil {
			return err
		}
		if err := p.installKeyspace(ks, v, base); err != nil {
			return fmt.Errorf("keyspace %s: %w", ks.Name, err)
		}
		p.ksMu.Lock()
		p.ksFrom[ks.Name] = base
		p.ksMu.Unlock()
	}
	p.forgetKeyspaces(base, listed)
	return nil
}

// forgetKeyspaces stops serving the keyspaces catalog base gave and no
// longer lists (deleted there); its sessions end with their transaction's
// next statement finding no keyspace. The two-phase commit log keeps
// their decisions.
func (p *Proxy) forgetKeyspaces(base string, listed map[string]bool) {
	p.ksMu.Lock()
	defer p.ksMu.Unlock()
	for name, from := range p.ksFrom {
		if from == base && !listed[name] {
			delete(p.keyspaces, name)
			delete(p.ksFrom, name)
			p.cfg.Logf("proxy: keyspace %s: no longer in catalog %s", name, base)
		}
	}
}

// recoverLoop resolves in-doubt transactions of every keyspace now and
// every recoverEvery until ctx ends.
func (p *Proxy) recoverLoop(ctx context.Context) {
	t := time.NewTicker(recoverEvery)
	defer t.Stop()
	for {
		p.recoverAll(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (p *Proxy) recoverAll(ctx context.Context) {
	lister := p.anyUser()
	if lister == "" {
		return
	}
	for _, k := range p.keyspaceList() {
		c, r, err := p.coord.Recover(ctx, k.KS, lister, p.dialPartition)
		if ctx.Err() != nil {
			return // closing
		}
		if err != nil {
			p.cfg.Logf("proxy: keyspace %s: resolving in-doubt transactions: %v", k.KS.Name, err)
		}
		if c+r > 0 {
			p.cfg.Logf("proxy: keyspace %s: resolved in-doubt transactions: %d committed, %d rolled back", k.KS.Name, c, r)
		}
	}
}

// anyUser is a user the proxy can log in to servers as (to list prepared
// transactions): the first by name of those with a plaintext password, or,
// for a Trust proxy without any, "postgres" (servers that trust the proxy
// trust that name too). "" when there is none: recovery waits for one.
func (p *Proxy) anyUser() string {
	names := slices.Sorted(maps.Keys(p.passwords))
	switch {
	case len(names) > 0:
		return names[0]
	case p.cfg.Trust:
		return "postgres"
	}
	return ""
}

// dialPartition opens a server session to part as user outside any gate.
func (p *Proxy) dialPartition(ctx context.Context, part keyspace.Partition, user string) (*router.Server, error) {
	t := p.tenantByName(part.Tenant)
	if t == nil {
		return nil, fmt.Errorf("partition %s: tenant %s has no route", part.Name, part.Tenant)
	}
	r, gen := t.routeNow()
	srv, _, err := p.dialRouter(ctx, r, part, user, nil, gen)
	return srv, err
}

// serveKeyspace runs an authenticated client session on keyspace k: the
// rest of the startup (parameters from the first partition), then the
// router until the client leaves. The session is registered for
// CancelRequests like a tenant's (registerSession): one cancels what the
// router is running for it (cancelKeyspace).
func (s *session) serveKeyspace(ctx context.Context, k *router.Keyspace) error {
	p := s.p
	name := k.KS.Name
	kb := newKsBackends(p)
	defer kb.close()
	last := k
	g := p.gate(name)
	release := g.done
	rs := router.New(router.Config{
		User:   s.user,
		Params: s.startupParams,
		Keyspace: func() *router.Keyspace { // the last version known: a deleted keyspace's sessions fail at admission
			if k := p.keyspace(name); k != nil {
				last = k
			}
			return last
		},
		Admit: func(ctx context.Context) (*router.Keyspace, func(), error) {
			k, err := p.admitKeyspace(ctx, g, name)
			return k, release, err
		},
		Backends:    kb,
		Coordinator: p.coord,
		Logf:        p.cfg.Logf,
	}, s.cr, s.cw)
	defer rs.Close()
	params, err := rs.Start(ctx)
	if err != nil {
		s.cw.Write(encodeMsg(nil, fatal(codeCannotConnect, err.Error())))
		s.cw.Flush()
		return err
	}
	s.rs = rs // before registerSession: forwardCancel finds s through it
	p.registerSession(s)
	defer p.unregisterSession(s)
	out := encodeMsg(nil, &pgproto3.AuthenticationOk{})
	for k, v := range params {
		out = encodeMsg(out, &pgproto3.ParameterStatus{Name: k, Value: v})
	}
	out = encodeMsg(out, &pgproto3.BackendKeyData{ProcessID: s.key, SecretKey: s.secret[:]})
	out = encodeMsg(out, &pgproto3.ReadyForQuery{TxStatus: 'I'})
	if _, err := s.cw.Write(out); err != nil {
		return err
	}
	if err := s.cw.Flush(); err != nil {
		return err
	}
	p.sessionsOpen.Add(1)
	defer p.sessionsOpen.Add(-1)
	s.conn.SetDeadline(time.Time{})
	return rs.Serve(ctx)
}

// cancelKeyspace sends a CancelRequest to each server session running a
// keyspace session's statement now (one partition, or each of a
// scatter's); it reports whether one was sent.
func (p *Proxy) cancelKeyspace(rs *router.Session) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	sent := false
	for _, srv := range rs.Busy() {
		if srv.PID == 0 {
			continue
		}
		if err := sendCancel(ctx, srv.Addr, srv.PID, srv.Secret); err != nil {
			p.cfg.Logf("%v", err)
			continue
		}
		p.cancels.Add(1)
		sent = true
	}
	return sent
}
