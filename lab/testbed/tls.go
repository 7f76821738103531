package testbed

import (
	"crypto/tls"
	"fmt"
	"net/http"
	"path/filepath"
	"time"

	"github.com/sluicedb/sluice/internal/certs"
)

// Certificates of a bed across hosts (Options.Hosts). An agent reachable
// from other hosts serves its API with mutual TLS only (agent tls.go), and
// a proxy whose API is not on loopback likewise: the bed issues, from
// Options.CADir's CA or one of its own under Root, a certificate per agent
// (its host's address), per proxy (the proxy host's address) and one client
// certificate the bed presents to them all. On loopback (no Hosts) the bed
// runs plain HTTP with the token (insecure_loopback) and issues nothing.

// bedCerts are the PEM files the bed's processes use.
type bedCerts struct {
	caDir  string
	ca     string // the CA certificate every party trusts
	client certs.Files
}

// makeCerts makes (or takes Options.CADir's) CA and the bed's client
// certificate; nil without Hosts.
func (b *Bed) makeCerts() error {
	if b.Opt.Hosts == nil {
		return nil
	}
	c := &bedCerts{caDir: b.Opt.CADir}
	if c.caDir == "" {
		c.caDir = filepath.Join(b.root, "ca")
		if err := certs.Init(c.caDir, false, time.Now()); err != nil {
			return fmt.Errorf("testbed: CA: %w", err)
		}
	}
	c.ca = filepath.Join(c.caDir, certs.CACertFile)
	var err error
	if c.client, err = c.issue(b.root, certs.Request{Name: "bed", Client: true}); err != nil {
		return err
	}
	b.certs = c
	return nil
}

// issue writes name's certificate and key in dir.
func (c *bedCerts) issue(dir string, r certs.Request) (certs.Files, error) {
	crt, err := certs.Issue(c.caDir, filepath.Join(dir, "certs"), r, true, time.Now())
	if err != nil {
		return certs.Files{}, fmt.Errorf("testbed: certificate %s: %w", r.Name, err)
	}
	return certs.Files{Cert: crt, Key: crt[:len(crt)-len(".crt")] + ".key", CA: c.ca}, nil
}

// clientTLS is the TLS configuration the bed calls agents and proxies
// with: its client certificate, trusting the CA.
func (c *bedCerts) clientTLS() (*tls.Config, error) {
	cfg, err := c.client.Client()
	if err != nil {
		return nil, fmt.Errorf("testbed: %w", err)
	}
	return cfg, nil
}

// httpClient is an HTTP client presenting the bed's client certificate.
func (c *bedCerts) httpClient() (*http.Client, error) {
	cfg, err := c.clientTLS()
	if err != nil {
		return nil, err
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = cfg
	return &http.Client{Transport: tr, Timeout: time.Minute}, nil
}

// scheme is the bed's API scheme: https across hosts, else http.
func (b *Bed) scheme() string {
	if b.certs != nil {
		return "https"
	}
	return "http"
}
