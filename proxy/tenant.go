package proxy

import (
	"context"
	"sync"
	"time"

	"github.com/sluicedb/sluice/proxy/client"
)

// tenant is one routing entry: where a tenant lives, whether a handover
// holds it, and how many of its sessions are inside a transaction.
//
// A session is "in flight" from the first message it forwards after a
// boundary (ReadyForQuery 'I' with nothing outstanding) to the next boundary.
// enter and leave bracket that interval; a hold waits for inflight to reach 0
// and makes enter block until release.
type tenant struct {
	name string
	mu   struct {
		sync.Mutex
		route     RouteConfig
		gen       uint64        // bumped on every change of Addr or Database
		held      bool          // a hold is in force
		apiRoute  bool          // route was set through the API during the hold: catalog polling may not change it
		releaseCh chan struct{} // closed at release; waiting sessions block on it
		inflight  int
		idleCh    chan struct{} // closed when inflight drops to 0 (hold waits on it)
		sessions  map[*session]struct{}
		routers   map[*ksBackends]struct{} // keyspace sessions with server sessions here
		holdGen   uint64                   // gen when the hold in force began
		released  time.Time                // when the last hold was lifted (zero: never)

		// After a release that moved the tenant, at most rampLimit
		// transactions are in flight until rampUntil (Config.ReleaseLimit).
		rampLimit int
		rampUntil time.Time
		slotCh    chan struct{} // closed when a transaction leaves during the ramp
	}
}

func newTenant(r RouteConfig) *tenant {
	t := &tenant{name: r.Tenant}
	t.mu.route = r
	t.mu.gen = 1
	t.mu.sessions = map[*session]struct{}{}
	t.mu.routers = map[*ksBackends]struct{}{}
	return t
}

// routeNow returns the current route and its generation.
func (t *tenant) routeNow() (RouteConfig, uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.mu.route, t.mu.gen
}

// setRoute changes the server; fromAPI marks changes made through the API.
// Returns whether the route changed. While held, catalog changes (fromAPI
// false) are ignored once the API has set the route.
func (t *tenant) setRoute(addr, database string, fromAPI bool) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !fromAPI && t.mu.held && t.mu.apiRoute {
		return false
	}
	if fromAPI && t.mu.held {
		t.mu.apiRoute = true
	}
	if database == "" {
		database = t.mu.route.Database
	}
	if t.mu.route.Addr == addr && t.mu.route.Database == database {
		return false
	}
	t.mu.route.Addr = addr
	t.mu.route.Database = database
	t.mu.gen++
	return true
}

// enter waits while the tenant is held, and during a release ramp while
// its limit of transactions is in flight; then it counts the caller in
// flight and returns the route to use. REQUIRES: the caller is at a boundary.
func (t *tenant) enter(ctx context.Context) (RouteConfig, uint64, error) {
	return t.enterThen(ctx, nil)
}

// enterThen is enter that also calls entered, if set, under the tenant's
// lock once the caller is counted in flight (a hold then never finds the
// caller between the two).
func (t *tenant) enterThen(ctx context.Context, entered func()) (RouteConfig, uint64, error) {
	t.mu.Lock()
	for {
		if t.mu.held {
			ch := t.mu.releaseCh
			t.mu.Unlock()
			select {
			case <-ch:
			case <-ctx.Done():
				return RouteConfig{}, 0, ctx.Err()
			}
			t.mu.Lock()
			continue
		}
		wait := t.rampWaitLocked()
		if wait <= 0 {
			break
		}
		if t.mu.slotCh == nil {
			t.mu.slotCh = make(chan struct{})
		}
		ch := t.mu.slotCh
		t.mu.Unlock()
		tm := time.NewTimer(wait)
		select {
		case <-ch:
		case <-tm.C:
		case <-ctx.Done():
			tm.Stop()
			return RouteConfig{}, 0, ctx.Err()
		}
		tm.Stop()
		t.mu.Lock()
	}
	t.mu.inflight++
	if entered != nil {
		entered()
	}
	r, g := t.mu.route, t.mu.gen
	t.mu.Unlock()
	return r, g, nil
}

// rampWaitLocked returns how long a transaction starting now must at most
// wait for a slot of the release ramp (until a transaction leaves, or the
// ramp ends): 0 when it may start. A ramp that has ended is cleared, so
// outside one this costs no clock read. REQUIRES: t.mu held.
func (t *tenant) rampWaitLocked() time.Duration {
	if t.mu.rampLimit <= 0 || t.mu.inflight < t.mu.rampLimit {
		return 0
	}
	now := time.Now()
	if !now.Before(t.mu.rampUntil) {
		t.mu.rampLimit = 0
		return 0
	}
	return t.mu.rampUntil.Sub(now)
}

// tryEnter is enter when it need not wait: it returns the route generation
// and true, or false when the tenant is held or a release ramp's slots are
// taken (nothing counted).
func (t *tenant) tryEnter() (uint64, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.mu.held || t.rampWaitLocked() > 0 {
		return 0, false
	}
	t.mu.inflight++
	return t.mu.gen, true
}

// leave undoes enter at the end of a transaction.
func (t *tenant) leave() {
	t.mu.Lock()
	t.mu.inflight--
	if t.mu.slotCh != nil {
		close(t.mu.slotCh)
		t.mu.slotCh = nil
	}
	if t.mu.inflight <= 0 {
		t.mu.inflight = 0
		if t.mu.idleCh != nil {
			close(t.mu.idleCh)
			t.mu.idleCh = nil
		}
	}
	t.mu.Unlock()
}

func (t *tenant) addSession(s *session) {
	t.mu.Lock()
	t.mu.sessions[s] = struct{}{}
	t.mu.Unlock()
}

// sessionList returns the tenant's current sessions.
func (t *tenant) sessionList() []*session {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]*session, 0, len(t.mu.sessions))
	for s := range t.mu.sessions {
		out = append(out, s)
	}
	return out
}

func (t *tenant) addRouter(b *ksBackends) {
	t.mu.Lock()
	t.mu.routers[b] = struct{}{}
	t.mu.Unlock()
}

func (t *tenant) removeRouter(b *ksBackends) {
	t.mu.Lock()
	delete(t.mu.routers, b)
	t.mu.Unlock()
}

// routerBackends returns the pids of the keyspace router's server sessions
// of the tenant on addr; with idleOnly, of those between transactions
// (ksBackends).
func (t *tenant) routerBackends(addr string, idleOnly bool) []int {
	t.mu.Lock()
	bs := make([]*ksBackends, 0, len(t.mu.routers))
	for b := range t.mu.routers {
		bs = append(bs, b)
	}
	t.mu.Unlock()
	var out []int
	for _, b := range bs {
		out = append(out, b.backendsOn(t.name, addr, idleOnly)...)
	}
	return out
}

func (t *tenant) removeSession(s *session) {
	t.mu.Lock()
	delete(t.mu.sessions, s)
	t.mu.Unlock()
}

// waitIdle waits until inflight is 0, until, or ctx ends. Reports whether idle.
func (t *tenant) waitIdle(ctx context.Context, until time.Time) bool {
	t.mu.Lock()
	for t.mu.inflight > 0 {
		if t.mu.idleCh == nil {
			t.mu.idleCh = make(chan struct{})
		}
		ch := t.mu.idleCh
		t.mu.Unlock()
		d := time.Until(until)
		if d <= 0 {
			return false
		}
		tm := time.NewTimer(d)
		select {
		case <-ch:
		case <-tm.C:
		case <-ctx.Done():
			tm.Stop()
			return false
		}
		tm.Stop()
		t.mu.Lock()
	}
	t.mu.Unlock()
	return true
}

// hold sets the hold and waits up to deadline for the in-flight
// transactions to end; at the deadline it ends those still open (endOpen),
// so that it returns by deadline + 2 × grace at the latest (the second grace
// only if a terminated session is slow to close). Sessions between
// transactions wait at their boundary until release; they never wait for an
// open transaction longer than that.
func (t *tenant) hold(ctx context.Context, deadline, grace time.Duration, cancel func(*session) bool) client.HoldResult {
	start := time.Now()
	t.holdNew()
	var res client.HoldResult
	if !t.waitIdle(ctx, start.Add(deadline)) && ctx.Err() == nil {
		t.endOpen(ctx, grace, cancel, &res)
	}
	t.mu.Lock()
	res.HeldSessions = len(t.mu.sessions)
	res.InFlight = t.mu.inflight
	t.mu.Unlock()
	r, _ := t.routeNow()
	for _, s := range t.sessionList() {
		if pid, ok := s.idleBackend(r.Addr); ok {
			res.IdleBackends = append(res.IdleBackends, int(pid))
		}
	}
	res.IdleBackends = append(res.IdleBackends, t.routerBackends(r.Addr, true)...)
	res.WaitedMS = float64(time.Since(start).Microseconds()) / 1000
	return res
}

// endOpen ends the transactions still open at a hold's deadline and counts
// them in res. A session idle in a transaction block (waiting for its
// client: a cancel cannot end it) is terminated at once. A session with a
// statement running (or a request without a Sync, such as a suspended
// portal's Execute, which the proxy cannot tell from one) gets a
// CancelRequest, all at once; those still in a transaction grace later are
// terminated. Termination closes the server session, rolling the
// transaction back, and sends the client FATAL 57P01. endOpen then waits up
// to grace for the terminated sessions to close.
func (t *tenant) endOpen(ctx context.Context, grace time.Duration, cancel func(*session) bool, res *client.HoldResult) {
	const msg = "sluice proxy: terminating connection: transaction still open at the handover deadline"
	idle, running := t.openSessions()
	for _, s := range idle {
		s.terminate(codeAdminShutdown, msg)
	}
	res.Terminated, res.TerminatedIdle = len(idle), len(idle)
	if len(running) > 0 {
		graceEnd := time.Now().Add(grace)
		sent := make(chan bool, len(running))
		for _, s := range running {
			go func() { sent <- cancel(s) }()
		}
		t.waitIdle(ctx, graceEnd)
		res.Cancelled = countSent(sent, len(running), graceEnd)
		if ctx.Err() != nil {
			return
		}
		for _, s := range running {
			if s.inFlight() {
				s.terminate(codeAdminShutdown, msg)
				res.Terminated++
			}
		}
	}
	if res.Terminated > 0 {
		t.waitIdle(ctx, time.Now().Add(grace))
	}
}

// countSent counts the true results among the first n on sent, waiting
// for them until end at the latest (a result already there counts even
// after end).
func countSent(sent <-chan bool, n int, end time.Time) int {
	tm := time.NewTimer(time.Until(end))
	defer tm.Stop()
	count := 0
	for range n {
		var ok bool
		select {
		case ok = <-sent:
		default:
			select {
			case ok = <-sent:
			case <-tm.C:
				return count
			}
		}
		if ok {
			count++
		}
	}
	return count
}

// openSessions returns the sessions with a transaction in flight: idle
// those waiting for their client inside a transaction block, running the
// others.
func (t *tenant) openSessions() (idle, running []*session) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for s := range t.mu.sessions {
		switch open, waiting := s.txState(); {
		case open && waiting:
			idle = append(idle, s)
		case open:
			running = append(running, s)
		}
	}
	return idle, running
}

// holdNew makes new transactions wait until release, without waiting for
// or ending the ones in flight, and reports whether it set the hold (false:
// one was in force). hold starts with it; a catalog that says a handover is
// under way asks it of a proxy that holds nothing (one that restarted
// mid-handover).
func (t *tenant) holdNew() bool {
	return t.holdNewUnlessReleasedSince(time.Time{})
}

// holdNewUnlessReleasedSince is holdNew that does nothing (false) when a
// hold was lifted after since: a catalog's answer to a question asked
// before that release is stale. A zero since always holds.
func (t *tenant) holdNewUnlessReleasedSince(since time.Time) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.mu.held || (!since.IsZero() && t.mu.released.After(since)) {
		return false
	}
	t.mu.held = true
	t.mu.apiRoute = false
	t.mu.releaseCh = make(chan struct{})
	t.mu.holdGen = t.mu.gen
	return true
}

// release lifts the hold and returns when it did (the held sessions are
// free to go from then on). Releasing a tenant that is not held is a no-op.
// If the hold moved the tenant (its route changed) and limit > 0, a release
// ramp starts: for window, at most limit transactions are in flight; ramp
// reports whether one did.
func (t *tenant) release(limit int, window time.Duration) (at time.Time, ramp bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := time.Now()
	if !t.mu.held {
		return now, false
	}
	t.mu.held = false
	t.mu.released = now
	t.mu.apiRoute = false
	close(t.mu.releaseCh)
	t.mu.releaseCh = nil
	if limit > 0 && window > 0 && t.mu.gen != t.mu.holdGen {
		t.mu.rampLimit, t.mu.rampUntil = limit, now.Add(window)
		ramp = true
	}
	return now, ramp
}
