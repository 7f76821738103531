package experiment

import (
	"context"
	"fmt"
	"math"
	"time"

	agentclient "github.com/sluicedb/sluice/agent/client"
	"github.com/sluicedb/sluice/lab/testbed"
	"github.com/sluicedb/sluice/plan"
)

// PlanBenchResult is `sluice bench plan --json`. Figures that had no data
// are -1.
type PlanBenchResult struct {
	Servers            int          `json:"servers"`
	Stores             int          `json:"stores"`
	Moves              int          `json:"moves"`
	StoreBytes         int64        `json:"store_bytes"`
	RateTPS            float64      `json:"rate_tps_per_store"`
	MPL                int          `json:"mpl_per_store"`
	ContractMs         float64      `json:"contract_ms"`
	BaselineTPS        float64      `json:"baseline_tps"`
	FixedBaselineP99Ms float64      `json:"fixed_store_baseline_p99_ms"`
	BaselineWindow95Ms float64      `json:"baseline_window_p95_ms"` // 95th percentile of the stores' window means without migration
	AloneBaselineP99Ms float64      `json:"alone_store_baseline_p99_ms"`
	K                  float64      `json:"k"`
	Pole               float64      `json:"pole"`
	KNote              string       `json:"k_note,omitempty"`
	Profile            *LiveFit     `json:"profile,omitempty"`
	Methods            []PlanMethod `json:"methods"`
}

// PlanMethod is one method's plan.
type PlanMethod struct {
	Method                 string            `json:"method"`
	State                  string            `json:"state"` // the plan's end state (done unless cut or failed)
	PlanSeconds            float64           `json:"plan_seconds"`
	WorstViolationFraction float64           `json:"worst_violation_fraction"`
	WorstAVLFraction       float64           `json:"worst_avl_fraction"` // (AVL − LC)/LC of the worst store; < 0 = under its contract
	FixedStoreP99Ms        float64           `json:"fixed_store_p99_ms"`
	AloneStoreP99Ms        float64           `json:"alone_store_p99_ms"`
	ThroughputFraction     float64           `json:"throughput_fraction"` // all stores' transactions/s during the plan ÷ before it
	WritesAcknowledged     int64             `json:"writes_acknowledged"`
	WritesMissing          int64             `json:"writes_missing"`
	WritesDuplicated       int64             `json:"writes_duplicated"`
	MovedBytes             int64             `json:"moved_bytes"`
	MeanRateMBs            float64           `json:"mean_rate_mb_s"`
	Rollbacks              int               `json:"rollbacks"` // moves' migrations that rolled back and were tried again
	Stores                 []PlanStoreResult `json:"stores"`
}

// PlanStoreResult is one store's figures over a method's plan.
type PlanStoreResult struct {
	Name       string  `json:"name"`
	Role       string  `json:"role"`
	ContractMs float64 `json:"contract_ms"`
	StoreFigures
	AVLFraction float64 `json:"avl_fraction"`
	MovedBytes  int64   `json:"moved_bytes"`
}

// runMethod runs one method's plan under every store's workload.
func (o *PlanBenchOptions) runMethod(ctx context.Context, bed *testbed.Bed, stores []planStore, method string, forward bool,
	contractMs, k float64, session uint64) (PlanMethod, planOutput, error) {
	run := PlanMethod{Method: method}
	out := planOutput{method: method}
	say := o.Progress
	if err := waitServing(ctx, bed); err != nil {
		return run, out, err
	}
	say("%s: warm-up %s, then the plan (%s)", method, o.Warmup, map[bool]string{true: "forward", false: "back"}[forward])
	l, err := o.startLoads(ctx, stores, session)
	if err != nil {
		return run, out, err
	}
	defer l.cancel()
	if !sleepCtx(ctx, o.Warmup) {
		return run, out, ctx.Err()
	}
	driver := bed.Servers[0].Client
	st, err := driver.ApplyPlan(ctx, planSpec(bed, stores, method, forward, contractMs, k))
	if err != nil {
		return run, out, fmt.Errorf("apply: %w", err)
	}
	start := time.Now()
	out.start = start
	for last := start; !st.State.Final(); {
		if !sleepCtx(ctx, time.Second) {
			return run, out, ctx.Err()
		}
		next, err := driver.Plan(ctx, st.ID)
		if err != nil {
			continue
		}
		st = next
		out.status = append(out.status, st)
		if time.Since(last) >= 5*time.Second {
			last = time.Now()
			t := plan.Sum(st.Plan)
			say("%s: %.0fs, moves %d/%d done, %.0f/%.0f MB, limit %s, worst %s %.1f ms", method, time.Since(start).Seconds(), t.Done, t.Moves,
				float64(t.Moved)/1e6, float64(t.Bytes)/1e6, rateText(st.Rate), st.Worst, st.WorstLatencyMs)
		}
		if time.Since(start) > o.PlanBound {
			say("%s: not done after %s: aborting", method, o.PlanBound)
			if _, err := driver.PlanOp(ctx, st.ID, "abort"); err != nil {
				return run, out, err
			}
		}
	}
	end := st.Finished
	if end.IsZero() {
		end = time.Now()
	}
	out.series, _ = driver.PlanSeries(ctx, st.ID)
	if !sleepCtx(ctx, o.After) {
		return run, out, ctx.Err()
	}
	chk, err := l.stop(ctx, stores)
	if err != nil {
		return run, out, err
	}
	run.State, run.PlanSeconds = string(st.State), round(end.Sub(start).Seconds(), 1)
	run.WritesAcknowledged, run.WritesMissing, run.WritesDuplicated = chk.Acknowledged, chk.Missing, chk.Duplicated
	o.figures(&run, &out, l, stores, st, start, end, contractMs)
	return run, out, nil
}

func rateText(r float64) string {
	if r < 0 {
		return "none"
	}
	return fmt.Sprintf("%.1f MB/s", r/1e6)
}

// figures fills run's figures from the workloads over [start, end).
func (o *PlanBenchOptions) figures(run *PlanMethod, out *planOutput, l *storeLoad, stores []planStore, st agentclient.PlanStatus, start, end time.Time, contractMs float64) {
	moved := map[string]int64{}
	for _, m := range st.Moves {
		moved[m.Tenant] = m.Moved
		run.MovedBytes += m.Moved
		run.Rollbacks += m.Attempts
	}
	run.MeanRateMBs = round(float64(run.MovedBytes)/1e6/end.Sub(start).Seconds(), 2)
	var fixed, alone []float64
	var during, before int
	run.WorstViolationFraction, run.WorstAVLFraction = math.Inf(-1), math.Inf(-1)
	for i, s := range stores {
		r := l.runs[i]
		a, z := seconds(r, start, end)
		f := storeFigures(r.Latencies, a, z, contractMs)
		xs := r.Latencies(a, z)
		during += len(xs)
		b0, b1 := seconds(r, start.Add(-(o.Warmup - 2*time.Second)), start)
		before += len(r.Latencies(b0, b1))
		switch s.role {
		case RoleFixed:
			fixed = append(fixed, xs...)
		case RoleAlone:
			alone = append(alone, xs...)
		}
		sr := PlanStoreResult{Name: s.name, Role: s.role, ContractMs: contractMs, StoreFigures: f, AVLFraction: (f.AVLMs - contractMs) / contractMs, MovedBytes: moved[s.name]}
		if !math.IsNaN(f.VR) {
			run.WorstViolationFraction = math.Max(run.WorstViolationFraction, f.VR)
			run.WorstAVLFraction = math.Max(run.WorstAVLFraction, sr.AVLFraction)
		}
		run.Stores = append(run.Stores, cleanStore(sr))
		ss := storeSeries{name: s.name, role: s.role}
		for w := a; w < z; w += PlanWindow {
			if ys := r.Latencies(w, min(w+PlanWindow, z)); len(ys) > 0 {
				ss.t = append(ss.t, float64(w-a))
				ss.ms = append(ss.ms, Describe(ys).Mean)
			}
		}
		out.stores = append(out.stores, ss)
	}
	run.WorstViolationFraction = clean(round(run.WorstViolationFraction, 3))
	run.WorstAVLFraction = clean(round(run.WorstAVLFraction, 3))
	run.FixedStoreP99Ms = clean(round(percentile(fixed, 0.99), 2))
	run.AloneStoreP99Ms = clean(round(percentile(alone, 0.99), 2))
	bsecs := (o.Warmup - 2*time.Second).Seconds()
	if before > 0 && bsecs > 0 {
		run.ThroughputFraction = round(float64(during)/end.Sub(start).Seconds()/(float64(before)/bsecs), 3)
	}
}

// clean maps NaN and ±Inf (no data) to -1: JSON has no NaN.
func clean(x float64) float64 {
	if math.IsNaN(x) || math.IsInf(x, 0) {
		return -1
	}
	return x
}

func cleanStore(s PlanStoreResult) PlanStoreResult {
	f := &s.StoreFigures
	f.MeanMs, f.AVLMs, f.VR = clean(round(f.MeanMs, 2)), clean(round(f.AVLMs, 2)), clean(round(f.VR, 3))
	f.P95Ms, f.P99Ms = clean(round(f.P95Ms, 2)), clean(round(f.P99Ms, 2))
	s.AVLFraction = clean(round(s.AVLFraction, 3))
	return s
}
