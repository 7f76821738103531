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
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/sluicedb/sluice/control"
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

// Status is the migration's progress at a step, as the loop's caller
// reports it.
type Status struct {
	Phase     string        // the migration's phase, recorded with the point
	Stage     control.Stage // what the control policy makes of the phase
	Bytes     int64         // bytes the current copy has moved so far
	Lag       int64         // the standby's replay lag, bytes; < 0 unknown
	Remaining time.Duration // time to the handover at the current rate; 0 unknown
}

// Loop wires an observer to a controller and throttles: each step it
// observes, adds the migration's Status to the observation, asks the
// controller (normally a control.Governor around the migration's
// controller) and applies its rates. The policy is the controller's; the
// loop only wires. Fields are set before Run; Series may be read
// concurrently with Run.
type Loop struct {
	Controller control.Controller
	Observe    func(ctx context.Context, at time.Time) control.Observation
	Send       RateSetter // required
	Prefetch   RateSetter // optional: read-ahead throttle
	Period     time.Duration
	Setpoint   time.Duration // recorded with each point
	Status     func() Status // optional: the migration's progress

	mu struct {
		sync.Mutex
		start  time.Time
		series []Point
	}
}

// DefaultPeriod is the control step (Slacker: 1 s).
const DefaultPeriod = time.Second

// Step runs one control step at time at and returns its record.
func (l *Loop) Step(ctx context.Context, at time.Time) Point {
	obs := l.Observe(ctx, at)
	st := Status{Lag: -1}
	if l.Status != nil {
		st = l.Status()
	}
	obs.Stage, obs.Bytes, obs.Lag, obs.Remaining = st.Stage, st.Bytes, st.Lag, st.Remaining
	d := l.Controller.Next(obs)
	l.Send.SetRate(d.Rate)
	if l.Prefetch != nil {
		l.Prefetch.SetRate(d.Prefetch)
	}
	p := Point{
		LatencyMs:  PV(obs),
		SetpointMs: float64(l.Setpoint) / float64(time.Millisecond),
		Rate:       d.Rate,
		Prefetch:   d.Prefetch,
		Hold:       d.Hold,
		Reason:     d.Reason,
		Phase:      st.Phase,
		Bytes:      st.Bytes,
	}
	if c := obs.CPU; c != nil && c.Err == nil {
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

// Last returns the loop's last point; false before its first step. Cheaper
// than Series for callers that want the current figures (a scrape, a view).
func (l *Loop) Last() (Point, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.mu.series) == 0 {
		return Point{}, false
	}
	return l.mu.series[len(l.mu.series)-1], true
}

// Since returns the loop's points with T > t, seconds since the loop
// started (t < 0: all): what a poller that already has the points up to t
// lacks.
func (l *Loop) Since(t float64) []Point {
	l.mu.Lock()
	defer l.mu.Unlock()
	i := sort.Search(len(l.mu.series), func(i int) bool { return l.mu.series[i].T > t })
	return append([]Point{}, l.mu.series[i:]...)
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
