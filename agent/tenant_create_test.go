package agent

import (
	"strings"
	"testing"

	"github.com/sluicedb/sluice/agent/client"
)

// TestCreateTenantErrors: settings PostgreSQL refuses are a one-line 400
// before anything is recorded (no tombstone); a tenant whose postmaster
// does not start (settings each valid, together refused at start) fails in
// one line with PostgreSQL's reason, rolled back; a good one then gets id 2.
func TestCreateTenantErrors(t *testing.T) {
	cfg := newTestConfig(t, "a1")
	stopTenants(t, cfg.Root)
	ta := startAgent(t, cfg)
	ctx := ctxT(t)
	for _, tc := range []struct {
		name     string
		settings map[string]string
		code     int    // HTTP status
		want     string // in the one-line error
	}{
		{"memory in words", map[string]string{"shared_buffers": "lots"}, 400, `tenant settings: shared_buffers: invalid value for parameter "shared_buffers": "lots"`},
		{"not a boolean", map[string]string{"fsync": "maybe"}, 400, `parameter "fsync" requires a Boolean value`},
		{"misspelt", map[string]string{"work_meme": "4MB"}, 400, `unrecognized configuration parameter "work_meme"`},
		{"refused at start", map[string]string{"wal_level": "minimal"}, 500, `FATAL: WAL streaming (max_wal_senders > 0) requires wal_level "replica" or "logical"`},
	} {
		_, err := ta.c.CreateTenant(ctx, client.CreateTenant{Settings: tc.settings})
		if client.StatusOf(err) != tc.code || err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%s: %d %v; want %d with one line containing %q", tc.name, client.StatusOf(err), err, tc.code, tc.want)
		}
	}
	ts, _ := ta.Catalog().Tenants()
	if len(ts) != 1 || ts[0].ID != 1 || ts[0].State != "deleted" {
		t.Fatalf("catalog after the refusals: %+v; want only the tombstone of the tenant that failed to start", ts)
	}
	if tn, err := ta.c.CreateTenant(ctx, client.CreateTenant{}); err != nil || tn.ID != 2 || tn.State != "running" {
		t.Fatalf("a good tenant after them: %+v, %v", tn, err)
	}
}
