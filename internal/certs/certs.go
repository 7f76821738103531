// Package certs makes and loads the certificates of sluice's mutual TLS: a
// small certificate authority (an ECDSA P-256 key and a self-signed CA
// certificate) and the leaf certificates it signs for agents, proxies and
// operators (`sluice certs init|issue`), and the tls.Configs that servers
// and clients build from PEM files. crypto/x509 only; an operator may bring
// certificates of their own CA instead (any PEM certificate and key whose
// chain ends at the configured CA file).
//
// # Files
//
//	DIR/ca.crt      the CA certificate (PEM, mode 0644): every agent, proxy
//	                and CLI is given it (tls_ca, --tls-ca, --ca, $SLUICE_CA)
//	DIR/ca.key      the CA's private key (PKCS#8 PEM, mode 0600): keep it on
//	                the machine that issues certificates
//	DIR/NAME.crt    a leaf certificate (PEM, 0644)
//	DIR/NAME.key    its private key (PKCS#8 PEM, 0600)
//
// A leaf for a server (an agent or a proxy, the default) carries both the
// server and the client authentication usage, since agents and proxies also
// call each other; it must name the hosts and addresses it is reached at
// (subject alternative names). A client leaf (Client, `--client`: the CLI,
// an operator) carries the client usage only and needs no host.
//
// Nothing is overwritten unless asked (Force): a second `init` would
// otherwise orphan every certificate the first CA signed.
package certs

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"
)

// The files of a CA directory.
const (
	CACertFile = "ca.crt"
	CAKeyFile  = "ca.key"
)

// Validity of what Init and Issue make.
const (
	// CAValidity is a CA certificate's lifetime: 10 years.
	CAValidity = 10 * 365 * 24 * time.Hour
	// LeafValidity is a leaf certificate's lifetime: 1 year (re-issue
	// before it ends; an expired certificate is refused by every peer).
	LeafValidity = 365 * 24 * time.Hour
	// backdate starts a certificate's validity this much before now, so a
	// peer whose clock is slightly behind accepts it.
	backdate = 5 * time.Minute
)

// ErrExists is returned when a file to write exists and Force is not set.
var ErrExists = errors.New("exists")

// ErrBadInput matches (errors.Is) every error about a request's fields or
// a CA directory that holds no usable CA.
var ErrBadInput = errors.New("bad input")

type badInput struct{ msg string }

func (e badInput) Error() string        { return e.msg }
func (e badInput) Is(target error) bool { return target == ErrBadInput }

func bad(format string, args ...any) error { return badInput{fmt.Sprintf(format, args...)} }

var (
	nameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$`)
	// dnsRE is a DNS name (RFC 1123 labels), optionally one leading "*."
	// wildcard label.
	dnsRE = regexp.MustCompile(`^(\*\.)?([A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*$`)
)

// Init makes a CA in dir (created 0700 if missing): CACertFile and
// CAKeyFile, valid from now for CAValidity. Existing files are an error
// (errors.Is ErrExists) unless force; nothing is written then.
func Init(dir string, force bool, now time.Time) error {
	certPath, keyPath := filepath.Join(dir, CACertFile), filepath.Join(dir, CAKeyFile)
	if err := checkFree(force, certPath, keyPath); err != nil {
		return err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return fmt.Errorf("certs: %w", err)
	}
	serial, err := newSerial()
	if err != nil {
		return err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: "sluice CA", Organization: []string{"sluice"}},
		NotBefore:    now.Add(-backdate), NotAfter: now.Add(CAValidity),
		IsCA: true, BasicConstraintsValid: true, MaxPathLenZero: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return fmt.Errorf("certs: CA certificate: %w", err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("certs: %w", err)
	}
	return writePair(certPath, keyPath, der, key)
}

// Request is a leaf certificate to issue.
type Request struct {
	// Name is the certificate's common name and its files' base name:
	// 1-63 letters, digits, '_', '.', '-'. Required.
	Name string
	// Hosts are the DNS names and IP addresses (v4 or v6) the holder is
	// reached at (subject alternative names). Required unless Client.
	Hosts []string
	// Client makes a client-only certificate (client authentication
	// usage); otherwise it is for a server that is also a client.
	Client bool
	// Validity is the certificate's lifetime from now; 0 = LeafValidity.
	Validity time.Duration
}

// validate checks r's fields and returns its SANs.
func (r Request) validate() (dns []string, ips []net.IP, err error) {
	if !nameRE.MatchString(r.Name) {
		return nil, nil, bad("name %q: want 1-63 letters, digits, '_', '.', '-'", r.Name)
	}
	if len(r.Hosts) == 0 && !r.Client {
		return nil, nil, bad("no host: a server certificate names the hosts and addresses it is reached at (or make a client-only certificate)")
	}
	for _, h := range r.Hosts {
		if ip := net.ParseIP(h); ip != nil {
			ips = append(ips, ip)
			continue
		}
		if len(h) > 253 || !dnsRE.MatchString(h) || strings.Trim(h, "0123456789.") == "" {
			return nil, nil, bad("host %q: want a DNS name or an IP address", h)
		}
		dns = append(dns, h)
	}
	if r.Validity < 0 {
		return nil, nil, bad("validity %s: want >= 0", r.Validity)
	}
	return dns, ips, nil
}

// Issue signs r with the CA in caDir and writes NAME.crt and NAME.key in
// outDir; it returns the certificate's path. Bad fields (errors.Is
// ErrBadInput), a missing or unreadable CA, or existing files without
// force (errors.Is ErrExists) write nothing; a missing or unreadable CA is
// bad input too.
func Issue(caDir, outDir string, r Request, force bool, now time.Time) (string, error) {
	dns, ips, err := r.validate()
	if err != nil {
		return "", err
	}
	ca, caKey, err := loadCA(caDir)
	if err != nil {
		return "", badInput{err.Error()} // --ca names no usable CA
	}
	certPath, keyPath := filepath.Join(outDir, r.Name+".crt"), filepath.Join(outDir, r.Name+".key")
	if err := checkFree(force, certPath, keyPath); err != nil {
		return "", err
	}
	validity := r.Validity
	if validity == 0 {
		validity = LeafValidity
	}
	notAfter := now.Add(validity)
	if notAfter.After(ca.NotAfter) {
		notAfter = ca.NotAfter
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return "", fmt.Errorf("certs: %w", err)
	}
	serial, err := newSerial()
	if err != nil {
		return "", err
	}
	eku := []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}
	if r.Client {
		eku = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: r.Name, Organization: []string{"sluice"}},
		NotBefore:    now.Add(-backdate), NotAfter: notAfter,
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: eku,
		DNSNames: dns, IPAddresses: ips,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return "", fmt.Errorf("certs: sign %s: %w", r.Name, err)
	}
	if err := os.MkdirAll(outDir, 0o700); err != nil {
		return "", fmt.Errorf("certs: %w", err)
	}
	return certPath, writePair(certPath, keyPath, der, key)
}

// loadCA reads caDir's CA certificate and key.
func loadCA(caDir string) (*x509.Certificate, *ecdsa.PrivateKey, error) {
	certPEM, err := os.ReadFile(filepath.Join(caDir, CACertFile))
	if err != nil {
		return nil, nil, fmt.Errorf("certs: CA: %w (make one with sluice certs init)", err)
	}
	keyPEM, err := os.ReadFile(filepath.Join(caDir, CAKeyFile))
	if err != nil {
		return nil, nil, fmt.Errorf("certs: CA key: %w", err)
	}
	cb, _ := pem.Decode(certPEM)
	if cb == nil || cb.Type != "CERTIFICATE" {
		return nil, nil, fmt.Errorf("certs: %s: no PEM certificate", filepath.Join(caDir, CACertFile))
	}
	ca, err := x509.ParseCertificate(cb.Bytes)
	if err != nil {
		return nil, nil, fmt.Errorf("certs: CA: %w", err)
	}
	if !ca.IsCA {
		return nil, nil, fmt.Errorf("certs: %s is not a CA certificate", filepath.Join(caDir, CACertFile))
	}
	kb, _ := pem.Decode(keyPEM)
	if kb == nil {
		return nil, nil, fmt.Errorf("certs: %s: no PEM key", filepath.Join(caDir, CAKeyFile))
	}
	k, err := x509.ParsePKCS8PrivateKey(kb.Bytes)
	if err != nil {
		return nil, nil, fmt.Errorf("certs: CA key: %w", err)
	}
	key, ok := k.(*ecdsa.PrivateKey)
	if !ok || !key.PublicKey.Equal(ca.PublicKey) {
		return nil, nil, fmt.Errorf("certs: %s does not match %s", CAKeyFile, CACertFile)
	}
	return ca, key, nil
}

// checkFree returns ErrExists for the first of paths that exists, unless force.
func checkFree(force bool, paths ...string) error {
	if force {
		return nil
	}
	for _, p := range paths {
		if _, err := os.Lstat(p); err == nil {
			return fmt.Errorf("certs: %s: %w (--force replaces it)", p, ErrExists)
		} else if !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("certs: %w", err)
		}
	}
	return nil
}

// writePair writes a certificate (0644) and its key (0600), each through a
// temporary file renamed into place.
func writePair(certPath, keyPath string, der []byte, key *ecdsa.PrivateKey) error {
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return fmt.Errorf("certs: %w", err)
	}
	if err := writeFile(keyPath, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder}), 0o600); err != nil {
		return err
	}
	return writeFile(certPath, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644)
}

func writeFile(path string, b []byte, mode os.FileMode) error {
	tmp := path + ".tmp"
	os.Remove(tmp)
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return fmt.Errorf("certs: %w", err)
	}
	_, werr := f.Write(b)
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	if werr == nil {
		werr = os.Rename(tmp, path)
	}
	if werr != nil {
		os.Remove(tmp)
		return fmt.Errorf("certs: write %s: %w", path, werr)
	}
	return nil
}

// newSerial returns a random 128-bit serial number.
func newSerial() (*big.Int, error) {
	s, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 128))
	if err != nil {
		return nil, fmt.Errorf("certs: serial: %w", err)
	}
	return s.Add(s, big.NewInt(1)), nil
}
