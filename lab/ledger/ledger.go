// Package ledger is a write workload that remembers every write the database
// acknowledged, and checks a database against that memory row by row: the
// "nothing lost" proof of migration tests and benchmarks.
//
// Each write inserts one row with a fresh id into sluice_ledger (no unique
// constraint, so a write applied twice would show as a duplicate). A write is
// acknowledged when its INSERT (autocommit) returned success; a write whose
// outcome is unknown (an error, e.g. the connection died during commit) is
// counted as uncertain and may or may not be present. Verify reports
// acknowledged ids that are missing and ids present more than once.
package ledger

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
)

// Router tells a transaction where to go and lets a handover wait for it
// (migration.GateRouter implements it).
type Router interface {
	Enter(ctx context.Context) (addr string, err error)
	Leave()
}

// Table is the ledger's table.
const Table = "sluice_ledger"

// Setup creates the ledger table (if missing) through conn string cs.
func Setup(ctx context.Context, cs string) error {
	c, err := pgx.Connect(ctx, cs)
	if err != nil {
		return fmt.Errorf("ledger: setup: %w", err)
	}
	defer c.Close(context.Background())
	if _, err := c.Exec(ctx, "CREATE TABLE IF NOT EXISTS "+Table+" (id bigint NOT NULL, at timestamptz NOT NULL DEFAULT now())"); err != nil {
		return fmt.Errorf("ledger: setup: %w", err)
	}
	return nil
}

// Workload writes to the ledger at Rate writes/s over Workers connections.
type Workload struct {
	Router     Router
	ConnString func(addr string) string // libpq URL for a host:port
	Rate       float64                  // writes/s, all workers together (default 500)
	Workers    int                      // connections (default 4)
	// SessionSQL, if set, runs on every new connection (e.g.
	// "SET synchronous_commit = off": acknowledged before flushed).
	SessionSQL string

	next      atomic.Int64
	mu        sync.Mutex
	acked     []int64
	ackedAt   []time.Time
	startedAt []time.Time     // per acknowledged write: when it started (before the router)
	took      []time.Duration // per acknowledged write: its latency, router wait included
	uncertain int
	errs      int
	lastErr   string
	maxLat    time.Duration
}

// Stats is a summary of the workload so far.
type Stats struct {
	Acknowledged int           // writes acknowledged
	Uncertain    int           // writes that failed with unknown outcome
	Errors       int           // failed attempts (incl. connection failures)
	LastError    string        // the last error seen
	MaxLatency   time.Duration // slowest acknowledged write, including waiting at the router
}

// Stats returns a summary so far.
func (w *Workload) Stats() Stats {
	w.mu.Lock()
	defer w.mu.Unlock()
	return Stats{Acknowledged: len(w.acked), Uncertain: w.uncertain, Errors: w.errs, LastError: w.lastErr, MaxLatency: w.maxLat}
}

// Longest returns the latency of the slowest acknowledged write that
// started in [from, to] (its wait at the router and at a proxy's hold
// included) and how many started then.
func (w *Workload) Longest(from, to time.Time) (time.Duration, int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	var longest time.Duration
	n := 0
	for i, at := range w.startedAt {
		if !at.Before(from) && !at.After(to) {
			longest = max(longest, w.took[i])
			n++
		}
	}
	return longest, n
}

// Run writes until ctx ends, then returns nil.
func (w *Workload) Run(ctx context.Context) error {
	rate, workers := w.Rate, w.Workers
	if rate <= 0 {
		rate = 500
	}
	if workers <= 0 {
		workers = 4
	}
	tick := make(chan struct{})
	go func() {
		defer close(tick)
		interval := time.Duration(float64(time.Second) / rate)
		next := time.Now()
		for {
			next = next.Add(interval)
			if d := time.Until(next); d > 0 {
				select {
				case <-ctx.Done():
					return
				case <-time.After(d):
				}
			} else if ctx.Err() != nil {
				return
			}
			select {
			case tick <- struct{}{}:
			case <-ctx.Done():
				return
			default: // all workers busy: drop the tick (the rate is a target)
			}
		}
	}()
	var wg sync.WaitGroup
	for i := 0; i < workers; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w.worker(ctx, tick)
		}()
	}
	wg.Wait()
	return nil
}

func (w *Workload) worker(ctx context.Context, tick <-chan struct{}) {
	var conn *pgx.Conn
	var connAddr string
	defer func() {
		if conn != nil {
			conn.Close(context.Background())
		}
	}()
	for range tick {
		start := time.Now()
		addr, err := w.Router.Enter(ctx)
		if err != nil {
			return
		}
		id := w.next.Add(1)
		err = func() error {
			defer w.Router.Leave()
			if conn != nil && (connAddr != addr || conn.IsClosed()) {
				conn.Close(context.Background())
				conn = nil
			}
			if conn == nil {
				cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
				defer cancel()
				c, err := pgx.Connect(cctx, w.ConnString(addr))
				if err != nil {
					return fmt.Errorf("connect: %w", err)
				}
				if w.SessionSQL != "" {
					if _, err := c.Exec(cctx, w.SessionSQL); err != nil {
						c.Close(context.Background())
						return fmt.Errorf("connect: %s: %w", w.SessionSQL, err)
					}
				}
				conn, connAddr = c, addr
			}
			_, err := conn.Exec(ctx, "INSERT INTO "+Table+" (id) VALUES ($1)", id)
			if err != nil {
				conn.Close(context.Background())
				conn = nil
				return err
			}
			return nil
		}()
		lat := time.Since(start)
		w.mu.Lock()
		if err == nil {
			w.acked = append(w.acked, id)
			w.ackedAt = append(w.ackedAt, time.Now())
			w.startedAt = append(w.startedAt, start)
			w.took = append(w.took, lat)
			w.maxLat = max(w.maxLat, lat)
		} else if ctx.Err() == nil {
			w.errs++
			w.lastErr = err.Error()
			if !isConnect(err) {
				w.uncertain++
			}
		}
		w.mu.Unlock()
	}
}

func isConnect(err error) bool {
	return err != nil && len(err.Error()) > 8 && err.Error()[:8] == "connect:"
}

// Report is the result of Verify.
type Report struct {
	Acknowledged int         `json:"writes_acknowledged"`
	Missing      int         `json:"writes_missing"`    // acknowledged, not present
	Duplicated   int         `json:"writes_duplicated"` // ids present more than once
	Present      int         `json:"rows_present"`      // distinct ids present
	MissingIDs   []int64     `json:"missing_ids,omitempty"`
	MissingAt    []time.Time `json:"missing_acknowledged_at,omitempty"` // when those were acknowledged
}

// Verify reads every ledger row through cs and compares with the acknowledged
// ids. Call it after Run returned.
func (w *Workload) Verify(ctx context.Context, cs string) (Report, error) {
	var rep Report
	c, err := pgx.Connect(ctx, cs)
	if err != nil {
		return rep, fmt.Errorf("ledger: verify: %w", err)
	}
	defer c.Close(context.Background())
	rows, err := c.Query(ctx, "SELECT id, count(*) FROM "+Table+" GROUP BY id")
	if err != nil {
		return rep, fmt.Errorf("ledger: verify: %w", err)
	}
	present := map[int64]int64{}
	for rows.Next() {
		var id, n int64
		if err := rows.Scan(&id, &n); err != nil {
			return rep, fmt.Errorf("ledger: verify: %w", err)
		}
		present[id] = n
		if n > 1 {
			rep.Duplicated++
		}
	}
	if err := rows.Err(); err != nil {
		return rep, fmt.Errorf("ledger: verify: %w", err)
	}
	rep.Present = len(present)
	w.mu.Lock()
	defer w.mu.Unlock()
	rep.Acknowledged = len(w.acked)
	for i, id := range w.acked {
		if present[id] == 0 {
			rep.Missing++
			if len(rep.MissingIDs) < 20 {
				rep.MissingIDs = append(rep.MissingIDs, id)
				rep.MissingAt = append(rep.MissingAt, w.ackedAt[i])
			}
		}
	}
	return rep, nil
}
