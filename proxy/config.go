package proxy

import (
	"encoding/json"
	"fmt"
	"net"
	"os"
	"time"

	"github.com/sluicedb/sluice/keyspace"
)

// Tunables, with units.
const (
	// DefaultWindow is the latency window length (3 s, DESIGN.md §3).
	DefaultWindow = 3 * time.Second
	// DefaultMaxMessage is the largest client message accepted, bytes (64 MiB;
	// PostgreSQL itself allows 1 GiB for some messages). Larger gets 08P01.
	DefaultMaxMessage = 64 << 20
	// DefaultCatalogPoll is how often each catalog URL is polled.
	DefaultCatalogPoll = time.Second
	// DefaultDialTimeout bounds opening a server connection (TCP + startup + auth).
	DefaultDialTimeout = 10 * time.Second
	// DefaultReleaseWindow is how long a release ramp lasts (Config.ReleaseLimit).
	DefaultReleaseWindow = time.Second
	// DefaultStartupTimeout bounds a client's startup and authentication.
	DefaultStartupTimeout = 30 * time.Second
	// DefaultHoldGrace is Config.HoldGrace's default (50 ms): a cancel
	// reaches a local backend and its error the client in a few ms; the
	// grace adds to the freeze of every held session only when a statement
	// is running at the hold's deadline (docs/design.md, "Handover
	// deadline").
	DefaultHoldGrace = 50 * time.Millisecond
)

// RouteConfig is one tenant's route as configured (static file or Config.Routes).
type RouteConfig struct {
	Tenant   string   `json:"tenant"`
	Aliases  []string `json:"aliases,omitempty"` // database names clients use; default [Tenant]
	Addr     string   `json:"addr"`              // server host:port; a host starting with "/" is a Unix socket directory, as libpq's host (e.g. "/var/run/postgresql:5432")
	Database string   `json:"database"`          // database on the server; default Tenant
}

// Config configures a Proxy. Zero values take the defaults named.
type Config struct {
	// Listen is the client (PostgreSQL protocol) listen address. Default "127.0.0.1:6432";
	// use "127.0.0.1:0" for a free port (tests).
	Listen string
	// APIListen is the HTTP API listen address. Default "127.0.0.1:0".
	APIListen string

	// AuthFile is a PgBouncer-style userlist.txt: lines `"user" "password"`,
	// the password plaintext or a SCRAM-SHA-256 secret.
	AuthFile string
	// Users are in-memory credentials (user → plaintext password or
	// SCRAM-SHA-256 secret), merged over AuthFile's.
	Users map[string]string
	// Trust accepts clients without a password (and logs in to servers with
	// the client's user name and the password from Users if there is one).
	// Required to be set explicitly when there are no users; for tests and
	// loopback demos only.
	Trust bool

	// TokenFile holds the token every API request must carry as
	// "Authorization: Bearer <token>" (all but GET /metrics), made at New
	// (32 random bytes, mode 0600) if missing; an existing file readable by
	// others is refused. `sluice proxy` defaults it to DefaultTokenFile.
	TokenFile string
	// Token, if set, is the token itself instead of TokenFile's. With
	// neither, and InsecureNoAuth unset, New makes a random token kept in
	// memory only (Token, APIClient).
	Token string
	// InsecureNoAuth serves the API without a token: any local process may
	// re-route or hold tenants. Start logs a warning. Throwaway setups only.
	InsecureNoAuth bool
	// CatalogTokenFile holds the token sent to every Catalogs URL. Empty:
	// each URL gets the token its agent registered on this host (package
	// internal/auth), none if it registered none.
	CatalogTokenFile string

	// Routes are the static routes.
	Routes []RouteConfig
	// RoutesFile, if set, is a JSON file holding a []RouteConfig, loaded at New.
	RoutesFile string
	// Catalogs are agent base URLs polled at CatalogPoll for GET
	// /v1/tenants, or etcd catalogs shared by agents
	// (etcd://host:port[,host:port...]/prefix) whose placements the proxy
	// watches (watch.go; with TLSCA it speaks to etcd over mutual TLS with
	// TLSCert, as agents do; without TLSCA the endpoints must be loopback).
	Catalogs    []string
	CatalogPoll time.Duration

	// Window is the latency window length. Default DefaultWindow.
	Window time.Duration

	// TLSCert and TLSKey (PEM files) enable TLS for clients that ask for it.
	TLSCert, TLSKey string
	// TLSCA (PEM file) is the CA of sluice's own certificates (sluice
	// certs). With it the API is HTTPS only and mutual: it presents TLSCert
	// (required then) and every caller — an agent handing a tenant over,
	// the CLI — must present a certificate chaining to TLSCA; the proxy
	// presents TLSCert to the Catalogs agents and trusts TLSCA for theirs.
	// Empty: the API is plain HTTP with the token, allowed only on a
	// loopback APIListen (security.go).
	TLSCA string

	// ServerSSLMode is the sslmode for server connections (libpq values). Default "disable".
	ServerSSLMode string

	// MaxMessage is the largest client message accepted, bytes. Default DefaultMaxMessage.
	MaxMessage int
	// DialTimeout bounds opening a server session. Default DefaultDialTimeout.
	DialTimeout time.Duration

	// ReleaseLimit, if > 0, starts a release ramp whenever a handover's
	// release moves a tenant: for ReleaseWindow after it, at most
	// ReleaseLimit of the tenant's transactions are in flight, the others
	// wait at their first message (and the wait counts in their latency).
	// A freshly promoted server's sessions each spend extra CPU on their
	// first transactions; started all at once on a CPU-capped server they
	// share it and all finish late, admitted a few at a time most finish
	// early. 0 = off. ReleaseWindow defaults to DefaultReleaseWindow.
	ReleaseLimit  int
	ReleaseWindow time.Duration

	// HoldGrace is how long a hold waits, after cancelling the statements
	// still running at its deadline, for their transactions to end before
	// it terminates their sessions (tenant.hold). > 0; default
	// DefaultHoldGrace. A hold's deadline is the caller's (the API's
	// deadline_ms, default migration.DefaultHoldDeadline).
	HoldGrace time.Duration

	// Keyspaces are static keyspaces (validated), besides those the
	// Catalogs serve.
	Keyspaces []*keyspace.Keyspace
	// TxLog is the two-phase commit decision log's file. Default
	// proxy-<port>.txlog in the user's cache directory under sluice/. Two
	// proxies must not share one.
	TxLog string
	// TwoPCHook, if set, is called at the two-phase commit's fault points
	// (router.Coordinator.Hook): tests only.
	TwoPCHook func(point string)

	// Logf, if set, receives one line per notable event (session errors, route changes).
	Logf func(format string, args ...any)
}

func (c Config) withDefaults() Config {
	if c.Listen == "" {
		c.Listen = "127.0.0.1:6432"
	}
	if c.APIListen == "" {
		c.APIListen = "127.0.0.1:0"
	}
	if c.Window <= 0 {
		c.Window = DefaultWindow
	}
	if c.MaxMessage <= 0 {
		c.MaxMessage = DefaultMaxMessage
	}
	if c.CatalogPoll <= 0 {
		c.CatalogPoll = DefaultCatalogPoll
	}
	if c.DialTimeout <= 0 {
		c.DialTimeout = DefaultDialTimeout
	}
	if c.HoldGrace <= 0 {
		c.HoldGrace = DefaultHoldGrace
	}
	if c.ReleaseWindow <= 0 {
		c.ReleaseWindow = DefaultReleaseWindow
	}
	if c.ServerSSLMode == "" {
		c.ServerSSLMode = "disable"
	}
	if c.Logf == nil {
		c.Logf = func(string, ...any) {}
	}
	return c
}

// LoadRoutesFile reads a JSON []RouteConfig.
func LoadRoutesFile(path string) ([]RouteConfig, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("proxy: routes file: %w", err)
	}
	var rs []RouteConfig
	if err := json.Unmarshal(b, &rs); err != nil {
		return nil, fmt.Errorf("proxy: routes file %s: %w", path, err)
	}
	for i, r := range rs {
		if err := r.validate(); err != nil {
			return nil, fmt.Errorf("proxy: routes file %s: entry %d: %w", path, i, err)
		}
	}
	return rs, nil
}

func (r RouteConfig) validate() error {
	if r.Tenant == "" {
		return fmt.Errorf("route without tenant")
	}
	if _, _, err := net.SplitHostPort(r.Addr); err != nil {
		return fmt.Errorf("tenant %q: addr %q: want host:port", r.Tenant, r.Addr)
	}
	return nil
}

// DefaultProcs is the GOMAXPROCS `sluice proxy` runs with unless told
// otherwise: 1, like PgBouncer's one thread. With 2 Ps the runtime wakes the
// idle P's thread and spins on nearly every ready goroutine, which cost the
// relay 10–20 % more CPU per transaction on a 2-core machine
// (docs/results.md, the proxy benchmark; `sluice bench proxy --proxy-procs 0`
// measures one P per core).
const DefaultProcs = 1
