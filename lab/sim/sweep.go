package sim

import (
	"fmt"
	"time"

	"github.com/sluicedb/sluice/control"
)

// DefaultSweepSteps is the ladder's resolution: fixed rates at every 1/48 of
// the plant's max rate (0.25 MB/s on the default plant).
const DefaultSweepSteps = 48

// SweepRung is one fixed rate of a sweep.
type SweepRung struct {
	Rate        float64 // bytes/s
	Seconds     float64 // migration time
	MeanLatency time.Duration
	Completed   bool
	Meets       bool // completed with mean latency <= setpoint
}

// SweepResult compares the best fixed rate with the PID on one scenario.
type SweepResult struct {
	Scenario string
	Seed     uint64
	Setpoint time.Duration
	// Rungs are the fixed rates run, fastest first: the sweep goes down the
	// ladder and stops at the first rate that meets the setpoint, which is
	// therefore the fastest that does.
	Rungs                []SweepRung
	BestFixedRate        float64 // bytes/s; 0 if no rung met the setpoint
	BestFixedSeconds     float64
	BestFixedMeanLatency time.Duration
	PID                  Result
}

// Sweep runs a ladder of fixed rates (steps equal steps up to the plant's
// max, fastest first, until one meets the setpoint) and the PID of profile
// prof (the zero value: control.DefaultProfile()) on scenario s. steps 0
// means DefaultSweepSteps.
func Sweep(s Scenario, opt Options, steps int, prof control.Profile) (SweepResult, error) {
	if steps == 0 {
		steps = DefaultSweepSteps
	}
	if steps < 1 {
		return SweepResult{}, fmt.Errorf("sim: sweep: steps must be >= 1, got %d", steps)
	}
	o, err := opt.resolve(s)
	if err != nil {
		return SweepResult{}, err
	}
	sr := SweepResult{Scenario: s.Name, Seed: o.Seed, Setpoint: o.Setpoint}
	for i := steps; i >= 1; i-- {
		rate := s.Plant.MaxRate * float64(i) / float64(steps)
		c, err := NewController(s, ControllerConfig{Kind: "fixed", Rate: rate}, o)
		if err != nil {
			return sr, err
		}
		r, err := Run(s, c, o)
		if err != nil {
			return sr, err
		}
		rung := SweepRung{Rate: rate, Seconds: r.MigrationSeconds, MeanLatency: r.MeanLatency, Completed: r.Completed}
		rung.Meets = r.Completed && r.MeanLatency <= o.Setpoint
		sr.Rungs = append(sr.Rungs, rung)
		if rung.Meets {
			sr.BestFixedRate, sr.BestFixedSeconds, sr.BestFixedMeanLatency = rate, r.MigrationSeconds, r.MeanLatency
			break
		}
	}
	c, err := NewController(s, ControllerConfig{Kind: "pid", Setpoint: o.Setpoint, Profile: prof}, o)
	if err != nil {
		return sr, err
	}
	if sr.PID, err = Run(s, c, o); err != nil {
		return sr, err
	}
	return sr, nil
}

// SweepSummary is the JSON form of a sweep (`sluice sim sweep --json`).
type SweepSummary struct {
	BestFixedRate          float64 `json:"best_fixed_rate"`
	BestFixedSeconds       float64 `json:"best_fixed_seconds"`
	BestFixedMeanLatencyMS float64 `json:"best_fixed_mean_latency_ms"`
	PIDSeconds             float64 `json:"pid_seconds"`
	PIDMeanLatencyMS       float64 `json:"pid_mean_latency_ms"`
}

// Summary returns the sweep's JSON figures.
func (s SweepResult) Summary() SweepSummary {
	return SweepSummary{
		BestFixedRate:          s.BestFixedRate,
		BestFixedSeconds:       s.BestFixedSeconds,
		BestFixedMeanLatencyMS: msOf(s.BestFixedMeanLatency),
		PIDSeconds:             s.PID.MigrationSeconds,
		PIDMeanLatencyMS:       msOf(s.PID.MeanLatency),
	}
}
