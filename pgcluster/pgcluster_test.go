package pgcluster_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sluicedb/sluice/internal/pgtest"
	"github.com/sluicedb/sluice/pgcluster"
)

func TestMain(m *testing.M) {
	code := m.Run()
	pgtest.Cleanup()
	os.Exit(code)
}

func TestStartQueryStop(t *testing.T) {
	c := pgtest.New(t, pgcluster.Options{Settings: map[string]string{"shared_buffers": "16MB"}})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, c.ConnString("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	var sb, ver, tz string
	if err := conn.QueryRow(ctx, "SELECT current_setting('shared_buffers'), current_setting('server_version_num'), current_setting('TimeZone')").Scan(&sb, &ver, &tz); err != nil {
		t.Fatal(err)
	}
	// initdb's postgresql.conf is kept without its comments, settings intact.
	conf, err := os.ReadFile(filepath.Join(c.Dir, "postgresql.conf"))
	if err != nil {
		t.Fatal(err)
	}
	for i, line := range strings.Split(string(conf), "\n")[1:] {
		if strings.HasPrefix(strings.TrimSpace(line), "#") {
			t.Errorf("postgresql.conf line %d is a comment: %q", i+2, line)
		}
	}
	for _, want := range []string{"max_connections =", "timezone =", "include_if_exists = 'sluice.conf'"} {
		if !strings.Contains(string(conf), want) {
			t.Errorf("postgresql.conf lacks %q:\n%s", want, conf)
		}
	}
	if tz != "Etc/UTC" && strings.Contains(string(conf), "timezone = 'Etc/UTC'") {
		t.Errorf("TimeZone = %q, postgresql.conf says Etc/UTC", tz)
	}
	conn.Close(ctx)
	if sb != "16MB" {
		t.Errorf("shared_buffers = %q, want 16MB", sb)
	}
	if ver[:2] != "15" {
		t.Errorf("server_version_num = %s, want 15xxxx", ver)
	}
	if !c.Running() {
		t.Fatal("Running() = false for a started cluster")
	}
	if err := c.Stop(ctx, pgcluster.Fast); err != nil {
		t.Fatal(err)
	}
	if c.Running() {
		t.Fatal("Running() = true after Stop")
	}
	// Reopen by directory: the port comes from sluice.conf.
	c2, err := pgcluster.Open(c.Dir, pgcluster.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if c2.Port != c.Port {
		t.Fatalf("reopened port %d, want %d", c2.Port, c.Port)
	}
}

// TestTransientGoneAtStart: a transient setting reaches the running server
// at a reload and does not survive a restart, though nothing took it back.
func TestTransientGoneAtStart(t *testing.T) {
	c := pgtest.New(t, pgcluster.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	workMem := func(reload bool) string {
		t.Helper()
		conn, err := pgx.Connect(ctx, c.ConnString("postgres"))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(ctx)
		if reload {
			if _, err := conn.Exec(ctx, "SELECT pg_reload_conf(), pg_sleep(0.2)"); err != nil {
				t.Fatal(err)
			}
		}
		var v string
		if err := conn.QueryRow(ctx, "SELECT current_setting('work_mem')").Scan(&v); err != nil {
			t.Fatal(err)
		}
		return v
	}
	before := workMem(false)
	if err := c.SetTransient(map[string]string{"work_mem": "7MB"}); err != nil {
		t.Fatal(err)
	}
	if got := workMem(true); got != "7MB" {
		t.Fatalf("work_mem after SetTransient and a reload = %s, want 7MB", got)
	}
	if err := c.Stop(ctx, pgcluster.Fast); err != nil {
		t.Fatal(err)
	}
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(c.Dir, pgcluster.TransientConf)); !os.IsNotExist(err) {
		t.Errorf("%s after a restart: %v, want it gone", pgcluster.TransientConf, err)
	}
	if got := workMem(false); got != before {
		t.Errorf("work_mem after a restart = %s, want %s as before the transient setting", got, before)
	}
}

func TestPasswordAuth(t *testing.T) {
	c := pgtest.New(t, pgcluster.Options{AuthMethod: "scram-sha-256", Password: "s3cret'x"})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, c.ConnString("postgres"))
	if err != nil {
		t.Fatalf("connect with password: %v", err)
	}
	conn.Close(ctx)
	bad := c.ConnString("postgres")
	cfg, _ := pgx.ParseConfig(bad)
	cfg.Password = "wrong"
	if conn, err := pgx.ConnectConfig(ctx, cfg); err == nil {
		conn.Close(ctx)
		t.Fatal("connected with a wrong password")
	}
}

func TestWALSegSize(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	dir := pgtest.TempDir(t)
	if _, err := pgcluster.Init(ctx, dir+"/bad", pgcluster.Options{WALSegSizeMB: 3}); err == nil {
		t.Fatal("a 3 MiB WAL segment size was accepted")
	}
	c, err := pgcluster.Init(ctx, dir+"/data", pgcluster.Options{WALSegSizeMB: 1})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer c.Stop(context.Background(), pgcluster.Immediate)
	conn, err := pgx.Connect(ctx, c.ConnString("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var seg string
	if err := conn.QueryRow(ctx, "SELECT current_setting('wal_segment_size')").Scan(&seg); err != nil {
		t.Fatal(err)
	}
	if seg != "1MB" {
		t.Fatalf("wal_segment_size = %s, want 1MB", seg)
	}
}
