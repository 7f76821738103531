// Package loop is the control loop of a migration: every period it asks the
// monitor for an Observation, hands it to the controller, applies the decided
// rates to the throttles, and records a time series (latency, setpoint, rate,
// phase, bytes) for progress displays, reports and plots.
//
// Step is deterministic given its inputs (the clock reading is a parameter);
// Run is the thin goroutine that calls Step on a ticker.
package loop

import (
	"context"
	"encoding/csv"
	"fmt"
	"io"
	"math"
	"strconv"
	"sync"
	"time"

	"github.com/sluicedb/sluice/control"
	"github.com/sluicedb/sluice/internal/stats"
)

// RateSetter is what applies a rate: *throttle.Limiter satisfies it.
type RateSetter interface{ SetRate(bytesPerSecond float64) }

// Point is one step of the loop's record.
type Point struct {
	T          float64 `json:"t"`           // seconds since the loop started
	LatencyMs  float64 `json:"latency_ms"`  // max mean latency over signals with data; -1 when none had data
	SetpointMs float64 `json:"setpoint_ms"` // the controller's target, for plots (0 when it has none)
	Rate       float64 `json:"rate"`        // send rate decided, bytes/s
	Prefetch   float64 `json:"prefetch"`    // read-ahead rate decided, bytes/s
	Hold       bool    `json:"hold"`        // the controller held for lack of data
	Reason     string  `json:"reason"`      //
	Phase      string  `json:"phase"`       // migration phase at the step
	Bytes      int64   `json:"bytes"`       // bytes moved so far
	// CPUThrottledPct is the share (%) of the source server's CPU quota
	// periods in the step in which its cgroup was throttled
	// (control.Observation.CPU); absent when not measured.
	CPUThrottledPct *float64 `json:"cpu_throttled_pct,omitempty"`
}

// Loop wires an observer to a controller and throttles. Fields are set before
// Run; Series may be read concurrently with Run.
type Loop struct {
	Controller control.Controller
	Observe    func(ctx context.Context, at time.Time) control.Observation
	Send       RateSetter // required
	Prefetch   RateSetter // optional: read-ahead throttle
	Period     time.Duration
	Setpoint   time.Duration                      // recorded with each point
	Status     func() (phase string, bytes int64) // optional: the migration's progress
	// Settle, with Status, keeps the controller's output as it is until the
	// copy has moved bytes for Settle (normally the latency window): the
	// windows before then hold the migration's start-up — pg_backup_start's
	// checkpoint, before the first byte — a one-off cost of starting that
	// no speed would have avoided. The controller sees those steps as
	// missing data (ErrSettling) and holds. 0: no settling.
	Settle time.Duration
	// Remaining, if set, reports the time the migration expects to run
	// until its handover (control.Observation.Remaining; 0 unknown).
	Remaining func() time.Duration
	// Lag, if set, reports the standby's replay lag in bytes (< 0 unknown).
	// In phases "catch-up" and "warm" (which waits for the lag again after
	// its copy) the loop then guarantees progress: when, at the pace it
	// shrank over the last CatchUpPatience steps, the lag would take more
	// than CatchUpDrain to drain (or it did not shrink), it raises a floor
	// under the controller's rate and keeps it until the handover. The
	// floor is the rate that drains the lag in CatchUpDrain — the WAL's
	// own rate, estimated as the mean rate in force over those steps less
	// the pace the lag shrank at, plus the lag ÷ CatchUpDrain — or
	// CatchUpBoost times the mean rate in force (or the floor already set,
	// or MinCatchUpFloor), whichever is more. The mean, not the decision
	// of the step that notices: a controller leaving a pause ramps fast,
	// and one such step (24.8 MB/s after three at 0) once set a floor of
	// 37 MB/s for a lag that ~5 MB/s drained. And a pace, not only
	// whether it shrank: a PID at its setpoint held a catch-up at 1.4–4
	// MB/s for 28 s while its 290 MB lag shrank by ~0.3 MB/s (a
	// slack-sweep trial, 2026-11-26 10:55 UTC), where the fixed rate of
	// its comparison, 35 MB/s, drains one that size in ~9 s. A controller
	// holding the latency at its setpoint may allow less than the source
	// writes WAL — then the WAL relay falls behind for ever (a step40 run
	// with the rate stuck at 2.35 MB/s under +40 % load: lag at 250 MB for
	// 5 minutes). Slacker's deltas converge only if the copy outruns the
	// writes; the floor trades latency above the setpoint for a migration
	// that ends.
	//
	// The floor also starts where the copy left off: at the first step of
	// catch-up it is the mean rate in force over the copy's last
	// CatchUpEntry steps. The lag is the WAL the source wrote while the
	// copy ran; the copy's own rate is the one the controller found the
	// clients could take, and a fixed-rate migration drains the lag at its
	// rate too. Without it a PID at its setpoint drained a 140 MB lag in
	// 28 s at 1–19 MB/s after a copy at 46 MB/s (a slack-sweep trial,
	// 2026-11-26 11:50 UTC), a quarter of its migration, with the clients'
	// latency no lower for it. It has a cost: relaying the lag reads back
	// WAL written minutes before and costs the source more CPU per byte
	// than the copy (a 7 ms trial, 2026-11-26 13:36 UTC: the source's quota
	// throttled in 34–71 % of periods through its catch-up at 24 MB/s,
	// 3–30 % through its copy at like rates), which a fixed-rate migration
	// pays alike. Most of that cost was the relay's, on the source's agent;
	// since the target's agent relays (agent/client.WALRelayTarget, the default
	// since 2026-11-27) a fixed rate's catch-up drained its lag in 38–71 %
	// of the time in six pairs of six at 20 and 30 MB/s, and held the
	// clients lower in five (17–27 ms where the source's relay held them
	// at 49–101 ms in the calmer ones): the copy's pace is a fairer entry.
	//
	// That pace is the one the clients could take only if they were at the
	// setpoint when the copy ended: when the mean latency over those
	// CatchUpEntry steps exceeded the setpoint (Setpoint > 0), the entry
	// floor shrinks in proportion, to mean rate × setpoint ÷ latency. A
	// load step late in the copy leaves its last rates from before the
	// step: a step40 trial's PID copy ended 12 s after +40 % arrivals, and
	// its catch-up floor of 36 MB/s held the clients at 33.9 ms against a
	// 7 ms setpoint for the rest of the migration (2026-11-27 00:05 UTC).
	//
	// After a long copy the drain takes longer: the horizon is CatchUpDrain
	// or CatchUpShare of the copy's duration, whichever is longer, in
	// place of CatchUpDrain above. The lag grows with the copy's duration
	// (the WAL the clients wrote meanwhile), and a 20 s horizon for all of
	// it is a rate no load left room for: a step40 trial's 400 s copy left
	// a 584 MB lag, whose floor rose to 47.7 MB/s — the copy's pace had
	// been ~10 MB/s — and held the source's CPU quota throttled in 82–94 %
	// of its periods and the clients at 29 ms for the catch-up's 32 s
	// against a 7 ms setpoint (2026-11-27 01:48 UTC). Latency rises
	// faster than linearly with load, so a lag spread over a longer drain
	// costs the clients less in all.
	//
	// Since the target receives the WAL during the copy (migration's
	// early WAL, with the target's relay), catch-up starts with only what
	// its receiver had not yet flushed and the floor rarely rises: a 3 GB
	// sweep's catch-ups lasted 2–6 s with lags of 4–9 MB (2026-11-27
	// 07:05–07:15 UTC), where a 548 s copy without it had left 2.0 GB.
	Lag func() int64
	// MaxRate, when > 0, caps the catch-up floor (bytes/s): the operator's
	// top speed holds in catch-up too. Without it a floor raised again and
	// again while a steal phase held the lag (the source's CPU, not the
	// rate, bound the relay) reached 470 MB/s under a 120 MB/s top speed
	// (a slack-sweep trial, 2026-11-26 22:40 UTC).
	MaxRate float64

	mu struct {
		sync.Mutex
		start  time.Time
		copyAt time.Time // first step that saw bytes moved
		series []Point
		floor  float64   // catch-up rate floor, bytes/s (0 = none)
		lags   []int64   // catch-up lag at recent steps, oldest first
		rates  []float64 // rate in force from each of lags' steps to the next, bytes/s
		copied []float64 // rate decided at the copy's last steps (CatchUpEntry), bytes/s; emptied when catch-up takes them
		copyPV []float64 // latency (PV, ms; < 0 unknown) at those steps
		// the current copy's first and last steps, for the drain horizon
		copyFrom, copyTo time.Time
		horizon          time.Duration // drain horizon of this catch-up (0: CatchUpDrain)
		// the previous step's copy progress, for control.Observation.Moved
		lastAt    time.Time
		lastPhase string
		lastBytes int64
	}
}

// Catch-up progress guarantee (Loop.Lag).
const (
	CatchUpPatience = 5                // steps over which the lag's pace is judged
	CatchUpDrain    = 20 * time.Second // the longest the lag may take to drain at that pace (at least)
	CatchUpShare    = 0.1              // share of the copy's duration the drain may take, when longer
	CatchUpBoost    = 1.5              // factor the floor rises by, at least
	CatchUpEntry    = 10               // copy steps whose mean rate is catch-up's first floor
	MinCatchUpFloor = 1 << 20          // bytes/s, the least floor once one is needed
)

// ErrSettling is the signal error of the steps Settle hides from the
// controller (control.Observation.Settling).
var ErrSettling = control.ErrSettling

// DefaultPeriod is the control step (Slacker: 1 s).
const DefaultPeriod = time.Second

// Step runs one control step at time at and returns its record.
func (l *Loop) Step(ctx context.Context, at time.Time) Point {
	obs := l.Observe(ctx, at)
	if l.Remaining != nil {
		obs.Remaining = l.Remaining()
	}
	seen := obs
	var phase string
	var bytes int64
	if l.Status != nil {
		phase, bytes = l.Status()
	}
	obs.Moved = l.moved(at, phase, bytes)
	if l.settling(at, bytes) { // the controller sees no data; seen keeps it for the record
		sig := []control.Signal{{Name: "settle", Err: ErrSettling}}
		if len(obs.Signals) > 0 {
			sig = make([]control.Signal, len(obs.Signals))
			for i, s := range obs.Signals {
				if s.Err == nil { // a signal's own failure stays: it had no data
					s.Err = ErrSettling
				}
				sig[i] = s
			}
		}
		obs.Signals, obs.Settling = sig, true
	}
	d := l.Controller.Next(obs)
	if floor := l.catchUpFloor(at, phase, d.Rate, PV(seen)); d.Rate < floor {
		d.Rate, d.Reason = floor, d.Reason+fmt.Sprintf("; catch-up floor %.0f B/s", floor)
	}
	l.Send.SetRate(d.Rate)
	if l.Prefetch != nil {
		l.Prefetch.SetRate(d.Prefetch)
	}
	p := Point{
		LatencyMs:  PV(seen),
		SetpointMs: float64(l.Setpoint) / float64(time.Millisecond),
		Rate:       d.Rate,
		Prefetch:   d.Prefetch,
		Hold:       d.Hold,
		Reason:     d.Reason,
	}
	p.Phase, p.Bytes = phase, bytes
	if c := seen.CPU; c != nil && c.Err == nil {
		v := 100 * c.Throttled
		p.CPUThrottledPct = &v
	}
	l.mu.Lock()
	if l.mu.start.IsZero() {
		l.mu.start = at
	}
	p.T = at.Sub(l.mu.start).Seconds()
	l.mu.series = append(l.mu.series, p)
	l.mu.Unlock()
	return p
}

// CopyPhase is the migration phase whose bytes the throttle alone paces
// (the hot copy): the phase in which Step measures control.Observation.Moved.
const CopyPhase = "snapshot"

// moved returns the rate (bytes/s) the copy moved since the previous step,
// when both steps were in CopyPhase and it moved bytes; 0 otherwise.
func (l *Loop) moved(at time.Time, phase string, bytes int64) float64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	var r float64
	if dt := at.Sub(l.mu.lastAt).Seconds(); phase == CopyPhase && l.mu.lastPhase == CopyPhase && dt > 0 && bytes > l.mu.lastBytes {
		r = float64(bytes-l.mu.lastBytes) / dt
	}
	l.mu.lastAt, l.mu.lastPhase, l.mu.lastBytes = at, phase, bytes
	return r
}

// settling reports whether the step at time at, with bytes moved so far,
// falls in the Settle period: before the copy's first byte, or less than
// Settle after it. Once the copy has started, later phases that report no
// bytes of their own (catch-up, warm: Status reports the current copy's
// bytes, 0 between copies) do not settle again — the controller steers
// them too (the WAL relay and the warm copy share the throttle).
func (l *Loop) settling(at time.Time, bytes int64) bool {
	if l.Settle <= 0 || l.Status == nil {
		return false
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.mu.copyAt.IsZero() {
		if bytes <= 0 {
			return true
		}
		l.mu.copyAt = at
	}
	return at.Sub(l.mu.copyAt) < l.Settle
}

// catchUpFloor returns the rate floor of this step (0 = none): see Lag.
// at is the step's time, rate what the controller decided, pv the step's
// latency (ms, < 0 unknown).
func (l *Loop) catchUpFloor(at time.Time, phase string, rate, pv float64) float64 {
	if l.Lag == nil {
		return 0
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if phase != "catch-up" && phase != "warm" {
		l.mu.floor, l.mu.lags, l.mu.rates, l.mu.horizon = 0, l.mu.lags[:0], l.mu.rates[:0], 0
		if phase == CopyPhase {
			if l.mu.copyFrom.IsZero() {
				l.mu.copyFrom = at
			}
			l.mu.copyTo = at
			l.mu.copied = append(l.mu.copied, rate)
			l.mu.copyPV = append(l.mu.copyPV, pv)
			if len(l.mu.copied) > CatchUpEntry {
				l.mu.copied, l.mu.copyPV = l.mu.copied[1:], l.mu.copyPV[1:]
			}
		}
		return 0
	}
	if len(l.mu.copied) > 0 { // catch-up's first step after a copy
		l.mu.floor = l.capFloor(l.entryFloor())
		l.mu.copied, l.mu.copyPV = l.mu.copied[:0], l.mu.copyPV[:0]
		l.mu.horizon = max(CatchUpDrain, time.Duration(CatchUpShare*float64(l.mu.copyTo.Sub(l.mu.copyFrom))))
		l.mu.copyFrom = time.Time{}
	}
	horizon := l.mu.horizon
	if horizon <= 0 {
		horizon = CatchUpDrain
	}
	lag := l.Lag()
	if lag < 0 {
		return l.mu.floor
	}
	l.mu.lags = append(l.mu.lags, lag)
	if len(l.mu.lags) > CatchUpPatience {
		period := l.Period
		if period <= 0 {
			period = DefaultPeriod
		}
		// pace: bytes/s the lag shrank by over the window (< 0: it grew)
		pace := float64(l.mu.lags[0]-lag) / (CatchUpPatience * period.Seconds())
		if pace*horizon.Seconds() < float64(lag) {
			mean := stats.Mean(l.mu.rates)
			drain := max(mean-pace, 0) + float64(lag)/horizon.Seconds()
			l.mu.floor = l.capFloor(max(max(l.mu.floor, mean, MinCatchUpFloor)*CatchUpBoost, drain))
			l.mu.lags, l.mu.rates = l.mu.lags[:0], l.mu.rates[:0]
			return l.mu.floor
		}
		l.mu.lags, l.mu.rates = l.mu.lags[1:], l.mu.rates[1:]
	}
	l.mu.rates = append(l.mu.rates, max(rate, l.mu.floor))
	return l.mu.floor
}

// entryFloor is catch-up's first floor (see Lag): the mean rate decided
// over the copy's last steps, scaled by setpoint ÷ their mean latency
// when that latency exceeded the setpoint. Called with l.mu held.
func (l *Loop) entryFloor() float64 {
	floor := stats.Mean(l.mu.copied)
	var known []float64
	for _, v := range l.mu.copyPV {
		if v >= 0 {
			known = append(known, v)
		}
	}
	sp := float64(l.Setpoint) / float64(time.Millisecond)
	if pv := stats.Mean(known); sp > 0 && len(known) > 0 && pv > sp {
		floor *= sp / pv
	}
	return floor
}

// capFloor is floor no higher than MaxRate (when set).
func (l *Loop) capFloor(floor float64) float64 {
	if l.MaxRate > 0 {
		return min(floor, l.MaxRate)
	}
	return floor
}

// Run steps every Period until ctx ends. each, if not nil, sees every point.
func (l *Loop) Run(ctx context.Context, each func(Point)) error {
	period := l.Period
	if period <= 0 {
		period = DefaultPeriod
	}
	if l.Controller == nil || l.Observe == nil || l.Send == nil {
		return fmt.Errorf("loop: controller, observer and send throttle are required")
	}
	tick := time.NewTicker(period)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case now := <-tick.C:
			p := l.Step(ctx, now)
			if each != nil {
				each(p)
			}
		}
	}
}

// Series returns a copy of the record so far.
func (l *Loop) Series() []Point {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]Point(nil), l.mu.series...)
}

// PV is the process variable of an observation: the max mean latency, in ms,
// over the signals that have data; -1 when none has.
func PV(obs control.Observation) float64 {
	pv := -1.0
	for _, s := range obs.Signals {
		if s.Err == nil {
			pv = math.Max(pv, float64(s.Mean)/float64(time.Millisecond))
		}
	}
	return pv
}

// WriteCSV writes points with a header row.
func WriteCSV(w io.Writer, pts []Point) error {
	cw := csv.NewWriter(w)
	cw.Write([]string{"t", "latency_ms", "setpoint_ms", "rate", "prefetch", "hold", "phase", "bytes", "cpu_throttled_pct", "reason"})
	f := func(v float64) string { return strconv.FormatFloat(v, 'f', 3, 64) }
	for _, p := range pts {
		cpu := "" // not measured
		if p.CPUThrottledPct != nil {
			cpu = f(*p.CPUThrottledPct)
		}
		cw.Write([]string{f(p.T), f(p.LatencyMs), f(p.SetpointMs), f(p.Rate), f(p.Prefetch), strconv.FormatBool(p.Hold), p.Phase, strconv.FormatInt(p.Bytes, 10), cpu, p.Reason})
	}
	cw.Flush()
	return cw.Error()
}
