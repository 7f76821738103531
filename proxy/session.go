package proxy

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgproto3"
	"github.com/sluicedb/sluice/proxy/scram"
	"github.com/sluicedb/sluice/proxy/timing"
)

// Protocol request codes of startup-phase packets.
const (
	codeProto30    = 196608
	codeProto32    = 196610
	codeSSLRequest = 80877103
	codeGSSENC     = 80877104
	codeCancel     = 80877102
)

// session is one client connection and its current server connection.
//
// Two goroutines move bytes: the client loop (client → server, in the
// goroutine that accepted the connection) and a server loop per server
// connection (server → client). Only the server loop writes to the client
// while it runs; the client loop writes to the client only after stopping it
// (handover, errors), so client writes never interleave.
type session struct {
	p      *Proxy
	conn   net.Conn
	cr     *bufio.Reader
	cw     *bufio.Writer
	user   string
	alias  string
	tenant *tenant
	key    uint32 // proxy's BackendKeyData process id for this session
	secret [4]byte

	startupParams map[string]string // client's startup parameters minus user/database/_pq_

	// client-loop state. parses is written only by the client loop, under
	// parseMu; Prepare's goroutines read it under parseMu too. unnamed is
	// the client loop's alone (Prepare does not create it).
	parseMu sync.Mutex
	parses  map[string][]byte // named prepared statements: name → raw Parse message
	unnamed []byte            // the last unnamed Parse, raw
	buf     []byte            // scratch for inspected bodies
	hdr     [5]byte

	killMsg atomic.Pointer[pgproto3.ErrorResponse] // set by terminate: sent to the client when the server loop ends
	srvGen  atomic.Uint64                          // route generation the current server session was opened for
	srvLost atomic.Bool                            // the server session ended while idle in a handover: reopen at the next boundary

	mu struct {
		sync.Mutex
		srv         *serverConn
		win         *timing.Window
		inTx        bool          // a transaction is in flight (counted in tenant.inflight)
		txStart     time.Time     // first message of the transaction
		txQueued    time.Duration // time the transaction waited at a hold (and for a session move)
		outstanding int           // Query/Sync/FunctionCall sent, ReadyForQuery not yet seen
		lastSync    bool          // the last message sent was Query/Sync/FunctionCall
		params      map[string]string
		next        *serverConn // server session prepared for a coming switch (Prepare), not yet attached
		ended       bool        // cleanup ran: nothing may be prepared any more
	}
}

func (s *session) inFlight() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.mu.inTx
}

// idleBackend returns the pid of the session's server session when it is on
// addr and idle between transactions (its tenant held, nothing outstanding):
// the proxy will not write to it before its tenant is released.
func (s *session) idleBackend(addr string) (uint32, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sc := s.mu.srv
	if s.mu.inTx || s.mu.outstanding > 0 || sc == nil || sc.addr != addr || sc.pid == 0 {
		return 0, false
	}
	return sc.pid, true
}

// backendOn returns the pid of s's server session if that session is on
// addr, busy or not.
func (s *session) backendOn(addr string) (uint32, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sc := s.mu.srv
	if sc == nil || sc.addr != addr || sc.pid == 0 {
		return 0, false
	}
	return sc.pid, true
}

// serve runs the session to its end. It owns conn.
func (p *Proxy) serveConn(ctx context.Context, conn net.Conn) {
	defer conn.Close()
	conn = fastConn(conn)
	s := &session{p: p, conn: conn, cr: bufio.NewReaderSize(conn, 16<<10), cw: bufio.NewWriterSize(conn, 16<<10)}
	conn.SetDeadline(time.Now().Add(DefaultStartupTimeout))
	ok, err := s.startupPhase(ctx)
	if err != nil {
		var pe *protoError
		if errors.As(err, &pe) {
			writeFatal(s.cw, pe.Code, pe.Msg)
			lingerClose(s.conn)
		}
		if !errors.Is(err, io.EOF) {
			p.cfg.Logf("proxy: session from %s: %v", conn.RemoteAddr(), err)
		}
	}
	if !ok {
		return
	}
	conn.SetDeadline(time.Time{})
	defer s.cleanup()
	if err := s.clientLoop(ctx); err != nil {
		p.cfg.Logf("proxy: session %d (%s@%s): %v", s.key, s.user, s.alias, err)
	}
}

// startupPhase handles SSL/GSS negotiation, cancel requests, the startup
// message, client authentication and the server connection. ok is true
// when the session is ready for the relay.
func (s *session) startupPhase(ctx context.Context) (ok bool, err error) {
	p := s.p
	var buf [512]byte
	tlsDone := false
	for {
		body, err := readStartup(s.cr, buf[:0])
		if err != nil {
			return false, err
		}
		code := binary.BigEndian.Uint32(body)
		switch code {
		case codeSSLRequest:
			if len(body) != 4 || tlsDone {
				return false, protoErrf(codeProtocolViolation, "unexpected SSLRequest")
			}
			if s.cr.Buffered() > 0 {
				return false, protoErrf(codeProtocolViolation, "received unencrypted data after SSL request")
			}
			if p.tlsCfg == nil {
				if _, err := s.conn.Write([]byte{'N'}); err != nil {
					return false, err
				}
				continue
			}
			if _, err := s.conn.Write([]byte{'S'}); err != nil {
				return false, err
			}
			tc := tls.Server(s.conn, p.tlsCfg)
			if err := tc.HandshakeContext(ctx); err != nil {
				return false, fmt.Errorf("tls handshake: %w", err)
			}
			s.conn = tc
			s.cr = bufio.NewReaderSize(tc, 16<<10)
			s.cw = bufio.NewWriterSize(tc, 16<<10)
			tlsDone = true
		case codeGSSENC:
			if s.cr.Buffered() > 0 {
				return false, protoErrf(codeProtocolViolation, "received unencrypted data after GSSAPI encryption request")
			}
			if _, err := s.conn.Write([]byte{'N'}); err != nil {
				return false, err
			}
		case codeCancel:
			var cr pgproto3.CancelRequest
			if err := cr.Decode(body); err != nil {
				return false, nil // cancel requests get no answer
			}
			p.forwardCancel(ctx, cr.ProcessID, cr.SecretKey)
			return false, nil
		case codeProto30, codeProto32:
			var sm pgproto3.StartupMessage
			if err := sm.Decode(body); err != nil {
				return false, protoErrf(codeProtocolViolation, "invalid startup packet: %v", err)
			}
			return s.startup(ctx, &sm)
		default:
			if code>>16 != 3 {
				return false, protoErrf(codeFeatureNotSupported, "unsupported frontend protocol %d.%d: server supports 3.0", code>>16, code&0xffff)
			}
			// 3.x with x > 2: negotiate down like PostgreSQL does.
			var sm pgproto3.StartupMessage
			binary.BigEndian.PutUint32(body, codeProto32)
			if err := sm.Decode(body); err != nil {
				return false, protoErrf(codeProtocolViolation, "invalid startup packet: %v", err)
			}
			return s.startup(ctx, &sm)
		}
	}
}

func (s *session) startup(ctx context.Context, sm *pgproto3.StartupMessage) (bool, error) {
	p := s.p
	s.user = sm.Parameters["user"]
	if s.user == "" {
		return false, protoErrf(codeInvalidAuthSpec, "no PostgreSQL user name specified in startup packet")
	}
	s.alias = sm.Parameters["database"]
	if s.alias == "" {
		s.alias = s.user
	}
	if _, ok := sm.Parameters["replication"]; ok {
		return false, protoErrf(codeFeatureNotSupported, "sluice proxy does not relay replication connections")
	}
	s.startupParams = map[string]string{}
	var unknownOpts []string
	for k, v := range sm.Parameters {
		switch {
		case k == "user" || k == "database":
		case strings.HasPrefix(k, "_pq_."):
			unknownOpts = append(unknownOpts, k)
		default:
			s.startupParams[k] = v
		}
	}
	if sm.ProtocolVersion != codeProto30 || len(unknownOpts) > 0 {
		b := encodeMsg(nil, &pgproto3.NegotiateProtocolVersion{NewestMinorProtocol: 0, UnrecognizedOptions: unknownOpts})
		if _, err := s.cw.Write(b); err != nil {
			return false, err
		}
	}
	t := p.tenantByAlias(s.alias)
	if t == nil {
		return false, protoErrf(codeInvalidCatalogName, "database %q does not exist", s.alias)
	}
	if err := s.authenticate(); err != nil {
		return false, err
	}
	s.tenant = t
	// Connect to the server as the first transaction boundary would: wait
	// while held, so a session opened during a handover lands on the new server.
	r, gen, err := t.enter(ctx)
	if err != nil {
		return false, err
	}
	sc, err := p.dialServer(ctx, r, s.user, s.startupParams)
	t.leave()
	if err != nil {
		s.cw.Write(encodeMsg(nil, pgErrorResponse(err)))
		s.cw.Flush()
		return false, fmt.Errorf("connect %s: %w", r.Addr, err)
	}
	s.srvGen.Store(gen)
	s.mu.params = map[string]string{}
	out := make([]byte, 0, 1024)
	out = encodeMsg(out, &pgproto3.AuthenticationOk{})
	for k, v := range sc.params {
		s.mu.params[k] = v
		out = encodeMsg(out, &pgproto3.ParameterStatus{Name: k, Value: v})
	}
	p.registerSession(s)
	out = encodeMsg(out, &pgproto3.BackendKeyData{ProcessID: s.key, SecretKey: s.secret[:]})
	out = encodeMsg(out, &pgproto3.ReadyForQuery{TxStatus: 'I'})
	if _, err := s.cw.Write(out); err != nil {
		sc.close()
		p.unregisterSession(s)
		return false, err
	}
	if err := s.cw.Flush(); err != nil {
		sc.close()
		p.unregisterSession(s)
		return false, err
	}
	t.addSession(s)
	p.sessionsOpen.Add(1)
	s.attach(sc)
	return true, nil
}

// authenticate runs SCRAM-SHA-256 with the client (or nothing when trusted).
func (s *session) authenticate() error {
	p := s.p
	if p.cfg.Trust {
		return nil
	}
	secret, known := p.secrets[s.user]
	if !known {
		secret = p.dummySecret // mock authentication: fail at the proof, not before
	}
	if _, err := s.cw.Write(encodeMsg(nil, &pgproto3.AuthenticationSASL{AuthMechanisms: []string{scram.Mechanism}})); err != nil {
		return err
	}
	if err := s.cw.Flush(); err != nil {
		return err
	}
	body, err := s.readAuthMessage()
	if err != nil {
		return err
	}
	var init pgproto3.SASLInitialResponse
	if err := init.Decode(body); err != nil {
		return protoErrf(codeProtocolViolation, "malformed SASLInitialResponse: %v", err)
	}
	if init.AuthMechanism != scram.Mechanism {
		return protoErrf(codeInvalidAuthSpec, "client selected an invalid SASL authentication mechanism %q", init.AuthMechanism)
	}
	var nonce [18]byte
	rand.Read(nonce[:])
	conv := scram.NewConversation(secret, base64.StdEncoding.EncodeToString(nonce[:]))
	first, err := conv.First(init.Data)
	if err != nil {
		return protoErrf(codeProtocolViolation, "%v", err)
	}
	if _, err := s.cw.Write(encodeMsg(nil, &pgproto3.AuthenticationSASLContinue{Data: first})); err != nil {
		return err
	}
	if err := s.cw.Flush(); err != nil {
		return err
	}
	body, err = s.readAuthMessage()
	if err != nil {
		return err
	}
	final, err := conv.Final(body)
	if err != nil || !known {
		if err == nil || errors.Is(err, scram.ErrAuthFailed) {
			return protoErrf(codeInvalidPassword, "password authentication failed for user %q", s.user)
		}
		return protoErrf(codeProtocolViolation, "%v", err)
	}
	_, err = s.cw.Write(encodeMsg(nil, &pgproto3.AuthenticationSASLFinal{Data: final}))
	return err
}

// readAuthMessage reads one 'p' message during authentication.
func (s *session) readAuthMessage() ([]byte, error) {
	typ, n, err := readHeader(s.cr, &s.hdr)
	if err != nil {
		return nil, err
	}
	if typ != 'p' {
		return nil, protoErrf(codeProtocolViolation, "expected SASL response, got message type %q", typ)
	}
	if n > maxStartupPacket {
		return nil, protoErrf(codeProtocolViolation, "invalid SASL response length %d", n)
	}
	return readBody(s.cr, nil, n)
}

// attach makes sc the session's server and starts its reader.
func (s *session) attach(sc *serverConn) {
	s.mu.Lock()
	s.mu.srv = sc
	s.mu.win = s.p.reg.Get(timing.Key{Tenant: s.tenant.name, Server: sc.addr})
	s.mu.Unlock()
	go s.serverLoop(sc)
}

func (s *session) cleanup() {
	s.mu.Lock()
	sc := s.mu.srv
	inTx := s.mu.inTx
	s.mu.inTx = false
	next := s.mu.next
	s.mu.next = nil
	s.mu.ended = true
	s.mu.Unlock()
	if next != nil {
		next.close()
	}
	if sc != nil {
		sc.close()
		<-sc.done
	}
	if inTx {
		s.tenant.leave()
	}
	s.tenant.removeSession(s)
	s.p.unregisterSession(s)
	s.p.sessionsOpen.Add(-1)
}

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
	s.mu.txStart = now
	s.mu.txQueued = 0
	s.mu.Unlock()
	return true
}

// forward relays one client message whose header is in s.hdr.
func (s *session) forward(typ byte, n int) error {
	s.mu.Lock()
	sc := s.mu.srv
	sync := typ == 'Q' || typ == 'S' || typ == 'F'
	if sync {
		s.mu.outstanding++
	}
	s.mu.lastSync = sync
	s.mu.Unlock()
	w := sc.w
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

// inspect records what a handover must restore: named prepared statements.
func (s *session) inspect(typ byte, body []byte) {
	switch typ {
	case 'P':
		name, _, ok := cstringBytes(body)
		if !ok {
			return
		}
		raw := make([]byte, 5+len(body))
		copy(raw, s.hdr[:])
		copy(raw[5:], body)
		if len(name) == 0 {
			s.unnamed = raw
			return
		}
		s.parseMu.Lock()
		defer s.parseMu.Unlock()
		if s.parses == nil {
			s.parses = map[string][]byte{}
		}
		s.parses[string(name)] = raw
	case 'C':
		if len(body) < 2 || body[0] != 'S' {
			return
		}
		name, _, ok := cstringBytes(body[1:])
		if !ok {
			return
		}
		if len(name) == 0 {
			s.unnamed = nil
			return
		}
		s.parseMu.Lock()
		defer s.parseMu.Unlock()
		delete(s.parses, string(name))
	case 'Q':
		q := bytes.TrimLeft(body, " \t\r\n")
		if len(q) > 6 && (hasPrefixFold(q, "DISCARD ALL") || hasPrefixFold(q, "DEALLOCATE ALL")) {
			s.parseMu.Lock()
			defer s.parseMu.Unlock()
			clear(s.parses)
			s.unnamed = nil
		}
	}
}

func hasPrefixFold(b []byte, prefix string) bool {
	return len(b) >= len(prefix) && strings.EqualFold(string(b[:len(prefix)]), prefix)
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

// stopServer closes the current server connection and waits for its reader.
func (s *session) stopServer() {
	s.mu.Lock()
	sc := s.mu.srv
	s.mu.Unlock()
	if sc != nil {
		sc.close()
		<-sc.done
	}
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
				if k, rest, ok := cstring(buf); ok {
					if v, _, ok := cstring(rest); ok {
						s.mu.Lock()
						if s.mu.params[k] != v {
							s.mu.params[k] = v
						}
						s.mu.Unlock()
					}
				}
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

// terminate ends the session from outside: its server session is closed
// (rolling back an open transaction) and the client is sent a FATAL error
// with code and msg.
func (s *session) terminate(code, msg string) {
	s.killMsg.Store(fatal(code, msg))
	s.mu.Lock()
	sc := s.mu.srv
	s.mu.Unlock()
	if sc != nil {
		sc.conn.Close()
	}
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

// replayParses re-creates the session's prepared statements on sc, the
// server session it is moving to: each recorded Parse that sc does not
// already hold (Prepare warmed it with the statements of that moment,
// sc.stmts) is sent again, and statements sc holds that the client has since
// closed or redefined are closed first. Statements the server refuses (they
// failed on the old server too) are forgotten. Runs in the client loop.
func (s *session) replayParses(sc *serverConn) error {
	var msgs [][]byte
	var names []string // per message: the statement a Parse defines; "\x00" for a Close
	for name, raw := range sc.stmts {
		if cur, ok := s.parses[name]; !ok || !bytes.Equal(cur, raw) {
			msgs = append(msgs, closeStatement(name))
			names = append(names, "\x00")
		}
	}
	for name, raw := range s.parses {
		if have, ok := sc.stmts[name]; ok && bytes.Equal(have, raw) {
			continue
		}
		msgs = append(msgs, raw)
		names = append(names, name)
	}
	if s.unnamed != nil {
		msgs = append(msgs, s.unnamed)
		names = append(names, "")
	}
	sc.stmts = nil
	if len(msgs) == 0 {
		return nil
	}
	failed, err := sc.pipeline(msgs, s.p.cfg.DialTimeout)
	if err != nil {
		return fmt.Errorf("replay prepared statements: %w", err)
	}
	s.parseMu.Lock()
	defer s.parseMu.Unlock()
	for i, bad := range failed {
		switch {
		case !bad || names[i] == "\x00":
		case names[i] == "":
			s.unnamed = nil
		default:
			delete(s.parses, names[i])
		}
	}
	return nil
}

// closeStatement encodes Close of the named prepared statement.
func closeStatement(name string) []byte {
	n := 4 + 1 + len(name) + 1
	b := make([]byte, 0, 1+n)
	b = append(b, 'C', byte(n>>24), byte(n>>16), byte(n>>8), byte(n), 'S')
	b = append(b, name...)
	return append(b, 0)
}

// pipeline sends each of msgs (raw messages) followed by Sync, in one write,
// and reads the answers up to each ReadyForQuery; failed[i] reports whether
// msgs[i] drew an ErrorResponse. sc must be idle (no reader goroutine yet).
// timeout bounds the whole exchange.
func (sc *serverConn) pipeline(msgs [][]byte, timeout time.Duration) (failed []bool, err error) {
	sc.conn.SetDeadline(time.Now().Add(timeout))
	defer sc.conn.SetDeadline(time.Time{})
	for _, m := range msgs {
		sc.w.Write(m)
		sc.w.Write([]byte{'S', 0, 0, 0, 4})
	}
	if err := sc.w.Flush(); err != nil {
		return nil, err
	}
	failed = make([]bool, len(msgs))
	var hdr [5]byte
	var buf []byte
	for i := 0; i < len(msgs); {
		typ, n, err := readHeader(sc.r, &hdr)
		if err != nil {
			return nil, err
		}
		if buf, err = readBody(sc.r, buf, n); err != nil {
			return nil, err
		}
		switch typ {
		case 'E':
			failed[i] = true
		case 'Z':
			i++
		}
	}
	return failed, nil
}
