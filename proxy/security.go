package proxy

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/sluicedb/sluice/internal/auth"
	"github.com/sluicedb/sluice/proxy/client"
)

// DefaultTokenFile returns where `sluice proxy` keeps its API token unless
// told otherwise: $XDG_CONFIG_HOME/sluice/proxy.token (default
// ~/.config/sluice/proxy.token) of the user running it.
func DefaultTokenFile() string {
	d, err := os.UserConfigDir()
	if err != nil {
		d = os.TempDir()
	}
	return filepath.Join(d, "sluice", "proxy.token")
}

// loadToken sets p.token from Config (see TokenFile, Token, InsecureNoAuth).
func (p *Proxy) loadToken() error {
	c := p.cfg
	switch {
	case c.InsecureNoAuth && (c.Token != "" || c.TokenFile != ""):
		return fmt.Errorf("proxy: InsecureNoAuth excludes Token and TokenFile")
	case c.InsecureNoAuth:
		return nil
	case c.Token != "":
		p.token = c.Token
	case c.TokenFile != "":
		tok, created, err := auth.LoadOrCreate(c.TokenFile)
		if err != nil {
			return fmt.Errorf("proxy: token file: %w", err)
		}
		if created {
			c.Logf("proxy: made a new API token in %s", c.TokenFile)
		}
		p.token = tok
	default:
		tok, err := auth.New()
		if err != nil {
			return err
		}
		p.token = tok
	}
	return nil
}

// secureAPI requires the token on every API request but GET /metrics.
func (p *Proxy) secureAPI(h http.Handler) http.Handler {
	return auth.Require(h, p.token, "proxy", func(r *http.Request) bool {
		return r.URL.Path == "/metrics" && (r.Method == http.MethodGet || r.Method == http.MethodHead)
	})
}

// announce warns when the API runs open, else registers the token file on
// this host for the API's URL (auth.Register), so agents and the CLI here
// find it.
func (p *Proxy) announce() {
	if p.token == "" {
		p.cfg.Logf("proxy: INSECURE: the API at %s runs without authentication: any local process may re-route or hold tenants", p.APIAddr())
		return
	}
	if p.cfg.TokenFile != "" {
		if err := auth.Register(p.APIURL(), p.cfg.TokenFile); err != nil {
			p.cfg.Logf("proxy: token not registered on this host: %v", err)
		}
	}
}

// unannounce undoes announce's registration.
func (p *Proxy) unannounce() {
	if p.token != "" && p.cfg.TokenFile != "" {
		auth.Unregister(p.APIURL(), p.cfg.TokenFile)
	}
}

// Token returns the API's token ("" when it runs open).
func (p *Proxy) Token() string { return p.token }

// APIClient returns a client of this proxy's API carrying its token (and,
// with Config.TLSCA, presenting the proxy's own certificate).
func (p *Proxy) APIClient() *client.Client {
	var hc *http.Client
	if tr := p.peerTransport(); tr != nil {
		hc = &http.Client{Transport: tr}
	}
	return client.New(p.APIURL(), hc).WithToken(p.token)
}

// catalogClient returns the HTTP client that polls the agent at base: each
// request carries CatalogTokenFile's token, else the one base's agent has
// registered on this host by then.
func (p *Proxy) catalogClient(base string) *http.Client {
	lastErr := ""
	token := func() string {
		tok, err := auth.ForPeer(base, p.cfg.CatalogTokenFile)
		if err != nil && err.Error() != lastErr {
			p.cfg.Logf("proxy: catalog %s: token: %v", base, err)
		}
		lastErr = fmt.Sprint(err)
		return tok
	}
	return &http.Client{Timeout: 5 * time.Second, Transport: &auth.Transport{Token: token, Base: p.peerTransport()}}
}
