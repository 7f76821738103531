package router

import (
	"bufio"
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/sluicedb/sluice/keyspace"
)

// Backends is what the router needs from its host (the proxy): server
// sessions to partitions, the handover gate of each partition's tenant, and
// somewhere to put latencies. Implementations are safe for concurrent use.
type Backends interface {
	// Dial opens a server session to part for user with the client's
	// startup parameters. REQUIRES: Enter(part) returned and Leave not yet.
	Dial(ctx context.Context, part keyspace.Partition, user string, params map[string]string) (*Server, error)
	// Enter waits while a handover holds part's tenant, then counts a
	// transaction in flight there and returns its route's generation
	// (changed when the tenant moved: server sessions of an older one must
	// be reopened).
	Enter(ctx context.Context, part keyspace.Partition) (gen uint64, err error)
	// Leave ends what Enter began; d is the transaction's latency.
	Leave(part keyspace.Partition, d time.Duration)
	// Observe records one finished transaction of keyspace ks that touched
	// parts, its latency d, and the time it waited at holds.
	Observe(ks string, parts []string, d, queued time.Duration)
}

// Server is an open, authenticated server session; the router owns it.
type Server struct {
	R      *bufio.Reader
	W      *bufio.Writer
	Params map[string]string // ParameterStatus values reported at startup
	Gen    uint64            // route generation it was opened for
	Close  func()            // ends the session (Terminate, close)
	// Addr, PID and Secret say where to send a CancelRequest for it: the
	// server's address as the host dialled it, and the BackendKeyData
	// the server gave (PID 0: unknown, it cannot be cancelled). Set by
	// Dial, read-only after.
	Addr   string
	PID    uint32
	Secret []byte
}

// busySet is the server sessions running a client's messages right now
// (sent, answers not all read): what a client's CancelRequest must reach.
// The session's goroutine adds and removes; Session.Busy reads it from any
// goroutine. Its methods accept a nil set (a backend of no session).
type busySet struct {
	mu  sync.Mutex
	srv []*Server
}

func (bs *busySet) add(s *Server) {
	if bs == nil {
		return
	}
	bs.mu.Lock()
	bs.srv = append(bs.srv, s)
	bs.mu.Unlock()
}

func (bs *busySet) remove(s *Server) {
	if bs == nil {
		return
	}
	bs.mu.Lock()
	bs.srv = slices.DeleteFunc(bs.srv, func(o *Server) bool { return o == s })
	bs.mu.Unlock()
}

func (bs *busySet) list() []*Server {
	bs.mu.Lock()
	defer bs.mu.Unlock()
	return slices.Clone(bs.srv)
}

// backend is one of a client session's server sessions: one per partition
// the client has used.
type backend struct {
	part  keyspace.Partition
	srv   *Server
	stmts map[string]*stmt // prepared statements here: name → the version parsed

	// Per transaction.
	entered bool // Enter called, Leave due at the transaction's end
	begun   bool // BEGIN sent in the current transaction block
	wrote   bool // a statement other than a read-only one ran in this block
	broken  bool // the server session failed: close it, reopen on next use
	// lockTimeout: the block's spanLockTimeout is set (or queued in pending).
	lockTimeout bool
	// pending is the exchange being built for b in this statement, until sent.
	pending *exchange
	// busy is the session's set b joins while an exchange holding client
	// messages runs (nil: b is no client session's, like 2PC recovery's).
	busy *busySet
}

// expectation is one message sent to a server and what answers it.
type expectation struct {
	kind byte // the frontend message type: 'P','B','D','E','C','S','Q','H'
	hide bool // injected by the router: its answers are not the client's
}

// sink receives a server's answers that are the client's.
type sink interface {
	// put takes one message answering the i-th of the exchange's messages
	// that are the client's (hidden ones not counted).
	put(i int, m msg) error
}

// exchange is one round trip with a server: messages out, answers in.
type exchange struct {
	out    []msg
	expect []expectation
}

func (x *exchange) add(kind byte, m msg, hide bool) {
	x.out = append(x.out, m)
	x.expect = append(x.expect, expectation{kind: kind, hide: hide})
}

// result of one exchange.
type result struct {
	status byte     // the last ReadyForQuery's status, 0 when none came
	err    *pgError // the first error of the client's part, or of a hidden part
	hidErr bool     // err answered a hidden message
}

// run sends x to b and reads the answers until every expectation is met,
// passing the client's to s. An I/O error marks b broken and is returned.
func (b *backend) run(x *exchange, s sink) (result, error) {
	if err := b.send(x); err != nil {
		return result{}, err
	}
	return b.recv(x, s)
}

// send writes x's messages to the server. When x holds client messages,
// b is busy (cancellable by the client) from now until recv returns.
func (b *backend) send(x *exchange) error {
	b.pending = nil
	if slices.ContainsFunc(x.expect, func(e expectation) bool { return !e.hide }) {
		b.busy.add(b.srv)
	}
	for _, m := range x.out {
		if err := writeMsg(b.srv.W, m.typ, m.body); err != nil {
			b.broken = true
			b.busy.remove(b.srv)
			return err
		}
	}
	if err := b.srv.W.Flush(); err != nil {
		b.broken = true
		b.busy.remove(b.srv)
		return err
	}
	return nil
}

// recv reads the answers to x, passing the client's to s.
func (b *backend) recv(x *exchange, s sink) (result, error) {
	defer b.busy.remove(b.srv)
	var res result
	vis := make([]int, len(x.expect)) // the client's index of each expectation: hidden ones skipped
	n := 0
	for j, e := range x.expect {
		vis[j] = n
		if !e.hide {
			n++
		}
	}
	i := 0
	for i < len(x.expect) {
		m, err := readMsg(b.srv.R)
		if err != nil {
			b.broken = true
			return res, fmt.Errorf("partition %s: %w", b.part.Name, unexpectedEOF(err))
		}
		e := x.expect[i]
		switch m.typ {
		case 'N', 'A', 'S':
			if !e.hide {
				if err := s.put(vis[i], m); err != nil {
					return res, err
				}
			}
			continue
		case 'E':
			pe := parseError(m.body)
			if res.err == nil {
				res.err, res.hidErr = pe, e.hide
			}
			if err := s.put(vis[i], m); err != nil { // errors reach the client even from hidden parts
				return res, err
			}
			if e.kind == 'Q' {
				continue // its ReadyForQuery follows
			}
			for i < len(x.expect) && x.expect[i].kind != 'S' { // the server skips to Sync
				i++
			}
			continue
		case 'Z':
			res.status = m.body[0]
			i++
			continue
		case 'G', 'H', 'W':
			b.broken = true
			return res, fmt.Errorf("partition %s: COPY is not supported through the keyspace router", b.part.Name)
		}
		if !e.hide {
			if err := s.put(vis[i], m); err != nil {
				return res, err
			}
		}
		if ends(e.kind, m.typ) {
			i++
		}
	}
	return res, nil
}

// ends reports whether answer typ completes a message of kind.
func ends(kind, typ byte) bool {
	switch kind {
	case 'P':
		return typ == '1'
	case 'B':
		return typ == '2'
	case 'C':
		return typ == '3'
	case 'D':
		return typ == 'T' || typ == 'n'
	case 'E':
		return typ == 'C' || typ == 'I' || typ == 's'
	}
	return false // 'Q' and 'S' end at ReadyForQuery
}

// discard is a sink that drops everything.
type discard struct{}

func (discard) put(int, msg) error { return nil }

// capture is a sink that keeps every answer by expectation.
type capture struct{ msgs [][]msg }

func newCapture(n int) *capture { return &capture{msgs: make([][]msg, n)} }

func (c *capture) put(i int, m msg) error {
	for len(c.msgs) <= i {
		c.msgs = append(c.msgs, nil)
	}
	c.msgs[i] = append(c.msgs[i], m)
	return nil
}

// toClient is a sink writing to the client.
type toClient struct{ w *bufio.Writer }

func (c toClient) put(_ int, m msg) error { return writeMsg(c.w, m.typ, m.body) }

// simple runs one SQL string on b outside the client's view and returns
// the server's error, if any.
func (b *backend) simple(sql string) (*pgError, error) {
	var x exchange
	x.add('Q', msg{typ: 'Q', body: append([]byte(sql), 0)}, true)
	res, err := b.run(&x, discard{})
	if err != nil {
		return nil, err
	}
	return res.err, nil
}
