package agent

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/sluicedb/sluice/agent/client"
	"github.com/sluicedb/sluice/keyspace"
	"github.com/sluicedb/sluice/plan"
)

// A plan's key-range move (plan.Move.IsRange) is a reconfiguration of its
// keyspace on the agent holding it (Holder): POST
// /v1/keyspaces/{name}/reshard to the plan keyspace.Assign writes from the
// keyspace's current plan, with method paced at the move's share of the
// plan's rate, chunks of the plan's sub-move size; the driver follows it
// with GET …/reshard and repaces it with POST …/reshard/pace, as it does a
// tenant move's snapshot. A reconfiguration cannot be cancelled once its
// plan is switched (its keys have a new owner): an aborted plan's running
// key-range move runs to its end.

// reshardRateStep is the least relative change of a key-range move's pace
// the driver sends: each change is a catalog write on the holder.
const reshardRateStep = 0.05

// startRange starts key-range move i at rate (bytes/s; 0 = unlimited).
func (r *planRun) startRange(ctx context.Context, i int, rate float64) {
	p := r.snapshot()
	m := p.Moves[i]
	c, err := r.a.agentAPI(m.Holder)
	if err != nil {
		r.step(ctx, plan.Event{Kind: plan.RolledBack, Move: i, Err: err.Error()})
		return
	}
	sctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	spec, done, err := rangePlan(sctx, c, m)
	switch {
	case err != nil && client.IsClientError(err):
		r.step(ctx, plan.Event{Kind: plan.RolledBack, Move: i, Err: err.Error()})
		return
	case err != nil:
		r.a.log.Warn("plan: reading a keyspace; will try again", "plan", p.ID, "keyspace", m.Keyspace, "err", err)
		return
	case done: // a restarted driver whose reconfiguration ended unrecorded
		r.step(ctx, plan.Event{Kind: plan.Committed, Move: i})
		return
	}
	chunk := p.SubMoveBytes
	if p.Method == plan.MethodWholeStore {
		chunk = 1 << 30 // no sub-moves
	}
	st, err := c.Reshard(sctx, m.Keyspace, client.ReshardRequest{Plan: spec, Method: client.MethodPaced, Rate: reshardRate(rate), ChunkBytes: chunk})
	switch {
	case err == nil:
		r.mu.Lock()
		r.mu.set[i] = reshardRate(rate)
		r.mu.Unlock()
		r.a.log.Info("plan: move started", "plan", p.ID, "keys", m.What(), "from", m.Source, "to", m.Dest, "reshard", st.ID)
		r.step(ctx, plan.Event{Kind: plan.Started, Move: i, ID: st.ID})
	case client.IsClientError(err):
		r.step(ctx, plan.Event{Kind: plan.RolledBack, Move: i, Err: err.Error()})
	default:
		r.a.log.Warn("plan: starting a move; will look for its reconfiguration", "keys", m.What(), "err", err)
	}
}

// rangePlan is the keyspace plan giving m's keys to m.Dest, from the
// keyspace's current plan; done when they are m.Dest's already.
func rangePlan(ctx context.Context, c *client.Client, m plan.Move) (spec keyspace.PlanSpec, done bool, err error) {
	ks, err := c.Keyspace(ctx, m.Keyspace)
	if err != nil {
		return nil, false, err
	}
	rng, err := ks.ParseRange(m.Table, m.Range)
	if err == nil {
		var from []string
		spec, from, err = keyspace.Assign(ks, m.Table, rng, m.Dest)
		done = err == nil && len(from) == 0
	}
	if err != nil { // the keyspace changed under the plan: the move cannot be made
		return nil, false, &client.APIError{Status: 400, Msg: fmt.Sprintf("keyspace %s: %v", m.Keyspace, err)}
	}
	return spec, done, nil
}

// reshardRate is method paced's rate for a move rate (0 = unlimited: -1).
func reshardRate(rate float64) float64 {
	if rate == 0 || math.IsInf(rate, 1) {
		return -1
	}
	return rate
}

// followRange reads key-range move i's reconfiguration and feeds what it
// sees.
func (r *planRun) followRange(ctx context.Context, c *client.Client, i int, m plan.Move) {
	st, err := c.ReshardStatus(ctx, m.Keyspace, false)
	if err != nil {
		return // the holder may be restarting: ask again next step
	}
	if st.ID != m.Migration {
		// A later reconfiguration of the keyspace: ours ended before it.
		_, done, err := rangePlan(ctx, c, m)
		switch {
		case err != nil && !client.IsClientError(err):
		case done:
			r.forget(i)
			r.step(ctx, plan.Event{Kind: plan.Committed, Move: i})
		default:
			r.forget(i)
			r.step(ctx, plan.Event{Kind: plan.RolledBack, Move: i, Err: fmt.Sprintf("reconfiguration %s is no longer keyspace %s's last, and its keys did not arrive", m.Migration, m.Keyspace)})
		}
		return
	}
	live := client.PlanMoveLive{Phase: st.Phase, Limit: max(st.Rate, 0), ETASeconds: st.ETASeconds}
	if el := time.Since(st.Started).Seconds(); el > 0 {
		live.Rate = float64(st.BytesCopied) / el
	}
	r.mu.Lock()
	r.mu.live[i] = live
	r.mu.Unlock()
	switch st.Phase {
	case client.PhaseDone:
		r.forget(i)
		r.step(ctx, plan.Event{Kind: plan.Committed, Move: i, Bytes: st.Progress.Bytes})
	case client.PhaseFailed:
		r.forget(i)
		r.step(ctx, plan.Event{Kind: plan.RolledBack, Move: i, Err: "reconfiguration failed: " + st.Error})
	default:
		r.step(ctx, plan.Event{Kind: plan.Progressed, Move: i, Bytes: st.Progress.BytesDone, Total: st.Progress.Bytes})
	}
}

// recoverRange finds key-range move i's reconfiguration after a start whose
// answer was lost: the keyspace's last, if begun since the move started;
// else it starts the move again (which finds its keys arrived, if so).
func (r *planRun) recoverRange(ctx context.Context, c *client.Client, i int, m plan.Move) {
	st, err := c.ReshardStatus(ctx, m.Keyspace, false)
	if err != nil && client.StatusOf(err) != 404 {
		return
	}
	if err == nil && !st.Started.Before(m.Started.Add(-time.Minute)) {
		r.step(ctx, plan.Event{Kind: plan.Started, Move: i, ID: st.ID})
		return
	}
	r.startRange(ctx, i, r.moveRate(r.share(1)))
}

// paceRange sets key-range move i's pace to want (bytes/s; 0 = unlimited)
// unless it is within reshardRateStep of the one set.
func (r *planRun) paceRange(ctx context.Context, c *client.Client, i int, m plan.Move, want float64) {
	want = reshardRate(want)
	r.mu.Lock()
	have, ok := r.mu.set[i]
	r.mu.Unlock()
	if ok && closeRate(have, want, reshardRateStep) {
		return
	}
	sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	_, err := c.SetReshardPace(sctx, m.Keyspace, client.ReshardPace{Method: client.MethodPaced, Rate: want})
	cancel()
	if err == nil {
		r.mu.Lock()
		r.mu.set[i] = want
		r.mu.Unlock()
	}
}

// reshardCopying reports whether a key-range move in phase is moving data
// (the load the plan's contracts guard against): all of a reconfiguration
// but its end.
func reshardCopying(phase string) bool {
	return phase == client.PhasePreparing || phase == client.PhaseSwitching || phase == client.PhaseMoving
}
