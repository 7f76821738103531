package proxy

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
)

// Holds and the transactions open at their deadline (tenant.hold).

// TestHoldDeadlineCancels checks that a hold cancels a transaction still
// running at its deadline, and that held sessions wait and then proceed.
func TestHoldDeadlineCancels(t *testing.T) {
	a := newServer(t)
	// A grace far above a cancel's round trip, so that the cancelled
	// statement ends with its 57014 even on a loaded machine.
	p := startProxy(t, a, func(c *Config) { c.HoldGrace = 10 * time.Second })
	api := p.APIClient()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	slow, err := pgx.Connect(ctx, proxyURL(p, "acme", "disable"))
	if err != nil {
		t.Fatal(err)
	}
	defer slow.Close(ctx)
	idle, err := pgx.Connect(ctx, proxyURL(p, "acme", "disable"))
	if err != nil {
		t.Fatal(err)
	}
	defer idle.Close(ctx)
	slowErr := make(chan error, 1)
	go func() {
		_, err := slow.Exec(ctx, "select pg_sleep(30)")
		slowErr <- err
	}()
	waitActive(t, a, "select pg_sleep(30)") // running at the deadline, not yet sent
	hr, err := api.Hold(ctx, "acme", 200*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if hr.Cancelled != 1 || hr.Terminated != 0 || hr.InFlight != 0 || hr.HeldSessions != 2 {
		t.Fatalf("hold %+v: want 1 cancelled, none terminated, 0 in flight, 2 sessions", hr)
	}
	var pe *pgconn.PgError
	if err := <-slowErr; !errors.As(err, &pe) || pe.Code != "57014" {
		t.Fatalf("slow query: %v, want 57014", err)
	}
	// A held session waits at its boundary until release.
	var mu sync.Mutex
	var got int
	qdone := make(chan error, 1)
	go func() {
		var n int
		err := idle.QueryRow(ctx, "select 7").Scan(&n)
		mu.Lock()
		got = n
		mu.Unlock()
		qdone <- err
	}()
	select {
	case err := <-qdone:
		t.Fatalf("query ran during hold: %v", err)
	case <-time.After(300 * time.Millisecond):
	}
	rs, err := api.Routes(ctx)
	if err != nil || len(rs) != 1 || !rs[0].Held {
		t.Fatalf("routes during hold: %+v %v", rs, err)
	}
	if err := api.Release(ctx, "acme"); err != nil {
		t.Fatal(err)
	}
	if err := <-qdone; err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if got != 7 {
		t.Fatalf("got %d", got)
	}
	// The held query's latency includes the hold: it waited about 300 ms
	// (a few ms less if its goroutine started late), where an unheld
	// "select 7" takes about 1 ms; half of it is the bound.
	ws, _ := api.Latency(ctx, "acme")
	for _, w := range ws {
		if w.Server == a.Addr() && (w.P99MS < 150 || w.QueueMS*float64(w.Count) < 150) {
			t.Fatalf("latency window %+v does not include the held time (about 300 ms in one transaction)", w)
		}
	}
}

// TestHoldTerminatesIdleInTransaction: a session idle inside BEGIN at the
// deadline cannot be cancelled; the hold terminates it (rolling back) so the
// tenant is quiescent, and other sessions are untouched.
func TestHoldTerminatesIdleInTransaction(t *testing.T) {
	a := newServer(t)
	p := startProxy(t, a, nil)
	api := p.APIClient()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	idleTx, err := pgx.Connect(ctx, proxyURL(p, "acme", "disable"))
	if err != nil {
		t.Fatal(err)
	}
	defer idleTx.Close(ctx)
	other, err := pgx.Connect(ctx, proxyURL(p, "acme", "disable"))
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close(ctx)
	if _, err := idleTx.Exec(ctx, "create table t (x int)"); err != nil {
		t.Fatal(err)
	}
	if _, err := idleTx.Exec(ctx, "begin; insert into t values (1)"); err != nil {
		t.Fatal(err)
	}
	hr, err := api.Hold(ctx, "acme", 100*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if hr.Terminated != 1 || hr.TerminatedIdle != 1 || hr.Cancelled != 0 || hr.InFlight != 0 {
		t.Fatalf("hold %+v: want 1 terminated at the deadline, none cancelled, 0 in flight", hr)
	}
	if err := api.Release(ctx, "acme"); err != nil {
		t.Fatal(err)
	}
	if _, err := idleTx.Exec(ctx, "commit"); err == nil {
		t.Fatal("commit succeeded on a terminated session")
	}
	var n int
	if err := other.QueryRow(ctx, "select count(*) from t").Scan(&n); err != nil || n != 0 {
		t.Fatalf("rows after terminated transaction: %d, %v (want 0: rolled back)", n, err)
	}
}

// shortTxs runs n sessions of short transactions through p until stop is
// closed, and returns what waits for them and reports each session's
// longest transaction and first error.
func shortTxs(ctx context.Context, t *testing.T, p *Proxy, n int, stop <-chan struct{}) (wait func() ([]time.Duration, error)) {
	t.Helper()
	longest := make([]time.Duration, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		conn := connectAcme(ctx, t, p)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				start := time.Now()
				err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
					_, err := tx.Exec(ctx, "insert into short_tx values ($1)", i)
					return err
				})
				if err != nil {
					errs[i] = err
					return
				}
				longest[i] = max(longest[i], time.Since(start))
				time.Sleep(2 * time.Millisecond)
			}
		}()
	}
	return func() ([]time.Duration, error) { wg.Wait(); return longest, errors.Join(errs...) }
}

// wantAdminShutdown fails t unless err is the hold's FATAL 57P01.
func wantAdminShutdown(t *testing.T, what string, err error) {
	t.Helper()
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || pe.Code != codeAdminShutdown || pe.Severity != "FATAL" {
		t.Fatalf("%s after the hold: %v, want FATAL 57P01", what, err)
	}
}

// TestHoldLongCursor: a session idle inside a transaction with a long
// cursor open (psycopg2's named cursor: DECLARE, then FETCH by FETCH) is
// terminated at the hold's deadline, without a cancel and without waiting
// for the grace, so the sessions running short transactions meanwhile are
// held for about the deadline (1 s), not the grace (30 s: the bound is
// checked at half of it, far from machine speed). Its next FETCH gets FATAL
// 57P01; the others carry on after release without an error.
func TestHoldLongCursor(t *testing.T) {
	a := newServer(t)
	const grace = 30 * time.Second
	p := startProxy(t, a, func(c *Config) { c.HoldGrace = grace })
	api := p.APIClient()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cur := connectAcme(ctx, t, p)
	if _, err := cur.Exec(ctx, "create table short_tx (s int)"); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{"begin", "declare c cursor for select g from generate_series(1, 10000000) g", "fetch 100 from c"} {
		if _, err := cur.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	stop := make(chan struct{})
	wait := shortTxs(ctx, t, p, 4, stop)
	time.Sleep(200 * time.Millisecond)

	// A deadline no short transaction reaches, even on a loaded machine
	// (one still open then would be ended too).
	hr, err := api.Hold(ctx, "acme", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if hr.TerminatedIdle != 1 || hr.Terminated != 1 || hr.Cancelled != 0 || hr.InFlight != 0 {
		t.Fatalf("hold %+v: want the cursor's session terminated at the deadline, nothing cancelled, 0 in flight", hr)
	}
	if hr.WaitedMS > float64(grace/time.Millisecond)/2 {
		t.Fatalf("hold waited %.0f ms: the sessions waited for the grace (%v)", hr.WaitedMS, grace)
	}
	time.Sleep(100 * time.Millisecond) // the others queue at their boundary
	if err := api.Release(ctx, "acme"); err != nil {
		t.Fatal(err)
	}
	_, err = cur.Exec(ctx, "fetch 100 from c")
	wantAdminShutdown(t, "the cursor's FETCH", err)
	time.Sleep(100 * time.Millisecond)
	close(stop)
	longest, err := wait()
	if err != nil {
		t.Fatalf("short transactions: %v", err)
	}
	for i, d := range longest {
		if d > grace/2 {
			t.Fatalf("session %d: a short transaction took %v: held for the grace (%v)", i, d, grace)
		}
	}
}

// TestHoldSuspendedPortal: a portal suspended with the extended protocol and
// no Sync (node's pg-cursor: Execute with a row limit, then Flush) looks
// busy to the proxy, which cannot tell it from a running statement: at the
// deadline it gets a CancelRequest (the idle backend ignores it) and, the
// grace later, is terminated. The hold returns after the cancel, never
// before the deadline plus the grace.
func TestHoldSuspendedPortal(t *testing.T) {
	a := newServer(t)
	const deadline, grace = 100 * time.Millisecond, 300 * time.Millisecond
	p := startProxy(t, a, func(c *Config) { c.HoldGrace = grace })
	api := p.APIClient()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cur := connectAcme(ctx, t, p)
	pc := cur.PgConn()
	fe := pc.Frontend()
	fe.Send(&pgproto3.Parse{Query: "select g from generate_series(1, 10000000) g"})
	fe.Send(&pgproto3.Bind{})
	fe.Send(&pgproto3.Execute{MaxRows: 100})
	fe.Send(&pgproto3.Flush{})
	if err := fe.Flush(); err != nil {
		t.Fatal(err)
	}
	for {
		m, err := pc.ReceiveMessage(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := m.(*pgproto3.PortalSuspended); ok {
			break
		}
	}
	hr, err := api.Hold(ctx, "acme", deadline)
	if err != nil {
		t.Fatal(err)
	}
	if hr.Cancelled != 1 || hr.Terminated != 1 || hr.TerminatedIdle != 0 || hr.InFlight != 0 {
		t.Fatalf("hold %+v: want the portal's session cancelled, then terminated; 0 in flight", hr)
	}
	if hr.WaitedMS < float64((deadline+grace)/time.Millisecond) {
		t.Fatalf("hold waited %.0f ms: terminated before the deadline plus the grace (%v)", hr.WaitedMS, deadline+grace)
	}
	if err := api.Release(ctx, "acme"); err != nil {
		t.Fatal(err)
	}
	fe.Send(&pgproto3.Execute{MaxRows: 100})
	fe.Send(&pgproto3.Flush{})
	fe.Flush()
	for {
		m, err := pc.ReceiveMessage(ctx)
		if err != nil {
			wantAdminShutdown(t, "the portal's Execute", err)
			break
		}
		if e, ok := m.(*pgproto3.ErrorResponse); ok {
			wantAdminShutdown(t, "the portal's Execute", pgconn.ErrorResponseToPgError(e))
			break
		}
	}
}
