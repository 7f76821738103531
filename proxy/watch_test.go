package proxy

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicedb/sluice/catalog"
	"github.com/sluicedb/sluice/internal/etcdtest"
)

// TestWatchEtcdCatalog: a proxy with --catalog etcd://… and its
// certificates watches a mutual-TLS etcd's placements: a tenant an agent
// created is routed to the address its placement says. A switch call with
// an epoch is answered once the watch brings the driver's placement write
// (the route is the placement's), and one with an epoch nobody wrote
// fails when its caller gives up, the route unchanged: the call never
// moves the route itself.
func TestWatchEtcdCatalog(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "ca")
	server := issueTest(t, dir, "etcd", false)
	agentFiles := issueTest(t, dir, "agent", true)
	proxyFiles := issueTest(t, dir, "proxy", false)
	cl := etcdtest.StartTLS(t, 1, etcdtest.TLS{Cert: server.Cert, Key: server.Key, CA: server.CA})
	atls, err := agentFiles.Client()
	if err != nil {
		t.Fatal(err)
	}
	cat, err := catalog.OpenEtcd(catalog.EtcdOptions{Endpoints: cl.Endpoints, Prefix: "/fleet", Agent: "a1", TLS: atls})
	if err != nil {
		t.Fatal(err)
	}
	defer cat.Close()
	cat.SetServing("127.0.0.1", "app")
	if err := cat.Update(func(tx *catalog.Tx) error {
		return tx.CreateTenant(catalog.Tenant{ID: 1, Name: "acme", Port: 5001, State: catalog.Running})
	}); err != nil {
		t.Fatal(err)
	}

	p, err := New(Config{Listen: "127.0.0.1:0", APIListen: "127.0.0.1:0", Trust: true, Token: "tok",
		TLSCert: proxyFiles.Cert, TLSKey: proxyFiles.Key, TLSCA: proxyFiles.CA,
		Catalogs: []string{"etcd://" + cl.Endpoints[0] + "/fleet"}, Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	waitRoute(t, p.APIClient(), "acme", "127.0.0.1:5001")

	ctx := context.Background()
	lk, err := cat.TryLock(ctx, "tenant/1")
	if err != nil {
		t.Fatal(err)
	}
	defer lk.Unlock(ctx)
	var epoch int64
	if err := lk.Update(func(tx *catalog.Tx) (err error) { epoch, err = tx.SwitchPlacement(1, "127.0.0.1:5002"); return err }); err != nil {
		t.Fatal(err)
	}
	if err := p.APIClient().SwitchEpoch(ctx, "acme", "127.0.0.1:5002", epoch); err != nil {
		t.Fatalf("switch at the written epoch %d: %v", epoch, err)
	}
	if rs, err := p.APIClient().Routes(ctx); err != nil || len(rs) != 1 || rs[0].Addr != "127.0.0.1:5002" || rs[0].Database != "app" {
		t.Fatalf("routes after the switch: %+v, %v; want acme at 127.0.0.1:5002/app", rs, err)
	}
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	if err := p.APIClient().SwitchEpoch(short, "acme", "127.0.0.1:5009", epoch+1); err == nil {
		t.Fatal("switch at an epoch never written answered")
	}
	if rs, err := p.APIClient().Routes(ctx); err != nil || len(rs) != 1 || rs[0].Addr != "127.0.0.1:5002" {
		t.Fatalf("routes after the unanswered switch: %+v, %v; want acme still at 127.0.0.1:5002", rs, err)
	}
}

// TestWatchEtcdCatalogConfig: an etcd catalog that is malformed, or on
// another host without TLSCA, is refused at New (ErrConfig).
func TestWatchEtcdCatalogConfig(t *testing.T) {
	for spec, want := range map[string]string{
		"etcd://nohost/fleet":        "want host:port",
		"etcd://10.0.0.1:2379/fleet": "not loopback",
	} {
		_, err := New(Config{Listen: "127.0.0.1:0", Trust: true, InsecureNoAuth: true, Catalogs: []string{spec}})
		if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), want) {
			t.Errorf("New with --catalog %s: %v; want ErrConfig mentioning %q", spec, err, want)
		}
	}
}
