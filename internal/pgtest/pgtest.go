// Package pgtest gives tests their own real PostgreSQL 15 clusters: initdb'd
// in a temp directory, on a free port, stopped and removed when the test ends.
//
// The first cluster of a test binary is made by initdb into a template; later
// ones copy the template (much faster than initdb on a 2-core machine). Tests
// fail, never skip, when PostgreSQL 15 is not installed: `make test` installs it.
package pgtest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sluicedb/sluice/pgcluster"
)

var template struct {
	once sync.Once
	dir  string
	err  error
}

// TempDir returns a fresh directory that the PostgreSQL OS user may use,
// removed at the end of the test. (t.TempDir is root-only when tests run as root.)
func TempDir(t testing.TB) string {
	t.Helper()
	reapOnce.Do(reapOrphans)
	d, err := pgcluster.MkdirTemp(dirPrefix)
	if err != nil {
		t.Fatal(err)
	}
	// The owner's pid, for reapOrphans in a later test process; beside the
	// directory, which must stay empty (a tablespace location must be).
	os.WriteFile(d+ownerSuffix, []byte(strconv.Itoa(os.Getpid())), 0o644)
	t.Cleanup(func() { os.RemoveAll(d); os.Remove(d + ownerSuffix) })
	return d
}

const (
	dirPrefix   = "sluice-test-"
	ownerSuffix = ".owner" // <dir>.owner holds the pid of the test process that made <dir>
)

var reapOnce sync.Once

// reapOrphans stops and removes the clusters of test processes that died
// without their cleanup (a killed or timed-out `go test`): every
// sluice-test-* directory whose owner pid (in <dir>.owner) is gone. A postmaster left running
// gets an immediate shutdown (SIGQUIT). Directories without an owner file,
// or whose owner lives, are left alone.
func reapOrphans() {
	owners, _ := filepath.Glob(filepath.Join(os.TempDir(), dirPrefix+"*"+ownerSuffix))
	for _, of := range owners {
		d := strings.TrimSuffix(of, ownerSuffix)
		b, err := os.ReadFile(of)
		if err != nil {
			continue
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil || pid <= 0 || syscall.Kill(pid, 0) != syscall.ESRCH {
			continue
		}
		pids, _ := filepath.Glob(filepath.Join(d, "*", "postmaster.pid"))
		for _, pf := range pids {
			c := &pgcluster.Cluster{Dir: filepath.Dir(pf)}
			if pm, err := c.PID(); err == nil && pm > 0 {
				syscall.Kill(pm, syscall.SIGQUIT)
				for i := 0; i < 100 && syscall.Kill(pm, 0) == nil; i++ {
					time.Sleep(20 * time.Millisecond)
				}
			}
		}
		os.RemoveAll(d)
		os.Remove(of)
	}
}

// New initialises and starts a cluster with options o (Port 0 picks a free
// port) and registers its shutdown and removal with t.Cleanup.
// Settings default to fsync=off for speed unless o.Settings says otherwise.
func New(t testing.TB, o pgcluster.Options) *pgcluster.Cluster {
	t.Helper()
	c := Init(t, o)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if o.Password != "" {
		q := fmt.Sprintf("ALTER ROLE %s PASSWORD '%s'", quoteIdent(c.Options().SuperUser), strings.ReplaceAll(o.Password, "'", "''"))
		if out, err := c.Run(ctx, "psql", "-X", "-q", "-h", c.Dir, "-p", fmt.Sprint(c.Port), "-U", c.Options().SuperUser, "-d", "postgres", "-c", q); err != nil {
			t.Fatalf("pgtest: set password: %v\n%s", err, out)
		}
	}
	return c
}

// Init is New without starting the server: a stopped, configured cluster.
func Init(t testing.TB, o pgcluster.Options) *pgcluster.Cluster {
	t.Helper()
	if _, err := os.Stat(filepath.Join(pgcluster.DefaultBinDir, "postgres")); err != nil && o.BinDir == "" {
		t.Fatalf("pgtest: PostgreSQL 15 is not installed (%v); run `make test`, which installs it", err)
	}
	tmpl, err := templateDir(o.BinDir)
	if err != nil {
		t.Fatalf("pgtest: template initdb: %v", err)
	}
	dir := filepath.Join(TempDir(t), "data")
	if out, err := exec.Command("cp", "-a", tmpl, dir).CombinedOutput(); err != nil {
		t.Fatalf("pgtest: copy template: %v\n%s", err, out)
	}
	if o.Port == 0 {
		if o.Port, err = pgcluster.FreePort(); err != nil {
			t.Fatal(err)
		}
	}
	settings := map[string]string{"fsync": "off", "full_page_writes": "on", "max_connections": "100", "shared_buffers": "32MB"}
	for k, v := range o.Settings {
		settings[k] = v
	}
	pw := o.Password
	o.Password = "" // the template has no password; New sets it after start
	c, err := pgcluster.Open(dir, o)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Configure(settings); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		if err := c.Stop(ctx, pgcluster.Immediate); err != nil {
			t.Logf("pgtest: %v", err)
		}
	})
	if pw != "" {
		o.Password = pw
		c2, err := pgcluster.Open(dir, o)
		if err != nil {
			t.Fatal(err)
		}
		return c2
	}
	return c
}

func templateDir(binDir string) (string, error) {
	template.once.Do(func() {
		base, err := pgcluster.MkdirTemp("sluice-pgtemplate-")
		if err != nil {
			template.err = err
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		dir := filepath.Join(base, "data")
		if _, err := pgcluster.Init(ctx, dir, pgcluster.Options{BinDir: binDir, Port: 1}); err != nil {
			template.err = err
			return
		}
		template.dir = dir
	})
	return template.dir, template.err
}

// Cleanup removes the template directory; call it from TestMain after m.Run.
func Cleanup() {
	if template.dir != "" {
		os.RemoveAll(filepath.Dir(template.dir))
	}
}

func quoteIdent(s string) string { return `"` + s + `"` }
