package agent

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"time"

	"github.com/sluicedb/sluice/catalog"
	"github.com/sluicedb/sluice/migration"
)

// driverLock names the catalog lock a migration's driver holds: one per
// tenant, so that one driver at a time, among every agent sharing the
// catalog, moves a tenant.
func driverLock(tenant int64) string { return "tenant/" + strconv.FormatInt(tenant, 10) }

// lockLost reports whether a driver lost its lock: Lost closed, or err (a
// catalog write's, or Run's wrapping one) is catalog.ErrNotOwner.
func lockLost(lk *catalog.Lock, err error) bool {
	if errors.Is(err, catalog.ErrNotOwner) {
		return true
	}
	select {
	case <-lk.Lost():
		return true
	default:
		return false
	}
}

// resumeMigrations restarts the drivers of source-side migrations left
// unfinished by a previous run; migration.Run feeds them Resumed, which
// resumes or rolls back per the migration package's rules. Each driver
// first takes the tenant's lock (driverLock): a lock still held elsewhere
// (the previous process's etcd lease has not expired yet) is waited for in
// the background, and the record is read again once it is held — the
// previous driver may have written it until then.
func (a *Agent) resumeMigrations(ctx context.Context) {
	ms, err := a.cat.Migrations()
	if err != nil {
		a.log.Error("resume: reading catalog", "err", err)
		return
	}
	for _, cm := range ms {
		if cm.Done || cm.Role != catalog.Source {
			continue
		}
		lk, err := a.cat.TryLock(ctx, driverLock(cm.TenantID))
		if err == nil {
			a.resumeMigration(lk, cm.ID)
			continue
		}
		if !errors.Is(err, catalog.ErrLocked) {
			a.log.Error("resume: lock", "migration", cm.ID, "err", err)
			continue
		}
		a.log.Warn("resume: the tenant's driver lock is held (a previous driver's lease has not ended); waiting for it", "migration", cm.ID)
		a.mig.wg.Add(1)
		go func() {
			defer a.mig.wg.Done()
			lk, err := a.cat.Lock(ctx, driverLock(cm.TenantID))
			if err != nil {
				if ctx.Err() == nil {
					a.log.Error("resume: lock", "migration", cm.ID, "err", err)
				}
				return
			}
			a.resumeMigration(lk, cm.ID)
		}()
	}
}

// resumeMigration resumes migration id under its driver's lock lk (the
// driver releases it when it ends; every other path here releases it).
func (a *Agent) resumeMigration(lk *catalog.Lock, id string) {
	launched := false
	defer func() {
		if !launched {
			lk.Unlock(context.Background())
		}
	}()
	cm, err := a.cat.Migration(id)
	if err != nil {
		a.log.Error("resume: migration", "migration", id, "err", err)
		return
	}
	if cm.Done {
		return
	}
	var rec migration.Record
	if err := json.Unmarshal(cm.Record, &rec); err != nil {
		a.log.Error("resume: bad record", "migration", cm.ID, "err", err)
		return
	}
	tn, err := a.cat.Tenant(cm.TenantID)
	if err != nil {
		a.log.Error("resume: tenant", "migration", cm.ID, "err", err)
		return
	}
	if rec.Phase.Terminal() {
		a.finish(lk, cm, rec, nil, 0, 0)
		return
	}
	src, err := a.source(tn)
	if err != nil {
		a.log.Error("resume: source", "migration", cm.ID, "err", err)
		return
	}
	pc, err := a.peerClient(cm.PeerURL)
	if err != nil {
		a.log.Error("resume: target", "migration", cm.ID, "err", err)
		return
	}
	a.log.Warn("resuming migration", "migration", cm.ID, "phase", rec.Phase)
	launched = true
	a.launch(lk, cm, rec, src, a.remoteTarget(pc, tn))
}

// retakeMigration takes migration id up again after its driver lost the
// tenant's lock (its etcd lease ended, e.g. while this agent was cut off
// from the catalog): it waits for the lock — retrying, with a growing
// pause up to 30 s, while etcd cannot be reached — and resumes from the
// catalog's record as a restart would (resumeMigration): whatever the lost
// driver could not write is not in it, and the migration package's rules
// resume or roll back from there. Another driver that took the migration
// meanwhile holds the lock until it ends; the record then says done and
// nothing is resumed. It returns when the agent stops.
func (a *Agent) retakeMigration(tenant int64, id string) {
	ctx := a.mig.base
	for pause := time.Second; ; pause = min(2*pause, 30*time.Second) {
		lk, err := a.cat.Lock(ctx, driverLock(tenant))
		if err == nil {
			a.resumeMigration(lk, id)
			return
		}
		if ctx.Err() != nil {
			return
		}
		a.log.Warn("migration: taking the tenant's driver lock again", "migration", id, "err", err, "retry_in", pause)
		select {
		case <-ctx.Done():
			return
		case <-time.After(pause):
		}
	}
}
