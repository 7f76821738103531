package agent

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/sluicedb/sluice/agent/client"
	"github.com/sluicedb/sluice/pgcluster"
)

// TestAPIRequiresToken: every endpoint — reads, changes, metrics, and the
// agent-to-agent ones; all but the dashboard page's static files — answers 401 with a one-line JSON error to a request
// without the token or with a wrong one, and changes nothing. The agent made
// its token at first start: 64 hex digits, mode 0600.
func TestAPIRequiresToken(t *testing.T) {
	cfg := newTestConfig(t, "s1")
	t.Setenv("XDG_CONFIG_HOME", t.TempDir()) // where it registers its token
	cfg.Token = ""                           // the default: <root>/token, made at first start
	ta := startAgent(t, cfg)
	path := filepath.Join(cfg.Root, "token")
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(path)
	tok := strings.TrimSpace(string(b))
	if fi.Mode().Perm() != 0o600 || !regexp.MustCompile(`^[0-9a-f]{64}$`).MatchString(tok) {
		t.Fatalf("token file mode %04o, content %q: want 0600 and 64 hex digits", fi.Mode().Perm(), tok)
	}
	if fi, err := os.Stat(filepath.Join(cfg.Root, replicationPasswordFile)); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("replication password file: %v %v, want mode 0600", fi, err)
	}
	for _, rq := range []struct{ method, path, body string }{
		{"GET", "/v1/info", ""},
		{"GET", "/v1/tenants", ""},
		{"GET", "/v1/tenants/1", ""},
		{"POST", "/v1/tenants", `{"name":"x"}`},
		{"DELETE", "/v1/tenants/1", ""},
		{"POST", "/v1/tenants/1/stop", ""},
		{"GET", "/v1/migrations", ""},
		{"POST", "/v1/migrations", `{"tenant":1,"to":"http://127.0.0.1:17950"}`},
		{"POST", "/v1/migrations/m1/abort", ""},
		{"POST", "/v1/migrations/m1/pause", ""},
		{"POST", "/v1/migrations/m1/resume", ""},
		{"GET", "/v1/migrations/m1/series?since=3", ""},
		{"GET", "/v1/overview", ""},
		{"GET", "/metrics", ""},
		{"GET", "/ui/../v1/tenants", ""},
		{"POST", "/ui/", ""},
		{"GET", "/v1/internal/targets/info?tenant=1", ""},
		{"POST", "/v1/internal/targets/m1/reserve", `{}`},
		{"POST", "/v1/internal/targets/m1/promote", `{}`},
	} {
		for _, hdr := range []string{"", "Bearer wrong", "Basic " + tok, tok} {
			req, _ := http.NewRequest(rq.method, ta.URL()+rq.path, strings.NewReader(rq.body))
			if hdr != "" {
				req.Header.Set("Authorization", hdr)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 401 || !bytes.Contains(body, []byte(`"error": "agent s1: `)) || bytes.Count(bytes.TrimSpace(body), []byte("\n")) != 0 {
				t.Errorf("%s %s with Authorization %q: %d %s; want 401 and a one-line error", rq.method, rq.path, hdr, resp.StatusCode, body)
			}
		}
	}
	good, _ := client.New(ta.URL())
	ts, err := good.WithToken(tok).Tenants(ctxT(t), true)
	if err != nil || len(ts) != 0 {
		t.Fatalf("with the token: %v %v; want no tenant (the refused create made none)", ts, err)
	}
}

// TestMigrationOnlyToConfiguredPeers: a migration to an agent that is not
// in the source's peers is refused with a 403 naming the peers, even with
// the right token, before anything changes: the tenant keeps running, no
// migration is recorded, and the unconfigured agent gets no request at all
// (so neither a token nor a row nor a conninfo).
func TestMigrationOnlyToConfiguredPeers(t *testing.T) {
	var calls atomic.Int64
	var mu sync.Mutex
	var auths []string
	rogue := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		mu.Lock()
		auths = append(auths, r.Header.Get("Authorization"))
		mu.Unlock()
		w.WriteHeader(500)
	}))
	defer rogue.Close()
	c1, c2 := agentPair(t)
	a1, a2 := startAgent(t, c1), startAgent(t, c2)
	ctx := ctxT(t)
	tn, err := a1.c.CreateTenant(ctx, client.CreateTenant{Name: "acme", Users: testUsers})
	if err != nil {
		t.Fatal(err)
	}
	for _, to := range []string{rogue.URL, "http://127.0.0.1:17950", strings.Replace(a2.URL(), "127.0.0.1", "localhost", 1) + "/x", "a3"} {
		_, err := a1.c.StartMigration(ctx, client.StartMigration{Tenant: tn.ID, To: to})
		if client.StatusOf(err) != 403 || !strings.Contains(err.Error(), "is not a configured peer (peers: a2)") {
			t.Errorf("migration to %s: %v (status %d), want 403 naming the peers", to, err, client.StatusOf(err))
		}
	}
	if n := calls.Load(); n != 0 {
		t.Fatalf("the unconfigured agent got %d requests (Authorization %q), want none", n, auths)
	}
	if ms, err := a1.c.Migrations(ctx); err != nil || len(ms) != 0 {
		t.Fatalf("migrations after refusals: %+v %v", ms, err)
	}
	if cur, err := a1.c.Tenant(ctx, tn.ID); err != nil || cur.State != "running" || !cur.Alive {
		t.Fatalf("tenant after refusals: %+v %v", cur, err)
	}
	// A peer's token goes to that peer only: a2's answer shows it got the
	// right one (Info is the migration's first call).
	if tok := a1.peerToken(a2.URL()); tok != testToken {
		t.Fatalf("token for peer a2 = %q, want the configured one", tok)
	}
	if tok := a1.peerToken(rogue.URL); tok != "" {
		t.Fatalf("token for an unconfigured URL = %q, want none", tok)
	}
}

// TestTenantPostmasterWithoutTrust: a tenant the agent created admits no
// one without a password over TCP — not the superuser (rejected outright),
// not the replication role to a database, not a user with a wrong password
// — and its users are not superusers: COPY … TO PROGRAM is refused them.
// The agent itself reaches it over the Unix socket (peer authentication).
func TestTenantPostmasterWithoutTrust(t *testing.T) {
	cfg := newTestConfig(t, "s2")
	stopTenants(t, cfg.Root)
	ta := startAgent(t, cfg)
	ctx := ctxT(t)
	tn, err := ta.c.CreateTenant(ctx, client.CreateTenant{Name: "acme", Users: testUsers})
	if err != nil {
		t.Fatal(err)
	}
	tcp := func(user, pw, db string) string {
		return fmt.Sprintf("postgres://%s:%s@127.0.0.1:%d/%s?sslmode=disable", user, pw, tn.Port, db)
	}
	for _, tc := range []struct {
		name, cs, code, msg string
	}{
		{"superuser, no password", fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", tn.Port), "28000", "rejects connection"},
		{"superuser, a password", tcp("postgres", "guess", "postgres"), "28000", "rejects connection"},
		{"replication role to a database", tcp(pgcluster.ReplicationRole, "guess", "postgres"), "28000", "rejects connection"},
		{"user, wrong password", tcp("app", "guess", "postgres"), "28P01", "password authentication failed"},
		{"user, no password", fmt.Sprintf("postgres://app@127.0.0.1:%d/postgres?sslmode=disable", tn.Port), "", "password"},
	} {
		conn, err := pgx.Connect(ctx, tc.cs)
		if err == nil {
			conn.Close(ctx)
			t.Errorf("%s: connected, want refused", tc.name)
			continue
		}
		var pe *pgconn.PgError
		if (tc.code != "" && (!errors.As(err, &pe) || pe.Code != tc.code)) || !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("%s: %v, want SQLSTATE %s mentioning %q", tc.name, err, tc.code, tc.msg)
		}
	}
	app, err := pgx.Connect(ctx, appConnString(tn.Port))
	if err != nil {
		t.Fatal(err)
	}
	defer app.Close(ctx)
	var super bool
	if err := app.QueryRow(ctx, "SELECT rolsuper FROM pg_roles WHERE rolname = current_user").Scan(&super); err != nil || super {
		t.Fatalf("app is superuser %v (%v), want not", super, err)
	}
	if _, err := app.Exec(ctx, "CREATE TABLE mine (id int)"); err != nil {
		t.Fatalf("the owner cannot create a table: %v", err)
	}
	for _, q := range []string{"COPY (SELECT 1) TO PROGRAM 'id'", "COPY mine FROM PROGRAM 'id'", "ALTER ROLE app SUPERUSER", "SELECT pg_read_file('postgresql.conf')"} {
		_, err := app.Exec(ctx, q)
		var pe *pgconn.PgError
		if !errors.As(err, &pe) || pe.Code != "42501" {
			t.Errorf("app: %s: %v, want 42501 insufficient privilege", q, err)
		}
	}
	su, err := pgx.Connect(ctx, ta.ConnString(tn.Port, ""))
	if err != nil {
		t.Fatalf("the agent's socket connection: %v", err)
	}
	su.Close(ctx)
}

// TestInsecureNoAuth: an agent run open on purpose serves requests without
// a token and says so loudly at start.
func TestInsecureNoAuth(t *testing.T) {
	cfg := newTestConfig(t, "s3")
	cfg.Token, cfg.InsecureNoAuth = "", true
	var logs syncBuffer
	cfg.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	ta := startAgent(t, cfg)
	c, _ := client.New(ta.URL())
	if _, err := c.Info(ctxT(t)); err != nil {
		t.Fatalf("open agent: %v", err)
	}
	if !strings.Contains(logs.String(), "INSECURE") || !strings.Contains(logs.String(), "level=WARN") {
		t.Fatalf("log of an open agent lacks the warning:\n%s", logs.String())
	}
	if _, err := os.Stat(filepath.Join(cfg.Root, "token")); err == nil {
		t.Fatal("an open agent made a token file")
	}
	bad := cfg
	bad.Token = "x"
	if _, err := New(bad); !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), "insecure_no_auth excludes") {
		t.Fatalf("insecure_no_auth with a token: %v", err)
	}
}

// syncBuffer is a bytes.Buffer safe for concurrent writes (a log sink).
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
