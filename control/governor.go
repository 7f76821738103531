package control

import (
	"fmt"
	"time"

	"github.com/sluicedb/sluice/internal/stats"
)

// Stage is the part of a migration a control step falls in, as far as the
// migration's control policy (Governor) cares.
type Stage int

const (
	// StageOther is any step outside the copy and catch-up: before the
	// copy's first byte, the handover, cleanup.
	StageOther Stage = iota
	// StageCopy is the hot copy, whose bytes the throttle alone paces.
	StageCopy
	// StageCatchUp is catch-up and warm: the standby replays the WAL the
	// source wrote meanwhile (warm waits for that lag again after its copy).
	StageCatchUp
)

func (s Stage) String() string {
	switch s {
	case StageCopy:
		return "copy"
	case StageCatchUp:
		return "catch-up"
	}
	return "other"
}

// GovernorParams configure a Governor. Profile.Governor fills them.
type GovernorParams struct {
	// Settle is how long after the copy's first byte the controller is told
	// its latency signals are settling (Observation.Settling): the windows
	// of the copy's start-up hold the snapshot's checkpoint, a one-off cost
	// no speed would have avoided. 0 = none (a controller that does not
	// steer by latency).
	Settle time.Duration
	// CatchUp configures the catch-up floor.
	CatchUp CatchUpParams
	// Period is the control step; 0 = 1 s.
	Period time.Duration
	// Setpoint scales the catch-up's entry floor down when the copy ended
	// over it; 0 = no scaling.
	Setpoint time.Duration
	// MaxRate, when > 0, caps the catch-up floor: the operator's top speed
	// holds in catch-up too.
	MaxRate float64
}

// Governor is a migration's control policy around its controller: it hides
// the copy's start-up from the controller (Settle), and in catch-up it
// raises a floor under the controller's rate whenever the replay lag would
// not drain in time, so that a migration always ends. It implements
// Controller; like every controller it is pure and not safe for concurrent
// use.
//
// The catch-up floor, per step in StageCatchUp with the lag known:
//
//	first step after a copy: floor = mean rate of the copy's last Entry
//	        steps, × Setpoint ÷ their mean latency when that was over
//	horizon = max(DrainMs, Share × the copy's duration)
//	every step, over the last Patience steps:
//	        pace = (lag Patience steps ago − lag now) ÷ (Patience · Period)
//	        if pace · horizon < lag:   // would not drain in time
//	            floor = max(Boost · max(floor, mean rate, MinFloor),
//	                        max(mean rate − pace, 0) + lag ÷ horizon)
//	floor = min(floor, MaxRate); rate = max(controller's rate, floor)
//
// "mean rate" is the mean rate in force over those steps: the rate the
// controller decided on leaving a pause ramps fast, and one such step must
// not set the floor. The floor stays until the stage ends. A controller
// holding the latency at its setpoint may allow less than the source writes
// WAL, and then the lag grows for ever; the floor trades latency above the
// setpoint for a migration that ends. The entry floor starts catch-up at
// the copy's pace, which the clients could take (the lag is what they wrote
// meanwhile), and the horizon grows with the copy, whose lag does too.
type Governor struct {
	ctl Controller
	p   GovernorParams

	copyAt   time.Time // the copy's first step with bytes; zero before
	floor    float64   // catch-up rate floor, bytes/s (0 = none)
	lags     []int64   // catch-up lag at recent steps, oldest first
	rates    []float64 // rate in force from each of lags' steps to the next
	copied   []float64 // rate decided at the copy's last steps (Entry)
	copyPV   []float64 // latency (ms; < 0 unknown) at those steps
	copyFrom time.Time // the current copy's first and last steps
	copyTo   time.Time
	horizon  time.Duration // this catch-up's drain horizon
}

var _ Controller = (*Governor)(nil)

// NewGovernor returns ctl governed by p.
func NewGovernor(ctl Controller, p GovernorParams) *Governor {
	return &Governor{ctl: ctl, p: p}
}

// Governor returns the governor parameters of profile p for a migration at
// setpoint (0: none) and top speed maxRate, whose controller steers by
// latency or not.
func (p Profile) Governor(setpoint time.Duration, maxRate float64, byLatency bool) GovernorParams {
	g := GovernorParams{CatchUp: p.CatchUp, Period: p.Step(), Setpoint: setpoint, MaxRate: maxRate}
	if byLatency {
		g.Settle = p.Settle()
	}
	return g
}

// Name implements Controller: the governed controller's kind.
func (g *Governor) Name() string { return g.ctl.Name() }

// Initial implements Controller: the governed controller's.
func (g *Governor) Initial() float64 { return g.ctl.Initial() }

// Controller returns the governed controller.
func (g *Governor) Controller() Controller { return g.ctl }

// Next implements Controller.
func (g *Governor) Next(obs Observation) Decision {
	pv := meanMs(obs)
	if g.settling(obs.At, obs.Bytes) {
		obs = settlingObs(obs)
	}
	d := g.ctl.Next(obs)
	if floor := g.catchUpFloor(obs, d.Rate, pv); d.Rate < floor {
		d.Rate, d.Reason = floor, d.Reason+fmt.Sprintf("; catch-up floor %.0f B/s", floor)
	}
	return d
}

// settling reports whether the step at time at, with bytes moved so far,
// falls in the Settle period: before the copy's first byte, or less than
// Settle after it. Once the copy has started, later stages that report no
// bytes of their own do not settle again: the controller steers them too.
func (g *Governor) settling(at time.Time, bytes int64) bool {
	if g.p.Settle <= 0 {
		return false
	}
	if g.copyAt.IsZero() {
		if bytes <= 0 {
			return true
		}
		g.copyAt = at
	}
	return at.Sub(g.copyAt) < g.p.Settle
}

// settlingObs is obs marked Settling: its signals with data carry
// ErrSettling (and their values, which the PID's mean contract counts); a
// signal's own failure stays.
func settlingObs(obs Observation) Observation {
	sig := []Signal{{Name: "settle", Err: ErrSettling}}
	if len(obs.Signals) > 0 {
		sig = make([]Signal, len(obs.Signals))
		for i, s := range obs.Signals {
			if s.Err == nil {
				s.Err = ErrSettling
			}
			sig[i] = s
		}
	}
	obs.Signals, obs.Settling = sig, true
	return obs
}

// catchUpFloor returns the rate floor of the step obs (0 = none), given the
// rate the controller decided and the step's latency pv (ms, < 0 unknown).
func (g *Governor) catchUpFloor(obs Observation, rate, pv float64) float64 {
	c := g.p.CatchUp
	if obs.Stage != StageCatchUp {
		g.floor, g.lags, g.rates, g.horizon = 0, g.lags[:0], g.rates[:0], 0
		if obs.Stage == StageCopy && c.Entry > 0 {
			if g.copyFrom.IsZero() {
				g.copyFrom = obs.At
			}
			g.copyTo = obs.At
			g.copied, g.copyPV = append(g.copied, rate), append(g.copyPV, pv)
			if len(g.copied) > c.Entry {
				g.copied, g.copyPV = g.copied[1:], g.copyPV[1:]
			}
		}
		return 0
	}
	drain := msDuration(c.DrainMs)
	if len(g.copied) > 0 { // catch-up's first step after a copy
		g.floor = g.capped(g.entryFloor())
		g.copied, g.copyPV = g.copied[:0], g.copyPV[:0]
		g.horizon = max(drain, time.Duration(c.Share*float64(g.copyTo.Sub(g.copyFrom))))
		g.copyFrom = time.Time{}
	}
	horizon := g.horizon
	if horizon <= 0 {
		horizon = drain
	}
	lag := obs.Lag
	if lag < 0 {
		return g.floor
	}
	g.lags = append(g.lags, lag)
	if len(g.lags) > c.Patience {
		period := g.p.Period
		if period <= 0 {
			period = time.Second
		}
		// pace: bytes/s the lag shrank by over the window (< 0: it grew)
		pace := float64(g.lags[0]-lag) / (float64(c.Patience) * period.Seconds())
		if pace*horizon.Seconds() < float64(lag) {
			mean := stats.Mean(g.rates)
			need := max(mean-pace, 0) + float64(lag)/horizon.Seconds()
			g.floor = g.capped(max(max(g.floor, mean, c.MinFloor)*c.Boost, need))
			g.lags, g.rates = g.lags[:0], g.rates[:0]
			return g.floor
		}
		g.lags, g.rates = g.lags[1:], g.rates[1:]
	}
	g.rates = append(g.rates, max(rate, g.floor))
	return g.floor
}

// entryFloor is catch-up's first floor: the mean rate decided over the
// copy's last steps, scaled by setpoint ÷ their mean latency when that
// latency exceeded the setpoint.
func (g *Governor) entryFloor() float64 {
	floor := stats.Mean(g.copied)
	var known []float64
	for _, v := range g.copyPV {
		if v >= 0 {
			known = append(known, v)
		}
	}
	sp := float64(g.p.Setpoint) / float64(time.Millisecond)
	if pv := stats.Mean(known); sp > 0 && len(known) > 0 && pv > sp {
		floor *= sp / pv
	}
	return floor
}

// capped is floor no higher than MaxRate (when set).
func (g *Governor) capped(floor float64) float64 {
	if g.p.MaxRate > 0 {
		return min(floor, g.p.MaxRate)
	}
	return floor
}

// meanMs is the max mean latency, ms, over obs's signals with data; -1
// when none has.
func meanMs(obs Observation) float64 {
	pv := -1.0
	for _, s := range obs.Signals {
		if s.Err == nil {
			pv = max(pv, float64(s.Mean)/float64(time.Millisecond))
		}
	}
	return pv
}
