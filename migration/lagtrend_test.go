package migration

import (
	"context"
	"math"
	"strings"
	"testing"
	"time"
)

var trendT0 = time.Date(2026, 11, 26, 21, 0, 0, 0, time.UTC)

// feed adds a sample every 100 ms (CatchUpPoll) from second from to second
// to of lag(s), s seconds since trendT0.
func feed(tr *lagTrend, from, to float64, replay bool, lag func(s float64) float64) {
	for s := from; s <= to+1e-9; s += 0.1 {
		tr.add(trendT0.Add(time.Duration(s*float64(time.Second))), int64(lag(s)), replay)
	}
}

// TestCatchUpOutlook: the ETA is the fitted drain time to the end of
// CATCH-UP; a lag that does not shrink, or shrinks too slowly to end before
// the timeout, warns; too short a trend says nothing.
func TestCatchUpOutlook(t *testing.T) {
	const maxLag = 1 << 20
	// Draining 1 GB at 10 MB/s net, with the lag stepping as segments land.
	draining := func(s float64) float64 { return 1e9 - 10e6*s + float64(int(s*10)%3)*2e6 }
	var tr lagTrend
	feed(&tr, 0, 5, true, draining)
	if eta, w := catchUpOutlook(&tr, 950e6, maxLag, 10*time.Minute); eta != 0 || w != "" {
		t.Errorf("after 5 s: eta %v, warning %q; want nothing (trend shorter than %v)", eta, w, LagTrendMin)
	}
	feed(&tr, 5.1, 20, true, draining)
	lag := int64(800e6)
	eta, w := catchUpOutlook(&tr, lag, maxLag, 10*time.Minute)
	if want := float64(lag-maxLag) / 10e6; math.Abs(eta.Seconds()-want) > 0.05*want || w != "" {
		t.Errorf("draining at 10 MB/s: eta %v (want ~%.0f s), warning %q (want none)", eta, want, w)
	}
	// The same pace with 60 s left before the timeout: too slow.
	if eta, w := catchUpOutlook(&tr, lag, maxLag, time.Minute); eta == 0 || !strings.Contains(w, "too slow") || !strings.Contains(w, "rolls back in 1m0s") {
		t.Errorf("60 s left: eta %v, warning %q; want the ETA and a too-slow warning", eta, w)
	}
	// Done: nothing to drain.
	if eta, w := catchUpOutlook(&tr, maxLag, maxLag, time.Minute); eta != 0 || w != "" {
		t.Errorf("at the end: eta %v, warning %q", eta, w)
	}

	// Flat at 2.85 GB (a fixed rate no faster than the WAL): no ETA, a warning.
	var flat lagTrend
	feed(&flat, 0, 40, true, func(s float64) float64 { return 2.85e9 + float64(int(s*10)%7)*1e6 })
	eta, w = catchUpOutlook(&flat, 2.85e9, maxLag, 8*time.Minute)
	if eta != 0 || !strings.Contains(w, "not converging") || !strings.Contains(w, "2.85 GB") || !strings.Contains(w, "rolls back in 8m0s") {
		t.Errorf("flat lag: eta %v, warning %q; want no ETA and a not-converging warning", eta, w)
	}
	// Flat for 15 s only: a standby still starting; no warning yet.
	var starting lagTrend
	feed(&starting, 0, 15, true, func(float64) float64 { return 2.85e9 })
	if eta, w := catchUpOutlook(&starting, 2.85e9, maxLag, 8*time.Minute); eta != 0 || w != "" {
		t.Errorf("flat for 15 s: eta %v, warning %q; want neither before %v", eta, w, LagWarnMin)
	}
	// Growing: says so.
	var growing lagTrend
	feed(&growing, 0, 20, true, func(s float64) float64 { return 1e9 + 2e6*s })
	if _, w := catchUpOutlook(&growing, 1.04e9, maxLag, 8*time.Minute); !strings.Contains(w, "growing (+2.0 MB/s") {
		t.Errorf("growing lag: warning %q; want it growing at +2.0 MB/s", w)
	}
	// The window forgets: 60 s of growth, then 20 s draining fast — the
	// fit over the last LagTrendWindow sees the lag shrinking.
	var turned lagTrend
	feed(&turned, 0, 60, true, func(s float64) float64 { return 1e9 + 2e6*s })
	feed(&turned, 60.1, 80, true, func(s float64) float64 { return 1.12e9 - 40e6*(s-60) })
	if eta, w := catchUpOutlook(&turned, 320e6, maxLag, 8*time.Minute); eta == 0 || w != "" {
		t.Errorf("after the turn: eta %v, warning %q; want an ETA and no warning", eta, w)
	}
	// A change of measure (not-yet-received WAL → replay lag) starts again.
	var switched lagTrend
	feed(&switched, 0, 30, false, func(s float64) float64 { return 5e9 })
	feed(&switched, 30.1, 35, true, func(s float64) float64 { return 6e9 })
	if _, span := switched.slope(); span > 5*time.Second {
		t.Errorf("after the measure changed the trend spans %v, want at most the 5 s since", span)
	}
	// Unknown lags are not samples.
	var none lagTrend
	feed(&none, 0, 20, true, func(float64) float64 { return -1 })
	if _, span := none.slope(); span != 0 {
		t.Errorf("unknown lags made a trend spanning %v", span)
	}
}

// stuckSource is a Source whose WAL flush position is fixed; stuckTarget a
// Target whose standby replays to replay.
type stuckSource struct {
	fakeSource
	flush LSN
}

func (s *stuckSource) FlushLSN(context.Context) (LSN, error) { return s.flush, nil }

type stuckTarget struct {
	fakeTarget
	replay LSN
}

func (t *stuckTarget) Position(context.Context, Record) (Position, error) {
	return Position{Receive: t.replay, Replay: t.replay, InRecovery: true}, nil
}

var (
	_ Source = (*stuckSource)(nil)
	_ Target = (*stuckTarget)(nil)
)

// stuckCatchUp is a runner in CATCH-UP on a fake clock over a source whose
// WAL is 3 GiB ahead of its standby's replay, neither moving until the test
// moves them; poll runs WaitCatchUp every CatchUpPoll for secs seconds and
// returns the last event, last the last progress report.
type stuckCatchUp struct {
	r    *runner
	now  time.Time
	src  *stuckSource
	tgt  *stuckTarget
	last Progress
	rec  Record
}

func newStuckCatchUp(timeout time.Duration) *stuckCatchUp {
	c := &stuckCatchUp{now: trendT0, src: &stuckSource{flush: 3 << 30}, tgt: &stuckTarget{replay: 1 << 20},
		rec: Record{ID: "m1", Phase: PhaseCatchUp, CatchUpBytes: DefaultCatchUpBytes, CatchUpTimeout: timeout}}
	c.r = &runner{env: Env{Source: c.src, Target: c.tgt, Now: func() time.Time { return c.now },
		Progress: func(p Progress) { c.last = p }}}
	c.r.env.defaults()
	return c
}

func (c *stuckCatchUp) poll(secs float64, each func()) Event {
	var ev Event
	for end := c.now.Add(time.Duration(secs * float64(time.Second))); c.now.Before(end); c.now = c.now.Add(CatchUpPoll) {
		if each != nil {
			each()
		}
		ev = c.r.execute(context.Background(), c.rec, WaitCatchUp{MaxLag: c.rec.CatchUpBytes})
	}
	return ev
}

// TestCatchUpWarnsEarly drives WaitCatchUp on a fake clock with a replay
// lag that does not shrink: the progress warns once the trend spans
// LagWarnMin, long before the CatchUpTimeout would roll the migration back,
// and clears (with an ETA) once the lag drains.
func TestCatchUpWarnsEarly(t *testing.T) {
	c := newStuckCatchUp(0)
	c.poll(15, nil)
	if c.last.Warning != "" || c.last.ETA != 0 {
		t.Errorf("after 15 s: warning %q, ETA %v; want neither yet", c.last.Warning, c.last.ETA)
	}
	if ev, ok := c.poll(10, nil).(LagReport); !ok || ev.Bytes != int64(c.src.flush-c.tgt.replay) {
		t.Fatalf("after 25 s: event %v, want a lag report", ev)
	}
	if !strings.Contains(c.last.Warning, "not converging") || c.last.ETA != 0 {
		t.Errorf("a flat lag after 25 s: warning %q, ETA %v; want a not-converging warning", c.last.Warning, c.last.ETA)
	}
	// The standby replays 100 MB/s from here: within a window the warning
	// goes and the ETA comes.
	c.poll(30, func() { c.tgt.replay += 10 << 20 })
	if c.last.Warning != "" || c.last.ETA <= 0 {
		t.Errorf("draining at 100 MB/s: warning %q, ETA %v; want an ETA and no warning", c.last.Warning, c.last.ETA)
	}
}

// TestCatchUpTimeoutFromRecord: a record's own catch-up timeout overrides
// the Env's, in the warning's count-down and in the failure.
func TestCatchUpTimeoutFromRecord(t *testing.T) {
	c := newStuckCatchUp(35 * time.Second)
	if ev, ok := c.poll(25, nil).(LagReport); !ok || !strings.Contains(c.last.Warning, "rolls back in 10s") {
		t.Fatalf("at 25 s of a 35 s timeout: event %v, warning %q; want a lag report and 10 s left", ev, c.last.Warning)
	}
	ev := c.poll(11, nil)
	if f, ok := ev.(Failed); !ok || !strings.Contains(f.Err, "after 35s (the catch-up timeout)") {
		t.Errorf("past the record's 35 s timeout: event %v, want it failed", ev)
	}
}
