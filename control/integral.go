package control

import (
	"fmt"
	"math"
	"time"
)

// IntegralParams configures an Integral controller. Obtain defaults with
// DefaultIntegralParams and set MaxRate and K.
type IntegralParams struct {
	// P scales every contract into the controller's reference P·LC_i, in
	// (0, 1]. Default 0.9 (Aqueduct §3.1: 0.8–0.9 kept violations rare; the
	// burstier the workload, the smaller P should be).
	P float64
	// DefaultContract is LC for signals whose Contract is 0; > 0.
	// Default 10 ms (Aqueduct's contract in all its experiments).
	DefaultContract time.Duration
	// K is the integral gain in (bytes/s) per second of latency error per
	// step; > 0. The rate moves by K·E_min each step. No universal default:
	// use control/tune.ProposeK (K = (1−p)/G for pole p and fitted gain G,
	// stable iff 0 < K < 2/G) or HeuristicIntegralK as a first guess.
	K float64
	// MaxRate is the upper clamp of the rate, bytes/s; > 0.
	MaxRate float64
	// Initial is the rate before the first step, bytes/s, in [0, MaxRate].
	// Default 0: start paused and let the first steps ramp up.
	Initial float64
	// Stat is the latency statistic compared with the contracts. Default
	// (and "") StatMean (Aqueduct's sampled average latency per store).
	Stat Statistic
}

// DefaultIntegralParams returns P 0.9, a 10 ms default contract, Initial 0
// and the mean latency. K and MaxRate are left zero: the caller must set them.
func DefaultIntegralParams() IntegralParams {
	return IntegralParams{P: 0.9, DefaultContract: 10 * time.Millisecond, Stat: StatMean}
}

// HeuristicIntegralK returns a first-guess gain for plants not yet profiled:
// the K that places the pole at 0.5 if running at maxRate adds one contract's
// worth of latency (G = contract/maxRate), i.e. K = 0.5·maxRate/contract in
// (bytes/s) per second. Profile the plant (control/tune) for a real value.
func HeuristicIntegralK(maxRate float64, contract time.Duration) float64 {
	return 0.5 * maxRate / contract.Seconds()
}

// Validate reports the first out-of-range parameter.
func (p IntegralParams) Validate() error {
	switch {
	case !finite(p.P) || p.P <= 0 || p.P > 1:
		return fmt.Errorf("control: integral: P must be in (0,1], got %v", p.P)
	case p.DefaultContract <= 0:
		return fmt.Errorf("control: integral: default contract must be > 0, got %v", p.DefaultContract)
	case !finite(p.K) || p.K <= 0:
		return fmt.Errorf("control: integral: K must be > 0 (bytes/s per second of error; see control/tune.ProposeK), got %v", p.K)
	case !finite(p.MaxRate) || p.MaxRate <= 0:
		return fmt.Errorf("control: integral: max rate must be > 0 bytes/s, got %v", p.MaxRate)
	case !finite(p.Initial) || p.Initial < 0 || p.Initial > p.MaxRate:
		return fmt.Errorf("control: integral: initial rate must be in [0, max rate %v], got %v", p.MaxRate, p.Initial)
	case !p.Stat.valid():
		return fmt.Errorf("control: integral: unknown statistic %q (want mean, p95 or p99)", p.Stat)
	}
	return nil
}

// Integral is Aqueduct's controller (Lu et al., FAST 2002, §3.1): an integral
// law on the worst store's error against per-store latency contracts.
//
// Law, once per step k (Aqueduct's sampling period W):
//
//	if no signals, or any signal missing/failed: hold R, report Hold
//	for each store i: LC_i = Signal.Contract, or DefaultContract if 0
//	                  L_i(k) = 0 if the store is idle (Signal.Idle: no client to hurt)
//	                  E_i(k) = P·LC_i − L_i(k)      // seconds; < 0 is a violation of the reference
//	E_min(k) = min_i E_i(k)                          // the worst store decides
//	R(k) = clamp(R(k−1) + K·E_min(k), 0, MaxRate)   // bytes/s; 0 = paused
//	Rate = Prefetch = R(k)
//
// With the plant model L(k+1) − L(k) = G·(R(k) − R(k−1)) (G seconds per
// byte/s) the closed loop has one pole p = 1 − K·G: stable iff 0 < K < 2/G,
// monotone for K < 1/G, and oscillating with a sign flip every step for
// 1/G < K < 2/G. A missing store might be the worst one, so any missing
// signal holds the rate rather than acting on the others.
type Integral struct {
	p IntegralParams
	r float64 // current rate, bytes/s
}

var _ Controller = (*Integral)(nil)

// NewIntegral returns an Integral controller with parameters p.
func NewIntegral(p IntegralParams) (*Integral, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	return &Integral{p: p, r: p.Initial}, nil
}

// Name implements Controller.
func (c *Integral) Name() string { return "integral" }

// Initial implements Controller.
func (c *Integral) Initial() float64 { return c.p.Initial }

// Params returns the controller's parameters.
func (c *Integral) Params() IntegralParams { return c.p }

// Next implements Controller.
func (c *Integral) Next(obs Observation) Decision {
	hold := func(err error) Decision {
		return Decision{Rate: c.r, Prefetch: c.r, Hold: true, Reason: "integral hold: " + err.Error()}
	}
	if len(obs.Signals) == 0 {
		return hold(fmt.Errorf("%w: no store signals", ErrNoData))
	}
	emin, worst := math.Inf(1), ""
	for _, s := range obs.Signals {
		if err := usable(s, c.p.Stat); err != nil {
			return hold(err)
		}
		lc := s.Contract
		if lc <= 0 {
			lc = c.p.DefaultContract
		}
		e := c.p.P*lc.Seconds() - c.p.Stat.of(s).Seconds()
		if e < emin {
			emin, worst = e, s.Name
		}
	}
	c.r = clamp(c.r+c.p.K*emin, 0, c.p.MaxRate)
	return Decision{
		Rate:     c.r,
		Prefetch: c.r,
		Reason:   fmt.Sprintf("integral worst=%s e_min=%+.3fms R=%.0fB/s", worst, emin*1e3, c.r),
	}
}
