package experiment

import (
	"sort"
	"strconv"
	"strings"
)

// Dominance compares a PID trial with the fixed trials of its run on both
// figures at once, without interpolating (a fixed ladder on a noisy plant
// need not be monotonic): beaten lists the rates (MB/s) of the fixed trials
// that migrated in less time at a lower mean latency than p, beats those
// p was both faster and lower than. A tie on either figure counts for
// neither. Both are non-nil, in the ladder's order.
func Dominance(fixed []FixedPoint, p PIDPoint) (beaten, beats []float64) {
	beaten, beats = []float64{}, []float64{}
	for _, f := range fixed {
		switch {
		case f.MigrationSeconds < p.MigrationSeconds && f.MeanLatencyMs < p.MeanLatencyMs:
			beaten = append(beaten, f.RateMBs)
		case f.MigrationSeconds > p.MigrationSeconds && f.MeanLatencyMs > p.MeanLatencyMs:
			beats = append(beats, f.RateMBs)
		}
	}
	return beaten, beats
}

// rates lists rates (MB/s) for the report: "60, 75 MB/s", or "none".
func rates(r []float64) string {
	if len(r) == 0 {
		return "none"
	}
	parts := make([]string, len(r))
	for i, x := range r {
		parts[i] = strconv.FormatFloat(x, 'f', -1, 64)
	}
	return strings.Join(parts, ", ") + " MB/s"
}

// FixedSecondsAt interpolates, linearly between the fixed ladder's points
// ordered by latency, the migration time a fixed rate needs to cause mean
// latency lat (ms). ok is false outside the ladder's latency range.
func FixedSecondsAt(fixed []FixedPoint, lat float64) (secs float64, ok bool) {
	return secondsAt(fixed, func(f FixedPoint) float64 { return f.MeanLatencyMs }, lat)
}

// FixedLatencyAt interpolates, linearly between the fixed ladder's points
// ordered by migration time, the mean latency (ms) of a fixed rate that
// migrates in secs seconds: the other reading of the trade-off, for a PID
// point whose latency lies outside the ladder's. ok is false outside the
// ladder's range of migration times.
func FixedLatencyAt(fixed []FixedPoint, secs float64) (lat float64, ok bool) {
	return ladderAt(fixed, func(f FixedPoint) float64 { return f.MigrationSeconds }, func(f FixedPoint) float64 { return f.MeanLatencyMs }, secs)
}

// secondsAt is FixedSecondsAt with the latency figure chosen by latOf.
func secondsAt(fixed []FixedPoint, latOf func(FixedPoint) float64, lat float64) (secs float64, ok bool) {
	return ladderAt(fixed, latOf, func(f FixedPoint) float64 { return f.MigrationSeconds }, lat)
}

// ladderAt interpolates yOf linearly between the fixed ladder's points
// ordered by xOf, at x; ok is false outside the ladder's range of xOf.
func ladderAt(fixed []FixedPoint, xOf, yOf func(FixedPoint) float64, x float64) (y float64, ok bool) {
	ps := append([]FixedPoint(nil), fixed...)
	sort.Slice(ps, func(i, j int) bool { return xOf(ps[i]) < xOf(ps[j]) })
	for i := 1; i < len(ps); i++ {
		a, b := ps[i-1], ps[i]
		xa, xb := xOf(a), xOf(b)
		if x >= xa && x <= xb && xb > xa {
			f := (x - xa) / (xb - xa)
			return yOf(a) + f*(yOf(b)-yOf(a)), true
		}
	}
	return 0, false
}

// PairVerdict says which of a PID trial (latency ms, seconds) and the
// fixed trial at its copy rate did better: one lower and no slower did
// better; otherwise each won on one count.
func PairVerdict(pidMs, pidS, fixedMs, fixedS float64) string {
	switch {
	case pidMs <= fixedMs && pidS <= fixedS:
		return "PID: lower and faster"
	case fixedMs <= pidMs && fixedS <= pidS:
		return "fixed: lower and faster"
	case pidMs < fixedMs:
		return "PID lower, fixed faster"
	default:
		return "PID faster, fixed lower"
	}
}
