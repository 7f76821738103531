package proxy

import (
	"context"
	"errors"
	"math"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/sluicedb/sluice/pgcluster"
	"github.com/sluicedb/sluice/proxy/client"
)

func historyCount(t *testing.T, c *pgcluster.Cluster) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, c.ConnString("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var n int
	if err := conn.QueryRow(ctx, "select count(*) from pgbench_history").Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestPgbenchAcrossHandover runs pgbench through the proxy and moves the
// tenant to a second server mid-run: zero failed transactions, in every
// query mode, and the transactions after the switch land on the second server.
func TestPgbenchAcrossHandover(t *testing.T) {
	for _, mode := range []string{"prepared", "simple", "extended"} {
		t.Run(mode, func(t *testing.T) {
			if testing.Short() && mode != "prepared" {
				t.Skip("short: prepared mode only")
			}
			a, b := newServer(t), newServer(t)
			pgbenchInit(t, a, 1)
			pgbenchInit(t, b, 1)
			p := startProxy(t, a, nil)
			api := p.APIClient()
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()

			var out string
			var err error
			done := make(chan struct{})
			go func() {
				defer close(done)
				out, err = pgBin(ctx, t, "pgbench", "-n", "-M", mode, "-c", "4", "-T", "6", "-d", kv(p, "acme"))
			}()
			time.Sleep(2500 * time.Millisecond)
			beforeA := historyCount(t, a)
			// A deadline far above a pgbench transaction even on a loaded
			// machine: the hold returns as soon as none is in flight.
			hr, herr := api.Hold(ctx, "acme", 10*time.Second)
			if herr != nil {
				t.Fatal(herr)
			}
			if serr := api.Switch(ctx, "acme", b.Addr()); serr != nil {
				t.Fatal(serr)
			}
			if rerr := api.Release(ctx, "acme"); rerr != nil {
				t.Fatal(rerr)
			}
			<-done
			checkPgbench(t, out, err)
			t.Logf("hold: %+v", hr)
			if hr.HeldSessions != 4 || hr.InFlight != 0 {
				t.Errorf("hold result %+v: want 4 held sessions, none in flight", hr)
			}
			if beforeA == 0 {
				t.Errorf("no transactions reached server A before the switch")
			}
			if nb := historyCount(t, b); nb == 0 {
				t.Errorf("no transactions reached server B after the switch")
			}
			ws, _ := api.Latency(ctx, "acme")
			seen := map[string]int{}
			for _, w := range ws {
				seen[w.Server] = w.Count
			}
			if _, ok := seen[b.Addr()]; !ok {
				t.Errorf("no latency window for server B: %+v", ws)
			}
			if p.moves.Load() != 4 {
				t.Errorf("moves = %d, want 4", p.moves.Load())
			}
		})
	}
}

// TestSessionMove moves one pgx session and checks its prepared statements,
// settings and cancel key survive the move.
func TestSessionMove(t *testing.T) {
	a, b := newServer(t), newServer(t)
	p := startProxy(t, a, nil)
	api := p.APIClient()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn := connectAcme(ctx, t, p)
	port := func() int {
		var n int
		if err := conn.QueryRow(ctx, "select inet_server_port()").Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if got := port(); got != a.Port {
		t.Fatalf("port %d, want %d", got, a.Port)
	}
	if _, err := conn.Exec(ctx, "set application_name = 'moved-app'"); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, "set timezone = 'Asia/Tokyo'"); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Prepare(ctx, "mystmt", "select $1::int * 2"); err != nil {
		t.Fatal(err)
	}
	var pid int
	if err := conn.QueryRow(ctx, "select pg_backend_pid()").Scan(&pid); err != nil {
		t.Fatal(err)
	}
	// The proxy names its backends on A (an early fence admits their address).
	bs, err := api.Backends(ctx, "acme")
	if err != nil || bs.Addr != a.Addr() || len(bs.PIDs) != 1 || bs.PIDs[0] != pid {
		t.Fatalf("backends: %+v, %v; want %s [%d]", bs, err, a.Addr(), pid)
	}
	if _, err := api.Backends(ctx, "nobody"); err == nil {
		t.Fatal("backends of an unknown tenant: no error")
	}
	// The hold names the idle session's backend on A (a fence may spare it).
	res, err := api.Hold(ctx, "acme", time.Second)
	if err != nil || len(res.IdleBackends) != 1 || res.IdleBackends[0] != pid {
		t.Fatalf("hold: %+v, %v; want idle backends [%d]", res, err, pid)
	}
	if err := api.Switch(ctx, "acme", b.Addr()); err != nil {
		t.Fatal(err)
	}
	before := time.Now()
	at, err := api.ReleaseAt(ctx, "acme")
	if err != nil || at.Before(before) || at.After(time.Now()) {
		t.Fatalf("release at %v (asked at %v), %v", at, before, err)
	}
	if got := port(); got != b.Port {
		t.Fatalf("after switch port %d, want %d", got, b.Port)
	}
	var n int
	if err := conn.QueryRow(ctx, "mystmt", 21).Scan(&n); err != nil || n != 42 {
		t.Fatalf("prepared statement after move: %d, %v", n, err)
	}
	var app, tz string
	if err := conn.QueryRow(ctx, "select current_setting('application_name'), current_setting('TimeZone')").Scan(&app, &tz); err != nil {
		t.Fatal(err)
	}
	if app != "moved-app" || tz != "Asia/Tokyo" {
		t.Fatalf("settings after move: application_name=%q TimeZone=%q", app, tz)
	}
	// Cancel reaches the new backend through the proxy's key.
	// (pgx's context cancellation only sets a deadline; send the CancelRequest explicitly.)
	go func() {
		waitActive(t, b, "select pg_sleep(20)") // a cancel before it would find the session idle
		cctx, ccancel := context.WithTimeout(ctx, 5*time.Second)
		defer ccancel()
		conn.PgConn().CancelRequest(cctx)
	}()
	_, err = conn.Exec(ctx, "select pg_sleep(20)")
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || pe.Code != "57014" {
		t.Fatalf("cancelled query: %v, want SQLSTATE 57014", err)
	}
	if got := port(); got != b.Port {
		t.Fatalf("after cancel port %d", got)
	}
}

// TestIdleSessionSurvivesSourceShutdown: a session idle through a handover
// whose old server is shut down while the tenant is held (as the agent fences
// the source) is not killed; it reopens on the new server with its prepared
// statement at its next transaction.
func TestIdleSessionSurvivesSourceShutdown(t *testing.T) {
	a, b := newServer(t), newServer(t)
	p := startProxy(t, a, nil)
	api := p.APIClient()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn := connectAcme(ctx, t, p)
	if _, err := conn.Prepare(ctx, "port", "select inet_server_port()"); err != nil {
		t.Fatal(err)
	}
	if _, err := api.Hold(ctx, "acme", time.Second); err != nil {
		t.Fatal(err)
	}
	if err := a.Stop(ctx, pgcluster.Fast); err != nil { // the fence: idle backends get FATAL 57P01
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond) // let the proxy see the server go
	if err := api.Switch(ctx, "acme", b.Addr()); err != nil {
		t.Fatal(err)
	}
	if err := api.Release(ctx, "acme"); err != nil {
		t.Fatal(err)
	}
	var port int
	if err := conn.QueryRow(ctx, "port").Scan(&port); err != nil || port != b.Port {
		t.Fatalf("after source shutdown: port %d, %v; want %d", port, err, b.Port)
	}
}

// TestPreparedSessionMove prepares the session's server session on B before
// the hold: the move uses it (settings and prepared statements as after a
// plain move), and a prepare whose switch never comes is closed at release.
func TestPreparedSessionMove(t *testing.T) {
	a, b := newServer(t), newServer(t)
	p := startProxy(t, a, nil)
	api := p.APIClient()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn := connectAcme(ctx, t, p)
	if _, err := conn.Exec(ctx, "set application_name = 'prepared-app'"); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Prepare(ctx, "twice", "select $1::int * 2"); err != nil {
		t.Fatal(err)
	}
	bConn, err := pgx.Connect(ctx, b.ConnString("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer bConn.Close(ctx)
	onB := func() int {
		var n int
		if err := bConn.QueryRow(ctx, "select count(*) from pg_stat_activity where application_name = 'prepared-app'").Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}

	// A prepare whose switch does not come (a rolled-back handover).
	res, err := api.Prepare(ctx, "acme", b.Addr())
	if err != nil || res.Sessions != 1 || res.Opened != 1 || res.Failed != 0 {
		t.Fatalf("prepare: %+v, %v", res, err)
	}
	if n := onB(); n != 1 {
		t.Fatalf("%d server sessions on B after prepare, want 1", n)
	}
	if _, err := api.Hold(ctx, "acme", time.Second); err != nil {
		t.Fatal(err)
	}
	if err := api.Release(ctx, "acme"); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); onB() != 0; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the unused prepared server session on B was not closed at release")
		}
	}

	// A prepare followed by the switch. The prepare creates the session's
	// named statements on B; between it and the switch the client redefines
	// one and adds another, which the switch must close and replay.
	if _, err := conn.Prepare(ctx, "keep", "select $1::int + 1"); err != nil {
		t.Fatal(err)
	}
	if res, err := api.Prepare(ctx, "acme", b.Addr()); err != nil || res.Opened != 1 || res.Statements != 2 {
		t.Fatalf("prepare: %+v, %v; want 1 session opened with 2 statements (twice, keep)", res, err)
	}
	if err := conn.Deallocate(ctx, "twice"); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Prepare(ctx, "twice", "select $1::int * 3"); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Prepare(ctx, "late", "select $1::int - 1"); err != nil {
		t.Fatal(err)
	}
	moveAcme(ctx, t, api, b.Addr())
	var port, n int
	if err := conn.QueryRow(ctx, "select inet_server_port()").Scan(&port); err != nil || port != b.Port {
		t.Fatalf("after switch port %d (%v), want %d", port, err, b.Port)
	}
	for _, c := range []struct {
		stmt string
		want int
	}{{"twice", 63}, {"keep", 22}, {"late", 20}} {
		if err := conn.QueryRow(ctx, c.stmt, 21).Scan(&n); err != nil || n != c.want {
			t.Fatalf("prepared statement %s(21) after move: %d, %v; want %d", c.stmt, n, err, c.want)
		}
	}
	var defs int
	if err := conn.QueryRow(ctx, "select count(*) from pg_prepared_statements where name in ('twice', 'keep', 'late')").Scan(&defs); err != nil || defs != 3 {
		t.Fatalf("%d of the three statements defined on B (%v), want 3, each once", defs, err)
	}
	if got := p.preparedUsed.Load(); got != 1 || p.moves.Load() != 1 {
		t.Fatalf("moves %d, of them with a prepared server session %d; want 1 and 1", p.moves.Load(), got)
	}
	if n := onB(); n != 1 {
		t.Fatalf("%d server sessions on B after the move, want 1 (the prepared one, not a second)", n)
	}
	if _, err := api.Prepare(ctx, "nobody", b.Addr()); err == nil {
		t.Fatal("prepare of an unknown tenant: no error")
	}
}

// TestHandoverCost: the proxy measures what a handover cost the tenant's
// clients: its window on the old server at the hold against its window on
// the new one a window length after the release. A transaction kept waiting
// by the hold lands in the second; a hold released without a switch is no
// handover.
func TestHandoverCost(t *testing.T) {
	a, b := newServer(t), newServer(t)
	p := startProxy(t, a, func(c *Config) { c.Window = time.Second })
	api := p.APIClient()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn := connectAcme(ctx, t, p)
	for range 20 {
		if _, err := conn.Exec(ctx, "select 1"); err != nil {
			t.Fatal(err)
		}
	}
	// A hold released in place is not a handover.
	if _, err := api.Hold(ctx, "acme", time.Second); err != nil {
		t.Fatal(err)
	}
	if err := api.Release(ctx, "acme"); err != nil {
		t.Fatal(err)
	}
	if _, err := api.Hold(ctx, "acme", time.Second); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { _, err := conn.Exec(ctx, "select 1"); done <- err }() // waits for the release
	time.Sleep(300 * time.Millisecond)
	if err := api.Switch(ctx, "acme", b.Addr()); err != nil {
		t.Fatal(err)
	}
	if err := api.Release(ctx, "acme"); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	var hs []client.Handover
	for deadline := time.Now().Add(10 * time.Second); len(hs) == 0 && time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		var err error
		if hs, err = api.Handovers(ctx, "acme"); err != nil {
			t.Fatal(err)
		}
	}
	if len(hs) != 1 {
		t.Fatalf("handovers %+v, want the one switch", hs)
	}
	h := hs[0]
	if h.From != a.Addr() || h.To != b.Addr() || h.Tenant != "acme" || math.Abs(h.WindowS-1) > 0.01 {
		t.Fatalf("handover %+v, want acme from %s to %s over 1 s windows", h, a.Addr(), b.Addr())
	}
	if h.AfterCount != 1 || h.AfterMS < 250 || h.ExcessMSS <= 0 || !h.ReleasedAt.After(h.HeldAt) {
		t.Fatalf("handover %+v: want the held transaction (~300 ms) after the release and a positive excess", h)
	}
	if others, _ := api.Handovers(ctx, "nobody"); len(others) != 0 {
		t.Fatalf("handovers of another tenant: %+v", others)
	}
}

// TestHandoverCostFormula: the excess is the after window's rise over the
// before window, times its transactions, per transaction per second before.
func TestHandoverCostFormula(t *testing.T) {
	for _, c := range []struct {
		h    client.Handover
		want float64
	}{
		// 300 transactions in 3 s (100/s) at 10 ms, then 300 at 50 ms:
		// 40 ms over for 3 s of arrivals = 120 ms·s.
		{client.Handover{WindowS: 3, BeforeMS: 10, BeforeCount: 300, AfterMS: 50, AfterCount: 300}, 120},
		// No transaction before the hold: the rate after stands in.
		{client.Handover{WindowS: 1, AfterMS: 300, AfterCount: 1}, 300},
		{client.Handover{WindowS: 3, BeforeMS: 10, BeforeCount: 30, AfterMS: 5, AfterCount: 30}, -15},
		{client.Handover{WindowS: 3}, 0},
	} {
		if got := handoverCost(c.h).ExcessMSS; math.Abs(got-c.want) > 1e-9 {
			t.Errorf("%+v: excess %v, want %v", c.h, got, c.want)
		}
	}
}
