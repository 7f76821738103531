package control

import (
	"fmt"
	"math"
)

// Fixed is the baseline controller: it always answers the same rate, whatever
// it observes. Every experiment compares the feedback controllers against it.
//
// Law:
//
//	Rate(k) = Prefetch(k) = rate
type Fixed struct {
	rate float64
}

var _ Controller = (*Fixed)(nil)

// NewFixed returns a Fixed controller at rate bytes/s. rate must be finite and
// >= 0 (0 keeps the migration paused).
func NewFixed(rate float64) (*Fixed, error) {
	if math.IsNaN(rate) || math.IsInf(rate, 0) || rate < 0 {
		return nil, fmt.Errorf("control: NewFixed(rate=%v): rate must be a finite number of bytes/s >= 0", rate)
	}
	return &Fixed{rate: rate}, nil
}

// Name implements Controller.
func (f *Fixed) Name() string { return "fixed" }

// Initial implements Controller: the fixed rate.
func (f *Fixed) Initial() float64 { return f.rate }

// Next implements Controller. It ignores obs.
func (f *Fixed) Next(Observation) Decision {
	return Decision{Rate: f.rate, Prefetch: f.rate, Reason: "fixed"}
}
