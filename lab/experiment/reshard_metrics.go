package experiment

import (
	"math"
	"sort"
	"time"

	"github.com/sluicedb/sluice/lab/workload"
)

// The reshard bench's figures, computed from a run's transactions alone
// (workload.Tx: offsets from the run's start) and the reconfiguration's
// start and end on the same clock. Pure: no clock, no I/O.

// ReshardSecond is one second of one method's run: Squall's Fig. 9–11
// series.
type ReshardSecond struct {
	T       int     `json:"t"`       // seconds since the workload started
	Commits int     `json:"commits"` // transactions acknowledged in [T, T+1)
	Errors  int     `json:"errors"`  // transactions failed in [T, T+1)
	P50Ms   float64 `json:"p50_ms"`  // of the acknowledged ones' latency; 0 when none
	P99Ms   float64 `json:"p99_ms"`
}

// perSecond buckets txs by the second they ended in, seconds 0 … n−1.
func perSecond(txs []workload.Tx, n int) []ReshardSecond {
	out := make([]ReshardSecond, n)
	lats := make([][]float64, n)
	for i := range out {
		out[i].T = i
	}
	for _, tx := range txs {
		s := int(tx.End / time.Second)
		if s < 0 || s >= n {
			continue
		}
		if tx.Failed {
			out[s].Errors++
			continue
		}
		out[s].Commits++
		lats[s] = append(lats[s], ms(tx.End-tx.Arrival))
	}
	for i, l := range lats {
		sort.Float64s(l)
		out[i].P50Ms, out[i].P99Ms = round(workload.Quantile(l, 0.5), 3), round(workload.Quantile(l, 0.99), 3)
	}
	return out
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// window is the part of a run the figures compare: before the change
// (Before seconds up to Start, less the first warm-up seconds) and during
// it (Start to End). Offsets from the run's start.
type window struct {
	Start, End time.Duration
	Before     time.Duration
	Warmup     time.Duration // the run's first seconds, left out of "before"
}

// dipFigures are a method's throughput and latency figures.
type dipFigures struct {
	PreTPS            float64
	MeanTPSDuring     float64
	MinTPS1s          float64
	ZeroCommitSeconds int
	P99MsBefore       float64
	P99MsDuring       float64
}

// figures computes w's figures from txs and their per-second series secs.
// "before" is [max(Warmup, Start−Before), Start); "during" is [Start, End)
// for the mean and the p99, and the whole seconds overlapping it for the
// minimum and the seconds without a commit (a wall-clock second's commits,
// whether or not the change covered all of it).
func figures(txs []workload.Tx, secs []ReshardSecond, w window) dipFigures {
	var f dipFigures
	from := max(w.Warmup, w.Start-w.Before)
	var before, during []float64
	var nBefore, nDuring int
	for _, tx := range txs {
		if tx.Failed {
			continue
		}
		lat := ms(tx.End - tx.Arrival)
		switch {
		case tx.End >= from && tx.End < w.Start:
			nBefore++
			before = append(before, lat)
		case tx.End >= w.Start && tx.End < w.End:
			nDuring++
			during = append(during, lat)
		}
	}
	if d := w.Start - from; d > 0 {
		f.PreTPS = round(float64(nBefore)/d.Seconds(), 1)
	}
	if d := w.End - w.Start; d > 0 {
		f.MeanTPSDuring = round(float64(nDuring)/d.Seconds(), 1)
	}
	sort.Float64s(before)
	sort.Float64s(during)
	f.P99MsBefore, f.P99MsDuring = round(workload.Quantile(before, 0.99), 3), round(workload.Quantile(during, 0.99), 3)
	first, last := int(w.Start/time.Second), int(math.Ceil(w.End.Seconds()))
	f.MinTPS1s = math.Inf(1)
	for t := first; t < last && t < len(secs); t++ {
		c := secs[t].Commits
		f.MinTPS1s = math.Min(f.MinTPS1s, float64(c))
		if c == 0 {
			f.ZeroCommitSeconds++
		}
	}
	if math.IsInf(f.MinTPS1s, 1) {
		f.MinTPS1s = 0
	}
	return f
}

// ReshardGoals are the judged goals (reported, not asserted): the
// controlled method's targets, computed for every method alike.
type ReshardGoals struct {
	// NoZeroSecond: not one second of the change without a commit.
	NoZeroSecond bool `json:"no_zero_commit_second"`
	// MinOverPre is min_tps_1s / pre_tps; the goal is ≥ 0.9.
	MinOverPre   float64 `json:"min_over_pre"`
	MinOverPreOK bool    `json:"min_over_pre_ok"`
	// DipPct is the mean dip, 100·(1 − mean_tps_during/pre_tps); goal ≤ 10.
	DipPct   float64 `json:"dip_pct"`
	DipPctOK bool    `json:"dip_ok"`
	// P99Ratio is p99_ms_during / p99_ms_before; goal ≤ 1.5.
	P99Ratio   float64 `json:"p99_ratio"`
	P99RatioOK bool    `json:"p99_ok"`
	// VsSquall (controlled only, when squall ran and both finished):
	// finished no slower than squall at an equal or smaller dip.
	VsSquall *bool `json:"no_slower_than_squall_at_equal_or_smaller_dip,omitempty"`
}

// goals judges f against the goals.
func goals(f dipFigures) ReshardGoals {
	g := ReshardGoals{NoZeroSecond: f.ZeroCommitSeconds == 0}
	if f.PreTPS > 0 {
		g.MinOverPre = round(f.MinTPS1s/f.PreTPS, 3)
		g.DipPct = round(100*(1-f.MeanTPSDuring/f.PreTPS), 1)
	}
	if f.P99MsBefore > 0 {
		g.P99Ratio = round(f.P99MsDuring/f.P99MsBefore, 3)
	}
	g.MinOverPreOK = f.PreTPS > 0 && g.MinOverPre >= 0.9
	g.DipPctOK = f.PreTPS > 0 && g.DipPct <= 10
	g.P99RatioOK = f.P99MsBefore > 0 && g.P99Ratio <= 1.5
	return g
}
