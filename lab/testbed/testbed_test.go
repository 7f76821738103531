package testbed

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	agentclient "github.com/sluicedb/sluice/agent/client"
	"github.com/sluicedb/sluice/lab/cgroup"
	"github.com/sluicedb/sluice/lab/internal/testbin"
)

func TestMain(m *testing.M) {
	code := m.Run()
	testbin.Remove()
	os.Exit(code)
}

func TestOptionsCheck(t *testing.T) {
	for _, o := range []Options{{Servers: -1}, {Servers: 17}, {CPUs: 0.001}, {MemoryMB: 64}, {ReadMBps: -1}, {ReadIOPS: -5}} {
		if err := o.Check(); err == nil {
			t.Errorf("%+v: no error", o)
		}
	}
	if err := (Options{}).Check(); err != nil {
		t.Errorf("defaults: %v", err)
	}
}

// TestBedLimitsAndMoves starts two cgroup-limited servers, checks that a
// tenant's postmaster runs inside its server's group, moves the tenant
// there and back through the proxy's route, and that Close leaves no group
// and no process behind.
func TestBedLimitsAndMoves(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for cgroups")
	}
	if _, err := os.Stat(filepath.Join(cgroup.Root, "memory")); err != nil {
		t.Skip("no cgroup v1 memory controller")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	logs := t.TempDir()
	b, err := Start(ctx, Options{Binary: testbin.Sluice(t), CPUs: 1, MemoryMB: 512, LogDir: logs, Progress: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	tn, err := b.CreateTenant(ctx, 0, "bedtest", 2e6, 1)
	if err != nil {
		t.Fatal(err)
	}
	if tn.Rows == 0 {
		t.Fatalf("no rows loaded: %+v", tn)
	}
	// The tenant's postmaster (a child of the agent) is in server-a's group.
	pids, err := b.Servers[0].Group.PIDs()
	if err != nil {
		t.Fatal(err)
	}
	if len(pids) < 3 { // agent, postmaster, its auxiliary processes
		t.Fatalf("server-a's group holds %v: the postmaster is not in it", pids)
	}
	// A server's quota changes at run time (an experiment's target gets
	// its own), and a bad one changes nothing.
	quota := func(i int) string {
		data, err := os.ReadFile(filepath.Join(cgroup.Root, "cpu", b.Servers[i].Group.Name, "cpu.cfs_quota_us"))
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(string(data))
	}
	if q := quota(1); q != "10000" {
		t.Fatalf("server-b's quota %s µs per 10 ms, want 10000 (1 CPU)", q)
	}
	for _, bad := range []float64{0, 0.001, 65} {
		if err := b.SetCPUs(1, bad); err == nil {
			t.Errorf("SetCPUs(1, %v): no error", bad)
		}
	}
	if err := b.SetCPUs(2, 1); err == nil {
		t.Error("SetCPUs(2, 1) on a bed of two servers: no error")
	}
	if err := b.SetCPUs(1, 1.5); err != nil {
		t.Fatal(err)
	}
	if q, c := quota(1), b.CPUs(1); q != "15000" || c != 1.5 {
		t.Errorf("after SetCPUs(1, 1.5): quota %s µs, CPUs %v; want 15000, 1.5", q, c)
	}
	if err := b.SetCPUs(1, -1); err != nil {
		t.Fatal(err)
	}
	if q := quota(1); q != "-1" {
		t.Errorf("after SetCPUs(1, -1): quota %s, want -1 (none)", q)
	}
	if err := b.SetCPUs(1, 1); err != nil {
		t.Fatal(err)
	}
	// A client session through the proxy, open across both moves: the
	// source's early fence admits the address of its server session.
	client, err := pgx.Connect(ctx, tn.DSN)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close(ctx)
	for _, to := range []int{1, 0} {
		if _, err := client.Exec(ctx, "SELECT 1"); err != nil {
			t.Fatal(err)
		}
		// The move back runs a control loop (a fixed 4 MB/s: a few steps for
		// the tenant's ~40 MB directory), which records the source's CPU
		// quota each step.
		var req agentclient.StartMigration
		if to == 0 {
			req.Rate, req.Control = 4e6, &agentclient.Control{Controller: "fixed", Rate: 4e6, MaxRate: 4e6}
		}
		m, err := b.Migrate(ctx, tn, to, req, nil)
		if err != nil {
			t.Fatal(err)
		}
		if to == 0 {
			pts, err := b.Servers[1].Client.MigrationSeries(ctx, m.ID)
			if err != nil {
				t.Fatal(err)
			}
			measured := 0
			for _, p := range pts {
				if c := p.CPUThrottledPct; c != nil {
					if *c < 0 || *c > 100 {
						t.Errorf("step at %.0f s: CPU throttled %v %%, want 0..100", p.T, *c)
					}
					measured++
				}
			}
			t.Logf("%d of the loop's %d steps recorded the source's CPU quota", measured, len(pts))
			if measured == 0 {
				t.Errorf("none of the loop's %d steps recorded the source's CPU quota (server-b's group has a 1-CPU quota)", len(pts))
			}
		}
		if owner, _, err := b.Owner(ctx, tn); err != nil || owner != to {
			t.Fatalf("after %s: owner %d, %v; want %d", m.ID, owner, err, to)
		}
		conn, err := pgx.Connect(ctx, tn.DSN)
		if err != nil {
			t.Fatal(err)
		}
		var n int64
		err = conn.QueryRow(ctx, "SELECT count(*) FROM usertable").Scan(&n)
		conn.Close(ctx)
		if err != nil || n != tn.Rows {
			t.Fatalf("after moving to %d: %d rows, %v; want %d", to, n, err, tn.Rows)
		}
	}
	groups := []*cgroup.Group{b.Servers[0].Group, b.Servers[1].Group}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	for _, g := range groups {
		if _, err := os.Stat(filepath.Join(cgroup.Root, "memory", g.Name)); !os.IsNotExist(err) {
			t.Errorf("group %s left behind: %v", g.Name, err)
		}
	}
	// The agents' logs outlive the bed (Options.LogDir): each moved the
	// tenant away once, so each fenced it once, early (the bed's router is
	// the proxy, which names the client's backend) and then in the
	// handover, and logged the fence's steps. The proxy's log has both
	// switches.
	for _, name := range []string{"server-a", "server-b"} {
		data, err := os.ReadFile(filepath.Join(logs, name+".log"))
		if err != nil || !strings.Contains(string(data), "source fenced early") || !strings.Contains(string(data), "source fenced (read-only, pg_hba.conf narrowed before the hold)") {
			t.Errorf("%s.log: %v; want the early and the handover's fence lines in %d bytes", name, err, len(data))
		}
	}
	data, err := os.ReadFile(filepath.Join(logs, "proxy.log"))
	if err != nil || strings.Count(string(data), "switched to") != 2 {
		t.Errorf("proxy.log: %v; want two switches in:\n%s", err, data)
	}
}
