package tune

import (
	"errors"
	"fmt"
	"math"
	"time"
)

// ErrSetpointTooLow is returned by Recommend when the setpoint is not above
// the plant's latency at rate 0: no migration speed can meet it.
var ErrSetpointTooLow = errors.New("setpoint is not above the idle latency")

// Line is a straight-line plant model, latency = Intercept + G·rate.
type Line struct {
	G         float64 `json:"gain_s_per_Bps"` // seconds per byte/s
	Intercept float64 `json:"intercept_s"`    // seconds
	R2        float64 `json:"r2"`
}

// Latency returns the line's latency at rate r, seconds.
func (l Line) Latency(r float64) float64 { return l.Intercept + l.G*r }

// Recommendation is everything `sluice tune` proposes from a profile: the
// fitted models, which one the gains are designed on, and gains for both
// feedback controllers at the setpoint.
type Recommendation struct {
	Setpoint time.Duration `json:"setpoint"`
	MaxRate  float64       `json:"max_rate_Bps"`
	Window   int           `json:"window_steps"`
	Line     Line          `json:"line"`
	Queue    *Queue        `json:"queue,omitempty"` // nil when 1/L does not fall with rate
	// Model is "queue" or "line": the model with the smaller squared error
	// in latency over the profile, on which the gains are designed.
	Model string `json:"model"`
	// IdleLatency is the model's latency at rate 0, seconds.
	IdleLatency float64 `json:"idle_latency_s"`
	// Gain is the model's dL/dr at the setpoint, seconds per byte/s.
	Gain float64 `json:"gain_at_setpoint_s_per_Bps"`
	// RateAtSetpoint is the model's rate whose latency is the setpoint,
	// bytes/s, capped at MaxRate: what a well-tuned loop should settle at.
	RateAtSetpoint float64 `json:"rate_at_setpoint_Bps"`
	// Pole and K are Aqueduct's integral design: K = (1 − Pole)/Gain.
	Pole float64 `json:"integral_pole"`
	K    float64 `json:"integral_K"` // (bytes/s) per second of error
	// PID is the velocity-form proposal (ProposePID at Gain).
	PID PIDProposal `json:"pid"`
	// Warnings name the ways the profile may mislead (setpoint outside the
	// profiled latencies, plant never reaching the setpoint).
	Warnings []string `json:"warnings,omitempty"`
}

// Recommend fits both plant models to a profile (rates bytes/s, latencies
// seconds, one point per fixed-rate run), keeps the one that fits the
// latencies better, and designs gains at the setpoint: Aqueduct's K for the
// integral controller (pole in (−1, 1); Aqueduct used −0.22 and 0.49) and
// PID gains by ProposePID (window steps, target spectral radius). For
// Integral, whose reference is P·LC, pass that reference as setpoint.
//
// It fails on a malformed profile (as FitGain), when neither model shows
// latency rising with rate (ErrNoGain), when the setpoint is not above the
// idle latency (ErrSetpointTooLow), or when no stable design exists.
func Recommend(rates, latencies []float64, setpoint time.Duration, maxRate float64, window int, pole, radius float64) (Recommendation, error) {
	r := Recommendation{Setpoint: setpoint, MaxRate: maxRate, Window: window, Pole: pole}
	if setpoint <= 0 {
		return r, fmt.Errorf("tune: recommend: setpoint must be > 0, got %v", setpoint)
	}
	if !finite(maxRate) || maxRate <= 0 {
		return r, fmt.Errorf("tune: recommend: max rate must be > 0 bytes/s, got %v", maxRate)
	}
	G, b, r2, lineErr := FitGain(rates, latencies)
	if lineErr != nil && !errors.Is(lineErr, ErrNoGain) {
		return r, fmt.Errorf("tune: recommend: %w", lineErr)
	}
	r.Line = Line{G: G, Intercept: b, R2: r2}
	if q, err := FitQueue(rates, latencies); err == nil {
		r.Queue = &q
	}
	sp := setpoint.Seconds()
	sse := func(f func(float64) float64) float64 {
		var s float64
		for i := range rates {
			d := f(rates[i]) - latencies[i]
			s += d * d
		}
		return s
	}
	switch {
	case r.Queue != nil && (lineErr != nil || sse(r.Queue.Latency) <= sse(r.Line.Latency)):
		r.Model = "queue"
		r.IdleLatency = r.Queue.L0
		r.Gain = r.Queue.GainAt(sp)
		r.RateAtSetpoint = r.Queue.RateAt(sp)
	case lineErr == nil:
		r.Model = "line"
		r.IdleLatency = b
		r.Gain = G
		r.RateAtSetpoint = (sp - b) / G
	default:
		return r, fmt.Errorf("tune: recommend: %w", lineErr)
	}
	if sp <= r.IdleLatency {
		return r, fmt.Errorf("tune: recommend: setpoint %v vs idle latency %v: %w",
			setpoint, time.Duration(r.IdleLatency*float64(time.Second)).Round(time.Microsecond), ErrSetpointTooLow)
	}
	if r.RateAtSetpoint >= maxRate {
		r.RateAtSetpoint = maxRate
		r.Warnings = append(r.Warnings, "the model stays below the setpoint at max rate: the loop will sit at max rate")
	}
	maxLat := math.Inf(-1)
	for _, l := range latencies {
		maxLat = math.Max(maxLat, l)
	}
	if sp > 1.5*maxLat {
		r.Warnings = append(r.Warnings, fmt.Sprintf("the setpoint is %.1fx the highest profiled latency: the gain there is extrapolated; profile at rates closer to it", sp/maxLat))
	}
	var err error
	if r.K, err = ProposeK(r.Gain, pole); err != nil {
		return r, fmt.Errorf("tune: recommend: %w", err)
	}
	if r.PID, err = ProposePID(r.Gain, setpoint, maxRate, window, radius); err != nil {
		return r, fmt.Errorf("tune: recommend: %w", err)
	}
	return r, nil
}
