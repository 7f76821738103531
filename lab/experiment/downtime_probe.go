package experiment

import (
	"context"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/sluicedb/sluice/internal/clock"
	"github.com/sluicedb/sluice/lab/workload"
)

// dtSample is one probe: when it was issued, how long it took, and whether it
// failed.
type dtSample struct {
	At      time.Time
	Latency time.Duration
	Err     bool
}

// dtStallFigures is what the probe saw in one window.
type dtStallFigures struct {
	MaxMs  float64 // longest probe issued in the window
	GapMs  float64 // longest time between successful completions (window edges count)
	Errors int
	Probes int
}

// dtStall measures the client-visible stall in [from, until] from samples
// sorted by issue time. A probe counts if it was issued in the window. The gap
// is the longest interval between consecutive successful completions, with
// the window's edges as the first and last "completions" (a probe still
// running past until stretches the last gap to its completion).
func dtStall(samples []dtSample, from, until time.Time) dtStallFigures {
	var f dtStallFigures
	last := from
	for _, s := range samples {
		if s.At.Before(from) {
			// A probe issued before the window that completes inside it ends a gap.
			if end := s.At.Add(s.Latency); !s.Err && end.After(last) && !end.After(until) {
				f.GapMs = max(f.GapMs, dtMs(end.Sub(last)))
				last = end
			}
			continue
		}
		if s.At.After(until) {
			break
		}
		f.Probes++
		f.MaxMs = max(f.MaxMs, dtMs(s.Latency))
		if s.Err {
			f.Errors++
			continue
		}
		end := s.At.Add(s.Latency)
		if end.After(last) {
			f.GapMs = max(f.GapMs, dtMs(end.Sub(last)))
			last = end
		}
	}
	if until.After(last) {
		f.GapMs = max(f.GapMs, dtMs(until.Sub(last)))
	}
	return f
}

// dtWorkloadAround returns the workload seconds [lo, hi) that overlap
// [from, until) (offsets since its start) and the transactions that failed
// in them.
func dtWorkloadAround(secs []workload.Second, from, until time.Duration) (lo, hi, errs int) {
	lo, hi = int(max(from, 0)/time.Second), int((until+time.Second-1)/time.Second)
	for _, s := range secs {
		if s.T >= lo && s.T < hi {
			errs += s.Errors
		}
	}
	return lo, hi, errs
}

// dtMeanLatency is the transaction-weighted mean latency of the workload
// seconds [from, to); NaN if none completed.
func dtMeanLatency(secs []workload.Second, from, to int) float64 {
	var sum float64
	var n int
	for _, s := range secs {
		if s.T >= from && s.T < to {
			sum += s.MeanMs * float64(s.Count)
			n += s.Count
		}
	}
	if n == 0 {
		return math.NaN()
	}
	return sum / float64(n)
}

// dtRecovery finds the first whole workload second starting at or after
// release (an offset since the workload started) that completed
// transactions, ended with no arrival queued, and had a mean latency ≤
// limitMs; it returns the time from release to that second's end, seconds.
func dtRecovery(secs []workload.Second, release time.Duration, limitMs float64) (float64, bool) {
	for _, s := range secs {
		lo := time.Duration(s.T) * time.Second
		if lo < release {
			continue
		}
		if s.Count > 0 && s.QueueLen == 0 && s.MeanMs <= limitMs {
			return (lo + time.Second - release).Seconds(), true
		}
	}
	return 0, false
}

func dtMs(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// dtProbe issues `SELECT 1` (simple protocol, one connection) every `every`
// and records each one. A failed probe is recorded and the connection
// reopened before the next.
type dtProbe struct {
	dsn   string
	every time.Duration
	conn  *pgx.Conn

	mu      sync.Mutex
	samples []dtSample
}

func (p *dtProbe) connect(ctx context.Context) error {
	c, err := pgx.Connect(ctx, p.dsn)
	if err != nil {
		return err
	}
	p.conn = c
	return nil
}

// run probes until ctx ends. It owns p.conn.
func (p *dtProbe) run(ctx context.Context) error {
	defer func() {
		if p.conn != nil {
			p.conn.Close(context.Background())
		}
	}()
	next := time.Now()
	for ctx.Err() == nil {
		if p.conn == nil || p.conn.IsClosed() {
			if err := p.connect(ctx); err != nil {
				if ctx.Err() != nil {
					return nil
				}
				p.add(dtSample{At: time.Now(), Err: true})
				clock.Sleep(ctx, 20*time.Millisecond)
				continue
			}
		}
		at := time.Now()
		_, err := p.conn.Exec(ctx, "SELECT 1", pgx.QueryExecModeSimpleProtocol)
		lat := time.Since(at)
		if err != nil && ctx.Err() != nil {
			return nil // stopped mid-probe: not a client-visible failure
		}
		p.add(dtSample{At: at, Latency: lat, Err: err != nil})
		if err != nil {
			p.conn.Close(context.Background())
			p.conn = nil
		}
		// Keep to the grid; after a long probe, start again from now.
		next = next.Add(p.every)
		if now := time.Now(); next.Before(now) {
			next = now
		}
		clock.Sleep(ctx, time.Until(next))
	}
	return nil
}

func (p *dtProbe) add(s dtSample) {
	p.mu.Lock()
	p.samples = append(p.samples, s)
	p.mu.Unlock()
}

func (p *dtProbe) snapshot() []dtSample {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.samples)
}
