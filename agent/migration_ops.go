package agent

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"time"

	"github.com/sluicedb/sluice/agent/client"
	"github.com/sluicedb/sluice/catalog"
	"github.com/sluicedb/sluice/internal/clock"
	"github.com/sluicedb/sluice/migration"
)

// The operator's side of migrations: listing them with their live progress,
// changing a running one's rate, aborting it, and its deadline.

// Migrations lists this agent's migrations (both roles), oldest first.
func (a *Agent) Migrations() ([]client.Migration, error) {
	ms, err := a.cat.Migrations()
	if err != nil {
		return nil, err
	}
	out := []client.Migration{}
	for _, m := range ms {
		out = append(out, a.migrationView(m))
	}
	return out, nil
}

// Migration returns one migration with its live progress.
func (a *Agent) Migration(id string) (client.Migration, error) {
	m, err := a.cat.Migration(id)
	if err != nil {
		return client.Migration{}, errf(http.StatusNotFound, "unknown migration %q on agent %s", id, a.cfg.Name)
	}
	return a.migrationView(m), nil
}

func (a *Agent) migrationView(m catalog.Migration) client.Migration {
	v := client.Migration{ID: m.ID, Tenant: m.TenantID, Role: string(m.Role), Peer: m.Peer, PeerURL: m.PeerURL, Mode: m.Mode,
		Done: m.Done, Outcome: m.Outcome, Error: m.Error, Record: m.Record, Created: m.Created, Updated: m.Updated, WALEarlyBytes: m.WALEarly}
	var rec migration.Record
	json.Unmarshal(m.Record, &rec)
	v.Progress = client.Progress{Phase: string(rec.Phase), LagBytes: rec.LagBytes, ETASeconds: -1, Limit: m.Rate, Bytes: max(rec.SnapshotBytes+rec.CopyBytes, m.Moved)}
	if !m.Done && rec.RetryError != "" {
		v.Progress.Waiting = waiting(rec)
	}
	if r := a.mig.get(m.ID); r != nil {
		controlView(r, &v.Progress)
		r.mu.Lock()
		p, ckpt := r.prog, r.checkpointing
		r.mu.Unlock()
		if p.Phase != "" {
			v.Progress.Phase = string(p.Phase)
		}
		if p.BytesDone > 0 {
			// A phase that counts its own bytes (the snapshot's stream,
			// the warm's reload) and its total; the others report the
			// bytes moved so far with no total (the last counting phase's
			// total would read "232 MB of 34 MB").
			v.Progress.Bytes, v.Progress.TotalBytes = p.BytesDone, p.BytesTotal
		}
		v.Progress.Rate = p.Rate
		v.Progress.ETASeconds = viewETA(p, r.lim.Rate())
		if p.LagBytes != 0 {
			v.Progress.LagBytes = p.LagBytes
		}
		v.Progress.Action, v.Progress.Warning = p.Action, p.Warning
		if ckpt != "" && p.Phase == migration.PhaseSnapshot {
			v.Progress.Action = "checkpoint " + ckpt
		}
		paused, l := r.send.state()
		v.Progress.Paused = paused
		if !math.IsInf(l, 1) {
			v.Progress.Limit = l
		} else {
			v.Progress.Limit = 0
		}
		v.Progress.Elapsed = time.Since(r.started).Seconds()
	}
	if m.Done {
		s := &client.Summary{Outcome: m.Outcome, Bytes: max(rec.SnapshotBytes+rec.CopyBytes, m.Moved)}
		if !rec.Finished.IsZero() {
			s.Seconds = rec.Finished.Sub(rec.Created).Seconds()
		}
		ms := float64(rec.Freeze) / float64(time.Millisecond)
		if rec.Mode == migration.StopAndCopy {
			s.DowntimeMS = ms
		}
		s.FreezeMS = ms
		s.Checkpoint, s.CheckpointSeconds = rec.SnapshotCheckpoint, rec.SnapshotStartSeconds
		if rec.Mode != migration.StopAndCopy && m.Role == catalog.Source {
			s.WALRelay, s.WALBytes = cmp.Or(m.WALRelay, client.WALRelayTarget), m.WALBytes
		}
		v.Summary = s
		v.Progress.Bytes = s.Bytes
	}
	return v
}

// viewETA is a running migration's ETA for the API, seconds; -1 = unknown.
// p is the driver's last progress, whose ETA (0 = unknown) is a copy's at
// its average rate so far, and limit the throttle's rate now, bytes/s
// (+Inf: none). A throttle lowered under that average stretches a copy's
// ETA to its remaining bytes at the throttle's rate; a throttle under
// client.MinRate (a control loop holding the copy) stalls it: no ETA.
func viewETA(p migration.Progress, limit float64) float64 {
	if p.ETA <= 0 {
		return -1
	}
	if p.BytesDone <= 0 || p.BytesTotal <= p.BytesDone {
		return p.ETA.Seconds() // not a copy: catch-up's ETA is its lag trend's
	}
	if limit < client.MinRate {
		return -1
	}
	return max(p.ETA.Seconds(), float64(p.BytesTotal-p.BytesDone)/limit)
}

// SetMigrationRate changes a running migration's rate (bytes/s, 0 =
// unlimited, else at least client.MinRate); the throttle applies it at once.
func (a *Agent) SetMigrationRate(id string, rate float64) (client.Migration, error) {
	if err := (client.SetRate{Rate: rate}).Validate(); err != nil {
		return client.Migration{}, errf(http.StatusBadRequest, "%v", err)
	}
	m, err := a.cat.Migration(id)
	if err != nil {
		return client.Migration{}, errf(http.StatusNotFound, "unknown migration %q on agent %s", id, a.cfg.Name)
	}
	if m.Role != catalog.Source {
		return client.Migration{}, errf(http.StatusConflict, "migration %s is driven by its source agent %s; set its rate there", id, m.Peer)
	}
	r := a.mig.get(id)
	if r == nil || m.Done {
		return client.Migration{}, errf(http.StatusConflict, "migration %s is not running", id)
	}
	r.send.SetRate(limiterRate(rate))
	r.prefetch.SetRate(limiterRate(rate))
	err = r.lock.Update(func(tx *catalog.Tx) error {
		m, err := tx.Migration(id)
		if err != nil {
			return err
		}
		m.Rate = rate
		return tx.PutMigration(m)
	})
	if err != nil {
		return client.Migration{}, err
	}
	a.log.Info("migration rate changed", "migration", id, "rate", rate)
	return a.Migration(id)
}

// enforceDeadline aborts migration id at deadline unless ctx ends first
// (the driver finished, or the agent stops: a restarted agent arms it
// again). A migration past its route switch only completes; the abort is
// then refused, and that refusal is the answer.
func (a *Agent) enforceDeadline(ctx context.Context, id string, deadline time.Time) {
	if clock.Sleep(ctx, time.Until(deadline)) != nil {
		return
	}
	if _, err := a.AbortMigration(id, "deadline "+deadline.UTC().Format(time.RFC3339)+" passed before the handover"); err != nil {
		a.log.Warn("migration deadline passed; not aborted", "migration", id, "err", err)
	}
}

// AbortMigration asks a running migration to roll back. It is refused once
// the route has switched (the migration then only rolls forward).
func (a *Agent) AbortMigration(id, reason string) (client.Migration, error) {
	m, err := a.cat.Migration(id)
	if err != nil {
		return client.Migration{}, errf(http.StatusNotFound, "unknown migration %q on agent %s", id, a.cfg.Name)
	}
	if m.Role != catalog.Source {
		return client.Migration{}, errf(http.StatusConflict, "migration %s is driven by its source agent %s; abort it there", id, m.Peer)
	}
	if m.Done {
		return client.Migration{}, errf(http.StatusConflict, "migration %s already finished (%s)", id, m.Outcome)
	}
	var rec migration.Record
	json.Unmarshal(m.Record, &rec)
	if rec.Switched() {
		return client.Migration{}, errf(http.StatusConflict, "migration %s is past the route switch; it can only complete", id)
	}
	r := a.mig.get(id)
	if r == nil {
		return client.Migration{}, errf(http.StatusConflict, "migration %s is not running", id)
	}
	r.mu.Lock()
	if r.abortReason == "" {
		r.abortReason = reason
		select {
		case r.abort <- reason:
		default:
		}
		// A long copy or wait is cut short (its action is idempotent and
		// resumes from the persisted record); a handover is left to finish
		// its current step, after which Run reads the abort.
		if interruptible(r.phase) && r.cancel != nil {
			r.cancel()
		}
	}
	r.mu.Unlock()
	a.log.Info("migration abort requested", "migration", id, "reason", reason)
	return a.Migration(id)
}

// waiting describes a step that keeps failing: which, since when, why.
func waiting(rec migration.Record) string {
	step := "the next step"
	if a := migration.Next(rec); a != nil {
		step = a.String()
	}
	since := rec.RetrySince
	if since.IsZero() {
		since = rec.Updated
	}
	return fmt.Sprintf("retrying %s since %s (%s ago): %s", step, since.UTC().Format(time.RFC3339), time.Since(since).Round(time.Second), rec.RetryError)
}
