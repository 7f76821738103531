package migration

import (
	"context"
	"errors"
	"fmt"
)

// cleanup ends a migration that moved the tenant: the slot dropped (when
// a.DropSlot), the source retired, the target committed.
func (r *runner) cleanup(ctx context.Context, rec Record, a Cleanup) Event {
	src := r.env.Source
	if a.DropSlot {
		if err := src.DropSlot(ctx, rec.Slot); err != nil {
			return failed(a, err)
		}
	}
	if err := src.Retire(ctx); err != nil {
		return failed(a, err)
	}
	if err := r.env.Target.Commit(ctx, rec); err != nil {
		return failed(a, err)
	}
	return CleanedUp{}
}

// resetSnapshot throws away the target's copy (and the slot, when
// a.DropSlot) so that SNAPSHOT starts again.
func (r *runner) resetSnapshot(ctx context.Context, rec Record, a ResetSnapshot) Event {
	if err := r.env.Target.Abort(ctx, rec); err != nil {
		return failed(a, err)
	}
	if a.DropSlot {
		if err := r.env.Source.DropSlot(ctx, rec.Slot); err != nil {
			return failed(a, err)
		}
	}
	return SnapshotReset{}
}

// rollback undoes what a.* says was done, trying every step even when one
// fails; the tenant then lives on the source as before.
func (r *runner) rollback(ctx context.Context, rec Record, a Rollback) Event {
	env, src := r.env, r.env.Source
	r.unpaceWAL(false)
	var errs []error
	if a.AbortFirst {
		if err := env.Target.Abort(ctx, rec); err != nil {
			return failed(a, fmt.Errorf("stopping the target before unfencing the source: %w", err))
		}
		a.AbortTarget = false
	}
	if a.Unfence {
		errs = append(errs, src.Unfence(ctx))
	}
	if a.SwitchBack {
		errs = append(errs, env.Router.Switch(ctx, rec.Tenant, src.Addr()))
	}
	if a.Release {
		_, err := env.Router.Release(ctx, rec.Tenant)
		errs = append(errs, err)
	}
	if a.AbortTarget {
		errs = append(errs, env.Target.Abort(ctx, rec))
	}
	if a.DropSlot {
		errs = append(errs, src.DropSlot(ctx, rec.Slot))
	}
	if err := errors.Join(errs...); err != nil {
		return failed(a, err)
	}
	return RolledBack{}
}
