package migration

import (
	"fmt"
	"strings"
	"time"
)

// Mode is how a tenant moves.
type Mode string

const (
	// Live copies a hot snapshot while the source serves, streams WAL to the
	// target as a standby, and freezes clients only for the handover.
	Live Mode = "live"
	// StopAndCopy is the baseline: hold clients, stop the source, copy its
	// directory, start the target, switch. Clients wait for the whole copy.
	StopAndCopy Mode = "stop-and-copy"
)

// FenceMode is how HANDOVER stops writes on the source.
type FenceMode string

const (
	// FenceReadOnly makes the source refuse writes without stopping it:
	// pg_hba.conf is narrowed to the agent's local socket and replication,
	// default_transaction_read_only=on, reload, every other client backend is
	// terminated, a tiny synchronous commit flushes the WAL; then the flush
	// LSN is read (nothing acknowledged can be after it).
	//
	// The default, because it is the faster safe fence (its freeze is
	// shorter than FenceStop's: docs/results.md) and the cheaper one to
	// undo. It needs no shutdown checkpoint, and a rollback only restores
	// two settings while the source keeps its buffer cache (FenceStop's
	// rollback restarts it).
	// Safe: no TCP client can connect once the reload is seen, no old session
	// survives, and the only sessions left are the agent's local ones.
	FenceReadOnly FenceMode = "read-only"
	// FenceStop stops the source with a fast shutdown, as Patroni's planned
	// switchover does: its shutdown checkpoint is streamed to the standby, and
	// the standby must replay past it. Always used by StopAndCopy.
	FenceStop FenceMode = "stop"
)

// Phase is where a migration is. Live: pending → prepare → snapshot →
// catch-up → warm → handover → cleanup → done. StopAndCopy: pending →
// prepare → handover → cleanup → done. Any failure before the route switch:
// → rollback → aborted.
type Phase string

const (
	PhasePending  Phase = "pending"
	PhasePrepare  Phase = "prepare"
	PhaseSnapshot Phase = "snapshot"
	PhaseCatchUp  Phase = "catch-up"
	PhaseWarm     Phase = "warm"
	PhaseHandover Phase = "handover"
	PhaseCleanup  Phase = "cleanup"
	PhaseDone     Phase = "done"     // terminal: the tenant lives on the target
	PhaseRollback Phase = "rollback" // undoing; the source serves
	PhaseAborted  Phase = "aborted"  // terminal: the tenant lives on the source
)

// Terminal reports whether no further step can change the migration.
func (p Phase) Terminal() bool { return p == PhaseDone || p == PhaseAborted }

// Defaults for a new Record's tunables.
const (
	// DefaultCatchUpBytes ends CATCH-UP once the standby's replay lag is at
	// most this many bytes of WAL (1 MiB: replayed in well under 100 ms).
	DefaultCatchUpBytes = 1 << 20
	// DefaultHoldDeadline is how long HANDOVER lets in-flight transactions
	// finish after holding new ones (100 ms); the router ends those still
	// open then (proxy: idle in a transaction block terminated at once, a
	// running statement cancelled, then terminated after the proxy's short
	// grace). The freeze budget behind it: docs/design.md, "Handover
	// deadline". Every default hold — the agent's, the proxy API's, the
	// benchmarks' — reads this one.
	DefaultHoldDeadline = 100 * time.Millisecond
	// MaxHoldDeadline bounds Record.HoldDeadline (1 min): every client of
	// the tenant may wait that long.
	MaxHoldDeadline = time.Minute
	// MaxRetries is how many times in a row a roll-forward action (after the
	// route switch) or a rollback is retried before the migration is left
	// stuck with its Error set for a later Resumed.
	MaxRetries = 5
)

// Record is the persisted state of one migration: everything needed to resume
// it after a crash. It is a plain value, JSON-serialisable; the agent stores
// it after every Step. Times are those handed to Step, never read from a clock.
type Record struct {
	ID     string    `json:"id"`
	Tenant string    `json:"tenant"`
	Source string    `json:"source"` // source server (agent) name
	Target string    `json:"target"` // target server (agent) name
	Mode   Mode      `json:"mode"`
	Fence  FenceMode `json:"fence"`
	Warm   bool      `json:"warm"` // run WARM (ship the buffer-cache block list)

	// CatchUpBytes: CATCH-UP ends when replay lag ≤ this (bytes).
	CatchUpBytes int64 `json:"catch_up_bytes"`
	// CatchUpTimeout bounds CATCH-UP within one Run: a lag still above
	// CatchUpBytes after it rolls the migration back. 0: Env.CatchUpTimeout.
	CatchUpTimeout time.Duration `json:"catch_up_timeout_ns,omitempty"`
	// HoldDeadline: how long in-flight transactions may take to finish
	// after Hold, in [0, MaxHoldDeadline]; New sets DefaultHoldDeadline.
	HoldDeadline time.Duration `json:"hold_deadline_ns"`

	Phase    Phase `json:"phase"`
	Attempt  int   `json:"attempt"`  // 1 + number of Resumed events
	Failures int   `json:"failures"` // consecutive failed retries (roll-forward / rollback)
	// RetryError is the last failure of a retried action (roll-forward or
	// rollback); cleared when the action succeeds. Error keeps the cause.
	RetryError string `json:"retry_error,omitempty"`
	// RetrySince is when the retried action first failed (zero while none
	// does): how long the migration has been waiting on it.
	RetrySince time.Time `json:"retry_since,omitzero"`

	// PREPARE
	TargetDir  string `json:"target_dir,omitempty"`
	TargetPort int    `json:"target_port,omitempty"`
	Slot       string `json:"slot,omitempty"`     // physical replication slot on the source
	SlotLSN    LSN    `json:"slot_lsn,omitempty"` // WAL reserved from here

	// SNAPSHOT
	SnapshotBytes int64 `json:"snapshot_bytes,omitempty"`
	SnapshotLSN   LSN   `json:"snapshot_lsn,omitempty"` // backup start LSN
	SnapshotDone  bool  `json:"snapshot_done,omitempty"`
	// SnapshotCheckpoint and SnapshotStartSeconds: how the backup's
	// checkpoint was taken and how long the backup's start took (seconds),
	// as SnapshotDone reported them.
	SnapshotCheckpoint   string  `json:"snapshot_checkpoint,omitempty"`
	SnapshotStartSeconds float64 `json:"snapshot_start_s,omitempty"`
	ResetPending         bool    `json:"reset_pending,omitempty"` // resumed mid-snapshot: discard it first

	// CATCH-UP
	StandbyStarted bool  `json:"standby_started,omitempty"`
	LagBytes       int64 `json:"lag_bytes"` // last reported replay lag; -1 unknown
	CaughtUp       bool  `json:"caught_up,omitempty"`

	// WARM
	Warmed     bool  `json:"warmed,omitempty"`
	WarmBlocks int   `json:"warm_blocks,omitempty"`
	WarmBytes  int64 `json:"warm_bytes,omitempty"`

	// HANDOVER (timestamps are zero until the step is done)
	HeldAt     time.Time `json:"held_at,omitzero"`
	HeldIdle   []int     `json:"held_idle,omitempty"` // source backends the router holds idle (Router.Hold); the fence spares them
	FlushLSN   LSN       `json:"flush_lsn,omitempty"` // source flush LSN read after Hold
	FlushAt    time.Time `json:"flush_at,omitzero"`   // when it was read (the hold is complete)
	FencedAt   time.Time `json:"fenced_at,omitzero"`
	FenceLSN   LSN       `json:"fence_lsn,omitempty"` // the target must replay up to here
	CopiedAt   time.Time `json:"copied_at,omitzero"`  // stop-and-copy: directory copied
	CopyBytes  int64     `json:"copy_bytes,omitempty"`
	ReplayedAt time.Time `json:"replayed_at,omitzero"`
	ReplayLSN  LSN       `json:"replay_lsn,omitempty"`
	PromotedAt time.Time `json:"promoted_at,omitzero"` // live: promoted; stop-and-copy: started
	SwitchedAt time.Time `json:"switched_at,omitzero"`
	SwitchedTo string    `json:"switched_to,omitempty"` // the target's host:port the router switched to: where the writable copy is from SwitchedAt on
	ReleasedAt time.Time `json:"released_at,omitzero"`
	// Freeze is HeldAt → ReleasedAt: how long new transactions waited (for
	// stop-and-copy, the downtime).
	Freeze time.Duration `json:"freeze_ns,omitempty"`

	// CLEANUP / end
	CleanedAt time.Time `json:"cleaned_at,omitzero"`
	Created   time.Time `json:"created"`
	Updated   time.Time `json:"updated"`
	Finished  time.Time `json:"finished,omitzero"`
	Error     string    `json:"error,omitempty"`        // last failure, kept after rollback
	FailedIn  Phase     `json:"failed_in,omitempty"`    // phase the rollback started from
	Reason    string    `json:"abort_reason,omitempty"` // operator's reason for Abort
}

// New returns a pending Record with defaults filled. It does not validate;
// call Validate first.
func New(id, tenant, source, target string, mode Mode, now time.Time) Record {
	r := Record{
		ID: id, Tenant: tenant, Source: source, Target: target,
		Mode: mode, Fence: FenceReadOnly, Warm: mode == Live,
		CatchUpBytes: DefaultCatchUpBytes, HoldDeadline: DefaultHoldDeadline,
		Phase: PhasePending, Attempt: 1, LagBytes: -1,
		Created: now, Updated: now,
	}
	if mode == StopAndCopy {
		r.Fence = FenceStop
	}
	if mode == Live {
		r.Slot = SlotName(id)
	}
	return r
}

// ParseHoldDeadline reads a hold deadline as the CLI and the agent's API
// take it: "" is DefaultHoldDeadline, else a duration in [0,
// MaxHoldDeadline] (Record.HoldDeadline; 0 ends every open transaction at
// once). The error quotes s; the caller names the setting.
func ParseHoldDeadline(s string) (time.Duration, error) {
	if s == "" {
		return DefaultHoldDeadline, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 || d > MaxHoldDeadline {
		return 0, fmt.Errorf("%q: want a duration from 0 to %s, such as 100ms", s, strings.TrimSuffix(MaxHoldDeadline.String(), "0s"))
	}
	return d, nil
}

// SlotName is the replication slot a live migration uses on its source.
// Deterministic, so a crash between creating it and persisting the record
// leaves nothing unknown behind.
func SlotName(id string) string {
	b := []byte("sluice_")
	for _, c := range []byte(id) {
		switch {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9', c == '_':
			b = append(b, c)
		case c >= 'A' && c <= 'Z':
			b = append(b, c+'a'-'A')
		default:
			b = append(b, '_')
		}
	}
	if len(b) > 63 {
		b = b[:63]
	}
	return string(b)
}

// Switched reports whether the route already points at the target: from then
// on the migration only rolls forward.
func (r Record) Switched() bool { return !r.SwitchedAt.IsZero() }

// Active reports whether the migration still holds resources or may act.
func (r Record) Active() bool { return !r.Phase.Terminal() }
