package agent

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"net/http"
	"sync"
	"time"

	"github.com/sluicedb/sluice/agent/client"
	"github.com/sluicedb/sluice/catalog"
	"github.com/sluicedb/sluice/control"
	"github.com/sluicedb/sluice/migration"
	"github.com/sluicedb/sluice/plan"
)

// The driver of one plan: every step (the control profile's period) it
// follows each running move's migration on its source agent and feeds what
// happened to plan.Step, runs the plan's controller on the worst store
// (plan.Controller, plan.Observe: the proxy's per-tenant windows of every
// store of every server the plan touches) and hands each move in its
// snapshot its share of the rate (plan.Shares). A move past its snapshot
// (catch-up, warm, handover) runs unthrottled: its WAL must outrun the
// tenant's writes for the handover to come, and the copy — the load the
// contracts guard against — is over. The state is persisted after every
// step that changed it, before its actions run.

const (
	// planPausedRate is a paused plan's per-move rate, bytes/s: the least
	// the migration API takes (client.MinRate, 64 KiB/s; 0 would mean
	// unlimited), which holds a copy nearly still and keeps its stream
	// open.
	planPausedRate = client.MinRate
	// planFloorShare is the least share of the plan's top speed a moving
	// snapshot gets under control, so that a held controller (rate 0)
	// still lets each move's checkpoint and file list through and a move
	// never stalls forever: 1 %.
	planFloorShare = 0.01
	// planSeriesMax bounds the control loop's record in memory (steps).
	planSeriesMax = 7200
)

type planRun struct {
	a *Agent
	// lock is the driver's lock on the plan (planLock): every write of
	// the plan's state is guarded by it, and the driver stops as soon as it
	// is lost (its etcd lease ended), leaving the plan to the next holder.
	lock *catalog.Lock
	prof control.Profile
	ctrl control.Controller // nil: no control loop (sub-store, whole-store)
	cmds chan planCmd

	mu struct {
		sync.Mutex
		p      plan.Plan
		rate   float64                     // aggregate, bytes/s; +Inf = unlimited
		set    map[int]float64             // the rate last set on each move's migration
		live   map[int]client.PlanMoveLive // running moves' figures
		worst  string
		worstL float64
		worstC float64
		series []client.PlanPoint
		ended  bool
	}
}

type planCmd struct {
	kind plan.EventKind
	done chan error
}

func newPlanRun(a *Agent, lk *catalog.Lock, p plan.Plan) *planRun {
	r := &planRun{a: a, lock: lk, prof: control.DefaultProfile(), cmds: make(chan planCmd)}
	r.mu.p = p
	r.mu.set, r.mu.live = map[int]float64{}, map[int]client.PlanMoveLive{}
	switch p.Method {
	case plan.MethodWholeStore:
		r.mu.rate = math.Inf(1)
	case plan.MethodSubStore:
		r.mu.rate = plan.MaxRate(p, r.prof)
	default:
		c, err := plan.Controller(p, r.prof)
		if err != nil { // validated at apply; a stored plan keeps its method
			a.log.Error("plan: controller; moves run at the top speed", "plan", p.ID, "err", err)
			r.mu.rate = plan.MaxRate(p, r.prof)
			break
		}
		r.ctrl, r.mu.rate = c, c.Initial()
	}
	return r
}

func (r *planRun) snapshot() plan.Plan {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.mu.p
}

// command hands a pause, resume or abort to the driver and waits until it
// is applied and persisted.
func (r *planRun) command(kind plan.EventKind) error {
	c := planCmd{kind: kind, done: make(chan error, 1)}
	r.mu.Lock()
	ended, p := r.mu.ended, r.mu.p
	r.mu.Unlock()
	if ended || p.State.Final() {
		return errf(http.StatusConflict, "plan %s is %s: nothing to %s", p.ID, p.State, kind)
	}
	select {
	case r.cmds <- c:
		return <-c.done
	case <-time.After(30 * time.Second):
		return errf(http.StatusServiceUnavailable, "plan: the driver did not take the command within 30s")
	}
}

// drive runs the plan until it ends or ctx does (the agent stops: the
// state is on disk and resumePlans takes it up again).
func (r *planRun) drive(ctx context.Context, first plan.Event) {
	// An ended plan stays in planRuns for its series (GET
	// /v1/plans/{id}/series) until the agent stops.
	defer func() {
		r.mu.Lock()
		r.mu.ended = true
		r.mu.Unlock()
		r.lock.Unlock(context.Background())
	}()
	if err := r.step(ctx, first); errors.Is(err, catalog.ErrNotOwner) {
		r.a.log.Error("plan: lost the driver's lock; stopped driving", "plan", r.snapshot().ID)
		return
	}
	tick := time.NewTicker(r.prof.Step())
	defer tick.Stop()
	for !plan.Settled(r.snapshot()) {
		select {
		case <-ctx.Done():
			return
		case <-r.lock.Lost():
			r.a.log.Error("plan: lost the driver's lock; stopped driving", "plan", r.snapshot().ID)
			return
		case c := <-r.cmds:
			c.done <- r.step(ctx, plan.Event{Kind: c.kind})
			r.steer(ctx, time.Now())
		case now := <-tick.C:
			r.follow(ctx)
			r.steer(ctx, now)
			r.step(ctx, plan.Event{Kind: plan.Tick})
		}
	}
	p := r.snapshot()
	t := plan.Sum(p)
	r.a.log.Info("plan: ended", "plan", p.ID, "state", p.State, "done", t.Done, "failed", t.Failed, "moved_bytes", t.Moved,
		"seconds", p.Finished.Sub(p.Created).Seconds())
}

// step applies ev, persists the plan if it changed, and does the actions.
func (r *planRun) step(ctx context.Context, ev plan.Event) error {
	r.mu.Lock()
	before := r.mu.p
	next, acts := plan.Step(before, ev, time.Now())
	r.mu.p = next
	r.mu.Unlock()
	if changed(before, next) {
		if err := r.lock.Update(func(tx *catalog.Tx) error { return tx.PutPlan(next) }); err != nil {
			r.a.log.Error("plan: persisting", "plan", next.ID, "err", err)
			return err
		}
	}
	for _, act := range acts {
		switch act.Kind {
		case plan.Start:
			r.start(ctx, act.Move)
		case plan.Cancel:
			r.cancel(ctx, act.Move)
		case plan.Watch: // follow watches every running move with an ID
		}
	}
	return nil
}

func changed(a, b plan.Plan) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return string(x) != string(y)
}

// start starts move i's migration on its source agent. A refusal (4xx)
// fails the move; an error without an answer leaves it running without an
// ID, for follow to find the migration or start it again.
func (r *planRun) start(ctx context.Context, i int) {
	m := r.snapshot().Moves[i]
	r.mu.Lock()
	n := len(plan.Shares(r.mu.p, 1, r.copyingLocked(r.mu.p))) // this move included: running, no figures yet
	r.mu.Unlock()
	rate := r.moveRate(r.share(n))
	if m.IsRange() {
		r.startRange(ctx, i, rate)
		return
	}
	c, err := r.a.agentAPI(m.From)
	if err != nil {
		r.step(ctx, plan.Event{Kind: plan.RolledBack, Move: i, Err: err.Error()})
		return
	}
	sctx, cancel := context.WithTimeout(ctx, time.Minute)
	mig, err := c.StartMigration(sctx, client.StartMigration{Tenant: m.TenantID, To: m.To, Rate: rate})
	cancel()
	switch {
	case err == nil:
		r.mu.Lock()
		r.mu.set[i] = rate
		r.mu.Unlock()
		r.a.log.Info("plan: move started", "plan", r.snapshot().ID, "tenant", m.Tenant, "from", m.From, "to", m.To, "migration", mig.ID)
		r.step(ctx, plan.Event{Kind: plan.Started, Move: i, ID: mig.ID})
	case client.IsClientError(err):
		r.step(ctx, plan.Event{Kind: plan.RolledBack, Move: i, Err: err.Error()})
	default:
		r.a.log.Warn("plan: starting a move; will look for its migration", "tenant", m.Tenant, "err", err)
	}
}

func (r *planRun) cancel(ctx context.Context, i int) {
	m := r.snapshot().Moves[i]
	if m.IsRange() {
		r.a.log.Info("plan: aborted; a key-range move runs to its end (a reconfiguration rolls forward)", "keys", m.What(), "reshard", m.Migration)
		return
	}
	c, err := r.a.agentAPI(m.From)
	if err == nil && m.Migration != "" {
		actx, cancel := context.WithTimeout(ctx, 30*time.Second)
		_, err = c.AbortMigration(actx, m.Migration)
		cancel()
	}
	if err != nil {
		r.a.log.Warn("plan: aborting a move (follow sees how it ends)", "tenant", m.Tenant, "err", err)
	}
}

// follow reads every running move's migration and feeds what it sees.
func (r *planRun) follow(ctx context.Context) {
	p := r.snapshot()
	for i, m := range p.Moves {
		if m.Status != plan.Running {
			continue
		}
		c, err := r.a.agentAPI(m.Driver())
		if err != nil {
			continue
		}
		qctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		switch {
		case m.IsRange() && m.Migration == "":
			r.recoverRange(qctx, c, i, m)
		case m.IsRange():
			r.followRange(qctx, c, i, m)
		case m.Migration == "":
			r.recover(qctx, c, i, m)
		}
		if m.IsRange() || m.Migration == "" {
			cancel()
			continue
		}
		mig, err := c.Migration(qctx, m.Migration)
		cancel()
		if err != nil {
			continue // the source agent may be restarting: ask again next step
		}
		pr := mig.Progress
		r.mu.Lock()
		r.mu.live[i] = client.PlanMoveLive{Phase: pr.Phase, Rate: pr.Rate, Limit: pr.Limit, ETASeconds: pr.ETASeconds}
		r.mu.Unlock()
		switch {
		case mig.Done && mig.Outcome == "committed":
			var b int64
			if mig.Summary != nil {
				b = mig.Summary.Bytes
			}
			r.forget(i)
			r.step(ctx, plan.Event{Kind: plan.Committed, Move: i, Bytes: b})
		case mig.Done:
			r.forget(i)
			r.step(ctx, plan.Event{Kind: plan.RolledBack, Move: i, Err: mig.Outcome + ": " + mig.Error})
		case pr.Phase == string(migration.PhaseSnapshot):
			r.step(ctx, plan.Event{Kind: plan.Progressed, Move: i, Bytes: pr.Bytes, Total: pr.TotalBytes})
		case copied(pr.Phase) && m.Moved < m.Bytes:
			// Past its snapshot the move's bytes have moved (the phases'
			// own byte counts are of other copies: the warm start's pages).
			r.step(ctx, plan.Event{Kind: plan.Progressed, Move: i, Bytes: m.Bytes})
		}
	}
}

// copied reports whether a migration in phase has its snapshot behind it
// and is going forward (not rolling back).
func copied(phase string) bool {
	switch migration.Phase(phase) {
	case migration.PhaseCatchUp, migration.PhaseWarm, migration.PhaseHandover, migration.PhaseCleanup:
		return true
	}
	return false
}

func (r *planRun) forget(i int) {
	r.mu.Lock()
	delete(r.mu.live, i)
	delete(r.mu.set, i)
	r.mu.Unlock()
}

// recover finds move i's migration after a start whose answer was lost
// (the driver crashed, or the source did not answer): the newest source
// migration of its tenant begun since the move started; none, and the
// tenant still running there, starts it again.
func (r *planRun) recover(ctx context.Context, c *client.Client, i int, m plan.Move) {
	ms, err := c.Migrations(ctx)
	if err != nil {
		return
	}
	var found client.Migration
	for _, mig := range ms {
		if mig.Tenant == m.TenantID && mig.Role == "source" && !mig.Created.Before(m.Started.Add(-time.Minute)) && mig.Created.After(found.Created) {
			found = mig
		}
	}
	if found.ID != "" {
		r.step(ctx, plan.Event{Kind: plan.Started, Move: i, ID: found.ID})
		return
	}
	if tn, err := c.Tenant(ctx, m.TenantID); err == nil && tn.State == "running" {
		r.start(ctx, i)
	}
}
