package agent

import (
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestNewRefusesBadConfig: a config whose listen address, OS user,
// PostgreSQL binaries or tenant settings are bad is refused by New with
// ErrConfig and a one-line error naming the field, before the root (and so
// the catalog) exists; a listener that cannot bind leaves no root either.
// The tenant settings are judged by PostgreSQL 15 itself.
func TestNewRefusesBadConfig(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	for _, tc := range []struct {
		name   string
		edit   func(c *Config)
		config bool   // want ErrConfig (else another error)
		want   string // in the error
	}{
		{"listen without a port", func(c *Config) { c.Listen = "7001" }, true, `listen "7001": want host:port`},
		{"listen port out of range", func(c *Config) { c.Listen = "127.0.0.1:99999" }, true, `port "99999"`},
		{"listen host not a name", func(c *Config) { c.Listen = "local host:7001" }, true, `host "local host"`},
		{"listen host unknown", func(c *Config) { c.Listen = "nosuchhost.invalid:7001" }, true, "does not resolve"},
		{"os_user unknown", func(c *Config) { c.OSUser = "nosuchuser" }, true, `os_user "nosuchuser": no such OS user`},
		{"os_user root", func(c *Config) { c.OSUser = "root" }, true, `os_user "root": is root`},
		{"pg_bin_dir empty", func(c *Config) { c.PGBinDir = "/nonexistent" }, true, `pg_bin_dir "/nonexistent"`},
		{"shared_buffers in words", func(c *Config) { c.Tenant.SharedBuffers = "lots" }, true, `tenant.shared_buffers: invalid value for parameter "shared_buffers": "lots"`},
		{"shared_buffers in settings", func(c *Config) { c.Tenant.Settings = map[string]string{"shared_buffers": "10s"} }, true, "tenant.settings.shared_buffers: invalid value"},
		{"setting out of range", func(c *Config) { c.Tenant.Settings = map[string]string{"max_connections": "0"} }, true, "tenant.settings.max_connections: 0 is outside the valid range"},
		{"setting misspelt", func(c *Config) { c.Tenant.Settings = map[string]string{"work_meme": "4MB"} }, true, `tenant.settings.work_meme: unrecognized configuration parameter "work_meme"`},
		{"tls cert missing", func(c *Config) {
			c.TLSCert, c.TLSKey, c.TLSCA, c.InsecureLoopback = "/nonexistent.pem", "/nonexistent.key", "/nonexistent-ca.pem", false
		}, true, "tls"},
		{"tls cert without a CA", func(c *Config) { c.TLSCert, c.TLSKey, c.InsecureLoopback = "/c.pem", "/k.pem", false }, true, "tls_cert, tls_key, tls_ca: a certificate, its key and the CA go together"},
		{"neither tls nor insecure_loopback", func(c *Config) { c.InsecureLoopback = false }, true, "no tls_cert, tls_key and tls_ca: the API requires mutual TLS"},
		{"insecure_loopback on every interface", func(c *Config) { c.Listen = ":0" }, true, `insecure_loopback: listen ":0" is not a loopback address`},
		{"insecure_loopback on 0.0.0.0", func(c *Config) { c.Listen = "0.0.0.0:7001" }, true, `insecure_loopback: listen "0.0.0.0:7001" is not a loopback address`},
		{"insecure_loopback and tls", func(c *Config) { c.TLSCert, c.TLSKey, c.TLSCA = "/c.pem", "/k.pem", "/ca.pem" }, true, "insecure_loopback excludes tls_cert"},
		{"catalog not etcd", func(c *Config) { c.Catalog = "bolt:///x" }, true, `agent config: catalog "bolt:///x": want etcd://`},
		{"catalog endpoint without port", func(c *Config) { c.Catalog = "etcd://h1/x" }, true, `endpoint "h1": want host:port`},
		{"proxies without proxy", func(c *Config) { c.Proxies = []string{"http://127.0.0.1:6401"} }, true, "proxies needs proxy"},
		{"catalog off the host in clear", func(c *Config) { c.Catalog = "etcd://10.0.0.5:2379/x" }, true, "insecure_loopback: catalog endpoint 10.0.0.5:2379 is not on loopback"},
		{"proxies twice", func(c *Config) { c.Proxy, c.Proxies = "http://127.0.0.1:6400", []string{"127.0.0.1:6400"} }, true, "proxies: http://127.0.0.1:6400 named twice"},
		{"listen address in use", func(c *Config) { c.Listen = busy.Addr().String() }, false, "address already in use"},
	} {
		root := filepath.Join(t.TempDir(), "root")
		cfg := Config{Name: "a1", Root: root, Listen: "127.0.0.1:0", InsecureLoopback: true, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
		tc.edit(&cfg)
		a, err := New(cfg)
		if err == nil {
			a.Close()
			t.Errorf("%s: accepted", tc.name)
			continue
		}
		if errors.Is(err, ErrConfig) != tc.config || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%s: %v (config error %v), want a one-line error containing %q (config error %v)", tc.name, err, errors.Is(err, ErrConfig), tc.want, tc.config)
		}
		if _, err := os.Stat(root); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s: the root exists after the refusal (%v)", tc.name, err)
		}
	}
	// The same config, good, starts.
	root := filepath.Join(t.TempDir(), "root")
	a, err := New(Config{Name: "a1", Root: root, Listen: "localhost:0", InsecureLoopback: true, Tenant: TenantDefaults{SharedBuffers: "16MB", Settings: map[string]string{"work_mem": "4MB", "fsync": "off"}},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatalf("good config: %v", err)
	}
	a.Close()
}
