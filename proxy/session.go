package proxy

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgproto3"
	"github.com/sluicedb/sluice/proxy/timing"
	"github.com/sluicedb/sluice/router"
)

// session is one client connection and its current server connection.
//
// Two goroutines move bytes: the client loop (client → server, in the
// goroutine that accepted the connection) and a server loop per server
// connection (server → client). Only the server loop writes to the client
// while it runs; the client loop writes to the client only after stopping it
// (handover, errors), so client writes never interleave.
//
// A session's parts: startup.go (negotiation, authentication, the first
// server session), relay.go and relay_fast_linux.go (the two relays),
// transaction.go (boundaries and timing), move.go (reopening on another
// server at a handover), statements.go (prepared statements kept across
// moves) and prepare.go (server sessions opened before a switch).
type session struct {
	p      *Proxy
	conn   net.Conn
	cr     *bufio.Reader
	cw     *bufio.Writer
	user   string
	alias  string
	tenant *tenant
	ks     *router.Keyspace // set instead of tenant for a keyspace's session (keyspaces.go)
	rs     *router.Session  // a keyspace session's router, set before registerSession
	key    uint32           // proxy's BackendKeyData process id for this session
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

// serveConn runs a session on conn to its end. It owns conn.
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
	if s.ks != nil {
		if err := s.serveKeyspace(ctx, s.ks); err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
			p.cfg.Logf("proxy: session (%s@%s): %v", s.user, s.alias, err)
		}
		return
	}
	defer s.cleanup()
	if err := s.clientLoop(ctx); err != nil {
		p.cfg.Logf("proxy: session %d (%s@%s): %v", s.key, s.user, s.alias, err)
	}
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
