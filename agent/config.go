package agent

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/sluicedb/sluice/catalog"
	"github.com/sluicedb/sluice/control"
	"github.com/sluicedb/sluice/migration"
	"github.com/sluicedb/sluice/monitor"
	"github.com/sluicedb/sluice/pgcluster"
)

// Config is an agent's configuration, read from a JSON file:
//
//	{
//	  "name": "db1",
//	  "root": "/var/lib/sluice/db1",
//	  "listen": "127.0.0.1:7001",
//	  "catalog": "",
//	  "pg_bin_dir": "/usr/lib/postgresql/15/bin",
//	  "capacity_bytes": 0,
//	  "tenant": {
//	    "base_port": 15000,
//	    "listen_addr": "127.0.0.1",
//	    "shared_buffers": "128MB",
//	    "settings": {"max_connections": "100"}
//	  },
//	  "peers": {"db2": "http://10.0.0.2:7001"},
//	  "peer_token_files": {"db2": "/etc/sluice/db2.token"},
//	  "proxy": "http://127.0.0.1:6480",
//	  "insecure_loopback": true
//	}
//
// An agent reachable from other hosts replaces insecure_loopback with
// "tls_cert", "tls_key" and "tls_ca" (sluice certs; tls.go).
type Config struct {
	// Name identifies the agent to its peers and in migration records. Required.
	Name string `json:"name"`
	// Root is the directory the agent owns: catalog.db, tenants/<id>/,
	// template/. Created if missing. Required.
	Root string `json:"root"`
	// Listen is the HTTP API's address, host:port ("127.0.0.1:0" picks a port).
	// Default "127.0.0.1:7001".
	Listen string `json:"listen"`
	// Catalog is where the agent keeps its catalog: "" (the default) the
	// embedded bbolt file <root>/catalog.db, for agents that share nothing;
	// or "etcd://host:port[,host:port...]/prefix", an etcd cluster the
	// fleet's agents share (package catalog: each agent's records under
	// <prefix>/agents/<name>/, tenant placement and IDs shared, a
	// migration's driver fenced by its etcd lease). The agents of one fleet
	// name the same cluster and prefix, each under its own unique name.
	Catalog string `json:"catalog"`
	// AdvertiseURL is the API's URL as peers should reach it. Default
	// "http://" + the bound listen address.
	AdvertiseURL string `json:"advertise_url"`
	// PGBinDir holds initdb, pg_ctl and postgres. Default pgcluster.DefaultBinDir.
	PGBinDir string `json:"pg_bin_dir"`
	// OSUser runs PostgreSQL when the agent runs as root. Default "postgres".
	OSUser string `json:"os_user"`
	// CapacityBytes caps the bytes tenants may occupy under Root (bytes);
	// 0 means the free space of Root's filesystem is the only limit.
	CapacityBytes int64 `json:"capacity_bytes"`
	// ContractMs is the latency contract (ms, mean transaction latency) a
	// migration plan holds this server's tenants to unless the plan names
	// one (plan.Spec.ContractsMs); 0 = plan.DefaultContractMs (10 ms).
	// The operator's decision, per server.
	ContractMs float64 `json:"contract_ms,omitempty"`
	// Tenant holds the defaults every new tenant gets.
	Tenant TenantDefaults `json:"tenant"`
	// Peers maps other agents' names to their API URLs: the only agents
	// this one migrates tenants to ("--to db2", or a peer's URL). A
	// migration to any other agent is refused before anything changes.
	Peers map[string]string `json:"peers"`
	// PeerTokenFiles maps a peer's name to the file holding the token its
	// API requires; a peer not named here gets the token in PeerTokenFile,
	// or else, if that is empty, the one the peer registered on this host
	// (package internal/auth). A token goes to its peer's URL only.
	PeerTokenFiles map[string]string `json:"peer_token_files"`
	// PeerTokenFile holds the one token every peer without its own entry in
	// PeerTokenFiles requires (agents sharing one token). Empty: see
	// PeerTokenFiles.
	PeerTokenFile string `json:"peer_token_file"`
	// TokenFile holds the token every API request must carry as
	// "Authorization: Bearer <token>" (all but GET /metrics). Made at first
	// start with 32 random bytes, mode 0600, if missing; an existing file
	// readable by others is refused. Default <root>/token.
	TokenFile string `json:"token_file"`
	// Token, if set, is the token itself instead of TokenFile's (for
	// embedding the agent; prefer token_file in a config file).
	Token string `json:"token"`
	// InsecureNoAuth runs the API without a token: any local process may
	// create, migrate and delete tenants. The agent logs a warning at start.
	// For throwaway experiments only.
	InsecureNoAuth bool `json:"insecure_no_auth"`
	// TLSCert and TLSKey (PEM files) are the agent's certificate and key,
	// TLSCA (PEM file) the CA that every caller's certificate — the CLI's,
	// a proxy's, a peer agent's — must chain to; the three go together. With
	// them the API, and so every stream between agents, is HTTPS with
	// mutual TLS only (tls.go); the agent presents TLSCert to its peers and
	// its proxy (a certificate with the client usage too: sluice certs
	// issue); Peers must then be https://, Proxy https:// or loopback. The
	// tenants serve TLS with the same certificate, and a migration's standby
	// streams over it. Required unless InsecureLoopback.
	TLSCert string `json:"tls_cert"`
	TLSKey  string `json:"tls_key"`
	TLSCA   string `json:"tls_ca"`
	// InsecureLoopback serves the API as plain HTTP (token only), without
	// certificates: allowed only when Listen is a loopback address, where
	// no byte leaves the host (one-machine demos and tests). Excludes the
	// TLS fields. `sluice agent --insecure-loopback` sets it.
	InsecureLoopback bool `json:"insecure_loopback,omitempty"`
	// FaultHooks adds the fault-injection endpoints /v1/debug/pause and
	// /v1/debug/resume (faulthooks.go), for tests that kill processes at
	// named points of a migration. Default false; not for production.
	FaultHooks bool `json:"fault_hooks,omitempty"`
	// Proxy is the sluice proxy's API URL used for handover (hold, switch,
	// release). Empty: no proxy; clients find the new owner themselves.
	Proxy string `json:"proxy"`
	// Proxies are further proxies in front of the same tenants (several
	// proxies serve the clients of one tenant): a handover holds, switches
	// and releases the tenant on Proxy and on every one of them, and goes on
	// only when all have answered; one that does not answer in time makes
	// the handover roll back (router_fan.go). Proxy alone is the control
	// loop's latency source. Requires Proxy.
	Proxies []string `json:"proxies"`
	// ProxyTokenFile holds the token of the proxy's API. Empty: the one the
	// proxy registered on this host for its URL.
	ProxyTokenFile string `json:"proxy_token_file"`
	// CPUStat is the cpu.stat file of the server's cgroup (its CFS
	// bandwidth counters), whose throttled share the control loop records
	// each step: how much of the time the server wanted more CPU than its
	// quota. Empty: the cgroup this agent runs in (run it in the server's
	// cgroup, beside its tenants), if one is found; "off": none.
	CPUStat string `json:"cpu_stat"`
	// RetireGrace is how long a migrated-away tenant's data directory is kept
	// (renamed <dir>.retired-<unix time>) before removal, e.g. "10m"; "0s"
	// keeps it only until the paced background purge starts
	// (pg.PurgeDelay after the handover). Default 10m.
	RetireGrace *Duration `json:"retire_grace"`
	// AnalyzeAfter is how long after a migration commits here the agent
	// runs ANALYZE in every database of the tenant it received, e.g. "30s";
	// "0s" never. A promoted standby starts with empty cumulative statistics
	// (pg_stat_user_tables: n_live_tup 0, n_dead_tup 0), so autovacuum does
	// not see the dead tuples the tenant came with, and a tenant moved more
	// often than its autovacuum interval is never vacuumed; ANALYZE
	// re-estimates both counts. It runs cost-limited (vacuum_cost_delay
	// AnalyzeCostDelay), after the handover's backlog has drained. Default
	// DefaultAnalyzeAfter.
	AnalyzeAfter *Duration `json:"analyze_after"`
	// InterferenceModel is the interference controller's model of this
	// host's disk: a model file (control.ModelFile) written by `sluice lab
	// tune classifier` on this host. Empty: the thesis's coefficients
	// (control.DefaultModel), which were fitted on another host and may
	// never fire here. A missing, malformed file, or one for other
	// features, is a config error.
	InterferenceModel string `json:"interference_model"`
	// model is InterferenceModel loaded; nil = the default.
	model *control.Model

	// RouterFor, if set, supplies the handover Router of a migration of
	// tenant id instead of Proxy (tests, benchmarks). Not in JSON.
	RouterFor func(tenant int64) migration.Router `json:"-"`

	// Logger receives the agent's log; default slog's default logger. Not in JSON.
	Logger *slog.Logger `json:"-"`
}

// TenantDefaults configure the postmasters the agent creates.
type TenantDefaults struct {
	// BasePort: tenant id N listens on BasePort+N. Default 15000.
	BasePort int `json:"base_port"`
	// ListenAddr is each tenant's listen_addresses. Default "127.0.0.1".
	ListenAddr string `json:"listen_addr"`
	// AdvertiseHost is the host clients (the proxy) connect to. Default
	// ListenAddr, or "127.0.0.1" when ListenAddr is a wildcard.
	AdvertiseHost string `json:"advertise_host"`
	// Database is the database the proxy is told to use. Default "postgres".
	Database string `json:"database"`
	// SharedBuffers is shared_buffers (PostgreSQL units, e.g. "128MB"). Default "32MB".
	SharedBuffers string `json:"shared_buffers"`
	// WALSegSizeMB is the tenants' WAL segment size in MiB (initdb
	// --wal-segsize: a power of 2). Default 1: a promotion copies the last
	// segment to the new timeline, so 1 MiB instead of PostgreSQL's 16 halves
	// a handover's freeze (docs/results.md, the handover benchmark).
	WALSegSizeMB int `json:"wal_segsize_mb"`
	// Settings are further postgresql.conf parameters (raw values).
	Settings map[string]string `json:"settings"`
}

// ErrConfig matches (errors.Is) every error New returns for an invalid Config.
var ErrConfig = errors.New("invalid agent config")

// configError marks an invalid-config error for errors.Is(err, ErrConfig).
type configError struct{ error }

func (e configError) Is(target error) bool { return target == ErrConfig }
func (e configError) Unwrap() error        { return e.error }

// DefaultRetireGrace is Config.RetireGrace's default (10 minutes).
const DefaultRetireGrace = 10 * time.Minute

// DefaultAnalyzeAfter is Config.AnalyzeAfter's default.
const DefaultAnalyzeAfter = 30 * time.Second

// Duration is a time.Duration written in JSON as a Go duration string ("10m",
// "1.5s") or a number of seconds.
type Duration time.Duration

// D returns d as a time.Duration.
func (d *Duration) D() time.Duration {
	if d == nil {
		return 0
	}
	return time.Duration(*d)
}

// UnmarshalJSON accepts "10m" or 600.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err == nil {
		v, err := time.ParseDuration(s)
		if err != nil {
			return err
		}
		*d = Duration(v)
		return nil
	}
	var secs float64
	if err := json.Unmarshal(b, &secs); err != nil {
		return fmt.Errorf("duration: want \"10m\" or seconds, got %s", b)
	}
	*d = Duration(secs * float64(time.Second))
	return nil
}

// MarshalJSON writes the Go duration string.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }

// LoadConfig reads a JSON config file. Unknown fields are an error, so typos
// do not pass silently.
func LoadConfig(path string) (Config, error) {
	var c Config
	f, err := os.Open(path)
	if err != nil {
		return c, fmt.Errorf("agent config: %w", err)
	}
	defer f.Close()
	dec := json.NewDecoder(f)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		return c, fmt.Errorf("agent config %s: %w", path, err)
	}
	return c, nil
}

var (
	nameRE    = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$`)
	settingRE = regexp.MustCompile(`^[a-z_][a-z0-9_.]{0,62}$`)
)

// reservedSettings are set by the agent itself and may not be overridden.
var reservedSettings = map[string]bool{"port": true, "listen_addresses": true, "unix_socket_directories": true, "data_directory": true, "hba_file": true, "ident_file": true, "config_file": true}

// withDefaults validates c and fills defaults.
func (c Config) withDefaults() (Config, error) {
	if !nameRE.MatchString(c.Name) {
		return c, fmt.Errorf("agent config: name %q must be 1-63 letters, digits, '_', '.', '-'", c.Name)
	}
	if c.Root == "" {
		return c, errors.New("agent config: root is required")
	}
	abs, err := filepath.Abs(c.Root)
	if err != nil {
		return c, fmt.Errorf("agent config: root: %w", err)
	}
	c.Root = abs
	if _, err := catalog.ParseSpec(c.Catalog); err != nil {
		return c, fmt.Errorf("agent config: %w", err)
	}
	if c.Listen == "" {
		c.Listen = "127.0.0.1:7001"
	}
	if c.PGBinDir == "" {
		c.PGBinDir = pgcluster.DefaultBinDir
	}
	if c.OSUser == "" {
		c.OSUser = "postgres"
	}
	if c.ContractMs < 0 || math.IsNaN(c.ContractMs) || math.IsInf(c.ContractMs, 0) {
		return c, fmt.Errorf("agent config: contract_ms %v must be a finite number >= 0", c.ContractMs)
	}
	if c.CapacityBytes < 0 {
		return c, fmt.Errorf("agent config: capacity_bytes %d must be >= 0", c.CapacityBytes)
	}
	if c.CPUStat != "" && c.CPUStat != "off" {
		if err := checkCPUStat(c.CPUStat); err != nil {
			return c, fmt.Errorf("agent config: cpu_stat: %w", err)
		}
	}
	t := &c.Tenant
	if t.BasePort == 0 {
		t.BasePort = 15000
	}
	if t.BasePort < 1 || t.BasePort > 65000 {
		return c, fmt.Errorf("agent config: tenant.base_port %d out of range 1..65000", t.BasePort)
	}
	if t.ListenAddr == "" {
		t.ListenAddr = "127.0.0.1"
	}
	if t.AdvertiseHost == "" {
		t.AdvertiseHost = t.ListenAddr
		if t.ListenAddr == "*" || t.ListenAddr == "0.0.0.0" || t.ListenAddr == "::" {
			t.AdvertiseHost = "127.0.0.1"
		}
	}
	if t.Database == "" {
		t.Database = "postgres"
	}
	if t.WALSegSizeMB == 0 {
		t.WALSegSizeMB = 1
	}
	if t.WALSegSizeMB < 1 || t.WALSegSizeMB > 1024 || t.WALSegSizeMB&(t.WALSegSizeMB-1) != 0 {
		return c, fmt.Errorf("agent config: tenant.wal_segsize_mb %d is not a power of 2 in 1..1024", t.WALSegSizeMB)
	}
	if t.SharedBuffers == "" {
		t.SharedBuffers = "32MB"
	}
	if err := checkSettings(t.Settings); err != nil {
		return c, fmt.Errorf("agent config: tenant.settings: %w", err)
	}
	for name, u := range c.Peers {
		if !nameRE.MatchString(name) {
			return c, fmt.Errorf("agent config: peer name %q is not a valid name", name)
		}
		if _, err := parsePeerURL(u); err != nil {
			return c, fmt.Errorf("agent config: peer %s: %w", name, err)
		}
	}
	for name := range c.PeerTokenFiles {
		if _, ok := c.Peers[name]; !ok {
			return c, fmt.Errorf("agent config: peer_token_files names %q, which is not in peers", name)
		}
	}
	if c.InsecureNoAuth && (c.Token != "" || c.TokenFile != "") {
		return c, errors.New("agent config: insecure_no_auth excludes token and token_file")
	}
	if c.Token != "" && c.TokenFile != "" {
		return c, errors.New("agent config: token and token_file exclude each other")
	}
	if c.TokenFile == "" && c.Token == "" && !c.InsecureNoAuth {
		c.TokenFile = filepath.Join(c.Root, "token")
	}
	if c.RetireGrace == nil {
		d := Duration(DefaultRetireGrace)
		c.RetireGrace = &d
	}
	if c.RetireGrace.D() < 0 {
		return c, fmt.Errorf("agent config: retire_grace %s must be >= 0", c.RetireGrace.D())
	}
	if c.AnalyzeAfter == nil {
		d := Duration(DefaultAnalyzeAfter)
		c.AnalyzeAfter = &d
	}
	if c.AnalyzeAfter.D() < 0 {
		return c, fmt.Errorf("agent config: analyze_after %s must be >= 0", c.AnalyzeAfter.D())
	}
	if c.Proxy != "" {
		u, err := parsePeerURL(c.Proxy)
		if err != nil {
			return c, fmt.Errorf("agent config: proxy: %w", err)
		}
		c.Proxy = u
	}
	if c.InterferenceModel != "" {
		_, m, err := control.LoadModelFile(c.InterferenceModel)
		if err != nil {
			return c, fmt.Errorf("agent config: interference_model: %v", err)
		}
		c.model = &m
	}
	if len(c.Proxies) > 0 && c.Proxy == "" {
		return c, errors.New("agent config: proxies needs proxy (the first proxy, the control loop's latency source)")
	}
	proxies := make([]string, 0, len(c.Proxies))
	for _, p := range c.Proxies {
		u, err := parsePeerURL(p)
		if err != nil {
			return c, fmt.Errorf("agent config: proxies: %w", err)
		}
		if u == c.Proxy || slices.Contains(proxies, u) {
			return c, fmt.Errorf("agent config: proxies: %s named twice", u)
		}
		proxies = append(proxies, u)
	}
	c.Proxies = proxies
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c, nil
}

// checkSettings rejects parameter names that are not PostgreSQL-like or that
// the agent controls itself.
func checkSettings(s map[string]string) error {
	for k, v := range s {
		if !settingRE.MatchString(k) {
			return fmt.Errorf("bad parameter name %q", k)
		}
		if reservedSettings[k] {
			return fmt.Errorf("parameter %q is set by the agent", k)
		}
		if strings.ContainsAny(v, "\n\r\x00") {
			return fmt.Errorf("parameter %q: value contains a line break", k)
		}
	}
	return nil
}

func parsePeerURL(s string) (string, error) {
	if !strings.Contains(s, "://") {
		s = "http://" + s
	}
	u, err := url.Parse(s)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return "", fmt.Errorf("bad URL %q", s)
	}
	return strings.TrimRight(u.String(), "/"), nil
}

// checkCPUStat reads path as a cgroup's cpu.stat.
func checkCPUStat(path string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if !strings.Contains(string(b), "nr_periods") {
		return fmt.Errorf("%s has no nr_periods line: not a cgroup's cpu.stat", path)
	}
	_, err = monitor.ParseCPUStat(strings.NewReader(string(b)))
	return err
}
