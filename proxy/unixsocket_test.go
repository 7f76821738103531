package proxy

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// TestUnixSocketRoute: a route whose host is a directory reaches the server
// through its Unix socket (the backend sees no client address), relays
// queries, and forwards a client's CancelRequest over the same socket.
func TestUnixSocketRoute(t *testing.T) {
	c := newServer(t)
	addr := c.Dir + ":" + strconv.Itoa(c.Port)
	p := startProxy(t, c, func(cfg *Config) {
		cfg.Routes = []RouteConfig{{Tenant: "acme", Addr: addr, Database: "postgres"}}
	})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn := connectAcme(ctx, t, p)
	var viaUnix bool
	if err := conn.QueryRow(ctx, "select client_addr is null and client_port = -1 from pg_stat_activity where pid = pg_backend_pid()").Scan(&viaUnix); err != nil {
		t.Fatal(err)
	}
	if !viaUnix {
		t.Fatal("the server session is not on the Unix socket")
	}
	errc := make(chan error, 1)
	go func() {
		_, err := conn.Exec(ctx, "select pg_sleep(30)")
		errc <- err
	}()
	time.Sleep(300 * time.Millisecond)
	// A second connection sends the cancel, as libpq does.
	if err := conn.PgConn().CancelRequest(ctx); err != nil {
		t.Fatal(err)
	}
	var pe *pgconn.PgError
	if err := <-errc; !errors.As(err, &pe) || pe.Code != codeQueryCanceled {
		t.Fatalf("cancelled query: %v, want %s", err, codeQueryCanceled)
	}
	var n int
	if err := conn.QueryRow(ctx, "select 41 + 1").Scan(&n); err != nil || n != 42 {
		t.Fatalf("after cancel: %d, %v", n, err)
	}
}
