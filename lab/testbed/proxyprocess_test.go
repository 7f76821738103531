package testbed

import (
	"context"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sluicedb/sluice/lab/internal/testbin"
	"github.com/sluicedb/sluice/lab/procstat"
)

// TestBedProxyProcess starts a bed whose proxy is a `sluice proxy` process
// of its own, reaches a tenant through it, lists the servers' slots (none,
// and the tenant's pg_wal), and checks that Close stops the proxy.
func TestBedProxyProcess(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: the agents run postmasters as the postgres user")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	b, err := Start(ctx, Options{Binary: testbin.Sluice(t), CPUs: -1, MemoryMB: -1, ProxyProcess: true, LogDir: t.TempDir(), Progress: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	pid := b.ProxyPID()
	if b.Proxy != nil || pid == 0 || pid == os.Getpid() {
		t.Fatalf("proxy in this process (%v) or no pid (%d)", b.Proxy != nil, pid)
	}
	if u, err := procstat.Read(pid); err != nil || u.FDs < 3 {
		t.Fatalf("proxy's usage %+v, %v", u, err)
	}
	tn, err := b.CreateTenant(ctx, 0, "proc", 2e6, 1)
	if err != nil {
		t.Fatal(err)
	}
	c, err := pgx.Connect(ctx, tn.DSN)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Exec(ctx, "SELECT 1"); err != nil {
		t.Fatal(err)
	}
	c.Close(ctx)
	slots, dirs, err := b.Slots(ctx)
	if err != nil || len(slots) != 0 || len(dirs) != 1 || dirs[0].Server != "server-a" || dirs[0].Bytes <= 0 {
		t.Fatalf("slots %+v, pg_wal %+v, %v: want none, and server-a's tenant's pg_wal", slots, dirs, err)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(pid, 0); err == nil {
		t.Fatalf("proxy %d still runs after Close", pid)
	}
}
