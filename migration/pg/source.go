package pg

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/sluicedb/sluice/migration"
	"github.com/sluicedb/sluice/pgcluster"
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
	// ReplicationUser is the role a standby streams as (default: the
	// superuser), with ReplicationPassword (default: the cluster's
	// Options.Password) in PrimaryConnInfo.
	ReplicationUser, ReplicationPassword string
	// Prefetch, if set, paces the snapshot's reads of the data files into
	// its read-ahead buffer (bytes/s read from disk); nil = as fast as the
	// buffer drains, which starts a snapshot with a burst of up to
	// transfer.DefaultReadAhead bytes at the disk's full speed. The agent
	// keeps it at the send rate the controller or the operator chose
	// (control.Decision.Prefetch).
	Prefetch migration.Limiter
	// ReadAhead caps the snapshot's read-ahead buffer, bytes; 0 =
	// transfer.DefaultReadAhead.
	ReadAhead int64
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

var _ migration.Source = (*LocalSource)(nil)

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
func (s *LocalSource) Info(ctx context.Context) (migration.SourceInfo, error) {
	var si migration.SourceInfo
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
	if pw := cmp.Or(s.ReplicationPassword, s.C.Options().Password); pw != "" {
		ci += " password=" + pw
	}
	return ci
}

// UnpaceWAL lifts (on) or restores (off) the WAL relay's pacing: see
// WALRelay.Unpace. A no-op without a relay; never an error.
func (s *LocalSource) UnpaceWAL(on bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.relay != nil {
		s.relay.Unpace(on)
	}
	return nil
}

// WALRelayed is how many bytes of WAL the relay has passed to the standby
// so far, including a relay Close or Retire stopped; 0 without a relay.
// Never an error.
func (s *LocalSource) WALRelayed() (int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.relay == nil {
		return s.relayedBefore, nil
	}
	return s.relayedBefore + s.relay.Relayed(), nil
}
