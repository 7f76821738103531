package experiment

import (
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/sluicedb/sluice/lab/workload"
)

// Schedule is the workload's arrival rate during a trial's migration, as a
// multiple of the trial's rate: a pure function (Factor) of the time since
// the migration started. It is piecewise constant: each Level holds from
// its At to the next one's; with Period > 0 the levels repeat every Period.
// Before the first level, and outside the migration (warm-up, cooldown),
// the factor is 1. The zero Schedule is the steady load. Laid on the
// migration's clock, it has two trials of about one length meet the same
// load in the same order.
type Schedule struct {
	Levels []Level       // in order of At
	Period time.Duration // 0 = the last level holds to the migration's end
}

// Level is one stretch of a Schedule.
type Level struct {
	At     time.Duration // since the migration's start (within a Period), >= 0
	Factor float64       // × the trial's arrival rate, > 0
}

// Step is the load that steps to factor × the trial's rate at after the
// migration's start (Slacker's +40 %: Step(time.Minute, 1.4)).
func Step(at time.Duration, factor float64) Schedule {
	return Schedule{Levels: []Level{{At: at, Factor: factor}}}
}

// Swing is a square wave around the trial's rate: from the migration's
// start, half a period at (1 + amplitude) ×, then half a period at
// (1 − amplitude) ×, and again; over whole periods its mean is the trial's
// rate. It is the load that moves under a migration, the case a fixed
// throttle cannot follow.
func Swing(period time.Duration, amplitude float64) Schedule {
	return Schedule{Levels: []Level{{At: 0, Factor: 1 + amplitude}, {At: period - period/2, Factor: 1 - amplitude}}, Period: period}
}

// Steady reports whether s never changes the rate.
func (s Schedule) Steady() bool { return len(s.Levels) == 0 }

// Valid says why s cannot be run, or nil.
func (s Schedule) Valid() error {
	for i, l := range s.Levels {
		switch {
		case !(l.Factor > 0) || math.IsInf(l.Factor, 0):
			return fmt.Errorf("experiment: load schedule: level %d's factor %v: want a positive multiple of the rate", i+1, l.Factor)
		case l.At < 0 || (i > 0 && l.At <= s.Levels[i-1].At):
			return fmt.Errorf("experiment: load schedule: level %d at %v: want levels in order, from 0 on", i+1, l.At)
		case s.Period > 0 && l.At >= s.Period:
			return fmt.Errorf("experiment: load schedule: level %d at %v: want it within the period %v", i+1, l.At, s.Period)
		}
	}
	if s.Period < 0 {
		return fmt.Errorf("experiment: load schedule: period %v: want 0 (none) or positive", s.Period)
	}
	return nil
}

// Factor is the multiple of the trial's rate s sets elapsed after the
// migration's start (elapsed < 0: 1, the migration has not started).
func (s Schedule) Factor(elapsed time.Duration) float64 {
	if elapsed < 0 {
		return 1
	}
	if s.Period > 0 {
		elapsed %= s.Period
	}
	f := 1.0
	for _, l := range s.Levels {
		if l.At > elapsed {
			break
		}
		f = l.Factor
	}
	return f
}

// Describe says s in a phrase for a report, at the trial's rate (arrivals
// per second), such as "140 transactions/s from 0 s, then 60 from 30 s
// after the migration's start, again every 60 s".
func (s Schedule) Describe(rate float64) string {
	if s.Steady() {
		return fmt.Sprintf("a steady %.0f transactions/s", rate)
	}
	unit := " transactions/s" // on the first figure only
	var parts []string
	if s.Levels[0].At > 0 {
		parts, unit = append(parts, fmt.Sprintf("%.0f%s", rate, unit)), ""
	}
	for _, l := range s.Levels {
		parts, unit = append(parts, fmt.Sprintf("%.0f%s from %.0f s", l.Factor*rate, unit, l.At.Seconds())), ""
	}
	d := strings.Join(parts, ", then ") + " after the migration's start"
	if s.Period > 0 {
		d += fmt.Sprintf(", again every %.0f s", s.Period.Seconds())
	}
	return d
}

// loadTick is how often a running schedule looks at its clock: its changes
// are this late at most.
const loadTick = 50 * time.Millisecond

// applyLoad runs schedule s on run's arrival rate from at (the
// migration's start), at s's factors of rate, until the returned stop is
// called, which sets rate back and returns the workload-clock time
// (clock()) of the schedule's first change, -1 if it made none. Each
// change is said.
func applyLoad(s Schedule, run *workload.Runner, rate float64, at time.Time, clock func() float64, say func(string, ...any)) (stop func() (first float64)) {
	if s.Steady() {
		return func() float64 { return -1 }
	}
	first := -1.0
	done, exited := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(exited)
		t := time.NewTicker(loadTick)
		defer t.Stop()
		last := 1.0
		for {
			if f := s.Factor(time.Since(at)); f != last {
				run.SetRate(f * rate)
				if first < 0 {
					first = clock()
				}
				say("  %5.0fs arrival rate ×%.2f: %.0f transactions/s", clock(), f, f*rate)
				last = f
			}
			select {
			case <-done:
				return
			case <-t.C:
			}
		}
	}()
	return func() float64 {
		close(done)
		<-exited
		run.SetRate(rate)
		return first
	}
}
