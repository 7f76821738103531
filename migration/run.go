package migration

import (
	"context"
	"errors"
	"fmt"
	"time"
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

// Progress is what Run reports while it works.
type Progress struct {
	ID         string        `json:"id"`
	Phase      Phase         `json:"phase"`
	Action     string        `json:"action"`
	BytesDone  int64         `json:"bytes_done"`  // of the current copy (snapshot, cold copy, warm)
	BytesTotal int64         `json:"bytes_total"` // estimate; 0 unknown
	Rate       float64       `json:"rate"`        // bytes/s over the current copy so far; in CATCH-UP, WAL shipped since the phase began
	ETA        time.Duration `json:"eta_ns"`      // copy: at Rate; CATCH-UP: at the lag's fitted pace (catchUpOutlook); 0 unknown
	LagBytes   int64         `json:"lag_bytes"`   // standby replay lag; -1 unknown
	// Warning, when set, says in one line that CATCH-UP will not end
	// before its timeout (Record.CatchUpTimeout, else Env.CatchUpTimeout)
	// rolls the migration back, at the lag's pace (catchUpOutlook); it
	// clears when the pace recovers.
	Warning string `json:"warning,omitempty"`
}

// Env is what Run works with. Source, Target and Router are required.
type Env struct {
	Source Source
	Target Target
	Router Router
	// Limiter paces SNAPSHOT and WARM (bytes). The control loop changes its
	// rate while Run works: give the same *throttle.Limiter to a loop.Loop as
	// its Send throttle (see TestControlLoopPacesSnapshot); nil is unpaced.
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
	for {
		if now := env.Now(); ev == nil || persistDue(prev, rec, ev, now, lastPersist, env.LagPersistEvery) {
			if err := env.Persist(rec); err != nil {
				return rec, fmt.Errorf("migration: persist %s: %w", rec.ID, err)
			}
			lastPersist = now
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
			ev = r.execute(ctx, rec, acts[0])
			if err := ctx.Err(); err != nil {
				return rec, err // interrupted: resume from the persisted record
			}
		}
		now := env.Now()
		if _, ok := ev.(Held); ok {
			now = r.holdAt // the freeze starts when the hold is asked for
		}
		prev = rec
		rec, acts = Step(rec, ev, now)
	}
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

type runner struct {
	env          Env
	catchUpStart time.Time
	walAtCatchUp int64 // the relay's byte count when CATCH-UP began (walCounter)
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

// prepareHandover readies the target for the switch: the Target's
// PreparePromotion (the new timeline's WAL) and the Router's Prepare (a
// server session on the target for every client session). Both cost the
// target's CPU and disk (backend forks, parsing, segment writes), so they
// run at the start of WARM, while the clients are still on the source and
// that load costs them nothing, not just before the freeze, where it met
// the clients arriving after the switch. (Measured, 2026-11-24: the first second after a release, 30–180
// ms on the testbed, did not change; it is the freeze's backlog draining —
// docs/benchmarks.md, eleventh round.) Without WARM they run at the hold.
// Failures are not fatal: the server creates its segments itself and
// sessions dial the target lazily. The error is ctx's, when it ended.
func (r *runner) prepareHandover(ctx context.Context, rec Record) error {
	env, tgt := r.env, r.env.Target
	r.prepared = true
	if rec.Mode != Live {
		return nil
	}
	if pp, ok := tgt.(PromotionPreparer); ok {
		pctx, cancel := context.WithTimeout(ctx, env.PrepareTimeout)
		err := pp.PreparePromotion(pctx, rec)
		cancel()
		if err != nil && ctx.Err() != nil {
			return err
		}
	}
	if pr, ok := env.Router.(Preparer); ok {
		if addr := tgt.Addr(rec); addr != "" {
			pctx, cancel := context.WithTimeout(ctx, env.PrepareTimeout)
			err := pr.Prepare(pctx, rec.Tenant, addr)
			cancel()
			if err != nil && ctx.Err() != nil {
				return err
			}
		}
	}
	return nil
}

// fenceEarly asks a live migration's source to fence early (EarlyFencer),
// admitting the router's own backends (BackendLister), when both can. Only
// a cancelled ctx is an error: otherwise the handover's Fence does it all.
func (r *runner) fenceEarly(ctx context.Context, rec Record) error {
	ef, ok := r.env.Source.(EarlyFencer)
	bl, ok2 := r.env.Router.(BackendLister)
	if !ok || !ok2 || rec.Mode != Live || rec.Fence != FenceReadOnly {
		return nil
	}
	pctx, cancel := context.WithTimeout(ctx, r.env.PrepareTimeout)
	defer cancel()
	pids, err := bl.Backends(pctx, rec.Tenant)
	if err == nil {
		err = ef.FenceEarly(pctx, pids)
	}
	if err != nil && ctx.Err() != nil {
		return err
	}
	return nil
}

func (r *runner) progress(rec Record, action string, force bool) {
	r.progressBytes(rec, action, 0, force)
}

// progressBytes reports the phase, the lag and, for a copy, done bytes of
// it with their rate and ETA; at most every ProgressEvery unless forced. In
// CATCH-UP, with a walCounter source, the rate is the WAL shipped per
// second since the phase began (the snapshot's bytes no longer move, so
// their rate would read 0), and the ETA and Warning are the lag trend's.
func (r *runner) progressBytes(rec Record, action string, done int64, force bool) {
	if r.env.Progress == nil {
		return
	}
	now := r.env.Now()
	if !force && now.Sub(r.lastProgress) < r.env.ProgressEvery {
		return
	}
	r.lastProgress = now
	p := Progress{ID: rec.ID, Phase: rec.Phase, Action: action, BytesDone: done, BytesTotal: r.copyTotal, LagBytes: rec.LagBytes}
	if r.lag != 0 {
		p.LagBytes = r.lag
	}
	if done > 0 && !r.copyStart.IsZero() {
		if el := now.Sub(r.copyStart).Seconds(); el > 0 {
			p.Rate = float64(done) / el
			if p.Rate > 0 && r.copyTotal > done {
				p.ETA = time.Duration(float64(r.copyTotal-done) / p.Rate * float64(time.Second))
			}
		}
	}
	if rec.Phase == PhaseCatchUp && !r.catchUpStart.IsZero() {
		if wc, ok := r.walRelay().(walCounter); ok {
			p.Rate = shipRate(wc.WALRelayed()-r.walAtCatchUp, now.Sub(r.catchUpStart))
		}
		p.ETA, p.Warning = catchUpOutlook(&r.trend, p.LagBytes, rec.CatchUpBytes, r.catchUpStart.Add(r.catchUpTimeout(rec)).Sub(now))
	}
	if r.warning != "" {
		p.Warning = r.warning
	}
	r.env.Progress(p)
}

// outage reports whether err (from the Target, in CATCH-UP) is an outage
// to wait through, and for how long the Target has been unreachable: true
// while ErrUnreachable errors have lasted at most Env.TargetOutage.
func (r *runner) outage(err error) (time.Duration, bool) {
	if !errors.Is(err, ErrUnreachable) || r.env.TargetOutage < 0 {
		return 0, false
	}
	now := r.env.Now()
	if r.unreachable.IsZero() {
		r.unreachable = now
	}
	d := now.Sub(r.unreachable)
	return d, d <= r.env.TargetOutage
}

// catchUpTimeout is rec's catch-up timeout, else the Env's.
func (r *runner) catchUpTimeout(rec Record) time.Duration {
	if rec.CatchUpTimeout > 0 {
		return rec.CatchUpTimeout
	}
	return r.env.CatchUpTimeout
}

// shipRate is n bytes over d, bytes/s; 0 for no time or no bytes.
func shipRate(n int64, d time.Duration) float64 {
	if n <= 0 || d <= 0 {
		return 0
	}
	return float64(n) / d.Seconds()
}

func failed(a Action, err error) Event { return Failed{Err: fmt.Sprintf("%s: %v", a, err)} }

// execute runs one action and returns its event.
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
		if si, err := src.Info(ctx); err == nil {
			r.copyTotal = si.DataBytes
		}
		r.copyStart = env.Now()
		w, err := tgt.OpenSnapshot(ctx, rec)
		if err != nil {
			return failed(a, err)
		}
		info, err := src.SendSnapshot(ctx, w, env.Limiter, func(n int64) { r.progressBytes(rec, a.String(), n, false) })
		if cerr := w.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return failed(a, err)
		}
		return SnapshotDone{Bytes: info.Bytes, StartLSN: info.StartLSN, Checkpoint: info.Checkpoint, StartSeconds: info.StartSeconds}
	case StartStandby:
		if err := tgt.StartStandby(ctx, rec, src.PrimaryConnInfo(), a.Slot); err != nil {
			return failed(a, err)
		}
		return StandbyStarted{}
	case WaitCatchUp:
		if r.catchUpStart.IsZero() {
			r.catchUpStart = env.Now()
			if wc, ok := r.walRelay().(walCounter); ok {
				r.walAtCatchUp = wc.WALRelayed()
			}
		}
		if err := sleep(ctx, a.Poll); err != nil {
			return failed(a, err)
		}
		flush, err := src.FlushLSN(ctx)
		if err != nil {
			return failed(a, err)
		}
		pos, err := tgt.Position(ctx, rec)
		if err != nil {
			out, ok := r.outage(err)
			if ok {
				r.warning = fmt.Sprintf("target unreachable for %s (rolls back after %s): %v", out.Round(time.Second), env.TargetOutage, err)
				r.progress(rec, a.String(), false)
				return LagReport{Bytes: -1} // unknown until it answers
			}
			if out > 0 {
				err = fmt.Errorf("%w (for %s)", err, out.Round(time.Second))
			}
			return failed(a, err)
		}
		r.unreachable, r.warning = time.Time{}, ""
		if sc, ok := src.(slotChecker); ok {
			if st, err := sc.SlotStatus(ctx, rec.Slot); err == nil && (st == "lost" || st == "") {
				return failed(a, fmt.Errorf("replication slot %s is %s: the source removed WAL the standby needs (max_slot_wal_keep_size)", rec.Slot, orGone(st)))
			}
		}
		lag := int64(-1)
		if pos.Replay != 0 {
			lag = max(int64(flush)-int64(pos.Replay), 0)
		}
		r.lag = lag
		if sp, ok := src.(slotPositioner); ok && lag < 0 {
			// Until the standby is consistent its replay position is
			// unknown; the progress (and the control loop's catch-up
			// floor, which needs to see whether the relay keeps up) gets
			// the WAL it has not yet received instead — a lower bound.
			// The transition below still waits for the replay lag.
			if got, err := sp.SlotRestartLSN(ctx, rec.Slot); err == nil && got != 0 {
				r.lag = max(int64(flush)-int64(got), 0)
			}
		}
		if rec.Phase == PhaseCatchUp {
			r.trend.add(env.Now(), r.lag, lag >= 0)
		}
		r.progress(rec, a.String(), false)
		if lag < 0 || lag > a.MaxLag {
			if to := r.catchUpTimeout(rec); env.Now().Sub(r.catchUpStart) > to {
				return failed(a, fmt.Errorf("replay lag still %d bytes after %s (the catch-up timeout)", lag, to))
			}
		}
		return LagReport{Bytes: lag}
	case Warm:
		return r.warm(ctx, rec, a)
	case Hold:
		if !r.prepared {
			if err := r.prepareHandover(ctx, rec); err != nil {
				return failed(a, err)
			}
		}
		r.prepared = false // a handover that rolls back prepares again
		if u, ok := r.walRelay().(walUnpacer); ok {
			u.UnpaceWAL(true) // the freeze waits for the WAL: relay it at full speed
		}
		r.holdAt = env.Now() // the freeze starts here: Prepare held nothing
		if ih, ok := env.Router.(IdleHolder); ok {
			idle, err := ih.HoldIdle(ctx, rec.Tenant, a.Deadline)
			if err != nil {
				return failed(a, err)
			}
			return Held{Idle: idle}
		}
		if err := env.Router.Hold(ctx, rec.Tenant, a.Deadline); err != nil {
			return failed(a, err)
		}
		return Held{}
	case ReadFlushLSN:
		lsn, err := src.FlushLSN(ctx)
		if err != nil {
			return failed(a, err)
		}
		return FlushRead{LSN: lsn}
	case Fence:
		lsn, err := src.Fence(ctx, a.Mode, a.Spare)
		if err != nil {
			return failed(a, err)
		}
		return Fenced{LSN: lsn}
	case CopyCold:
		r.copyStart = env.Now()
		w, err := tgt.OpenSnapshot(ctx, rec)
		if err != nil {
			return failed(a, err)
		}
		n, err := src.SendCold(ctx, w, nil, func(n int64) { r.progressBytes(rec, a.String(), n, false) })
		if cerr := w.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return failed(a, err)
		}
		return Copied{Bytes: n}
	case WaitReplay:
		wctx, cancel := context.WithTimeout(ctx, env.ReplayTimeout)
		defer cancel()
		got, err := tgt.WaitReplay(wctx, rec, a.LSN)
		if err != nil {
			return failed(a, err)
		}
		return Replayed{LSN: got}
	case Promote:
		pctx, cancel := context.WithTimeout(ctx, env.PromoteTimeout)
		defer cancel()
		if rec.Mode == StopAndCopy {
			if err := tgt.StartStandby(pctx, rec, "", ""); err != nil {
				return failed(a, err)
			}
		}
		if err := tgt.Promote(pctx, rec); err != nil {
			return failed(a, err)
		}
		return Promoted{}
	case Switch:
		addr := tgt.Addr(rec)
		if addr == "" {
			return failed(a, errors.New("target has no address"))
		}
		if err := env.Router.Switch(ctx, rec.Tenant, addr); err != nil {
			return failed(a, err)
		}
		return Switched{}
	case Release:
		if rt, ok := env.Router.(ReleaseTimer); ok {
			at, err := rt.ReleaseAt(ctx, rec.Tenant)
			if err != nil {
				return failed(a, err)
			}
			return Released{At: at}
		}
		if err := env.Router.Release(ctx, rec.Tenant); err != nil {
			return failed(a, err)
		}
		return Released{}
	case Cleanup:
		if a.DropSlot {
			if err := src.DropSlot(ctx, rec.Slot); err != nil {
				return failed(a, err)
			}
		}
		if err := src.Retire(ctx); err != nil {
			return failed(a, err)
		}
		if err := tgt.Commit(ctx, rec); err != nil {
			return failed(a, err)
		}
		return CleanedUp{}
	case ResetSnapshot:
		if err := tgt.Abort(ctx, rec); err != nil {
			return failed(a, err)
		}
		if a.DropSlot {
			if err := src.DropSlot(ctx, rec.Slot); err != nil {
				return failed(a, err)
			}
		}
		return SnapshotReset{}
	case Rollback:
		if u, ok := r.walRelay().(walUnpacer); ok {
			u.UnpaceWAL(false)
		}
		var errs []error
		if a.Unfence {
			errs = append(errs, src.Unfence(ctx))
		}
		if a.SwitchBack {
			errs = append(errs, env.Router.Switch(ctx, rec.Tenant, src.Addr()))
		}
		if a.Release {
			errs = append(errs, env.Router.Release(ctx, rec.Tenant))
		}
		if a.AbortTarget {
			errs = append(errs, tgt.Abort(ctx, rec))
		}
		if a.DropSlot {
			errs = append(errs, src.DropSlot(ctx, rec.Slot))
		}
		if err := errors.Join(errs...); err != nil {
			return failed(a, err)
		}
		return RolledBack{}
	}
	return Failed{Err: fmt.Sprintf("unknown action %T", a)}
}

// slotChecker is implemented by Sources that can report their slot's state
// (LocalSource): CATCH-UP fails at once when the slot is lost.
type slotChecker interface {
	SlotStatus(ctx context.Context, name string) (string, error)
}

// walUnpacer is implemented by the side whose CATCH-UP WAL stream it paces
// (LocalSource's relay, or a target's: WALRelayHost): HANDOVER lifts the
// pacing from the hold on, Rollback restores it.
type walUnpacer interface {
	UnpaceWAL(on bool)
}

// walCounter is implemented by the side whose CATCH-UP WAL stream goes
// through a relay that counts it (LocalSource, or a WALRelayHost target):
// the progress's rate in CATCH-UP is then the WAL shipped per second.
type walCounter interface {
	WALRelayed() int64
}

// WALRelayHost is an optional Target extension: a target that relays and
// paces the standby's WAL stream itself (a remote target's agent, in front
// of its standby), so that the relay's CPU is the target host's, not the
// source's. When RelaysWAL is true the runner unpaces and counts the WAL
// through the Target (walUnpacer, walCounter) instead of the Source, and
// the Source should relay nothing (the target dials its postmaster).
type WALRelayHost interface {
	RelaysWAL() bool
	UnpaceWAL(on bool)
	WALRelayed() int64
}

// walRelay is the side that relays the standby's WAL stream: the Target
// when it says so (WALRelayHost), else the Source.
func (r *runner) walRelay() any {
	if h, ok := r.env.Target.(WALRelayHost); ok && h.RelaysWAL() {
		return h
	}
	return r.env.Source
}

// slotPositioner is implemented by Sources that can report how far the
// standby has received through their slot (LocalSource).
type slotPositioner interface {
	SlotRestartLSN(ctx context.Context, name string) (LSN, error)
}

func orGone(st string) string {
	if st == "" {
		return "gone"
	}
	return st
}

// WarmBatchBlocks is how many blocks one Target.Prewarm call loads (128 = 1 MiB).
const WarmBatchBlocks = 128

// blockSize is PostgreSQL's default page size (bytes).
const blockSize = 8192

func (r *runner) warm(ctx context.Context, rec Record, a Warm) Event {
	if !r.prepared {
		if err := r.prepareHandover(ctx, rec); err != nil {
			return failed(a, err)
		}
	}
	if err := r.fenceEarly(ctx, rec); err != nil {
		return failed(a, err)
	}
	r.lag = -1 // not measured while warming; WaitCatchUp measures it again after
	blocks, err := r.env.Source.BufferBlocks(ctx)
	if err != nil {
		return failed(a, err)
	}
	r.copyStart, r.copyTotal = r.env.Now(), int64(len(blocks))*blockSize
	var done int64
	for i := 0; i < len(blocks); i += WarmBatchBlocks {
		batch := blocks[i:min(i+WarmBatchBlocks, len(blocks))]
		n := len(batch) * blockSize
		if r.env.Limiter != nil {
			for left := n; left > 0; left -= ChunkBytes {
				if err := r.env.Limiter.WaitN(ctx, min(left, ChunkBytes)); err != nil {
					return failed(a, err)
				}
			}
		}
		if err := r.env.Target.Prewarm(ctx, rec, batch); err != nil {
			return failed(a, err)
		}
		done += int64(n)
		r.progressBytes(rec, a.String(), done, false)
	}
	return Warmed{Blocks: len(blocks), Bytes: done}
}
