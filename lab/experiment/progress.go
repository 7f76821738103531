package experiment

import (
	"context"
	"fmt"
	"math"
	"time"

	agentclient "github.com/sluicedb/sluice/agent/client"
	"github.com/sluicedb/sluice/monitor"
)

// progressWatch follows a trial's migration through its progress reports:
// it records the copy's end and the handover reserve, says a line every
// progressEvery, samples the host's CPU with each line for its steal, and
// aborts the migration when the steal goes above the trial's limit
// (Trial.AbortAboveSteal).
type progressWatch struct {
	ctx        context.Context
	t          *trialRun
	from       int // the source server
	hostFrom   monitor.HostCPU
	hostErr    error                   // reading the host's CPU at the start
	samples    []monitor.HostCPUSample // one per progress line
	peakOf     func([]monitor.HostCPUSample, time.Duration) float64
	lastSay    time.Time
	warned     bool // the last report carried a warning
	abortAsked bool
}

// progressEvery is how often a trial says its migration's progress.
const progressEvery = 2 * time.Second

func newProgressWatch(ctx context.Context, t *trialRun, from int) *progressWatch {
	w := &progressWatch{ctx: ctx, t: t, from: from, peakOf: t.tr.stealPeak}
	if w.peakOf == nil {
		w.peakOf = monitor.StealPeak
	}
	w.hostFrom, w.hostErr = monitor.ReadHostCPU()
	w.samples = []monitor.HostCPUSample{{At: time.Now(), CPU: w.hostFrom}}
	return w
}

// see takes one progress report of the migration.
func (w *progressWatch) see(m agentclient.Migration) {
	t, p := w.t, m.Progress
	if p.Phase == copyPhase {
		t.res.CopyEnd = t.since()
	}
	if p.Warning != "" && !w.warned {
		t.say("  %5.0fs warning: %s", t.since(), p.Warning)
	}
	w.warned = p.Warning != ""
	if p.Controller != "" {
		t.res.ReserveMsS = p.ReserveMsS // a finished migration's answer no longer carries it
	}
	if time.Since(w.lastSay) < progressEvery {
		return
	}
	w.lastSay = time.Now()
	t.say("%s", w.line(p))
	if t.tr.AbortAboveSteal <= 0 || w.abortAsked || m.Done {
		return
	}
	if pk := w.peakOf(w.samples, StealSpan); pk > t.tr.AbortAboveSteal {
		w.abortAsked = true
		t.say("  host steal %.0f %% over %.0f s (limit %.0f %%): aborting the migration", 100*pk, StealSpan.Seconds(), 100*t.tr.AbortAboveSteal)
		if _, err := t.tr.Bed.Servers[w.from].Client.AbortMigration(w.ctx, m.ID); err != nil {
			t.say("  the abort was refused (%v); the migration goes on", err)
		}
	}
}

// line is a progress line, taking a sample of the host's CPU for it.
func (w *progressWatch) line(p agentclient.Progress) string {
	moved := fmt.Sprintf("%6.0f MB       ", float64(p.Bytes)/1e6) // a phase without a total of its own
	if p.TotalBytes > 0 {
		moved = fmt.Sprintf("%6.0f/%-6.0f MB", float64(p.Bytes)/1e6, float64(p.TotalBytes)/1e6)
	}
	if p.Phase == "catch-up" && p.LagBytes >= 0 {
		moved = fmt.Sprintf("lag %8.1f MB", float64(p.LagBytes)/1e6)
	}
	loopFig := "" // a fixed rate has no loop and no setpoint
	if p.SetpointMs > 0 {
		loopFig = fmt.Sprintf(" (loop %6.1f, setpoint %.1f)", p.LatencyMs, p.SetpointMs)
		if c := p.CPUThrottledPct; c != nil {
			loopFig += fmt.Sprintf("  source CPU throttled %3.0f %%", *c)
		}
	}
	if h, err := monitor.ReadHostCPU(); w.hostErr == nil && err == nil {
		if st := h.StealShare(w.samples[len(w.samples)-1].CPU); !math.IsNaN(st) {
			loopFig += fmt.Sprintf("  host steal %3.0f %%", 100*st)
		}
		w.samples = append(w.samples, monitor.HostCPUSample{At: time.Now(), CPU: h})
	}
	return fmt.Sprintf("  %5.0fs %-9s %s  %6.1f MB/s (limit %6.1f)  latency %6.1f ms%s",
		w.t.since(), p.Phase, moved, p.Rate/1e6, p.Limit/1e6, w.t.lastMean(), loopFig)
}

// stealFigures sets the result's host steal over the migration, ended now.
func (w *progressWatch) stealFigures() {
	if h, err := monitor.ReadHostCPU(); w.hostErr == nil && err == nil {
		w.t.res.HostSteal = h.StealShare(w.hostFrom)
		w.t.res.HostStealPeak = w.peakOf(append(w.samples, monitor.HostCPUSample{At: time.Now(), CPU: h}), StealSpan)
	}
}
