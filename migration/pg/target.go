package pg

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/sluicedb/sluice/migration"
	"github.com/sluicedb/sluice/pgcluster"
)

// LocalTarget is the Target on this host: tenant directories under Root,
// PostgreSQL run through pgcluster. It keeps one persistent connection per
// migration to the standby (over its Unix socket) for positions, replay waits
// and promotion. The agent wraps it in HTTP for remote use. Safe for
// concurrent use.
type LocalTarget struct {
	// Root is the directory tenant directories are created in (must exist).
	Root string
	// Options for the clusters it runs (BinDir, OSUser, ListenAddr, SuperUser,
	// Password); Port is ignored (Reserve picks one).
	Options pgcluster.Options
	// Settings override postgresql.conf settings copied from the source
	// (e.g. a different shared_buffers on this server).
	Settings map[string]string
	// PollInterval is the sleep between polls of replay position and
	// pg_is_in_recovery() during HANDOVER (default 1 ms).
	PollInterval time.Duration

	mu    sync.Mutex
	conns map[string]*pgx.Conn // by migration ID
	ports map[string]int       // reserved, by migration ID
	// notReady holds, by migration ID, until when Position does not try to
	// connect: the standby refused the last attempt as not yet consistent.
	notReady map[string]time.Time
	wal      map[string]*earlyWAL // StreamWAL's receivers, by migration ID
	// OnAdoptWAL, if set, hears what StartStandby took from StreamWAL: the
	// segments moved into the standby's pg_wal and their bytes.
	OnAdoptWAL func(m migration.Record, segments int, bytes int64)
}

var _ migration.Target = (*LocalTarget)(nil)

// NewLocalTarget returns a LocalTarget creating tenant directories under root.
func NewLocalTarget(root string, o pgcluster.Options) *LocalTarget {
	return &LocalTarget{Root: root, Options: o}
}

func (t *LocalTarget) poll() time.Duration {
	if t.PollInterval > 0 {
		return t.PollInterval
	}
	return time.Millisecond
}

// dirFor is the deterministic directory of migration m on this target.
func (t *LocalTarget) dirFor(m migration.Record) string {
	return filepath.Join(t.Root, fmt.Sprintf("%s-%s", m.Tenant, m.ID))
}

func (t *LocalTarget) cluster(m migration.Record) (*pgcluster.Cluster, error) {
	if m.TargetDir == "" || m.TargetPort == 0 {
		return nil, fmt.Errorf("migration: target: migration %s has no reserved directory", m.ID)
	}
	o := t.Options
	o.Port = m.TargetPort
	return pgcluster.Open(m.TargetDir, o)
}

// Info reports the major version of this host's PostgreSQL and the free space under Root.
func (t *LocalTarget) Info(ctx context.Context, tenant string) (migration.TargetInfo, error) {
	var ti migration.TargetInfo
	var st syscall.Statfs_t
	if err := syscall.Statfs(t.Root, &st); err != nil {
		return ti, fmt.Errorf("migration: target info: %w", err)
	}
	ti.FreeBytes = int64(st.Bavail) * int64(st.Bsize)
	bin := t.Options.BinDir
	if bin == "" {
		bin = pgcluster.DefaultBinDir
	}
	out, err := runVersion(ctx, bin)
	if err != nil {
		return ti, fmt.Errorf("migration: target info: %w", err)
	}
	ti.Major = out
	return ti, nil
}

// runVersion returns the major version from `postgres --version` in bin.
func runVersion(ctx context.Context, bin string) (int, error) {
	c, err := pgcluster.Open(os.TempDir(), pgcluster.Options{BinDir: bin, Port: 1})
	if err != nil {
		return 0, err
	}
	b, err := c.Run(ctx, "postgres", "--version")
	if err != nil {
		return 0, fmt.Errorf("postgres --version: %w", err)
	}
	// "postgres (PostgreSQL) 15.10 (Debian 15.10-0+deb12u1)"
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return 0, fmt.Errorf("postgres --version: unexpected %q", b)
	}
	var major int
	if _, err := fmt.Sscanf(f[2], "%d", &major); err != nil {
		return 0, fmt.Errorf("postgres --version: unexpected %q", b)
	}
	return major, nil
}

// Reserve creates an empty directory for m (removing a previous attempt's)
// and picks a free port.
func (t *LocalTarget) Reserve(ctx context.Context, m migration.Record) (string, int, error) {
	dir := t.dirFor(m)
	if err := t.Abort(ctx, migration.Record{ID: m.ID, Tenant: m.Tenant, TargetDir: dir, TargetPort: max(m.TargetPort, 1)}); err != nil {
		return "", 0, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", 0, fmt.Errorf("migration: reserve: %w", err)
	}
	if err := t.chown(dir); err != nil {
		return "", 0, fmt.Errorf("migration: reserve: %w", err)
	}
	port, err := pgcluster.FreePort()
	if err != nil {
		return "", 0, fmt.Errorf("migration: reserve: %w", err)
	}
	t.mu.Lock()
	if t.ports == nil {
		t.ports = map[string]int{}
	}
	t.ports[m.ID] = port
	t.mu.Unlock()
	return dir, port, nil
}

func (t *LocalTarget) chown(p string) error {
	uid, gid, ok, err := pgcluster.OSUserIDs(t.Options.OSUser)
	if err != nil || !ok {
		return err
	}
	return os.Lchown(p, uid, gid)
}

// withConn runs f on the persistent connection to m's server (database
// postgres).
func (t *LocalTarget) withConn(ctx context.Context, m migration.Record, f func(*pgx.Conn) error) error {
	return t.withDBConn(ctx, m, "postgres", f)
}

// withDBConn runs f on the persistent connection to database db of m's
// server. Connections stay open until closeConn: on a small server a new
// session costs a backend fork and a cold catalog cache, and WARM calls
// Prewarm several times a second.
func (t *LocalTarget) withDBConn(ctx context.Context, m migration.Record, db string, f func(*pgx.Conn) error) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.conns == nil {
		t.conns = map[string]*pgx.Conn{}
	}
	key := m.ID
	if db != "postgres" {
		key += "\x00" + db
	}
	conn := t.conns[key]
	if conn == nil || conn.IsClosed() {
		c, err := t.cluster(m)
		if err != nil {
			return err
		}
		conn, err = pgx.Connect(ctx, socketConnString(c, db))
		if err != nil {
			return err
		}
		t.conns[key] = conn
	}
	err := f(conn)
	if err != nil && (conn.IsClosed() || ctx.Err() != nil || isConnErr(err)) {
		conn.Close(context.Background())
		delete(t.conns, key)
	}
	return err
}

// closeConn closes every connection withDBConn holds for migration id.
func (t *LocalTarget) closeConn(id string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for k, c := range t.conns {
		if k == id || strings.HasPrefix(k, id+"\x00") {
			c.Close(context.Background())
			delete(t.conns, k)
		}
	}
}

// UnpaceWAL is unsupported: a LocalTarget relays no WAL (its standby dials
// the source, or the agent's relay in front of it).
func (t *LocalTarget) UnpaceWAL(bool) error { return migration.ErrUnsupported }

// WALRelayed is unsupported, as UnpaceWAL.
func (t *LocalTarget) WALRelayed() (int64, error) { return 0, migration.ErrUnsupported }

// Addr is host:port of the tenant on this target.
func (t *LocalTarget) Addr(m migration.Record) string {
	c, err := t.cluster(m)
	if err != nil {
		return ""
	}
	return c.Addr()
}

// Abort stops the target's postmaster (immediate), removes its directory and
// forgets the port. A no-op if nothing is there.
func (t *LocalTarget) Abort(ctx context.Context, m migration.Record) error {
	t.closeConn(m.ID)
	dir := m.TargetDir
	if dir == "" {
		dir = t.dirFor(m)
	}
	if err := t.discardWAL(migration.Record{ID: m.ID, TargetDir: dir}); err != nil {
		return fmt.Errorf("migration: abort target: %w", err)
	}
	o := t.Options
	o.Port = max(m.TargetPort, 1)
	if c, err := pgcluster.Open(dir, o); err == nil && c.Running() {
		if err := c.Stop(ctx, pgcluster.Immediate); err != nil {
			return fmt.Errorf("migration: abort target: %w", err)
		}
	}
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("migration: abort target: %w", err)
	}
	t.mu.Lock()
	delete(t.ports, m.ID)
	t.mu.Unlock()
	return nil
}

// Commit marks the tenant as living here: it closes the migration's
// connection and removes the standby settings from sluice.conf (they would
// be ignored without standby.signal, but a later migration reads this file).
func (t *LocalTarget) Commit(ctx context.Context, m migration.Record) error {
	t.closeConn(m.ID)
	t.mu.Lock()
	delete(t.ports, m.ID)
	t.mu.Unlock()
	c, err := t.cluster(m)
	if err != nil {
		return err
	}
	settings, err := confSettings(m.TargetDir)
	if err != nil {
		return fmt.Errorf("migration: commit: %w", err)
	}
	if err := c.Configure(settings); err != nil {
		return fmt.Errorf("migration: commit: %w", err)
	}
	return nil
}
