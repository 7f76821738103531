package agent

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sluicedb/sluice/agent/client"
	"github.com/sluicedb/sluice/catalog"
	"github.com/sluicedb/sluice/loop"
	"github.com/sluicedb/sluice/migration"
	"github.com/sluicedb/sluice/migration/pg"
	"github.com/sluicedb/sluice/pgcluster"
	"github.com/sluicedb/sluice/throttle"
)

// migrations tracks the migrations this agent drives as their source.
type migrations struct {
	wg   sync.WaitGroup
	mu   sync.Mutex
	runs map[string]*run // by migration ID, while a driver goroutine runs
	// series keeps the control-loop records of the last finished migrations
	// (at most keptSeries), for GET /v1/migrations/{id}/series.
	series map[string][]loop.Point
	order  []string
	base   context.Context // Serve's context: drivers stop with the agent
}

// run is one driver goroutine's live state.
type run struct {
	id     string
	tenant int64
	lim    *throttle.Limiter // the snapshot's send rate (and WARM's), bytes/s
	pre    *throttle.Limiter // the snapshot's reads from disk, bytes/s; follows lim unless a controller sets it
	// send and prefetch set lim's and pre's rates: every rate change goes
	// through them, so that an operator's pause holds (pause.go).
	send, prefetch *pausable
	abort          chan string
	started        time.Time
	lock           *catalog.Lock // the driver's lock on the tenant: guards its catalog writes

	mu          sync.Mutex
	prog        migration.Progress
	phase       migration.Phase    // of the last persisted record: the running action's phase
	failures    int                // of the last persisted record: a change is a new failed retry, logged
	cancel      context.CancelFunc // cancels the current migration.Run
	abortReason string             // set once an operator asked to abort
	loop        *loop.Loop         // the control loop, when the migration has one
	plan        *controlPlan       // its resolved spec
	reserve     time.Duration      // the PID's learned handover reserve
	// sent is the most the snapshot's stream had sent in any attempt,
	// bytes: what an aborted migration moved, which its record no longer
	// holds once the rollback has reset the snapshot.
	sent int64
	// checkpointing is the checkpoint a snapshot's backup start is waiting
	// for ("paced 3s"); "" when none is (pg.LocalSource.OnBackupStart).
	checkpointing string
}

// backupStart is the run's pg.LocalSource.OnBackupStart: the
// progress shows the checkpoint a snapshot waits for until its backup has
// started.
func (r *run) backupStart(started bool, checkpoint string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.checkpointing = ""
	if !started {
		r.checkpointing = checkpoint
	}
}

// keptSeries is how many finished migrations' control records are kept in memory.
const keptSeries = 16

// keepSeries stores the record of a finished run's control loop.
func (m *migrations) keepSeries(r *run) {
	r.mu.Lock()
	l := r.loop
	r.mu.Unlock()
	if l == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.series[r.id] = l.Series()
	m.order = append(m.order, r.id)
	if len(m.order) > keptSeries {
		delete(m.series, m.order[0])
		m.order = m.order[1:]
	}
}

// interruptible reports whether a running action of phase p may be cut short
// for an abort: long copy and wait phases, all before any fence or switch.
func interruptible(p migration.Phase) bool {
	switch p {
	case migration.PhasePrepare, migration.PhaseSnapshot, migration.PhaseCatchUp, migration.PhaseWarm:
		return true
	}
	return false
}

func (m *migrations) init() {
	m.runs = map[string]*run{}
	m.series = map[string][]loop.Point{}
	m.base = context.Background()
}

// wait blocks until every driver goroutine has returned.
func (m *migrations) wait() { m.wg.Wait() }

func (m *migrations) get(id string) *run {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.runs[id]
}

// StuckRetry is how long the agent waits before running a stuck migration
// (migration.ErrStuck: a step after the route switch, or a rollback step,
// failed MaxRetries times in a row) again (2 s).
const StuckRetry = 2 * time.Second

// limiterRate converts an API rate (bytes/s, 0 = unlimited) to a throttle rate.
func limiterRate(r float64) float64 {
	if r <= 0 {
		return math.Inf(1)
	}
	return r
}

// newMigrationID returns a unique, slot-name-safe migration id.
func newMigrationID(tenant int64, now time.Time) string {
	var b [3]byte
	rand.Read(b[:])
	return fmt.Sprintf("t%d_%s_%s", tenant, now.UTC().Format("20060102t150405"), hex.EncodeToString(b[:]))
}

// StartMigration checks the request (nothing changes if it is refused),
// records the migration, marks the tenant migrating-out and starts driving
// it in the background. It returns the new migration.
func (a *Agent) StartMigration(ctx context.Context, req client.StartMigration) (client.Migration, error) {
	if err := req.Validate(); err != nil {
		return client.Migration{}, errf(http.StatusBadRequest, "%v", err)
	}
	mode := migration.Mode(cmp.Or(req.Mode, string(migration.Live)))
	catchUp, _ := migration.ParseCatchUpTimeout(req.CatchUpTimeout)
	holdDeadline, _ := migration.ParseHoldDeadline(req.HoldDeadline)
	var deadline time.Time
	if d, _ := req.DeadlineAfter(); d > 0 {
		deadline = time.Now().Add(d)
	}
	ctl, err := a.checkControl(req.Control)
	if err != nil {
		return client.Migration{}, err
	}
	tn, err := a.liveTenant(req.Tenant)
	if err != nil {
		return client.Migration{}, err
	}
	switch tn.State {
	case catalog.Running:
	case catalog.MigratingOut, catalog.MigratingIn:
		return client.Migration{}, errf(http.StatusConflict, "tenant %d is already migrating (migration %s, %s)", tn.ID, tn.Migration, tn.State)
	case catalog.Moved:
		return client.Migration{}, errf(http.StatusConflict, "tenant %d has moved away from agent %s", tn.ID, a.cfg.Name)
	default:
		return client.Migration{}, errf(http.StatusConflict, "tenant %d is %s; only a running tenant can migrate", tn.ID, tn.State)
	}
	peerURL, err := a.resolvePeer(req.To)
	if err != nil {
		return client.Migration{}, err
	}
	pc, err := a.peerClient(peerURL)
	if err != nil {
		return client.Migration{}, errf(http.StatusBadRequest, "target agent: %v", err)
	}
	ictx, cancel := context.WithTimeout(ctx, 10*time.Second)
	info, err := pc.Info(ictx)
	cancel()
	if err != nil {
		return client.Migration{}, errf(http.StatusBadGateway, "target agent %s is unreachable: %v", req.To, err)
	}
	if info.Name == a.cfg.Name || strings.TrimRight(peerURL, "/") == a.url {
		return client.Migration{}, errf(http.StatusBadRequest, "target agent %s is the source: tenant %d already lives here", info.Name, tn.ID)
	}

	if err := a.prepareSource(ctx, tn); err != nil {
		return client.Migration{}, err
	}
	src, err := a.source(tn)
	if err != nil {
		return client.Migration{}, err
	}
	tgt := a.remoteTarget(pc, tn)
	active, err := a.activeRecords()
	if err != nil {
		return client.Migration{}, err
	}
	mreq := migration.Request{Tenant: strconv.FormatInt(tn.ID, 10), Source: a.cfg.Name, Target: info.Name, Mode: mode}
	if err := migration.Preflight(ctx, mreq, src, tgt, active); err != nil {
		src.Close()
		return client.Migration{}, preflightError(err)
	}
	now := time.Now()
	rec := migration.New(newMigrationID(tn.ID, now), mreq.Tenant, a.cfg.Name, info.Name, mode, now)
	rec.CatchUpTimeout, rec.HoldDeadline = catchUp, holdDeadline
	recJSON, err := json.Marshal(rec)
	if err != nil {
		src.Close()
		return client.Migration{}, err
	}
	cm := catalog.Migration{ID: rec.ID, TenantID: tn.ID, Role: catalog.Source, Peer: info.Name, PeerURL: peerURL, Mode: string(mode), Rate: req.Rate, Checkpoint: req.Checkpoint, WALRelay: req.WALRelay, Record: recJSON, Control: ctl, Deadline: deadline}
	lk, err := a.cat.TryLock(ctx, driverLock(tn.ID))
	if err != nil {
		src.Close()
		if errors.Is(err, catalog.ErrLocked) {
			return client.Migration{}, errf(http.StatusConflict, "tenant %d is being moved by another driver (%v)", tn.ID, err)
		}
		return client.Migration{}, err
	}
	err = lk.Update(func(tx *catalog.Tx) error {
		cur, err := tx.Tenant(tn.ID)
		if err != nil {
			return err
		}
		if cur.State != catalog.Running {
			return errf(http.StatusConflict, "tenant %d is %s (migration %s)", tn.ID, cur.State, cur.Migration)
		}
		cur.State, cur.Migration = catalog.MigratingOut, rec.ID
		if err := tx.PutTenant(cur); err != nil {
			return err
		}
		return tx.PutMigration(cm)
	})
	if err != nil {
		lk.Unlock(context.Background())
		src.Close()
		return client.Migration{}, err
	}
	a.log.Info("migration started", "migration", rec.ID, "tenant", tn.ID, "to", info.Name, "mode", mode, "rate", req.Rate, "checkpoint", req.Checkpoint)
	a.launch(lk, cm, rec, src, tgt)
	return a.Migration(rec.ID)
}

// preflightError maps migration.Validate's sentinels to HTTP statuses.
func preflightError(err error) error {
	switch {
	case errors.Is(err, migration.ErrBadRequest), errors.Is(err, migration.ErrSameServer):
		return errf(http.StatusBadRequest, "%v", err)
	case errors.Is(err, migration.ErrAlreadyMigrating), errors.Is(err, migration.ErrTenantTaken):
		return errf(http.StatusConflict, "%v", err)
	case errors.Is(err, migration.ErrVersion), errors.Is(err, migration.ErrWALLevel), errors.Is(err, migration.ErrNoSpace):
		return errf(http.StatusUnprocessableEntity, "%v", err)
	}
	return errf(http.StatusBadGateway, "preflight: %v", err)
}

// activeRecords returns the records of this agent's unfinished migrations.
func (a *Agent) activeRecords() ([]migration.Record, error) {
	ms, err := a.cat.Migrations()
	if err != nil {
		return nil, err
	}
	var out []migration.Record
	for _, m := range ms {
		if m.Done {
			continue
		}
		var rec migration.Record
		if err := json.Unmarshal(m.Record, &rec); err == nil {
			out = append(out, rec)
		}
	}
	return out, nil
}

// source returns the migration Source for a tenant of this agent.
func (a *Agent) source(tn catalog.Tenant) (*pg.LocalSource, error) {
	c, err := a.cluster(tn)
	if err != nil {
		return nil, err
	}
	s := pg.NewLocalSource(c)
	s.ReplicationUser, s.ReplicationPassword = pgcluster.ReplicationRole, a.replPassword
	s.RetireGrace = a.cfg.RetireGrace.D()
	s.Log = a.log.With("tenant", tn.Name)
	return s, nil
}

// remoteTarget returns the Target of a migration of tn to the agent at pc.
func (a *Agent) remoteTarget(pc *client.Client, tn catalog.Tenant) *RemoteTarget {
	return &RemoteTarget{c: pc, source: a.cfg.Name, srcURL: a.url, tenantID: tn.ID, name: tn.Name, settings: tn.Settings}
}

// launch starts the driver goroutine of a source-side migration. lk is the
// driver's lock on the tenant (driverLock): every catalog write of the
// driver is guarded by it, the driver stops as soon as it is lost (a
// catalog.ErrNotOwner write, or Lost: its etcd lease ended) without
// touching PostgreSQL or the catalog further, and it is released when the
// driver ends.
func (a *Agent) launch(lk *catalog.Lock, cm catalog.Migration, rec migration.Record, src *pg.LocalSource, tgt migration.Target) {
	r := &run{id: rec.ID, lock: lk, tenant: cm.TenantID, lim: throttle.NewLimiter(limiterRate(cm.Rate), 0), pre: throttle.NewLimiter(limiterRate(cm.Rate), 0), abort: make(chan string, 1), started: time.Now()}
	r.send, r.prefetch = newPausable(r.lim), newPausable(r.pre)
	src.Prefetch = r.pre
	src.ReadAhead = readAhead(cm)
	src.Checkpoint = cm.Checkpoint
	src.OnBackupStart = r.backupStart
	src.WALRate = r.lim.Rate // CATCH-UP's WAL stream is paced like the snapshot
	rt, _ := tgt.(*RemoteTarget)
	if rt != nil && cm.WALRelay != client.WALRelaySource {
		// The target agent relays it (walrelay.go): the source's CPU pays
		// only the walsender.
		src.WALRate, rt.walRate, rt.walMID, rt.walSource = nil, r.lim.Rate, rec.ID, src.PrimaryConnInfo()
		switch rec.Phase { // resumed after the standby started: its relay is there to pace
		case migration.PhaseCatchUp, migration.PhaseWarm, migration.PhaseHandover, migration.PhaseRollback:
			rt.walStarted.Store(true)
		}
	}
	r.prog = migration.Progress{ID: rec.ID, Phase: rec.Phase, LagBytes: rec.LagBytes}
	a.mig.mu.Lock()
	if a.mig.runs[rec.ID] != nil {
		a.mig.mu.Unlock()
		src.Close()
		lk.Unlock(context.Background())
		return
	}
	a.mig.runs[rec.ID] = r
	// The driver's context ends with the agent or when the lock is lost.
	ctx, stopDriver := context.WithCancel(a.mig.base)
	go func() {
		select {
		case <-lk.Lost():
			stopDriver()
		case <-ctx.Done():
		}
	}()
	a.mig.wg.Add(1)
	a.mig.mu.Unlock()
	// The control loop is registered before the driver starts, so that the
	// first progress answer already shows it.
	lctx, stopLoop := context.WithCancel(ctx)
	a.startControl(lctx, cm, r)
	if !cm.Deadline.IsZero() {
		go a.enforceDeadline(lctx, cm.ID, cm.Deadline)
	}
	walRelayed := func() int64 { n, _ := src.WALRelayed(); return n }
	if rt != nil && rt.walRate != nil {
		walRelayed = func() int64 { n, _ := rt.WALRelayed(); return n }
		go rt.paceWAL(lctx, walPushEvery)
	}
	go func() {
		defer a.mig.wg.Done()
		retake := false
		defer func() {
			if retake { // after the run is gone from a.mig.runs
				a.mig.wg.Add(1)
				go func() {
					defer a.mig.wg.Done()
					a.retakeMigration(cm.TenantID, rec.ID)
				}()
			}
		}()
		defer stopDriver()
		defer lk.Unlock(context.Background())
		defer func() {
			a.mig.keepSeries(r)
			a.mig.mu.Lock()
			delete(a.mig.runs, rec.ID)
			a.mig.mu.Unlock()
		}()
		defer src.Close()
		defer stopLoop()
		env := migration.Env{
			Source: src, Target: tgt, Router: a.switchRouter(cm.TenantID, lk), Limiter: r.lim,
			Persist: a.persistRun(r),
			Progress: func(p migration.Progress) {
				r.mu.Lock()
				switch {
				case p.Warning != "" && r.prog.Warning == "":
					a.log.Warn("catch-up will not end in time", "migration", rec.ID, "warning", p.Warning)
				case p.Warning == "" && r.prog.Warning != "" && p.Phase == migration.PhaseCatchUp:
					a.log.Info("catch-up converging again", "migration", rec.ID, "lag_bytes", p.LagBytes, "eta", p.ETA.Round(time.Second))
				}
				r.prog = p
				if r.autoResume(p.Phase) {
					a.log.Info("migration resumed: its copy ended while paused", "migration", rec.ID, "phase", p.Phase)
				}
				if p.Phase == migration.PhaseSnapshot {
					r.sent = max(r.sent, p.BytesDone)
				}
				r.mu.Unlock()
			},
			Abort: r.abort,
			Hook:  a.hooks.at,
		}
		for {
			rctx, cancel := context.WithCancel(ctx)
			r.mu.Lock()
			r.cancel = cancel
			r.mu.Unlock()
			final, err := migration.Run(rctx, rec, env)
			cancel()
			if lockLost(lk, err) {
				a.log.Error("migration: this agent lost the tenant's driver lock (another driver may hold it); it stops driving and waits to take it again",
					"migration", rec.ID, "phase", final.Phase, "err", err)
				retake = true
				return
			}
			r.mu.Lock()
			reason := r.abortReason
			r.mu.Unlock()
			if ctx.Err() == nil && rctx.Err() != nil && reason != "" && !final.Phase.Terminal() {
				// Cut short for an abort: run again from the persisted
				// record; Run reads the abort before the next action.
				rec = final
				select {
				case r.abort <- reason:
				default: // still queued: Run did not read it before it was cut short
				}
				continue
			}
			if !errors.Is(err, migration.ErrStuck) {
				a.finish(lk, cm, final, err, r.sentBytes(), walRelayed())
				return
			}
			// Stuck: a roll-forward or rollback step keeps failing (e.g. the
			// peer agent is down). Try again later while this agent runs.
			a.log.Warn("migration stuck; retrying", "migration", rec.ID, "phase", final.Phase, "err", final.Error, "cause", final.RetryError, "since", final.RetrySince, "in", StuckRetry)
			rec = final
			select {
			case <-ctx.Done():
				if lockLost(lk, nil) {
					a.log.Error("migration: this agent lost the tenant's driver lock while stuck; it stops driving", "migration", rec.ID, "phase", final.Phase)
					return
				}
				a.finish(lk, cm, final, ctx.Err(), r.sentBytes(), walRelayed())
				return
			case <-time.After(StuckRetry):
			}
		}
	}()
}

// persistRun is a driver's migration.Env.Persist: it stores the record,
// notes its phase and failure count in r, logs each new failed retry with
// its cause, and warns of a slow catalog write.
func (a *Agent) persistRun(r *run) func(migration.Record) error {
	return func(rec migration.Record) error {
		r.mu.Lock()
		defer r.mu.Unlock()
		r.phase = rec.Phase
		if rec.Failures > 0 && rec.Failures != r.failures {
			a.metrics.stepFailed(rec.Phase)
			a.log.Warn("migration step failed; retrying", "migration", rec.ID, "phase", rec.Phase,
				"step", migration.Next(rec), "failures", rec.Failures, "since", rec.RetrySince, "err", rec.RetryError)
		}
		r.failures = rec.Failures
		t0 := time.Now()
		err := a.persist(r.lock, rec)
		if d := time.Since(t0); d > slowPersist {
			a.log.Warn("slow catalog write", "migration", rec.ID, "phase", rec.Phase, "took", d)
		}
		return err
	}
}

// persist stores a record after every transition (migration.Env.Persist).
// slowPersist is the catalog write time above which the agent logs a
// warning: every step of a handover persists the record while clients wait.
const slowPersist = 20 * time.Millisecond

func (a *Agent) persist(lk *catalog.Lock, rec migration.Record) error {
	b, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	return lk.Update(func(tx *catalog.Tx) error {
		m, err := tx.Migration(rec.ID)
		if err != nil {
			return err
		}
		m.Record = b
		m.Error = rec.Error
		if m.Error == "" && rec.RetryError != "" {
			m.Error = "retrying: " + rec.RetryError
		}
		return tx.PutMigration(m)
	})
}

// sentBytes is run.sent.
func (r *run) sentBytes() int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.sent
}

// finish records how a driver ended: done (the tenant moved), rolled back
// (it serves here again) or interrupted (resumed at the next start). sent is
// what the snapshot's stream had sent (run.sent; 0 = unknown), kept with a
// rolled-back migration; wal is the WAL the relay passed to the standby
// (catalog.Migration.WALBytes; 0 = unknown).
func (a *Agent) finish(lk *catalog.Lock, cm catalog.Migration, rec migration.Record, err error, sent, wal int64) {
	var outcome string
	var state catalog.State
	switch {
	case err == nil && rec.Phase == migration.PhaseDone:
		outcome, state = "committed", catalog.Moved
	case rec.Phase == migration.PhaseAborted:
		outcome, state = "aborted", catalog.Running
	default:
		if a.mig.base.Err() == nil {
			a.log.Error("migration stopped; it resumes when the agent restarts", "migration", rec.ID, "phase", rec.Phase, "err", err)
		} else {
			a.log.Info("migration interrupted by shutdown; it resumes at the next start", "migration", rec.ID, "phase", rec.Phase)
		}
		return
	}
	b, _ := json.Marshal(rec)
	uerr := lk.Update(func(tx *catalog.Tx) error {
		m, err := tx.Migration(rec.ID)
		if err != nil {
			return err
		}
		m.Done, m.Outcome, m.Error, m.Record = true, outcome, rec.Error, b
		if wal > 0 {
			m.WALBytes = wal
		}
		if outcome == "aborted" {
			m.Moved = sent
		}
		if err := tx.PutMigration(m); err != nil {
			return err
		}
		tn, err := tx.Tenant(cm.TenantID)
		if err != nil {
			return err
		}
		if tn.Migration == rec.ID {
			tn.State, tn.Migration = state, ""
			return tx.PutTenant(tn)
		}
		return nil
	})
	if uerr != nil {
		a.log.Error("migration: recording the outcome", "migration", rec.ID, "err", uerr)
	}
	a.log.Info("migration finished", "migration", rec.ID, "outcome", outcome, "freeze", rec.Freeze, "error", rec.Error)
}
