package agent

import (
	"context"
	"maps"
	"math"
	"time"

	"github.com/sluicedb/sluice/agent/client"
	"github.com/sluicedb/sluice/migration"
	"github.com/sluicedb/sluice/plan"
)

// steer runs one step of the plan's control loop and sets every running
// move's rate. The controller steps only while some move is copying its
// snapshot (the load it controls): between copies, and while paused, it
// holds, so its integral does not wind up against an idle plant.
func (r *planRun) steer(ctx context.Context, now time.Time) {
	p := r.snapshot()
	var ws []plan.Window
	var lerr error
	if r.a.cfg.Proxy != "" {
		qctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
		ws, lerr = r.windows(qctx)
		cancel()
	}
	r.mu.Lock()
	copying := r.copyingLocked(p)
	reason := ""
	if r.ctrl != nil && p.State == plan.StateRunning && len(plan.Shares(p, 1, copying)) > 0 {
		d := r.ctrl.Next(plan.Observe(p, ws, lerr, now, r.prof.Settle()))
		r.mu.rate, reason = d.Rate, d.Reason
	}
	r.mu.worst, r.mu.worstL, r.mu.worstC = plan.Worst(p, ws)
	pt := client.PlanPoint{At: now, Rate: apiRate(r.mu.rate), Moved: plan.Sum(p).Moved, Worst: r.mu.worst, Reason: reason,
		LatencyMs: map[string]float64{}, ContractMs: map[string]float64{}}
	for _, m := range p.Moves {
		if m.Status == plan.Running {
			pt.Running++
		}
	}
	for _, s := range p.Stores {
		pt.ContractMs[s.Name] = s.ContractMs
		for _, w := range ws {
			if w.Store == s.Name && w.Count > 0 {
				pt.LatencyMs[s.Name] = w.MeanMs
			}
		}
	}
	if len(r.mu.series) >= planSeriesMax {
		r.mu.series = r.mu.series[1:]
	}
	r.mu.series = append(r.mu.series, pt)
	shares := plan.Shares(p, r.mu.rate, copying)
	r.mu.Unlock()
	r.apply(ctx, p, shares)
}

// copyingLocked reports whether running move i is (or may be: no figures
// yet) in its snapshot.
func (r *planRun) copyingLocked(p plan.Plan) func(int) bool {
	live := maps.Clone(r.mu.live)
	return func(i int) bool {
		l, ok := live[i]
		if p.Moves[i].IsRange() {
			return !ok || reshardCopying(l.Phase)
		}
		return !ok || l.Phase == "" || l.Phase == string(migration.PhasePrepare) || l.Phase == string(migration.PhaseSnapshot)
	}
}

// apply sets each running move's migration rate: its share while it
// copies (planPausedRate while the plan is paused), unlimited after. A rate
// within 1 % of the one set is not sent again.
func (r *planRun) apply(ctx context.Context, p plan.Plan, shares map[int]float64) {
	for i, m := range p.Moves {
		if m.Status != plan.Running || m.Migration == "" {
			continue
		}
		want := 0.0 // unlimited: past its copy
		if sh, ok := shares[i]; ok {
			want = r.moveRate(sh)
			if p.State == plan.StatePaused {
				want = planPausedRate
			}
		}
		c, err := r.a.agentAPI(m.Driver())
		if err != nil {
			continue
		}
		if m.IsRange() {
			r.paceRange(ctx, c, i, m, want)
			continue
		}
		r.mu.Lock()
		have, ok := r.mu.set[i]
		r.mu.Unlock()
		if ok && closeRate(have, want, 0.01) {
			continue
		}
		sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		_, err = c.SetRate(sctx, m.Migration, want)
		cancel()
		if err == nil {
			r.mu.Lock()
			r.mu.set[i] = want
			r.mu.Unlock()
		}
	}
}

// closeRate reports whether rate want is have, or both are limits (> 0)
// within tol (a fraction of have): not worth sending again.
func closeRate(have, want, tol float64) bool {
	return have == want || (have > 0 && want > 0 && math.Abs(want-have) <= tol*have)
}

// share is each of n copying moves' part of the aggregate rate now.
func (r *planRun) share(n int) float64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.mu.rate / float64(max(n, 1))
}

// moveRate is the migration API's rate for a share (bytes/s; 0 =
// unlimited): under control at least planFloorShare of the top speed.
func (r *planRun) moveRate(share float64) float64 {
	if math.IsInf(share, 1) {
		return 0
	}
	if r.ctrl != nil {
		share = max(share, planFloorShare*plan.MaxRate(r.snapshot(), r.prof))
	}
	return max(share, planPausedRate)
}

// windows reads the proxy's per-tenant windows: one per tenant, the one on
// the server carrying most of its transactions (after a handover the old
// server's window drains away). A tenant the proxy routes with no client
// session open (the keyspace router's counted) and no transaction in its
// window is Idle.
func (r *planRun) windows(ctx context.Context) ([]plan.Window, error) {
	pc := r.a.proxyClient()
	raw, err := pc.Latency(ctx, "")
	if err != nil {
		return nil, err
	}
	routes, err := pc.Routes(ctx)
	if err != nil {
		return nil, err
	}
	best := map[string]plan.Window{}
	for _, w := range raw {
		if w.Tenant == "" {
			continue
		}
		if b, ok := best[w.Tenant]; !ok || w.Count > b.Count {
			best[w.Tenant] = plan.Window{Store: w.Tenant, Count: w.Count, MeanMs: w.MeanMS, P95Ms: w.P95MS, P99Ms: w.P99MS}
		}
	}
	for _, rt := range routes {
		if w := best[rt.Tenant]; w.Count == 0 && rt.Sessions == 0 && !rt.Held {
			best[rt.Tenant] = plan.Window{Store: rt.Tenant, Idle: true}
		}
	}
	out := make([]plan.Window, 0, len(best))
	for _, w := range best {
		out = append(out, w)
	}
	return out, nil
}

// apiRate is a rate for the API: -1 = unlimited.
func apiRate(v float64) float64 {
	if math.IsInf(v, 1) {
		return -1
	}
	return v
}

// status is the plan's state with its live figures.
func (r *planRun) status() client.PlanStatus {
	r.mu.Lock()
	defer r.mu.Unlock()
	st := planStatus(r.mu.p, time.Now())
	st.Live = !r.mu.ended
	st.Rate = apiRate(r.mu.rate)
	st.Worst, st.WorstLatencyMs, st.WorstContractMs = r.mu.worst, r.mu.worstL, r.mu.worstC
	st.MoveLive = maps.Clone(r.mu.live)
	return st
}

func (r *planRun) seriesCopy() []client.PlanPoint {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]client.PlanPoint{}, r.mu.series...)
}
