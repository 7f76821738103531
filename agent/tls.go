package agent

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"

	"github.com/sluicedb/sluice/catalog"
	"github.com/sluicedb/sluice/internal/certs"
	"github.com/sluicedb/sluice/pgcluster"
)

// The agent's transport (docs/design.md, Security). With tls_cert, tls_key
// and tls_ca the API is HTTPS only and mutual: every caller (the CLI, a
// proxy, a peer agent) must present a certificate that chains to tls_ca,
// checked in the handshake (tls.RequireAndVerifyClientCert), before the
// bearer token is even read; the agent presents its own certificate to its
// peers and its proxy, and trusts tls_ca for theirs. Everything between
// agents rides on that API — migration calls, the snapshot stream, WAL
// pacing, reshard pulls — so it is encrypted and authenticated both ways.
//
// Without certificates the agent refuses to start, unless insecure_loopback
// (`sluice agent --insecure-loopback`) is set and the API listens on a
// loopback address only: then it serves plain HTTP guarded by the token,
// for one-machine demos and tests, where no byte leaves the host.

// tlsFiles returns the config's certificate files.
func (c Config) tlsFiles() certs.Files {
	return certs.Files{Cert: c.TLSCert, Key: c.TLSKey, CA: c.TLSCA}
}

// checkTransport checks that the API is mutual TLS, or plain HTTP on
// loopback by the operator's explicit choice (the rule above).
func (c Config) checkTransport() error {
	files := c.tlsFiles()
	if err := files.Check(); err != nil {
		return fmt.Errorf("tls_cert, tls_key, tls_ca: %v", err)
	}
	switch {
	case c.InsecureLoopback && !files.IsZero():
		return errors.New("insecure_loopback excludes tls_cert, tls_key and tls_ca")
	case c.InsecureLoopback:
		if !loopbackAddr(c.Listen) {
			return fmt.Errorf("insecure_loopback: listen %q is not a loopback address (127.0.0.0/8, ::1, localhost); an API reachable from other hosts needs tls_cert, tls_key and tls_ca (sluice certs)", c.Listen)
		}
		spec, _ := catalog.ParseSpec(c.Catalog)
		for _, e := range spec.Endpoints {
			if !loopbackAddr(e) {
				return fmt.Errorf("insecure_loopback: catalog endpoint %s is not on loopback: the catalog would leave the host in clear; with tls_cert, tls_key and tls_ca the agent speaks mutual TLS to etcd", e)
			}
		}
	case files.IsZero():
		return errors.New("no tls_cert, tls_key and tls_ca: the API requires mutual TLS (make certificates with sluice certs); on a loopback-only listen address, insecure_loopback (sluice agent --insecure-loopback) serves plain HTTP with the token")
	default:
		// An agent with certificates sends a tenant's rows, its replication
		// credentials and handover calls over mutual TLS only.
		for name, u := range c.Peers {
			if !strings.HasPrefix(u, "https://") {
				return fmt.Errorf("peer %s: %s is not https://: an agent with certificates talks to its peers over mutual TLS only", name, u)
			}
		}
		for _, p := range append([]string{c.Proxy}, c.Proxies...) {
			if p != "" && !strings.HasPrefix(p, "https://") && !loopbackURL(p) {
				return fmt.Errorf("proxy %s is neither https:// nor on loopback: handover calls leave the host over mutual TLS only (the proxy's --tls-ca)", p)
			}
		}
	}
	return nil
}

// loopbackURL reports whether rawURL's host is a loopback address.
func loopbackURL(rawURL string) bool {
	u, err := url.Parse(rawURL)
	return err == nil && u.Port() != "" && loopbackAddr(u.Host)
}

// loopbackAddr reports whether host:port addr listens on loopback only: a
// loopback IP or "localhost" (an empty host is every interface).
func loopbackAddr(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// transportTLS returns the API listener's TLS configuration (nil: plain
// HTTP on loopback) and the one for calls to peers and the proxy (nil:
// Go's defaults, no client certificate).
func (c Config) transportTLS() (server, client *tls.Config, err error) {
	files := c.tlsFiles()
	if files.IsZero() {
		return nil, nil, nil
	}
	if server, err = files.Server(); err != nil {
		return nil, nil, fmt.Errorf("agent config: %w", err)
	}
	if client, err = files.Client(); err != nil {
		return nil, nil, fmt.Errorf("agent config: %w", err)
	}
	return server, client, nil
}

// peerHTTPClient returns the HTTP client of calls to the proxy's API: it
// presents this agent's certificate and trusts tls_ca; nil (Go's default
// client) without certificates.
func (a *Agent) peerHTTPClient() *http.Client {
	if a.peerTLS == nil {
		return nil
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = a.peerTLS.Clone()
	return &http.Client{Transport: tr}
}

// The tenants' PostgreSQL speaks TLS too when the agent has certificates:
// the standby of a migration streams the source's WAL across hosts over
// libpq, not over the API. Each tenant serves ssl = on with the agent's
// certificate and requires, for replication over TCP, TLS and a client
// certificate of tls_ca besides the replication password
// (pgcluster.Options.TLS); a target's standby connects with sslmode
// verify-full presenting the agent's certificate (pgcluster.StandbyTLS).
// The WAL relays in between pass TLS through untouched. PostgreSQL runs as
// another OS user and insists that it own its key (mode 0600), so the agent
// copies the three files into <root>/tls, owned by that user.

// pgTLSDir is where the tenants' copies of the agent's TLS files live.
const pgTLSDir = "tls"

// installPGTLS copies the certificate, key and CA into <root>/tls for
// PostgreSQL and returns their paths; nil without certificates.
func (c Config) installPGTLS() (*pgcluster.TLSFiles, error) {
	files := c.tlsFiles()
	if files.IsZero() {
		return nil, nil
	}
	dir := filepath.Join(c.Root, pgTLSDir)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("agent: tls for tenants: %w", err)
	}
	uid, gid, asRoot, err := pgcluster.OSUserIDs(c.OSUser)
	if err != nil {
		return nil, err
	}
	out := &pgcluster.TLSFiles{Cert: filepath.Join(dir, "server.crt"), Key: filepath.Join(dir, "server.key"), CA: filepath.Join(dir, "ca.crt")}
	for _, f := range []struct {
		from, to string
		mode     os.FileMode
	}{{files.Cert, out.Cert, 0o644}, {files.Key, out.Key, 0o600}, {files.CA, out.CA, 0o644}} {
		b, err := os.ReadFile(f.from)
		if err != nil {
			return nil, fmt.Errorf("agent: tls for tenants: %w", err)
		}
		tmp := f.to + ".tmp"
		os.Remove(tmp)
		if err := os.WriteFile(tmp, b, f.mode); err != nil {
			return nil, fmt.Errorf("agent: tls for tenants: %w", err)
		}
		if asRoot {
			if err := os.Chown(tmp, uid, gid); err != nil {
				os.Remove(tmp)
				return nil, fmt.Errorf("agent: tls for tenants: %w", err)
			}
		}
		if err := os.Rename(tmp, f.to); err != nil {
			return nil, fmt.Errorf("agent: tls for tenants: %w", err)
		}
	}
	return out, nil
}

// standbyConnInfo returns a source's primary conninfo as this agent's
// standby uses it: with the TLS fields when the agent has certificates.
func (a *Agent) standbyConnInfo(ci string) string {
	if a.pgTLS == nil || ci == "" {
		return ci
	}
	return ci + " " + pgcluster.StandbyTLS(a.pgTLS)
}
