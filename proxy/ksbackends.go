package proxy

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/sluicedb/sluice/keyspace"
	"github.com/sluicedb/sluice/proxy/timing"
	"github.com/sluicedb/sluice/router"
)

// ksBackends is router.Backends for one keyspace client session: it opens
// the router's server sessions to partitions, passes its transactions
// through their tenants' gates, and records latencies.
//
// It also registers with each tenant it has opened a server session of,
// so that a handover sees the router's server sessions as it sees the
// tenant's own sessions': a hold names those idle on the tenant's server
// (HoldResult.IdleBackends), which the read-only fence then spares, and
// Backends names them all (the early fence admits their address). A server
// session is idle when its partition is not entered: from before a
// transaction is counted in flight (under the tenant's lock, so a hold
// never sees one in flight as idle) until after it leaves. Once held, the
// router sends an idle one nothing until release — a transaction must
// enter first — and reopens it if the route changed; if the handover rolls
// back, it goes on where it was.
type ksBackends struct {
	p     *Proxy
	wins  map[string]*timing.Window // per partition, of the keyspace
	route map[string]string         // partition → the address Enter gave

	mu struct {
		sync.Mutex
		srv     map[string]ksServer // by partition: the open server session
		busy    map[string]bool     // partitions entered (counted in flight)
		tenants map[*tenant]bool    // tenants registered with
	}
}

// ksServer is one of the router's open server sessions.
type ksServer struct {
	tenant, addr string
	pid          uint32
}

func newKsBackends(p *Proxy) *ksBackends {
	b := &ksBackends{p: p, wins: map[string]*timing.Window{}, route: map[string]string{}}
	b.mu.srv, b.mu.busy, b.mu.tenants = map[string]ksServer{}, map[string]bool{}, map[*tenant]bool{}
	return b
}

var _ router.Backends = (*ksBackends)(nil)

func (b *ksBackends) tenant(part keyspace.Partition) (*tenant, error) {
	t := b.p.tenantByName(part.Tenant)
	if t == nil {
		return nil, fmt.Errorf("partition %s: tenant %s has no route", part.Name, part.Tenant)
	}
	return t, nil
}

func (b *ksBackends) setBusy(part string, busy bool) {
	b.mu.Lock()
	b.mu.busy[part] = busy
	b.mu.Unlock()
}

func (b *ksBackends) Enter(ctx context.Context, part keyspace.Partition) (uint64, error) {
	t, err := b.tenant(part)
	if err != nil {
		return 0, err
	}
	r, gen, err := t.enterThen(ctx, func() { b.setBusy(part.Name, true) })
	if err != nil {
		return 0, err
	}
	b.route[part.Name] = r.Addr
	return gen, nil
}

func (b *ksBackends) Dial(ctx context.Context, part keyspace.Partition, user string, params map[string]string) (*router.Server, error) {
	t, err := b.tenant(part)
	if err != nil {
		return nil, err
	}
	r, gen := t.routeNow()
	srv, pid, err := b.p.dialRouter(ctx, r, part, user, params, gen)
	if err != nil {
		return nil, err
	}
	s := ksServer{tenant: part.Tenant, addr: r.Addr, pid: pid}
	b.mu.Lock()
	b.mu.srv[part.Name] = s
	register := !b.mu.tenants[t]
	b.mu.tenants[t] = true
	b.mu.Unlock()
	if register {
		t.addRouter(b)
	}
	closeSrv := srv.Close
	srv.Close = func() {
		b.mu.Lock()
		if b.mu.srv[part.Name] == s {
			delete(b.mu.srv, part.Name)
		}
		b.mu.Unlock()
		closeSrv()
	}
	return srv, nil
}

func (b *ksBackends) Leave(part keyspace.Partition, d time.Duration) {
	t := b.p.tenantByName(part.Tenant)
	if t == nil {
		b.setBusy(part.Name, false)
		return
	}
	t.leave()
	b.setBusy(part.Name, false)
	if d > 0 {
		b.p.reg.Get(timing.Key{Tenant: part.Tenant, Server: b.route[part.Name]}).RecordAt(time.Now(), d)
	}
}

func (b *ksBackends) Observe(ks string, parts []string, d, queued time.Duration) {
	now := time.Now()
	for _, name := range parts {
		w := b.wins[name]
		if w == nil {
			w = b.p.reg.Get(timing.Key{Tenant: ks, Server: name})
			b.wins[name] = w
		}
		w.RecordQueuedAt(now, d, queued)
	}
}

// backendsOn returns the pids of the session's server sessions of tenant
// on addr; with idleOnly, of those whose partition is not entered.
func (b *ksBackends) backendsOn(tenant, addr string, idleOnly bool) []int {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []int
	for part, s := range b.mu.srv {
		if s.tenant == tenant && s.addr == addr && s.pid != 0 && !(idleOnly && b.mu.busy[part]) {
			out = append(out, int(s.pid))
		}
	}
	return out
}

// close unregisters the session from its tenants (its server sessions are
// closed by the router).
func (b *ksBackends) close() {
	b.mu.Lock()
	ts := b.mu.tenants
	b.mu.tenants = map[*tenant]bool{}
	b.mu.Unlock()
	for t := range ts {
		t.removeRouter(b)
	}
}

// dialRouter opens a server session to part's database on r for the
// router and returns it with its backend's pid.
func (p *Proxy) dialRouter(ctx context.Context, r RouteConfig, part keyspace.Partition, user string, params map[string]string, gen uint64) (*router.Server, uint32, error) {
	r.Database = part.DB()
	sc, err := p.dialServer(ctx, r, user, params)
	if err != nil {
		return nil, 0, err
	}
	return &router.Server{R: sc.r, W: sc.w, Params: sc.params, Gen: gen, Close: sc.close,
		Addr: sc.addr, PID: sc.pid, Secret: sc.secret}, sc.pid, nil
}
