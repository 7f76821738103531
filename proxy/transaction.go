package proxy

import (
	"context"
	"time"

	"github.com/sluicedb/sluice/proxy/timing"
)

// Transaction boundaries. A transaction starts at the first client message
// after a boundary (beginTx, or tryBeginTx on the relay's fast path): it
// waits there while the tenant is held, moves the session if the route
// changed, and is counted in the tenant's in-flight transactions. It ends at
// a ReadyForQuery 'I' answering the last Query/Sync/FunctionCall sent
// (readyForQuery), where its latency, including the time it was held, goes
// into the (tenant, server) window.

// inFlight reports whether a transaction of s is in flight, counted in its
// tenant's (a hold waits for it to end).
func (s *session) inFlight() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.mu.inTx
}

// txState reports whether a transaction of s is in flight and, if so,
// whether it waits for its client inside a transaction block: its last
// request was a Query, Sync or FunctionCall and its ReadyForQuery ('T' or
// 'E') has come back. Otherwise a statement may be running on the server.
func (s *session) txState() (open, waiting bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.mu.inTx, s.mu.inTx && s.mu.outstanding == 0 && s.mu.lastSync
}

// beginTx starts a transaction at a boundary: it waits while the tenant is
// held, moves the session if the route changed, and counts it in flight.
func (s *session) beginTx(ctx context.Context) error {
	start := time.Now()
	r, gen, err := s.tenant.enter(ctx)
	if err != nil {
		return err
	}
	if gen != s.srvGen.Load() || s.srvLost.Load() {
		if err := s.move(ctx, r, gen); err != nil {
			s.tenant.leave()
			return protoErrf(codeConnectionFailure, "sluice proxy: handover to %s failed: %v", r.Addr, err)
		}
	}
	queued := time.Since(start)
	s.mu.Lock()
	s.mu.inTx = true
	s.mu.lastSync = false // no request of this transaction yet
	s.mu.txStart = start
	s.mu.txQueued = queued
	s.mu.Unlock()
	return nil
}

// tryBeginTx is beginTx when it need not wait: the tenant is not held and
// the session's server is current. It reports false (and changes nothing)
// otherwise; the caller then uses beginTx.
func (s *session) tryBeginTx(now time.Time) bool {
	gen, ok := s.tenant.tryEnter()
	if !ok {
		return false
	}
	if gen != s.srvGen.Load() || s.srvLost.Load() {
		s.tenant.leave()
		return false
	}
	s.mu.Lock()
	s.mu.inTx = true
	s.mu.lastSync = false
	s.mu.txStart = now
	s.mu.txQueued = 0
	s.mu.Unlock()
	return true
}

// sending accounts a client message of type typ that is about to go to the
// server, and returns that server: a Query, Sync or FunctionCall is answered
// by a ReadyForQuery, which readyForQuery then expects.
func (s *session) sending(typ byte) *serverConn {
	s.mu.Lock()
	defer s.mu.Unlock()
	sync := typ == 'Q' || typ == 'S' || typ == 'F'
	if sync {
		s.mu.outstanding++
	}
	s.mu.lastSync = sync
	return s.mu.srv
}

// readyForQuery accounts a ReadyForQuery with status st: the end of a
// transaction when nothing else is outstanding and the session is idle.
func (s *session) readyForQuery(st byte) {
	var win *timing.Window
	var d, queued time.Duration
	var now time.Time
	ended := false
	s.mu.Lock()
	if s.mu.outstanding > 0 {
		s.mu.outstanding--
	}
	if s.mu.outstanding == 0 && st == 'I' && s.mu.lastSync && s.mu.inTx {
		now = time.Now()
		s.mu.inTx = false
		d = now.Sub(s.mu.txStart)
		queued = s.mu.txQueued
		win = s.mu.win
		ended = true
	}
	s.mu.Unlock()
	if ended {
		win.RecordQueuedAt(now, d, queued)
		s.tenant.leave()
	}
}
