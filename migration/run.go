package migration

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/sluicedb/sluice/internal/clock"
)

// ErrStuck is returned by Run when a roll-forward or rollback action failed
// MaxRetries times in a row: the record is persisted with RetryError set; run
// it again later (Run feeds Resumed).
var ErrStuck = errors.New("migration: stuck after repeated failures")

// ErrAborted is returned (wrapped, with the record's Error) by Run when the
// migration rolled back: the tenant still lives on the source.
var ErrAborted = errors.New("migration: rolled back")

// ErrUnreachable marks a Target error that says nothing about the migration:
// the target's agent did not answer (it is down or restarting, or the
// network failed) — the standby's postmaster, which outlives its agent, may
// be streaming all along. CATCH-UP waits through such errors for up to
// Env.TargetOutage before it fails; every other phase fails at once.
var ErrUnreachable = errors.New("target unreachable")

// persistDue reports whether rec, which ev turned prev into at now, must be
// stored, the last store having been at last: always, unless ev is a lag
// report that left the phase, the catch-up flag and the failure count as
// they were and every has not passed since last.
func persistDue(prev, rec Record, ev Event, now, last time.Time, every time.Duration) bool {
	if _, ok := ev.(LagReport); !ok || every < 0 {
		return true
	}
	if rec.Phase != prev.Phase || rec.CaughtUp != prev.CaughtUp || rec.Failures != 0 || prev.Failures != 0 {
		return true
	}
	return now.Sub(last) >= every
}

// Run drives a migration to its end: it feeds Start (a pending record) or
// Resumed (any other: Run is called again only after a restart or ErrStuck),
// then loops: persist the record, run the action Step returned, feed its event
// back. It returns the final record and nil (done), an error wrapping
// ErrAborted (rolled back; the source serves), ErrStuck, a Persist error, or
// ctx's error — in the last cases the persisted record is where a later Run
// resumes from.
func Run(ctx context.Context, rec Record, env Env) (Record, error) {
	env.defaults()
	r := &runner{env: env, catchUpStart: time.Time{}}
	var acts []Action
	if rec.Phase == PhasePending {
		rec, acts = Step(rec, Start{}, env.Now())
	} else {
		rec, acts = Step(rec, Resumed{}, env.Now())
	}
	var prev Record
	var ev Event
	var lastPersist time.Time
	var last Action // the action whose event was just stepped
	for {
		if now := env.Now(); ev == nil || persistDue(prev, rec, ev, now, lastPersist, env.LagPersistEvery) {
			if err := env.Persist(rec); err != nil {
				return rec, fmt.Errorf("migration: persist %s: %w", rec.ID, err)
			}
			lastPersist = now
		}
		if last != nil {
			env.Hook(ctx, "after:"+ActionName(last))
		}
		if len(acts) == 0 {
			switch rec.Phase {
			case PhaseDone:
				r.progress(rec, "", true)
				return rec, nil
			case PhaseAborted:
				r.progress(rec, "", true)
				return rec, fmt.Errorf("%w: %s", ErrAborted, rec.Error)
			}
			return rec, fmt.Errorf("%w: %s in phase %s: %s", ErrStuck, rec.ID, rec.Phase, rec.RetryError)
		}
		if err := ctx.Err(); err != nil {
			return rec, err
		}
		ev = nil
		select {
		case reason := <-env.Abort:
			ev = Abort{Reason: reason}
		default:
		}
		if ev == nil {
			if rec.Failures > 0 {
				if err := sleep(ctx, time.Duration(rec.Failures)*env.RetryBackoff); err != nil {
					return rec, err
				}
			}
			r.progress(rec, acts[0].String(), true)
			env.Hook(ctx, "before:"+ActionName(acts[0]))
			if err := ctx.Err(); err != nil {
				return rec, err
			}
			ev = r.execute(ctx, rec, acts[0])
			last = acts[0]
			if err := ctx.Err(); err != nil {
				return rec, err // interrupted: resume from the persisted record
			}
		}
		if _, ok := ev.(Abort); ok {
			last = nil
		}
		now := env.Now()
		if _, ok := ev.(Held); ok {
			now = r.holdAt // the freeze starts when the hold is asked for
		}
		prev = rec
		rec, acts = Step(rec, ev, now)
	}
}

// sleep is clock.Sleep: the driver's waits end with its context.
var sleep = clock.Sleep

type runner struct {
	env          Env
	catchUpStart time.Time
	walAtCatchUp int64 // the relay's byte count when CATCH-UP began (walRelayed)
	trend        lagTrend
	lastProgress time.Time
	copyStart    time.Time
	copyTotal    int64
	lag          int64
	holdAt       time.Time // when the Hold action asked the router to hold (after Prepare)
	unreachable  time.Time // CATCH-UP: since when the Target's Position has failed with ErrUnreachable; zero while it answers
	warning      string    // overrides the progress's Warning (the outage's) while set
	prepared     bool      // prepareHandover ran (at the start of WARM, else at the hold)
}

// ActionName is an action's name: the first word of its String ("fence",
// "stream-snapshot"), as Env.Hook's points use it.
func ActionName(a Action) string {
	name, _, _ := strings.Cut(a.String(), " ")
	return name
}

func failed(a Action, err error) Event { return Failed{Err: fmt.Sprintf("%s: %v", a, err)} }

// execute runs one action and returns its event. The phases' longer
// actions are in their own files: copy.go (snapshot, cold copy), catchup.go,
// warm.go, handover.go, cleanup.go (cleanup, reset, rollback).
func (r *runner) execute(ctx context.Context, rec Record, a Action) Event {
	env := r.env
	src, tgt := env.Source, env.Target
	switch a := a.(type) {
	case Reserve:
		dir, port, err := tgt.Reserve(ctx, rec)
		if err != nil {
			return failed(a, err)
		}
		return Reserved{Dir: dir, Port: port}
	case CreateSlot:
		lsn, err := src.CreateSlot(ctx, a.Slot)
		if err != nil {
			return failed(a, err)
		}
		return SlotCreated{LSN: lsn}
	case StreamSnapshot:
		return r.streamSnapshot(ctx, rec, a)
	case StartStandby:
		if err := tgt.StartStandby(ctx, rec, src.PrimaryConnInfo(), a.Slot); err != nil {
			return failed(a, err)
		}
		return StandbyStarted{}
	case WaitCatchUp:
		return r.waitCatchUp(ctx, rec, a)
	case Warm:
		return r.warm(ctx, rec, a)
	case Hold:
		return r.hold(ctx, rec, a)
	case ReadFlushLSN:
		lsn, err := src.FlushLSN(ctx)
		if err != nil {
			return failed(a, err)
		}
		return FlushRead{LSN: lsn}
	case Fence:
		if err := r.routerHolds(ctx, rec, a); err != nil {
			return failed(a, err)
		}
		lsn, err := src.Fence(ctx, a.Mode, a.Spare)
		if err != nil {
			return failed(a, err)
		}
		return Fenced{LSN: lsn}
	case CopyCold:
		return r.copyCold(ctx, rec, a)
	case WaitReplay:
		wctx, cancel := context.WithTimeout(ctx, env.ReplayTimeout)
		defer cancel()
		got, err := tgt.WaitReplay(wctx, rec, a.LSN)
		if err != nil {
			return failed(a, err)
		}
		return Replayed{LSN: got}
	case Promote:
		return r.promote(ctx, rec, a)
	case Switch:
		addr := tgt.Addr(rec)
		if addr == "" {
			return failed(a, errors.New("target has no address"))
		}
		if err := env.Router.Switch(ctx, rec.Tenant, addr); err != nil {
			return failed(a, err)
		}
		return Switched{Addr: addr}
	case Release:
		at, err := env.Router.Release(ctx, rec.Tenant)
		if err != nil {
			return failed(a, err)
		}
		return Released{At: at}
	case Cleanup:
		return r.cleanup(ctx, rec, a)
	case ResetSnapshot:
		return r.resetSnapshot(ctx, rec, a)
	case Rollback:
		return r.rollback(ctx, rec, a)
	}
	return Failed{Err: fmt.Sprintf("unknown action %T", a)}
}
