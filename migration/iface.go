package migration

import (
	"context"
	"errors"
	"io"
	"time"
)

// Block is one page in a source's shared buffers, as pg_buffercache reports
// it. A physical copy keeps OIDs and filenodes, so the target finds the same
// relation by (Database, Tablespace, Filenode).
type Block struct {
	Database   uint32 `json:"db"`         // pg_database OID (reldatabase)
	Tablespace uint32 `json:"tablespace"` // reltablespace OID
	Filenode   uint32 `json:"filenode"`   // relfilenode
	Fork       int16  `json:"fork"`       // 0 main, 1 fsm, 2 vm, 3 init
	Block      uint32 `json:"block"`      // block number in the fork
}

// Position is a standby's progress, as the target reports it.
type Position struct {
	Receive    LSN  // pg_last_wal_receive_lsn(); 0 when not streaming
	Replay     LSN  // pg_last_wal_replay_lsn(); 0 when unknown
	InRecovery bool // pg_is_in_recovery()
}

// SourceInfo is what preflight needs to know about a source tenant.
type SourceInfo struct {
	Major     int    // PostgreSQL major version (server_version_num / 10000)
	WALLevel  string // wal_level: "replica" or "logical" allow a live migration
	DataBytes int64  // size of the data directory to copy
}

// TargetInfo is what preflight needs to know about a target server.
type TargetInfo struct {
	Major     int   // major version of the PostgreSQL binaries it would run
	FreeBytes int64 // free space where the tenant's directory would go
	// Taken is the state of a tenant the target has under the same id
	// ("" none, or only a moved or deleted one's record).
	Taken string
}

// SnapshotInfo describes a finished snapshot stream.
type SnapshotInfo struct {
	Bytes    int64 // payload bytes sent
	StartLSN LSN   // backup start LSN
	// Checkpoint says how the backup's checkpoint was taken (see
	// SnapshotDone); StartSeconds how long the backup's start took.
	Checkpoint   string
	StartSeconds float64
}

// Limiter paces a byte stream: WaitN blocks until n more bytes may pass.
// *throttle.Limiter and *rate.Limiter (golang.org/x/time/rate) satisfy it.
// n never exceeds the limiter's burst (callers chunk by ChunkBytes).
type Limiter interface {
	WaitN(ctx context.Context, n int) error
}

// ChunkBytes is the largest n the driver passes to Limiter.WaitN (64 KiB);
// a limiter's burst must be at least this.
const ChunkBytes = 64 << 10

// ErrUnsupported is returned by an optional method of Source, Target or
// Router when that implementation cannot do the thing at all (as opposed to
// failing this time). Every such method says what the driver does instead;
// an adapter returns it explicitly (wrapped or not: the driver tests it with
// errors.Is).
var ErrUnsupported = errors.New("migration: unsupported")

// WALRelayer is the side of a migration that relays the standby's WAL
// stream in CATCH-UP through a pacing relay: the Source's agent, or the
// Target's when the target relays it (a remote target's agent, in front of
// its standby, so that the relay's CPU is the target host's). The driver
// asks the Target first and the Source when the Target answers
// ErrUnsupported.
type WALRelayer interface {
	// UnpaceWAL lifts (on) or restores (off) the relay's pacing. HANDOVER
	// lifts it from the hold on (the freeze waits for the WAL); Rollback
	// restores it. Best effort: only ErrUnsupported (this side relays
	// nothing) means anything to the driver.
	UnpaceWAL(on bool) error
	// WALRelayed is how many bytes of WAL the relay has passed to the
	// standby so far (0 without a relay yet). CATCH-UP's progress rate is
	// the WAL shipped per second since the phase began. ErrUnsupported:
	// this side relays nothing.
	WALRelayed() (int64, error)
}

// Source is the source side of a migration: the tenant's running PostgreSQL.
// It runs on the source's agent, next to the driver. Every method is
// idempotent; errors are wrapped with an operation prefix.
type Source interface {
	// Info reports what preflight checks.
	Info(ctx context.Context) (SourceInfo, error)
	// Addr is the host:port clients use to reach the tenant on the source
	// (where a rollback routes them back to).
	Addr() string
	// PrimaryConnInfo is the libpq conninfo a standby uses to stream from
	// this source (host, port, user; no dbname).
	PrimaryConnInfo() string
	// CreateSlot creates physical replication slot name reserving WAL now,
	// dropping an existing slot of that name first; it returns the slot's
	// restart LSN.
	CreateSlot(ctx context.Context, name string) (LSN, error)
	// DropSlot drops the slot if it exists.
	DropSlot(ctx context.Context, name string) error
	// SlotStatus returns the slot's wal_status ("reserved", "extended",
	// "unreserved" or "lost"; "" when there is no such slot). CATCH-UP
	// fails at once on "lost" or "": the source removed WAL the standby
	// needs. Any error, ErrUnsupported included, skips the check.
	SlotStatus(ctx context.Context, name string) (string, error)
	// SlotRestartLSN returns how far the standby has confirmed receiving
	// through the slot (restart_lsn; 0 unknown). Until the standby is
	// consistent its replay position is unknown and CATCH-UP reports the
	// WAL not yet received instead, a lower bound of the lag. Any error,
	// ErrUnsupported included, leaves the lag unknown.
	SlotRestartLSN(ctx context.Context, name string) (LSN, error)
	// SendSnapshot streams a hot copy of the data directory (online backup
	// between backup start and stop in one session) to w, paced by lim
	// (nil: unpaced); done is called with bytes sent so far.
	SendSnapshot(ctx context.Context, w io.Writer, lim Limiter, done func(bytes int64)) (SnapshotInfo, error)
	// SendCold streams the directory of the stopped source to w (stop-and-copy).
	SendCold(ctx context.Context, w io.Writer, lim Limiter, done func(bytes int64)) (int64, error)
	// BufferBlocks lists the pages in shared buffers (pg_buffercache).
	BufferBlocks(ctx context.Context) ([]Block, error)
	// FlushLSN returns pg_current_wal_flush_lsn().
	FlushLSN(ctx context.Context) (LSN, error)
	// FenceEarly does, ahead of the handover (at WARM, live migration with
	// a read-only fence), the part of a read-only fence that admits only
	// the router's connections (admit: their pids, from Router.Backends),
	// so that the Fence inside the freeze has less to do. The source keeps
	// serving meanwhile; Unfence undoes it. Any error, ErrUnsupported
	// included, is not fatal: Fence then does everything.
	FenceEarly(ctx context.Context, admit []int) error
	// Fence makes the source refuse writes (see FenceMode) and returns the
	// LSN the target must replay to have every committed write. spare names
	// client backends (pids) that the router holds idle between
	// transactions (Router.Hold's idle): a read-only fence leaves them
	// alone, since nothing will reach them before the router releases them,
	// and waiting for their exit would only lengthen the freeze.
	Fence(ctx context.Context, mode FenceMode, spare []int) (LSN, error)
	// Unfence undoes Fence (and FenceEarly): restarts a stopped source,
	// lifts a read-only fence. A no-op on an unfenced source.
	Unfence(ctx context.Context) error
	// Retire stops the source for good and removes its directory (CLEANUP).
	Retire(ctx context.Context) error
	// Close releases connections; the source keeps running.
	Close() error
	// WALRelayer: the Source's relay carries the standby's WAL stream
	// unless the Target's does.
	WALRelayer
}

// Target is the target side of a migration: a server that will run the
// tenant. The agent serves it remotely (HTTP) or in-process (package pg's
// LocalTarget). Every method is idempotent and takes the migration record,
// from which it finds the directory and port it reserved (m.ID,
// m.TargetDir, m.TargetPort).
type Target interface {
	// Info reports what preflight checks for tenant.
	Info(ctx context.Context, tenant string) (TargetInfo, error)
	// Reserve reserves a port and an empty data directory for m. Called again
	// for the same m it returns a fresh, empty directory.
	Reserve(ctx context.Context, m Record) (dir string, port int, err error)
	// OpenSnapshot returns a writer for the stream produced by
	// Source.SendSnapshot or Source.SendCold; Close finishes writing the data
	// directory and reports a corrupt or short stream.
	OpenSnapshot(ctx context.Context, m Record) (io.WriteCloser, error)
	// StartStandby configures the received directory as a streaming standby
	// (standby.signal, primary_conninfo, primary_slot_name) and starts it; with
	// primaryConnInfo == "" it starts it as a primary (stop-and-copy). Returns
	// once it accepts connections; a no-op if already running.
	StartStandby(ctx context.Context, m Record, primaryConnInfo, slot string) error
	// Position reports the standby's receive/replay LSNs.
	Position(ctx context.Context, m Record) (Position, error)
	// WaitReplay returns once the standby has replayed lsn, polling tightly
	// over a persistent connection (HANDOVER: every millisecond counts), or
	// ctx ends.
	WaitReplay(ctx context.Context, m Record, lsn LSN) (LSN, error)
	// Prewarm loads blocks from the target's own copy into its shared
	// buffers (pg_prewarm). The caller paces calls; one call is small.
	Prewarm(ctx context.Context, m Record, blocks []Block) error
	// PreparePromotion readies the standby's promotion ahead of the hold
	// (live migration, at the start of WARM, else just before the hold):
	// it creates the first WAL segments the promoted server will write, so
	// that they are not zero-filled while the held transactions wait. Any
	// error, ErrUnsupported included, costs only the preparation.
	PreparePromotion(ctx context.Context, m Record) error
	// Promote ends recovery and returns once pg_is_in_recovery() is false.
	// For a primary (stop-and-copy) it returns at once.
	Promote(ctx context.Context, m Record) error
	// Addr is the host:port clients use to reach the tenant on the target.
	Addr(m Record) string
	// Abort stops the target's postmaster, removes its directory and frees
	// the port. A no-op when nothing was reserved.
	Abort(ctx context.Context, m Record) error
	// Commit records that the tenant now lives on the target.
	Commit(ctx context.Context, m Record) error
	// WALRelayer: ErrUnsupported unless this target relays the standby's
	// WAL stream itself; then the Source should relay nothing (the target
	// dials its postmaster).
	WALRelayer
}

// Router is what a migration needs from the proxy. The agent glues the proxy
// client to it; DirectRouter and GateRouter serve tests and benchmarks.
type Router interface {
	// Prepare opens, ahead of the hold, a server session on addr (the
	// target, still a hot standby) for each of tenant's client sessions, so
	// that after the switch the sessions only swap connections instead of
	// each forking a backend on the new server at its next transaction.
	// Run calls it in live mode with PreparePromotion. Any error,
	// ErrUnsupported included, is not fatal: sessions then reconnect
	// lazily, as without it.
	Prepare(ctx context.Context, tenant, addr string) error
	// Backends names the PostgreSQL backends (pids on the tenant's current
	// server) of the router's own sessions, so that Source.FenceEarly can
	// tell the router's connections from others'. ErrUnsupported (or any
	// error): no early fence.
	Backends(ctx context.Context, tenant string) ([]int, error)
	// Hold makes new transactions of tenant wait and returns once in-flight
	// ones have finished, or with an error if they did not within deadline.
	// The hold stays in place until Release, even after an error.
	//
	// idle names the backends (pids on the tenant's current server) of the
	// sessions it holds idle at a transaction boundary; the router promises
	// to send them nothing until Release, and after a Switch never again
	// (their sessions move to the new server before their next
	// transaction), so they cannot write: the fence spares them instead of
	// terminating them and waiting for each to exit. A backend in a
	// transaction, or one the router cannot vouch for, must not be listed;
	// a router that cannot vouch for any returns nil.
	Hold(ctx context.Context, tenant string, deadline time.Duration) (idle []int, err error)
	// Switch routes tenant to addr. An error means the route did not change.
	Switch(ctx context.Context, tenant, addr string) error
	// Release lets held transactions go (to the current route) and says
	// when, by the router's clock (zero: it cannot say). The freeze then
	// ends there rather than when the answer arrived, which on a busy
	// source host can be much later (the source's backends exit as the
	// router moves its sessions away, and the agent shares their CPU).
	Release(ctx context.Context, tenant string) (at time.Time, err error)
	// Holding reports whether the router still holds tenant (between Hold
	// and Release). The read-only fence counts on the hold to keep the
	// router's own sessions from writing; a router that lost it (it
	// restarted) makes the handover roll back instead. ErrUnsupported: the
	// router cannot say, and the fence does not ask.
	Holding(ctx context.Context, tenant string) (bool, error)
}
