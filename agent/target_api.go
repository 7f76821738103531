package agent

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"

	"github.com/sluicedb/sluice/catalog"
	"github.com/sluicedb/sluice/migration"
	"github.com/sluicedb/sluice/transfer"
)

// targetRoutes registers the target-side internal endpoints that serve this
// agent's local migration.Target to a source agent's RemoteTarget.
func (a *Agent) targetRoutes(mux *http.ServeMux) {
	mux.HandleFunc("GET "+targetPrefix+"/info", func(w http.ResponseWriter, r *http.Request) {
		ti, err := a.localTarget().Info(r.Context(), r.URL.Query().Get("tenant"))
		if err != nil {
			writeError(w, err)
			return
		}
		writeOK(w, http.StatusOK, targetInfoResponse{Major: ti.Major, FreeBytes: ti.FreeBytes, Taken: ti.Taken})
	})
	mux.HandleFunc("POST "+targetPrefix+"/{mid}/reserve", a.handleReserve)
	mux.HandleFunc("POST "+targetPrefix+"/{mid}/snapshot", a.handleSnapshot)
	mux.HandleFunc("POST "+targetPrefix+"/{mid}/start-standby", func(w http.ResponseWriter, r *http.Request) {
		var req standbyRequest
		a.targetCall(w, r, &req, &req.Record, func(ctx context.Context) (any, error) {
			ci := req.PrimaryConnInfo
			if req.PaceWAL && ci != "" {
				var err error
				if ci, err = a.startTargetRelay(req.Record.ID, ci, decodeRate(req.WALRate)); err != nil {
					return nil, errf(http.StatusBadRequest, "%v", err)
				}
				if err := a.keepWALSource(req.Record.ID, req.PrimaryConnInfo); err != nil {
					return nil, err
				}
			}
			return nil, a.localTarget().StartStandby(ctx, req.Record, a.standbyConnInfo(ci), req.Slot)
		})
	})
	mux.HandleFunc("POST "+targetPrefix+"/{mid}/pace-wal", a.handlePaceWAL)
	mux.HandleFunc("POST "+targetPrefix+"/{mid}/position", func(w http.ResponseWriter, r *http.Request) {
		var req recordRequest
		a.targetCall(w, r, &req, &req.Record, func(ctx context.Context) (any, error) {
			p, err := a.localTarget().Position(ctx, req.Record)
			if err != nil && postmasterDown(err) {
				// Not the migration's failure: a crashed standby is restarted
				// by supervise; the source waits through it as through an
				// outage of this agent (ErrUnreachable).
				err = errf(http.StatusServiceUnavailable, "agent %s: the standby of migration %s is down or restarting: %v", a.cfg.Name, req.Record.ID, err)
			}
			return positionResponse{Receive: p.Receive, Replay: p.Replay, InRecovery: p.InRecovery}, err
		})
	})
	mux.HandleFunc("POST "+targetPrefix+"/{mid}/wait-replay", func(w http.ResponseWriter, r *http.Request) {
		var req replayRequest
		a.targetCall(w, r, &req, &req.Record, func(ctx context.Context) (any, error) {
			lsn, err := a.localTarget().WaitReplay(ctx, req.Record, req.LSN)
			return replayResponse{LSN: lsn}, err
		})
	})
	mux.HandleFunc("POST "+targetPrefix+"/{mid}/prewarm", func(w http.ResponseWriter, r *http.Request) {
		var req prewarmRequest
		a.targetCall(w, r, &req, &req.Record, func(ctx context.Context) (any, error) {
			return nil, a.localTarget().Prewarm(ctx, req.Record, req.Blocks)
		})
	})
	mux.HandleFunc("POST "+targetPrefix+"/{mid}/prepare-promotion", func(w http.ResponseWriter, r *http.Request) {
		var req recordRequest
		a.targetCall(w, r, &req, &req.Record, func(ctx context.Context) (any, error) {
			return nil, a.localTarget().PreparePromotion(ctx, req.Record)
		})
	})
	mux.HandleFunc("POST "+targetPrefix+"/{mid}/promote", func(w http.ResponseWriter, r *http.Request) {
		var req recordRequest
		a.targetCall(w, r, &req, &req.Record, func(ctx context.Context) (any, error) {
			return nil, a.localTarget().Promote(ctx, req.Record)
		})
	})
	mux.HandleFunc("POST "+targetPrefix+"/{mid}/addr", func(w http.ResponseWriter, r *http.Request) {
		var req recordRequest
		a.targetCall(w, r, &req, &req.Record, func(ctx context.Context) (any, error) {
			return reserveResponse{Dir: req.Record.TargetDir, Port: req.Record.TargetPort, Host: a.cfg.Tenant.AdvertiseHost}, nil
		})
	})
	mux.HandleFunc("POST "+targetPrefix+"/{mid}/abort", func(w http.ResponseWriter, r *http.Request) {
		var req recordRequest
		a.targetCall(w, r, &req, &req.Record, func(ctx context.Context) (any, error) {
			return nil, a.targetAbort(ctx, req.Record)
		})
	})
	mux.HandleFunc("POST "+targetPrefix+"/{mid}/commit", func(w http.ResponseWriter, r *http.Request) {
		var req recordRequest
		a.targetCall(w, r, &req, &req.Record, func(ctx context.Context) (any, error) {
			return nil, a.targetCommit(ctx, req.Record)
		})
	})
}

// targetCall decodes a JSON body into req, checks that rec (inside req)
// belongs to the {mid} in the path and to a migration this agent is the
// target of, runs fn and writes its answer.
func (a *Agent) targetCall(w http.ResponseWriter, r *http.Request, req any, rec *migration.Record, fn func(ctx context.Context) (any, error)) {
	if err := readJSON(r, req); err != nil {
		writeError(w, err)
		return
	}
	if err := a.checkTargetRecord(r.PathValue("mid"), *rec); err != nil {
		writeError(w, err)
		return
	}
	v, err := fn(r.Context())
	if err == nil {
		// After the call, not before: an abort on a full disk must free
		// the partial copy's space before the catalog is written there.
		err = a.storeTargetRecord(*rec)
	}
	if err != nil {
		writeError(w, err)
		return
	}
	if v == nil {
		v = struct{}{}
	}
	writeOK(w, http.StatusOK, v)
}

// checkTargetRecord verifies that rec is migration mid, that this agent
// reserved it (its catalog has the target-side migration), and that rec
// is not from a replaced driver (staleAttempt).
func (a *Agent) checkTargetRecord(mid string, rec migration.Record) error {
	if rec.ID != mid {
		return errf(http.StatusBadRequest, "record id %q does not match path %q", rec.ID, mid)
	}
	m, err := a.cat.Migration(mid)
	if err != nil {
		return errf(http.StatusNotFound, "agent %s has no migration %s (not reserved here)", a.cfg.Name, mid)
	}
	if m.Role != catalog.Target {
		return errf(http.StatusConflict, "agent %s is the source of migration %s, not its target", a.cfg.Name, mid)
	}
	return a.staleAttempt(m.Record, rec)
}

// staleAttempt refuses (409) a call whose record is of an earlier attempt
// than the one stored here. A driver that resumes a migration (its agent
// restarted, or it took the catalog lock from one whose lease ended)
// counts a new attempt, and every call it makes carries it: a call of an
// earlier attempt is from a driver that has been replaced, and may not
// act on the target nor overwrite its record (the attempt is the target's
// fencing token, as the lease is the catalog's).
func (a *Agent) staleAttempt(stored []byte, rec migration.Record) error {
	var cur migration.Record
	if len(stored) == 0 || json.Unmarshal(stored, &cur) != nil || rec.Attempt >= cur.Attempt {
		return nil
	}
	return errf(http.StatusConflict, "migration %s is at attempt %d on agent %s; this call is attempt %d's, from a driver that has been replaced",
		rec.ID, cur.Attempt, a.cfg.Name, rec.Attempt)
}

// storeTargetRecord keeps the target's copy of the record current for GET
// /v1/migrations, writing (fsync) only when the phase moved: positions are
// polled ten times a second during CATCH-UP. A migration the call finished
// (abort, commit) is left as the call recorded it.
func (a *Agent) storeTargetRecord(rec migration.Record) error {
	if m, err := a.cat.Migration(rec.ID); err != nil || m.Done || recordCurrent(m.Record, rec) {
		return nil
	}
	return a.cat.Update(func(tx *catalog.Tx) error {
		m, err := tx.Migration(rec.ID)
		if err != nil || m.Done {
			return nil
		}
		if recordCurrent(m.Record, rec) {
			return nil
		}
		b, err := json.Marshal(rec)
		if err != nil {
			return err
		}
		m.Record = b
		return tx.PutMigration(m)
	})
}

// recordCurrent reports whether the stored record is rec's phase and attempt.
func recordCurrent(stored []byte, rec migration.Record) bool {
	var s migration.Record
	return json.Unmarshal(stored, &s) == nil && s.Phase == rec.Phase && s.Attempt == rec.Attempt
}

// handleReserve records the incoming tenant (migrating-in) and the
// target-side migration, then reserves its directory and port.
func (a *Agent) handleReserve(w http.ResponseWriter, r *http.Request) {
	var req reserveRequest
	if err := readJSON(r, &req); err != nil {
		writeError(w, err)
		return
	}
	rec := req.Record
	if rec.ID != r.PathValue("mid") || rec.ID == "" {
		writeError(w, errf(http.StatusBadRequest, "record id %q does not match path %q", rec.ID, r.PathValue("mid")))
		return
	}
	if rec.Target != a.cfg.Name {
		writeError(w, errf(http.StatusBadRequest, "migration %s targets agent %q, this is %q", rec.ID, rec.Target, a.cfg.Name))
		return
	}
	id := req.TenantID
	if s, err := strconv.ParseInt(rec.Tenant, 10, 64); err != nil || s != id || id <= 0 {
		writeError(w, errf(http.StatusBadRequest, "record tenant %q does not match tenant id %d", rec.Tenant, id))
		return
	}
	if err := checkSettings(withoutReserved(req.Settings)); err != nil {
		writeError(w, errf(http.StatusBadRequest, "tenant settings: %v", err))
		return
	}
	unlock := a.lockTenant(id)
	defer unlock()
	recJSON, _ := json.Marshal(rec)
	err := a.cat.Update(func(tx *catalog.Tx) error {
		tn, err := tx.Tenant(id)
		switch {
		case errors.Is(err, catalog.ErrNotFound):
		case err != nil:
			return err
		case tn.State == catalog.MigratingIn && tn.Migration == rec.ID:
			// Reserve again (resume after a reset): same tenant record.
		case tn.State == catalog.Deleted || tn.State == catalog.Moved:
		default:
			return errf(http.StatusConflict, "tenant %d already lives on agent %s (state %s)", id, a.cfg.Name, tn.State)
		}
		if port := a.TenantPort(id); port > 65535 {
			return errf(http.StatusBadRequest, "tenant id %d gives port %d > 65535 on agent %s", id, port, a.cfg.Name)
		}
		name := req.Name
		if name == "" {
			name = "tenant-" + rec.Tenant
		}
		old := tn.State
		tn = catalog.Tenant{ID: id, Name: name, Port: a.TenantPort(id), Dir: a.TenantDir(id), State: catalog.MigratingIn,
			Settings: withoutReserved(req.Settings), Migration: rec.ID, Created: tn.Created}
		if !catalog.CanTransition(old, catalog.MigratingIn) && old != "" {
			return errf(http.StatusConflict, "tenant %d on agent %s: cannot go from %s to migrating-in", id, a.cfg.Name, old)
		}
		if err := tx.PutTenant(tn); err != nil {
			return err
		}
		m, err := tx.Migration(rec.ID)
		if err != nil {
			m = catalog.Migration{ID: rec.ID, TenantID: id, Role: catalog.Target, Peer: req.Source, PeerURL: req.SourceURL, Mode: string(rec.Mode)}
		} else if err := a.staleAttempt(m.Record, rec); err != nil {
			return err
		}
		m.Record = recJSON
		return tx.PutMigration(m)
	})
	if err != nil {
		writeError(w, err)
		return
	}
	dir, port, err := a.localTarget().Reserve(r.Context(), rec)
	if err != nil {
		writeError(w, err)
		return
	}
	writeOK(w, http.StatusOK, reserveResponse{Dir: dir, Port: port, Host: a.cfg.Tenant.AdvertiseHost})
}

// handleSnapshot writes the snapshot stream in the request body into the
// reserved directory through the local target's snapshot writer.
func (a *Agent) handleSnapshot(w http.ResponseWriter, r *http.Request) {
	raw, err := base64.StdEncoding.DecodeString(r.Header.Get(recordHeader))
	var rec migration.Record
	if err == nil {
		err = json.Unmarshal(raw, &rec)
	}
	if err != nil {
		writeError(w, errf(http.StatusBadRequest, "bad %s header: %v", recordHeader, err))
		return
	}
	if err := a.checkTargetRecord(r.PathValue("mid"), rec); err != nil {
		writeError(w, err)
		return
	}
	if err := a.storeTargetRecord(rec); err != nil {
		writeError(w, err)
		return
	}
	if ws := r.URL.Query().Get("wal_source"); ws != "" && rec.Mode == migration.Live {
		if err := a.streamEarlyWAL(rec, ws); err != nil {
			// Not fatal: the standby streams it all from the slot later.
			a.log.Warn("early WAL: not streaming during the copy", "migration", rec.ID, "err", err)
		}
	}
	sw, err := a.localTarget().OpenSnapshot(r.Context(), rec)
	if err != nil {
		writeError(w, err)
		return
	}
	n, err := io.CopyBuffer(sw, r.Body, make([]byte, transfer.DefaultChunkSize))
	cerr := sw.Close()
	if err != nil {
		writeError(w, fmt.Errorf("agent: snapshot stream broke after %d bytes: %w", n, err))
		return
	}
	if cerr != nil {
		writeError(w, cerr)
		return
	}
	writeOK(w, http.StatusOK, struct {
		Bytes int64 `json:"bytes"`
	}{n})
}

// targetAbort discards the target side: postmaster, directory, port; the
// incoming tenant's record becomes a deleted tombstone.
func (a *Agent) targetAbort(ctx context.Context, rec migration.Record) error {
	id, _ := strconv.ParseInt(rec.Tenant, 10, 64)
	unlock := a.lockTenant(id)
	defer unlock()
	a.closeTargetRelay(rec.ID)
	if err := a.localTarget().Abort(ctx, rec); err != nil {
		return err
	}
	return a.cat.Update(func(tx *catalog.Tx) error {
		tn, err := tx.Tenant(id)
		if err == nil && tn.State == catalog.MigratingIn && tn.Migration == rec.ID {
			tn.State, tn.Migration = catalog.Deleted, ""
			if err := tx.PutTenant(tn); err != nil {
				return err
			}
		}
		m, err := tx.Migration(rec.ID)
		if err != nil {
			return nil
		}
		if rec.Phase == migration.PhaseRollback || rec.Phase.Terminal() {
			m.Done, m.Outcome = true, "aborted"
			m.Record = endedRecord(rec, migration.PhaseAborted)
			m.Error = rec.Error
		}
		return tx.PutMigration(m)
	})
}

// targetCommit makes the incoming tenant this agent's: running, serving.
func (a *Agent) targetCommit(ctx context.Context, rec migration.Record) error {
	id, _ := strconv.ParseInt(rec.Tenant, 10, 64)
	unlock := a.lockTenant(id)
	defer unlock()
	a.closeTargetRelay(rec.ID) // promoted: nothing streams any more
	if err := a.localTarget().Commit(ctx, rec); err != nil {
		return err
	}
	// The promoted tenant must serve from now on, even if its postmaster died
	// (e.g. this host restarted) between promotion and this commit.
	if tn, err := a.cat.Tenant(id); err == nil && tn.Migration == rec.ID {
		if c, err := a.cluster(tn); err == nil && !c.Running() {
			if err := c.Start(ctx); err != nil {
				return fmt.Errorf("agent: commit: start tenant %d: %w", id, err)
			}
		}
	}
	err := a.cat.Update(func(tx *catalog.Tx) error {
		tn, err := tx.Tenant(id)
		if err != nil {
			return err
		}
		if tn.State == catalog.MigratingIn && tn.Migration == rec.ID {
			tn.State, tn.Migration = catalog.Running, ""
			if err := tx.PutTenant(tn); err != nil {
				return err
			}
		}
		m, err := tx.Migration(rec.ID)
		if err != nil {
			return nil
		}
		m.Done, m.Outcome = true, "committed"
		m.Record = endedRecord(rec, migration.PhaseDone)
		return tx.PutMigration(m)
	})
	if err == nil {
		a.analyzeLater(id)
	}
	return err
}

// endedRecord is the target's copy of rec once the call that ended the
// migration there ran: the driver's record at that call, in phase (done,
// aborted), so that the target's list does not show it mid-handover.
func endedRecord(rec migration.Record, phase migration.Phase) []byte {
	rec.Phase = phase
	b, _ := json.Marshal(rec)
	return b
}

// withoutReserved drops the settings the agent sets itself from a copy.
func withoutReserved(s map[string]string) map[string]string {
	out := make(map[string]string, len(s))
	for k, v := range s {
		if !reservedSettings[k] {
			out[k] = v
		}
	}
	return out
}

// handlePaceWAL sets the pace of a migration's WAL relay on this (target)
// agent and answers the bytes it relayed. It carries no record: the source
// pushes it several times a second, and the target's copy of the record is
// kept by the other calls.
func (a *Agent) handlePaceWAL(w http.ResponseWriter, r *http.Request) {
	var req paceWALRequest
	if err := readJSON(r, &req); err != nil {
		writeError(w, err)
		return
	}
	mid := r.PathValue("mid")
	m, err := a.cat.Migration(mid)
	if err != nil {
		writeError(w, errf(http.StatusNotFound, "agent %s has no migration %s (not reserved here)", a.cfg.Name, mid))
		return
	}
	if m.Role != catalog.Target {
		writeError(w, errf(http.StatusConflict, "agent %s is the source of migration %s, not its target", a.cfg.Name, mid))
		return
	}
	n, id, ok := a.paceTargetRelay(mid, decodeRate(req.Rate), req.Unpaced)
	if !ok {
		writeError(w, errf(http.StatusConflict, "agent %s runs no WAL relay for migration %s (its standby was not started with pace_wal)", a.cfg.Name, mid))
		return
	}
	writeOK(w, http.StatusOK, paceWALResponse{Relayed: n, Relay: id})
}
