package agent

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicedb/sluice/agent/client"
	"github.com/sluicedb/sluice/proxy"
)

// TestHandoverTwoProxies: a tenant's clients come through two proxies, and
// the source agent hands over on both (Config.Proxies). First the second
// proxy's API is silent (cut off): the handover's hold cannot be had there
// in time, the migration rolls back, the first proxy serves from the
// source at once, and the rollback ends when the second answers again.
// Then, both answering, a migration commits: both proxies route to the
// target, and every write either writer had acknowledged is on the target
// exactly once.
func TestHandoverTwoProxies(t *testing.T) {
	c1, c2 := agentPair(t)
	const token = "proxies-token"
	newProxy := func() *proxy.Proxy {
		px, err := proxy.New(proxy.Config{Listen: "127.0.0.1:0", APIListen: "127.0.0.1:0", Users: testProxyUsers(), Token: token,
			Catalogs: []string{"http://" + c1.Listen, "http://" + c2.Listen}, CatalogTokenFile: c1.PeerTokenFile,
			CatalogPoll: 100 * time.Millisecond, TxLog: filepath.Join(t.TempDir(), "txlog"), Logf: t.Logf})
		if err != nil {
			t.Fatal(err)
		}
		if err := px.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { px.Close() })
		return px
	}
	px1, px2 := newProxy(), newProxy()
	// The agent reaches the second proxy's API through a gate that can
	// fall silent: requests wait unanswered until it speaks again (or the
	// caller gives up).
	var silent atomic.Bool
	u, _ := url.Parse("http://" + px2.APIAddr())
	rp := httputil.NewSingleHostReverseProxy(u)
	gate := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for silent.Load() {
			select {
			case <-r.Context().Done():
				return
			case <-time.After(10 * time.Millisecond):
			}
		}
		rp.ServeHTTP(w, r)
	}))
	defer gate.Close()
	c1.Proxy, c1.Proxies, c1.ProxyTokenFile = "http://"+px1.APIAddr(), []string{gate.URL}, writeTokenFile(t, token)
	c2.Proxy, c2.Proxies, c2.ProxyTokenFile = c1.Proxy, c1.Proxies, c1.ProxyTokenFile
	r := startTwoProxies(t, c1, c2, px1, px2)
	a1, tn, src, dst, w1, w2 := r.a1, r.tn, r.src, r.dst, r.w1, r.w2
	ctx := ctxT(t)
	time.Sleep(500 * time.Millisecond)

	silent.Store(true)
	m, err := a1.c.StartMigration(ctx, client.StartMigration{Tenant: tn.ID, To: "a2"})
	if err != nil {
		t.Fatal(err)
	}
	at := waitMigration(t, a1.c, m.ID, 3*time.Minute, func(v client.Migration) bool {
		return v.Progress.Phase == "rollback" || v.Done
	})
	if at.Done {
		t.Fatalf("migration ended %s with the second proxy silent (error %q); want it rolling back", at.Outcome, at.Error)
	}
	// Rolling back: the first proxy serves from the source again.
	waitProxyRoute(t, px1.APIClient(), "acme", src)
	before, _, _ := w1.stats()
	waitAcked(t, w1, before+50)
	silent.Store(false)
	m = waitMigration(t, a1.c, m.ID, 3*time.Minute, nil)
	if m.Outcome != "aborted" || !strings.Contains(m.Error, gate.URL) {
		t.Fatalf("migration with a silent proxy ended %s (error %q); want aborted, naming the silent proxy", m.Outcome, m.Error)
	}
	if r, err := px2.APIClient().Routes(ctx); err != nil || len(r) == 0 || r[0].Held {
		t.Fatalf("second proxy after the rollback: %+v, %v; want the tenant released", r, err)
	}
	before, _, _ = w2.stats()
	waitAcked(t, w2, before+50)

	m, err = a1.c.StartMigration(ctx, client.StartMigration{Tenant: tn.ID, To: "a2"})
	if err != nil {
		t.Fatal(err)
	}
	m = waitMigration(t, a1.c, m.ID, 3*time.Minute, nil)
	if m.Outcome != "committed" {
		t.Fatalf("migration with both proxies ended %s (error %q)", m.Outcome, m.Error)
	}
	for _, px := range []*proxy.Proxy{px1, px2} {
		waitProxyRoute(t, px.APIClient(), "acme", dst)
	}
	r.finishOnTarget(t)
}

// twoProxies is tenant acme (5 MB) on a1, routed by two proxies, with a
// ledger writer through each (w2's ids from 1<<40).
type twoProxies struct {
	a1, a2   *testAgent
	tn       client.Tenant
	src, dst string // acme's address on a1 and on a2
	w1, w2   *ledgerWriter
	stop     func() // stops both writers; once (also at the test's end)
}

// startTwoProxies starts a1 and a2 on c1 and c2, creates acme on a1 and
// waits until px1 and px2 route it, then starts the writers.
func startTwoProxies(t *testing.T, c1, c2 Config, px1, px2 *proxy.Proxy) *twoProxies {
	t.Helper()
	r := &twoProxies{a1: startAgent(t, c1), a2: startAgent(t, c2)}
	var err error
	if r.tn, err = r.a1.c.CreateTenant(ctxT(t), client.CreateTenant{Name: "acme", Users: testUsers}); err != nil {
		t.Fatal(err)
	}
	loadData(t, r.a1.ConnString(r.tn.Port, ""), 5)
	r.src, r.dst = "127.0.0.1:"+strconv.Itoa(r.tn.Port), "127.0.0.1:"+strconv.Itoa(r.a2.TenantPort(r.tn.ID))
	for _, px := range []*proxy.Proxy{px1, px2} {
		waitProxyRoute(t, px.APIClient(), "acme", r.src)
	}
	cs := func(px *proxy.Proxy) string {
		return fmt.Sprintf("postgres://%s:%s@%s/acme?sslmode=disable", testUsers[0].Name, testUsers[0].Password, px.Addr())
	}
	r.w1 = &ledgerWriter{conns: []string{cs(px1)}, pause: 2 * time.Millisecond}
	r.w2 = &ledgerWriter{conns: []string{cs(px2)}, pause: 2 * time.Millisecond, first: 1 << 40}
	wctx, wstop := context.WithCancel(context.Background())
	wdone := make(chan struct{}, 2)
	for _, w := range []*ledgerWriter{r.w1, r.w2} {
		go func() { w.run(wctx); wdone <- struct{}{} }()
	}
	var once sync.Once
	r.stop = func() { once.Do(func() { wstop(); <-wdone; <-wdone }) }
	t.Cleanup(r.stop)
	return r
}

// finishOnTarget lets each writer get 50 more writes through, stops them
// and checks every acknowledged write on acme's copy on a2.
func (r *twoProxies) finishOnTarget(t *testing.T) {
	t.Helper()
	for _, w := range []*ledgerWriter{r.w1, r.w2} {
		before, _, _ := w.stats()
		waitAcked(t, w, before+50)
	}
	r.stop()
	for i, w := range []*ledgerWriter{r.w1, r.w2} {
		acked, errs, _ := w.stats()
		t.Logf("writer through proxy %d: %d acknowledged, %d errors", i+1, acked, errs)
		w.verify(t, r.a2.ConnString(r.a2.TenantPort(r.tn.ID), ""))
	}
}

// waitAcked waits up to a minute until w has n acknowledged writes.
func waitAcked(t *testing.T, w *ledgerWriter, n int) {
	t.Helper()
	waitAckedAt(t, w, -1, n)
}

// waitAckedAt waits up to a minute until w has n acknowledged writes at
// its home (index in w.conns), or in all if home is -1.
func waitAckedAt(t *testing.T, w *ledgerWriter, home, n int) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		acked, errs, byHome := w.stats()
		if home >= 0 {
			acked = byHome[home]
		}
		if acked >= n {
			return
		}
		if time.Now().After(deadline) {
			w.mu.Lock()
			last := w.last
			w.mu.Unlock()
			t.Fatalf("writer stuck at %d acknowledged writes (home %d; want %d; %d errors, last %q)", acked, home, n, errs, last)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
