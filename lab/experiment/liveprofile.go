package experiment

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	agentclient "github.com/sluicedb/sluice/agent/client"
	"github.com/sluicedb/sluice/control"
	"github.com/sluicedb/sluice/control/tune"
	proxyclient "github.com/sluicedb/sluice/proxy/client"
)

// LiveProfile is Aqueduct's profiling (§5.1) on a running system, `sluice
// tune --live`: it migrates one tenant at a staircase of fixed rates,
// measures at each rung the victim latency (the latency of the store with
// the smallest error P·LC_i − L_i, from the proxy's per-tenant windows),
// stops at the first rung over its contract or when the snapshot ends, rolls
// the migration back (profiling moves nothing), and fits the process gain
// G by linear regression of victim latency on the measured rate.
type LiveProfile struct {
	Agent  *agentclient.Client // the tenant's agent
	Proxy  *proxyclient.Client
	Tenant int64
	To     string // target agent's name (a peer of Agent)
	// Contracts are the watched stores' contracts (tenant name → latency);
	// every tenant the proxy reports is watched, at DefaultContract when
	// not named here.
	Contracts       map[string]time.Duration
	DefaultContract time.Duration
	// Rates is the staircase, bytes/s, ascending; nil = LiveRates(top).
	Rates []float64
	// Rung is each rung's length; its first proxy window (3 s) is
	// discarded as the previous rung's. Default LiveRung.
	Rung     time.Duration
	Progress func(format string, args ...any)
}

// LiveRung is a rung's default length: one proxy window (3 s) to settle,
// one to measure (sampled each second). A rung must fit in one snapshot: at
// rate r it copies r × LiveRung.
const LiveRung = 6 * time.Second

// LiveRates is the default staircase under top (bytes/s): top/64 doubling
// up to top/2.
func LiveRates(top float64) []float64 {
	var out []float64
	for f := 64.0; f >= 2; f /= 2 {
		out = append(out, top/f)
	}
	return out
}

// LivePoint is one rung.
type LivePoint struct {
	SetRate   float64 `json:"set_rate"`
	Rate      float64 `json:"rate"` // measured over the rung's measuring part, bytes/s
	VictimMs  float64 `json:"victim_latency_ms"`
	Victim    string  `json:"victim"`
	OverLimit bool    `json:"over_contract"`
}

// LiveFit is LiveProfile's outcome.
type LiveFit struct {
	Points      []LivePoint `json:"points"`
	G           float64     `json:"g_s_per_Bps"` // seconds of victim latency per byte/s
	GmsPerMBps  float64     `json:"g_ms_per_MBps"`
	InterceptMs float64     `json:"intercept_ms"`
	R2          float64     `json:"r2"`
}

// Run profiles and fits. It needs at least 3 rungs with data. Each rung
// runs inside one migration's snapshot: when the one running has less left
// than the rung would copy, it is rolled back and a fresh one started; a
// rung the whole snapshot could not fill ends the staircase (the tenant is
// too small to profile at that rate).
func (lp LiveProfile) Run(ctx context.Context) (LiveFit, error) {
	var fit LiveFit
	if lp.Rung == 0 {
		lp.Rung = LiveRung
	}
	if lp.Rates == nil {
		lp.Rates = LiveRates(control.DefaultProfile().MaxRate)
	}
	if lp.DefaultContract <= 0 {
		return fit, errors.New("live profile: no default contract")
	}
	if lp.Progress == nil {
		lp.Progress = func(string, ...any) {}
	}
	say := lp.Progress
	var id string
	defer func() { lp.rollBack(id) }()
	for _, r := range lp.Rates {
		need := int64(1.2 * r * lp.Rung.Seconds())
		m, err := lp.fresh(ctx, id, r, need)
		if err != nil {
			return fit, err
		}
		id = m.ID
		if left := m.Progress.TotalBytes - m.Progress.Bytes; left < need {
			say("the tenant's snapshot (%.0f MB) is too small for a rung at %.1f MB/s: profile stops", float64(m.Progress.TotalBytes)/1e6, r/1e6)
			break
		}
		pt, ok, err := lp.rung(ctx, id, r)
		if err != nil {
			return fit, err
		}
		if !ok {
			say("the snapshot ended during the rung at %.1f MB/s: profile stops", r/1e6)
			break
		}
		say("rung %.1f MB/s: measured %.1f MB/s, victim %s %.2f ms", r/1e6, pt.Rate/1e6, pt.Victim, pt.VictimMs)
		fit.Points = append(fit.Points, pt)
		if pt.OverLimit {
			break
		}
	}
	var xs, ys []float64
	for _, p := range fit.Points {
		xs, ys = append(xs, p.Rate), append(ys, p.VictimMs/1e3)
	}
	g, icpt, r2, err := tune.FitGain(xs, ys)
	if err != nil {
		return fit, fmt.Errorf("live profile: %w", err)
	}
	fit.G, fit.GmsPerMBps, fit.InterceptMs, fit.R2 = g, g*1e9, icpt*1e3, r2
	return fit, nil
}

// fresh returns migration id if it is copying its snapshot with at least
// need bytes left; else it rolls id back (if any) and starts a new one at
// rate, and returns it once its snapshot's size is known.
func (lp LiveProfile) fresh(ctx context.Context, id string, rate float64, need int64) (agentclient.Migration, error) {
	if id != "" {
		m, err := lp.Agent.Migration(ctx, id)
		if err == nil && !m.Done && m.Progress.Phase == "snapshot" && m.Progress.TotalBytes-m.Progress.Bytes >= need {
			return m, nil
		}
		lp.rollBack(id)
	}
	m, err := lp.Agent.StartMigration(ctx, agentclient.StartMigration{Tenant: lp.Tenant, To: lp.To, Rate: rate})
	if err != nil {
		return m, fmt.Errorf("live profile: start migration: %w", err)
	}
	for {
		v, err := lp.Agent.Migration(ctx, m.ID)
		if err == nil && (v.Done || (v.Progress.Phase == "snapshot" && v.Progress.TotalBytes > 0)) {
			if v.Done {
				return v, fmt.Errorf("live profile: migration %s ended at its start: %s %s", v.ID, v.Outcome, v.Error)
			}
			return v, nil
		}
		if !sleepCtx(ctx, 200*time.Millisecond) {
			return m, ctx.Err()
		}
	}
}

// rollBack aborts migration id (if any) and waits up to a minute until it
// has ended (profiling moves nothing).
func (lp LiveProfile) rollBack(id string) {
	if id == "" {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := lp.Agent.AbortMigration(ctx, id); err != nil {
		lp.Progress("profiling migration %s: abort: %v", id, err)
	}
	for ctx.Err() == nil { // ended, and the tenant serving here again
		if v, err := lp.Agent.Migration(ctx, id); err == nil && v.Done {
			if t, err := lp.Agent.Tenant(ctx, lp.Tenant); err == nil && t.State != "migrating-out" {
				return
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// rung runs one rung at rate; ok is false if the migration left its
// snapshot (nothing more to profile).
func (lp LiveProfile) rung(ctx context.Context, id string, rate float64) (LivePoint, bool, error) {
	pt := LivePoint{SetRate: rate}
	if _, err := lp.Agent.SetRate(ctx, id, rate); err != nil {
		return pt, false, fmt.Errorf("live profile: set rate: %w", err)
	}
	settle := min(3*time.Second, lp.Rung/2)
	if !sleepCtx(ctx, settle) {
		return pt, false, ctx.Err()
	}
	first, err := lp.Agent.Migration(ctx, id)
	if err != nil || first.Done || first.Progress.Phase != "snapshot" {
		return pt, false, err
	}
	t0 := time.Now()
	var sum float64
	n := 0
	worst := map[string]int{}
	for time.Since(t0) < lp.Rung-settle {
		if !sleepCtx(ctx, time.Second) {
			return pt, false, ctx.Err()
		}
		ws, err := lp.Proxy.Latency(ctx, "")
		if err != nil {
			continue
		}
		name, l := lp.victim(ws)
		if name != "" {
			sum += l
			n++
			worst[name]++
		}
	}
	last, err := lp.Agent.Migration(ctx, id)
	if err != nil || last.Done || last.Progress.Phase != "snapshot" || n == 0 {
		return pt, false, err
	}
	pt.Rate = float64(last.Progress.Bytes-first.Progress.Bytes) / time.Since(t0).Seconds()
	pt.VictimMs = sum / float64(n)
	for name, c := range worst {
		if c > worst[pt.Victim] {
			pt.Victim = name
		}
	}
	lc := lp.Contracts[pt.Victim]
	if lc <= 0 {
		lc = lp.DefaultContract
	}
	pt.OverLimit = pt.VictimMs > float64(lc)/1e6
	return pt, true, nil
}

// victim is the store with the smallest P·LC_i − L_i among ws (tenants with
// transactions), and its mean latency, ms.
func (lp LiveProfile) victim(ws []proxyclient.Window) (string, float64) {
	p := control.DefaultIntegralParams().P
	best, name, lat := math.Inf(1), "", 0.0
	for _, w := range ws {
		if w.Tenant == "" || w.Count == 0 {
			continue
		}
		lc := lp.Contracts[w.Tenant]
		if lc <= 0 {
			lc = lp.DefaultContract
		}
		if e := p*float64(lc)/1e6 - w.MeanMS; e < best {
			best, name, lat = e, w.Tenant, w.MeanMS
		}
	}
	return name, lat
}
