package migration

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/sluicedb/sluice/pgcluster"
	"github.com/sluicedb/sluice/snapshot"
	"golang.org/x/sys/unix"
)

// LocalSource is the Source of a tenant whose postmaster runs on this host.
// It keeps one persistent connection to the tenant (over its Unix socket, which
// the read-only fence leaves open) so that HANDOVER pays no connection set-up.
// Safe for concurrent use.
type LocalSource struct {
	C *pgcluster.Cluster
	// RetireGrace is how long Retire keeps the old data directory (renamed to
	// <dir>.retired-<unix time>) before purging it; 0 keeps it until
	// PurgeDelay. The purge timer lives in this process only: RemoveRetired
	// sweeps after a restart.
	RetireGrace time.Duration
	// ReplicationUser is the role a standby streams as (default: the superuser).
	ReplicationUser string
	// Prefetch, if set, paces the snapshot's reads of the data files into
	// its read-ahead buffer (bytes/s read from disk); nil = as fast as the
	// buffer drains, which starts a snapshot with a burst of up to
	// transfer.DefaultReadAhead bytes at the disk's full speed. The agent
	// keeps it at the send rate the controller or the operator chose
	// (control.Decision.Prefetch).
	Prefetch Limiter
	// Checkpoint is how the snapshot's pg_backup_start takes its
	// checkpoint: "" or "fast" (at once), "spread" (the server's own
	// pacing, minutes by default), or a pace such as "3s"
	// (snapshot.ParseCheckpoint, snapshot.SendOptions.CheckpointPace).
	Checkpoint string
	// OnBackupStart, if set, is called as a snapshot's backup starts:
	// before pg_backup_start with started false and the checkpoint asked
	// for ("fast", "spread", "paced 3s"), and once it returned with started
	// true and how the checkpoint was taken (snapshot.Result.Checkpoint).
	// Between the two calls the source is checkpointing: no byte moves.
	OnBackupStart func(started bool, checkpoint string)
	// WALRate, if set, makes the standby stream through a WALRelay paced at
	// WALRate() bytes/s (the migration's send rate) instead of connecting
	// to the postmaster directly.
	WALRate func() float64
	// Log, if set, gets one line per fence with the time each of its steps
	// took (the fence is the largest step of a handover's freeze); nil = none.
	Log *slog.Logger

	mu    sync.Mutex
	conn  *pgx.Conn
	relay *WALRelay
	// relayedBefore is what relays closed before (Close, Retire) passed.
	relayedBefore int64
	early         bool // FenceEarly is in place: Fence need not reload
	// late is closed when the fence's completion after an early fence
	// (fenceLate) has finished; nil when none was started.
	late chan struct{}
	// purgeAfter and cacheDropAfter, when > 0, replace PurgeDelay and
	// WritebackDelay in Retire (tests).
	purgeAfter, cacheDropAfter time.Duration
}

// NewLocalSource returns the Source for cluster c.
func NewLocalSource(c *pgcluster.Cluster) *LocalSource { return &LocalSource{C: c} }

var _ Source = (*LocalSource)(nil)

// socketConnString connects over the cluster's Unix socket (in its data
// directory), as the superuser, to database db.
func socketConnString(c *pgcluster.Cluster, db string) string {
	return fmt.Sprintf("host=%s port=%d user=%s dbname=%s sslmode=disable", c.Dir, c.Port, c.Options().SuperUser, db)
}

// withConn runs f on the persistent connection, (re)opening it if needed. A
// failed f closes the connection so the next call reconnects.
func (s *LocalSource) withConn(ctx context.Context, f func(*pgx.Conn) error) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.conn == nil || s.conn.IsClosed() {
		c, err := pgx.Connect(ctx, socketConnString(s.C, "postgres"))
		if err != nil {
			return err
		}
		s.conn = c
	}
	err := f(s.conn)
	if err != nil && (s.conn.IsClosed() || s.conn.PgConn().IsBusy() || ctx.Err() != nil || isConnErr(err)) {
		s.conn.Close(context.Background())
		s.conn = nil
	}
	return err
}

func isConnErr(err error) bool {
	var pe interface{ SQLState() string }
	if errors.As(err, &pe) {
		st := pe.SQLState()
		return strings.HasPrefix(st, "08") || strings.HasPrefix(st, "57") // connection / operator intervention
	}
	return true
}

// Close closes the persistent connection.
func (s *LocalSource) Close() error {
	s.waitLate()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.conn != nil {
		s.conn.Close(context.Background())
		s.conn = nil
	}
	if s.relay != nil {
		s.relay.Close()
		s.relayedBefore += s.relay.Relayed()
		s.relay = nil
	}
	return nil
}

// Info reads the server version and wal_level and sizes the data directory.
func (s *LocalSource) Info(ctx context.Context) (SourceInfo, error) {
	var si SourceInfo
	err := s.withConn(ctx, func(c *pgx.Conn) error {
		var v int
		if err := c.QueryRow(ctx, "SELECT current_setting('server_version_num')::int, current_setting('wal_level')").Scan(&v, &si.WALLevel); err != nil {
			return err
		}
		si.Major = v / 10000
		return nil
	})
	if err != nil {
		return si, fmt.Errorf("migration: source info: %w", err)
	}
	if si.DataBytes, err = dirSize(s.C.Dir, hotEmptyDirs); err != nil {
		return si, fmt.Errorf("migration: source info: %w", err)
	}
	return si, nil
}

// Addr is the tenant's host:port.
func (s *LocalSource) Addr() string { return s.C.Addr() }

// PrimaryConnInfo is the conninfo a standby on another host uses (TCP):
// the postmaster's address, or with WALRate set, a WALRelay's in front of
// it (started on first use, stopped by Close; should it fail to listen, the
// standby connects directly, unthrottled).
func (s *LocalSource) PrimaryConnInfo() string {
	u := s.ReplicationUser
	if u == "" {
		u = s.C.Options().SuperUser
	}
	host, port := s.C.Host, s.C.Port
	if s.WALRate != nil {
		s.mu.Lock()
		if s.relay == nil {
			s.relay, _ = StartWALRelay(s.C.Host, s.C.Addr(), s.WALRate)
		}
		if s.relay != nil {
			_, port = s.relay.Addr()
		}
		s.mu.Unlock()
	}
	ci := fmt.Sprintf("host=%s port=%d user=%s application_name=sluice", host, port, u)
	if pw := s.C.Options().Password; pw != "" {
		ci += " password=" + pw
	}
	return ci
}

// UnpaceWAL lifts (on) or restores (off) the WAL relay's pacing: see
// WALRelay.Unpace. A no-op without a relay.
func (s *LocalSource) UnpaceWAL(on bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.relay != nil {
		s.relay.Unpace(on)
	}
}

// WALRelayed is how many bytes of WAL the relay has passed to the standby
// so far, including a relay Close or Retire stopped; 0 without a relay.
func (s *LocalSource) WALRelayed() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.relay == nil {
		return s.relayedBefore
	}
	return s.relayedBefore + s.relay.Relayed()
}

// CreateSlot drops a slot of that name if any, then creates it reserving WAL now.
func (s *LocalSource) CreateSlot(ctx context.Context, name string) (LSN, error) {
	var lsn string
	err := s.withConn(ctx, func(c *pgx.Conn) error {
		if _, err := c.Exec(ctx, "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1 AND NOT active", name); err != nil {
			return err
		}
		return c.QueryRow(ctx, "SELECT lsn::text FROM pg_create_physical_replication_slot($1, true)", name).Scan(&lsn)
	})
	if err != nil {
		return 0, fmt.Errorf("migration: create slot %s: %w", name, err)
	}
	return ParseLSN(lsn)
}

// SlotStatus returns the slot's wal_status ("reserved", "extended",
// "unreserved" or "lost"; "" when there is no such slot). A slot is lost when
// the source removed WAL the slot still needed because it exceeded
// max_slot_wal_keep_size: the standby can never catch up from it.
func (s *LocalSource) SlotStatus(ctx context.Context, name string) (string, error) {
	st, err := s.slotColumn(ctx, name, "wal_status")
	if err != nil {
		return "", fmt.Errorf("migration: slot status %s: %w", name, err)
	}
	return st, nil
}

// SlotRestartLSN returns the slot's restart_lsn: for the standby's physical
// slot, the WAL position up to which the standby has confirmed receiving
// (flushing) — known while it streams, before it reaches a consistent state
// and accepts the queries Position needs. 0 when the slot or its position is
// missing.
func (s *LocalSource) SlotRestartLSN(ctx context.Context, name string) (LSN, error) {
	l, err := s.slotColumn(ctx, name, "restart_lsn")
	if err != nil {
		return 0, fmt.Errorf("migration: slot restart lsn %s: %w", name, err)
	}
	if l == "" {
		return 0, nil
	}
	return ParseLSN(l)
}

// slotColumn reads column col of slot name in pg_replication_slots as text;
// "" when the slot or the value is missing. col is one of this file's
// constants, never input.
func (s *LocalSource) slotColumn(ctx context.Context, name, col string) (string, error) {
	var v string
	err := s.withConn(ctx, func(c *pgx.Conn) error {
		err := c.QueryRow(ctx, "SELECT coalesce("+col+"::text, '') FROM pg_replication_slots WHERE slot_name = $1", name).Scan(&v)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		return err
	})
	return v, err
}

// DropSlot drops the slot if it exists; a stopped source has nothing to drop
// from (its directory goes with Retire).
func (s *LocalSource) DropSlot(ctx context.Context, name string) error {
	if !s.C.Running() {
		return nil
	}
	err := s.withConn(ctx, func(c *pgx.Conn) error {
		// A walsender may still hold the slot for a moment after its standby
		// stopped: end it first.
		if _, err := c.Exec(ctx, "SELECT pg_terminate_backend(active_pid, 2000) FROM pg_replication_slots WHERE slot_name = $1 AND active_pid IS NOT NULL", name); err != nil {
			return err
		}
		_, err := c.Exec(ctx, "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1", name)
		return err
	})
	if err != nil {
		return fmt.Errorf("migration: drop slot %s: %w", name, err)
	}
	return nil
}

// SendSnapshot takes an online backup with package snapshot (pg_backup_start
// and pg_backup_stop in one session, pg_basebackup's exclusions, per-file
// checksums, a read-ahead buffer), paced by lim on the wire.
func (s *LocalSource) SendSnapshot(ctx context.Context, w io.Writer, lim Limiter, done func(int64)) (SnapshotInfo, error) {
	var info SnapshotInfo
	prog := &snapshot.Progress{}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	if done != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			t := time.NewTicker(100 * time.Millisecond)
			defer t.Stop()
			for {
				select {
				case <-stop:
					return
				case <-t.C:
					done(prog.BytesSent.Load())
				}
			}
		}()
	}
	opts := snapshot.SendOptions{Label: "sluice migration", Progress: prog}
	opts.Started = func(r snapshot.Result) {
		if s.Log != nil {
			s.Log.Info("snapshot started", "checkpoint", r.Checkpoint, "took", r.StartDuration.Round(time.Millisecond), "start_lsn", r.StartLSN)
		}
		if s.OnBackupStart != nil {
			s.OnBackupStart(true, r.Checkpoint)
		}
	}
	if s.Checkpoint != "" {
		var err error
		if opts.SpreadCheckpoint, opts.CheckpointPace, err = snapshot.ParseCheckpoint(s.Checkpoint); err != nil {
			return info, fmt.Errorf("migration: snapshot: %w", err)
		}
	}
	if s.OnBackupStart != nil {
		s.OnBackupStart(false, snapshot.CheckpointName(opts.SpreadCheckpoint, opts.CheckpointPace))
	}
	if lim != nil {
		opts.Limiter = lim
	}
	if s.Prefetch != nil {
		opts.Prefetch = s.Prefetch
	}
	res, err := snapshot.Send(ctx, s.C, w, opts)
	close(stop)
	wg.Wait()
	info.Bytes, info.Checkpoint, info.StartSeconds = res.Bytes, res.Checkpoint, res.StartDuration.Seconds()
	if err != nil {
		return info, fmt.Errorf("migration: snapshot: %w", err)
	}
	if done != nil {
		done(res.Bytes)
	}
	if info.StartLSN, err = ParseLSN(res.StartLSN); err != nil {
		return info, fmt.Errorf("migration: snapshot: %w", err)
	}
	return info, nil
}

// SendCold streams the stopped source's directory, WAL included.
func (s *LocalSource) SendCold(ctx context.Context, w io.Writer, lim Limiter, done func(int64)) (int64, error) {
	if s.C.Running() {
		return 0, fmt.Errorf("migration: cold copy: source %s is running", s.C.Dir)
	}
	sw := &streamWriter{ctx: ctx, w: w, lim: lim, done: done}
	err := sendDir(ctx, s.C.Dir, sw, coldEmptyDirs, nil)
	return sw.n, err
}

// BufferBlocks lists the source's shared buffers (pg_buffercache) in every
// database, sorted. It creates the pg_buffercache extension in database
// postgres and pg_prewarm in every database that has cached blocks: WAL
// carries them to the standby, which cannot create extensions itself.
func (s *LocalSource) BufferBlocks(ctx context.Context) ([]Block, error) {
	var out []Block
	err := s.withConn(ctx, func(c *pgx.Conn) error {
		if _, err := c.Exec(ctx, "CREATE EXTENSION IF NOT EXISTS pg_buffercache"); err != nil {
			return err
		}
		rows, err := c.Query(ctx, `SELECT reldatabase::int8, reltablespace::int8, relfilenode::int8, relforknumber, relblocknumber::int8
			FROM pg_buffercache WHERE relfilenode IS NOT NULL AND reldatabase <> 0
			ORDER BY 1, 2, 3, 4, 5`)
		if err != nil {
			return err
		}
		for rows.Next() {
			var b Block
			var db, ts, fn, blk int64
			if err := rows.Scan(&db, &ts, &fn, &b.Fork, &blk); err != nil {
				return err
			}
			b.Database, b.Tablespace, b.Filenode, b.Block = uint32(db), uint32(ts), uint32(fn), uint32(blk)
			out = append(out, b)
		}
		if err := rows.Err(); err != nil {
			return err
		}
		var names []string
		rows, err = c.Query(ctx, "SELECT datname FROM pg_database WHERE datallowconn AND oid = ANY($1::oid[])", dbOIDs(out))
		if err != nil {
			return err
		}
		for rows.Next() {
			var n string
			if err := rows.Scan(&n); err != nil {
				return err
			}
			names = append(names, n)
		}
		if err := rows.Err(); err != nil {
			return err
		}
		for _, n := range names {
			dc, err := pgx.Connect(ctx, socketConnString(s.C, n))
			if err != nil {
				return err
			}
			_, err = dc.Exec(ctx, "CREATE EXTENSION IF NOT EXISTS pg_prewarm")
			dc.Close(context.Background())
			if err != nil {
				return fmt.Errorf("database %s: %w", n, err)
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("migration: buffer blocks: %w", err)
	}
	return out, nil
}

func dbOIDs(bs []Block) []int64 {
	var out []int64
	for i, b := range bs {
		if i == 0 || b.Database != bs[i-1].Database {
			out = append(out, int64(b.Database))
		}
	}
	return out
}

// FlushLSN returns pg_current_wal_flush_lsn().
func (s *LocalSource) FlushLSN(ctx context.Context) (LSN, error) {
	var l string
	err := s.withConn(ctx, func(c *pgx.Conn) error {
		return c.QueryRow(ctx, "SELECT pg_current_wal_flush_lsn()::text").Scan(&l)
	})
	if err != nil {
		return 0, fmt.Errorf("migration: flush lsn: %w", err)
	}
	return ParseLSN(l)
}

const unfencedHBA = "pg_hba.conf.sluice-unfenced"

// Fence makes the source refuse writes.
//
// FenceReadOnly: pg_hba.conf keeps only local (Unix socket) and replication
// lines (the original is saved as pg_hba.conf.sluice-unfenced), ALTER SYSTEM
// SET default_transaction_read_only = on, reload; once this session sees the
// new setting the postmaster has reloaded too, so no client can connect over
// TCP any more; then every other client backend is terminated (waiting for
// each to exit); then a tiny synchronous commit of the fencing session flushes
// the WAL, so every acknowledged commit (even one acknowledged before its
// flush, with synchronous_commit = off) is at or below the flush LSN, which is
// returned.
//
// FenceStop: fast shutdown (SIGINT to the postmaster, as pg_ctl stop -m fast)
// and a tight wait for it to exit; the shutdown checkpoint is streamed to the
// standby before the walsender exits. Returns the shutdown checkpoint's LSN
// + 1: a standby that replayed past it has every record.
//
// After FenceEarly (pg_hba.conf already narrowed to the router's addresses)
// the read-only fence skips pg_hba.conf, ALTER SYSTEM and the reload: it
// terminates and flushes, returns, and then brings the source to the same
// end state in the background (fenceLate; Unfence, Retire and Close wait
// for it).
//
// spare (read-only fence only) names client backends a router holds idle
// (IdleHolder): they are neither terminated nor waited for. The router sends
// them nothing before Release and moves their sessions away after a Switch;
// if the migration rolls back they carry on where they were. On a small
// server this is most of the freeze: a backend's exit costs ~2 ms of CPU,
// and terminating 8 held ones on a 0.25-CPU server took ~140 ms
// (docs/benchmarks.md).
func (s *LocalSource) Fence(ctx context.Context, mode FenceMode, spare []int) (LSN, error) {
	switch mode {
	case FenceStop:
		return s.fenceStop(ctx)
	case FenceReadOnly:
		return s.fenceReadOnly(ctx, spare)
	}
	return 0, fmt.Errorf("migration: fence: unknown mode %q", mode)
}

func (s *LocalSource) fenceStop(ctx context.Context) (LSN, error) {
	s.Close()
	pidFile := filepath.Join(s.C.Dir, "postmaster.pid")
	pid, err := s.C.PID()
	if err == nil && syscall.Kill(pid, 0) == nil {
		if err := syscall.Kill(pid, syscall.SIGINT); err != nil {
			return 0, fmt.Errorf("migration: fence stop: %w", err)
		}
		// The postmaster removes postmaster.pid as it exits. (Polling the pid
		// instead would also wait for whoever reaps the zombie.)
		for {
			if _, err := os.Stat(pidFile); errors.Is(err, os.ErrNotExist) {
				break
			}
			if syscall.Kill(pid, 0) != nil {
				break
			}
			select {
			case <-ctx.Done():
				return 0, fmt.Errorf("migration: fence stop: %w", ctx.Err())
			case <-time.After(time.Millisecond):
			}
		}
	}
	ckpt, state, err := readControl(s.C.Dir)
	if err != nil {
		return 0, fmt.Errorf("migration: fence stop: %w", err)
	}
	if state != dbShutdowned {
		return 0, fmt.Errorf("migration: fence stop: source not cleanly shut down (pg_control state %d)", state)
	}
	return ckpt + 1, nil
}

// pg_control's DBState for a clean shutdown (DB_SHUTDOWNED).
const dbShutdowned = 1

// readControl reads the latest checkpoint location and the cluster state from
// global/pg_control (PostgreSQL 15 layout: system_identifier u64,
// pg_control_version u32, catalog_version_no u32, state i32, pad, time i64,
// checkPoint u64 — little-endian on this host).
func readControl(dir string) (LSN, int, error) {
	b, err := os.ReadFile(filepath.Join(dir, "global", "pg_control"))
	if err != nil {
		return 0, 0, err
	}
	if len(b) < 40 {
		return 0, 0, errors.New("pg_control too short")
	}
	if v := binary.LittleEndian.Uint32(b[8:]); v != 1300 {
		return 0, 0, fmt.Errorf("pg_control version %d, want 1300 (PostgreSQL 15)", v)
	}
	return LSN(binary.LittleEndian.Uint64(b[32:])), int(int32(binary.LittleEndian.Uint32(b[16:]))), nil
}

// FenceEarly does, ahead of the handover, the part of the read-only fence
// that needs a configuration reload, which on a small server is most of the
// fence's time (every process of the server re-reads its configuration).
// admit names the router's own backends (pids; BackendLister): pg_hba.conf
// keeps its local and replication lines and, for TCP, admits only the
// addresses those backends connect from, each under the lines that applied
// to it (admitHBA); then it reloads and waits until this session has
// re-read. Nothing else changes: every session keeps working, and the
// router's new sessions still connect. Fence then only terminates the
// backends the router does not hold idle and flushes the WAL: the router
// holds its own sessions, and no one else can connect over TCP.
//
// It fails, changing nothing, when none of admit is a backend of the source
// (a router with no session there: its address is unknown). A router
// instance that had no session on the source at WARM is refused from then
// until a rollback.
//
// What it gives up against Fence alone: from the flush until the reload
// that Fence starts right after it (fenceLate) takes effect, ~20–30 ms on a
// quarter core, a client that bypasses the router could still connect from
// the router's own address, or over the Unix socket without the read-only
// default. An error leaves Fence to do everything (pg_hba.conf may already
// be narrowed; Fence and Unfence work from the saved original).
func (s *LocalSource) FenceEarly(ctx context.Context, admit []int) error {
	start := time.Now()
	err := s.fenceEarly(ctx, admit)
	if s.Log != nil {
		if err != nil {
			s.Log.Warn("early fence failed; the handover's fence will reload", "err", err)
		} else {
			s.Log.Info("source fenced early (pg_hba.conf admits only the router's addresses)", "took", time.Since(start).Round(100*time.Microsecond))
		}
	}
	return err
}

func (s *LocalSource) fenceEarly(ctx context.Context, admit []int) error {
	if admit == nil {
		admit = []int{}
	}
	err := s.withConn(ctx, func(c *pgx.Conn) error {
		var addrs []netip.Addr
		// One row per admitted backend that still exists; its address, or
		// NULL for the Unix socket (whose lines stay anyway).
		rows, err := c.Query(ctx, "SELECT host(client_addr) FROM pg_stat_activity WHERE pid = ANY($1::int[])", admit)
		if err != nil {
			return err
		}
		found := 0
		for rows.Next() {
			var h *string
			if err := rows.Scan(&h); err != nil {
				rows.Close()
				return err
			}
			found++
			if h == nil {
				continue
			}
			a, err := netip.ParseAddr(*h)
			if err != nil {
				rows.Close()
				return fmt.Errorf("client address %q: %w", *h, err)
			}
			if a = a.Unmap(); !slices.Contains(addrs, a) {
				addrs = append(addrs, a)
			}
		}
		if err := rows.Err(); err != nil {
			return err
		}
		if found == 0 {
			// Nothing tells where the router connects from: narrowing now
			// would refuse its next session.
			return errors.New("none of the router's backends is on the source")
		}
		orig, err := s.originalHBA()
		if err != nil {
			return err
		}
		narrowed, err := admitHBA(orig, addrs)
		if err != nil {
			return err
		}
		if err := s.C.WriteFile("pg_hba.conf", narrowed); err != nil {
			return err
		}
		var before time.Time
		if err := c.QueryRow(ctx, "SELECT pg_conf_load_time()").Scan(&before); err != nil {
			return err
		}
		if _, err := c.Exec(ctx, "SELECT pg_reload_conf()"); err != nil {
			return err
		}
		for i := 0; ; i++ {
			var at time.Time
			if err := c.QueryRow(ctx, "SELECT pg_conf_load_time()").Scan(&at); err != nil {
				return err
			}
			if at.After(before) {
				break
			}
			if i > 5000 {
				return errors.New("configuration reload not seen after 5 s")
			}
			time.Sleep(time.Millisecond)
		}
		return nil
	})
	if err != nil {
		return err
	}
	s.mu.Lock() // (withConn holds it while its function runs)
	s.early = true
	s.mu.Unlock()
	return nil
}

func (s *LocalSource) fenceReadOnly(ctx context.Context, spare []int) (LSN, error) {
	s.mu.Lock()
	early := s.early
	s.mu.Unlock()
	var steps []any // step name, time it took: for Log
	last := time.Now()
	mark := func(step string) {
		now := time.Now()
		steps = append(steps, step, now.Sub(last).Round(100*time.Microsecond))
		last = now
	}
	if spare == nil {
		spare = []int{} // "pid <> ALL(NULL)" would match nothing
	}
	if !early {
		orig, err := s.originalHBA()
		if err != nil {
			return 0, fmt.Errorf("migration: fence: %w", err)
		}
		if err := s.C.WriteFile("pg_hba.conf", fencedHBA(orig)); err != nil {
			return 0, fmt.Errorf("migration: fence: %w", err)
		}
		mark("hba")
	}
	var lsn string
	err := s.withConn(ctx, func(c *pgx.Conn) error {
		mark("connect")
		if !early {
			if err := readOnlyReload(ctx, c, mark); err != nil {
				return err
			}
			mark("reload")
		}
		// Signal every client backend at once, then poll until they are gone
		// (pg_terminate_backend's own wait polls only every 100 ms).
		victims, err := terminateClients(ctx, c, spare)
		if err != nil {
			return err
		}
		for i := 0; ; i++ {
			var n int
			if err := c.QueryRow(ctx, countOthers, spare).Scan(&n); err != nil {
				return err
			}
			if n == 0 {
				break
			}
			if i > 5000 {
				return fmt.Errorf("%d client backends survive termination after 5 s", n)
			}
			if i%100 == 99 { // late arrivals (connected just before the reload)
				if _, err := c.Exec(ctx, terminateOthers, spare); err != nil {
					return err
				}
			}
			time.Sleep(time.Millisecond)
		}
		mark("terminate")
		steps = append(steps, "terminated", victims)
		// Flush WAL up to here: a tiny synchronous commit of our own flushes
		// every earlier commit record too, including those of clients that
		// were acknowledged before their flush (synchronous_commit = off).
		// The transaction must write WAL (a transactional logical message),
		// or PostgreSQL commits it without a flush.
		if _, err := c.Exec(ctx, "BEGIN READ WRITE; SET LOCAL synchronous_commit = on; SELECT pg_logical_emit_message(true, 'sluice', 'fence'); COMMIT"); err != nil {
			return err
		}
		err = c.QueryRow(ctx, "SELECT pg_current_wal_flush_lsn()::text").Scan(&lsn)
		mark("flush")
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("migration: fence read-only: %w", err)
	}
	if s.Log != nil {
		msg := "source fenced (read-only); time per step"
		if early {
			msg = "source fenced (read-only, pg_hba.conf narrowed before the hold); time per step"
		}
		s.Log.Info(msg, steps...)
	}
	if early {
		// Out of the freeze, bring the source to the full fence's state:
		// no TCP at all but replication, new sessions read-only.
		done := make(chan struct{})
		s.mu.Lock()
		s.late = done
		s.mu.Unlock()
		go func() {
			defer close(done)
			s.fenceLate(context.Background(), spare)
		}()
	}
	return ParseLSN(lsn)
}

// fenceLate completes a fence that followed FenceEarly: pg_hba.conf keeps
// only the local and replication lines, ALTER SYSTEM SET
// default_transaction_read_only = on, reload, and once the reload is seen
// it terminates any client backend (but the spared ones) that connected
// meanwhile. It runs while the target replays and promotes (the source's
// part of the freeze is over); the reload takes effect ~20–30 ms later on
// a quarter core. Until then a client that bypasses the router could still
// connect from the router's own address, or over the Unix socket without
// the read-only default; such late arrivals are logged as a warning (what
// they wrote after the fence's flush is not on the target).
func (s *LocalSource) fenceLate(ctx context.Context, spare []int) {
	start := time.Now()
	var late []string
	err := func() error {
		orig, err := s.originalHBA()
		if err != nil {
			return err
		}
		if err := s.C.WriteFile("pg_hba.conf", fencedHBA(orig)); err != nil {
			return err
		}
		return s.withConn(ctx, func(c *pgx.Conn) error {
			if err := readOnlyReload(ctx, c, nil); err != nil {
				return err
			}
			late, err = terminateClients(ctx, c, spare)
			return err
		})
	}()
	if s.Log == nil {
		return
	}
	switch {
	case err != nil:
		s.Log.Warn("completing the fence after the early fence failed", "err", err)
	case len(late) > 0:
		s.Log.Warn("clients connected to the source between the fence's flush and its completion; terminated (their writes after the flush are not on the target)", "terminated", late)
	default:
		s.Log.Info("fence completed after the freeze's part (pg_hba.conf local and replication only, read-only default)", "took", time.Since(start).Round(100*time.Microsecond))
	}
}

// waitLate waits for a fenceLate in progress.
func (s *LocalSource) waitLate() {
	s.mu.Lock()
	late := s.late
	s.mu.Unlock()
	if late != nil {
		<-late
	}
}

// originalHBA returns the source's own pg_hba.conf: the copy a fence saved
// (pg_hba.conf.sluice-unfenced, which Unfence restores), saving it first if
// no fence has yet.
func (s *LocalSource) originalHBA() (string, error) {
	saved := filepath.Join(s.C.Dir, unfencedHBA)
	if _, err := os.Stat(saved); errors.Is(err, os.ErrNotExist) {
		orig, err := os.ReadFile(filepath.Join(s.C.Dir, "pg_hba.conf"))
		if err != nil {
			return "", err
		}
		if err := s.C.WriteFile(unfencedHBA, string(orig)); err != nil {
			return "", err
		}
	}
	orig, err := os.ReadFile(saved)
	return string(orig), err
}

// readOnlyReload sets default_transaction_read_only = on with ALTER SYSTEM
// (telling mark "alter_system", if mark is not nil), reloads the
// configuration, and returns once session c sees the new setting; the
// postmaster, which reloads first, has then reloaded pg_hba.conf too.
func readOnlyReload(ctx context.Context, c *pgx.Conn, mark func(string)) error {
	if _, err := c.Exec(ctx, "ALTER SYSTEM SET default_transaction_read_only = on"); err != nil {
		return err
	}
	if mark != nil {
		mark("alter_system")
	}
	if _, err := c.Exec(ctx, "SELECT pg_reload_conf()"); err != nil {
		return err
	}
	for i := 0; ; i++ {
		var ro string
		if err := c.QueryRow(ctx, "SHOW default_transaction_read_only").Scan(&ro); err != nil {
			return err
		}
		if ro == "on" {
			return nil
		}
		if i > 5000 {
			return errors.New("configuration reload not seen after 5 s")
		}
		time.Sleep(time.Millisecond)
	}
}

// terminateClients signals every client backend but c's own and spare's to
// terminate, without waiting, and names them (application(address)).
func terminateClients(ctx context.Context, c *pgx.Conn, spare []int) ([]string, error) {
	rows, err := c.Query(ctx, terminateOthers, spare)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

// The read-only fence's queries on the other client backends: all but the
// fencing session's own and the spared ones ($1, int[]).
const (
	otherClients    = "FROM pg_stat_activity WHERE backend_type = 'client backend' AND pid <> pg_backend_pid() AND pid <> ALL($1::int[])"
	terminateOthers = "SELECT format('%s(%s)', coalesce(nullif(application_name, ''), '-'), coalesce(host(client_addr), 'local')) FROM (SELECT pid, application_name, client_addr, pg_terminate_backend(pid) " + otherClients + ") t"
	countOthers     = "SELECT count(*) " + otherClients
)

// Unfence restarts a stopped source, or lifts a read-only fence: restores
// pg_hba.conf, resets default_transaction_read_only, reloads.
func (s *LocalSource) Unfence(ctx context.Context) error {
	s.waitLate()
	s.mu.Lock()
	s.early, s.late = false, nil
	s.mu.Unlock()
	saved := filepath.Join(s.C.Dir, unfencedHBA)
	orig, rerr := os.ReadFile(saved)
	if rerr == nil {
		if err := s.C.WriteFile("pg_hba.conf", string(orig)); err != nil {
			return fmt.Errorf("migration: unfence: %w", err)
		}
	}
	if !s.C.Running() {
		// A stopped source's read-only fence: ALTER SYSTEM RESET needs a
		// running server, so edit postgresql.auto.conf.
		if err := dropAutoConf(s.C, "default_transaction_read_only"); err != nil {
			return fmt.Errorf("migration: unfence: %w", err)
		}
		if err := s.C.Start(ctx); err != nil {
			return fmt.Errorf("migration: unfence: %w", err)
		}
	} else {
		err := s.withConn(ctx, func(c *pgx.Conn) error {
			if _, err := c.Exec(ctx, "ALTER SYSTEM RESET default_transaction_read_only"); err != nil {
				return err
			}
			_, err := c.Exec(ctx, "SELECT pg_reload_conf()")
			return err
		})
		if err != nil {
			return fmt.Errorf("migration: unfence: %w", err)
		}
	}
	if rerr == nil {
		os.Remove(saved)
	}
	return nil
}

// Retire stops the source for good, renames its data directory to
// DIR.retired-UNIXTIME and purges that copy (Purge: paced, in the
// background) once RetireGrace has passed, and no sooner than PurgeDelay:
// not inside the handover. With a grace longer than WritebackDelay the copy's
// page cache is dropped once the kernel has written it back (dropCache).
//
// The stop is immediate: no shutdown checkpoint. Retire runs after the
// release, when the target already serves the tenant, and a fast shutdown's
// checkpoint (every dirty buffer written and fsynced) competes for the disk
// with the new primary's first WAL writes and segment fsyncs just when its
// clients arrive with the freeze's backlog. Nothing is lost: the fence
// flushed the source's WAL, the target replayed all of it, and nothing was
// written since; a copy kept for its grace recovers from its WAL if it is
// ever started.
func (s *LocalSource) Retire(ctx context.Context) error {
	s.Close()
	start := time.Now()
	if err := s.C.Stop(ctx, pgcluster.Immediate); err != nil {
		return fmt.Errorf("migration: retire: %w", err)
	}
	stopped := time.Now()
	if _, err := os.Stat(s.C.Dir); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	old := s.C.Dir + ".retired-" + strconv.FormatInt(time.Now().Unix(), 10)
	if err := os.Rename(s.C.Dir, old); err != nil {
		return fmt.Errorf("migration: retire: %w", err)
	}
	purgeIn, dropIn := max(s.RetireGrace, PurgeDelay), WritebackDelay()
	if s.purgeAfter > 0 {
		purgeIn = max(s.RetireGrace, s.purgeAfter)
	}
	if s.cacheDropAfter > 0 {
		dropIn = s.cacheDropAfter
	}
	if s.Log != nil {
		s.Log.Info("source retired: stopped, data directory renamed", "dir", old, "stop", stopped.Sub(start).Round(100*time.Microsecond), "purge_in", purgeIn)
	}
	time.AfterFunc(purgeIn, func() {
		began := time.Now()
		n, err := Purge(context.Background(), old, PurgeRate)
		if s.Log != nil {
			if err != nil {
				s.Log.Warn("purging a retired data directory failed; the agent's next start removes what is left", "dir", old, "err", err)
			} else {
				s.Log.Info("retired data directory purged", "dir", old, "bytes", n, "took", time.Since(began).Round(time.Millisecond))
			}
		}
	})
	if dropIn < purgeIn {
		time.AfterFunc(dropIn, func() { dropCache(old) })
	}
	return nil
}

// dropCache asks the kernel to drop the page cache of every file under dir
// (POSIX_FADV_DONTNEED). A retired copy kept for its grace period would
// otherwise hold its cached pages — as much as the tenant's hot data — and
// the server's memory (its cgroup's limit, on a shared host) would evict the
// live tenants' pages first. Best effort: errors are ignored.
//
// DONTNEED drops only clean pages, and starts (does not wait for) the
// writeback of dirty ones. Retire therefore calls it once the kernel has
// written the copy's dirty pages back on its own (WritebackDelay), not at
// the handover: there, an fdatasync of every file (as Retire did until
// 2026-11-24) or DONTNEED's writeback put the old copy's dirty pages on the
// disk in one burst, just as the new primary's first commits wait for their
// WAL fsyncs.
func dropCache(dir string) {
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return nil
		}
		if f, err := os.Open(p); err == nil {
			unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED)
			f.Close()
		}
		return nil
	})
}

// WritebackDelay is how long after a file's last write the kernel has
// written its dirty pages back by itself: vm.dirty_expire_centisecs (the age
// at which a dirty page is written) plus two periods of the flusher,
// vm.dirty_writeback_centisecs. Defaults (30 s and 5 s, the kernel's) stand
// in for a value that can't be read or is 0; the result is 40 s then.
func WritebackDelay() time.Duration {
	return writebackDelay(readCentisecs("/proc/sys/vm/dirty_expire_centisecs"), readCentisecs("/proc/sys/vm/dirty_writeback_centisecs"))
}

// writebackDelay is WritebackDelay's rule on the two settings, centiseconds
// (<= 0: unknown or off, the kernel's default used).
func writebackDelay(expire, period int) time.Duration {
	if expire <= 0 {
		expire = 3000
	}
	if period <= 0 {
		period = 500
	}
	return time.Duration(expire+2*period) * 10 * time.Millisecond
}

// readCentisecs reads one integer sysctl file; -1 if it can't.
func readCentisecs(path string) int {
	b, err := os.ReadFile(path)
	if err != nil {
		return -1
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return -1
	}
	return n
}

// RemoveRetired removes directories next to dir that Retire renamed more than
// grace ago (for an agent that restarted while a grace timer was pending).
func RemoveRetired(dir string, grace time.Duration, now time.Time) error {
	ms, err := filepath.Glob(dir + ".retired-*")
	if err != nil {
		return err
	}
	for _, m := range ms {
		ts, err := strconv.ParseInt(m[strings.LastIndex(m, "-")+1:], 10, 64)
		if err != nil || now.Sub(time.Unix(ts, 0)) < grace {
			continue
		}
		if err := os.RemoveAll(m); err != nil {
			return fmt.Errorf("migration: remove retired %s: %w", m, err)
		}
	}
	return nil
}
