package pg

import (
	"bytes"
	"context"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/sluicedb/sluice/migration"
)

// TestFenceEarly: the early fence changes nothing for open sessions and
// still admits the router's address, but refuses TCP from any other; the
// handover's Fence after it does not reload, terminates the other backends
// and spares the router's; Unfence lets everyone in again.
func TestFenceEarly(t *testing.T) {
	f := newFixture(t, 1)
	ctx := context.Background()
	var logged bytes.Buffer
	f.source.Log = slog.New(slog.NewTextHandler(&logged, nil))
	// The whole loopback network may connect; the "router" connects from
	// 127.0.0.2, everyone else from 127.0.0.1.
	if err := f.src.WriteFile("pg_hba.conf", "local all all trust\nlocal replication all trust\nhost all all 127.0.0.0/8 trust\nhost replication all 127.0.0.1/32 trust\n"); err != nil {
		t.Fatal(err)
	}
	exec1(t, f.src.ConnString("postgres"), "SELECT pg_reload_conf()")
	connectFrom := func(ip string) (*pgx.Conn, error) {
		cfg, err := pgx.ParseConfig(f.src.ConnString("postgres"))
		if err != nil {
			return nil, err
		}
		d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}}
		cfg.DialFunc = d.DialContext
		return pgx.ConnectConfig(ctx, cfg)
	}
	write := func(c *pgx.Conn) error {
		_, err := c.Exec(ctx, "INSERT INTO sluice_ledger (id) VALUES (-1)")
		return err
	}
	pidOf := func(c *pgx.Conn) int {
		var pid int
		if err := c.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
			t.Fatal(err)
		}
		return pid
	}
	router, err := connectFrom("127.0.0.2")
	if err != nil {
		t.Fatal(err)
	}
	defer router.Close(ctx)
	other, err := connectFrom("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close(ctx)
	routerPID := pidOf(router)

	// A router with no backend on the source: nothing tells its address,
	// so nothing changes.
	if err := f.source.FenceEarly(ctx, []int{}); err == nil {
		t.Fatal("FenceEarly without router backends did not fail")
	}
	if c, err := connectFrom("127.0.0.1"); err != nil {
		t.Fatalf("a failed early fence refused a client: %v", err)
	} else {
		c.Close(ctx)
	}
	if err := f.source.FenceEarly(ctx, []int{routerPID}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(logged.String(), "source fenced early") {
		t.Fatalf("log %q lacks the early fence", logged.String())
	}
	if err := write(other); err != nil {
		t.Fatalf("after the early fence an open session cannot write: %v", err)
	}
	if c, err := connectFrom("127.0.0.2"); err != nil {
		t.Fatalf("after the early fence the router's address is refused: %v", err)
	} else {
		if err := write(c); err != nil {
			t.Fatalf("after the early fence a new router session cannot write: %v", err)
		}
		c.Close(ctx)
	}
	if c, err := connectFrom("127.0.0.1"); err == nil {
		c.Close(ctx)
		t.Fatal("after the early fence another address can still connect")
	}

	logged.Reset()
	if _, err := f.source.Fence(ctx, migration.FenceReadOnly, []int{routerPID}); err != nil {
		t.Fatal(err)
	}
	line := logged.String()
	if !strings.Contains(line, "narrowed before the hold") || strings.Contains(line, "reload=") || !strings.Contains(line, "127.0.0.1") {
		t.Fatalf("fence after the early fence logged %q: want no reload and the terminated 127.0.0.1 session", line)
	}
	if err := write(other); err == nil {
		t.Fatal("an unspared session survived the fence")
	}
	if pidOf(router) != routerPID {
		t.Fatal("the spared router session changed")
	}
	// Then, out of the freeze, the fence completes: no TCP at all, and new
	// sessions on the Unix socket default to read-only.
	f.source.waitLate()
	if !strings.Contains(logged.String(), "fence completed after") {
		t.Fatalf("log %q lacks the fence's completion", logged.String())
	}
	for i := 0; ; i++ { // the reload takes effect shortly after it is asked for
		c, err := connectFrom("127.0.0.2")
		if err != nil {
			break
		}
		c.Close(ctx)
		if i > 500 {
			t.Fatal("after the fence completed the router's address can still connect")
		}
		time.Sleep(10 * time.Millisecond)
	}
	local, err := pgx.Connect(ctx, socketConnString(f.src, "postgres"))
	if err != nil {
		t.Fatal(err)
	}
	var ro string
	if err := local.QueryRow(ctx, "SHOW default_transaction_read_only").Scan(&ro); err != nil || ro != "on" {
		t.Fatalf("a new local session after the fence: default_transaction_read_only %q, %v", ro, err)
	}
	local.Close(ctx)

	if err := f.source.Unfence(ctx); err != nil {
		t.Fatal(err)
	}
	c, err := connectFrom("127.0.0.1")
	if err != nil {
		t.Fatalf("after unfence: %v", err)
	}
	defer c.Close(ctx)
	if err := write(c); err != nil {
		t.Fatalf("after unfence: %v", err)
	}
}
