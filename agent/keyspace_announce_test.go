package agent

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sluicedb/sluice/agent/client"
	"github.com/sluicedb/sluice/proxy"
)

// TestKeyspaceRoutableAtCreate: the agent a keyspace is created on tells
// its proxy at once, so a client reaches the keyspace through the proxy as
// soon as the creation returns. The proxy here polls the agents' catalogs
// only at its start (its poll period is an hour): it knows the tenants,
// and would learn the keyspace only from the agent's call.
func TestKeyspaceRoutableAtCreate(t *testing.T) {
	c1, c2 := agentPair(t)
	api := freeAddrExcept(t, c1.Listen, c2.Listen)
	const token = "announce-token"
	c1.Proxy, c1.ProxyTokenFile = "http://"+api, writeTokenFile(t, token)
	a1, a2 := startAgent(t, c1), startAgent(t, c2)
	ctx := ctxT(t)
	if _, err := a1.c.CreateTenant(ctx, client.CreateTenant{ID: 1, Name: "ks-a", Users: testUsers}); err != nil {
		t.Fatal(err)
	}
	tb, err := a2.c.CreateTenant(ctx, client.CreateTenant{ID: 2, Name: "ks-b", Users: testUsers})
	if err != nil {
		t.Fatal(err)
	}
	px, err := proxy.New(proxy.Config{Listen: "127.0.0.1:0", APIListen: api, Token: token, Users: testProxyUsers(),
		Catalogs: []string{"http://" + c1.Listen, "http://" + c2.Listen}, CatalogTokenFile: c1.PeerTokenFile,
		CatalogPoll: time.Hour, TxLog: filepath.Join(t.TempDir(), "txlog"), Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	if err := px.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer px.Close()
	waitProxyRoute(t, px.APIClient(), "ks-a", fmt.Sprintf("127.0.0.1:%d", a1.TenantPort(1)))
	waitProxyRoute(t, px.APIClient(), "ks-b", fmt.Sprintf("127.0.0.1:%d", tb.Port))

	if err := postKeyspace(ctx, a1.c, ksMoveSpec(t)); err != nil {
		t.Fatal(err)
	}
	cs := fmt.Sprintf("postgres://%s:%s@%s/orders?sslmode=disable", testUsers[0].Name, testUsers[0].Password, px.Addr())
	conn, err := pgx.Connect(ctx, cs)
	if err != nil {
		t.Fatalf("a client of keyspace orders right after its creation: %v", err)
	}
	defer conn.Close(ctx)
	for _, k := range []int{1, ksSplit} {
		if _, err := conn.Exec(ctx, "INSERT INTO kv (k, v) VALUES ($1, 'v')", k); err != nil {
			t.Fatalf("a write of key %d right after the creation: %v", k, err)
		}
	}
}
