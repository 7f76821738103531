package migration

import (
	"fmt"
	"time"
)

// Event is something that happened, fed to Step: the result of an Action,
// an operator's request (Start, Abort) or a restart (Resumed).
type Event interface {
	fmt.Stringer
	isEvent()
}

type (
	// Start begins a pending migration.
	Start struct{}
	// Reserved: the target reserved a data directory and a port.
	Reserved struct {
		Dir  string
		Port int
	}
	// SlotCreated: the source created the replication slot, reserving WAL from LSN.
	SlotCreated struct{ LSN LSN }
	// SnapshotDone: the hot snapshot arrived complete on the target.
	SnapshotDone struct {
		Bytes    int64
		StartLSN LSN // backup start LSN (from backup_label)
		// Checkpoint says how the backup's checkpoint was taken ("fast",
		// "spread", "paced 3s", or a fallback with its reason; "" unknown);
		// StartSeconds how long the backup's start (that checkpoint) took.
		Checkpoint   string
		StartSeconds float64
	}
	// StandbyStarted: the target runs as a streaming standby on the slot.
	StandbyStarted struct{}
	// LagReport: the standby's replay lag behind the source's flush LSN.
	LagReport struct{ Bytes int64 }
	// Warmed: the target prewarmed the source's buffer-cache block list.
	Warmed struct {
		Blocks int
		Bytes  int64
	}
	// Held: the router holds new transactions and in-flight ones finished.
	// Idle lists the source backends (PostgreSQL pids) the router holds idle
	// between transactions (Router.Hold); nil when the router does not say.
	Held struct{ Idle []int }
	// FlushRead: the source's flush LSN, read after Held.
	FlushRead struct{ LSN LSN }
	// Fenced: the source accepts no more writes; the target must replay up to LSN.
	Fenced struct{ LSN LSN }
	// Copied: stop-and-copy copied the stopped source's directory.
	Copied struct{ Bytes int64 }
	// Replayed: the target replayed up to LSN (≥ the fence LSN).
	Replayed struct{ LSN LSN }
	// Promoted: the target is out of recovery (stop-and-copy: started as primary).
	Promoted struct{}
	// Switched: the router now sends the tenant's transactions to the target,
	// at Addr (host:port; "" if unknown).
	Switched struct{ Addr string }
	// Released: the router released the held transactions, at At by its
	// clock if it said (Router.Release; zero = when this event arrived).
	Released struct{ At time.Time }
	// CleanedUp: source stopped and removed, slot dropped, target committed.
	CleanedUp struct{}
	// SnapshotReset: a partial snapshot was discarded (target dir removed, slot dropped).
	SnapshotReset struct{}
	// RolledBack: the rollback finished; the source serves as before.
	RolledBack struct{}
	// Failed: the last action failed.
	Failed struct{ Err string }
	// Resumed: the agent restarted and reloaded this record.
	Resumed struct{}
	// Abort: the operator cancels the migration (ignored after the switch).
	Abort struct{ Reason string }
)

func (Start) isEvent()          {}
func (Reserved) isEvent()       {}
func (SlotCreated) isEvent()    {}
func (SnapshotDone) isEvent()   {}
func (StandbyStarted) isEvent() {}
func (LagReport) isEvent()      {}
func (Warmed) isEvent()         {}
func (Held) isEvent()           {}
func (FlushRead) isEvent()      {}
func (Fenced) isEvent()         {}
func (Copied) isEvent()         {}
func (Replayed) isEvent()       {}
func (Promoted) isEvent()       {}
func (Switched) isEvent()       {}
func (Released) isEvent()       {}
func (CleanedUp) isEvent()      {}
func (SnapshotReset) isEvent()  {}
func (RolledBack) isEvent()     {}
func (Failed) isEvent()         {}
func (Resumed) isEvent()        {}
func (Abort) isEvent()          {}

func (Start) String() string         { return "start" }
func (e Reserved) String() string    { return fmt.Sprintf("reserved dir=%s port=%d", e.Dir, e.Port) }
func (e SlotCreated) String() string { return fmt.Sprintf("slot-created lsn=%s", e.LSN) }
func (e SnapshotDone) String() string {
	if e.Checkpoint != "" {
		return fmt.Sprintf("snapshot-done bytes=%d lsn=%s checkpoint=%q start=%.3fs", e.Bytes, e.StartLSN, e.Checkpoint, e.StartSeconds)
	}
	return fmt.Sprintf("snapshot-done bytes=%d lsn=%s", e.Bytes, e.StartLSN)
}
func (StandbyStarted) String() string { return "standby-started" }
func (e LagReport) String() string    { return fmt.Sprintf("lag bytes=%d", e.Bytes) }
func (e Warmed) String() string       { return fmt.Sprintf("warmed blocks=%d bytes=%d", e.Blocks, e.Bytes) }
func (Held) String() string           { return "held" }
func (e FlushRead) String() string    { return fmt.Sprintf("flush lsn=%s", e.LSN) }
func (e Fenced) String() string       { return fmt.Sprintf("fenced lsn=%s", e.LSN) }
func (e Copied) String() string       { return fmt.Sprintf("copied bytes=%d", e.Bytes) }
func (e Replayed) String() string     { return fmt.Sprintf("replayed lsn=%s", e.LSN) }
func (Promoted) String() string       { return "promoted" }
func (Switched) String() string       { return "switched" }
func (Released) String() string       { return "released" }
func (CleanedUp) String() string      { return "cleaned-up" }
func (SnapshotReset) String() string  { return "snapshot-reset" }
func (RolledBack) String() string     { return "rolled-back" }
func (e Failed) String() string       { return fmt.Sprintf("failed err=%q", e.Err) }
func (Resumed) String() string        { return "resumed" }
func (e Abort) String() string        { return fmt.Sprintf("abort reason=%q", e.Reason) }

// Action is work Step asks the caller to do. Each action, when run, yields
// exactly one event: its own success event (named in the action's comment)
// or Failed. Every action is idempotent: running it again after a crash is safe.
type Action interface {
	fmt.Stringer
	isAction()
}

type (
	// Reserve: target reserves a directory and a port → Reserved.
	Reserve struct{}
	// CreateSlot: source creates physical slot Slot reserving WAL now (an
	// existing slot of that name is dropped first) → SlotCreated.
	CreateSlot struct{ Slot string }
	// StreamSnapshot: hot snapshot of the source into the target's directory,
	// through the rate limiter → SnapshotDone.
	StreamSnapshot struct{ Slot string }
	// StartStandby: configure the target as a standby of the source on Slot and
	// start it (no-op if running) → StandbyStarted.
	StartStandby struct{ Slot string }
	// WaitCatchUp: wait up to Poll, then report the replay lag → LagReport.
	WaitCatchUp struct {
		MaxLag int64
		Poll   time.Duration
	}
	// Warm: send the source's buffer-cache block list to the target and
	// prewarm it there, throttled → Warmed.
	Warm struct{}
	// Hold: router holds new transactions, waits ≤ Deadline for in-flight ones → Held.
	Hold struct{ Deadline time.Duration }
	// ReadFlushLSN: read the source's pg_current_wal_flush_lsn() → FlushRead.
	ReadFlushLSN struct{}
	// Fence: make the source refuse writes → Fenced.
	// Spare: backends held idle by the router (Record.HeldIdle), which a
	// read-only fence neither terminates nor waits for.
	Fence struct {
		Mode  FenceMode
		Spare []int
	}
	// CopyCold: stop-and-copy: copy the stopped source's directory to the target → Copied.
	CopyCold struct{}
	// WaitReplay: wait until the target replayed LSN → Replayed.
	WaitReplay struct{ LSN LSN }
	// Promote: promote the target (stop-and-copy: start it as primary) and wait
	// until pg_is_in_recovery() is false → Promoted.
	Promote struct{}
	// Switch: route the tenant to the target → Switched. An error must mean
	// "not switched".
	Switch struct{}
	// Release: release held transactions → Released.
	Release struct{}
	// Cleanup: stop the source and remove its directory (after the grace
	// period), drop the slot, commit the target → CleanedUp.
	Cleanup struct{ DropSlot bool }
	// ResetSnapshot: discard a partial snapshot after a crash: abort the
	// target's directory, drop the slot → SnapshotReset.
	ResetSnapshot struct{ DropSlot bool }
	// Rollback: undo everything on the target and give the source back its
	// clients. Each part is idempotent and done best-effort in this order:
	// Unfence (restart a stopped source / undo the read-only fence),
	// SwitchBack (route the tenant to the source again: a crash may have come
	// between a successful Switch and its record), Release, AbortTarget (stop,
	// remove dir, free port), DropSlot → RolledBack.
	Rollback struct {
		Unfence     bool
		SwitchBack  bool
		Release     bool
		AbortTarget bool
		DropSlot    bool
		// AbortFirst: the target may have been promoted (the failure came
		// after its replay), so it is stopped before the source is
		// unfenced — never two writable copies — and the source stays
		// fenced until the target's abort succeeds.
		AbortFirst bool
	}
)

func (Reserve) isAction()        {}
func (CreateSlot) isAction()     {}
func (StreamSnapshot) isAction() {}
func (StartStandby) isAction()   {}
func (WaitCatchUp) isAction()    {}
func (Warm) isAction()           {}
func (Hold) isAction()           {}
func (ReadFlushLSN) isAction()   {}
func (Fence) isAction()          {}
func (CopyCold) isAction()       {}
func (WaitReplay) isAction()     {}
func (Promote) isAction()        {}
func (Switch) isAction()         {}
func (Release) isAction()        {}
func (Cleanup) isAction()        {}
func (ResetSnapshot) isAction()  {}
func (Rollback) isAction()       {}

func (Reserve) String() string          { return "reserve" }
func (a CreateSlot) String() string     { return "create-slot " + a.Slot }
func (a StreamSnapshot) String() string { return "stream-snapshot slot=" + a.Slot }
func (a StartStandby) String() string   { return "start-standby slot=" + a.Slot }
func (a WaitCatchUp) String() string {
	return fmt.Sprintf("wait-catch-up max-lag=%d poll=%s", a.MaxLag, a.Poll)
}
func (Warm) String() string         { return "warm" }
func (a Hold) String() string       { return fmt.Sprintf("hold deadline=%s", a.Deadline) }
func (ReadFlushLSN) String() string { return "read-flush-lsn" }
func (a Fence) String() string {
	if len(a.Spare) > 0 {
		return fmt.Sprintf("fence mode=%s spare=%d", a.Mode, len(a.Spare))
	}
	return "fence mode=" + string(a.Mode)
}
func (CopyCold) String() string        { return "copy-cold" }
func (a WaitReplay) String() string    { return "wait-replay lsn=" + a.LSN.String() }
func (Promote) String() string         { return "promote" }
func (Switch) String() string          { return "switch" }
func (Release) String() string         { return "release" }
func (a Cleanup) String() string       { return fmt.Sprintf("cleanup drop-slot=%t", a.DropSlot) }
func (a ResetSnapshot) String() string { return fmt.Sprintf("reset-snapshot drop-slot=%t", a.DropSlot) }
func (a Rollback) String() string {
	s := fmt.Sprintf("rollback unfence=%t switch-back=%t release=%t abort-target=%t drop-slot=%t", a.Unfence, a.SwitchBack, a.Release, a.AbortTarget, a.DropSlot)
	if a.AbortFirst {
		s += " abort-first"
	}
	return s
}
