package control

import (
	"errors"
	"fmt"
	"math"
	"time"
)

// PIDParams configures a PID controller. A Profile supplies everything but
// Setpoint, MaxRate, Stat and Reserve (Profile.PID); the zero value of each
// option turns it off, which with Slacker's gains is the paper's controller.
type PIDParams struct {
	// Setpoint is the target latency of the process variable; > 0. The
	// operator names it (Slacker §6: a setpoint near the knee of the
	// latency/speed curve uses the slack without oscillating).
	Setpoint time.Duration
	// MaxRate is the rate at full output, bytes/s; > 0. Output 1.0 = MaxRate.
	MaxRate float64
	// Kp, Ki, Kd are the velocity-form gains per step, with the error
	// normalised by the setpoint and the output a fraction of MaxRate; each
	// >= 0, Ki > 0 (without it the loop has no steady state).
	Kp, Ki, Kd float64
	// Initial is the output before the first step, a fraction of MaxRate in
	// [0, 1]: a loaded server is not hit at full speed before the first
	// measurement.
	Initial float64
	// Stat is the latency statistic used as the process variable; "" is
	// StatMean (Slacker: the mean over the window).
	Stat Statistic
	// StartGrowth, when > 1, runs a slow start (TCP's, for the same reason:
	// find the capacity fast without knowing it) before the PID law: while
	// the process variable stays under the exit level (StartExit), each step
	// multiplies the output by StartGrowth (from at least StartFloor). The
	// first step at or above that level after the output has grown, or at
	// full speed, ends the slow start for good, and the law runs on from the
	// output reached. A step at or above it before any growth — the latency
	// rose, but not because of the output (a migration's first window can
	// hold its snapshot's checkpoint) — is a step of the law, and the slow
	// start goes on once the latency is back under the level, placed anew
	// from the least latency seen until then. The linear law's ramp from a
	// low start is Ki·e·MaxRate per step, so a short migration would end
	// before it reached the setpoint; a geometric ramp covers a decade in ~20
	// steps at 1.12. After the slow start, StartRearm consecutive steps
	// under the exit level grow the output the same way again (the slack
	// came back: a burst ended), up to half the highest output reached so
	// far (TCP's ssthresh): above that the law alone climbs, so a noisy
	// plant whose latency often dips under the exit level is not pushed past
	// its setpoint on average. 0 or 1: no slow start (Slacker).
	StartGrowth float64
	// RearmGrowth, when > 1, changes how the slow start rearms after a
	// pause: the output grows by RearmGrowth a step instead of StartGrowth,
	// up to the rate that last held the latency near the working setpoint
	// (an average of the output in force at the law's steps whose error was
	// within ±HeldBand) or half the peak, whichever is more. A burst no rate
	// caused (host CPU steal) pauses the copy; when it passes, the slack is
	// back where it was, and the copy returns to the rate that used it in a
	// few steps rather than climbing at the law's pace. 0 or 1: StartGrowth
	// up to half the peak. Needs a slow start (StartGrowth > 1).
	RearmGrowth float64
	// StartExit places the level that ends the slow start between the
	// first latency measured (L0, the server before the migration loads it)
	// and the setpoint: L0 + StartExit·(Setpoint − L0); (0, 1]; 0 =
	// DefaultStartExit. The process variable is a window mean that lags the
	// rate by about half a window, so the exit leaves room for the growth
	// still in the pipe. (A fraction of the setpoint alone would end it at
	// once for a setpoint near the idle latency.)
	StartExit float64
	// StartBackoff, when > 0, takes back the slow start's last steps of
	// growth when it ends: the output at its exit is at most what it was
	// StartBackoff steps before (the law's, when that is lower). The exit is
	// judged on a window that shows the latency of rates a few steps old, so
	// by the time it crosses the exit level the output has grown past the
	// rate that put it there; TCP halves its window on a loss for the same
	// reason. With MeanHorizon, only a run that owes latency at the exit
	// (its balance D <= 0) backs off; one with latency in hand keeps the
	// growth and spends that balance on the overshoot, which its working
	// setpoint then repays (a backoff there left short runs under their
	// setpoints: TestPIDStartBackoffInHand). Steps in [0, MaxStartBackoff];
	// 0 = none.
	StartBackoff int
	// MeanHorizon, when > 0, makes the setpoint a contract on the mean of
	// the process variable over the whole run (Slacker's measure: the mean
	// latency during the migration) rather than on each window. The law
	// steers by a working setpoint SP + D/MeanHorizon, where D is the sum
	// over the usable steps so far of (Setpoint − PV): the latency a run
	// owes (D < 0) or has in hand (D > 0), ns·steps. A slow start's ramp
	// spent under the setpoint is then spent above it, a burst above it is
	// repaid under it, at 1/MeanHorizon of the balance per step. D is held
	// within ±MeanBand·Setpoint·MeanHorizon, so the working setpoint stays
	// within Setpoint·(1 ± MeanBand) and a balance that large (a stall of
	// seconds, a long idle start) is forgotten beyond it rather than repaid
	// for minutes. When the run says how long it has left
	// (Observation.Remaining), the steps left (plus AfterCopySteps) take
	// MeanHorizon's place in both: the working setpoint is then what the
	// rest of the run must average for the whole run to average the
	// setpoint. The steps of the migration's start-up (Observation.Settling)
	// count too: the output holds through them, but the run's clients saw
	// their latency. Steps in [0, 3600]; 0 = off (Slacker).
	MeanHorizon int
	// MeanBand bounds the working setpoint of MeanHorizon, a fraction of
	// the setpoint in (0, 1); 0 = DefaultMeanBand.
	MeanBand float64
	// IdleFloor, when > 0 and the slow start has placed its L0 under the
	// setpoint, keeps MeanHorizon's working setpoint at or above
	// L0 + IdleFloor·(Setpoint − L0): a run that owes latency repays it no
	// lower than that. Near L0 the latency no longer follows the rate down,
	// so repaying there costs the copy nearly all its speed for little
	// latency (TestPIDIdleFloor). Fraction in [0, 1); 0 = none.
	IdleFloor float64
	// Reserve is the latency above the setpoint the run's clients are
	// expected to see after its last step — a handover's freeze and the new
	// server's drain, which no step controls — summed over 1-step windows:
	// 100 ms is one step's window mean 100 ms over. With MeanHorizon, the
	// balance D starts at −Reserve, so the run spends it under the setpoint
	// beforehand and the mean over the whole run, handover included, lands
	// on the setpoint. ns·steps, >= 0; 0 = none.
	Reserve time.Duration
}

// AfterCopySteps is what the PID's mean contract (PIDParams.MeanHorizon)
// adds to the steps the copy has left (Observation.Remaining) for the steps
// a migration runs after its copy: catch-up and warm take a few seconds.
// After the last estimate the steps left count down by one a step, so the
// working setpoint does not swing to the band's edge at the copy's end.
const AfterCopySteps = 5

// DefaultMeanBand is MeanBand's default: the working setpoint stays within
// half the setpoint of it.
const DefaultMeanBand = 0.5

// LawReason starts the Reason of a PID step where its law set the rate: not
// a hold, not the slow start nor its rearm. The first such step ends the
// slow start.
const LawReason = "pid pv="

// StartRearm is how many consecutive steps under the slow start's exit
// level make the PID grow geometrically again (PIDParams.StartGrowth).
const StartRearm = 3

// HeldBand is the error (normalised, either sign) within which a step of
// the law counts its output towards the rate that holds the setpoint
// (PIDParams.RearmGrowth).
const HeldBand = 0.25

// heldWeight is the weight of each counted step in that rate's moving
// average: about the last ten such steps.
const heldWeight = 0.1

// StartFloor is the least output a slow start grows from (fraction of
// MaxRate): an Initial of 0 would otherwise never grow.
const StartFloor = 0.01

// MaxStartBackoff bounds PIDParams.StartBackoff (steps).
const MaxStartBackoff = 8

// DefaultStartExit is StartExit's default.
const DefaultStartExit = 0.5

// Validate reports the first out-of-range parameter.
func (p PIDParams) Validate() error {
	switch {
	case p.Setpoint <= 0:
		return fmt.Errorf("control: pid: setpoint must be > 0, got %v", p.Setpoint)
	case !finite(p.MaxRate) || p.MaxRate <= 0:
		return fmt.Errorf("control: pid: max rate must be > 0 bytes/s, got %v", p.MaxRate)
	case !finite(p.Kp) || p.Kp < 0:
		return fmt.Errorf("control: pid: kp must be >= 0, got %v", p.Kp)
	case !finite(p.Ki) || p.Ki <= 0:
		return fmt.Errorf("control: pid: ki must be > 0, got %v", p.Ki)
	case !finite(p.Kd) || p.Kd < 0:
		return fmt.Errorf("control: pid: kd must be >= 0, got %v", p.Kd)
	case !finite(p.Initial) || p.Initial < 0 || p.Initial > 1:
		return fmt.Errorf("control: pid: initial must be a fraction of max rate in [0,1], got %v", p.Initial)
	case !p.Stat.valid():
		return fmt.Errorf("control: pid: unknown statistic %q (want mean, p95 or p99)", p.Stat)
	case !finite(p.StartGrowth) || p.StartGrowth < 0 || p.StartGrowth > 4:
		return fmt.Errorf("control: pid: start_growth must be in [0, 4] (per step; 0 or 1 = none), got %v", p.StartGrowth)
	case !finite(p.RearmGrowth) || p.RearmGrowth < 0 || p.RearmGrowth > 4:
		return fmt.Errorf("control: pid: rearm_growth must be in [0, 4] (per step; 0 or 1 = the slow start's), got %v", p.RearmGrowth)
	case p.RearmGrowth > 1 && !(p.StartGrowth > 1):
		return fmt.Errorf("control: pid: rearm_growth %v needs a slow start (start_growth > 1), got start_growth %v", p.RearmGrowth, p.StartGrowth)
	case !finite(p.IdleFloor) || p.IdleFloor < 0 || p.IdleFloor >= 1:
		return fmt.Errorf("control: pid: idle_floor must be a fraction in [0, 1), got %v", p.IdleFloor)
	case p.StartBackoff < 0 || p.StartBackoff > MaxStartBackoff:
		return fmt.Errorf("control: pid: start_backoff must be in [0, %d] steps, got %d", MaxStartBackoff, p.StartBackoff)
	case p.StartBackoff > 0 && !(p.StartGrowth > 1):
		return fmt.Errorf("control: pid: start_backoff %d needs a slow start (start_growth > 1), got start_growth %v", p.StartBackoff, p.StartGrowth)
	case !finite(p.StartExit) || p.StartExit < 0 || p.StartExit > 1:
		return fmt.Errorf("control: pid: start_exit must be a fraction of the setpoint in (0, 1], got %v", p.StartExit)
	case p.MeanHorizon < 0 || p.MeanHorizon > 3600:
		return fmt.Errorf("control: pid: mean_horizon must be 0 (off) to 3600 steps, got %d", p.MeanHorizon)
	case !finite(p.MeanBand) || p.MeanBand < 0 || p.MeanBand >= 1:
		return fmt.Errorf("control: pid: mean_band must be a fraction of the setpoint in (0, 1), got %v", p.MeanBand)
	case p.Reserve < 0:
		return fmt.Errorf("control: pid: reserve must be >= 0, got %v", p.Reserve)
	}
	return nil
}

// PID is Slacker's controller: a PID in velocity form on transaction latency.
//
// Law, once per step k (normally 1 s, over a 3 s window):
//
//	PV(k) = max over obs.Signals of the statistic (source and target)
//	if any signal is missing/failed: hold u, report Hold; history unchanged
//	a Settling step (Observation.Settling): hold u, report Hold; with
//	        MeanHorizon, D(k) below counts its PV (the signals' ErrSettling
//	        ignored; no change if one has an error of its own)
//	SP(k) = Setpoint, or with MeanHorizon H > 0:
//	        h(k)  = steps left + AfterCopySteps, or H if never told
//	                (steps left = Observation.Remaining ÷ the step, counting
//	                down by one a step while Remaining is 0)
//	        D(0)  = −Reserve
//	        D(k)  = clamp(D(k−1) + Setpoint − PV(k), ±MeanBand·Setpoint·h(k))
//	        SP(k) = Setpoint + D(k)/h(k)          // the run's mean PV → Setpoint
//	        (IdleFloor f > 0, L0 known and < Setpoint:
//	         SP(k) = max(SP(k), L0 + f·(Setpoint − L0)))
//	e(k)  = (SP(k) − PV(k)) / SP(k)               // > 0: room to go faster
//	on the first usable step: e(k−1) = e(k−2) = e(k)  // no derivative kick
//	slow start (StartGrowth > 1, until the first PV(k) >= L0 + StartExit·(Setpoint − L0)
//	after it has grown u once, L0 the least usable PV before that growth, or
//	u = 1; a PV at or above that level before the first growth is a step of
//	the law, the slow start going on; again from the StartRearm-th consecutive
//	step under that level while u < peak/2, up to peak/2 — with RearmGrowth
//	g > 1, while u < max(peak/2, held), up to that, growing by g; held is
//	the moving average (weight heldWeight) of u(k−1) over the law's steps
//	after the slow start with |e(k)| <= HeldBand):
//	u(k) = max(the law's u(k) below, min(1, max(u(k−1), StartFloor) · StartGrowth))
//	Δu    = Kp·(e(k) − e(k−1)) + Ki·e(k) + Kd·(e(k) − 2e(k−1) + e(k−2))
//	u(k)  = clamp(u(k−1) + Δu, 0, 1)
//	        (StartBackoff n > 0, at the step whose PV ends the slow start,
//	         unless MeanHorizon > 0 and D(k) > 0: u(k) = min(u(k), u(k−n)))
//	Rate  = Prefetch = u(k) · MaxRate               // u = 0 means paused
//
// The velocity form keeps no sum of past errors, so a long stretch below the
// setpoint (the server idle even at full speed) winds nothing up: the first
// step above the setpoint starts slowing at once. (MeanHorizon's balance D is
// such a sum, on purpose, and bounded: it moves the working setpoint by at
// most MeanBand.) Gains are per step; call Next once per control step.
type PID struct {
	p        PIDParams
	u        float64                  // output, fraction of MaxRate
	e1, e2   float64                  // errors at k−1 and k−2
	primed   bool                     // e1, e2 hold real errors
	starting bool                     // in the slow start (PIDParams.StartGrowth)
	exitAt   float64                  // the slow start's exit level, ns; 0 until the first usable step
	l0       float64                  // the latency exitAt was placed from, ns
	grew     bool                     // the slow start has grown the output at least once
	below    int                      // consecutive steps under exitAt since the slow start ended
	peak     float64                  // highest output so far
	held     float64                  // moving average of the output at law steps within HeldBand; 0 = none yet
	past     [MaxStartBackoff]float64 // outputs of the last steps, past[n%len] = u after step n
	steps    int                      // steps taken (Next calls)
	owed     float64                  // MeanHorizon's balance D, ns·steps (> 0: the run is under its setpoint)
	left     float64                  // steps the run has left (Observation.Remaining); 0 = never told
	lastAt   time.Time
}

var _ Controller = (*PID)(nil)

// NewPID returns a PID controller with parameters p.
func NewPID(p PIDParams) (*PID, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	if p.StartExit == 0 {
		p.StartExit = DefaultStartExit
	}
	if p.MeanBand == 0 {
		p.MeanBand = DefaultMeanBand
	}
	c := &PID{p: p, u: p.Initial, starting: p.StartGrowth > 1}
	if p.MeanHorizon > 0 {
		c.owed = -float64(p.Reserve) // within the band from the first step
	}
	return c, nil
}

// Name implements Controller.
func (c *PID) Name() string { return "pid" }

// Initial implements Controller: Initial × MaxRate.
func (c *PID) Initial() float64 { return c.p.Initial * c.p.MaxRate }

// Params returns the controller's parameters.
func (c *PID) Params() PIDParams { return c.p }

// Next implements Controller.
func (c *PID) Next(obs Observation) Decision {
	d := c.next(obs)
	c.past[c.steps%MaxStartBackoff] = c.u
	c.steps++
	return d
}

// ago returns the output in force n steps before the one now ending:
// ago(1) is u(k−1). Before the first steps, the initial output.
func (c *PID) ago(n int) float64 {
	if n > c.steps {
		return c.p.Initial
	}
	return c.past[(c.steps-n)%MaxStartBackoff]
}

func (c *PID) next(obs Observation) Decision {
	c.countdown(obs)
	if obs.Settling {
		return c.settle(obs)
	}
	pv, who, err := worstLatency(obs.Signals, c.p.Stat)
	if err != nil {
		r := c.u * c.p.MaxRate
		return Decision{Rate: r, Prefetch: r, Hold: true, Reason: "pid hold: " + err.Error()}
	}
	sp := float64(c.p.Setpoint)
	spk, spNote := sp, "" // this step's working setpoint
	if c.p.MeanHorizon > 0 {
		h := c.account(pv)
		spk = sp + c.owed/h
		if c.p.IdleFloor > 0 && c.l0 > 0 && c.l0 < sp {
			spk = max(spk, c.l0+c.p.IdleFloor*(sp-c.l0))
		}
		spNote = fmt.Sprintf(" sp=%v", time.Duration(spk).Round(10*time.Microsecond))
		if c.left > 0 {
			spNote += fmt.Sprintf(" h=%.0f", h)
		}
	}
	e := (spk - float64(pv)) / spk
	if !c.primed {
		c.e1, c.e2, c.primed = e, e, true
	}
	prev := c.u // the output in force during the step that ends now
	du := c.p.Kp*(e-c.e1) + c.p.Ki*e + c.p.Kd*(e-2*c.e1+c.e2)
	law := clamp(c.u+du, 0, 1)
	exitNote := "" // the slow start's backoff, when this step ends it
	if c.p.StartGrowth > 1 {
		if c.starting && !c.grew && (c.exitAt == 0 || float64(pv) < c.l0) {
			// L0 is the least latency seen before the output first grew:
			// the first window of a migration can hold a disturbance of
			// its start (the snapshot's checkpoint), which is not the
			// server's idle latency.
			c.l0 = float64(pv)
			c.exitAt = c.l0 + c.p.StartExit*(sp-c.l0)
		}
		under := float64(pv) < c.exitAt && c.u < 1
		switch {
		case !under && c.starting && !c.grew:
			// The latency rose before the output did, so not because of
			// it: the law runs this step and the slow start waits.
		case !under:
			if c.starting && c.p.StartBackoff > 0 && float64(pv) >= c.exitAt && !c.inHand() {
				law = min(law, c.ago(c.p.StartBackoff))
				exitNote = fmt.Sprintf(" backoff=%d", c.p.StartBackoff)
			}
			c.starting, c.below = false, 0
		case !c.starting:
			c.below++
		}
		ceil, growth := c.peak/2, c.p.StartGrowth // a rearm's bound and step
		if c.p.RearmGrowth > 1 && !c.starting {
			ceil, growth = max(ceil, c.held), c.p.RearmGrowth
		}
		if under && (c.starting || c.below >= StartRearm && c.u < ceil) {
			// Whichever climbs faster: the geometric step, or the law's
			// own (from near zero, after a pause, the law's is larger).
			c.u = max(law, min(1, max(c.u, StartFloor)*growth))
			c.grew = c.grew || c.starting
			if !c.starting {
				c.u = min(c.u, max(ceil, law))
			}
			c.peak = max(c.peak, c.u)
			c.e2, c.e1 = c.e1, e
			r := c.u * c.p.MaxRate
			phase := "slow start"
			if !c.starting {
				phase = "rearm" // the slow start's growth again, after it ended
			}
			return Decision{Rate: r, Prefetch: r,
				Reason: fmt.Sprintf("pid %s pv=%v(%s)%s u=%.3f", phase, pv.Round(10*time.Microsecond), who, spNote, c.u)}
		}
	}
	if math.Abs(e) <= HeldBand && !c.starting {
		if c.held == 0 {
			c.held = prev
		}
		c.held += heldWeight * (prev - c.held)
	}
	c.u = law
	c.peak = max(c.peak, c.u)
	c.e2, c.e1 = c.e1, e
	r := c.u * c.p.MaxRate
	return Decision{
		Rate:     r,
		Prefetch: r,
		Reason:   fmt.Sprintf(LawReason+"%v(%s)%s e=%+.3f du=%+.4f%s u=%.3f", pv.Round(10*time.Microsecond), who, spNote, e, du, exitNote, c.u),
	}
}

// countdown updates the steps the run has left from obs.Remaining, over
// the time since the last step (1 s before there is one), or by one step
// when the run does not say.
func (c *PID) countdown(obs Observation) {
	step := time.Second
	if !c.lastAt.IsZero() && obs.At.After(c.lastAt) {
		step = obs.At.Sub(c.lastAt)
	}
	c.lastAt = obs.At
	switch {
	case obs.Remaining > 0:
		c.left = max(float64(obs.Remaining)/float64(step), 1e-9)
	case c.left > 0:
		c.left = max(c.left-1, 1e-9) // still told: at least the floor
	}
}

// inHand reports whether MeanHorizon's balance has latency in hand (D > 0):
// the run so far averaged under its setpoint, so a slow start's overshoot
// is already paid for and its last growth is kept (PIDParams.StartBackoff).
func (c *PID) inHand() bool { return c.p.MeanHorizon > 0 && c.owed > 0 }

// account adds one step at latency pv to MeanHorizon's balance D, within
// the band over this step's horizon h(k), which it returns (steps).
func (c *PID) account(pv time.Duration) float64 {
	h := float64(c.p.MeanHorizon)
	if c.left > 0 {
		h = c.left + AfterCopySteps
	}
	sp := float64(c.p.Setpoint)
	lim := c.p.MeanBand * sp * h
	c.owed = clamp(c.owed+sp-float64(pv), -lim, lim)
	return h
}

// settle is the step of a Settling observation: the output holds, and with
// MeanHorizon the step's latency, read from the signals the loop marked
// ErrSettling, is owed like any other (the start-up's checkpoint was part of
// what the run's clients saw). A signal without data of its own leaves the
// balance as it is.
func (c *PID) settle(obs Observation) Decision {
	r := c.u * c.p.MaxRate
	d := Decision{Rate: r, Prefetch: r, Hold: true, Reason: "pid hold: " + ErrSettling.Error()}
	if c.p.MeanHorizon <= 0 {
		return d
	}
	sig := make([]Signal, len(obs.Signals))
	for i, s := range obs.Signals {
		if errors.Is(s.Err, ErrSettling) {
			s.Err = nil
		}
		sig[i] = s
	}
	pv, _, err := worstLatency(sig, c.p.Stat)
	if err != nil {
		return d
	}
	c.account(pv)
	d.Reason += fmt.Sprintf(" (pv=%v counted: D=%v·steps)", pv.Round(10*time.Microsecond), time.Duration(c.owed).Round(10*time.Microsecond))
	return d
}

// finite reports whether v is neither NaN nor infinite.
func finite(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }
