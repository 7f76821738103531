package agent

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"sync"
	"time"

	"github.com/sluicedb/sluice/catalog"
	"github.com/sluicedb/sluice/migration"
	"github.com/sluicedb/sluice/migration/pg"
	"github.com/sluicedb/sluice/pgcluster"
)

// Agent is one server's sluice agent: the goroutine-and-I/O shell around the
// catalog, the tenant postmasters and the migrations this server takes part in.
//
// New opens the catalog and binds the API listener; Serve reconciles the
// tenants with the catalog, then serves until its context ends. An Agent is
// safe for concurrent use.
type Agent struct {
	cfg     Config
	log     *slog.Logger
	cat     *catalog.Catalog
	ln      net.Listener
	url     string
	pgVer   string // e.g. "15.18"
	pgMajor int

	locks     sync.Map // tenant id (int64) -> *sync.Mutex: serialises lifecycle ops per tenant
	releasing sync.Map // tenant id (int64) -> time.Time: when a driver here last began its release (releasingRouter)

	tmplMu sync.Mutex // guards creation of the initdb template

	ksMu sync.Mutex // serialises keyspace creation and deletion (keyspaces.go)

	mig   migrations        // migrations in progress (migrate.go)
	rs    reshardRuns       // keyspace reconfigurations in progress (reshard.go)
	plans registry[planRun] // migration plans this agent drives now, by ID (plan.go)

	peerTLS *tls.Config         // for calls to peers and the proxy (tls.go); nil = defaults
	pgTLS   *pgcluster.TLSFiles // the tenants' copies of the agent's TLS files (tls.go); nil = none

	token        string // the API's bearer token; "" = open (Config.InsecureNoAuth)
	replPassword string // pgcluster.ReplicationRole's password in this agent's tenants (security.go)

	tgtOnce sync.Once
	tgt     migration.Target // served to source agents (target_local.go)
	relays  targetRelays     // WAL relays in front of incoming standbys (walrelay.go)
	hooks   faultHooks       // fault-injection pause point (Config.FaultHooks)
	metrics *agentMetrics    // GET /metrics (metrics.go)
	remote  remoteOverview   // GET /v1/overview's peers and proxy parts (overview.go)

	closeOnce sync.Once
	bgCtx     context.Context    // background work (analyzeLater) runs under it
	bgStop    context.CancelFunc // called by Close: background work stops
	bg        sync.WaitGroup     // background work running
}

// New validates cfg (its fields, then what they name on the host: the
// listen address, the OS user, the PostgreSQL binaries and the tenant
// settings, which PostgreSQL itself judges), binds the HTTP listener (so URL
// is known before Serve), then creates the root directory and opens the
// catalog: an invalid config (errors.Is ErrConfig, one line naming the
// field) or a listener that cannot bind leaves nothing behind. Close
// releases them if Serve is never called.
func New(cfg Config) (*Agent, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, configError{err}
	}
	ver, major, err := cfg.checkHost(context.Background())
	if err != nil {
		return nil, configError{fmt.Errorf("agent config: %w", err)}
	}
	serverTLS, peerTLS, err := cfg.transportTLS()
	if err != nil {
		return nil, configError{err}
	}
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return nil, fmt.Errorf("agent: listen %s: %w", cfg.Listen, err)
	}
	cat, err := openRoot(cfg, peerTLS)
	if err != nil {
		ln.Close()
		return nil, err
	}
	scheme := "http://"
	if serverTLS != nil {
		ln = tls.NewListener(ln, serverTLS)
		scheme = "https://"
	}
	a := &Agent{cfg: cfg, log: cfg.Logger.With("agent", cfg.Name), cat: cat, ln: ln, pgVer: ver, pgMajor: major, peerTLS: peerTLS}
	a.bgCtx, a.bgStop = context.WithCancel(context.Background())
	a.url = cfg.AdvertiseURL
	if a.url == "" {
		a.url = scheme + ln.Addr().String()
	}
	if err := a.loadSecrets(); err != nil {
		ln.Close()
		cat.Close()
		return nil, err
	}
	if a.pgTLS, err = cfg.installPGTLS(); err != nil {
		ln.Close()
		cat.Close()
		return nil, err
	}
	a.mig.init()
	a.metrics = newAgentMetrics(a)
	// Registered as soon as the listener is bound: a client may call
	// before Serve runs (requests wait in the listen queue).
	a.announce()
	return a, nil
}

// openRoot creates the root directory and its tenants directory, both
// traversable by the PostgreSQL OS user, and opens the catalog: the file in
// the root, or the etcd cluster of Config.Catalog, spoken to over mutual TLS
// with peerTLS (the agent's certificate and tls_ca) when it is not nil.
func openRoot(cfg Config, peerTLS *tls.Config) (*catalog.Catalog, error) {
	root := cfg.Root
	if err := os.MkdirAll(filepath.Join(root, "tenants"), 0o755); err != nil {
		return nil, fmt.Errorf("agent: root: %w", err)
	}
	for _, d := range []string{root, filepath.Join(root, "tenants")} {
		if err := os.Chmod(d, 0o755); err != nil {
			return nil, fmt.Errorf("agent: root: %w", err)
		}
	}
	spec, err := catalog.ParseSpec(cfg.Catalog)
	if err != nil {
		return nil, configError{fmt.Errorf("agent config: %w", err)}
	}
	if spec.Etcd() {
		cat, err := catalog.OpenEtcd(catalog.EtcdOptions{Endpoints: spec.Endpoints, Prefix: spec.Prefix, Agent: cfg.Name, TLS: peerTLS})
		if err != nil {
			return nil, fmt.Errorf("agent: %w", err)
		}
		// Placements say where proxies watching the catalog route.
		cat.SetServing(cfg.Tenant.AdvertiseHost, cfg.Tenant.Database)
		return cat, nil
	}
	cat, err := catalog.Open(filepath.Join(root, catalog.FileName))
	if err != nil {
		return nil, fmt.Errorf("agent: %w (is another agent using root %s?)", err, root)
	}
	return cat, nil
}

// URL returns the API's base URL as peers reach it.
func (a *Agent) URL() string { return a.url }

// Name returns the agent's name.
func (a *Agent) Name() string { return a.cfg.Name }

// Catalog returns the agent's catalog (for tests and tools in this process).
func (a *Agent) Catalog() *catalog.Catalog { return a.cat }

// Serve reconciles tenants and migrations with the catalog, then serves the
// HTTP API until ctx ends; it then stops accepting requests, lets running
// migrations persist their state, and closes the catalog. Tenant postmasters
// keep running: they belong to the server, not to the agent process.
func (a *Agent) Serve(ctx context.Context) error {
	defer a.Close()
	a.mig.mu.Lock()
	a.mig.base = ctx // drivers started from now on stop with the agent
	a.mig.mu.Unlock()
	a.reconcileTenants(ctx)
	srv := &http.Server{Handler: a.Handler(), ReadHeaderTimeout: 10 * time.Second, BaseContext: func(net.Listener) context.Context { return ctx },
		ErrorLog: slog.NewLogLogger(a.log.Handler(), slog.LevelWarn)}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(a.ln) }()
	a.log.Info("agent serving", "url", a.url, "root", a.cfg.Root, "pg", a.pgVer)
	a.resumeTargetRelays(ctx)
	a.resumeMigrations(ctx)
	a.resumeReshards(ctx)
	a.resumePlans()
	a.bg.Add(1)
	go func() {
		defer a.bg.Done()
		sctx, cancel := context.WithCancel(ctx) // ends with Serve's ctx or with Close
		defer cancel()
		defer context.AfterFunc(a.bgCtx, cancel)()
		a.supervise(sctx)
	}()
	select {
	case <-ctx.Done():
	case err := <-errc:
		return fmt.Errorf("agent: serve: %w", err)
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	srv.Shutdown(sctx)
	a.mig.wait()
	return nil
}

// Close releases the listener and the catalog. Serve calls it on return.
func (a *Agent) Close() error {
	var err error
	a.closeOnce.Do(func() {
		a.unannounce()
		a.ln.Close()
		a.mig.wait() // a migration's commit may still schedule background work
		a.closeTargetRelays()
		if lt, ok := a.tgt.(agentTarget); ok {
			lt.StopWAL() // what they received stays for the standby's start
		}
		a.bgStop()
		a.bg.Wait()
		err = a.cat.Close()
	})
	return err
}

// reconcileTenants brings postmasters in line with the catalog after a
// (re)start: a creation cut short is rolled back; a tenant that should serve
// but whose postmaster is dead is started. Migrating tenants are left to
// resumeMigrations.
func (a *Agent) reconcileTenants(ctx context.Context) {
	ts, err := a.cat.Tenants()
	if err != nil {
		a.log.Error("reconcile: reading catalog", "err", err)
		return
	}
	for _, tn := range ts {
		if err := pg.RemoveRetired(tn.Dir, a.cfg.RetireGrace.D(), time.Now()); err != nil {
			a.log.Warn("reconcile: removing retired directories", "tenant", tn.ID, "err", err)
		}
		switch {
		case tn.State == catalog.Creating:
			a.log.Warn("reconcile: rolling back interrupted creation", "tenant", tn.ID)
			if err := a.discardTenant(ctx, tn); err != nil {
				a.log.Error("reconcile: roll back creation", "tenant", tn.ID, "err", err)
			}
		case tn.State.Serving():
			c, err := a.cluster(tn)
			if err != nil {
				a.log.Error("reconcile", "tenant", tn.ID, "err", err)
				continue
			}
			if c.Running() {
				continue
			}
			a.log.Warn("reconcile: postmaster is down, starting it", "tenant", tn.ID, "state", tn.State)
			if err := c.Start(ctx); err != nil {
				a.log.Error("reconcile: start", "tenant", tn.ID, "err", err)
			}
		}
	}
}

// lockTenant serialises lifecycle operations on one tenant; call the
// returned function to unlock.
func (a *Agent) lockTenant(id int64) func() {
	m, _ := a.locks.LoadOrStore(id, &sync.Mutex{})
	mu := m.(*sync.Mutex)
	mu.Lock()
	return mu.Unlock
}

var pgVersionRE = regexp.MustCompile(`\(PostgreSQL\) (\d+)(\.\d+)?`)

// pgVersion runs `postgres --version` from binDir.
func pgVersion(binDir string) (string, int, error) {
	out, err := exec.Command(filepath.Join(binDir, "postgres"), "--version").Output()
	if err != nil {
		return "", 0, fmt.Errorf("agent: %s/postgres --version: %w", binDir, err)
	}
	m := pgVersionRE.FindSubmatch(out)
	if m == nil {
		return "", 0, fmt.Errorf("agent: cannot parse PostgreSQL version from %q", out)
	}
	major, _ := strconv.Atoi(string(m[1]))
	return string(m[1]) + string(m[2]), major, nil
}

// apiError is an error with the HTTP status the API answers it with.
type apiError struct {
	code int
	msg  string
}

func (e *apiError) Error() string { return e.msg }

func errf(code int, format string, args ...any) error {
	return &apiError{code: code, msg: fmt.Sprintf(format, args...)}
}

// statusOf maps an error to its HTTP status.
func statusOf(err error) int {
	var ae *apiError
	switch {
	case errors.As(err, &ae):
		return ae.code
	case errors.Is(err, catalog.ErrNotFound):
		return http.StatusNotFound
	case errors.Is(err, catalog.ErrExists), errors.Is(err, catalog.ErrBadTransition):
		return http.StatusConflict
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return http.StatusServiceUnavailable
	}
	return http.StatusInternalServerError
}
