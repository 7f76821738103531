package agent

import (
	"context"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicedb/sluice/agent/client"
	"github.com/sluicedb/sluice/internal/etcdtest"
	"github.com/sluicedb/sluice/proxy"
)

// TestProxiesWatchEtcdCatalog: two agents share a three-member etcd
// catalog, and two proxies in front of their tenant watch its placements
// (proxy --catalog etcd://…) — they poll no agent. The agents hold and
// release through both (Config.Proxy, Proxies), but the switch is the
// driver's placement write: a proxy's switch call only waits for its watch
// to bring the new epoch, so a watch that did not deliver it would roll
// the handover back. Under a write load through both proxies the tenant
// moves a1 → a2: both route to a2 and every acknowledged write is on a2
// exactly once. A third proxy, started after the migration, routes to a2
// at once; its only etcd member is then stopped, the tenant moves back
// a2 → a1 meanwhile, and once the member is back the third proxy's watch
// resumes and routes to a1.
func TestProxiesWatchEtcdCatalog(t *testing.T) {
	cl := etcdtest.Start(t, 3)
	spec := "etcd://" + strings.Join(cl.Endpoints, ",") + "/fleet"
	c1, c2 := agentPair(t)
	c1.Catalog, c2.Catalog = spec, spec
	const token = "watch-token"
	var logs lockedBuffer
	newProxy := func(catalog string) *proxy.Proxy {
		px, err := proxy.New(proxy.Config{Listen: "127.0.0.1:0", APIListen: "127.0.0.1:0", Users: testProxyUsers(), Token: token,
			Catalogs: []string{catalog}, TxLog: filepath.Join(t.TempDir(), "txlog"),
			Logf: func(f string, args ...any) { fmt.Fprintf(&logs, f+"\n", args...); t.Logf(f, args...) }})
		if err != nil {
			t.Fatal(err)
		}
		if err := px.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { px.Close() })
		return px
	}
	px1, px2 := newProxy(spec), newProxy(spec)
	c1.Proxy, c1.Proxies, c1.ProxyTokenFile = "http://"+px1.APIAddr(), []string{"http://" + px2.APIAddr()}, writeTokenFile(t, token)
	c2.Proxy, c2.Proxies, c2.ProxyTokenFile = c1.Proxy, c1.Proxies, c1.ProxyTokenFile
	r := startTwoProxies(t, c1, c2, px1, px2)
	a1, a2, tn, dst, w1, w2 := r.a1, r.a2, r.tn, r.dst, r.w1, r.w2
	ctx := ctxT(t)
	for _, w := range []*ledgerWriter{w1, w2} {
		waitAcked(t, w, 50)
	}

	m, err := a1.c.StartMigration(ctx, client.StartMigration{Tenant: tn.ID, To: "a2"})
	if err != nil {
		t.Fatal(err)
	}
	m = waitMigration(t, a1.c, m.ID, 3*time.Minute, nil)
	if m.Outcome != "committed" {
		t.Fatalf("migration a1 → a2 ended %s (error %q)", m.Outcome, m.Error)
	}
	for _, px := range []*proxy.Proxy{px1, px2} {
		waitProxyRoute(t, px.APIClient(), "acme", dst)
	}
	r.finishOnTarget(t)
	// The route moved by the watch, at the placement's second epoch.
	if want := fmt.Sprintf("tenant acme now at %s/postgres (epoch 2)", dst); strings.Count(logs.String(), want) < 2 {
		t.Fatalf("the proxies' logs do not both say %q:\n%s", want, logs.String())
	}

	// A proxy started now routes to a2 at once; it watches one member only.
	k := (cl.Leader() + 1) % 3
	px3 := newProxy("etcd://" + cl.Endpoints[k] + "/fleet")
	waitProxyRoute(t, px3.APIClient(), "acme", dst)

	// Its watch is cut while the tenant moves back; it catches up after.
	cl.Stop(k)
	m, err = a2.c.StartMigration(ctx, client.StartMigration{Tenant: tn.ID, To: "a1"})
	if err != nil {
		t.Fatal(err)
	}
	m = waitMigration(t, a2.c, m.ID, 3*time.Minute, nil)
	if m.Outcome != "committed" {
		t.Fatalf("migration a2 → a1 ended %s (error %q)", m.Outcome, m.Error)
	}
	back := "127.0.0.1:" + strconv.Itoa(a1.TenantPort(tn.ID))
	for _, px := range []*proxy.Proxy{px1, px2} {
		waitProxyRoute(t, px.APIClient(), "acme", back)
	}
	if rs, err := px3.APIClient().Routes(ctx); err != nil || len(rs) != 1 || rs[0].Addr != dst {
		t.Fatalf("third proxy with its member down: routes %+v, %v; want acme still at %s", rs, err, dst)
	}
	if err := cl.Restart(k); err != nil {
		t.Fatal(err)
	}
	waitProxyRoute(t, px3.APIClient(), "acme", back)
}
