package agent

import (
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/sluicedb/sluice/agent/client"
	"github.com/sluicedb/sluice/pgcluster"
)

// TestTenantLifecycle drives create, list, stop, start, agent restart with a
// dead postmaster, and delete through the HTTP API on real PostgreSQL.
func TestTenantLifecycle(t *testing.T) {
	cfg := newTestConfig(t, "a1")
	stopTenants(t, cfg.Root)
	ta := startAgent(t, cfg)
	ctx := ctxT(t)

	tn, err := ta.c.CreateTenant(ctx, client.CreateTenant{Name: "acme"})
	if err != nil {
		t.Fatal(err)
	}
	if tn.ID != 1 || tn.State != "running" || !tn.Alive || tn.Port != cfg.Tenant.BasePort+1 || tn.Host != "127.0.0.1" || tn.Database != "postgres" {
		t.Fatalf("created tenant = %+v", tn)
	}
	conn, err := pgx.Connect(ctx, ta.ConnString(tn.Port, ""))
	if err != nil {
		t.Fatal(err)
	}
	var exts int
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM pg_extension WHERE extname IN ('pg_buffercache','pg_prewarm')").Scan(&exts); err != nil {
		t.Fatal(err)
	}
	var sb string
	conn.QueryRow(ctx, "SHOW shared_buffers").Scan(&sb)
	conn.Close(ctx)
	if exts != 2 || sb != "32MB" {
		t.Fatalf("extensions = %d (want 2), shared_buffers = %s (want 32MB)", exts, sb)
	}

	// The proxy's view: exactly these fields, with these types.
	req, _ := http.NewRequest("GET", ta.URL()+"/v1/tenants", nil)
	req.Header.Set("Authorization", "Bearer "+testToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var raw []map[string]any
	if err := json.Unmarshal(body, &raw); err != nil || len(raw) != 1 {
		t.Fatalf("GET /v1/tenants = %s (%v)", body, err)
	}
	for k, want := range map[string]any{"id": 1.0, "name": "acme", "host": "127.0.0.1", "port": float64(tn.Port), "database": "postgres", "state": "running"} {
		if raw[0][k] != want {
			t.Errorf("tenant field %s = %v, want %v", k, raw[0][k], want)
		}
	}

	// Without the token, every request is refused (security_test.go has the rest).
	noTok, _ := client.New(ta.URL())
	if _, err := noTok.CreateTenant(ctx, client.CreateTenant{ID: 5}); client.StatusOf(err) != 401 {
		t.Fatalf("create without token: %v, want 401", err)
	}
	if _, err := noTok.StopTenant(ctx, 1); client.StatusOf(err) != 401 {
		t.Fatalf("stop without token: %v, want 401", err)
	}
	if _, err := noTok.WithToken("wrong").DeleteTenant(ctx, 1); client.StatusOf(err) != 401 {
		t.Fatalf("delete with a wrong token: %v, want 401", err)
	}
	if _, err := noTok.Tenants(ctx, false); client.StatusOf(err) != 401 {
		t.Fatalf("list without token: %v, want 401", err)
	}

	// Bad input: a specific error, nothing changed.
	for _, tc := range []struct {
		name string
		req  client.CreateTenant
		code int
	}{
		{"duplicate id", client.CreateTenant{ID: 1}, 409},
		{"reserved setting", client.CreateTenant{ID: 2, Settings: map[string]string{"port": "1"}}, 400},
		{"bad setting name", client.CreateTenant{ID: 2, Settings: map[string]string{"x;y": "1"}}, 400},
		{"bad name", client.CreateTenant{ID: 2, Name: "a b"}, 400},
		{"port overflow", client.CreateTenant{ID: 70000}, 400},
	} {
		_, err := ta.c.CreateTenant(ctx, tc.req)
		if client.StatusOf(err) != tc.code {
			t.Errorf("%s: err = %v (status %d), want status %d", tc.name, err, client.StatusOf(err), tc.code)
		}
	}
	if ts, _ := ta.c.Tenants(ctx, true); len(ts) != 1 {
		t.Fatalf("after refused creates: %d tenants, want 1", len(ts))
	}
	if _, err := ta.c.Tenant(ctx, 42); client.StatusOf(err) != 404 {
		t.Fatalf("unknown tenant: %v", err)
	}
	if _, err := ta.c.StartTenant(ctx, 42); client.StatusOf(err) != 404 {
		t.Fatalf("start unknown tenant: %v", err)
	}

	// Stop and start.
	if tn, err = ta.c.StopTenant(ctx, 1); err != nil || tn.State != "stopped" || tn.Alive {
		t.Fatalf("stop: %+v %v", tn, err)
	}
	if tn, err = ta.c.StartTenant(ctx, 1); err != nil || tn.State != "running" || !tn.Alive {
		t.Fatalf("start: %+v %v", tn, err)
	}

	// Agent dies, then the postmaster dies; a restarted agent brings it back.
	ta.stop()
	c, _ := pgcluster.Open(tn.Dir, pgcluster.Options{Port: tn.Port})
	if err := c.Stop(ctx, pgcluster.Immediate); err != nil {
		t.Fatal(err)
	}
	ta = startAgent(t, cfg)
	waitServing(t, ta)
	if tn, err = ta.c.Tenant(ctx, 1); err != nil || tn.State != "running" || !tn.Alive {
		t.Fatalf("after agent restart: %+v %v", tn, err)
	}

	// A second tenant gets the next id and port.
	tn2, err := ta.c.CreateTenant(ctx, client.CreateTenant{Settings: map[string]string{"shared_buffers": "16MB"}})
	if err != nil || tn2.ID != 2 || tn2.Port != cfg.Tenant.BasePort+2 || tn2.Name != "tenant-2" {
		t.Fatalf("second tenant: %+v %v", tn2, err)
	}

	// Delete.
	if tn, err = ta.c.DeleteTenant(ctx, 1); err != nil || tn.State != "deleted" {
		t.Fatalf("delete: %+v %v", tn, err)
	}
	if _, err := os.Stat(tn.Dir); !os.IsNotExist(err) {
		t.Fatalf("data dir %s still there after delete: %v", tn.Dir, err)
	}
	if _, err := ta.c.Tenant(ctx, 1); client.StatusOf(err) != 404 {
		t.Fatalf("deleted tenant: %v", err)
	}
	if ts, _ := ta.c.Tenants(ctx, false); len(ts) != 1 || ts[0].ID != 2 {
		t.Fatalf("list after delete = %+v", ts)
	}
	if ts, _ := ta.c.Tenants(ctx, true); len(ts) != 2 {
		t.Fatalf("list all after delete = %+v", ts)
	}
	// The id may be reused after delete.
	if tn, err = ta.c.CreateTenant(ctx, client.CreateTenant{ID: 1, Name: "again"}); err != nil || !tn.Alive {
		t.Fatalf("recreate id 1: %+v %v", tn, err)
	}
}

// TestInterruptedCreateRolledBack: a catalog left in "creating" (agent killed
// mid-create) is rolled back at restart, and the ID is usable again.
func TestInterruptedCreateRolledBack(t *testing.T) {
	cfg := newTestConfig(t, "a1")
	stopTenants(t, cfg.Root)
	a, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	dir := a.TenantDir(3)
	if err := os.MkdirAll(filepath.Join(dir, "base"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := a.cat.PutTenant(catalogTenant(3, dir, a.TenantPort(3), "creating")); err != nil {
		t.Fatal(err)
	}
	a.Close()
	ta := startAgent(t, cfg)
	waitServing(t, ta)
	ctx := ctxT(t)
	if _, err := ta.c.Tenant(ctx, 3); client.StatusOf(err) != 404 {
		t.Fatalf("interrupted tenant after restart: %v, want 404", err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("dir of interrupted create still there: %v", err)
	}
	if _, err := ta.c.CreateTenant(ctx, client.CreateTenant{ID: 3}); err != nil {
		t.Fatal(err)
	}
}

// waitServing waits until the agent answers (Serve reconciles first).
func waitServing(t testing.TB, ta *testAgent) {
	t.Helper()
	ctx := ctxT(t)
	for {
		if _, err := ta.c.Info(ctx); err == nil {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatal("agent did not come up")
		case <-waitTick():
		}
	}
}
