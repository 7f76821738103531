package tune

import (
	"fmt"
	"math"
	"math/cmplx"
	"time"

	"gonum.org/v1/gonum/mat"
)

// PIDGains are velocity-form PID gains in control.PID's units: per step, error
// normalised by the setpoint, output a fraction of max rate.
type PIDGains struct {
	Kp float64 `json:"kp"`
	Ki float64 `json:"ki"`
	Kd float64 `json:"kd"`
}

// PIDProposal is ProposePID's answer with the figures behind it.
type PIDProposal struct {
	PIDGains
	// NormGain is the plant's gain in the controller's units: the change of
	// normalised error per unit of output, g = G·maxRate/setpoint.
	NormGain float64 `json:"norm_gain"`
	// Radius is the spectral radius of the closed loop on the model (< 1 is
	// stable); the error shrinks roughly by this factor per step.
	Radius float64 `json:"radius"`
	// SettleSteps is ceil(ln 0.02 / ln Radius): steps for the model's slowest
	// mode to decay to 2%.
	SettleSteps int `json:"settle_steps"`
}

// PIDRadius returns the spectral radius of the closed loop formed by a
// velocity-form PID (gains kp, ki, kd, per step) and the plant model
//
//	PV(k+1) = base + G·mean(R(k), R(k−1), …, R(k−window+1))
//
// in normalised units g = G·maxRate/setpoint: a static gain behind a one-step
// delay, seen through a moving-average window of `window` steps (Slacker: a
// 3 s window stepped every 1 s). The loop is stable iff the radius is < 1.
//
// Derivation: with controller C(z) = (Kp(1−z⁻¹) + Ki + Kd(1−z⁻¹)²)/(1−z⁻¹)
// and plant P(z) = (g/W)·Σ_{j=1..W} z⁻ʲ, the characteristic equation is
// (1−z⁻¹) + P(z)·N(z) = 0 with N(z) = (Kp+Ki+Kd) − (Kp+2Kd)z⁻¹ + Kd z⁻²;
// its roots are the eigenvalues of the polynomial's companion matrix.
func PIDRadius(g float64, window int, kp, ki, kd float64) float64 {
	w := max(window, 1)
	// Coefficients in powers of z⁻¹, degree w+2.
	c := make([]float64, w+3)
	c[0], c[1] = 1, -1
	num := []float64{kp + ki + kd, -(kp + 2*kd), kd}
	for j := 1; j <= w; j++ {
		for i, v := range num {
			c[j+i] += g / float64(w) * v
		}
	}
	// Drop trailing zero coefficients (Kd = 0 lowers the degree).
	deg := len(c) - 1
	for deg > 0 && c[deg] == 0 {
		deg--
	}
	if deg == 0 {
		return 0
	}
	// Monic polynomial z^deg + c1 z^(deg−1) + … + c_deg: companion matrix.
	m := mat.NewDense(deg, deg, nil)
	for j := range deg {
		m.Set(0, j, -c[j+1])
	}
	for i := 1; i < deg; i++ {
		m.Set(i, i-1, 1)
	}
	var e mat.Eigen
	if !e.Factorize(m, mat.EigenNone) {
		return math.Inf(1)
	}
	r := 0.0
	for _, v := range e.Values(nil) {
		r = math.Max(r, cmplx.Abs(v))
	}
	return r
}

// ProposePID proposes velocity-form PID gains for a plant of gain G at the
// operating point (seconds of latency per byte/s: Queue.GainAt(setpoint) for
// a plant that bends, FitGain's slope for one that does not), a setpoint, the controller's max rate
// (bytes/s) and the latency window in steps (1 when the process variable is
// the last step's latency; 3 for Slacker's 3 s window at 1 s steps).
//
// Method (pole placement by search): on the model of PIDRadius, scan Ki over
// a logarithmic grid and Kp/Ki, Kd/Ki over fixed ratios, and keep the least
// aggressive gains (smallest Kp+Ki+Kd) whose closed-loop spectral radius is at
// most targetRadius; if none reaches it, the gains of smallest radius. With
// window 1 the best is pure integral action, Ki = (1 − p)/g — the PID becomes
// Aqueduct's integral law — while longer windows call for less Ki and some
// Kp/Kd, as Slacker found. It fails if G, setpoint or maxRate are not
// positive, targetRadius is not in (0, 1), or no grid point is stable.
//
// Slacker's gains (control.SlackerKp/Ki/Kd) are not simply scaled: their
// Kp:Ki:Kd = 5:1:3 cannot be made fast on this model. With window 1 and
// g = 1.25 the radius bottoms out near 0.95 at 12× and the loop is unstable
// from about 14× (Ki·g ≈ 0.09): Kp and Kd dominate a plant that answers in
// one step. Their plant reacted far more slowly than that.
func ProposePID(G float64, setpoint time.Duration, maxRate float64, window int, targetRadius float64) (PIDProposal, error) {
	switch {
	case !finite(G) || G <= 0:
		return PIDProposal{}, fmt.Errorf("tune: propose PID: gain G must be > 0 s per byte/s, got %v", G)
	case setpoint <= 0:
		return PIDProposal{}, fmt.Errorf("tune: propose PID: setpoint must be > 0, got %v", setpoint)
	case !finite(maxRate) || maxRate <= 0:
		return PIDProposal{}, fmt.Errorf("tune: propose PID: max rate must be > 0 bytes/s, got %v", maxRate)
	case window < 1:
		return PIDProposal{}, fmt.Errorf("tune: propose PID: window must be >= 1 step, got %d", window)
	case !finite(targetRadius) || targetRadius <= 0 || targetRadius >= 1:
		return PIDProposal{}, fmt.Errorf("tune: propose PID: target radius must be in (0,1), got %v", targetRadius)
	}
	g := G * maxRate / setpoint.Seconds()
	pRatios := []float64{0, 0.1, 0.25, 0.5, 1, 2}
	dRatios := []float64{0, 0.05, 0.1, 0.25, 0.5, 1}
	var best, fallback PIDProposal
	best.Radius, fallback.Radius = math.Inf(1), math.Inf(1)
	found := false
	bestCost := math.Inf(1)
	// Ki from 0.001/g to 2/g, 40 points per decade.
	for i := 0; i <= 130; i++ {
		ki := 0.001 / g * math.Pow(10, float64(i)/40)
		for _, pr := range pRatios {
			for _, dr := range dRatios {
				kp, kd := pr*ki, dr*ki
				r := PIDRadius(g, window, kp, ki, kd)
				cand := PIDProposal{PIDGains: PIDGains{Kp: kp, Ki: ki, Kd: kd}, NormGain: g, Radius: r}
				if r < fallback.Radius {
					fallback = cand
				}
				if cost := kp + ki + kd; r <= targetRadius && cost < bestCost {
					best, bestCost, found = cand, cost, true
				}
			}
		}
	}
	if !found {
		best = fallback
	}
	if best.Radius >= 1 {
		return PIDProposal{}, fmt.Errorf("tune: propose PID: no stable gains on the grid (best radius %.3f): %w", best.Radius, ErrUnstable)
	}
	best.SettleSteps = settleSteps(best.Radius)
	return best, nil
}

// settleSteps returns the steps for a mode of magnitude r to decay to 2%.
func settleSteps(r float64) int {
	if r <= 0 {
		return 1
	}
	return int(math.Ceil(math.Log(0.02) / math.Log(r)))
}
