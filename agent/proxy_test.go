package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicedb/sluice/agent/client"
	"github.com/sluicedb/sluice/control"
	"github.com/sluicedb/sluice/migration"
	"github.com/sluicedb/sluice/proxy"
	proxyclient "github.com/sluicedb/sluice/proxy/client"
)

// TestLiveMigrationThroughProxy: clients reach the tenant only through the
// sluice proxy, which follows both agents' catalogs; the source agent holds,
// switches and releases the tenant at the proxy (Config.Proxy), and its
// control loop sets the rate from the proxy's latency windows (a PID). Every
// acknowledged write is on the target exactly once, and the proxy routes the
// tenant to the target afterwards.
func TestLiveMigrationThroughProxy(t *testing.T) {
	c1, c2 := agentPair(t)
	px, err := proxy.New(proxy.Config{Listen: "127.0.0.1:0", APIListen: "127.0.0.1:0", Trust: true,
		Catalogs: []string{"http://" + c1.Listen, "http://" + c2.Listen}, CatalogPoll: 100 * time.Millisecond, Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	if err := px.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer px.Close()
	c1.Proxy = "http://" + px.APIAddr()
	a1, a2 := startAgent(t, c1), startAgent(t, c2)
	ctx := ctxT(t)
	tn, err := a1.c.CreateTenant(ctx, client.CreateTenant{Name: "acme"})
	if err != nil {
		t.Fatal(err)
	}
	loadData(t, a1.ConnString(tn.Port, ""), 10)

	api := proxyclient.New(px.APIAddr(), nil)
	waitProxyRoute(t, api, "acme", "127.0.0.1:"+strconv.Itoa(tn.Port))

	proxyCS := fmt.Sprintf("postgres://postgres@%s/acme?sslmode=disable", px.Addr())
	w := &ledgerWriter{conns: []string{proxyCS}, pause: 2 * time.Millisecond}
	wctx, wstop := context.WithCancel(context.Background())
	wdone := make(chan struct{})
	go func() { w.run(wctx); close(wdone) }()
	defer func() { wstop(); <-wdone }()
	time.Sleep(500 * time.Millisecond)

	const maxRate = 16 << 20
	kp, ki := 0.11, 0.10
	m, err := a1.c.StartMigration(ctx, client.StartMigration{Tenant: tn.ID, To: "a2", Rate: 1 << 20,
		Control: &client.Control{Controller: "pid", SetpointMs: 50, MaxRate: maxRate, Kp: &kp, Ki: &ki, StepMs: 200}})
	if err != nil {
		t.Fatal(err)
	}
	sawLoop := false
	m = waitMigration(t, a1.c, m.ID, 3*time.Minute, func(m client.Migration) bool {
		if m.Progress.Controller == "pid" && m.Progress.SetpointMs == 50 {
			sawLoop = true
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
	time.Sleep(time.Second)
	wstop()
	<-wdone
	acked, errs, _ := w.stats()
	t.Logf("freeze %.0f ms; writer through the proxy: %d acknowledged (%d after the migration), %d errors (last: %s)", m.Summary.FreezeMS, acked, acked-before, errs, w.last)
	if acked == before {
		t.Fatal("no write was acknowledged through the proxy after the migration")
	}
	waitProxyRoute(t, api, "acme", "127.0.0.1:"+strconv.Itoa(a2.TenantPort(tn.ID)))
	w.verify(t, a2.ConnString(a2.TenantPort(tn.ID), ""))
	// The writer's session moved on a server session the agent had the proxy
	// open on the standby before the hold (migration.Router.Prepare).
	resp, err := http.Get("http://" + px.APIAddr() + "/v1/stats")
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
		"unknown controller":       {Controller: "bangbang", MaxRate: 1e6},
		"no max rate":              {Controller: "fixed"},
		"pid without setpoint":     {Controller: "pid", MaxRate: 1e6},
		"pid without a proxy":      {Controller: "pid", SetpointMs: 40, MaxRate: 1e6},
		"integral without k":       {Controller: "integral", SetpointMs: 40, MaxRate: 1e6},
		"negative setpoint":        {Controller: "pid", SetpointMs: -1, MaxRate: 1e6},
		"step too short":           {Controller: "fixed", MaxRate: 1e6, StepMs: 1},
		"client latency not a URL": {Controller: "pid", SetpointMs: 40, MaxRate: 1e6, ClientLatencyURL: "127.0.0.1:7433"},
		"client latency over ftp":  {Controller: "pid", SetpointMs: 40, MaxRate: 1e6, ClientLatencyURL: "ftp://127.0.0.1/"},
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
	m, err := a1.c.StartMigration(ctx, client.StartMigration{Tenant: tn.ID, To: "a2", Rate: 16 << 20,
		Control: &client.Control{Controller: "pid", SetpointMs: 10, MaxRate: 16 << 20, Rate: 16 << 20, StepMs: 200, ClientLatencyURL: srv.URL + "/"}})
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

func TestNewControllerErrorForm(t *testing.T) {
	if _, err := newController(client.Control{Controller: "pid", SetpointMs: 40, MaxRate: 1e6, ErrorForm: "cubic"}, 0); err == nil || !strings.Contains(err.Error(), "error_form") {
		t.Fatalf("error form cubic: %v, want an error naming error_form", err)
	}
	for _, f := range []string{"", "linear", "hybrid"} {
		if _, err := newController(client.Control{Controller: "pid", SetpointMs: 40, MaxRate: 1e6, ErrorForm: f}, 0); err != nil {
			t.Fatalf("error form %q: %v", f, err)
		}
	}
}

// TestNewControllerErrorFloor: the spec's error floor and headroom reach the
// PID; negative ones are refused with the PID's reason.
func TestNewControllerErrorFloor(t *testing.T) {
	c, err := newController(client.Control{Controller: "pid", SetpointMs: 40, MaxRate: 1e6, ErrorFloor: 1}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if got := c.(*control.PID).Params().ErrorFloor; got != 1 {
		t.Errorf("error floor %v reached the PID, want 1", got)
	}
	c, err = newController(client.Control{Controller: "pid", SetpointMs: 40, MaxRate: 1e6, Headroom: 0.25}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if got := c.(*control.PID).Params().Headroom; got != 0.25 {
		t.Errorf("headroom %v reached the PID, want 0.25", got)
	}
	if _, err := newController(client.Control{Controller: "pid", SetpointMs: 40, MaxRate: 1e6, Headroom: -1}, 0); err == nil || !strings.Contains(err.Error(), "headroom") {
		t.Fatalf("headroom -1: %v, want an error naming the headroom", err)
	}
	if _, err := newController(client.Control{Controller: "pid", SetpointMs: 40, MaxRate: 1e6, ErrorFloor: -0.5}, 0); err == nil || !strings.Contains(err.Error(), "error floor") {
		t.Fatalf("error floor -0.5: %v, want an error naming the error floor", err)
	}
}

// TestNewControllerMeanHorizon: the spec's mean horizon and band reach the
// PID; out-of-range ones are refused with the PID's reason.
func TestNewControllerMeanHorizon(t *testing.T) {
	c, err := newController(client.Control{Controller: "pid", SetpointMs: 40, MaxRate: 1e6, MeanHorizon: 20, MeanBand: 0.3}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if p := c.(*control.PID).Params(); p.MeanHorizon != 20 || p.MeanBand != 0.3 {
		t.Fatalf("pid params: horizon %d band %v, want 20 and 0.3", p.MeanHorizon, p.MeanBand)
	}
	for _, spec := range []client.Control{{MeanHorizon: -1}, {MeanHorizon: 20, MeanBand: 1}} {
		spec.Controller, spec.SetpointMs, spec.MaxRate = "pid", 40, 1e6
		if _, err := newController(spec, 0); err == nil || !strings.Contains(err.Error(), "mean") {
			t.Errorf("horizon %d band %v: %v, want an error naming the mean horizon or band", spec.MeanHorizon, spec.MeanBand, err)
		}
	}
}

// TestNewControllerReserve: the spec's handover reserve (ms·s) reaches the
// PID, overriding the learned one; without one the learned one does; a
// negative one is refused.
func TestNewControllerReserve(t *testing.T) {
	spec := client.Control{Controller: "pid", SetpointMs: 10, MaxRate: 1e6, MeanHorizon: 20}
	c, err := newController(spec, 40*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if r := c.(*control.PID).Params().Reserve; r != 40*time.Millisecond {
		t.Errorf("learned reserve: PID got %v, want 40ms", r)
	}
	v := 25.0
	spec.HandoverReserveMsS = &v
	if c, err = newController(spec, 40*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if r := c.(*control.PID).Params().Reserve; r != 25*time.Millisecond {
		t.Errorf("spec reserve 25 ms·s: PID got %v", r)
	}
	v = -1
	if _, err := newController(spec, 0); err == nil || !strings.Contains(err.Error(), "handover_reserve_ms_s") {
		t.Errorf("negative reserve: %v, want an error naming handover_reserve_ms_s", err)
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

// TestNewControllerStartRate: a PID starts at the spec's Rate (a fraction of
// MaxRate), at a tenth of MaxRate without one; a fixed controller runs at
// Rate, capped by MaxRate.
func TestNewControllerStartRate(t *testing.T) {
	for _, tc := range []struct{ rate, want float64 }{{0, 0.1}, {20e6, 0.25}, {1e9, 1}} {
		c, err := newController(client.Control{Controller: "pid", SetpointMs: 40, MaxRate: 80e6, Rate: tc.rate}, 0)
		if err != nil {
			t.Fatal(err)
		}
		if got := c.(*control.PID).Params().Initial; got != tc.want {
			t.Errorf("rate %v: initial %v, want %v", tc.rate, got, tc.want)
		}
	}
	c, err := newController(client.Control{Controller: "fixed", MaxRate: 80e6, Rate: 20e6}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if d := c.Next(control.Observation{}); d.Rate != 20e6 {
		t.Errorf("fixed at 20e6: rate %v", d.Rate)
	}
}
