package certs

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

var t0 = time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)

func mustInit(t *testing.T, now time.Time) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "ca")
	if err := Init(dir, false, now); err != nil {
		t.Fatal(err)
	}
	return dir
}

func readCert(t *testing.T, path string) *x509.Certificate {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	blk, _ := pem.Decode(b)
	if blk == nil {
		t.Fatalf("%s: no PEM", path)
	}
	c, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func mode(t *testing.T, path string) os.FileMode {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Mode().Perm()
}

func TestInitAndIssue(t *testing.T) {
	dir := mustInit(t, t0)
	if m := mode(t, filepath.Join(dir, CAKeyFile)); m != 0o600 {
		t.Errorf("CA key mode %04o, want 0600", m)
	}
	if m := mode(t, dir); m != 0o700 {
		t.Errorf("CA dir mode %04o, want 0700", m)
	}
	ca := readCert(t, filepath.Join(dir, CACertFile))
	if !ca.IsCA || ca.PublicKeyAlgorithm != x509.ECDSA || ca.NotAfter.Sub(t0) != CAValidity {
		t.Fatalf("CA: IsCA %v, algorithm %v, not after %v", ca.IsCA, ca.PublicKeyAlgorithm, ca.NotAfter)
	}
	path, err := Issue(dir, dir, Request{Name: "db1", Hosts: []string{"db1.example.net", "10.0.0.1", "::1"}}, false, t0)
	if err != nil {
		t.Fatal(err)
	}
	if m := mode(t, filepath.Join(dir, "db1.key")); m != 0o600 {
		t.Errorf("leaf key mode %04o, want 0600", m)
	}
	leaf := readCert(t, path)
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	for _, c := range []struct {
		host string
		eku  x509.ExtKeyUsage
	}{{"db1.example.net", x509.ExtKeyUsageServerAuth}, {"10.0.0.1", x509.ExtKeyUsageServerAuth}, {"::1", x509.ExtKeyUsageClientAuth}} {
		if _, err := leaf.Verify(x509.VerifyOptions{DNSName: c.host, Roots: pool, CurrentTime: t0, KeyUsages: []x509.ExtKeyUsage{c.eku}}); err != nil {
			t.Errorf("server leaf for %s, usage %v: %v", c.host, c.eku, err)
		}
	}
	if _, err := leaf.Verify(x509.VerifyOptions{DNSName: "db2.example.net", Roots: pool, CurrentTime: t0}); err == nil {
		t.Error("leaf verified for a host it does not name")
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: pool, CurrentTime: t0.Add(LeafValidity + time.Hour)}); err == nil {
		t.Error("leaf verified after its validity")
	}
	cpath, err := Issue(dir, t.TempDir(), Request{Name: "ops", Client: true}, false, t0)
	if err != nil {
		t.Fatal(err)
	}
	cl := readCert(t, cpath)
	if _, err := cl.Verify(x509.VerifyOptions{Roots: pool, CurrentTime: t0, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Errorf("client leaf: %v", err)
	}
	if _, err := cl.Verify(x509.VerifyOptions{Roots: pool, CurrentTime: t0, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err == nil {
		t.Error("client-only leaf verified for server authentication")
	}
}

// TestRefused: every bad request is refused and writes nothing.
func TestRefused(t *testing.T) {
	dir := mustInit(t, t0)
	out := t.TempDir()
	for _, c := range []struct {
		name  string
		caDir string
		req   Request
		want  string
		bad   bool
	}{
		{"no name", dir, Request{Hosts: []string{"h"}}, "name", true},
		{"path in name", dir, Request{Name: "../x", Hosts: []string{"h"}}, "name", true},
		{"no host", dir, Request{Name: "a"}, "no host", true},
		{"host with port", dir, Request{Name: "a", Hosts: []string{"db1:7001"}}, `"db1:7001"`, true},
		{"URL host", dir, Request{Name: "a", Hosts: []string{"https://db1"}}, "https://db1", true},
		{"empty host", dir, Request{Name: "a", Hosts: []string{"db1", ""}}, `host ""`, true},
		{"space in host", dir, Request{Name: "a", Hosts: []string{"db 1"}}, "db 1", true},
		{"not quite an IP", dir, Request{Name: "a", Hosts: []string{"10.0.0"}}, "10.0.0", true},
		{"missing CA", filepath.Join(dir, "none"), Request{Name: "a", Hosts: []string{"h"}}, "sluice certs init", true},
	} {
		_, err := Issue(c.caDir, out, c.req, false, t0)
		if err == nil || !strings.Contains(err.Error(), c.want) || errors.Is(err, ErrBadInput) != c.bad {
			t.Errorf("%s: err %v, want one naming %q (bad input %v)", c.name, err, c.want, c.bad)
		}
		if strings.Contains(err.Error(), "\n") {
			t.Errorf("%s: error of several lines: %q", c.name, err)
		}
	}
	if ents, _ := os.ReadDir(out); len(ents) != 0 {
		t.Errorf("refused requests wrote %d files", len(ents))
	}
	// Existing files: refused without force, replaced with it.
	before, _ := os.ReadFile(filepath.Join(dir, CAKeyFile))
	if err := Init(dir, false, t0); !errors.Is(err, ErrExists) {
		t.Errorf("second init: %v, want ErrExists", err)
	}
	if after, _ := os.ReadFile(filepath.Join(dir, CAKeyFile)); string(after) != string(before) {
		t.Error("a refused init changed the CA key")
	}
	if _, err := Issue(dir, out, Request{Name: "a", Hosts: []string{"h"}}, false, t0); err != nil {
		t.Fatal(err)
	}
	if _, err := Issue(dir, out, Request{Name: "a", Hosts: []string{"h"}}, false, t0); !errors.Is(err, ErrExists) {
		t.Errorf("second issue: %v, want ErrExists", err)
	}
	if _, err := Issue(dir, out, Request{Name: "a", Hosts: []string{"h2"}}, true, t0); err != nil {
		t.Errorf("issue --force: %v", err)
	}
	if err := Init(dir, true, t0); err != nil {
		t.Errorf("init --force: %v", err)
	}
}

// handshake runs a TLS handshake between server and client configs over
// a loopback TCP connection and returns both sides' errors (the server's
// judges the client's certificate).
func handshake(t *testing.T, server, client *tls.Config) (serverErr, clientErr error) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	done := make(chan error, 1)
	go func() {
		a, err := ln.Accept()
		if err != nil {
			done <- err
			return
		}
		defer a.Close()
		a.SetDeadline(time.Now().Add(10 * time.Second))
		s := tls.Server(a, server)
		err = s.Handshake()
		if err == nil {
			// TLS 1.3: the server judges the client's certificate after
			// the client's handshake returned; read the client's byte.
			_, err = s.Read(make([]byte, 1))
		}
		done <- err
	}()
	b, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	b.SetDeadline(time.Now().Add(10 * time.Second))
	c := tls.Client(b, client)
	if clientErr = c.Handshake(); clientErr == nil {
		_, clientErr = c.Write([]byte{1})
	}
	serverErr = <-done
	return serverErr, clientErr
}

// TestMutualTLS: a server built by Files.Server accepts a client
// certificate of its CA and refuses none, another CA's and an expired one.
func TestMutualTLS(t *testing.T) {
	now := time.Now()
	dir := mustInit(t, now)
	other := mustInit(t, now)
	issue := func(caDir, name string, client bool, at time.Time) Files {
		r := Request{Name: name, Client: client}
		if !client {
			r.Hosts = []string{"127.0.0.1"}
		}
		p, err := Issue(caDir, caDir, r, false, at)
		if err != nil {
			t.Fatal(err)
		}
		return Files{Cert: p, Key: strings.TrimSuffix(p, ".crt") + ".key", CA: filepath.Join(dir, CACertFile)}
	}
	srv := issue(dir, "agent", false, now)
	scfg, err := srv.Server()
	if err != nil {
		t.Fatal(err)
	}
	expired := issue(dir, "old", true, now.Add(-2*LeafValidity))
	for _, c := range []struct {
		name string
		f    Files
		ok   bool
	}{
		{"own CA's client certificate", issue(dir, "ops", true, now), true},
		{"a peer's server certificate", issue(dir, "peer", false, now), true},
		{"no certificate", Files{CA: srv.CA}, false},
		{"another CA's certificate", issue(other, "stranger", true, now), false},
		{"expired certificate", expired, false},
	} {
		c.f.CA = srv.CA
		ccfg, err := c.f.Client()
		if err != nil {
			t.Fatal(err)
		}
		ccfg.ServerName = "127.0.0.1"
		serr, _ := handshake(t, scfg, ccfg)
		if (serr == nil) != c.ok {
			t.Errorf("%s: server's verdict %v, want accepted %v", c.name, serr, c.ok)
		}
	}
	// A client trusting another CA refuses the server.
	ccfg, err := Files{CA: filepath.Join(other, CACertFile)}.Client()
	if err != nil {
		t.Fatal(err)
	}
	ccfg.ServerName = "127.0.0.1"
	if _, cerr := handshake(t, scfg, ccfg); cerr == nil {
		t.Error("a client trusting another CA accepted the server")
	}
	if err := (Files{Cert: srv.Cert}).Check(); err == nil {
		t.Error("a certificate without key and CA passed Check")
	}
}
