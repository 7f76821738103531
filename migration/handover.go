package migration

import (
	"context"
	"errors"
	"fmt"
)

// prepareHandover readies the target for the switch: the Target's
// PreparePromotion (the new timeline's WAL) and the Router's Prepare (a
// server session on the target for every client session). Both cost the
// target's CPU and disk (backend forks, parsing, segment writes), so in a
// live migration they run at the start of WARM, while the clients are still
// on the source and that load costs them nothing, rather than just before
// the freeze, where it would meet the clients arriving after the switch.
// Without WARM they run at the hold. Failures (ErrUnsupported included)
// are not fatal: the server creates its segments itself and sessions dial
// the target lazily. The error is ctx's, when it ended.
func (r *runner) prepareHandover(ctx context.Context, rec Record) error {
	env, tgt := r.env, r.env.Target
	r.prepared = true
	if rec.Mode != Live {
		return nil
	}
	pctx, cancel := context.WithTimeout(ctx, env.PrepareTimeout)
	err := tgt.PreparePromotion(pctx, rec)
	cancel()
	if err != nil && ctx.Err() != nil {
		return err
	}
	if addr := tgt.Addr(rec); addr != "" {
		pctx, cancel := context.WithTimeout(ctx, env.PrepareTimeout)
		err := env.Router.Prepare(pctx, rec.Tenant, addr)
		cancel()
		if err != nil && ctx.Err() != nil {
			return err
		}
	}
	return nil
}

// routerHolds checks, before a live read-only fence, that the router still
// holds the tenant: the fence spares the backends the hold named idle and,
// after an early fence, admits the router's address until its late reload —
// both count on the router sending nothing. A router that lost its hold (it
// restarted) fails the handover, which rolls back; one that cannot say
// (ErrUnsupported) is trusted.
func (r *runner) routerHolds(ctx context.Context, rec Record, a Fence) error {
	if rec.Mode != Live || a.Mode != FenceReadOnly {
		return nil
	}
	held, err := r.env.Router.Holding(ctx, rec.Tenant)
	switch {
	case errors.Is(err, ErrUnsupported):
		return nil
	case err != nil:
		return fmt.Errorf("router: %w", err)
	case !held:
		return errors.New("the router no longer holds the tenant (restarted?): a write it let through could land after the fence")
	}
	return nil
}

// fenceEarly asks a live migration's source to fence early
// (Source.FenceEarly), admitting the router's own backends
// (Router.Backends). Only a cancelled ctx is an error: otherwise, when
// either is unsupported or fails, the handover's Fence does it all.
func (r *runner) fenceEarly(ctx context.Context, rec Record) error {
	if rec.Mode != Live || rec.Fence != FenceReadOnly {
		return nil
	}
	pctx, cancel := context.WithTimeout(ctx, r.env.PrepareTimeout)
	defer cancel()
	pids, err := r.env.Router.Backends(pctx, rec.Tenant)
	if err == nil {
		err = r.env.Source.FenceEarly(pctx, pids)
	}
	if err != nil && ctx.Err() != nil {
		return err
	}
	return nil
}

// hold starts the freeze: it prepares the handover if WARM did not, lifts
// the WAL relay's pacing and asks the router to hold, recording the backends
// it holds idle (which the fence spares).
func (r *runner) hold(ctx context.Context, rec Record, a Hold) Event {
	if !r.prepared {
		if err := r.prepareHandover(ctx, rec); err != nil {
			return failed(a, err)
		}
	}
	r.prepared = false     // a handover that rolls back prepares again
	r.unpaceWAL(true)      // the freeze waits for the WAL: relay it at full speed
	r.holdAt = r.env.Now() // the freeze starts here: Prepare held nothing
	idle, err := r.env.Router.Hold(ctx, rec.Tenant, a.Deadline)
	if err != nil {
		return failed(a, err)
	}
	return Held{Idle: idle}
}

// promote promotes the target within Env.PromoteTimeout; a stop-and-copy
// target is first started (as a primary).
func (r *runner) promote(ctx context.Context, rec Record, a Promote) Event {
	pctx, cancel := context.WithTimeout(ctx, r.env.PromoteTimeout)
	defer cancel()
	if rec.Mode == StopAndCopy {
		if err := r.env.Target.StartStandby(pctx, rec, "", ""); err != nil {
			return failed(a, err)
		}
	}
	if err := r.env.Target.Promote(pctx, rec); err != nil {
		return failed(a, err)
	}
	return Promoted{}
}

// unpaceWAL lifts (on) or restores (off) the pacing of the relay that
// carries the standby's WAL: the Target's, else (ErrUnsupported) the
// Source's. Best effort.
func (r *runner) unpaceWAL(on bool) {
	if err := r.env.Target.UnpaceWAL(on); errors.Is(err, ErrUnsupported) {
		r.env.Source.UnpaceWAL(on)
	}
}
