//go:build linux

package proxy

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"syscall"
	"time"
	"unsafe"
)

// This file is the relay for sessions whose client socket is raw (rawConn:
// plain TCP or Unix, no TLS): clientLoopFast for client → server and, when
// the server socket is raw too, serverLoopFast for server → client. They do
// the work of clientLoop/forward and serverLoop without the read that fails
// with EAGAIN before every wait.
//
// Why: net.Conn.Read (and RawConn.Read) first clear the socket's "readable"
// flag in the runtime poller, then read; so a relay that waits only after a
// read came back empty pays one read(2) → EAGAIN per round trip and side.
// Here the whole loop runs inside one RawConn.Read callback: after a read
// that returned less than it asked for (the socket was empty at that moment),
// the callback returns false and the runtime parks it until the poller sees
// new data — the flag is not cleared in between, so data that arrived while
// we were relaying is not missed (the edge-triggered poller reports every
// arrival after a short read). Leaving the callback is always safe: the next
// RawConn.Read starts with a read.
//
// One thing a short read does not tell: an end of stream (FIN) or reset that
// arrived together with the data just read. Its readiness edge is spent, and
// only the next read would report it. So the relay reads once more before
// waiting where that matters — after a chunk with a server ErrorResponse (a
// server that says goodbye, e.g. 57P01 at a handover, then closes) and when a
// client message is left incomplete — and otherwise a read deadline every
// eofProbeInterval makes a parked relay read once, so a peer that closed in
// that way is noticed within that interval instead of never.
//
// The callback never blocks: client writes inside it are non-blocking, and
// what the peer's socket does not take is written outside it, blocking,
// before reading on. (Blocking inside would also make a concurrent Close of
// the socket wait: poll.FD.Close waits for the callback to return.)

// fastRelayBuf is the input buffer size of a fast relay, bytes (like the
// 16 KiB bufio buffers of the generic relay).
const fastRelayBuf = 16 << 10

// fastWholeLimit is the largest ParameterStatus body the server → client
// relay buffers whole to record it; a larger one is relayed uninspected.
const fastWholeLimit = 1 << 20

// eofProbeInterval bounds how long a relay can stay parked on a socket whose
// end of stream arrived together with its last data (see above): 1 s.
const eofProbeInterval = time.Second

// fastPair returns the client and server conns as rawConns when both are.
func fastPair(client, server net.Conn) (c, sv *rawConn, ok bool) {
	c, ok1 := client.(*rawConn)
	sv, ok2 := server.(*rawConn)
	return c, sv, ok1 && ok2
}

type serverRelay struct {
	s   *session
	src *rawConn // server
	dst *rawConn // client

	in   []byte
	r, w int
	// Body bytes of the current message still to pass on (or to skip, when
	// skip): its header has been handled.
	bodyLeft int
	skip     bool
	out      []byte // for the client, not yet written

	lost  bool  // a server error was swallowed during a handover
	probe bool  // read once more before waiting (an ErrorResponse went by)
	err   error // why the loop ends

	readFn  func(fd uintptr) bool
	writeFn func(fd uintptr) bool
	blocked bool // the last non-blocking client write left data
}

// serverLoopFast relays like serverLoop's loop and returns what that loop
// leaves for its epilogue: whether an error was swallowed. REQUIRES: the
// client and server conns are rawConns.
func (s *session) serverLoopFast(sc *serverConn, src, dst *rawConn) (lost bool) {
	sr := &serverRelay{s: s, src: src, dst: dst, in: make([]byte, fastRelayBuf), out: make([]byte, 0, fastRelayBuf)}
	sr.readFn = sr.onReadable
	sr.writeFn = sr.onWritable
	// Bytes already buffered by the reader used during the server's startup.
	if k := sc.r.Buffered(); k > 0 {
		b, _ := sc.r.Peek(k)
		sr.w = copy(sr.in, b)
		sc.r.Discard(sr.w)
		sr.err = sr.process()
	}
	for {
		if sr.err == nil {
			src.SetReadDeadline(time.Now().Add(eofProbeInterval))
			if err := src.rc.Read(sr.readFn); err != nil && sr.err == nil && !errors.Is(err, os.ErrDeadlineExceeded) {
				sr.err = err
			}
		}
		if len(sr.out) > 0 {
			// The client's socket was full (or the loop ends with output
			// left): write it here, outside the callback, blocking.
			if _, err := dst.Write(sr.out); err != nil && sr.err == nil {
				sr.err = err
			}
			sr.out = sr.out[:0]
		}
		sr.blocked = false
		if sr.err != nil {
			break
		}
	}
	return sr.lost
}

// onReadable is the RawConn.Read callback: read, relay, and return false to
// wait for the next data, true to leave (error, EOF, or client writes to
// finish blocking).
func (sr *serverRelay) onReadable(fd uintptr) bool {
	for {
		if sr.w == len(sr.in) {
			sr.makeRoom()
		}
		free := sr.in[sr.w:]
		n, _, e := syscall.RawSyscall(syscall.SYS_READ, fd, uintptr(unsafe.Pointer(&free[0])), uintptr(len(free)))
		switch e {
		case 0:
		case syscall.EINTR:
			continue
		case syscall.EAGAIN:
			return !sr.flush()
		default:
			sr.err = os.NewSyscallError("read", e)
			return true
		}
		if n == 0 {
			sr.err = io.EOF
			return true
		}
		sr.w += int(n)
		if sr.err = sr.process(); sr.err != nil {
			return true
		}
		if int(n) < len(free) {
			if sr.probe {
				// Is the server gone after its error? Read once more.
				sr.probe = false
				continue
			}
			// Drained: pass everything on, then wait for more.
			return !sr.flush()
		}
		if len(sr.out) >= fastRelayBuf && !sr.flush() {
			return true
		}
	}
}

// makeRoom frees space at the end of the input buffer: moves the unread
// bytes to the front, or grows the buffer for a whole message that does not fit.
func (sr *serverRelay) makeRoom() {
	if sr.r > 0 {
		sr.w = copy(sr.in, sr.in[sr.r:sr.w])
		sr.r = 0
		return
	}
	grown := make([]byte, 2*len(sr.in))
	copy(grown, sr.in[:sr.w])
	sr.in = grown
}

// flush writes the pending client output without blocking. It reports
// whether all of it went; if not, the rest is written outside the callback.
func (sr *serverRelay) flush() bool {
	if len(sr.out) == 0 {
		return true
	}
	if err := sr.dst.rc.Write(sr.writeFn); err != nil {
		sr.err = err
		return false
	}
	return !sr.blocked && sr.err == nil
}

func (sr *serverRelay) onWritable(fd uintptr) bool {
	for len(sr.out) > 0 {
		n, _, e := syscall.RawSyscall(syscall.SYS_WRITE, fd, uintptr(unsafe.Pointer(&sr.out[0])), uintptr(len(sr.out)))
		switch e {
		case 0:
			k := copy(sr.out, sr.out[n:])
			sr.out = sr.out[:k]
		case syscall.EINTR:
		case syscall.EAGAIN:
			sr.blocked = true
			return true
		default:
			sr.err = os.NewSyscallError("write", e)
			return true
		}
	}
	return true
}

// process relays every complete message (and the available part of a
// streamed one) in the input buffer, doing what serverLoop does per message.
func (sr *serverRelay) process() error {
	s := sr.s
	for {
		if sr.bodyLeft > 0 {
			k := min(sr.w-sr.r, sr.bodyLeft)
			if k == 0 {
				return nil
			}
			if !sr.skip {
				sr.out = append(sr.out, sr.in[sr.r:sr.r+k]...)
			}
			sr.r += k
			sr.bodyLeft -= k
			continue
		}
		if sr.w-sr.r < 5 {
			if sr.r == sr.w {
				sr.r, sr.w = 0, 0
			}
			return nil
		}
		hdr := sr.in[sr.r : sr.r+5]
		typ := hdr[0]
		l := int32(binary.BigEndian.Uint32(hdr[1:]))
		if l < 4 {
			return protoErrf(codeProtocolViolation, "invalid message length %d", l)
		}
		n := int(l) - 4
		if typ == 'E' {
			sr.probe = true
		}
		if typ == 'E' && s.idleInHandover() {
			// As in serverLoop: a server being handed over says goodbye; the session will move.
			sr.r += 5
			sr.bodyLeft, sr.skip = n, true
			sr.lost = true
			continue
		}
		switch {
		case typ == 'Z' || (typ == 'S' && n <= fastWholeLimit):
			if typ == 'Z' && n != 1 {
				return fmt.Errorf("bad ReadyForQuery length %d", n)
			}
			if sr.w-sr.r < 5+n {
				if 5+n > len(sr.in) {
					// Grow so that the whole message fits.
					grown := make([]byte, max(5+n, 2*len(sr.in)))
					sr.w = copy(grown, sr.in[sr.r:sr.w])
					sr.r = 0
					sr.in = grown
				}
				return nil
			}
			msg := sr.in[sr.r : sr.r+5+n]
			if typ == 'Z' {
				s.readyForQuery(msg[5])
			} else {
				s.parameterStatus(msg[5:])
			}
			sr.out = append(sr.out, msg...)
			sr.r += 5 + n
		default:
			sr.out = append(sr.out, hdr...)
			sr.r += 5
			sr.bodyLeft, sr.skip = n, false
		}
	}
}

// clientRelay is the client → server half of the fast relay (clientLoop for
// raw sockets), built like serverRelay. What may block — waiting at a held
// tenant, moving the session, a server socket that does not take more —
// happens outside the read callback: the callback leaves with the message
// that needs it still unread, and the loop reads on once it is done.
type clientRelay struct {
	s   *session
	src *rawConn // client

	in       []byte
	r, w     int
	bodyLeft int    // body bytes of the current message still to pass on
	out      []byte // for outTo, not yet written
	outTo    *serverConn

	slow    bool  // the message at in[r:] needs beginTx first
	probed  bool  // the last read was the extra one after an incomplete message
	end     bool  // the client sent Terminate
	err     error // why the loop ends (errWrite: the server side failed)
	blocked bool  // the last non-blocking server write left data

	readFn  func(fd uintptr) bool
	writeFn func(fd uintptr) bool
}

// clientLoopFast is clientLoop for a raw client socket.
func (s *session) clientLoopFast(ctx context.Context, c *rawConn) error {
	cr := &clientRelay{s: s, src: c, in: make([]byte, fastRelayBuf), out: make([]byte, 0, fastRelayBuf)}
	cr.readFn = cr.onReadable
	cr.writeFn = cr.onWritable
	// Bytes the startup reader already holds (a client that pipelined).
	if k := s.cr.Buffered(); k > 0 {
		b, _ := s.cr.Peek(k)
		cr.w = copy(cr.in, b)
		s.cr.Discard(cr.w)
		cr.err = cr.process()
	}
	for {
		if cr.err == nil && !cr.slow && !cr.end {
			c.SetReadDeadline(time.Now().Add(eofProbeInterval))
			if err := c.rc.Read(cr.readFn); err != nil && cr.err == nil && !errors.Is(err, os.ErrDeadlineExceeded) {
				cr.err = err
			}
		}
		if len(cr.out) > 0 {
			// The server's socket was full, or a slow step comes: write
			// here, outside the callback, blocking.
			if _, err := cr.outTo.conn.Write(cr.out); err != nil && cr.err == nil {
				cr.err = errWrite{err}
			}
			cr.out = cr.out[:0]
		}
		cr.blocked = false
		if cr.err == nil && cr.slow {
			cr.slow = false
			if err := s.beginTx(ctx); err != nil {
				cr.err = err
			} else {
				// Relay what is buffered before reading more; the output is
				// written by the read callback before it waits, or above.
				cr.err = cr.process()
			}
			continue
		}
		switch {
		case cr.end:
			return nil
		case cr.err != nil:
			var we errWrite
			if errors.As(cr.err, &we) {
				// The server went away; its reader ends the session.
				return nil
			}
			return s.endWithError(cr.err)
		}
	}
}

func (cr *clientRelay) onReadable(fd uintptr) bool {
	for {
		if cr.w == len(cr.in) {
			if cr.r > 0 {
				cr.w = copy(cr.in, cr.in[cr.r:cr.w])
				cr.r = 0
			} else {
				grown := make([]byte, 2*len(cr.in))
				copy(grown, cr.in[:cr.w])
				cr.in = grown
			}
		}
		free := cr.in[cr.w:]
		n, _, e := syscall.RawSyscall(syscall.SYS_READ, fd, uintptr(unsafe.Pointer(&free[0])), uintptr(len(free)))
		switch e {
		case 0:
		case syscall.EINTR:
			continue
		case syscall.EAGAIN:
			return !cr.flush()
		default:
			cr.err = os.NewSyscallError("read", e)
			return true
		}
		if n == 0 {
			cr.err = io.EOF
			return true
		}
		cr.w += int(n)
		if cr.err = cr.process(); cr.err != nil || cr.slow || cr.end {
			return true
		}
		if int(n) < len(free) {
			if cr.r < cr.w || cr.bodyLeft > 0 {
				// A message is incomplete: read once more, so that a
				// client that closed mid-message is noticed now.
				if !cr.probed {
					cr.probed = true
					continue
				}
			}
			cr.probed = false
			return !cr.flush()
		}
		cr.probed = false
		if len(cr.out) >= fastRelayBuf && !cr.flush() {
			return true
		}
	}
}

// flush writes the pending server output without blocking; false means
// the rest is to be written outside the callback.
func (cr *clientRelay) flush() bool {
	if len(cr.out) == 0 {
		return true
	}
	rc, ok := cr.outTo.conn.(*rawConn)
	if !ok {
		return false
	}
	if err := rc.rc.Write(cr.writeFn); err != nil {
		cr.err = errWrite{err}
		return false
	}
	return !cr.blocked && cr.err == nil
}

func (cr *clientRelay) onWritable(fd uintptr) bool {
	for len(cr.out) > 0 {
		n, _, e := syscall.RawSyscall(syscall.SYS_WRITE, fd, uintptr(unsafe.Pointer(&cr.out[0])), uintptr(len(cr.out)))
		switch e {
		case 0:
			k := copy(cr.out, cr.out[n:])
			cr.out = cr.out[:k]
		case syscall.EINTR:
		case syscall.EAGAIN:
			cr.blocked = true
			return true
		default:
			cr.err = errWrite{os.NewSyscallError("write", e)}
			return true
		}
	}
	return true
}

// process relays the complete messages in the input buffer (and the
// available part of a long one), doing per message what clientLoop and
// forward do. It stops early, with slow set, at a boundary that may wait.
func (cr *clientRelay) process() error {
	s := cr.s
	for {
		if cr.bodyLeft > 0 {
			k := min(cr.w-cr.r, cr.bodyLeft)
			if k == 0 {
				return nil
			}
			cr.out = append(cr.out, cr.in[cr.r:cr.r+k]...)
			cr.r += k
			cr.bodyLeft -= k
			continue
		}
		if cr.w-cr.r < 5 {
			if cr.r == cr.w {
				cr.r, cr.w = 0, 0
			}
			return nil
		}
		hdr := cr.in[cr.r : cr.r+5]
		typ := hdr[0]
		l := int32(binary.BigEndian.Uint32(hdr[1:]))
		if l < 4 {
			return protoErrf(codeProtocolViolation, "invalid message length %d", l)
		}
		n := int(l) - 4
		if !validFrontend(typ) {
			return protoErrf(codeProtocolViolation, "invalid frontend message type %d", typ)
		}
		if n > s.p.cfg.MaxMessage {
			return protoErrf(codeProtocolViolation, "invalid message length %d: more than the limit of %d bytes", n+4, s.p.cfg.MaxMessage)
		}
		if typ == 'X' {
			cr.end = true
			return nil
		}
		whole := (typ == 'P' || typ == 'C' || typ == 'Q') && n <= inspectLimit
		if whole && cr.w-cr.r < 5+n {
			if 5+n > len(cr.in) {
				grown := make([]byte, max(5+n, 2*len(cr.in)))
				cr.w = copy(grown, cr.in[cr.r:cr.w])
				cr.r = 0
				cr.in = grown
			}
			return nil
		}
		s.mu.Lock()
		boundary := !s.mu.inTx
		s.mu.Unlock()
		if boundary && !s.tryBeginTx(time.Now()) {
			cr.slow = true
			return nil
		}
		sc := s.sending(typ)
		if sc != cr.outTo {
			if len(cr.out) > 0 {
				// Cannot happen (a boundary follows answered, flushed
				// messages), but never mix two servers' bytes.
				return errWrite{fmt.Errorf("unflushed output for %s at a server change", addrOf(cr.outTo))}
			}
			cr.outTo = sc
		}
		if whole {
			msg := cr.in[cr.r : cr.r+5+n]
			copy(s.hdr[:], msg[:5])
			s.inspect(typ, msg[5:])
			cr.out = append(cr.out, msg...)
			cr.r += 5 + n
			continue
		}
		cr.out = append(cr.out, hdr...)
		cr.r += 5
		cr.bodyLeft = n
	}
}
