package migration

import (
	"fmt"
	"time"
)

// CatchUpPoll is how long a WaitCatchUp action waits before it reports the lag
// (100 ms): the lag is reported ten times a second during CATCH-UP.
const CatchUpPoll = 100 * time.Millisecond

// Step is the migration state machine: given the persisted record, one event
// and the time it is handled, it returns the new record and the actions to run
// next. It does no I/O and reads no clock.
//
// Contract for the caller (the driver, Run):
//   - persist the returned record before running its actions;
//   - Step returns at most one action; run it and feed its event (the
//     action's success event, or Failed) back to Step;
//   - no action and a non-terminal phase means the migration waits: for Start
//     (pending), or, after MaxRetries failures in a row, for Resumed (stuck).
//
// Allowed transitions (live):
//
//	pending  --Start-->          prepare   Reserve, then CreateSlot
//	prepare  --SlotCreated-->    snapshot  StreamSnapshot
//	snapshot --SnapshotDone-->   catch-up  StartStandby, then WaitCatchUp until lag ≤ CatchUpBytes
//	catch-up --LagReport(small)-> warm     Warm (skipped when !Warm), then WaitCatchUp again (WARM shares the throttle with the WAL stream)
//	warm     --LagReport(small)-> handover Hold, ReadFlushLSN, Fence, WaitReplay, Promote, Switch, Release
//	handover --Released-->       cleanup   Cleanup
//	cleanup  --CleanedUp-->      done
//
// Stop-and-copy: pending → prepare (Reserve) → handover (Hold, Fence(stop),
// CopyCold, Promote(start as primary), Switch, Release) → cleanup → done.
//
// Failures: Failed (or Abort) before the route switch → rollback (Rollback
// action: unfence the source, release, abort the target, drop the slot) →
// aborted; the source never stopped serving except during a handover's hold.
// After the switch there is no way back: a failed Release or Cleanup is
// retried (roll forward), up to MaxRetries times in a row.
//
// Resume after a crash (event Resumed):
//
//	pending            wait for Start
//	prepare            re-run the missing step (Reserve and CreateSlot are idempotent)
//	snapshot           restart from scratch: ResetSnapshot, then prepare again (fresh dir, fresh slot)
//	catch-up           StartStandby again (no-op if running), then keep waiting
//	warm               StartStandby again (the relay it streamed through may be gone), then Warm unless done
//	handover, before Switched   roll back (the fence may or may not have happened: unfence anyway)
//	handover, after Switched    complete: Release, Cleanup
//	cleanup, rollback  run again
//	done, aborted      nothing
//
// An event that does not answer the action the record expects (a stale or
// duplicate event) is ignored: the record comes back unchanged, no actions.
func Step(rec Record, ev Event, now time.Time) (Record, []Action) {
	if rec.Phase.Terminal() {
		return rec, nil
	}
	switch e := ev.(type) {
	case Resumed:
		rec.Updated = now
		return resume(rec, now)
	case Failed:
		rec.Updated = now
		return fail(rec, e.Err, now)
	case Abort:
		if rec.Switched() || rec.Phase == PhaseRollback || rec.Phase == PhaseCleanup {
			return rec, nil
		}
		rec.Updated = now
		rec.Reason = e.Reason
		if rec.Phase == PhasePending {
			rec.Phase = PhaseAborted
			rec.Error = "aborted: " + e.Reason
			rec.Finished = now
			return rec, nil
		}
		return startRollback(rec, "aborted: "+e.Reason, now)
	case Start:
		if rec.Phase != PhasePending {
			return rec, nil
		}
		rec.Updated = now
		rec.Phase = PhasePrepare
		return advance(rec, now)
	}
	_, want := advance(rec, now)
	if wa := firstAction(want, rec); wa == nil || !answers(wa, ev) {
		return rec, nil
	}
	rec.Updated = now
	rec.Failures, rec.RetryError, rec.RetrySince = 0, "", time.Time{}
	switch e := ev.(type) {
	case Reserved:
		rec.TargetDir, rec.TargetPort = e.Dir, e.Port
	case SlotCreated:
		rec.SlotLSN = e.LSN
	case SnapshotDone:
		rec.SnapshotBytes, rec.SnapshotLSN, rec.SnapshotDone = e.Bytes, e.StartLSN, true
		rec.SnapshotCheckpoint, rec.SnapshotStartSeconds = e.Checkpoint, e.StartSeconds
	case StandbyStarted:
		rec.StandbyStarted = true
	case LagReport:
		rec.LagBytes = e.Bytes
		if e.Bytes >= 0 && e.Bytes <= rec.CatchUpBytes {
			rec.CaughtUp = true
		}
	case Warmed:
		rec.Warmed, rec.WarmBlocks, rec.WarmBytes = true, e.Blocks, e.Bytes
		// The standby may have fallen behind while WARM shared the
		// throttle with its WAL stream: HANDOVER's wait for the replay is
		// part of the freeze, so catch up again first.
		rec.CaughtUp = false
	case Held:
		rec.HeldAt, rec.HeldIdle = now, e.Idle
	case FlushRead:
		rec.FlushLSN, rec.FlushAt = e.LSN, now
	case Fenced:
		rec.FencedAt, rec.FenceLSN = now, e.LSN
	case Copied:
		rec.CopiedAt, rec.CopyBytes = now, e.Bytes
	case Replayed:
		if need := replayTarget(rec); e.LSN < need {
			return fail(rec, fmt.Sprintf("target replayed %s, short of %s", e.LSN, need), now)
		}
		rec.ReplayedAt, rec.ReplayLSN = now, e.LSN
	case Promoted:
		rec.PromotedAt = now
	case Switched:
		rec.SwitchedAt, rec.SwitchedTo = now, e.Addr
	case Released:
		// The router's time when it gave one, if it is plausible: after the
		// switch was recorded and not after now (clocks of other hosts).
		at := now
		if !e.At.IsZero() && !e.At.Before(rec.SwitchedAt) && !e.At.After(now) {
			at = e.At
		}
		rec.ReleasedAt = at
		rec.Freeze = at.Sub(rec.HeldAt)
	case CleanedUp:
		rec.CleanedAt = now
	case SnapshotReset:
		rec.TargetDir, rec.TargetPort, rec.SlotLSN = "", 0, 0
		rec.SnapshotBytes, rec.SnapshotLSN, rec.SnapshotDone = 0, 0, false
		rec.SnapshotCheckpoint, rec.SnapshotStartSeconds = "", 0
		rec.ResetPending = false
		rec.Phase = PhasePrepare
	case RolledBack:
		rec.Phase = PhaseAborted
		rec.Finished = now
		return rec, nil
	}
	return advance(rec, now)
}

func firstAction(as []Action, _ Record) Action {
	if len(as) == 0 {
		return nil
	}
	return as[0]
}

// answers reports whether ev is the success event of action a.
func answers(a Action, ev Event) bool {
	switch a.(type) {
	case Reserve:
		_, ok := ev.(Reserved)
		return ok
	case CreateSlot:
		_, ok := ev.(SlotCreated)
		return ok
	case StreamSnapshot:
		_, ok := ev.(SnapshotDone)
		return ok
	case StartStandby:
		_, ok := ev.(StandbyStarted)
		return ok
	case WaitCatchUp:
		_, ok := ev.(LagReport)
		return ok
	case Warm:
		_, ok := ev.(Warmed)
		return ok
	case Hold:
		_, ok := ev.(Held)
		return ok
	case ReadFlushLSN:
		_, ok := ev.(FlushRead)
		return ok
	case Fence:
		_, ok := ev.(Fenced)
		return ok
	case CopyCold:
		_, ok := ev.(Copied)
		return ok
	case WaitReplay:
		_, ok := ev.(Replayed)
		return ok
	case Promote:
		_, ok := ev.(Promoted)
		return ok
	case Switch:
		_, ok := ev.(Switched)
		return ok
	case Release:
		_, ok := ev.(Released)
		return ok
	case Cleanup:
		_, ok := ev.(CleanedUp)
		return ok
	case ResetSnapshot:
		_, ok := ev.(SnapshotReset)
		return ok
	case Rollback:
		_, ok := ev.(RolledBack)
		return ok
	}
	return false
}

// Next returns the action the record is waiting for (nil if none), without
// changing anything: what the driver runs after loading a record it has just
// persisted, and what tests use to check a record's state.
func Next(rec Record) Action {
	if rec.Phase.Terminal() || rec.Phase == PhasePending {
		return nil
	}
	_, as := advance(rec, rec.Updated)
	return firstAction(as, rec)
}

func replayTarget(rec Record) LSN { return max(rec.FlushLSN, rec.FenceLSN) }

// advance moves the record through phases whose work is complete and returns
// it with the next action.
func advance(rec Record, now time.Time) (Record, []Action) {
	for {
		switch rec.Phase {
		case PhasePrepare:
			if rec.TargetDir == "" {
				return rec, []Action{Reserve{}}
			}
			if rec.Mode == Live && rec.SlotLSN == 0 {
				return rec, []Action{CreateSlot{Slot: rec.Slot}}
			}
			if rec.Mode == Live {
				rec.Phase = PhaseSnapshot
			} else {
				rec.Phase = PhaseHandover
			}
		case PhaseSnapshot:
			if rec.ResetPending {
				return rec, []Action{ResetSnapshot{DropSlot: rec.Mode == Live}}
			}
			if !rec.SnapshotDone {
				return rec, []Action{StreamSnapshot{Slot: rec.Slot}}
			}
			rec.Phase = PhaseCatchUp
		case PhaseCatchUp:
			if !rec.StandbyStarted {
				return rec, []Action{StartStandby{Slot: rec.Slot}}
			}
			if !rec.CaughtUp {
				return rec, []Action{WaitCatchUp{MaxLag: rec.CatchUpBytes, Poll: CatchUpPoll}}
			}
			if rec.Warm {
				rec.Phase = PhaseWarm
			} else {
				rec.Phase = PhaseHandover
			}
		case PhaseWarm:
			if !rec.StandbyStarted {
				return rec, []Action{StartStandby{Slot: rec.Slot}}
			}
			if !rec.Warmed {
				return rec, []Action{Warm{}}
			}
			if !rec.CaughtUp {
				return rec, []Action{WaitCatchUp{MaxLag: rec.CatchUpBytes, Poll: CatchUpPoll}}
			}
			rec.Phase = PhaseHandover
		case PhaseHandover:
			if a := handoverAction(rec); a != nil {
				return rec, []Action{a}
			}
			rec.Phase = PhaseCleanup
		case PhaseCleanup:
			if rec.CleanedAt.IsZero() {
				return rec, []Action{Cleanup{DropSlot: rec.Mode == Live}}
			}
			rec.Phase = PhaseDone
			rec.Finished = now
			return rec, nil
		case PhaseRollback:
			return rec, []Action{rollbackAction(rec)}
		default:
			return rec, nil
		}
	}
}

func handoverAction(rec Record) Action {
	if rec.HeldAt.IsZero() {
		return Hold{Deadline: rec.HoldDeadline}
	}
	if rec.Mode == Live {
		switch {
		case rec.FlushLSN == 0:
			return ReadFlushLSN{}
		case rec.FencedAt.IsZero():
			return Fence{Mode: rec.Fence, Spare: rec.HeldIdle}
		case rec.ReplayedAt.IsZero():
			return WaitReplay{LSN: replayTarget(rec)}
		}
	} else {
		switch {
		case rec.FencedAt.IsZero():
			return Fence{Mode: FenceStop}
		case rec.CopiedAt.IsZero():
			return CopyCold{}
		}
	}
	switch {
	case rec.PromotedAt.IsZero():
		return Promote{}
	case rec.SwitchedAt.IsZero():
		return Switch{}
	case rec.ReleasedAt.IsZero():
		return Release{}
	}
	return nil
}

// rollbackAction undoes whatever may have been done. It is conservative: a
// crash or failure anywhere in HANDOVER may have left a hold or a fence behind,
// and Reserve/CreateSlot may have happened without their event being recorded,
// so those parts are always included (each is idempotent).
func rollbackAction(rec Record) Rollback {
	inHandover := rec.FailedIn == PhaseHandover
	return Rollback{
		// WARM may have fenced early (Source.FenceEarly).
		Unfence:     inHandover || rec.FailedIn == PhaseWarm && rec.Mode == Live,
		SwitchBack:  inHandover,
		Release:     inHandover,
		AbortTarget: true,
		DropSlot:    rec.Mode == Live,
		AbortFirst:  inHandover && (!rec.ReplayedAt.IsZero() || !rec.CopiedAt.IsZero()),
	}
}

func startRollback(rec Record, reason string, now time.Time) (Record, []Action) {
	rec.Error = reason
	rec.FailedIn = rec.Phase
	rec.Phase = PhaseRollback
	rec.Failures, rec.RetryError, rec.RetrySince = 0, "", time.Time{}
	return advance(rec, now)
}

func fail(rec Record, err string, now time.Time) (Record, []Action) {
	if rec.Phase == PhasePending {
		return rec, nil
	}
	if rec.Phase == PhaseRollback || rec.Switched() || rec.Phase == PhaseCleanup {
		if rec.RetrySince.IsZero() {
			rec.RetrySince = now
		}
		rec.RetryError = err
		rec.Failures++
		if rec.Failures > MaxRetries {
			return rec, nil // stuck: wait for Resumed
		}
		return advance(rec, now)
	}
	return startRollback(rec, err, now)
}

func resume(rec Record, now time.Time) (Record, []Action) {
	rec.Attempt++
	rec.Failures = 0 // RetryError and RetrySince stay until the action succeeds
	switch rec.Phase {
	case PhasePending:
		return rec, nil
	case PhaseSnapshot:
		rec.ResetPending = true
	case PhaseCatchUp, PhaseWarm:
		// The standby's primary_conninfo may name a WAL relay that died
		// with the process (--wal-relay source): start it again, which
		// rewrites the conninfo to a live relay (a no-op otherwise).
		rec.StandbyStarted = false
	case PhaseHandover:
		if !rec.Switched() {
			return startRollback(rec, "the driver stopped during handover before the route switch (its agent restarted, or lost the catalog lock and took it again)", now)
		}
	}
	return advance(rec, now)
}
