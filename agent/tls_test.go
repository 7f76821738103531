package agent

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/sluicedb/sluice/internal/certs"
)

// testCA makes a CA (package certs, as `sluice certs init` does) in a temp
// dir and returns the dir.
func testCA(t testing.TB) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "ca")
	if err := certs.Init(dir, false, time.Now()); err != nil {
		t.Fatal(err)
	}
	return dir
}

// testLeaf issues certificate name of the CA in caDir (for 127.0.0.1, or a
// client-only one) valid from now and returns its files.
func testLeaf(t testing.TB, caDir, name string, client bool, now time.Time) certs.Files {
	t.Helper()
	r := certs.Request{Name: name, Client: client}
	if !client {
		r.Hosts = []string{"127.0.0.1", "localhost"}
	}
	p, err := certs.Issue(caDir, caDir, r, false, now)
	if err != nil {
		t.Fatal(err)
	}
	return certs.Files{Cert: p, Key: p[:len(p)-len(".crt")] + ".key", CA: filepath.Join(caDir, certs.CACertFile)}
}

// testCerts writes a CA and a certificate for 127.0.0.1 signed by it (with
// the server and client usages, as an agent's) and returns the three PEM
// file paths.
func testCerts(t testing.TB) (caFile, certFile, keyFile string) {
	f := testLeaf(t, testCA(t), "agent", false, time.Now())
	return f.CA, f.Cert, f.Key
}

// withTLS turns test configs into agents of mutual TLS sharing one CA and
// one certificate.
func withTLS(t testing.TB, cs ...*Config) {
	ca, cert, key := testCerts(t)
	for _, c := range cs {
		c.TLSCert, c.TLSKey, c.TLSCA = cert, key, ca
		c.InsecureLoopback = false
		for name, u := range c.Peers {
			if len(u) > 7 && u[:7] == "http://" {
				c.Peers[name] = "https://" + u[7:]
			}
		}
	}
}
