package proxy

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/sluicedb/sluice/keyspace"
	"github.com/sluicedb/sluice/proxy/client"
)

// fakeCatalog serves GET /v1/tenants like a sluice agent.
type fakeCatalog struct {
	mu      sync.Mutex
	tenants []catalogTenant
}

func (f *fakeCatalog) set(ts ...catalogTenant) {
	f.mu.Lock()
	f.tenants = ts
	f.mu.Unlock()
}

func (f *fakeCatalog) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/v1/tenants" {
		http.NotFound(w, r)
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	json.NewEncoder(w).Encode(f.tenants)
}

func waitRoute(t *testing.T, api *client.Client, tenant, addr string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		rs, err := api.Routes(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range rs {
			if r.Tenant == tenant && r.Addr == addr {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("tenant %s never routed to %s: %+v", tenant, addr, rs)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// catalogProxy starts a proxy that follows cat every 20 ms.
func catalogProxy(t *testing.T, cat *fakeCatalog) *Proxy {
	t.Helper()
	hs := httptest.NewServer(cat)
	t.Cleanup(hs.Close)
	p, err := New(Config{Listen: "127.0.0.1:0", APIListen: "127.0.0.1:0", Trust: true,
		Catalogs: []string{hs.URL}, CatalogPoll: 20 * time.Millisecond, Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

func TestCatalogFollowing(t *testing.T) {
	cat := &fakeCatalog{}
	cat.set(catalogTenant{ID: 1, Name: "acme", Host: "127.0.0.1", Port: 5001, Database: "postgres", State: "running"},
		catalogTenant{ID: 2, Name: "beta", Host: "127.0.0.1", Port: 5002, Database: "postgres", State: "creating"})
	p := catalogProxy(t, cat)
	api := p.APIClient()
	ctx := context.Background()

	waitRoute(t, api, "acme", "127.0.0.1:5001")
	if p.tenantByName("beta") != nil {
		t.Fatal("tenant beta routed although not running")
	}
	// A tenant the proxy first sees migrating out is served by its source:
	// routed there, so that its handover has something to hold.
	cat.set(catalogTenant{ID: 1, Name: "acme", Host: "127.0.0.1", Port: 5001, Database: "postgres", State: "running"},
		catalogTenant{ID: 3, Name: "delta", Host: "127.0.0.1", Port: 5005, Database: "postgres", State: "migrating-out"},
		catalogTenant{ID: 4, Name: "omega", Host: "127.0.0.1", Port: 5006, Database: "postgres", State: "migrating-in"})
	waitRoute(t, api, "delta", "127.0.0.1:5005")
	time.Sleep(100 * time.Millisecond) // five polls
	if p.tenantByName("omega") != nil {
		t.Fatal("a tenant migrating in (its target, not yet serving) was routed")
	}
	// The catalog moves the tenant: the route follows.
	cat.set(catalogTenant{ID: 1, Name: "acme", Host: "127.0.0.1", Port: 5003, Database: "postgres", State: "running"})
	waitRoute(t, api, "acme", "127.0.0.1:5003")

	// A handover through the API wins over a catalog that has not caught up.
	if _, err := api.Hold(ctx, "acme", time.Second); err != nil {
		t.Fatal(err)
	}
	if err := api.Switch(ctx, "acme", "127.0.0.1:5004"); err != nil {
		t.Fatal(err)
	}
	if err := api.Release(ctx, "acme"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond) // ten polls still reporting 5003
	waitRoute(t, api, "acme", "127.0.0.1:5004")
	// When the catalog reports a new location, it is followed again.
	cat.set(catalogTenant{ID: 1, Name: "acme", Host: "127.0.0.1", Port: 5004, Database: "postgres", State: "running"})
	time.Sleep(100 * time.Millisecond)
	waitRoute(t, api, "acme", "127.0.0.1:5004")

	// API errors.
	if _, err := api.Hold(ctx, "nobody", time.Second); err == nil {
		t.Fatal("hold of unknown tenant succeeded")
	}
	if err := api.Switch(ctx, "acme", "not-an-addr"); err == nil {
		t.Fatal("switch to a bad address succeeded")
	}
	if err := api.SetRoute(ctx, client.Route{Tenant: "gamma", Addr: "127.0.0.1:5010", Database: "g"}); err != nil {
		t.Fatal(err)
	}
	waitRoute(t, api, "gamma", "127.0.0.1:5010")
	resp, err := http.Get("http://" + p.APIAddr() + "/metrics")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("metrics: %v %v", resp, err)
	}
	resp.Body.Close()
}

// TestCatalogHandover: a proxy that learns a tenant from a catalog saying a
// handover holds it (it restarted mid-handover) holds the tenant's new
// transactions until the catalog stops saying so, and routes a switched
// tenant to its target (served_at) while its source still lists it.
func TestCatalogHandover(t *testing.T) {
	cat := &fakeCatalog{}
	cat.set(catalogTenant{ID: 1, Name: "acme", Host: "127.0.0.1", Port: 5001, Database: "postgres", State: "migrating-out", Held: true})
	p := catalogProxy(t, cat)
	api := p.APIClient()
	held := func() bool {
		rs, err := api.Routes(context.Background())
		if err != nil || len(rs) != 1 {
			t.Fatalf("routes %+v %v", rs, err)
		}
		return rs[0].Held
	}
	waitRoute(t, api, "acme", "127.0.0.1:5001")
	if !held() {
		t.Fatal("a tenant its catalog says is held was routed unheld")
	}
	// Switched: the source's entry names the target, still held.
	cat.set(catalogTenant{ID: 1, Name: "acme", Host: "127.0.0.1", Port: 5001, Database: "postgres", State: "migrating-out", Held: true, ServedAt: "127.0.0.1:5002"})
	waitRoute(t, api, "acme", "127.0.0.1:5002")
	if !held() {
		t.Fatal("released before the catalog said so")
	}
	// Released: the catalog stops saying held.
	cat.set(catalogTenant{ID: 1, Name: "acme", Host: "127.0.0.1", Port: 5001, Database: "postgres", State: "migrating-out", ServedAt: "127.0.0.1:5002"})
	deadline := time.Now().Add(10 * time.Second)
	for held() {
		if time.Now().After(deadline) {
			t.Fatal("still held after the catalog stopped saying so")
		}
		time.Sleep(20 * time.Millisecond)
	}
	// An API hold is not lifted by a catalog that never said held.
	if _, err := api.Hold(context.Background(), "acme", time.Second); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond) // five polls
	if !held() {
		t.Fatal("a catalog that never said held released the API's hold")
	}
}

// TestCatalogStaleHold: a catalog's "held" answered to a poll asked before
// the agent's release (the poll crossed it) must not hold the tenant again,
// and a hold a catalog asserted is lifted once that catalog stops serving
// the tenant (moved), whatever it said last.
func TestCatalogStaleHold(t *testing.T) {
	p, err := New(Config{Listen: "127.0.0.1:0", APIListen: "127.0.0.1:0", Trust: true, Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	const base = "http://agent-a"
	ct := catalogTenant{ID: 1, Name: "acme", Host: "127.0.0.1", Port: 5001, Database: "postgres", State: "migrating-out"}
	if err := p.applyCatalog(base, []catalogTenant{ct}, time.Now()); err != nil {
		t.Fatal(err)
	}
	tn := p.tenantByName("acme")
	if tn == nil || tn.isHeld() {
		t.Fatal("acme not routed, or held")
	}
	// The agent holds through the API and records the hold; a poll asks;
	// the agent releases; the poll's answer (held) arrives.
	tn.holdNew()
	asked := time.Now()
	tn.release(0, 0)
	ct.Held, ct.ServedAt = true, "127.0.0.1:5002"
	if err := p.applyCatalog(base, []catalogTenant{ct}, asked); err != nil {
		t.Fatal(err)
	}
	if tn.isHeld() {
		t.Fatal("a held asked before the release held the tenant again")
	}
	heldT := ct

	// A catalog that said held, then stops serving the tenant: lifted.
	heldT.Name, heldT.ServedAt = "beta", ""
	if err := p.applyCatalog(base, []catalogTenant{heldT}, time.Now()); err != nil {
		t.Fatal(err)
	}
	beta := p.tenantByName("beta")
	if beta == nil || !beta.isHeld() {
		t.Fatal("beta not held")
	}
	heldT.State = "moved"
	if err := p.applyCatalog(base, []catalogTenant{heldT}, time.Now()); err != nil {
		t.Fatal(err)
	}
	if beta.isHeld() {
		t.Fatal("a hold its catalog asserted outlived the tenant leaving that catalog")
	}
}

func (t *tenant) isHeld() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.mu.held
}

// TestStaleKeyspaceAnswer: a catalog's keyspace read before a switch the
// proxy already has (its reconfiguration's status, read after, names the
// newer epoch) does not replace the newer one; a keyspace created again
// under the same name (epoch 1, no such reconfiguration) does.
func TestStaleKeyspaceAnswer(t *testing.T) {
	p, err := New(Config{Listen: "127.0.0.1:0", APIListen: "127.0.0.1:0", Trust: true, Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	at := func(epoch uint64, plan string) *keyspace.Keyspace {
		ks, err := keyspace.Decode([]byte(fmt.Sprintf(`{"name": "bank", "epoch": %d,
			"partitions": [{"name": "p1", "tenant": "r1"}, {"name": "p2", "tenant": "r2"}],
			"tables": [{"name": "acct", "kind": "sharded", "column": "k", "type": "int"}],
			"plan": {"acct": %s}}`, epoch, plan)))
		if err != nil {
			t.Fatal(err)
		}
		return ks
	}
	const driver = "http://agent-a"
	if err := p.installKeyspace(at(3, `{"p1": "[,500)", "p2": "[500,)"}`), nil, driver); err != nil {
		t.Fatal(err)
	}
	stale := &reshardView{ID: "rs-2", Phase: "moving", ToEpoch: 3}
	if err := p.installKeyspace(at(2, `{"p1": "[,1000)", "p2": "[1000,)"}`), stale, driver); err != nil {
		t.Fatal(err)
	}
	if e := p.keyspace("bank").KS.Epoch; e != 3 {
		t.Fatalf("a stale answer installed epoch %d over 3", e)
	}
	if err := p.installKeyspace(at(1, `{"p1": "[,10)", "p2": "[10,)"}`), nil, driver); err != nil {
		t.Fatal(err)
	}
	if e := p.keyspace("bank").KS.Epoch; e != 1 {
		t.Fatalf("a keyspace created again stayed at epoch %d", e)
	}
}
