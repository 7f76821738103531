package proxy

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/sluicedb/sluice/internal/pgtest"
	"github.com/sluicedb/sluice/pgcluster"
	"github.com/sluicedb/sluice/proxy/client"
)

const testPassword = "s3cret-pw"

func TestMain(m *testing.M) {
	runChildProxy()
	code := m.Run()
	pgtest.Cleanup()
	os.Exit(code)
}

// newServer starts a PostgreSQL cluster that requires SCRAM passwords.
func newServer(t *testing.T) *pgcluster.Cluster {
	t.Helper()
	return pgtest.New(t, pgcluster.Options{Password: testPassword, AuthMethod: "scram-sha-256"})
}

// startProxy starts a proxy routing tenant "acme" to c's database "postgres".
func startProxy(t *testing.T, c *pgcluster.Cluster, mod func(*Config)) *Proxy {
	t.Helper()
	cfg := Config{
		Listen:    "127.0.0.1:0",
		APIListen: "127.0.0.1:0",
		Users:     map[string]string{"postgres": testPassword},
		Routes:    []RouteConfig{{Tenant: "acme", Addr: c.Addr(), Database: "postgres"}},
		Logf:      t.Logf,
	}
	if mod != nil {
		mod(&cfg)
	}
	p, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// proxyURL is a libpq/pgx URL for tenant alias db through p.
func proxyURL(p *Proxy, db, sslmode string) string {
	return fmt.Sprintf("postgres://postgres:%s@%s/%s?sslmode=%s", testPassword, p.Addr(), db, sslmode)
}

// kv is a libpq key/value connection string through p (for psql/pgbench).
// connectAcme opens a pgx session to tenant acme through p (no TLS),
// closed when the test ends.
func connectAcme(ctx context.Context, t *testing.T, p *Proxy) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(ctx, proxyURL(p, "acme", "disable"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

// moveAcme hands tenant acme over to addr through the API: hold (1 s
// deadline), switch, release.
func moveAcme(ctx context.Context, t *testing.T, api *client.Client, addr string) {
	t.Helper()
	if _, err := api.Hold(ctx, "acme", time.Second); err != nil {
		t.Fatal(err)
	}
	if err := api.Switch(ctx, "acme", addr); err != nil {
		t.Fatal(err)
	}
	if err := api.Release(ctx, "acme"); err != nil {
		t.Fatal(err)
	}
}

func kv(p *Proxy, db string) string {
	host, port, _ := net.SplitHostPort(p.Addr())
	return fmt.Sprintf("host=%s port=%s dbname=%s user=postgres sslmode=disable", host, port, db)
}

// pgBin runs a PostgreSQL client binary as the current user with the test password.
func pgBin(ctx context.Context, t *testing.T, name string, args ...string) (string, error) {
	t.Helper()
	cmd := exec.CommandContext(ctx, filepath.Join(pgcluster.DefaultBinDir, name), args...)
	cmd.Env = append(os.Environ(), "PGPASSWORD="+testPassword, "PGCONNECT_TIMEOUT=10")
	cmd.Dir = t.TempDir()
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// writeCert writes a self-signed certificate for 127.0.0.1 and returns the file paths.
func writeCert(t *testing.T) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "sluice-test"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		IPAddresses:  []net.IP{net.ParseIP("127.0.0.1")},
		DNSNames:     []string{"localhost"},
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600)
	os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600)
	return certFile, keyFile
}

// pgbenchInit creates pgbench tables on c directly.
func pgbenchInit(t *testing.T, c *pgcluster.Cluster, scale int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	host, port, _ := net.SplitHostPort(c.Addr())
	out, err := pgBin(ctx, t, "pgbench", "-i", "-q", "-s", fmt.Sprint(scale), "-h", host, "-p", port, "-U", "postgres", "postgres")
	if err != nil {
		t.Fatalf("pgbench -i: %v\n%s", err, out)
	}
}

// failedTxns parses pgbench's "number of failed transactions: N" (0 if absent)
// and checks that every client finished.
func checkPgbench(t *testing.T, out string, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("pgbench: %v\n%s", err, out)
	}
	if strings.Contains(out, "aborted") {
		t.Fatalf("pgbench: a client aborted:\n%s", out)
	}
	if !strings.Contains(out, "number of failed transactions: 0 ") {
		t.Fatalf("pgbench: failed transactions:\n%s", out)
	}
}
