package agent

import (
	"context"
	"crypto/rand"
	"fmt"
	"net/http"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sluicedb/sluice/agent/client"
	"github.com/sluicedb/sluice/catalog"
	"github.com/sluicedb/sluice/dashboard"
	"github.com/sluicedb/sluice/internal/auth"
	"github.com/sluicedb/sluice/pgcluster"
	proxyclient "github.com/sluicedb/sluice/proxy/client"
	"github.com/sluicedb/sluice/proxy/scram"
)

// The agent's secrets, in its root directory, each mode 0600 and made at
// first start (package internal/auth):
//
//	token                 the API's bearer token (Config.TokenFile's default)
//	replication.password  the password of pgcluster.ReplicationRole in the
//	                      tenants this agent serves: their standbys elsewhere
//	                      stream with it (primary_conninfo)
const replicationPasswordFile = "replication.password"

// loadSecrets reads (or makes) the API token and the replication password.
func (a *Agent) loadSecrets() error {
	a.token = a.cfg.Token
	if a.cfg.TokenFile != "" {
		tok, created, err := auth.LoadOrCreate(a.cfg.TokenFile)
		if err != nil {
			return configError{fmt.Errorf("agent config: token_file: %w", err)}
		}
		if created {
			a.log.Info("agent: made a new API token", "token_file", a.cfg.TokenFile)
		}
		a.token = tok
	}
	pw, _, err := auth.LoadOrCreate(filepath.Join(a.cfg.Root, replicationPasswordFile))
	if err != nil {
		return fmt.Errorf("agent: replication password: %w", err)
	}
	a.replPassword = pw
	return nil
}

// secureHandler requires the token on every request but the dashboard's
// static files (dashboard.Open: they hold no data), unless the agent runs
// open.
func (a *Agent) secureHandler(h http.Handler) http.Handler {
	return auth.Require(h, a.token, "agent "+a.cfg.Name, dashboard.Open)
}

// announce logs how the API is guarded and registers the token file on this
// host (auth.Register) so that the CLI, the proxy and peers here find it.
func (a *Agent) announce() {
	if a.token == "" {
		a.log.Warn("INSECURE: the agent's API runs without authentication (insecure_no_auth): any local process may create, migrate and delete tenants")
		return
	}
	if a.cfg.TokenFile == "" {
		return
	}
	if err := auth.Register(a.url, a.cfg.TokenFile); err != nil {
		a.log.Warn("agent: token not registered on this host; clients need --token-file", "err", err)
	}
}

// unannounce undoes announce's registration.
func (a *Agent) unannounce() {
	if a.token != "" && a.cfg.TokenFile != "" {
		auth.Unregister(a.url, a.cfg.TokenFile)
	}
}

// resolvePeer turns --to (a configured peer's name or URL) into the peer's
// URL. Any other agent is refused: a tenant's rows and its replication
// credentials go to configured peers only.
func (a *Agent) resolvePeer(to string) (string, error) {
	if to == "" {
		return "", errf(http.StatusBadRequest, "no target agent given")
	}
	if u, err := parsePeerURL(to); to == a.cfg.Name || (err == nil && u == a.url) {
		return "", errf(http.StatusBadRequest, "target agent %s is the source", to)
	}
	if u, ok := a.cfg.Peers[to]; ok {
		return parsePeerURL(u)
	}
	if _, ok := a.peerName(to); ok {
		return parsePeerURL(to)
	}
	names := make([]string, 0, len(a.cfg.Peers))
	for n := range a.cfg.Peers {
		names = append(names, n)
	}
	sort.Strings(names)
	return "", errf(http.StatusForbidden, "agent %s: target %q is not a configured peer (peers: %s); add it to the agent's peers to migrate there", a.cfg.Name, to, strings.Join(names, ", "))
}

// peerName returns the name of the configured peer whose URL is rawURL.
func (a *Agent) peerName(rawURL string) (string, bool) {
	u, err := parsePeerURL(rawURL)
	if err != nil {
		return "", false
	}
	for name, pu := range a.cfg.Peers {
		if p, err := parsePeerURL(pu); err == nil && p == u {
			return name, true
		}
	}
	return "", false
}

// peerToken returns the token this agent sends to the agent at url: its
// configured file's (PeerTokenFiles, PeerTokenFile) or the one registered
// on this host for url; "" for a URL that is not a configured peer.
func (a *Agent) peerToken(url string) string {
	name, ok := a.peerName(url)
	if !ok {
		return ""
	}
	file := a.cfg.PeerTokenFiles[name]
	if file == "" {
		file = a.cfg.PeerTokenFile
	}
	tok, err := auth.ForPeer(url, file)
	if err != nil {
		a.log.Warn("agent: peer token", "peer", name, "err", err)
	}
	return tok
}

// peerClient returns a client for another agent, carrying the token of
// that peer (none for an agent that is not a configured peer).
func (a *Agent) peerClient(url string) (*client.Client, error) {
	c, err := client.New(url)
	if err != nil {
		return nil, err
	}
	c = c.WithToken(a.peerToken(url))
	if a.peerTLS != nil {
		c = c.WithTLS(a.peerTLS)
	}
	return c, nil
}

// proxyClient returns a client for Config.Proxy carrying its token.
func (a *Agent) proxyClient() *proxyclient.Client { return a.proxyClientFor(a.cfg.Proxy) }

// proxyClientFor is the client of the proxy at url (Config.Proxy or one of
// Config.Proxies), with its token (Config.ProxyTokenFile, or the one it
// registered on this host).
func (a *Agent) proxyClientFor(url string) *proxyclient.Client {
	tok, err := auth.ForPeer(url, a.cfg.ProxyTokenFile)
	if err != nil {
		a.log.Warn("agent: proxy token", "proxy", url, "err", err)
	}
	return proxyclient.New(url, a.peerHTTPClient()).WithToken(tok)
}

// setupRoles makes a new tenant's roles over conn (the superuser's):
// pgcluster.ReplicationRole with this agent's replication password, and
// the request's users, login roles that are not superusers; the first owns
// database db.
func (a *Agent) setupRoles(ctx context.Context, conn *pgx.Conn, db string, users []client.User) error {
	if err := setReplicationPassword(ctx, conn, a.replPassword); err != nil {
		return err
	}
	for i, u := range users {
		secret, err := scramSecret(u.Password)
		if err != nil {
			return err
		}
		q := fmt.Sprintf("CREATE ROLE %s LOGIN NOSUPERUSER NOCREATEROLE NOREPLICATION NOBYPASSRLS PASSWORD %s",
			pgx.Identifier{u.Name}.Sanitize(), quoteLiteral(secret))
		if _, err := conn.Exec(ctx, q); err != nil {
			return fmt.Errorf("agent: create role %s: %w", u.Name, err)
		}
		if i == 0 {
			if _, err := conn.Exec(ctx, fmt.Sprintf("ALTER DATABASE %s OWNER TO %s", pgx.Identifier{db}.Sanitize(), pgx.Identifier{u.Name}.Sanitize())); err != nil {
				return fmt.Errorf("agent: database owner %s: %w", u.Name, err)
			}
		}
	}
	return nil
}

// setReplicationPassword creates pgcluster.ReplicationRole if missing and
// sets its password: a tenant that arrived by migration carries the
// previous agent's.
func setReplicationPassword(ctx context.Context, conn *pgx.Conn, pw string) error {
	role := pgx.Identifier{pgcluster.ReplicationRole}.Sanitize()
	var exists bool
	if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = $1)", pgcluster.ReplicationRole).Scan(&exists); err != nil {
		return fmt.Errorf("agent: replication role: %w", err)
	}
	verb := "ALTER"
	if !exists {
		verb = "CREATE"
	}
	secret, err := scramSecret(pw)
	if err != nil {
		return err
	}
	q := fmt.Sprintf("%s ROLE %s WITH LOGIN REPLICATION NOSUPERUSER PASSWORD %s", verb, role, quoteLiteral(secret))
	if _, err := conn.Exec(ctx, q); err != nil {
		return fmt.Errorf("agent: replication role: %w", err)
	}
	return nil
}

// prepareSource gives tenant tn's replication role this agent's password
// before a migration out starts, so that the target's standby can stream.
func (a *Agent) prepareSource(ctx context.Context, tn catalog.Tenant) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, a.ConnString(tn.Port, ""))
	if err != nil {
		return fmt.Errorf("agent: tenant %d: %w", tn.ID, err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if a.pgTLS != nil {
		// The target's standby streams over TLS only (tls.go); a tenant
		// created before the agent had certificates serves without.
		var ssl string
		if err := conn.QueryRow(ctx, "SHOW ssl").Scan(&ssl); err != nil {
			return fmt.Errorf("agent: tenant %d: %w", tn.ID, err)
		}
		if ssl != "on" {
			return errf(http.StatusConflict, "tenant %d serves without TLS (created before agent %s had certificates): its standby could not stream over TLS; recreate it (dump and restore) to migrate it", tn.ID, a.cfg.Name)
		}
	}
	return setReplicationPassword(ctx, conn, a.replPassword)
}

// scramSecret returns password as PostgreSQL's stored SCRAM-SHA-256
// secret (a secret given is returned as is): a role's password reaches
// the server hashed, so that no statement it receives — which it may log
// (log_statement, log_min_error_statement) or show (pg_stat_activity) —
// holds it in clear.
func scramSecret(password string) (string, error) {
	if scram.IsSecret(password) {
		return password, nil
	}
	salt := make([]byte, 16)
	if _, err := rand.Read(salt); err != nil {
		return "", fmt.Errorf("agent: salt: %w", err)
	}
	s, err := scram.NewSecret(password, salt, scram.DefaultIterations)
	if err != nil {
		return "", fmt.Errorf("agent: %w", err)
	}
	return s.String(), nil
}

// quoteLiteral quotes s as an SQL string literal (standard_conforming_strings on).
func quoteLiteral(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }
