package proxy

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"

	"github.com/sluicedb/sluice/internal/certs"
)

// The API's transport (docs/design.md, Security). With Config.TLSCA the
// API is HTTPS with mutual TLS: a caller without a certificate of that CA
// fails the handshake before its token is read. Without it the API is plain
// HTTP with the token, and only on a loopback address: an API reachable
// from other hosts must be mutual TLS, as an agent's is.

// ErrConfig matches (errors.Is) every error New returns for an invalid
// Config that it checks itself.
var ErrConfig = errors.New("invalid proxy config")

type configError struct{ error }

func (e configError) Is(target error) bool { return target == ErrConfig }
func (e configError) Unwrap() error        { return e.error }

// loadAPITLS returns the API listener's TLS configuration (nil: plain HTTP)
// and sets p.peerTLS for the proxy's own calls.
func (p *Proxy) loadAPITLS() (*tls.Config, error) {
	c := p.cfg
	if c.TLSCA == "" {
		if !loopbackAddr(c.APIListen) {
			return nil, configError{fmt.Errorf("proxy: API address %s is not loopback: an API reachable from other hosts needs mutual TLS (--tls-ca with --tls-cert, --tls-key; sluice certs)", c.APIListen)}
		}
		return nil, nil
	}
	files := certs.Files{Cert: c.TLSCert, Key: c.TLSKey, CA: c.TLSCA}
	if err := files.Check(); err != nil {
		return nil, configError{fmt.Errorf("proxy: --tls-cert, --tls-key, --tls-ca: %v", err)}
	}
	server, err := files.Server()
	if err != nil {
		return nil, configError{fmt.Errorf("proxy: %w", err)}
	}
	if p.peerTLS, err = files.Client(); err != nil {
		return nil, configError{fmt.Errorf("proxy: %w", err)}
	}
	return server, nil
}

// loopbackAddr reports whether host:port addr is on loopback only: a
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

// APIURL returns the API's base URL: https:// with Config.TLSCA.
func (p *Proxy) APIURL() string {
	if p.peerTLS != nil {
		return "https://" + p.APIAddr()
	}
	return "http://" + p.APIAddr()
}

// peerTransport returns the transport of the proxy's own HTTP calls: it
// presents TLSCert and trusts TLSCA; nil (Go's default) without TLSCA.
func (p *Proxy) peerTransport() http.RoundTripper {
	if p.peerTLS == nil {
		return nil
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = p.peerTLS.Clone()
	return tr
}
