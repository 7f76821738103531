package migration

import (
	"context"
	"time"
)

// Env is what Run works with. Source, Target and Router are required.
type Env struct {
	Source Source
	Target Target
	Router Router
	// Limiter paces SNAPSHOT and WARM (bytes). The control loop changes its
	// rate while Run works: give the same *throttle.Limiter to a loop.Loop as
	// its Send throttle (see migration/pg's TestControlLoopPacesSnapshot); nil is unpaced.
	// Stop-and-copy's copy is never paced: clients are waiting.
	Limiter Limiter
	// Persist stores the record; Run calls it after every Step, before the
	// next action, except that a lag report which changed nothing else is
	// stored at most every LagPersistEvery. An error stops Run (the action
	// is not run).
	Persist func(Record) error
	// LagPersistEvery bounds how often CATCH-UP's lag reports (one every
	// CatchUpPoll) are stored when they change nothing but the lag: each
	// store is a durable write, an fsync on a disk the migration's own
	// servers may share. A record older by the lag is resumed all the same.
	// Default 5 s; negative stores every report.
	LagPersistEvery time.Duration
	// Progress, if set, is called often (at most every ProgressEvery).
	Progress func(Progress)
	// Abort, if set, is read between actions: a value aborts the migration
	// with that reason (ignored after the route switch).
	Abort <-chan string
	// Now is the clock (default time.Now).
	Now func() time.Time
	// Hook, if set, is called at named points of the run, for fault
	// injection: a test pauses the driver there and kills a process. The
	// points: "before:<action>" as an action is about to run,
	// "after:<action>" once its event's record is persisted (action names
	// as in Action.String's first word: "fence", "switch", "cleanup", …),
	// and "during:stream-snapshot" once, after the snapshot's first 4 MiB
	// (the stream waits while the hook blocks). A hook may block until ctx ends.
	Hook func(ctx context.Context, point string)

	// ReplayTimeout bounds WaitReplay in HANDOVER (default 10 s): a target
	// that cannot catch up in that time makes the handover roll back.
	ReplayTimeout time.Duration
	// PrepareTimeout bounds each preparation before the hold (default 5 s):
	// the Target's PreparePromotion and the Router's Prepare; sessions not
	// prepared by then dial the target at their next transaction after the
	// switch.
	PrepareTimeout time.Duration
	// PromoteTimeout bounds Promote (default 30 s).
	PromoteTimeout time.Duration
	// CatchUpTimeout bounds CATCH-UP within one Run (default 10 min) where
	// the record sets none (Record.CatchUpTimeout).
	CatchUpTimeout time.Duration
	// TargetOutage is how long CATCH-UP keeps waiting while the Target's
	// Position fails with ErrUnreachable (default 60 s; negative: not at
	// all) before the migration fails and rolls back. A target agent
	// restarted meanwhile (an upgrade, a crash) then costs the migration
	// nothing: the standby keeps its copy and its slot's WAL.
	TargetOutage time.Duration
	// RetryBackoff is the pause before retrying a failed roll-forward or
	// rollback action, multiplied by the failure count (default 200 ms).
	RetryBackoff time.Duration
	// ProgressEvery is the minimum interval between Progress calls (default 200 ms).
	ProgressEvery time.Duration
}

func (e *Env) defaults() {
	if e.Hook == nil {
		e.Hook = func(context.Context, string) {}
	}
	if e.Now == nil {
		e.Now = time.Now
	}
	if e.PrepareTimeout == 0 {
		e.PrepareTimeout = 5 * time.Second
	}
	if e.ReplayTimeout == 0 {
		e.ReplayTimeout = 10 * time.Second
	}
	if e.PromoteTimeout == 0 {
		e.PromoteTimeout = 30 * time.Second
	}
	if e.CatchUpTimeout == 0 {
		e.CatchUpTimeout = 10 * time.Minute
	}
	if e.TargetOutage == 0 {
		e.TargetOutage = time.Minute
	}
	if e.RetryBackoff == 0 {
		e.RetryBackoff = 200 * time.Millisecond
	}
	if e.ProgressEvery == 0 {
		e.ProgressEvery = 200 * time.Millisecond
	}
	if e.Persist == nil {
		e.Persist = func(Record) error { return nil }
	}
	if e.LagPersistEvery == 0 {
		e.LagPersistEvery = 5 * time.Second
	}
}
