package certs

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
)

// Files names the PEM files of one party's mutual TLS: its certificate and
// key, and the CA that the other side's certificate must chain to.
type Files struct {
	Cert, Key, CA string
}

// IsZero reports whether no file is named.
func (f Files) IsZero() bool { return f == Files{} }

// Check returns an error unless all three files are named, or none.
func (f Files) Check() error {
	if f.IsZero() || (f.Cert != "" && f.Key != "" && f.CA != "") {
		return nil
	}
	return errors.New("a certificate, its key and the CA go together (all three or none)")
}

// Server returns the configuration of a listener that presents Cert and
// requires every client to present a certificate chaining to CA
// (tls.RequireAndVerifyClientCert): a client without one, with one of
// another CA, or with an expired one fails the handshake. REQUIRES: all
// three files named.
func (f Files) Server() (*tls.Config, error) {
	if f.Cert == "" || f.Key == "" || f.CA == "" {
		return nil, errors.New("tls: a server needs a certificate, its key and the CA of its clients")
	}
	cert, err := tls.LoadX509KeyPair(f.Cert, f.Key)
	if err != nil {
		return nil, fmt.Errorf("tls: %w", err)
	}
	pool, err := LoadPool(f.CA)
	if err != nil {
		return nil, err
	}
	return &tls.Config{
		Certificates: []tls.Certificate{cert},
		ClientAuth:   tls.RequireAndVerifyClientCert,
		ClientCAs:    pool,
		MinVersion:   tls.VersionTLS12,
	}, nil
}

// Client returns the configuration of a client that trusts servers whose
// certificate chains to CA and presents Cert (if named; a server that
// requires one refuses the handshake without it).
func (f Files) Client() (*tls.Config, error) {
	if f.CA == "" {
		return nil, errors.New("tls: a client needs the CA of its servers")
	}
	if (f.Cert == "") != (f.Key == "") {
		return nil, errors.New("tls: a certificate and its key go together")
	}
	pool, err := LoadPool(f.CA)
	if err != nil {
		return nil, err
	}
	c := &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	if f.Cert != "" {
		cert, err := tls.LoadX509KeyPair(f.Cert, f.Key)
		if err != nil {
			return nil, fmt.Errorf("tls: %w", err)
		}
		c.Certificates = []tls.Certificate{cert}
	}
	return c, nil
}

// LoadPool returns a pool of the PEM certificates in file.
func LoadPool(file string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("tls: CA: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("tls: CA %s: no PEM certificate", file)
	}
	return pool, nil
}
