package agent

import (
	"context"
	"net/http"
	"sort"
	"sync"
	"time"

	"github.com/sluicedb/sluice/agent/client"
	"github.com/sluicedb/sluice/catalog"
	"github.com/sluicedb/sluice/dashboard"
	proxyclient "github.com/sluicedb/sluice/proxy/client"
)

// The operator's endpoints: the dashboard's page (package dashboard, served
// without a token: it holds no data), its one data answer GET /v1/overview,
// pausing and resuming a migration's copy (pause.go), and GET /metrics
// (metrics.go). Everything but the page's static files needs the token.

// overviewWait bounds each remote part of an overview (a peer's tenants,
// the proxy's windows): a part that does not answer in time carries its
// error and the rest is answered.
const overviewWait = time.Second

// operatorRoutes registers the operator's endpoints.
func (a *Agent) operatorRoutes(mux *http.ServeMux) {
	mux.HandleFunc("GET /v1/overview", func(w http.ResponseWriter, r *http.Request) {
		v, err := a.Overview(r.Context())
		answer(w, http.StatusOK, v, err)
	})
	mux.HandleFunc("POST /v1/migrations/{id}/pause", func(w http.ResponseWriter, r *http.Request) {
		v, err := a.PauseMigration(r.PathValue("id"), true)
		answer(w, http.StatusOK, v, err)
	})
	mux.HandleFunc("POST /v1/migrations/{id}/resume", func(w http.ResponseWriter, r *http.Request) {
		v, err := a.PauseMigration(r.PathValue("id"), false)
		answer(w, http.StatusOK, v, err)
	})
	mux.Handle("GET /metrics", a.metrics.handler())
	mux.Handle("GET "+dashboard.Prefix, dashboard.Handler())
	mux.Handle("GET /{$}", http.RedirectHandler(dashboard.Prefix, http.StatusFound))
}

// Overview gathers what the dashboard shows (client.Overview) from the
// catalog and the running migrations, and the remote parts (the peers'
// tenants, the proxy's windows) from remoteOverview: an answer never waits
// on a peer or the proxy, which may be busy with the very migration shown.
func (a *Agent) Overview(ctx context.Context) (client.Overview, error) {
	v := client.Overview{Time: time.Now().UTC(), Agent: client.OverviewSelf{Name: a.cfg.Name, URL: a.url, PGVersion: a.pgVer},
		Keyspaces: []client.KeyspaceView{}}
	v.Peers, v.Proxy, v.RemoteAsOf = a.remote.get(ctx, a)
	return v, a.localOverview(&v)
}

// remoteOverview keeps the overview's remote parts: the first overview
// waits for them (each bounded by overviewWait); later ones get the last
// answers, at most remoteFresh old plus their fetch time, and start a
// refresh in the background when they are older.
type remoteOverview struct {
	mu         sync.Mutex
	peers      []client.PeerTenants
	proxy      *client.ProxyWindows
	at         time.Time     // when the last refresh started; zero = never
	refreshing chan struct{} // closed when the refresh in flight ends; nil = none
}

// remoteFresh is how old the remote parts may be before an overview starts
// a refresh: the page polls each second.
const remoteFresh = time.Second

func (ro *remoteOverview) get(ctx context.Context, a *Agent) ([]client.PeerTenants, *client.ProxyWindows, time.Time) {
	ro.mu.Lock()
	if time.Since(ro.at) >= remoteFresh && ro.refreshing == nil {
		done := make(chan struct{})
		ro.refreshing, ro.at = done, time.Now()
		a.bg.Add(1)
		go func() {
			defer a.bg.Done()
			peers, px := a.fetchRemote(a.bgCtx)
			ro.mu.Lock()
			ro.peers, ro.proxy, ro.refreshing = peers, px, nil
			ro.mu.Unlock()
			close(done)
		}()
	}
	wait := ro.refreshing
	first := ro.peers == nil
	ro.mu.Unlock()
	if first {
		select {
		case <-wait:
		case <-ctx.Done():
		}
	}
	ro.mu.Lock()
	defer ro.mu.Unlock()
	peers := ro.peers
	if peers == nil {
		peers = []client.PeerTenants{}
	}
	return peers, ro.proxy, ro.at
}

// fetchRemote asks every peer for its tenants and the proxy for its
// windows, concurrently, each bounded by overviewWait.
func (a *Agent) fetchRemote(ctx context.Context) ([]client.PeerTenants, *client.ProxyWindows) {
	var wg sync.WaitGroup
	names := make([]string, 0, len(a.cfg.Peers))
	for n := range a.cfg.Peers {
		names = append(names, n)
	}
	sort.Strings(names)
	peers := make([]client.PeerTenants, len(names))
	for i, n := range names {
		peers[i] = client.PeerTenants{Name: n, URL: a.cfg.Peers[n], Tenants: []client.Tenant{}}
		wg.Go(func() { a.peerTenants(ctx, &peers[i]) })
	}
	var px *client.ProxyWindows
	if a.cfg.Proxy != "" {
		px = &client.ProxyWindows{URL: a.cfg.Proxy, Windows: []proxyclient.Window{}}
		wg.Go(func() { a.proxyWindows(ctx, px) })
	}
	wg.Wait()
	return peers, px
}

// localOverview fills v's migrations, tenants and keyspaces from the catalog.
func (a *Agent) localOverview(v *client.Overview) error {
	ms, err := a.cat.Migrations()
	if err != nil {
		return err
	}
	sort.SliceStable(ms, func(i, j int) bool { return ms[i].Created.After(ms[j].Created) })
	v.Migrations = []client.Migration{}
	finished := 0
	for _, m := range ms {
		if m.Done {
			if finished == client.OverviewFinished {
				continue
			}
			finished++
		}
		mv := a.migrationView(m)
		mv.Record = nil
		v.Migrations = append(v.Migrations, mv)
	}
	sort.SliceStable(v.Migrations, func(i, j int) bool { return !v.Migrations[i].Done && v.Migrations[j].Done })
	ts, err := a.cat.Tenants()
	if err != nil {
		return err
	}
	v.Tenants = []client.Tenant{}
	for _, tn := range ts {
		if tn.State != catalog.Deleted && tn.State != catalog.Moved {
			v.Tenants = append(v.Tenants, a.view(tn))
		}
	}
	kss, err := a.cat.Keyspaces()
	if err != nil {
		return err
	}
	for _, ks := range kss {
		kv := client.KeyspaceView{Keyspace: ks}
		if st, err := a.ReshardStatus(ks.Name, false); err == nil {
			kv.Reshard = &st
		}
		v.Keyspaces = append(v.Keyspaces, kv)
	}
	if v.Plans, err = a.Plans(); err != nil {
		return err
	}
	sort.SliceStable(v.Plans, func(i, j int) bool {
		fi, fj := v.Plans[i].State.Final(), v.Plans[j].State.Final()
		if fi != fj {
			return !fi
		}
		return v.Plans[i].Created.After(v.Plans[j].Created)
	})
	return nil
}

// peerTenants fills p with its agent's tenants that live there.
func (a *Agent) peerTenants(ctx context.Context, p *client.PeerTenants) {
	pc, err := a.peerClient(p.URL)
	if err != nil {
		p.Error = err.Error()
		return
	}
	ctx, cancel := context.WithTimeout(ctx, overviewWait)
	defer cancel()
	ts, err := pc.Tenants(ctx, false)
	if err != nil {
		p.Error = err.Error()
		return
	}
	for _, t := range ts {
		if t.State != string(catalog.Moved) {
			p.Tenants = append(p.Tenants, t)
		}
	}
}

// proxyWindows fills pw with the proxy's per-tenant windows (server "").
func (a *Agent) proxyWindows(ctx context.Context, pw *client.ProxyWindows) {
	ctx, cancel := context.WithTimeout(ctx, overviewWait)
	defer cancel()
	ws, err := a.proxyClient().Latency(ctx, "")
	if err != nil {
		pw.Error = err.Error()
		return
	}
	for _, w := range ws {
		if w.Server == "" && w.Tenant != "" {
			pw.Windows = append(pw.Windows, w)
		}
	}
}
