package agent

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"

	"github.com/sluicedb/sluice/internal/certs"
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
	case files.IsZero():
		return errors.New("no tls_cert, tls_key and tls_ca: the API requires mutual TLS (make certificates with sluice certs); on a loopback-only listen address, insecure_loopback (sluice agent --insecure-loopback) serves plain HTTP with the token")
	}
	return nil
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
