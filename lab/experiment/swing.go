package experiment

import (
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/sluicedb/sluice/lab/workload"
	"github.com/sluicedb/sluice/loop"
)

// Swing is a square wave on the workload's arrival rate during a
// migration: from the migration's start, half a Period at (1+Amplitude) ×
// the trial's rate, then half a Period at (1−Amplitude) ×, and so on to
// the migration's end, when the trial's rate comes back. Over whole periods
// its mean is the trial's rate, and it is laid on the migration's clock, so
// two trials of about one length (a PID trial and the fixed rate at its
// copy rate) meet the same load in the same order. It is the load that
// moves under a migration, the case a fixed throttle cannot follow.
type Swing struct {
	Period    time.Duration // a whole cycle, high half then low half (> 0)
	Amplitude float64       // fraction of the trial's rate, in (0, 1)
}

// Valid says why s cannot be run, or nil.
func (s Swing) Valid() error {
	if s.Period <= 0 || !(s.Amplitude > 0 && s.Amplitude < 1) {
		return fmt.Errorf("experiment: load swing of ±%v every %v: want an amplitude in (0, 1) and a positive period", s.Amplitude, s.Period)
	}
	return nil
}

// Factor is the multiple of the trial's rate the swing sets elapsed after
// the migration's start (elapsed < 0: 1, the migration has not started).
func (s Swing) Factor(elapsed time.Duration) float64 {
	if elapsed < 0 {
		return 1
	}
	if elapsed%s.Period < s.Period-s.Period/2 {
		return 1 + s.Amplitude
	}
	return 1 - s.Amplitude
}

// swingLoad sets run's arrival rate to s's factor of rate, from at, every
// swingTick, until the returned stop is called, which sets rate back and
// waits; it says each change at clock() seconds. A nil s does nothing.
func swingLoad(s *Swing, run *workload.Runner, rate float64, at time.Time, clock func() float64, say func(string, ...any)) (stop func()) {
	if s == nil {
		return func() {}
	}
	done, exited := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(exited)
		t := time.NewTicker(swingTick)
		defer t.Stop()
		last := 0.0
		for {
			if f := s.Factor(time.Since(at)); f != last {
				run.SetRate(f * rate)
				say("  %5.0fs arrival rate ×%.2f: %.0f transactions/s (load swing)", clock(), f, f*rate)
				last = f
			}
			select {
			case <-done:
				return
			case <-t.C:
			}
		}
	}()
	return func() {
		close(done)
		<-exited
		run.SetRate(rate)
	}
}

// swingTick is how often a load swing looks at its clock: its edges are
// this late at most.
const swingTick = 50 * time.Millisecond

// SwingHalf is a trial's figures over one kind of half of its swing
// during the migration: the busy halves (the arrival rate high) or the
// light ones.
type SwingHalf struct {
	Seconds   float64 // of migration in such halves
	LatencyMs float64 // mean over the transactions completed in them; NaN if none
	// CopyMBs is the hot copy's rate in them, MB/s: the bytes its loop's
	// steps within the copy phase (loop.CopyPhase) moved, over those
	// steps' time; NaN without such steps (a fixed rate's trial, which has
	// no loop record).
	CopyMBs float64
}

// Halves splits r's migration by s's halves (on the migration's clock
// from r.MigStart): each whole second of the workload and each step of the
// loop's record goes to the half its middle (its end, for a step's bytes)
// falls in; the copy rate counts the copy phase's steps only.
func (s Swing) Halves(r *TrialResult) (busy, light SwingHalf) {
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
		if q.T <= r.MigStart || q.T > r.MigEnd || p.Phase != loop.CopyPhase || q.Phase != loop.CopyPhase {
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
func swingTrials(s Swing, trials []Labeled) []SwingTrial {
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
	b.WriteString("\nEach trial by the halves of the load swing during its migration (the busy halves at the high arrival rate, the light at the low): the mean latency of the transactions completed in them, and the PID's hot-copy rate there (the copy phase's bytes ÷ its time, from the loop's record; a fixed rate's trial has none):\n\n")
	b.WriteString("| trial | busy s | busy latency ms | busy copy MB/s | light s | light latency ms | light copy MB/s |\n|---|---|---|---|---|---|---|\n")
	for _, t := range ts {
		fmt.Fprintf(&b, "| %s | %.0f | %s | %s | %.0f | %s | %s |\n", t.Trial, t.BusySeconds, fp(t.BusyLatencyMs), fp(t.BusyCopyMBs), t.LightSeconds, fp(t.LightLatencyMs), fp(t.LightCopyMBs))
	}
	return b.String()
}
