package experiment

import (
	"fmt"
	"time"

	"github.com/sluicedb/sluice/monitor"
)

// StealSpan is the stretch over which a trial's host steal peak is taken
// (TrialResult.HostStealPeak): five of the progress lines' 2 s readings,
// long enough that one slow reading is not a burst, short enough that a
// burst of half a minute is not averaged away.
const StealSpan = 10 * time.Second

// DefaultStealRetries is StealGuard.StealRetries' default.
const DefaultStealRetries = 2

// StealGuard is how an experiment treats the host's CPU steal: on a shared
// machine a burst of stolen CPU slows the whole plant, workload included,
// whatever the rate, and a trial that met one measures the host.
type StealGuard struct {
	// StealLimit, when > 0, re-runs a trial in which the host's steal over
	// some StealSpan went above it (TrialResult.HostStealPeak; a share,
	// 0–1), up to StealRetries times. Every attempt is reported; a trial
	// still disturbed after its retries is kept, marked disturbed. 0 = off.
	StealLimit float64
	// StealRetries is how many times a disturbed trial is re-run (with
	// StealLimit); 0 = DefaultStealRetries.
	StealRetries int
	// StealAbort, with StealLimit, aborts a trial's migration as soon as
	// its steal goes above the limit (Trial.AbortAboveSteal) when the
	// trial has a re-run left, instead of letting it crawl to its end:
	// the attempt is reported with its figures up to the abort, marked
	// aborted, and the tenant, still on its source, migrates again.
	StealAbort bool

	stealPeak func([]monitor.HostCPUSample, time.Duration) float64 // Trial.stealPeak, for a test
}

// check validates g and sets StealRetries' default.
func (g *StealGuard) check() error {
	if g.StealRetries == 0 {
		g.StealRetries = DefaultStealRetries
	}
	switch {
	case !(g.StealLimit >= 0 && g.StealLimit < 1):
		return fmt.Errorf("experiment: steal limit %v must be a share in [0, 1)", g.StealLimit)
	case g.StealRetries < 0:
		return fmt.Errorf("experiment: steal retries %d must be >= 0", g.StealRetries)
	case g.StealAbort && g.StealLimit == 0:
		return fmt.Errorf("experiment: a steal abort needs a steal limit")
	}
	return nil
}

// disturbed reports whether trial r met more host steal than g allows.
func (g *StealGuard) disturbed(r *TrialResult) bool {
	return g.StealLimit > 0 && r.HostStealPeak > g.StealLimit
}

// again reports whether attempt (1, 2, ...) whose trial was r is to be run
// again: it was aborted or disturbed, and a re-run is left.
func (g *StealGuard) again(r *TrialResult, attempt int) bool {
	return (r.Aborted || g.disturbed(r)) && attempt <= g.StealRetries
}

// rerunNote is the progress line of trial name's attempt (r) that runs
// again.
func (g *StealGuard) rerunNote(name string, r *TrialResult, attempt int) string {
	return fmt.Sprintf("%s: host steal peaked at %.0f %% over %.0f s (limit %.0f %%): disturbed, running it again (%d of %d)",
		name, 100*r.HostStealPeak, StealSpan.Seconds(), 100*g.StealLimit, attempt, g.StealRetries)
}

// abortAt is the steal share at which attempt's migration is aborted
// (Trial.AbortAboveSteal): the limit while a re-run is left, 0 otherwise.
func (g *StealGuard) abortAt(attempt int) float64 {
	if g.StealAbort && attempt <= g.StealRetries {
		return g.StealLimit
	}
	return 0
}
