package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicedb/sluice/agent/client"
	"github.com/sluicedb/sluice/control"
	"github.com/sluicedb/sluice/migration"
	"github.com/sluicedb/sluice/proxy"
	proxyclient "github.com/sluicedb/sluice/proxy/client"
	"github.com/sluicedb/sluice/throttle"
)

// TestLiveMigrationThroughProxy: clients reach the tenant only through the
// sluice proxy, which follows both agents' catalogs; the source agent holds,
// switches and releases the tenant at the proxy (Config.Proxy), and its
// control loop sets the rate from the proxy's latency windows (a PID). Every
// acknowledged write is on the target exactly once, and the proxy routes the
// tenant to the target afterwards.
func TestLiveMigrationThroughProxy(t *testing.T) {
	c1, c2 := agentPair(t)
	px := catalogProxy(t, &c1, c2)
	defer px.Close()
	a1, a2 := startAgent(t, c1), startAgent(t, c2)
	ctx := ctxT(t)
	tn, err := a1.c.CreateTenant(ctx, client.CreateTenant{Name: "acme", Users: testUsers})
	if err != nil {
		t.Fatal(err)
	}
	loadData(t, a1.ConnString(tn.Port, ""), 10)

	api := px.APIClient()
	waitProxyRoute(t, api, "acme", "127.0.0.1:"+strconv.Itoa(tn.Port))

	proxyCS := fmt.Sprintf("postgres://%s:%s@%s/acme?sslmode=disable", testUsers[0].Name, testUsers[0].Password, px.Addr())
	w := &ledgerWriter{conns: []string{proxyCS}, pause: 2 * time.Millisecond}
	wctx, wstop := context.WithCancel(context.Background())
	wdone := make(chan struct{})
	go func() { w.run(wctx); close(wdone) }()
	defer func() { wstop(); <-wdone }()
	time.Sleep(500 * time.Millisecond)

	const maxRate = 16 << 20
	m, err := a1.c.StartMigration(ctx, client.StartMigration{Tenant: tn.ID, To: "a2",
		Control: &client.Control{SetpointMs: 50, MaxRate: maxRate, Profile: json.RawMessage(`{"step_ms": 200}`)}})
	if err != nil {
		t.Fatal(err)
	}
	// The throttle is never unlimited nor above the top speed, from the
	// first poll on: the profile's initial rate is in force before the copy
	// starts (with no rate of its own, the migration would otherwise begin
	// unthrottled).
	sawLoop := false
	m = waitMigration(t, a1.c, m.ID, 3*time.Minute, func(m client.Migration) bool {
		if m.Progress.Controller == "pid" && m.Progress.SetpointMs == 50 && m.Progress.Profile == "sluice(step_ms=200)" {
			sawLoop = true
		}
		if !m.Done && m.Progress.Phase == string(migration.PhaseSnapshot) && (m.Progress.Limit <= 0 || m.Progress.Limit > maxRate) {
			t.Errorf("snapshot at %d bytes: throttle %v, want in (0, %d]", m.Progress.Bytes, m.Progress.Limit, maxRate)
		}
		return false
	})
	if m.Outcome != "committed" {
		t.Fatalf("migration through the proxy ended %s: %s", m.Outcome, m.Error)
	}
	var rec migration.Record
	json.Unmarshal(m.Record, &rec)
	t.Logf("handover: hold→fence %v, →replayed %v, →promoted %v, →switched %v, →released %v",
		rec.FencedAt.Sub(rec.HeldAt), rec.ReplayedAt.Sub(rec.HeldAt), rec.PromotedAt.Sub(rec.HeldAt), rec.SwitchedAt.Sub(rec.HeldAt), rec.ReleasedAt.Sub(rec.HeldAt))
	// The proxy named the writer's idle session on the source, and the fence
	// spared it (migration.Router.Hold's idle); the ledger below shows nothing lost.
	if len(rec.HeldIdle) != 1 {
		t.Fatalf("held idle backends %v, want the writer's one", rec.HeldIdle)
	}
	before, _, _ := w.stats()
	waitAcked(t, w, before+50) // through the proxy, on the target
	wstop()
	<-wdone
	acked, errs, _ := w.stats()
	t.Logf("freeze %.0f ms; writer through the proxy: %d acknowledged (%d after the migration), %d errors (last: %s)", m.Summary.FreezeMS, acked, acked-before, errs, w.last)
	waitProxyRoute(t, api, "acme", "127.0.0.1:"+strconv.Itoa(a2.TenantPort(tn.ID)))
	w.verify(t, a2.ConnString(a2.TenantPort(tn.ID), ""))
	// The writer's session moved on a server session the agent had the proxy
	// open on the standby before the hold (migration.Router.Prepare).
	req, _ := http.NewRequest("GET", "http://"+px.APIAddr()+"/v1/stats", nil)
	req.Header.Set("Authorization", "Bearer "+px.Token())
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var stats map[string]int64
	err = json.NewDecoder(resp.Body).Decode(&stats)
	resp.Body.Close()
	if err != nil || stats["moves"] < 1 || stats["moves_prepared"] != stats["moves"] {
		t.Fatalf("proxy stats %v (%v): want every move to use a prepared server session", stats, err)
	}

	// The control loop ran, saw the proxy's windows and kept its output in range.
	pts, err := a1.c.MigrationSeries(ctx, m.ID)
	if err != nil {
		t.Fatal(err)
	}
	measured := 0
	for _, p := range pts {
		if p.Rate < 0 || p.Rate > maxRate || p.SetpointMs != 50 {
			t.Fatalf("loop point %+v: rate outside [0, %d] or wrong setpoint", p, maxRate)
		}
		if p.LatencyMs >= 0 {
			measured++
		}
	}
	t.Logf("control loop: %d steps, %d with proxy latency data; progress showed the loop: %v", len(pts), measured, sawLoop)
	if len(pts) == 0 || measured == 0 || !sawLoop {
		t.Fatalf("control loop: %d steps, %d measured, progress showed it: %v", len(pts), measured, sawLoop)
	}
}

// TestControlBadInput: a control spec that cannot run is refused before
// anything starts, and the tenant stays as it was.
func TestControlBadInput(t *testing.T) {
	c1, c2 := agentPair(t)
	a1, _ := startAgent(t, c1), startAgent(t, c2)
	ctx := ctxT(t)
	tn, err := a1.c.CreateTenant(ctx, client.CreateTenant{Name: "acme"})
	if err != nil {
		t.Fatal(err)
	}
	for name, ctl := range map[string]client.Control{
		"unknown controller":         {Controller: "bangbang", MaxRate: 1e6},
		"negative max rate":          {Controller: "fixed", MaxRate: -1},
		"unknown profile":            {SetpointMs: 40, Profile: json.RawMessage(`{"name": "fast"}`)},
		"unknown profile field":      {SetpointMs: 40, Profile: json.RawMessage(`{"kq": 1}`)},
		"profile field out of range": {SetpointMs: 40, Profile: json.RawMessage(`{"ki": 0}`)},
		"unknown statistic":          {SetpointMs: 40, Stat: "p50"},
		"pid without setpoint":       {Controller: "pid", MaxRate: 1e6},
		"pid without a proxy":        {Controller: "pid", SetpointMs: 40, MaxRate: 1e6},
		"integral without k":         {Controller: "integral", SetpointMs: 40, MaxRate: 1e6},
		"negative setpoint":          {Controller: "pid", SetpointMs: -1, MaxRate: 1e6},
		"step too short":             {Controller: "fixed", MaxRate: 1e6, Profile: json.RawMessage(`{"step_ms": 1}`)},
		"client latency not a URL":   {Controller: "pid", SetpointMs: 40, MaxRate: 1e6, ClientLatencyURL: "127.0.0.1:7433"},
		"client latency over ftp":    {Controller: "pid", SetpointMs: 40, MaxRate: 1e6, ClientLatencyURL: "ftp://127.0.0.1/"},
	} {
		ctl := ctl
		_, err := a1.c.StartMigration(ctx, client.StartMigration{Tenant: tn.ID, To: "a2", Control: &ctl})
		var ae *client.APIError
		if !errors.As(err, &ae) || ae.Status != 400 {
			t.Errorf("%s: got %v, want a 400", name, err)
		}
	}
	got, err := a1.c.Tenant(ctx, tn.ID)
	if err != nil || got.State != "running" || got.Migration != "" {
		t.Fatalf("tenant after refused migrations: %+v, %v", got, err)
	}
	if ms, _ := a1.c.Migrations(ctx); len(ms) != 0 {
		t.Fatalf("refused migrations left records: %+v", ms)
	}
}

// TestControlByClientLatency: with client_latency_url, the loop of an agent
// without a proxy steers by the clients' window served there, and the
// migration completes.
func TestControlByClientLatency(t *testing.T) {
	var reads atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		reads.Add(1)
		json.NewEncoder(w).Encode([]proxyclient.Window{{Tenant: "acme", WindowS: 3, Count: 40, MeanMS: 7.5, P95MS: 12, P99MS: 20}})
	}))
	defer srv.Close()
	c1, c2 := agentPair(t)
	a1, _ := startAgent(t, c1), startAgent(t, c2)
	ctx := ctxT(t)
	tn, err := a1.c.CreateTenant(ctx, client.CreateTenant{Name: "acme"})
	if err != nil {
		t.Fatal(err)
	}
	loadData(t, a1.ConnString(tn.Port, ""), 10)
	m, err := a1.c.StartMigration(ctx, client.StartMigration{Tenant: tn.ID, To: "a2",
		Control: &client.Control{SetpointMs: 10, MaxRate: 16 << 20, Profile: json.RawMessage(`{"step_ms": 200, "initial": 1}`), ClientLatencyURL: srv.URL + "/"}})
	if err != nil {
		t.Fatal(err)
	}
	m = waitMigration(t, a1.c, m.ID, 3*time.Minute, func(client.Migration) bool { return false })
	if m.Outcome != "committed" {
		t.Fatalf("migration ended %s: %s", m.Outcome, m.Error)
	}
	pts, err := a1.c.MigrationSeries(ctx, m.ID)
	if err != nil {
		t.Fatal(err)
	}
	measured := 0
	for _, p := range pts {
		switch p.LatencyMs {
		case 7.5:
			measured++
		case -1:
		default:
			t.Fatalf("loop point %+v: latency is neither the clients' 7.5 ms nor missing", p)
		}
	}
	t.Logf("control loop: %d steps, %d with the clients' 7.5 ms; %d reads of the window", len(pts), measured, reads.Load())
	if measured == 0 || reads.Load() == 0 {
		t.Fatalf("the loop never read the clients' window (%d steps, %d reads)", len(pts), reads.Load())
	}
}

func waitProxyRoute(t *testing.T, api *proxyclient.Client, tenant, addr string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	var last []proxyclient.Route
	for time.Now().Before(deadline) {
		rs, err := api.Routes(context.Background())
		if err == nil {
			last = rs
			for _, r := range rs {
				if r.Tenant == tenant && r.Addr == addr {
					return
				}
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("proxy never routed %s to %s; routes %+v", tenant, addr, last)
}

// TestResolveControl: a spec without a profile runs the default profile's
// PID at the profile's top speed; a profile's changes reach the PID and are
// kept, resolved, in the stored spec; the learned reserve reaches the PID.
func TestResolveControl(t *testing.T) {
	cp, err := resolveControl(client.Control{SetpointMs: 40})
	if err != nil {
		t.Fatal(err)
	}
	c, err := cp.controller(40 * time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	def := control.DefaultProfile()
	want := def.PID(40*time.Millisecond, def.MaxRate, "")
	want.Reserve = 40 * time.Millisecond
	if got := c.(*control.PID).Params(); got != want {
		t.Fatalf("default spec's PID %+v, want the default profile's %+v", got, want)
	}
	if c.Initial() != def.Initial*def.MaxRate || cp.spec.MaxRate != def.MaxRate {
		t.Errorf("initial rate %v at max %v, want %v at %v", c.Initial(), cp.spec.MaxRate, def.Initial*def.MaxRate, def.MaxRate)
	}

	cp, err = resolveControl(client.Control{SetpointMs: 40, MaxRate: 80e6, Stat: "p95", Profile: json.RawMessage(`{"name": "slacker", "ki": 0.01}`)})
	if err != nil {
		t.Fatal(err)
	}
	var stored control.Profile
	if err := json.Unmarshal(cp.spec.Profile, &stored); err != nil || stored.Name != "slacker" || stored.Ki != 0.01 || stored.Kp != 0.025 {
		t.Fatalf("stored profile %+v (%v), want slacker with ki 0.01", stored, err)
	}
	c, err = cp.controller(0)
	if err != nil {
		t.Fatal(err)
	}
	if p := c.(*control.PID).Params(); p.Ki != 0.01 || p.Kp != 0.025 || p.MaxRate != 80e6 || p.Stat != control.StatP95 || p.StartGrowth > 1 {
		t.Errorf("slacker with ki 0.01: PID %+v", p)
	}
	again, err := resolveControl(cp.spec)
	if err != nil || string(again.spec.Profile) != string(cp.spec.Profile) {
		t.Errorf("a stored spec resolved again: %s (%v), want %s", again.spec.Profile, err, cp.spec.Profile)
	}

	cp, err = resolveControl(client.Control{Controller: "fixed", MaxRate: 80e6, Rate: 20e6})
	if err != nil {
		t.Fatal(err)
	}
	if c, err = cp.controller(0); err != nil || c.Initial() != 20e6 || c.Next(control.Observation{}).Rate != 20e6 {
		t.Errorf("fixed at 20e6: %v, %v", c, err)
	}
}

// TestLoopStatusStages: the loop's stage follows the migration's phase —
// the hot copy, catch-up and warm (which waits for the lag again), other.
func TestLoopStatusStages(t *testing.T) {
	for ph, want := range map[migration.Phase]control.Stage{
		migration.PhasePrepare: control.StageOther, migration.PhaseSnapshot: control.StageCopy,
		migration.PhaseCatchUp: control.StageCatchUp, migration.PhaseWarm: control.StageCatchUp,
		migration.PhaseHandover: control.StageOther,
	} {
		r := &run{lim: throttle.NewLimiter(1e6, 0)}
		r.prog.Phase, r.prog.LagBytes = ph, 7
		if st := r.loopStatus(); st.Stage != want || st.Phase != string(ph) || st.Lag != 7 {
			t.Errorf("phase %s: status %+v, want stage %v", ph, st, want)
		}
	}
}

// TestReserveOf: the median of the last n handovers' excess, never below 0.
func TestReserveOf(t *testing.T) {
	hs := func(xs ...float64) []proxyclient.Handover {
		var out []proxyclient.Handover
		for _, x := range xs {
			out = append(out, proxyclient.Handover{ExcessMSS: x})
		}
		return out
	}
	for _, c := range []struct {
		hs   []proxyclient.Handover
		want time.Duration
	}{
		{nil, 0},
		{hs(50), 50 * time.Millisecond},
		{hs(500, 10, 30, 20), 20 * time.Millisecond}, // the last three: 10, 30, 20
		{hs(10, 30), 20 * time.Millisecond},
		{hs(-40, -5, 3), 0},
	} {
		if got := reserveOf(c.hs, 3); got != c.want {
			t.Errorf("reserveOf(%v) = %v, want %v", c.hs, got, c.want)
		}
	}
}

// TestRemaining: the snapshot's bytes left over the throttle's rate; unknown
// (0) in other phases, before the size is known, paused or unlimited.
func TestRemaining(t *testing.T) {
	snap := func(done, total int64) migration.Progress {
		return migration.Progress{Phase: migration.PhaseSnapshot, BytesDone: done, BytesTotal: total}
	}
	for _, c := range []struct {
		p    migration.Progress
		rate float64
		want time.Duration
	}{
		{snap(200e6, 1000e6), 40e6, 20 * time.Second},
		{snap(1100e6, 1000e6), 40e6, 0}, // past the estimate
		{snap(0, 0), 40e6, 0},
		{snap(200e6, 1000e6), 0, 0},
		{snap(200e6, 1000e6), math.Inf(1), 0},
		{migration.Progress{Phase: migration.PhaseCatchUp, BytesDone: 1, BytesTotal: 2}, 40e6, 0},
	} {
		if got := remaining(c.p, c.rate); got != c.want {
			t.Errorf("remaining(%+v, %v) = %v, want %v", c.p, c.rate, got, c.want)
		}
	}
}

// catalogProxy starts an in-process proxy that follows both agents'
// catalogs (with a two-phase commit decision log for keyspaces) and makes
// it c1's proxy. The caller closes it.
func catalogProxy(t *testing.T, c1 *Config, c2 Config) *proxy.Proxy {
	t.Helper()
	px, err := proxy.New(proxy.Config{Listen: "127.0.0.1:0", APIListen: "127.0.0.1:0", Users: testProxyUsers(),
		Catalogs: []string{"http://" + c1.Listen, "http://" + c2.Listen}, CatalogTokenFile: c1.PeerTokenFile,
		CatalogPoll: 100 * time.Millisecond, TxLog: filepath.Join(t.TempDir(), "txlog"), Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	if err := px.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	c1.Proxy, c1.ProxyTokenFile = "http://"+px.APIAddr(), writeTokenFile(t, px.Token())
	return px
}
