package catalog

import (
	"crypto/tls"
	"path/filepath"
	"testing"
	"time"

	"github.com/sluicedb/sluice/internal/certs"
	"github.com/sluicedb/sluice/internal/etcdtest"
)

// TestEtcdMutualTLS: a catalog on an etcd cluster that speaks mutual TLS
// opens with a client certificate of the cluster's CA, and not without one,
// nor with one of another CA, nor trusting another CA.
func TestEtcdMutualTLS(t *testing.T) {
	now := time.Now()
	dir := t.TempDir()
	ca, other := filepath.Join(dir, "ca"), filepath.Join(dir, "other")
	for _, d := range []string{ca, other} {
		if err := certs.Init(d, false, now); err != nil {
			t.Fatal(err)
		}
	}
	issue := func(caDir string, r certs.Request) certs.Files {
		t.Helper()
		crt, err := certs.Issue(caDir, caDir, r, false, now)
		if err != nil {
			t.Fatal(err)
		}
		return certs.Files{Cert: crt, Key: crt[:len(crt)-len(".crt")] + ".key", CA: filepath.Join(caDir, certs.CACertFile)}
	}
	server := issue(ca, certs.Request{Name: "etcd", Hosts: []string{"127.0.0.1"}})
	cl := etcdtest.StartTLS(t, 1, etcdtest.TLS{Cert: server.Cert, Key: server.Key, CA: server.CA})

	agent := issue(ca, certs.Request{Name: "a1", Client: true})
	stranger := issue(other, certs.Request{Name: "a1", Client: true})
	client := func(f certs.Files) *tls.Config {
		t.Helper()
		c, err := f.Client()
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	open := func(tc *tls.Config) (*Catalog, error) {
		return OpenEtcd(EtcdOptions{Endpoints: cl.Endpoints, Prefix: "/tls", Agent: "a1", TLS: tc, opTimeout: 2 * time.Second})
	}
	c, err := open(client(agent))
	if err != nil {
		t.Fatalf("with the CA's client certificate: %v", err)
	}
	if err := c.PutTenant(Tenant{ID: 1, State: Running}); err != nil {
		t.Fatal(err)
	}
	c.Close()
	for name, tc := range map[string]*tls.Config{
		"no TLS":                      nil,
		"no client certificate":       client(certs.Files{CA: server.CA}),
		"a certificate of another CA": client(certs.Files{Cert: stranger.Cert, Key: stranger.Key, CA: server.CA}),
		"trusting another CA":         client(certs.Files{Cert: agent.Cert, Key: agent.Key, CA: stranger.CA}),
	} {
		if c, err := open(tc); err == nil {
			c.Close()
			t.Errorf("%s: opened", name)
		}
	}
}
