package migration

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// waitCatchUp sleeps a poll, then measures the standby's replay lag behind
// the source's flush LSN (LagReport; -1 unknown). A Target that is
// unreachable is waited through for Env.TargetOutage (outage); a lost slot
// fails at once; a lag still above a.MaxLag past the catch-up timeout
// fails.
func (r *runner) waitCatchUp(ctx context.Context, rec Record, a WaitCatchUp) Event {
	env, src := r.env, r.env.Source
	if r.catchUpStart.IsZero() {
		r.catchUpStart = env.Now()
		if n, ok := r.walRelayed(); ok {
			r.walAtCatchUp = n
		}
	}
	if err := sleep(ctx, a.Poll); err != nil {
		return failed(a, err)
	}
	flush, err := src.FlushLSN(ctx)
	if err != nil {
		return failed(a, err)
	}
	pos, err := env.Target.Position(ctx, rec)
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
	// An error (ErrUnsupported included) skips the check.
	if st, err := src.SlotStatus(ctx, rec.Slot); err == nil && (st == "lost" || st == "") {
		return failed(a, fmt.Errorf("replication slot %s is %s: the source removed WAL the standby needs (max_slot_wal_keep_size)", rec.Slot, orGone(st)))
	}
	lag := int64(-1)
	if pos.Replay != 0 {
		lag = max(int64(flush)-int64(pos.Replay), 0)
	}
	r.lag = lag
	if lag < 0 {
		// Until the standby is consistent its replay position is
		// unknown; the progress (and the control loop's catch-up
		// floor, which needs to see whether the relay keeps up) gets
		// the WAL it has not yet received instead — a lower bound.
		// The transition below still waits for the replay lag.
		if got, err := src.SlotRestartLSN(ctx, rec.Slot); err == nil && got != 0 {
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

func orGone(st string) string {
	if st == "" {
		return "gone"
	}
	return st
}
