package proxy

import (
	"context"

	"github.com/jackc/pgx/v5/pgproto3"
)

// Handover moves: a session whose route changed (or whose server went away
// while it was idle in a handover) reopens on the tenant's current server at
// its next boundary — on the server session Prepare opened in advance if
// there is one, else a new one — with its settings and prepared statements,
// before its next message is forwarded.

// idleInHandover reports whether the session is between transactions while
// its tenant is held or routed elsewhere than its current server session.
func (s *session) idleInHandover() bool {
	s.mu.Lock()
	idle := !s.mu.inTx && s.mu.outstanding == 0
	s.mu.Unlock()
	if !idle {
		return false
	}
	t := s.tenant
	t.mu.Lock()
	held, gen := t.mu.held, t.mu.gen
	t.mu.Unlock()
	return held || gen != s.srvGen.Load()
}

// move reopens the session on route r (generation gen). REQUIRES: at a
// boundary, counted in flight (so a hold cannot complete meanwhile).
func (s *session) move(ctx context.Context, r RouteConfig, gen uint64) error {
	p := s.p
	params := s.startupFor()
	s.mu.Lock()
	old := s.mu.srv
	clientParams := make(map[string]string, len(s.mu.params))
	for k, v := range s.mu.params {
		clientParams[k] = v
	}
	s.mu.Unlock()
	sc := s.takeNext(r)
	if sc != nil {
		// Opened on the target while it was a hot standby: it reported
		// in_hot_standby=on then; the switch happens after promotion.
		if _, ok := sc.params["in_hot_standby"]; ok {
			sc.params["in_hot_standby"] = "off"
		}
		if err := s.replayParses(sc); err != nil {
			p.cfg.Logf("proxy: session %d of %s: prepared server session on %s unusable (%v); dialing", s.key, s.tenant.name, sc.addr, err)
			sc.close()
			sc = nil
		} else {
			p.preparedUsed.Add(1)
		}
	}
	if sc == nil {
		var err error
		sc, err = p.dialServer(ctx, r, s.user, params)
		if err != nil {
			return err
		}
		if err := s.replayParses(sc); err != nil {
			sc.close()
			return err
		}
	}
	// Stop the old server's reader; nothing is outstanding there.
	if old != nil {
		old.close()
		<-old.done
	}
	// Tell the client about parameters that differ on the new server.
	var out []byte
	for k, v := range sc.params {
		if clientParams[k] != v {
			out = encodeMsg(out, &pgproto3.ParameterStatus{Name: k, Value: v})
		}
	}
	if len(out) > 0 {
		if _, err := s.cw.Write(out); err != nil {
			sc.close()
			return err
		}
		if err := s.cw.Flush(); err != nil {
			sc.close()
			return err
		}
	}
	s.mu.Lock()
	for k, v := range sc.params {
		s.mu.params[k] = v
	}
	s.mu.outstanding = 0
	s.mu.Unlock()
	s.srvGen.Store(gen)
	s.srvLost.Store(false)
	p.moves.Add(1)
	p.cfg.Logf("proxy: session %d of %s moved %s → %s (%d prepared statements)", s.key, s.tenant.name, addrOf(old), sc.addr, len(s.parses))
	s.attach(sc)
	return nil
}

func addrOf(sc *serverConn) string {
	if sc == nil {
		return ""
	}
	return sc.addr
}
