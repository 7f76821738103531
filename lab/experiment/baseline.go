package experiment

import (
	"context"
	"fmt"
	"math"
	"sort"
	"time"

	"github.com/sluicedb/sluice/lab/testbed"
	"github.com/sluicedb/sluice/lab/workload"
)

// Stats are the mean and standard deviation of latencies (ms) and their count.
type Stats struct {
	Mean, Std float64
	N         int
	// Window90 (Baseline only; 0 otherwise) is the 90th percentile, over
	// the run, of the mean latency in a sliding 3 s window — what the loop
	// reads from the proxy — without any migration: the plant's own noise
	// at the controller's sampling. A setpoint near it cannot be held.
	Window90 float64
	// Window50 (Baseline only) is the median of those window means: the
	// plant's typical state, which a stall of a few seconds does not move.
	Window50 float64
}

// MaxBaselineSkew bounds Settled: a baseline whose mean is more than this
// many times its median 3 s window was made by a stall.
const MaxBaselineSkew = 2.0

// Settled reports whether a baseline measured the plant's steady state: its
// mean at most MaxBaselineSkew × its median 3 s window. A stall of a few
// seconds moves the mean but not the median, and setpoints derived from a
// stalled baseline are several times too high.
func (s Stats) Settled() bool {
	return s.N > 0 && s.Window50 > 0 && s.Mean <= MaxBaselineSkew*s.Window50
}

// WindowMeans returns the mean latency of every window of w consecutive
// seconds of a run, from second from on (seconds with no transactions
// count for nothing); lat(a, b) returns the latencies of seconds [a, b).
func WindowMeans(lat func(a, b int) []float64, from, to, w int) []float64 {
	var out []float64
	for a := from; a+w <= to; a++ {
		if xs := lat(a, a+w); len(xs) > 0 {
			out = append(out, Describe(xs).Mean)
		}
	}
	return out
}

// Describe computes Stats of xs (NaN mean and std when empty).
func Describe(xs []float64) Stats {
	if len(xs) == 0 {
		return Stats{Mean: math.NaN(), Std: math.NaN()}
	}
	var s, ss float64
	for _, x := range xs {
		s += x
	}
	m := s / float64(len(xs))
	for _, x := range xs {
		ss += (x - m) * (x - m)
	}
	return Stats{Mean: m, Std: math.Sqrt(ss / float64(len(xs))), N: len(xs)}
}

// BaselineAttempts is how many times SettledBaseline measures at most.
const BaselineAttempts = 3

// SettledBaseline is Baseline until a measurement is Settled, at most
// BaselineAttempts times, each reported through say; if none settles it
// returns the one with the lowest mean. The experiments derive their
// setpoints from it, so one stall in a single 20 s measurement must not set
// them.
func SettledBaseline(ctx context.Context, t testbed.Tenant, wc workload.Config, d time.Duration, seed uint64, say func(string, ...any)) (Stats, error) {
	return settled(func(i int) (Stats, error) { return Baseline(ctx, t, wc, d, seed+uint64(i)*1000) }, "mean", say)
}

// settled calls measure(0), measure(1), … until a measurement is Settled,
// at most BaselineAttempts times, each unsettled one reported through say
// (what names its mean); if none settles it returns the lowest.
func settled(measure func(attempt int) (Stats, error), what string, say func(string, ...any)) (Stats, error) {
	var best Stats
	for i := range BaselineAttempts {
		st, err := measure(i)
		if err != nil || st.Settled() {
			return st, err
		}
		say("baseline %d of %d not settled: %s %.1f ms ± %.1f is above %g × its median 3 s window (%.1f ms); measuring again",
			i+1, BaselineAttempts, what, st.Mean, st.Std, MaxBaselineSkew, st.Window50)
		if i == 0 || st.Mean < best.Mean {
			best = st
		}
	}
	say("no settled baseline in %d attempts; using the lowest (mean %.1f ms)", BaselineAttempts, best.Mean)
	return best, nil
}

// Baseline runs the workload on t without a migration for d and returns the
// latency figures after a 3 s warm-up.
func Baseline(ctx context.Context, t testbed.Tenant, wc workload.Config, d time.Duration, seed uint64) (Stats, error) {
	wc.DSN, wc.Duration, wc.Seed = t.DSN, d+3*time.Second, seed
	if wc.Records == 0 {
		wc.Records = t.Rows
	}
	r, err := workload.NewRunner(wc)
	if err != nil {
		return Stats{}, err
	}
	if _, err := r.Run(ctx, nil); err != nil {
		return Stats{}, fmt.Errorf("experiment: baseline: %w", err)
	}
	st := Describe(r.Latencies(3, 1<<30))
	windows := WindowMeans(r.Latencies, 3, int(wc.Duration/time.Second), 3)
	sort.Float64s(windows)
	st.Window90 = round(workload.Quantile(windows, 0.9), 2)
	st.Window50 = round(workload.Quantile(windows, 0.5), 2)
	return st, nil
}
