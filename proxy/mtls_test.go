package proxy

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicedb/sluice/internal/certs"
	"github.com/sluicedb/sluice/proxy/client"
)

// issueTest makes a CA in a temp dir (unless caDir exists) and a leaf
// name of it: for 127.0.0.1, or client-only.
func issueTest(t *testing.T, caDir, name string, clientOnly bool) certs.Files {
	t.Helper()
	if err := certs.Init(caDir, false, time.Now()); err != nil && !errors.Is(err, certs.ErrExists) {
		t.Fatal(err)
	}
	r := certs.Request{Name: name, Client: clientOnly}
	if !clientOnly {
		r.Hosts = []string{"127.0.0.1"}
	}
	p, err := certs.Issue(caDir, caDir, r, false, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return certs.Files{Cert: p, Key: strings.TrimSuffix(p, ".crt") + ".key", CA: filepath.Join(caDir, certs.CACertFile)}
}

// TestAPIMutualTLS: with TLSCA the proxy's API answers callers presenting
// a certificate of that CA and refuses others in the handshake; the proxy
// presents its own to the catalog agent it follows, which requires one. An
// API on a non-loopback address without TLSCA is refused at New.
func TestAPIMutualTLS(t *testing.T) {
	dir, other := filepath.Join(t.TempDir(), "ca"), filepath.Join(t.TempDir(), "other")
	agentFiles := issueTest(t, dir, "agent", false)
	proxyFiles := issueTest(t, dir, "proxy", false)
	ops := issueTest(t, dir, "ops", true)
	stranger := issueTest(t, other, "stranger", true)

	// The catalog: an agent's API requiring client certificates of the CA.
	cat := &fakeCatalog{}
	cat.set(catalogTenant{ID: 1, Name: "acme", Host: "127.0.0.1", Port: 5001, Database: "postgres", State: "running"})
	hs := httptest.NewUnstartedServer(cat)
	var err error
	if hs.TLS, err = agentFiles.Server(); err != nil {
		t.Fatal(err)
	}
	hs.StartTLS()
	t.Cleanup(hs.Close)

	p, err := New(Config{Listen: "127.0.0.1:0", APIListen: "127.0.0.1:0", Trust: true, Token: "tok",
		TLSCert: proxyFiles.Cert, TLSKey: proxyFiles.Key, TLSCA: proxyFiles.CA,
		Catalogs: []string{hs.URL}, CatalogPoll: 20 * time.Millisecond, Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	if !strings.HasPrefix(p.APIURL(), "https://") {
		t.Fatalf("API URL %s", p.APIURL())
	}
	// The catalog was read over mutual TLS: the proxy presented its certificate.
	waitRoute(t, p.APIClient(), "acme", "127.0.0.1:5001")

	ctx := context.Background()
	call := func(f certs.Files) error {
		var hc *http.Client
		if !f.IsZero() {
			tc, err := f.Client()
			if err != nil {
				t.Fatal(err)
			}
			hc = &http.Client{Transport: &http.Transport{TLSClientConfig: tc}}
		}
		_, err := client.New(p.APIURL(), hc).WithToken("tok").Routes(ctx)
		return err
	}
	if err := call(certs.Files{Cert: ops.Cert, Key: ops.Key, CA: proxyFiles.CA}); err != nil {
		t.Errorf("the operator's client certificate: %v", err)
	}
	for _, c := range []struct {
		name string
		f    certs.Files
		want string
	}{
		{"no certificate", certs.Files{CA: proxyFiles.CA}, "certificate required"},
		{"another CA's certificate", certs.Files{Cert: stranger.Cert, Key: stranger.Key, CA: proxyFiles.CA}, "unknown certificate authority"},
		{"plain HTTP", certs.Files{}, "HTTP request to an HTTPS server"},
	} {
		if c.f.IsZero() {
			_, err = client.New("http://"+p.APIAddr(), nil).WithToken("tok").Routes(ctx)
		} else {
			err = call(c.f)
		}
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want a refusal containing %q", c.name, err, c.want)
		}
	}

	_, err = New(Config{Listen: "127.0.0.1:0", APIListen: "0.0.0.0:0", Trust: true})
	if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), "needs mutual TLS") {
		t.Errorf("a non-loopback API without TLSCA: %v, want ErrConfig", err)
	}
	_, err = New(Config{Listen: "127.0.0.1:0", APIListen: "127.0.0.1:0", Trust: true, TLSCA: proxyFiles.CA})
	if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), "go together") {
		t.Errorf("TLSCA without a certificate: %v, want ErrConfig", err)
	}
}
