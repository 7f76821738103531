package proxy

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/sluicedb/sluice/internal/pgtest"
	"github.com/sluicedb/sluice/pgcluster"
	"github.com/sluicedb/sluice/proxy/client"
)

// TestClients runs psql, pgbench in every query mode and pgx (TLS on and off)
// through one proxy, and checks the latency windows saw them.
func TestClients(t *testing.T) {
	srv := newServer(t)
	pgbenchInit(t, srv, 1)
	cert, key := writeCert(t)
	// A long window so that every transaction of the test is still in it
	// however slow the machine is.
	p := startProxy(t, srv, func(c *Config) { c.TLSCert, c.TLSKey = cert, key; c.Window = time.Hour })
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	t.Run("psql", func(t *testing.T) {
		out, err := pgBin(ctx, t, "psql", "-X", "-At", "-d", kv(p, "acme"), "-c", "select 40+2", "-c", "select current_database()")
		if err != nil {
			t.Fatalf("psql: %v\n%s", err, out)
		}
		if got := strings.TrimSpace(out); got != "42\npostgres" {
			t.Fatalf("psql output %q", got)
		}
	})
	t.Run("psql-tls", func(t *testing.T) {
		// libpq supports channel binding; over TLS it is offered only
		// SCRAM-SHA-256 and must still log in (channel_binding=prefer).
		out, err := pgBin(ctx, t, "psql", "-X", "-At", "-d", strings.Replace(kv(p, "acme"), "sslmode=disable", "sslmode=require", 1),
			"-c", "select 'tls-ok'")
		if err != nil || strings.TrimSpace(out) != "tls-ok" {
			t.Fatalf("psql over TLS: %v\n%s", err, out)
		}
	})
	for _, mode := range []string{"simple", "extended", "prepared"} {
		t.Run("pgbench-"+mode, func(t *testing.T) {
			out, err := pgBin(ctx, t, "pgbench", "-n", "-M", mode, "-c", "4", "-t", "50", "-d", kv(p, "acme"))
			checkPgbench(t, out, err)
		})
	}
	for _, ssl := range []string{"disable", "require"} {
		t.Run("pgx-sslmode-"+ssl, func(t *testing.T) {
			conn, err := pgx.Connect(ctx, proxyURL(p, "acme", ssl))
			if err != nil {
				t.Fatalf("pgx connect: %v", err)
			}
			defer conn.Close(ctx)
			if tls := conn.PgConn().Conn().RemoteAddr(); tls == nil {
				t.Fatal("no remote addr")
			}
			var n int
			for i := 0; i < 20; i++ { // pgx prepares and caches named statements
				if err := conn.QueryRow(ctx, "select $1::int + 1", i).Scan(&n); err != nil {
					t.Fatal(err)
				}
				if n != i+1 {
					t.Fatalf("got %d want %d", n, i+1)
				}
			}
			tx, err := conn.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			var cnt int
			if err := tx.QueryRow(ctx, "select count(*) from pgbench_branches").Scan(&cnt); err != nil {
				t.Fatal(err)
			}
			if err := tx.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			if cnt != 1 {
				t.Fatalf("pgbench_branches has %d rows", cnt)
			}
		})
	}

	t.Run("pgx-protocol-3.2", func(t *testing.T) {
		// The proxy speaks 3.0 and says so with NegotiateProtocolVersion.
		conn, err := pgx.Connect(ctx, proxyURL(p, "acme", "disable")+"&max_protocol_version=3.2")
		if err != nil {
			t.Fatalf("connect asking for 3.2: %v", err)
		}
		defer conn.Close(ctx)
		var n int
		if err := conn.QueryRow(ctx, "select 5").Scan(&n); err != nil || n != 5 {
			t.Fatalf("query: %d %v", n, err)
		}
	})

	ws, err := p.APIClient().Latency(ctx, "acme")
	if err != nil {
		t.Fatal(err)
	}
	var pair *client.Window
	for i := range ws {
		if ws[i].Tenant == "acme" && ws[i].Server == srv.Addr() {
			pair = &ws[i]
		}
	}
	if pair == nil || pair.Count < 600 || pair.P50MS <= 0 || pair.P99MS < pair.P50MS || pair.WindowS != 3600 {
		t.Fatalf("latency windows %+v: want a pair window with ≥600 transactions", ws)
	}
	resp, err := http.Get("http://" + p.APIAddr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	want := fmt.Sprintf(`sluice_proxy_transaction_seconds_count{server="%s",tenant="acme"} `, srv.Addr())
	if !strings.Contains(string(body), want) || !strings.Contains(string(body), `quantile="0.99"`) {
		t.Fatalf("metrics lack %q:\n%s", want, body)
	}
	// The exposition follows Prometheus' naming conventions (promtool's lint).
	if problems, err := testutil.GatherAndLint(p.Metrics()); err != nil || len(problems) > 0 {
		t.Fatalf("metrics lint: %v %+v", err, problems)
	}
}

// TestWrongPasswordAndUnknownDatabase checks the SQLSTATEs clients see.
func TestAuthErrors(t *testing.T) {
	srv := newServer(t)
	p := startProxy(t, srv, nil)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cases := []struct {
		name, url, code string
	}{
		{"wrong password", fmt.Sprintf("postgres://postgres:nope@%s/acme?sslmode=disable", p.Addr()), "28P01"},
		{"unknown user", fmt.Sprintf("postgres://mallory:%s@%s/acme?sslmode=disable", testPassword, p.Addr()), "28P01"},
		{"unknown database", proxyURL(p, "nosuchdb", "disable"), "3D000"},
		{"ssl refused, client requires it", proxyURL(p, "acme", "require"), ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			conn, err := pgx.Connect(ctx, c.url)
			if err == nil {
				conn.Close(ctx)
				t.Fatal("connected")
			}
			if c.code != "" && !strings.Contains(err.Error(), "SQLSTATE "+c.code) {
				t.Fatalf("error %v: want SQLSTATE %s", err, c.code)
			}
		})
	}
	// sslmode=prefer: 'N', then plaintext works.
	conn, err := pgx.Connect(ctx, proxyURL(p, "acme", "prefer"))
	if err != nil {
		t.Fatalf("sslmode=prefer: %v", err)
	}
	conn.Close(ctx)
	var nc net.Conn
	nc, err = net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	nc.Close()
}

// TestSCRAMSecretFromPostgres verifies clients against a SCRAM secret that
// PostgreSQL itself stored (pg_authid.rolpassword) in the auth file; the
// server trusts the proxy, so no plaintext password is needed for it.
func TestSCRAMSecretFromPostgres(t *testing.T) {
	srv := pgtest.New(t, pgcluster.Options{Password: testPassword}) // trust on host connections
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	direct, err := pgx.Connect(ctx, srv.ConnString("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	var secret string
	if err := direct.QueryRow(ctx, "select rolpassword from pg_authid where rolname = 'postgres'").Scan(&secret); err != nil {
		t.Fatal(err)
	}
	direct.Close(ctx)
	authFile := filepath.Join(t.TempDir(), "userlist.txt")
	os.WriteFile(authFile, []byte(fmt.Sprintf("; test users\n\"postgres\" \"%s\"\n", secret)), 0o600)
	p := startProxy(t, srv, func(c *Config) { c.Users = nil; c.AuthFile = authFile })
	conn, err := pgx.Connect(ctx, proxyURL(p, "acme", "disable"))
	if err != nil {
		t.Fatalf("connect with PostgreSQL's secret: %v", err)
	}
	conn.Close(ctx)
	bad := fmt.Sprintf("postgres://postgres:wrong@%s/acme?sslmode=disable", p.Addr())
	if conn, err := pgx.Connect(ctx, bad); err == nil || !strings.Contains(err.Error(), "28P01") {
		if conn != nil {
			conn.Close(ctx)
		}
		t.Fatalf("wrong password: %v, want 28P01", err)
	}
}
