package control

import (
	"fmt"
	"math"
)

// InterferenceParams configures an Interference controller. Obtain defaults
// with DefaultInterferenceParams and set MaxRate.
type InterferenceParams struct {
	// Model maps host I/O to a probability of interference. Default
	// DefaultModel (the thesis's coefficients).
	Model Model
	// Threshold is the probability the PID steers toward, in (0, 1).
	// Default 0.5 (the thesis's interference threshold; 0.75 migrates faster
	// and interferes more, §4.2).
	Threshold float64
	// High and Low are the lock and unlock probabilities, 0 <= Low < High <= 1.
	// Defaults 0.5 and 0.15 (thesis §4.2).
	High, Low float64
	// LockAfter is the number of consecutive steps with p > High that locks;
	// UnlockAfter the number of consecutive steps with p < Low that unlocks;
	// each >= 1. Defaults 2 and 3 (thesis §4.2).
	LockAfter, UnlockAfter int
	// MaxLocked bounds a lock, steps, >= 0 (0 = unbounded): after MaxLocked
	// locked steps the controller unlocks whatever p is, and locks again
	// only after LockAfter steps above High. A model whose calm probability
	// lies between Low and High never unlocks otherwise, and its migration,
	// its buffer drained, never ends (docs/control.md).
	MaxLocked int
	// Kp, Ki, Kd are velocity-form gains per step: fraction of the maximum
	// read rate (PrefetchFactor·MaxRate) per unit of probability error; each
	// >= 0, Ki > 0. Defaults 0, 0.03, 0: pure integral action. A fitted
	// classifier is steep, so the sensed probability is nearly binary (0 or 1
	// from one step to the next); proportional and derivative terms then
	// turn each flip into a large step and the loop settles into a two-step
	// limit cycle (on the simulator with Kp 0.2, Ki 0.2, Kd 0.05: p flipping
	// 0↔1 and the rate ±30% per step, mean latency 5× the setpoint), while
	// integral action alone dithers by ±Ki/2 around the boundary. The
	// thesis's own gains (2e6, 5e4, 6e4 "bytes") are for its page prefetcher,
	// in a form the excerpt does not state.
	Kp, Ki, Kd float64
	// MaxRate is the maximum send rate, bytes/s; > 0.
	MaxRate float64
	// PrefetchFactor sets the maximum disk read (read-ahead) rate as a
	// multiple of MaxRate, >= 1. Default 2: when the disk is calm enough, the
	// reader runs ahead of the sender at up to twice its maximum and fills
	// the buffer. (The thesis's "prefetching factor 50" is in pages of its
	// prefetcher; the unit does not carry over.) The buffer's memory cap is
	// the profile's (Profile.Interference.BufferMB), enforced by the
	// transfer's reader, which blocks while the buffer is full.
	PrefetchFactor float64
	// Initial is the output before the first step, a fraction of the
	// maximum read rate in [0, 1]. Default 0.1.
	Initial float64
}

// DefaultInterferenceParams returns the default profile's interference
// tuning (Profile.Interference: the thesis's threshold and hysteresis with
// sluice's gain and prefetch factor) over the thesis's model. MaxRate is
// left zero: the caller must set it.
func DefaultInterferenceParams() InterferenceParams {
	return DefaultProfile().InterferenceParams(DefaultModel(), 0)
}

// Validate reports the first out-of-range parameter.
func (p InterferenceParams) Validate() error {
	if err := p.Model.Validate(); err != nil {
		return fmt.Errorf("control: interference: %w", err)
	}
	switch {
	case !finite(p.Threshold) || p.Threshold <= 0 || p.Threshold >= 1:
		return fmt.Errorf("control: interference: threshold must be in (0,1), got %v", p.Threshold)
	case !finite(p.High) || !finite(p.Low) || p.Low < 0 || p.High > 1 || p.Low >= p.High:
		return fmt.Errorf("control: interference: need 0 <= low < high <= 1, got low=%v high=%v", p.Low, p.High)
	case p.MaxLocked < 0:
		return fmt.Errorf("control: interference: max locked steps must be >= 0, got %d", p.MaxLocked)
	case p.LockAfter < 1 || p.UnlockAfter < 1:
		return fmt.Errorf("control: interference: lock/unlock counts must be >= 1, got %d/%d", p.LockAfter, p.UnlockAfter)
	case !finite(p.Kp) || p.Kp < 0:
		return fmt.Errorf("control: interference: Kp must be >= 0, got %v", p.Kp)
	case !finite(p.Ki) || p.Ki <= 0:
		return fmt.Errorf("control: interference: Ki must be > 0, got %v", p.Ki)
	case !finite(p.Kd) || p.Kd < 0:
		return fmt.Errorf("control: interference: Kd must be >= 0, got %v", p.Kd)
	case !finite(p.MaxRate) || p.MaxRate <= 0:
		return fmt.Errorf("control: interference: max rate must be > 0 bytes/s, got %v", p.MaxRate)
	case !finite(p.PrefetchFactor) || p.PrefetchFactor < 1:
		return fmt.Errorf("control: interference: prefetch factor must be >= 1, got %v", p.PrefetchFactor)
	case !finite(p.Initial) || p.Initial < 0 || p.Initial > 1:
		return fmt.Errorf("control: interference: initial must be a fraction of max rate in [0,1], got %v", p.Initial)
	}
	return nil
}

// Interference is the migration-buffering thesis's controller: a logistic
// model turns host I/O into a probability of interference, a PID steers that
// probability toward a threshold by setting the disk read (prefetch) rate,
// and a lock with hysteresis stops disk reads while the host is interfering,
// so sending continues from the read-ahead buffer.
//
// Law, once per step k (ReadMax = PrefetchFactor·MaxRate):
//
//	if obs.Host is nil or failed: hold both rates, report Hold;
//	                              counters and PID history unchanged
//	p = Model.Prob(obs.Host)
//	if p > High: above++, below = 0
//	elif p < Low: below++, above = 0
//	else: above = below = 0                        // counts are consecutive
//	if !locked and above >= LockAfter:  locked = true
//	if  locked and below >= UnlockAfter: locked = false
//	if  locked for MaxLocked steps (> 0): locked = false, above = 0
//	if !locked:                                     // closed loop
//	    e = Threshold − p                           // > 0: disk calm, read faster
//	    (first closed-loop step after start or unlock: e(k−1) = e(k−2) = e)
//	    u = clamp(u + Kp(e − e1) + Ki·e + Kd(e − 2e1 + e2), 0, 1)
//	    Prefetch = u·ReadMax                       // disk reads: the actuator
//	    Rate = min(MaxRate, Prefetch)              // send what is read
//	else:                                           // open loop
//	    u held; Prefetch = 0; Rate = min(MaxRate, u·ReadMax)  // from the buffer
//
// The PID drives the disk reads, the migration's only action on the disk, so
// the loop has one continuous actuator. While the disk allows reading faster
// than MaxRate the reader runs ahead of the sender and fills the buffer.
// While locked the migration reads nothing, so its actions cannot move p: the
// loop is open and the PID is frozen rather than wound down, and sending
// continues at the pre-lock rate from memory (when the buffer runs dry the
// sender stalls by itself: there is nothing to send). After UnlockAfter calm
// steps the loop closes again from the held output. Before the lock, a
// probability above Threshold already slows the reads through the PID.
type Interference struct {
	p             InterferenceParams
	u             float64 // output, fraction of MaxRate
	e1, e2        float64
	primed        bool // e1, e2 hold real errors of the current closed-loop stretch
	locked        bool
	lockedSteps   int // steps locked in the current lock
	above, below  int
	lastProb      float64
	lastProbValid bool
}

var _ Controller = (*Interference)(nil)

// NewInterference returns an Interference controller with parameters p.
func NewInterference(p InterferenceParams) (*Interference, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	return &Interference{p: p, u: p.Initial}, nil
}

// Name implements Controller.
func (c *Interference) Name() string { return "interference" }

// Initial implements Controller: Initial × MaxRate.
func (c *Interference) Initial() float64 { return c.p.Initial * c.p.MaxRate }

// Params returns the controller's parameters.
func (c *Interference) Params() InterferenceParams { return c.p }

// Locked reports whether the controller is locked (host interfering).
func (c *Interference) Locked() bool { return c.locked }

// Prob returns the last probability of interference computed and whether
// there was one.
func (c *Interference) Prob() (float64, bool) { return c.lastProb, c.lastProbValid }

// Next implements Controller.
func (c *Interference) Next(obs Observation) Decision {
	p, err := c.prob(obs.Host)
	if err != nil {
		d := c.decision()
		d.Hold = true
		d.Reason = "interference hold: " + err.Error()
		return d
	}
	c.lastProb, c.lastProbValid = p, true
	switch {
	case p > c.p.High:
		c.above++
		c.below = 0
	case p < c.p.Low:
		c.below++
		c.above = 0
	default:
		c.above, c.below = 0, 0
	}
	event := ""
	if !c.locked && c.above >= c.p.LockAfter {
		c.locked, c.primed, c.lockedSteps, event = true, false, 0, " LOCK"
	} else if c.locked && c.below >= c.p.UnlockAfter {
		c.locked, event = false, " UNLOCK"
	} else if c.locked && c.p.MaxLocked > 0 && c.lockedSteps >= c.p.MaxLocked {
		c.locked, c.above, event = false, 0, " UNLOCK (max locked)"
	}
	if c.locked {
		c.lockedSteps++
	}
	if c.locked {
		d := c.decision()
		d.Reason = fmt.Sprintf("interference p=%.3f locked (below %d/%d)%s: send from buffer, prefetch 0",
			p, c.below, c.p.UnlockAfter, event)
		return d
	}
	e := c.p.Threshold - p
	if !c.primed {
		c.e1, c.e2, c.primed = e, e, true
	}
	du := c.p.Kp*(e-c.e1) + c.p.Ki*e + c.p.Kd*(e-2*c.e1+c.e2)
	c.u = clamp(c.u+du, 0, 1)
	c.e2, c.e1 = c.e1, e
	d := c.decision()
	d.Reason = fmt.Sprintf("interference p=%.3f e=%+.3f u=%.3f (above %d/%d)%s", p, e, c.u, c.above, c.p.LockAfter, event)
	return d
}

// prob returns the model's probability for h, or an error wrapping ErrNoData
// when h is missing, failed, or carries figures no disk can produce
// (negative or not finite): those would poison the PID's state.
func (c *Interference) prob(h *HostIO) (float64, error) {
	if h == nil {
		return 0, fmt.Errorf("%w: host I/O not measured", ErrNoData)
	}
	if h.Err != nil {
		return 0, fmt.Errorf("%w: %v", ErrNoData, h.Err)
	}
	if err := checkHostIO(*h); err != nil {
		return 0, fmt.Errorf("%w: %v", ErrNoData, err)
	}
	p := c.p.Model.Prob(*h)
	if math.IsNaN(p) {
		return 0, fmt.Errorf("%w: model gave NaN", ErrNoData)
	}
	return p, nil
}

// decision returns the rates of the current state.
func (c *Interference) decision() Decision {
	read := c.u * c.p.PrefetchFactor * c.p.MaxRate
	r := min(c.p.MaxRate, read)
	if c.locked {
		return Decision{Rate: r, Prefetch: 0}
	}
	return Decision{Rate: r, Prefetch: read}
}
