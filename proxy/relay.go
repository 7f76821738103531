package proxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
)

// The generic relay, through bufio: clientLoop (client → server, in the
// goroutine that accepted the connection) and serverLoop (server → client, a
// goroutine per server session). Sessions whose sockets are both raw take
// the fast relay instead (relay_fast_linux.go), which does the same work per
// message; the transaction accounting both call is in transaction.go.

// clientLoop relays client messages to the server until the client leaves
// or an error ends the session.
func (s *session) clientLoop(ctx context.Context) error {
	if c, ok := s.conn.(*rawConn); ok {
		return s.clientLoopFast(ctx, c)
	}
	p := s.p
	for {
		typ, n, err := readHeader(s.cr, &s.hdr)
		if err == nil && !validFrontend(typ) {
			err = protoErrf(codeProtocolViolation, "invalid frontend message type %d", typ)
		}
		if err == nil && n > p.cfg.MaxMessage {
			err = protoErrf(codeProtocolViolation, "invalid message length %d: more than the limit of %d bytes", n+4, p.cfg.MaxMessage)
		}
		if err != nil {
			return s.endWithError(err)
		}
		s.mu.Lock()
		boundary := !s.mu.inTx
		s.mu.Unlock()
		if typ == 'X' {
			return nil
		}
		if boundary {
			if err := s.beginTx(ctx); err != nil {
				return s.endWithError(err)
			}
		}
		if err := s.forward(typ, n); err != nil {
			var we errWrite
			if errors.As(err, &we) {
				// The server went away; its reader ends the session.
				return nil
			}
			return s.endWithError(err)
		}
	}
}

// forward relays one client message whose header is in s.hdr.
func (s *session) forward(typ byte, n int) error {
	w := s.sending(typ).w
	if _, err := w.Write(s.hdr[:]); err != nil {
		return errWrite{err}
	}
	switch {
	case (typ == 'P' || typ == 'C' || typ == 'Q') && n <= inspectLimit:
		body, err := readBody(s.cr, s.buf, n)
		s.buf = body[:0]
		if err != nil {
			return unexpectedEOF(err)
		}
		s.inspect(typ, body)
		if _, err := w.Write(body); err != nil {
			return errWrite{err}
		}
	default:
		if err := relayBody(s.cr, w, n); err != nil {
			return err
		}
	}
	if s.cr.Buffered() == 0 {
		if err := w.Flush(); err != nil {
			return errWrite{err}
		}
	}
	return nil
}

// endWithError stops the server side and, for protocol errors, tells the client.
func (s *session) endWithError(err error) error {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed) {
		return nil
	}
	var pe *protoError
	if errors.As(err, &pe) {
		s.stopServer()
		writeFatal(s.cw, pe.Code, pe.Msg)
		lingerClose(s.conn)
	}
	return err
}

// serverLoop relays server messages to the client until the server
// connection ends. If it ends without being detached, the session ends —
// unless the session was idle while its tenant is held or re-routed (the old
// server of a handover shutting down): then the server's parting FATAL error
// is not passed on, and the client loop reopens the session on the tenant's
// current server at the next boundary.
func (s *session) serverLoop(sc *serverConn) {
	defer close(sc.done)
	var lost bool
	if c, sv, ok := fastPair(s.conn, sc.conn); ok {
		lost = s.serverLoopFast(sc, sv, c)
	} else {
		lost = s.serverLoopGeneric(sc)
	}
	w := s.cw
	km := s.killMsg.Load()
	if km != nil {
		w.Write(encodeMsg(nil, km))
	}
	w.Flush()
	if sc.detached.Load() {
		return
	}
	sc.conn.Close()
	if km == nil && (lost || s.idleInHandover()) {
		s.srvLost.Store(true)
		s.p.cfg.Logf("proxy: session %d of %s: server %s went away during a handover; reconnecting at the next transaction", s.key, s.tenant.name, sc.addr)
		return
	}
	// The server ended the session (or the client vanished): end it all.
	s.conn.Close()
}

// serverLoopGeneric is serverLoop's relay through bufio (TLS clients, or
// where raw sockets are unavailable). It returns whether a server error was
// swallowed during a handover.
func (s *session) serverLoopGeneric(sc *serverConn) (lost bool) {
	var hdr [5]byte
	var buf []byte
	r, w := sc.r, s.cw
	for {
		typ, n, err := readHeader(r, &hdr)
		if err != nil {
			break
		}
		if typ == 'E' && s.idleInHandover() {
			// An asynchronous error (57P01 at shutdown) from a server being
			// handed over: swallow it, the session will move.
			if _, err := r.Discard(n); err != nil {
				break
			}
			lost = true
			continue
		}
		if _, err := w.Write(hdr[:]); err != nil {
			break
		}
		switch typ {
		case 'Z':
			if n != 1 {
				err = fmt.Errorf("bad ReadyForQuery length %d", n)
				break
			}
			st, e := r.ReadByte()
			if e != nil {
				err = e
				break
			}
			s.readyForQuery(st)
			err = w.WriteByte(st)
		case 'S':
			buf, err = readBody(r, buf, n)
			if err == nil {
				s.parameterStatus(buf)
				_, err = w.Write(buf)
			}
		default:
			err = relayBody(r, w, n)
		}
		if err != nil {
			break
		}
		if r.Buffered() == 0 {
			if err := w.Flush(); err != nil {
				break
			}
		}
	}
	return lost
}

// parameterStatus records the setting a server's ParameterStatus body
// reports, so that a move can restore it and tell the client what differs.
func (s *session) parameterStatus(body []byte) {
	k, rest, ok := cstring(body)
	if !ok {
		return
	}
	v, _, ok := cstring(rest)
	if !ok {
		return
	}
	s.mu.Lock()
	if s.mu.params[k] != v {
		s.mu.params[k] = v
	}
	s.mu.Unlock()
}
