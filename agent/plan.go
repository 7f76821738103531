package agent

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"maps"
	"net/http"
	"slices"
	"time"

	"github.com/sluicedb/sluice/agent/client"
	"github.com/sluicedb/sluice/catalog"
	"github.com/sluicedb/sluice/control"
	"github.com/sluicedb/sluice/keyspace"
	"github.com/sluicedb/sluice/plan"
)

// Migration plans (package plan; the Aqueduct paper) are driven by the agent
// they are posted to, which need not hold any of their tenants:
//
//	POST /v1/plans                  plan.Spec → 201 client.PlanStatus (validated, persisted, started)
//	GET  /v1/plans                  every plan this agent drives or drove, oldest first
//	GET  /v1/plans/{id}             its state, per move and total: bytes, rate, ETA
//	GET  /v1/plans/{id}/series      the control loop's record, one point per step
//	POST /v1/plans/{id}/pause       copying moves held at 64 KiB/s, none started
//	POST /v1/plans/{id}/resume      back to the controller's rate
//	POST /v1/plans/{id}/abort       running moves rolled back, none started
//
// The driver starts each move as a migration on its source agent (POST
// /v1/migrations there, without a control loop of its own), follows it, and
// sets its rate: the plan's control loop (plan_run.go) owns every moving
// snapshot's throttle. The plan's state is in the catalog's plans bucket
// after every change; a restarted agent resumes every plan not ended
// (Serve → resumePlans): the moves' migrations were resumed by their own
// source agents meanwhile.

func (a *Agent) planRoutes(mux *http.ServeMux) {
	mux.HandleFunc("POST /v1/plans", func(w http.ResponseWriter, r *http.Request) {
		var spec plan.Spec
		if err := readJSON(r, &spec); err != nil {
			writeError(w, err)
			return
		}
		v, err := a.ApplyPlan(r.Context(), spec)
		answer(w, http.StatusCreated, v, err)
	})
	mux.HandleFunc("GET /v1/plans", func(w http.ResponseWriter, r *http.Request) {
		v, err := a.Plans()
		answer(w, http.StatusOK, v, err)
	})
	mux.HandleFunc("GET /v1/plans/{id}", func(w http.ResponseWriter, r *http.Request) {
		v, err := a.PlanStatus(r.PathValue("id"))
		answer(w, http.StatusOK, v, err)
	})
	mux.HandleFunc("GET /v1/plans/{id}/series", func(w http.ResponseWriter, r *http.Request) {
		v, err := a.PlanSeries(r.PathValue("id"))
		answer(w, http.StatusOK, v, err)
	})
	mux.HandleFunc("POST /v1/plans/{id}/{op}", func(w http.ResponseWriter, r *http.Request) {
		v, err := a.PlanOp(r.PathValue("id"), r.PathValue("op"))
		answer(w, http.StatusOK, v, err)
	})
}

// planAgents are the agents a plan here may use: this one and its peers.
func (a *Agent) planAgents() []string {
	names := slices.Sorted(maps.Keys(a.cfg.Peers))
	return append([]string{a.cfg.Name}, names...)
}

// agentAPI returns a client for agent name: this agent's own API (with its
// token), or a configured peer's.
func (a *Agent) agentAPI(name string) (*client.Client, error) {
	if name == a.cfg.Name {
		c, err := client.New(a.url)
		if err != nil {
			return nil, err
		}
		if a.peerTLS != nil {
			c = c.WithTLS(a.peerTLS)
		}
		return c.WithToken(a.token), nil
	}
	u, ok := a.cfg.Peers[name]
	if !ok {
		return nil, errf(http.StatusBadRequest, "agent %s is not a peer of agent %s", name, a.cfg.Name)
	}
	return a.reshardPeer(u)
}

// planInventory asks every agent a plan may use for its default contract,
// its tenants and the keyspaces it holds. An agent that does not answer
// fails the request (502): a plan is validated against all of them or not
// at all.
func (a *Agent) planInventory(ctx context.Context) (plan.Inventory, error) {
	inv := plan.Inventory{}
	for _, name := range a.planAgents() {
		c, err := a.agentAPI(name)
		if err != nil {
			return nil, err
		}
		qctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		info, err := c.Info(qctx)
		var ts []client.Tenant
		if err == nil {
			ts, err = c.Tenants(qctx, false)
		}
		var kss []*keyspace.Keyspace
		if err == nil {
			kss, err = c.Keyspaces(qctx)
		}
		cancel()
		if err != nil {
			return nil, errf(http.StatusBadGateway, "agent %s: %v", name, err)
		}
		ag := plan.Agent{ContractMs: info.ContractMs, Keyspaces: kss}
		for _, t := range ts {
			if t.State == string(catalog.Moved) || t.State == string(catalog.Deleted) || t.State == string(catalog.MigratingIn) {
				continue
			}
			pt := plan.Tenant{ID: t.ID, Name: t.Name}
			if t.State != string(catalog.Running) {
				pt.Busy = "is " + t.State + ": only a running tenant can move"
			}
			ag.Tenants = append(ag.Tenants, pt)
		}
		inv[name] = ag
	}
	return inv, nil
}

// ApplyPlan validates spec against the agents' tenants (plan.Validate:
// every refusal is a 400 and changes nothing), persists the plan and
// starts driving it.
func (a *Agent) ApplyPlan(ctx context.Context, spec plan.Spec) (client.PlanStatus, error) {
	inv, err := a.planInventory(ctx)
	if err != nil {
		return client.PlanStatus{}, err
	}
	p, err := plan.Validate(spec, inv)
	if err != nil {
		return client.PlanStatus{}, errf(http.StatusBadRequest, "%v", err)
	}
	if plan.Controlled(p.Method) {
		if a.cfg.Proxy == "" {
			return client.PlanStatus{}, errf(http.StatusBadRequest, "plan: method %s steers by the proxy's per-tenant latency; agent %s has no proxy configured (or use method sub-store or whole-store)", p.Method, a.cfg.Name)
		}
		if _, err := plan.Controller(p, control.DefaultProfile()); err != nil {
			return client.PlanStatus{}, errf(http.StatusBadRequest, "%v", err)
		}
	}
	if err := a.planConflicts(p); err != nil {
		return client.PlanStatus{}, err
	}
	p.ID, p.Created = newPlanID(), time.Now()
	lk, err := a.cat.TryLock(ctx, planLock(p.ID))
	if err != nil {
		return client.PlanStatus{}, err
	}
	if err := lk.Update(func(tx *catalog.Tx) error { return tx.PutPlan(p) }); err != nil {
		lk.Unlock(context.Background())
		return client.PlanStatus{}, err
	}
	r := a.runPlan(lk, p, plan.Event{Kind: plan.Tick})
	a.log.Info("plan: started", "plan", p.ID, "moves", len(p.Moves), "stores", len(p.Stores), "method", p.Method)
	return r.status(), nil
}

// planConflicts refuses a plan moving a tenant, or keys of a keyspace,
// that a plan running here moves too (409).
func (a *Agent) planConflicts(p plan.Plan) error {
	for _, r := range a.plans.all() {
		q := r.snapshot()
		for _, m := range q.Moves {
			if m.Status != plan.Pending && m.Status != plan.Running {
				continue
			}
			if slices.ContainsFunc(p.Moves, func(n plan.Move) bool { return !m.IsRange() && !n.IsRange() && n.TenantID == m.TenantID }) {
				return errf(http.StatusConflict, "plan: tenant %s is moving in plan %s", m.Tenant, q.ID)
			}
			if slices.ContainsFunc(p.Moves, func(n plan.Move) bool { return m.IsRange() && n.IsRange() && n.Keyspace == m.Keyspace }) {
				return errf(http.StatusConflict, "plan: keys of keyspace %s are moving in plan %s", m.Keyspace, q.ID)
			}
		}
	}
	return nil
}

func newPlanID() string {
	var b [4]byte
	rand.Read(b[:])
	return "plan-" + time.Now().UTC().Format("20060102T150405") + "-" + hex.EncodeToString(b[:])
}

// planLock names the lock of plan id's driver (catalog.Lock): with an etcd
// catalog, one agent drives a plan at a time, and one whose lease ended
// cannot write the plan's state.
func planLock(id string) string { return "plan/" + id }

// runPlan starts driving p, holding lk, with first as its first event.
func (a *Agent) runPlan(lk *catalog.Lock, p plan.Plan, first plan.Event) *planRun {
	r := newPlanRun(a, lk, p)
	a.plans.put(p.ID, r)
	a.bg.Add(1)
	go func() {
		defer a.bg.Done()
		r.drive(a.bgCtx, first)
	}()
	return r
}

// resumePlans drives again every plan in the catalog the driver was not
// done with (plan.Settled).
func (a *Agent) resumePlans() {
	ps, err := a.cat.Plans()
	if err != nil {
		a.log.Error("plan: reading the catalog", "err", err)
		return
	}
	for _, p := range ps {
		if plan.Settled(p) {
			continue
		}
		a.bg.Add(1)
		go func() {
			defer a.bg.Done()
			// A previous driver's lease may not have ended yet: wait for it,
			// then read the state it left.
			lk, err := a.cat.Lock(a.bgCtx, planLock(p.ID))
			if err != nil {
				a.log.Error("plan: taking the driver's lock", "plan", p.ID, "err", err)
				return
			}
			id := p.ID
			if p, err = a.cat.Plan(id); err != nil {
				lk.Unlock(context.Background())
				a.log.Error("plan: reading the catalog", "plan", id, "err", err)
				return
			}
			a.runPlan(lk, p, plan.Event{Kind: plan.Resumed})
			a.log.Info("plan: resumed", "plan", p.ID, "state", p.State)
		}()
	}
}

// Plans lists every plan in the catalog with its live figures when driven.
func (a *Agent) Plans() ([]client.PlanStatus, error) {
	ps, err := a.cat.Plans()
	if err != nil {
		return nil, err
	}
	out := make([]client.PlanStatus, 0, len(ps))
	for _, p := range ps {
		st, err := a.PlanStatus(p.ID)
		if err != nil {
			return nil, err
		}
		out = append(out, st)
	}
	return out, nil
}

// PlanStatus is plan id's state and live figures.
func (a *Agent) PlanStatus(id string) (client.PlanStatus, error) {
	if r := a.plans.get(id); r != nil {
		return r.status(), nil
	}
	p, err := a.cat.Plan(id)
	if errors.Is(err, catalog.ErrNotFound) {
		return client.PlanStatus{}, errf(http.StatusNotFound, "no plan %s on agent %s", id, a.cfg.Name)
	}
	if err != nil {
		return client.PlanStatus{}, err
	}
	return planStatus(p, time.Now()), nil
}

// PlanSeries is plan id's control-loop record. It lives in memory: a plan
// driven before the agent's last start has none.
func (a *Agent) PlanSeries(id string) ([]client.PlanPoint, error) {
	if r := a.plans.get(id); r != nil {
		return r.seriesCopy(), nil
	}
	if _, err := a.PlanStatus(id); err != nil {
		return nil, err
	}
	return []client.PlanPoint{}, nil
}

// PlanOp pauses, resumes or aborts plan id.
func (a *Agent) PlanOp(id, op string) (client.PlanStatus, error) {
	var kind plan.EventKind
	switch op {
	case "pause":
		kind = plan.Pause
	case "resume":
		kind = plan.Resume
	case "abort":
		kind = plan.Abort
	default:
		return client.PlanStatus{}, errf(http.StatusNotFound, "no such plan operation %q (pause, resume, abort)", op)
	}
	r := a.plans.get(id)
	if r == nil {
		st, err := a.PlanStatus(id)
		if err != nil {
			return st, err
		}
		return st, errf(http.StatusConflict, "plan %s is %s: nothing to %s", id, st.State, op)
	}
	if err := r.command(kind); err != nil {
		return client.PlanStatus{}, err
	}
	return r.status(), nil
}

// planStatus is a plan's figures from its persisted state alone.
func planStatus(p plan.Plan, now time.Time) client.PlanStatus {
	t := plan.Sum(p)
	st := client.PlanStatus{Plan: p, Bytes: t.Bytes, MovedBytes: t.Moved, ETASeconds: -1}
	end := now
	if !p.Finished.IsZero() {
		end = p.Finished
	}
	if el := end.Sub(p.Created).Seconds(); el > 0 {
		st.Elapsed = el
		st.MeasuredRate = float64(t.Moved) / el
		if st.MeasuredRate > 0 && t.Bytes > t.Moved && !p.State.Final() {
			st.ETASeconds = float64(t.Bytes-t.Moved) / st.MeasuredRate
		}
	}
	if p.State.Final() {
		st.ETASeconds = 0
	}
	return st
}
