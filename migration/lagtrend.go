package migration

import (
	"fmt"
	"math"
	"time"

	"github.com/sluicedb/sluice/internal/units"
)

// Catch-up outlook: CATCH-UP's replay lag over the last LagTrendWindow,
// fitted by least squares, gives the phase an ETA and warns, long before
// Env.CatchUpTimeout rolls the migration back, when the lag will not drain
// in time: a rate below the WAL the clients write never catches up, and
// the lag stays flat for minutes with nothing else on the progress to say
// so (docs/results.md).
const (
	// LagTrendWindow is how far back the lag's slope is fitted.
	LagTrendWindow = 30 * time.Second
	// LagTrendMin is the least span of samples the ETA is judged on:
	// below it there is none (the lag moves in steps as segments arrive
	// and replay).
	LagTrendMin = 10 * time.Second
	// LagWarnMin is the least span of samples a warning is judged on: a
	// standby that has just started may replay for some seconds before its
	// lag falls.
	LagWarnMin = 20 * time.Second
)

// lagTrend holds the lag samples of the last LagTrendWindow. Samples of
// the two measures CATCH-UP reports — the WAL the standby has not received
// (before it is consistent) and its replay lag — are not mixed: a change of
// measure starts the trend again.
type lagTrend struct {
	at     []time.Time
	lag    []int64
	replay bool // the samples are replay lags
}

// add records lag (bytes; < 0 unknown, ignored) at at; replay says which
// measure it is.
func (t *lagTrend) add(at time.Time, lag int64, replay bool) {
	if lag < 0 {
		return
	}
	if replay != t.replay {
		t.at, t.lag, t.replay = t.at[:0], t.lag[:0], replay
	}
	t.at, t.lag = append(t.at, at), append(t.lag, lag)
	drop := 0
	for drop < len(t.at)-1 && at.Sub(t.at[drop]) > LagTrendWindow {
		drop++
	}
	t.at, t.lag = t.at[drop:], t.lag[drop:]
}

// slope is the lag's least-squares slope over the samples (bytes/s, < 0
// shrinking) and the time they span; 0, 0 with fewer than two.
func (t *lagTrend) slope() (perSec float64, span time.Duration) {
	n := len(t.at)
	if n < 2 {
		return 0, 0
	}
	var sx, sy float64
	for i := range t.at {
		sx += t.at[i].Sub(t.at[0]).Seconds()
		sy += float64(t.lag[i])
	}
	mx, my := sx/float64(n), sy/float64(n)
	var sxy, sxx float64
	for i := range t.at {
		dx := t.at[i].Sub(t.at[0]).Seconds() - mx
		sxy += dx * (float64(t.lag[i]) - my)
		sxx += dx * dx
	}
	span = t.at[n-1].Sub(t.at[0])
	if sxx == 0 {
		return 0, span
	}
	return sxy / sxx, span
}

// stallShare: a lag that the fitted pace shrinks by less than this share of
// it over LagTrendWindow is "not shrinking" (no ETA): the fit of a flat,
// noisy lag is a few hundred bytes per second either way.
const stallShare = 0.01

// catchUpOutlook is what the trend says at a lag of lag bytes with
// CATCH-UP ending at maxLag and left until its timeout: the time to drain
// to maxLag at the fitted pace (0 unknown: a trend shorter than
// LagTrendMin, or the lag is not shrinking) and, when the trend spans
// LagWarnMin and that time is longer than left (or never comes), a
// one-line warning.
func catchUpOutlook(t *lagTrend, lag, maxLag int64, left time.Duration) (eta time.Duration, warning string) {
	perSec, span := t.slope()
	if span < LagTrendMin || lag < 0 || lag <= maxLag {
		return 0, ""
	}
	left = max(left, 0).Round(time.Second)
	warn := span >= LagWarnMin
	stall := stallShare * float64(lag) / LagTrendWindow.Seconds() // bytes/s the lag must shrink by at least
	if -perSec < stall {
		if !warn {
			return 0, ""
		}
		verb := "not shrinking"
		if perSec >= stall {
			verb = "growing"
		}
		return 0, fmt.Sprintf("catch-up is not converging: replay lag %s, %s (%s over the last %s); it rolls back in %s unless the rate rises or the load falls",
			units.FormatBytes(float64(lag)), verb, signedRate(perSec), span.Round(time.Second), left)
	}
	secs := float64(lag-maxLag) / -perSec
	eta = time.Duration(math.Min(secs, 1e7) * float64(time.Second))
	if eta > left && warn {
		warning = fmt.Sprintf("catch-up too slow: replay lag %s shrinking %s needs %s more, but it rolls back in %s unless the rate rises or the load falls",
			units.FormatBytes(float64(lag)), units.FormatRate(-perSec), eta.Round(time.Second), left)
	}
	return eta, warning
}

// signedRate is bytes/s with its sign, "+2.0 MB/s".
func signedRate(perSec float64) string {
	if perSec >= 0 {
		return "+" + units.FormatRate(perSec)
	}
	return units.FormatRate(perSec)
}

// ParseCatchUpTimeout reads a catch-up timeout as the CLI and the agent's
// API take it: "" is 0 (the driver's default, Env.CatchUpTimeout), else a
// duration of at least a second (Record.CatchUpTimeout). The error quotes
// s; the caller names the setting.
func ParseCatchUpTimeout(s string) (time.Duration, error) {
	if s == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < time.Second {
		return 0, fmt.Errorf("%q: want a duration of at least 1s, such as 30m", s)
	}
	return d, nil
}
