package proxy

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicedb/sluice/catalog"
	"github.com/sluicedb/sluice/proxy/client"
	"github.com/sluicedb/sluice/proxy/scram"
	"github.com/sluicedb/sluice/proxy/timing"
	"github.com/sluicedb/sluice/router"
	"github.com/sluicedb/sluice/router/txlog"
)

// Proxy is a running (or ready to run) sluice proxy. Create it with New,
// run it with Start or Serve, stop it with Close. Safe for concurrent use.
type Proxy struct {
	cfg         Config
	tlsCfg      *tls.Config
	secrets     map[string]scram.Secret // client verification, per user
	passwords   map[string]string       // plaintext passwords for server logins
	dummySecret scram.Secret
	reg         *timing.Registry
	ho          handovers   // what handovers cost their clients (GET /v1/handovers)
	token       string      // the API's bearer token; "" = open (security.go)
	peerTLS     *tls.Config // calls to the Catalogs agents and APIClient's (tls.go); nil = plain

	ln      net.Listener
	apiLn   net.Listener
	httpSrv *http.Server

	mu struct {
		sync.Mutex
		tenants map[string]*tenant // by tenant name
		aliases map[string]*tenant // by database alias
	}
	sessMu   sync.Mutex
	sessions map[uint32]*session   // by proxy BackendKeyData process id
	conns    map[net.Conn]struct{} // every accepted client connection, for Close
	catMu    sync.Mutex
	catSeen  map[string]catalogState // catalog URL + "\x00" + tenant → what it last reported
	placed   placementRoutes         // what the etcd catalogs' placements routed (watch.go)

	ksMu      sync.Mutex
	keyspaces map[string]*router.Keyspace // by name (keyspaces.go)
	gates     map[string]*ksGate          // by keyspace name (reshard.go)
	ksFrom    map[string]string           // keyspace → the catalog URL that gave it
	txlog     *txlog.Log
	coord     *router.Coordinator

	sessionsOpen  atomic.Int64
	sessionsTotal atomic.Int64
	sessionErrors atomic.Int64
	moves         atomic.Int64
	reactivePulls atomic.Int64 // chunks a statement waited for (reshard.go)
	preparedUsed  atomic.Int64 // session moves that used a server session opened by Prepare
	cancels       atomic.Int64

	metricsOnce sync.Once            // makes metricsReg (metrics.go)
	metricsReg  *prometheus.Registry // GET /metrics

	ctx     context.Context
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	started atomic.Bool
	closed  atomic.Bool
}

// New validates cfg, loads the auth and routes files, and binds the
// listeners (so Addr and APIAddr are known at once). It does not accept
// connections until Start or Serve.
func New(cfg Config) (*Proxy, error) {
	cfg = cfg.withDefaults()
	for _, u := range cfg.Catalogs {
		if isEtcdCatalog(u) {
			spec, err := catalog.ParseSpec(u)
			if err != nil {
				return nil, configError{fmt.Errorf("proxy: --catalog: %v", err)}
			}
			// As an agent's: plain etcd only on loopback (tls.go).
			for _, ep := range spec.Endpoints {
				if cfg.TLSCA == "" && !loopbackAddr(ep) {
					return nil, configError{fmt.Errorf("proxy: --catalog %s: endpoint %s is not loopback: etcd on other hosts is spoken to with mutual TLS (--tls-ca, --tls-cert, --tls-key)", u, ep)}
				}
			}
		}
	}
	p := &Proxy{cfg: cfg, secrets: map[string]scram.Secret{}, passwords: map[string]string{}, sessions: map[uint32]*session{}, conns: map[net.Conn]struct{}{}, catSeen: map[string]catalogState{}}
	p.mu.tenants = map[string]*tenant{}
	p.mu.aliases = map[string]*tenant{}
	p.keyspaces = map[string]*router.Keyspace{}
	p.gates = map[string]*ksGate{}
	p.ksFrom = map[string]string{}
	for _, ks := range cfg.Keyspaces {
		p.installKeyspace(ks, nil, "")
	}
	p.reg = timing.NewRegistry(cfg.Window, timing.DefaultSlots)

	users := map[string]string{}
	if cfg.AuthFile != "" {
		u, err := LoadUserlist(cfg.AuthFile)
		if err != nil {
			return nil, err
		}
		users = u
	}
	for k, v := range cfg.Users {
		users[k] = v
	}
	if len(users) == 0 && !cfg.Trust {
		return nil, errors.New("proxy: no users (auth file or Users) and Trust not set")
	}
	for user, pw := range users {
		if scram.IsSecret(pw) {
			sec, err := scram.ParseSecret(pw)
			if err != nil {
				return nil, fmt.Errorf("proxy: user %q: %w", user, err)
			}
			p.secrets[user] = sec
			continue
		}
		salt := make([]byte, 16)
		rand.Read(salt)
		sec, err := scram.NewSecret(pw, salt, scram.DefaultIterations)
		if err != nil {
			return nil, fmt.Errorf("proxy: user %q: %w", user, err)
		}
		p.secrets[user] = sec
		p.passwords[user] = pw
	}
	{
		salt := make([]byte, 16)
		rand.Read(salt)
		pw := make([]byte, 16)
		rand.Read(pw)
		p.dummySecret, _ = scram.NewSecret(string(pw), salt, scram.DefaultIterations)
	}

	if err := p.loadToken(); err != nil {
		return nil, err
	}

	routes := append([]RouteConfig(nil), cfg.Routes...)
	if cfg.RoutesFile != "" {
		rs, err := LoadRoutesFile(cfg.RoutesFile)
		if err != nil {
			return nil, err
		}
		routes = append(routes, rs...)
	}
	for _, r := range routes {
		if err := p.setRoute(r, true); err != nil {
			return nil, err
		}
	}

	if cfg.TLSCert != "" || cfg.TLSKey != "" {
		cert, err := tls.LoadX509KeyPair(cfg.TLSCert, cfg.TLSKey)
		if err != nil {
			return nil, fmt.Errorf("proxy: tls: %w", err)
		}
		p.tlsCfg = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	}

	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return nil, fmt.Errorf("proxy: listen: %w", err)
	}
	apiTLS, err := p.loadAPITLS()
	if err != nil {
		ln.Close()
		return nil, err
	}
	apiLn, err := net.Listen("tcp", cfg.APIListen)
	if err != nil {
		ln.Close()
		return nil, fmt.Errorf("proxy: api listen: %w", err)
	}
	if apiTLS != nil {
		apiLn = tls.NewListener(apiLn, apiTLS)
	}
	p.ln, p.apiLn = ln, apiLn
	if err := p.openTxLog(); err != nil {
		ln.Close()
		apiLn.Close()
		return nil, err
	}
	p.httpSrv = &http.Server{Handler: p.secureAPI(p.apiHandler()), ReadHeaderTimeout: 10 * time.Second}
	return p, nil
}

// Addr returns the client listener's address (host:port).
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// APIAddr returns the HTTP API listener's address (host:port).
func (p *Proxy) APIAddr() string { return p.apiLn.Addr().String() }

// Start starts serving in background goroutines and returns. ctx ending
// closes the proxy.
func (p *Proxy) Start(ctx context.Context) error {
	if !p.started.CompareAndSwap(false, true) {
		return errors.New("proxy: already started")
	}
	if p.closed.Load() {
		return errors.New("proxy: closed")
	}
	p.ctx, p.cancel = context.WithCancel(ctx)
	p.announce()
	p.wg.Add(2)
	go func() {
		defer p.wg.Done()
		p.httpSrv.Serve(p.apiLn)
	}()
	go func() {
		defer p.wg.Done()
		p.acceptLoop()
	}()
	for _, u := range p.cfg.Catalogs {
		p.wg.Add(1)
		go func(u string) {
			defer p.wg.Done()
			if isEtcdCatalog(u) {
				spec, _ := catalog.ParseSpec(u) // checked by New
				p.watchCatalog(p.ctx, spec)
				return
			}
			p.followCatalog(p.ctx, u)
		}(u)
	}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		p.recoverLoop(p.ctx)
	}()
	go func() {
		<-p.ctx.Done()
		p.Close()
	}()
	return nil
}

// Serve is Start followed by waiting until ctx ends or Close is called.
func (p *Proxy) Serve(ctx context.Context) error {
	if err := p.Start(ctx); err != nil {
		return err
	}
	<-p.ctx.Done()
	p.Close()
	return nil
}

func (p *Proxy) acceptLoop() {
	var tempDelay time.Duration
	for {
		c, err := p.ln.Accept()
		if err != nil {
			if p.closed.Load() || errors.Is(err, net.ErrClosed) {
				return
			}
			if tempDelay == 0 {
				tempDelay = 5 * time.Millisecond
			} else if tempDelay < time.Second {
				tempDelay *= 2
			}
			p.cfg.Logf("proxy: accept: %v", err)
			time.Sleep(tempDelay)
			continue
		}
		tempDelay = 0
		if tc, ok := c.(*net.TCPConn); ok {
			tc.SetNoDelay(true)
		}
		p.sessionsTotal.Add(1)
		p.sessMu.Lock()
		if p.closed.Load() {
			p.sessMu.Unlock()
			c.Close()
			return
		}
		p.conns[c] = struct{}{}
		p.sessMu.Unlock()
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			p.serveConn(p.ctx, c)
			p.sessMu.Lock()
			delete(p.conns, c)
			p.sessMu.Unlock()
		}()
	}
}

// Close stops accepting, ends every session and waits for them. Idempotent.
func (p *Proxy) Close() error {
	if !p.closed.CompareAndSwap(false, true) {
		return nil
	}
	if p.cancel != nil {
		p.cancel()
	}
	p.unannounce()
	p.ln.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	p.httpSrv.Shutdown(ctx)
	cancel()
	p.apiLn.Close()
	p.sessMu.Lock()
	for c := range p.conns {
		c.Close()
	}
	p.sessMu.Unlock()
	// Release every hold so waiting sessions see their context end.
	p.mu.Lock()
	for _, t := range p.mu.tenants {
		t.release(0, 0) // no ramp: the proxy is closing
	}
	p.mu.Unlock()
	if p.started.Load() {
		p.wg.Wait()
	}
	p.txlog.Close()
	return nil
}

// registerSession assigns the session a fresh BackendKeyData key.
// registerSession gives s a fresh BackendKeyData (s.key, s.secret) and
// makes it findable by CancelRequests. The key is set under sessMu, which
// forwardCancel also holds when it looks s up.
func (p *Proxy) registerSession(s *session) {
	p.sessMu.Lock()
	defer p.sessMu.Unlock()
	for {
		var b [8]byte
		rand.Read(b[:])
		k := binary.BigEndian.Uint32(b[:4]) & 0x7fffffff
		if k == 0 || p.sessions[k] != nil {
			continue
		}
		s.key = k
		copy(s.secret[:], b[4:])
		p.sessions[k] = s
		return
	}
}

func (p *Proxy) unregisterSession(s *session) {
	p.sessMu.Lock()
	if p.sessions[s.key] == s {
		delete(p.sessions, s.key)
	}
	p.sessMu.Unlock()
}

// forwardCancel passes a client's CancelRequest to the backend now serving
// the session it names. Unknown or mismatched keys are ignored, as
// PostgreSQL does.
func (p *Proxy) forwardCancel(ctx context.Context, pid uint32, secret []byte) {
	p.sessMu.Lock()
	s := p.sessions[pid]
	ok := s != nil && len(secret) == 4 && [4]byte(secret) == s.secret
	p.sessMu.Unlock()
	if !ok {
		return
	}
	p.cancelSession(s)
}

// cancelSession sends a CancelRequest to the session's current backend
// (a keyspace session's: to those running its statement).
func (p *Proxy) cancelSession(s *session) bool {
	if s.rs != nil {
		return p.cancelKeyspace(s.rs)
	}
	s.mu.Lock()
	sc := s.mu.srv
	s.mu.Unlock()
	if sc == nil {
		return false
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := sc.cancel(ctx); err != nil {
		p.cfg.Logf("%v", err)
		return false
	}
	p.cancels.Add(1)
	return true
}

// serverPassword returns the password the proxy logs in to servers with.
func (p *Proxy) serverPassword(user string) string { return p.passwords[user] }

func (p *Proxy) tenantByAlias(alias string) *tenant {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.mu.aliases[alias]
}

func (p *Proxy) tenantByName(name string) *tenant {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.mu.tenants[name]
}

// setRoute creates or updates a tenant's route.
func (p *Proxy) setRoute(r RouteConfig, fromAPI bool) error {
	if r.Database == "" {
		r.Database = r.Tenant
	}
	if len(r.Aliases) == 0 {
		r.Aliases = []string{r.Tenant}
	}
	if err := r.validate(); err != nil {
		return fmt.Errorf("proxy: route: %w", err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, a := range r.Aliases {
		if o := p.mu.aliases[a]; o != nil && o.name != r.Tenant {
			return fmt.Errorf("proxy: route: alias %q already belongs to tenant %q", a, o.name)
		}
	}
	t := p.mu.tenants[r.Tenant]
	if t == nil {
		t = newTenant(r)
		p.mu.tenants[r.Tenant] = t
	} else {
		if t.setRoute(r.Addr, r.Database, fromAPI) {
			p.cfg.Logf("proxy: tenant %s now at %s/%s", r.Tenant, r.Addr, r.Database)
		}
		t.mu.Lock()
		old := t.mu.route.Aliases
		t.mu.route.Aliases = r.Aliases
		t.mu.Unlock()
		for _, a := range old {
			delete(p.mu.aliases, a)
		}
	}
	for _, a := range r.Aliases {
		p.mu.aliases[a] = t
	}
	return nil
}

// Routes returns every route, sorted by tenant.
func (p *Proxy) routes() []routeView {
	p.mu.Lock()
	ts := make([]*tenant, 0, len(p.mu.tenants))
	for _, t := range p.mu.tenants {
		ts = append(ts, t)
	}
	p.mu.Unlock()
	out := make([]routeView, 0, len(ts))
	for _, t := range ts {
		t.mu.Lock()
		out = append(out, routeView{Tenant: t.name, Aliases: t.mu.route.Aliases, Addr: t.mu.route.Addr,
			Database: t.mu.route.Database, Held: t.mu.held, Sessions: len(t.mu.sessions) + len(t.mu.routers)})
		t.mu.Unlock()
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Tenant < out[j].Tenant })
	return out
}

type routeView struct {
	Tenant   string   `json:"tenant"`
	Aliases  []string `json:"aliases"`
	Addr     string   `json:"addr"`
	Database string   `json:"database"`
	Held     bool     `json:"held"`
	Sessions int      `json:"sessions"`
}

// Hold, Switch and Release are the in-process form of the handover API.

// Hold holds tenant; see client.Router.
func (p *Proxy) Hold(ctx context.Context, tenantName string, deadline time.Duration) (client.HoldResult, error) {
	t := p.tenantByName(tenantName)
	if t == nil {
		return client.HoldResult{}, fmt.Errorf("proxy: hold: %w %q", ErrUnknownTenant, tenantName)
	}
	now := time.Now()
	r, _ := t.routeNow()
	p.ho.held(tenantName, r.Addr, now, p.windowOf(tenantName, r.Addr, now))
	return t.hold(ctx, deadline, p.cfg.HoldGrace, p.cancelSession), nil
}

// Switch points tenant at addr (and database, when not "").
func (p *Proxy) Switch(tenantName, addr, database string) error {
	t := p.tenantByName(tenantName)
	if t == nil {
		return fmt.Errorf("proxy: switch: %w %q", ErrUnknownTenant, tenantName)
	}
	if _, _, err := net.SplitHostPort(addr); err != nil {
		return fmt.Errorf("proxy: switch: addr %q: want host:port", addr)
	}
	if t.setRoute(addr, database, true) {
		p.cfg.Logf("proxy: tenant %s switched to %s", tenantName, addr)
	}
	return nil
}

// Backends returns tenant's current server and the PostgreSQL pids of its
// sessions' server sessions there (sessions between servers, or not yet
// connected, are left out), the keyspace router's among them.
func (p *Proxy) Backends(tenantName string) (client.Backends, error) {
	t := p.tenantByName(tenantName)
	if t == nil {
		return client.Backends{}, fmt.Errorf("proxy: backends: %w %q", ErrUnknownTenant, tenantName)
	}
	r, _ := t.routeNow()
	res := client.Backends{Addr: r.Addr, PIDs: []int{}}
	for _, s := range t.sessionList() {
		if pid, ok := s.backendOn(r.Addr); ok {
			res.PIDs = append(res.PIDs, int(pid))
		}
	}
	res.PIDs = append(res.PIDs, t.routerBackends(r.Addr, false)...)
	return res, nil
}

// Release lifts the hold on tenant.
func (p *Proxy) Release(tenantName string) error {
	_, err := p.ReleaseAt(tenantName)
	return err
}

// ReleaseAt is Release that also returns when the held sessions were let go
// (before the unused prepared server sessions are closed).
func (p *Proxy) ReleaseAt(tenantName string) (time.Time, error) {
	t := p.tenantByName(tenantName)
	if t == nil {
		return time.Time{}, fmt.Errorf("proxy: release: %w %q", ErrUnknownTenant, tenantName)
	}
	at, ramp := t.release(p.cfg.ReleaseLimit, p.cfg.ReleaseWindow)
	if ramp {
		p.cfg.Logf("proxy: tenant %s released onto a new server: at most %d transactions in flight for %s", tenantName, p.cfg.ReleaseLimit, p.cfg.ReleaseWindow)
	}
	// Server sessions prepared for a switch that did not happen (or went
	// elsewhere) are of no further use.
	r, _ := t.routeNow()
	p.measureHandover(tenantName, r.Addr, at)
	for _, s := range t.sessionList() {
		s.dropNextUnless(r)
	}
	return at, nil
}

// Handovers returns the recorded handovers of tenant ("" = all), oldest
// first (client.Handover; GET /v1/handovers).
func (p *Proxy) Handovers(tenantName string) []client.Handover { return p.ho.list(tenantName) }

// ErrUnknownTenant is wrapped by errors about a tenant without a route.
var ErrUnknownTenant = errors.New("unknown tenant")

// Latency returns the windows matching tenant and server ("" = any), as of now.
func (p *Proxy) Latency(tenantName, server string) []timing.Series {
	return p.reg.QueryAt(time.Now(), timing.Filter{Tenant: tenantName, Server: server})
}
