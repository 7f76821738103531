package experiment

import (
	"fmt"
	"math"
	"strings"
	"time"
)

// SwingHalf is a trial's figures over one kind of stretch of its load
// schedule during the migration: the busy ones (the arrival rate above the
// trial's) or the light ones (at or under it). Under a Swing these are its
// halves.
type SwingHalf struct {
	Seconds   float64 // of migration in such halves
	LatencyMs float64 // mean over the transactions completed in them; NaN if none
	// CopyMBs is the hot copy's rate in them, MB/s: the bytes its loop's
	// steps within the copy phase (copyPhase) moved, over those steps'
	// time; NaN without such steps (a fixed rate's trial, which has no loop
	// record).
	CopyMBs float64
}

// Halves splits r's migration into s's busy and light stretches (on the
// migration's clock from r.MigStart): each whole second of the workload
// and each step of the loop's record goes to the stretch its middle (its
// end, for a step's bytes) falls in; the copy rate counts the copy phase's
// steps only.
func (s Schedule) Halves(r *TrialResult) (busy, light SwingHalf) {
	var n, sum, secs, bytes, loopSecs [2]float64
	half := func(t float64) int { // 0 busy, 1 light
		if s.Factor(time.Duration((t-r.MigStart)*float64(time.Second))) > 1 {
			return 0
		}
		return 1
	}
	for _, x := range r.Seconds {
		t := float64(x.T) + 0.5
		if t < r.MigStart || t >= r.MigEnd {
			continue
		}
		h := half(t)
		secs[h]++
		if x.Count > 0 {
			n[h] += float64(x.Count)
			sum[h] += float64(x.Count) * x.MeanMs
		}
	}
	for i := 1; i < len(r.Loop); i++ {
		p, q := r.Loop[i-1], r.Loop[i]
		if q.T <= r.MigStart || q.T > r.MigEnd || p.Phase != copyPhase || q.Phase != copyPhase {
			continue // Bytes counts each phase's own work from 0
		}
		h := half(q.T)
		bytes[h] += float64(q.Bytes - p.Bytes)
		loopSecs[h] += q.T - p.T
	}
	out := [2]SwingHalf{}
	for h := range out {
		out[h] = SwingHalf{Seconds: secs[h], LatencyMs: math.NaN(), CopyMBs: math.NaN()}
		if n[h] > 0 {
			out[h].LatencyMs = sum[h] / n[h]
		}
		if loopSecs[h] > 0 {
			out[h].CopyMBs = bytes[h] / loopSecs[h] / 1e6
		}
	}
	return out[0], out[1]
}

// SwingTrial is one trial's SwingHalf figures in the summary (absent:
// not measured).
type SwingTrial struct {
	Trial          string   `json:"trial"`
	BusySeconds    float64  `json:"busy_seconds"`
	BusyLatencyMs  *float64 `json:"busy_latency_ms,omitempty"`
	BusyCopyMBs    *float64 `json:"busy_copy_mb_s,omitempty"`
	LightSeconds   float64  `json:"light_seconds"`
	LightLatencyMs *float64 `json:"light_latency_ms,omitempty"`
	LightCopyMBs   *float64 `json:"light_copy_mb_s,omitempty"`
}

// swingTrials is every trial's halves under s.
func swingTrials(s Schedule, trials []Labeled) []SwingTrial {
	var out []SwingTrial
	for _, t := range trials {
		hi, lo := s.Halves(t.Res)
		out = append(out, SwingTrial{Trial: t.Name, BusySeconds: hi.Seconds, BusyLatencyMs: measured(hi.LatencyMs, 2), BusyCopyMBs: measured(hi.CopyMBs, 1),
			LightSeconds: lo.Seconds, LightLatencyMs: measured(lo.LatencyMs, 2), LightCopyMBs: measured(lo.CopyMBs, 1)})
	}
	return out
}

// swingLines is the report's table of each trial by the swing's halves.
func swingLines(ts []SwingTrial) string {
	var b strings.Builder
	b.WriteString("\nEach trial by the stretches of its load schedule during its migration (the busy ones above the steady arrival rate, the light at or under it; a swing's halves): the mean latency of the transactions completed in them, and the PID's hot-copy rate there (the copy phase's bytes ÷ its time, from the loop's record; a fixed rate's trial has none):\n\n")
	b.WriteString("| trial | busy s | busy latency ms | busy copy MB/s | light s | light latency ms | light copy MB/s |\n|---|---|---|---|---|---|---|\n")
	for _, t := range ts {
		fmt.Fprintf(&b, "| %s | %.0f | %s | %s | %.0f | %s | %s |\n", t.Trial, t.BusySeconds, fp(t.BusyLatencyMs), fp(t.BusyCopyMBs), t.LightSeconds, fp(t.LightLatencyMs), fp(t.LightCopyMBs))
	}
	return b.String()
}
