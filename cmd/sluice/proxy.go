package main

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net"
	"os"
	"os/signal"
	"runtime"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/sluicedb/sluice/catalog"
	"github.com/sluicedb/sluice/internal/cli"
	"github.com/sluicedb/sluice/keyspace"
	"github.com/sluicedb/sluice/proxy"
)

var proxyFlags struct {
	listen, api     string
	authFile        string
	trust           bool
	tokenFile       string
	insecureNoAuth  bool
	catalogToken    string
	routes          []string
	routesFile      string
	catalogs        []string
	window          time.Duration
	tlsCert, tlsKey string
	tlsCA           string
	serverSSLMode   string
	maxMessage      int
	releaseLimit    int
	releaseWindow   time.Duration
	procs           int
	keyspaces       []string
	txlog           string
	crash2PC        string
	jsonOut, quiet  bool
}

var proxyCmd = &cobra.Command{
	Use:   "proxy",
	Short: "Run the PostgreSQL front door: routes tenants, times transactions, moves sessions at handover",
	Long: `sluice proxy speaks the PostgreSQL protocol to clients and servers. A client's
database name is a tenant alias; the proxy authenticates the client with
SCRAM-SHA-256 from --auth-file (PgBouncer userlist.txt format) and opens its own
session to the tenant's server. The HTTP API (--api) serves routes, handover
(hold/switch/release), latency windows (/v1/latency) and /metrics.

Routes: --route tenant=host:port[/database][,alias...] (repeatable), --routes FILE
(JSON [{"tenant","aliases","addr","database"}]), and/or --catalog URL (repeatable:
a sluice agent whose GET /v1/tenants and GET /v1/keyspaces are followed every second,
or an etcd catalog etcd://host:port[,host:port...]/prefix shared by agents, whose
placements the proxy watches: each tenant is routed where its placement says, and a
handover's switch is the migration driver's write of it; keyspaces still come from
agents, so with etcd also list the agents that hold keyspaces).

A client whose database is a keyspace's name (sluice keyspace create, or --keyspace
FILE) is routed by key: each transaction goes to the partitions owning its keys,
and one that wrote on several commits with two-phase commit, its decision logged
in --txlog first (docs/design.md, Keyspaces).

Every API call but GET /metrics must carry the token of --token-file as
"Authorization: Bearer <token>"; the proxy registers that file on this host
so that agents and the CLI here find it (docs/agent-api.md, Security). With
--tls-ca the API is mutual TLS: callers present a certificate of that CA (sluice
certs); an API on a non-loopback address requires it.`,
	Args: cobra.NoArgs,
	RunE: runProxy,
}

func init() {
	f := proxyCmd.Flags()
	f.StringVar(&proxyFlags.listen, "listen", "127.0.0.1:6432", "client listen address (host:port)")
	f.StringVar(&proxyFlags.api, "api", "127.0.0.1:6480", "HTTP API listen address (host:port)")
	f.StringVar(&proxyFlags.authFile, "auth-file", "", "userlist.txt with \"user\" \"password\" lines (plaintext or SCRAM-SHA-256 secret)")
	f.BoolVar(&proxyFlags.trust, "trust", false, "accept clients without a password (loopback demos only)")
	f.StringVar(&proxyFlags.tokenFile, "token-file", "", "file holding the API's token, made (mode 0600) if missing (default $XDG_CONFIG_HOME/sluice/proxy.token, i.e. ~/.config/sluice/proxy.token)")
	f.BoolVar(&proxyFlags.insecureNoAuth, "insecure-no-auth", false, "serve the API without a token: any local process may re-route or hold tenants (throwaway setups only)")
	f.StringVar(&proxyFlags.catalogToken, "catalog-token-file", "", "file holding the token sent to every --catalog agent (default: the token each agent registered on this host)")
	f.StringArrayVar(&proxyFlags.routes, "route", nil, "tenant=host:port[/database][,alias...] (repeatable; host may be a Unix socket directory)")
	f.StringVar(&proxyFlags.routesFile, "routes", "", "JSON routes file")
	f.StringArrayVar(&proxyFlags.catalogs, "catalog", nil, "agent base URL whose /v1/tenants to follow, or etcd://host:port[,host:port...]/prefix: an etcd catalog whose placements to watch (repeatable)")
	f.DurationVar(&proxyFlags.window, "window", proxy.DefaultWindow, "latency window length")
	f.IntVar(&proxyFlags.releaseLimit, "release-limit", 0, "after a handover's release, at most this many of the tenant's transactions in flight for --release-window, so a freshly promoted server warms its sessions a few at a time (0 = none)")
	f.DurationVar(&proxyFlags.releaseWindow, "release-window", proxy.DefaultReleaseWindow, "how long the --release-limit ramp lasts")
	f.StringVar(&proxyFlags.tlsCert, "tls-cert", "", "PEM certificate for client TLS")
	f.StringVar(&proxyFlags.tlsKey, "tls-key", "", "PEM key for client TLS")
	f.StringVar(&proxyFlags.tlsCA, "tls-ca", "", "PEM CA of sluice's certificates: the API becomes HTTPS with mutual TLS (callers present a certificate of this CA; the proxy presents --tls-cert to its --catalog agents and etcd); required for an --api that is not loopback")
	f.StringVar(&proxyFlags.serverSSLMode, "server-sslmode", "disable", "sslmode for server connections (disable, prefer, require, ...)")
	f.IntVar(&proxyFlags.maxMessage, "max-message", proxy.DefaultMaxMessage, "largest client message accepted, bytes")
	f.IntVar(&proxyFlags.procs, "procs", proxy.DefaultProcs, "OS threads running Go code at once (GOMAXPROCS); 0 = one per core")
	f.StringArrayVar(&proxyFlags.keyspaces, "keyspace", nil, "JSON file of a keyspace to route besides the --catalog agents' (repeatable; docs/design.md, Keyspaces)")
	f.StringVar(&proxyFlags.txlog, "txlog", "", "two-phase commit decision log of transactions across partitions (default proxy-<port>.txlog in the user's cache directory under sluice/); one per proxy")
	f.StringVar(&proxyFlags.crash2PC, "debug-2pc-crash", "", "fault injection for tests: kill this process (SIGKILL) at a two-phase commit's point: prepared or decided")
	f.MarkHidden("debug-2pc-crash")
	f.BoolVar(&proxyFlags.jsonOut, "json", false, "print the listen addresses as one JSON object when ready")
	f.BoolVar(&proxyFlags.quiet, "quiet", false, "do not log session events to stderr")
	root.AddCommand(proxyCmd)
}

// parseRouteFlag parses tenant=host:port[/database][,alias...].
func parseRouteFlag(s string) (proxy.RouteConfig, error) {
	tenant, rest, ok := strings.Cut(s, "=")
	if !ok || tenant == "" || rest == "" {
		return proxy.RouteConfig{}, cli.Usagef("--route %q: want tenant=host:port[/database][,alias...]", s)
	}
	parts := strings.Split(rest, ",")
	// host may be a Unix socket directory (/path:port): the database follows
	// the first "/" after the port's ":".
	addr, db := parts[0], ""
	if c := strings.LastIndexByte(addr, ':'); c >= 0 {
		if i := strings.IndexByte(addr[c:], '/'); i >= 0 {
			addr, db = addr[:c+i], addr[c+i+1:]
		}
	}
	if _, _, err := net.SplitHostPort(addr); err != nil {
		return proxy.RouteConfig{}, cli.Usagef("--route %q: address %q is not host:port", s, addr)
	}
	r := proxy.RouteConfig{Tenant: tenant, Addr: addr, Database: db}
	if len(parts) > 1 {
		r.Aliases = append([]string{tenant}, parts[1:]...)
	}
	return r, nil
}

func runProxy(cmd *cobra.Command, _ []string) error {
	pf := proxyFlags
	if pf.authFile == "" && !pf.trust {
		return cli.Usagef("proxy: give --auth-file (or --trust for a loopback demo)")
	}
	if (pf.tlsCert == "") != (pf.tlsKey == "") {
		return cli.Usagef("proxy: --tls-cert and --tls-key go together")
	}
	if pf.window <= 0 {
		return cli.Usagef("proxy: --window must be positive")
	}
	if pf.releaseLimit < 0 || pf.releaseWindow <= 0 {
		return cli.Usagef("proxy: --release-limit must be 0 (none) or positive, --release-window positive")
	}
	if pf.maxMessage < 1024 {
		return cli.Usagef("proxy: --max-message must be at least 1024 bytes")
	}
	for _, u := range pf.catalogs {
		if strings.HasPrefix(u, "etcd://") {
			if _, err := catalog.ParseSpec(u); err != nil {
				return cli.Usagef("proxy: --catalog: %v", err)
			}
		}
	}
	if pf.insecureNoAuth {
		if cmd.Flags().Changed("token-file") {
			return cli.Usagef("proxy: --insecure-no-auth and --token-file exclude each other")
		}
	} else if pf.tokenFile == "" {
		pf.tokenFile = proxy.DefaultTokenFile()
	}
	if pf.procs < 0 {
		return cli.Usagef("proxy: --procs must be 0 (one per core) or positive")
	}
	if pf.procs > 0 {
		runtime.GOMAXPROCS(pf.procs)
	}
	cfg := proxy.Config{
		Listen: pf.listen, APIListen: pf.api, AuthFile: pf.authFile, Trust: pf.trust,
		TokenFile: pf.tokenFile, InsecureNoAuth: pf.insecureNoAuth, CatalogTokenFile: pf.catalogToken,
		RoutesFile: pf.routesFile, Catalogs: pf.catalogs, Window: pf.window,
		TLSCert: pf.tlsCert, TLSKey: pf.tlsKey, TLSCA: pf.tlsCA, ServerSSLMode: pf.serverSSLMode, MaxMessage: pf.maxMessage,
		ReleaseLimit: pf.releaseLimit, ReleaseWindow: pf.releaseWindow,
	}
	for _, path := range pf.keyspaces {
		b, err := os.ReadFile(path)
		if err != nil {
			return cli.Usagef("proxy: --keyspace: %v", err)
		}
		ks, err := keyspace.Decode(b)
		if err != nil {
			return cli.Usagef("proxy: --keyspace %s: %v", path, err)
		}
		cfg.Keyspaces = append(cfg.Keyspaces, ks)
	}
	cfg.TxLog = pf.txlog
	switch pf.crash2PC {
	case "":
	case "prepared", "decided":
		at := pf.crash2PC
		cfg.TwoPCHook = func(point string) {
			if point == at {
				syscall.Kill(os.Getpid(), syscall.SIGKILL)
			}
		}
	default:
		return cli.Usagef("proxy: --debug-2pc-crash %q: want prepared or decided", pf.crash2PC)
	}
	for _, s := range pf.routes {
		r, err := parseRouteFlag(s)
		if err != nil {
			return err
		}
		cfg.Routes = append(cfg.Routes, r)
	}
	if len(cfg.Routes) == 0 && cfg.RoutesFile == "" && len(cfg.Catalogs) == 0 {
		return cli.Usagef("proxy: no routes: give --route, --routes or --catalog")
	}
	logger := log.New(cmd.ErrOrStderr(), "", log.LstdFlags)
	if !pf.quiet {
		cfg.Logf = logger.Printf
	}
	if pf.insecureNoAuth && pf.quiet {
		logger.Printf("proxy: WARNING: --insecure-no-auth: the API on %s has no authentication; any local process may re-route or hold tenants", pf.api)
	}
	p, err := proxy.New(cfg)
	if errors.Is(err, proxy.ErrConfig) {
		return cli.Usagef("%v", err)
	}
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := p.Start(ctx); err != nil {
		p.Close()
		return err
	}
	if pf.jsonOut {
		if err := cli.WriteJSON(cmd.OutOrStdout(), map[string]string{"listen": p.Addr(), "api": p.APIAddr(), "api_url": p.APIURL()}); err != nil {
			p.Close()
			return err
		}
	} else {
		fmt.Fprintf(cmd.OutOrStdout(), "sluice proxy: clients on %s, API on %s\n", p.Addr(), p.APIURL())
	}
	<-ctx.Done()
	return p.Close()
}
