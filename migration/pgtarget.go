package migration

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/sluicedb/sluice/pgcluster"
	"github.com/sluicedb/sluice/snapshot"
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
	OnAdoptWAL func(m Record, segments int, bytes int64)
}

// ConsistencyRetry is how long Position waits, after a standby refused a
// connection as not yet consistent, before it tries again. Each refused
// attempt forks a backend on the target and logs a FATAL; CATCH-UP polls
// every CatchUpPoll, and a standby can take minutes to become consistent
// after a long snapshot.
const ConsistencyRetry = time.Second

var _ Target = (*LocalTarget)(nil)

// StandbyRetryInterval is wal_retrieve_retry_interval on a target standby
// (20 ms instead of 5 s): how long its startup process sleeps after losing the
// source before it checks for a promotion again.
const StandbyRetryInterval = "20ms"

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
func (t *LocalTarget) dirFor(m Record) string {
	return filepath.Join(t.Root, fmt.Sprintf("%s-%s", m.Tenant, m.ID))
}

func (t *LocalTarget) cluster(m Record) (*pgcluster.Cluster, error) {
	if m.TargetDir == "" || m.TargetPort == 0 {
		return nil, fmt.Errorf("migration: target: migration %s has no reserved directory", m.ID)
	}
	o := t.Options
	o.Port = m.TargetPort
	return pgcluster.Open(m.TargetDir, o)
}

// Info reports the major version of this host's PostgreSQL and the free space under Root.
func (t *LocalTarget) Info(ctx context.Context, tenant string) (TargetInfo, error) {
	var ti TargetInfo
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
func (t *LocalTarget) Reserve(ctx context.Context, m Record) (string, int, error) {
	dir := t.dirFor(m)
	if err := t.Abort(ctx, Record{ID: m.ID, Tenant: m.Tenant, TargetDir: dir, TargetPort: max(m.TargetPort, 1)}); err != nil {
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

// OpenSnapshot returns a writer that extracts the stream into m.TargetDir:
// a hot snapshot (package snapshot's stream, from Source.SendSnapshot) for a
// live migration, a cold directory stream (Source.SendCold) for
// stop-and-copy. Close waits for the extraction and returns its error.
func (t *LocalTarget) OpenSnapshot(ctx context.Context, m Record) (io.WriteCloser, error) {
	if m.TargetDir == "" {
		return nil, fmt.Errorf("migration: open snapshot: migration %s has no reserved directory", m.ID)
	}
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		var err error
		if m.Mode == StopAndCopy {
			_, err = receiveDir(pr, m.TargetDir, t.chown)
		} else {
			_, err = snapshot.Receive(ctx, pr, m.TargetDir, snapshot.ReceiveOptions{OSUser: t.Options.OSUser})
		}
		pr.CloseWithError(err)
		done <- err
	}()
	return &snapshotWriter{pw: pw, done: done}, nil
}

type snapshotWriter struct {
	pw   *io.PipeWriter
	done chan error
}

func (s *snapshotWriter) Write(b []byte) (int, error) { return s.pw.Write(b) }
func (s *snapshotWriter) Close() error {
	s.pw.Close()
	return <-s.done
}

// confSettings reads the settings of a copied sluice.conf, unquoted, without
// those that name the old server (port, addresses, socket directory) or its
// upstream.
func confSettings(dir string) (map[string]string, error) {
	b, err := os.ReadFile(filepath.Join(dir, "sluice.conf"))
	if errors.Is(err, os.ErrNotExist) {
		return map[string]string{}, nil
	}
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			continue
		}
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		switch k {
		case "port", "listen_addresses", "unix_socket_directories", "primary_conninfo", "primary_slot_name":
			continue
		}
		if len(v) >= 2 && v[0] == '\'' && v[len(v)-1] == '\'' {
			v = strings.ReplaceAll(v[1:len(v)-1], "''", "'")
		}
		out[k] = v
	}
	return out, nil
}

// StartStandby configures the received directory and starts it: as a
// streaming standby of primaryConnInfo on slot, or (primaryConnInfo == "")
// as a primary. A running server is left alone, except that a running
// standby whose primary_conninfo differs (the source's WAL relay moved when
// its agent restarted) gets the new one (ALTER SYSTEM and a reload: the
// walreceiver reconnects).
func (t *LocalTarget) StartStandby(ctx context.Context, m Record, primaryConnInfo, slot string) error {
	c, err := t.cluster(m)
	if err != nil {
		return err
	}
	if c.Running() {
		if err := t.discardWAL(m); err != nil { // started before: it streams from the slot
			return fmt.Errorf("migration: start standby: %w", err)
		}
		if primaryConnInfo == "" {
			return nil
		}
		err := t.withConn(ctx, m, func(conn *pgx.Conn) error {
			var cur string
			var standby bool
			if err := conn.QueryRow(ctx, "SELECT current_setting('primary_conninfo'), pg_is_in_recovery()").Scan(&cur, &standby); err != nil {
				return fmt.Errorf("migration: start standby: %w", err)
			}
			if !standby || cur == primaryConnInfo {
				return nil
			}
			lit := "'" + strings.ReplaceAll(primaryConnInfo, "'", "''") + "'"
			if _, err := conn.Exec(ctx, "ALTER SYSTEM SET primary_conninfo = "+lit); err != nil {
				return fmt.Errorf("migration: start standby: new primary_conninfo: %w", err)
			}
			if _, err := conn.Exec(ctx, "SELECT pg_reload_conf()"); err != nil {
				return fmt.Errorf("migration: start standby: reload: %w", err)
			}
			return nil
		})
		if err == nil || !notYetConsistent(err) {
			return err
		}
		// Up but not yet consistent (a resumed migration): it refuses
		// connections, so it cannot be told its new primary over SQL, and
		// without one it never gets consistent. Restart it configured anew.
		if err := c.Stop(ctx, pgcluster.Fast); err != nil {
			return fmt.Errorf("migration: start standby: restart: %w", err)
		}
	}
	if segs, n, err := t.adoptWAL(m); err != nil {
		return fmt.Errorf("migration: start standby: %w", err)
	} else if segs > 0 && t.OnAdoptWAL != nil {
		t.OnAdoptWAL(m, segs, n)
	}
	// An earlier resume may have set primary_conninfo with ALTER SYSTEM,
	// which would override the one written below.
	if err := dropAutoConf(c, "primary_conninfo"); err != nil {
		return fmt.Errorf("migration: start standby: %w", err)
	}
	settings, err := confSettings(m.TargetDir)
	if err != nil {
		return fmt.Errorf("migration: start standby: %w", err)
	}
	for k, v := range t.Settings {
		settings[k] = v
	}
	os.Remove(filepath.Join(m.TargetDir, "standby.signal"))
	if primaryConnInfo != "" {
		// After a stop fence the walreceiver has lost its primary; the startup
		// process then sleeps wal_retrieve_retry_interval (default 5 s) between
		// attempts, and a promotion waits for that sleep. Keep it short.
		if _, ok := settings["wal_retrieve_retry_interval"]; !ok {
			settings["wal_retrieve_retry_interval"] = StandbyRetryInterval
		}
		settings["primary_conninfo"] = primaryConnInfo
		settings["primary_slot_name"] = slot
		if err := c.WriteFile("standby.signal", ""); err != nil {
			return fmt.Errorf("migration: start standby: %w", err)
		}
	}
	if err := c.Configure(settings); err != nil {
		return fmt.Errorf("migration: start standby: %w", err)
	}
	for _, d := range []string{"log", "pg_wal", "pg_replslot"} {
		p := filepath.Join(m.TargetDir, d)
		os.MkdirAll(p, 0o700)
		t.chown(p)
	}
	start := c.Start
	if primaryConnInfo != "" {
		// A streaming standby: up is enough. It accepts connections once
		// consistent (the WAL of the snapshot's span replayed); until then
		// Position reports the lag as unknown.
		start = c.StartRecovering
	}
	if err := start(ctx); err != nil {
		return fmt.Errorf("migration: start standby: %w", err)
	}
	return nil
}

// withConn runs f on the persistent connection to m's server (database
// postgres).
func (t *LocalTarget) withConn(ctx context.Context, m Record, f func(*pgx.Conn) error) error {
	return t.withDBConn(ctx, m, "postgres", f)
}

// withDBConn runs f on the persistent connection to database db of m's
// server. Connections stay open until closeConn: on a small server a new
// session costs a backend fork and a cold catalog cache (WARM used to open
// one per batch of blocks, ten a second on the testbed).
func (t *LocalTarget) withDBConn(ctx context.Context, m Record, db string, f func(*pgx.Conn) error) error {
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

const positionSQL = "SELECT coalesce(pg_last_wal_receive_lsn(), '0/0')::text, coalesce(pg_last_wal_replay_lsn(), '0/0')::text, pg_is_in_recovery()"

func scanPosition(row pgx.Row) (Position, error) {
	var p Position
	var rcv, rpl string
	if err := row.Scan(&rcv, &rpl, &p.InRecovery); err != nil {
		return p, err
	}
	var err error
	if p.Receive, err = ParseLSN(rcv); err != nil {
		return p, err
	}
	p.Replay, err = ParseLSN(rpl)
	return p, err
}

// Position reports the standby's receive and replay LSNs.
// A standby that is not yet consistent reports InRecovery and no LSNs; after
// it refused a connection, Position does not ask again for ConsistencyRetry.
func (t *LocalTarget) Position(ctx context.Context, m Record) (Position, error) {
	t.mu.Lock()
	wait := time.Now().Before(t.notReady[m.ID])
	t.mu.Unlock()
	if wait {
		return Position{InRecovery: true}, nil
	}
	var p Position
	err := t.withConn(ctx, m, func(c *pgx.Conn) error {
		var err error
		p, err = scanPosition(c.QueryRow(ctx, positionSQL))
		return err
	})
	if err != nil {
		if notYetConsistent(err) {
			t.mu.Lock()
			if t.notReady == nil {
				t.notReady = map[string]time.Time{}
			}
			t.notReady[m.ID] = time.Now().Add(ConsistencyRetry)
			t.mu.Unlock()
			return Position{InRecovery: true}, nil
		}
		return p, fmt.Errorf("migration: target position: %w", err)
	}
	return p, nil
}

// notYetConsistent reports whether err is a standby refusing connections
// because it has not reached a consistent state yet (SQLSTATE 57P03,
// "the database system is not yet accepting connections").
func notYetConsistent(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "57P03"
}

// WaitReplay polls the replay LSN every PollInterval until it reaches lsn.
func (t *LocalTarget) WaitReplay(ctx context.Context, m Record, lsn LSN) (LSN, error) {
	var got LSN
	err := t.withConn(ctx, m, func(c *pgx.Conn) error {
		for {
			p, err := scanPosition(c.QueryRow(ctx, positionSQL))
			if err != nil {
				return err
			}
			got = p.Replay
			if got >= lsn {
				return nil
			}
			if !p.InRecovery {
				return fmt.Errorf("target is not in recovery at %s", got)
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(t.poll()):
			}
		}
	})
	if err != nil {
		return got, fmt.Errorf("migration: wait replay %s (at %s): %w", lsn, got, err)
	}
	return got, nil
}

// run is one contiguous range of blocks of one relation fork.
type run struct {
	db, ts, fn  uint32
	fork        int16
	first, last uint32
}

// mergeRuns sorts blocks and merges them into contiguous runs.
func mergeRuns(blocks []Block) []run {
	bs := append([]Block(nil), blocks...)
	sort.Slice(bs, func(i, j int) bool {
		a, b := bs[i], bs[j]
		if a.Database != b.Database {
			return a.Database < b.Database
		}
		if a.Tablespace != b.Tablespace {
			return a.Tablespace < b.Tablespace
		}
		if a.Filenode != b.Filenode {
			return a.Filenode < b.Filenode
		}
		if a.Fork != b.Fork {
			return a.Fork < b.Fork
		}
		return a.Block < b.Block
	})
	var out []run
	for _, b := range bs {
		if n := len(out); n > 0 {
			r := &out[n-1]
			if r.db == b.Database && r.ts == b.Tablespace && r.fn == b.Filenode && r.fork == b.Fork && b.Block <= r.last+1 {
				r.last = max(r.last, b.Block)
				continue
			}
		}
		out = append(out, run{b.Database, b.Tablespace, b.Filenode, b.Fork, b.Block, b.Block})
	}
	return out
}

var forkNames = map[int16]string{0: "main", 1: "fsm", 2: "vm", 3: "init"}

// Prewarm maps each block's filenode to its relation in its database
// (pg_filenode_relation) and loads contiguous runs with pg_prewarm(…,
// 'buffer', fork, first, last). Blocks of relations that no longer exist, or
// beyond a relation's end, are skipped. pg_prewarm must exist in each database
// (LocalSource.BufferBlocks creates it on the source; it waits up to 10 s for
// the standby to replay that).
func (t *LocalTarget) Prewarm(ctx context.Context, m Record, blocks []Block) error {
	runs := mergeRuns(blocks)
	names := map[uint32]string{}
	err := t.withConn(ctx, m, func(conn *pgx.Conn) error {
		rows, err := conn.Query(ctx, "SELECT oid::int8, datname FROM pg_database WHERE datallowconn")
		if err != nil {
			return err
		}
		for rows.Next() {
			var oid int64
			var n string
			if err := rows.Scan(&oid, &n); err != nil {
				return err
			}
			names[uint32(oid)] = n
		}
		return rows.Err()
	})
	if err != nil {
		return fmt.Errorf("migration: prewarm: %w", err)
	}
	for i := 0; i < len(runs); {
		j := i
		for j < len(runs) && runs[j].db == runs[i].db {
			j++
		}
		name, ok := names[runs[i].db]
		if ok {
			batch := runs[i:j]
			if err := t.withDBConn(ctx, m, name, func(conn *pgx.Conn) error { return prewarmDB(ctx, conn, batch) }); err != nil {
				return fmt.Errorf("migration: prewarm %s: %w", name, err)
			}
		}
		i = j
	}
	return nil
}

func prewarmDB(ctx context.Context, conn *pgx.Conn, runs []run) error {
	for i := 0; ; i++ {
		var ok bool
		if err := conn.QueryRow(ctx, "SELECT to_regproc('pg_prewarm') IS NOT NULL").Scan(&ok); err != nil {
			return err
		}
		if ok {
			break
		}
		if i > 1000 {
			return errors.New("extension pg_prewarm not replayed after 10 s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	for _, r := range runs {
		// Clamp to the relation's current size; skip vanished relations.
		_, err := conn.Exec(ctx, `SELECT pg_prewarm(rel, 'buffer', $3, $4, least($5::int8, nb - 1))
			FROM (SELECT rel, pg_relation_size(rel, $3) / current_setting('block_size')::int8 AS nb
			      FROM pg_filenode_relation($1::oid, $2::oid) AS rel WHERE rel IS NOT NULL) s
			WHERE nb > $4::int8`,
			int64(r.ts), int64(r.fn), forkNames[r.fork], int64(r.first), int64(r.last))
		if err != nil {
			return err
		}
	}
	return nil
}

// Promote ends recovery with pg_promote(wait => false) over the persistent
// connection (no pg_ctl process, no 100 ms polling inside pg_promote) and
// polls pg_is_in_recovery() every PollInterval until it is false. A server
// already out of recovery returns at once.
func (t *LocalTarget) Promote(ctx context.Context, m Record) error {
	err := t.withConn(ctx, m, func(c *pgx.Conn) error {
		var rec bool
		if err := c.QueryRow(ctx, "SELECT pg_is_in_recovery()").Scan(&rec); err != nil {
			return err
		}
		if !rec {
			return nil
		}
		if _, err := c.Exec(ctx, "SELECT pg_promote(false)"); err != nil {
			return err
		}
		for rec {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(t.poll()):
			}
			if err := c.QueryRow(ctx, "SELECT pg_is_in_recovery()").Scan(&rec); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("migration: promote: %w", err)
	}
	return nil
}

// Addr is host:port of the tenant on this target.
func (t *LocalTarget) Addr(m Record) string {
	c, err := t.cluster(m)
	if err != nil {
		return ""
	}
	return c.Addr()
}

// Abort stops the target's postmaster (immediate), removes its directory and
// forgets the port. A no-op if nothing is there.
func (t *LocalTarget) Abort(ctx context.Context, m Record) error {
	t.closeConn(m.ID)
	dir := m.TargetDir
	if dir == "" {
		dir = t.dirFor(m)
	}
	if err := t.discardWAL(Record{ID: m.ID, TargetDir: dir}); err != nil {
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
func (t *LocalTarget) Commit(ctx context.Context, m Record) error {
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

// dropAutoConf removes setting key from c's postgresql.auto.conf (ALTER
// SYSTEM's file), if there.
func dropAutoConf(c *pgcluster.Cluster, key string) error {
	b, err := os.ReadFile(filepath.Join(c.Dir, "postgresql.auto.conf"))
	if err != nil {
		return nil
	}
	var out []string
	changed := false
	for _, line := range strings.Split(string(b), "\n") {
		if name, _, ok := strings.Cut(strings.TrimSpace(line), "="); ok && strings.TrimSpace(name) == key {
			changed = true
			continue
		}
		out = append(out, line)
	}
	if !changed {
		return nil
	}
	return c.WriteFile("postgresql.auto.conf", strings.Join(out, "\n"))
}
