//go:build linux

package proxy

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"
	"weak"
)

// This file is the relay loop: PgBouncer's design in Go. One goroutine
// drains its own epoll set (level-triggered) of every adopted socket and runs
// the relay callbacks of relay_fast_linux.go itself, so a burst of relayed
// messages costs one wake-up of one goroutine, and then a read and a write
// per message — instead of a goroutine wake-up, park and netpoller round per
// message and direction.
//
// What it measured (2026-11-22/23, 2 shared cores, pgbench 8 clients,
// `sluice bench proxy --compare-loop`: same-run pairs against the goroutine
// relay): select-only throughput level (pairs from −6 % to +15 %, CPU per
// transaction equal), read-write ~5 % more CPU per transaction — a wake-up
// here costs two epoll_waits (the runtime's and this set's) and the
// runtime's edge-triggered registration of the borrowed socket stays. So it
// is off by default (`sluice proxy --loop` turns it on). Nor does it change
// how often the proxy is preempted: sluice's 0.5 preemptions per transaction
// against PgBouncer's 0.2 were measured with PgBouncer daemonized, in a
// scheduler autogroup of its own; in the same session as pgbench (as `sluice
// bench proxy` runs both) PgBouncer is preempted 0.55 times per transaction
// too.
//
// How it waits: the loop's epoll descriptor is itself registered with the
// runtime's netpoller (an os.File), so when nothing is ready the loop
// goroutine parks like any other, and the runtime's scheduler — timers, the
// listener, pgconn's dials, the HTTP API — runs as usual, also with
// GOMAXPROCS 1. The sockets stay owned by their net.Conn (closing it closes
// the socket; the kernel then drops it from the loop's epoll set); the loop
// borrows the descriptor and never uses the net.Conn's reads and writes. The
// runtime's own registration of a borrowed socket (edge-triggered) stays:
// with one P it costs an event the runtime discards when it polls anyway.
//
// What runs where: the relay callbacks run in the loop; anything that may
// block (startup, authentication, a held or moving session, a socket that is
// full, TLS) runs in the session's goroutines as before, which wait for
// their socket through the loop (a channel hand-off) instead of the netpoller.

// loopEvents is how many ready sockets one epoll_wait returns at most.
const loopEvents = 128

// loopYield is how long the loop runs at most before it lets other
// goroutines run (with GOMAXPROCS 1 they wait for it): 1 ms.
const loopYield = time.Millisecond

// relayLoop is the epoll loop. Its methods are safe for concurrent use.
type relayLoop struct {
	epfd int
	ef   *os.File // epfd in the netpoller; referenced so it is never finalized

	mu   sync.Mutex
	fds  map[int32]weak.Pointer[loopFD] // by registration id (the epoll event's data)
	next int32
}

var (
	// theLoop is the loop new sockets are adopted by (nil: none);
	// startedLoop the one EnableRelayLoop started (tests switch between them).
	theLoop     atomic.Pointer[relayLoop]
	startedLoop *relayLoop

	loopOnce sync.Once
	loopErr  error
)

// EnableRelayLoop starts the relay loop: from then on, sockets the proxy
// accepts or dials (plain TCP or Unix) are relayed by it (see the comment at
// the top of loop_linux.go). Calling it again has no further effect.
func EnableRelayLoop() error {
	loopOnce.Do(func() {
		epfd, err := syscall.EpollCreate1(syscall.EPOLL_CLOEXEC)
		if err != nil {
			loopErr = fmt.Errorf("proxy: relay loop: epoll_create1: %w", err)
			return
		}
		if err := syscall.SetNonblock(epfd, true); err != nil {
			syscall.Close(epfd)
			loopErr = fmt.Errorf("proxy: relay loop: %w", err)
			return
		}
		// A non-blocking descriptor: os.NewFile registers it with the netpoller.
		ef := os.NewFile(uintptr(epfd), "sluice-relay-loop")
		rc, err := ef.SyscallConn()
		if err != nil {
			ef.Close()
			loopErr = fmt.Errorf("proxy: relay loop: %w", err)
			return
		}
		l := &relayLoop{epfd: epfd, ef: ef, fds: map[int32]weak.Pointer[loopFD]{}}
		go l.run(rc)
		go l.sweep()
		startedLoop = l
		theLoop.Store(l)
	})
	return loopErr
}

// loopEnv, set to 1, enables the relay loop at package initialisation (to
// run a program's or the tests' proxies in it: SLUICE_PROXY_LOOP=1 go test).
const loopEnv = "SLUICE_PROXY_LOOP"

func init() {
	if os.Getenv(loopEnv) == "1" {
		if err := EnableRelayLoop(); err != nil {
			panic(err)
		}
	}
}

// RelayLoopEnabled reports whether EnableRelayLoop has succeeded.
func RelayLoopEnabled() bool { return theLoop.Load() != nil }

// run is the loop: drain the epoll set without blocking, run the ready
// sockets' callbacks, and park in the netpoller when nothing is ready.
func (l *relayLoop) run(rc syscall.RawConn) {
	var evs [loopEvents]syscall.EpollEvent
	var n int
	// Before parking, poll once more even after a short batch: parking on
	// "the last epoll_wait returned less than it could" would miss a socket
	// registered (EPOLL_CTL_MOD) while still on the set's ready list from
	// that wait — the kernel wakes the set's pollers only when an item
	// joins the list.
	poll := func(fd uintptr) bool {
		for {
			r, _, e := syscall.RawSyscall6(syscall.SYS_EPOLL_PWAIT, fd, uintptr(unsafe.Pointer(&evs[0])), loopEvents, 0, 0, 0)
			switch e {
			case 0:
				n = int(r)
				return n > 0 // none: park until the epoll set is readable
			case syscall.EINTR:
			default:
				panic(fmt.Sprintf("proxy: relay loop: epoll_pwait: %v", e))
			}
		}
	}
	since := time.Now()
	for {
		if err := rc.Read(poll); err != nil {
			panic(fmt.Sprintf("proxy: relay loop: %v", err))
		}
		handed := false
		for i := 0; i < n; i++ {
			l.mu.Lock()
			f := l.fds[evs[i].Fd].Value()
			l.mu.Unlock()
			if f != nil && f.ready(evs[i].Events) {
				handed = true
			}
		}
		if now := time.Now(); handed || now.Sub(since) >= loopYield {
			// Let the goroutines just handed their socket (or anyone else) run.
			runtime.Gosched()
			since = time.Now()
		}
	}
}

// adopt returns c's socket as a loopFD waiting through l. c keeps owning the
// descriptor (closing c closes it) but must not be read or written any more.
func (l *relayLoop) adopt(c net.Conn) (*loopFD, error) {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return nil, errors.New("not a syscall.Conn")
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return nil, err
	}
	f := &loopFD{l: l, rc: rc, orig: c, laddr: c.LocalAddr(), raddr: c.RemoteAddr()}
	for _, sd := range []*loopSide{&f.rd, &f.wr} {
		sd.done = make(chan error, 1)
		sd.invoke = func(fd uintptr) { sd.res = sd.cur(fd) }
	}
	l.mu.Lock()
	for {
		l.next++
		if l.next <= 0 {
			l.next = 1
		}
		if l.fds[l.next].Value() == nil {
			break
		}
	}
	f.id = l.next
	l.fds[f.id] = weak.Make(f)
	l.mu.Unlock()
	// A session that ends by closing the net.Conn itself leaves f unused:
	// forget its id when f is collected.
	runtime.AddCleanup(f, func(id int32) {
		l.mu.Lock()
		if l.fds[id].Value() == nil {
			delete(l.fds, id)
		}
		l.mu.Unlock()
	}, f.id)
	return f, nil
}

// sweep ends, every loopSweep, the waits on sockets whose net.Conn was
// closed directly (Proxy.Close closes the accepted conns): the kernel drops
// such a socket from the epoll set without an event.
func (l *relayLoop) sweep() {
	var fs []*loopFD
	for range time.Tick(loopSweep) {
		fs = fs[:0]
		l.mu.Lock()
		for _, w := range l.fds {
			if f := w.Value(); f != nil {
				fs = append(fs, f)
			}
		}
		l.mu.Unlock()
		for _, f := range fs {
			f.mu.Lock()
			waiting := !f.closing && (f.rd.fn != nil || f.wr.fn != nil)
			f.mu.Unlock()
			if waiting && f.rc.Control(func(uintptr) {}) != nil {
				f.closedUnder()
			}
		}
		clear(fs)
	}
}

// loopSweep is how often the loop looks for sockets closed behind its back: 250 ms.
const loopSweep = 250 * time.Millisecond

// loopSide is one direction's waiter of a loopFD.
type loopSide struct {
	fn       func(fd uintptr) bool // the waiter's callback; nil when none waits
	done     chan error            // capacity 1: the waiter's result
	running  bool                  // the loop is running fn
	err      error                 // set while running: deliver after fn returns
	deadline time.Time
	timer    *time.Timer
	seq      uint64 // wait generation, so a stale timer does not end a later wait

	// invoke calls cur and sets res: a func bound once, so that calling a
	// callback through RawConn.Control allocates nothing.
	invoke func(fd uintptr)
	cur    func(fd uintptr) bool
	res    bool
}

// call runs fn inside the descriptor's RawConn.Control: false, errClosed if
// the net.Conn was closed.
func (f *loopFD) call(s *loopSide, fn func(uintptr) bool) (bool, error) {
	s.cur = fn
	err := f.rc.Control(s.invoke)
	s.cur = nil
	return s.res && err == nil, err
}

// loopFD is a socket waited for by a relayLoop instead of the runtime's
// netpoller. Its wait methods mirror syscall.RawConn: fn is called first in
// the caller's goroutine; when it returns false (EAGAIN) the socket is
// registered and later calls of fn run in the loop's goroutine, until one
// returns true, while the caller waits. fn must therefore never block, and
// may only touch state the waiting caller owns. One waiter per direction at a
// time (one reader and one writer, as the sessions use their sockets).
//
// The descriptor belongs to orig: every use of it happens inside
// orig's RawConn.Control, so orig.Close (from anywhere) waits for a running
// callback and the descriptor is never used after it is closed. Close
// unregisters the socket, ends waits with net.ErrClosed and closes orig.
type loopFD struct {
	l            *relayLoop
	id           int32
	rc           syscall.RawConn // orig's
	orig         net.Conn        // owns the descriptor
	laddr, raddr net.Addr

	mu      sync.Mutex
	closing bool   // closed (by Close, or orig closed directly)
	events  uint32 // registered epoll events; 0 = not registered
	rd, wr  loopSide
}

var errConcurrentWait = errors.New("proxy: two concurrent waits on one direction of a socket")

// waitIO runs fn as syscall.RawConn.Read/Write do: until it returns true.
func (f *loopFD) waitIO(s *loopSide, bit uint32, fn func(fd uintptr) bool) error {
	f.mu.Lock()
	if f.closing {
		f.mu.Unlock()
		return net.ErrClosed
	}
	if !s.deadline.IsZero() && !time.Now().Before(s.deadline) {
		f.mu.Unlock()
		return os.ErrDeadlineExceeded
	}
	f.mu.Unlock()
	done, err := f.call(s, fn)
	if err != nil {
		return net.ErrClosed
	}
	if done {
		return nil
	}
	f.mu.Lock()
	switch {
	case f.closing:
		f.mu.Unlock()
		return net.ErrClosed
	case s.fn != nil:
		f.mu.Unlock()
		return errConcurrentWait
	}
	s.fn = fn
	s.seq++
	if err := f.registerLocked(f.events | bit); err != nil {
		s.fn = nil
		f.mu.Unlock()
		return err
	}
	if !s.deadline.IsZero() {
		f.armLocked(s)
	}
	f.mu.Unlock()
	return <-s.done
}

// registerLocked sets the socket's registered events to ev.
func (f *loopFD) registerLocked(ev uint32) error {
	if ev == f.events {
		return nil
	}
	op := syscall.EPOLL_CTL_MOD
	switch {
	case f.events == 0:
		op = syscall.EPOLL_CTL_ADD
	case ev == 0:
		op = syscall.EPOLL_CTL_DEL
	}
	var err error
	if cerr := f.rc.Control(func(fd uintptr) {
		err = syscall.EpollCtl(f.l.epfd, op, int(fd), &syscall.EpollEvent{Events: ev, Fd: f.id})
	}); cerr != nil {
		return net.ErrClosed
	}
	if err != nil {
		return os.NewSyscallError("epoll_ctl", err)
	}
	f.events = ev
	return nil
}

// armLocked starts the timer that ends s's current wait at its deadline.
func (f *loopFD) armLocked(s *loopSide) {
	if s.timer != nil {
		s.timer.Stop()
		s.timer = nil
	}
	if s.fn == nil || s.deadline.IsZero() {
		return
	}
	d := time.Until(s.deadline)
	if d <= 0 {
		f.endLocked(s, os.ErrDeadlineExceeded)
		return
	}
	seq := s.seq
	s.timer = time.AfterFunc(d, func() {
		f.mu.Lock()
		if s.seq == seq {
			f.endLocked(s, os.ErrDeadlineExceeded)
		}
		f.mu.Unlock()
	})
}

// endLocked ends s's wait with err: now, or when its running callback returns.
func (f *loopFD) endLocked(s *loopSide, err error) {
	if s.fn == nil {
		return
	}
	if s.running {
		if s.err == nil {
			s.err = err
		}
		return
	}
	f.finishLocked(s, err)
}

// finishLocked delivers err to s's waiter and unregisters its direction.
func (f *loopFD) finishLocked(s *loopSide, err error) {
	s.fn = nil
	s.err = nil
	s.seq++
	if s.timer != nil {
		s.timer.Stop()
		s.timer = nil
	}
	if !f.closing {
		ev := f.events
		if s == &f.rd {
			ev &^= syscall.EPOLLIN
		} else {
			ev &^= syscall.EPOLLOUT
		}
		if rerr := f.registerLocked(ev); rerr != nil && err == nil {
			err = rerr
		}
	}
	s.done <- err
}

// ready runs the waiting callbacks for the epoll events ev (in the loop) and
// reports whether a waiter got its result.
func (f *loopFD) ready(ev uint32) (handed bool) {
	f.mu.Lock()
	if f.closing {
		f.mu.Unlock()
		return false
	}
	var rdFn, wrFn func(uintptr) bool
	if ev&(syscall.EPOLLIN|syscall.EPOLLERR|syscall.EPOLLHUP|syscall.EPOLLRDHUP) != 0 && f.rd.fn != nil && !f.rd.running {
		rdFn, f.rd.running = f.rd.fn, true
	}
	if ev&(syscall.EPOLLOUT|syscall.EPOLLERR|syscall.EPOLLHUP) != 0 && f.wr.fn != nil && !f.wr.running {
		wrFn, f.wr.running = f.wr.fn, true
	}
	f.mu.Unlock()
	if rdFn == nil && wrFn == nil {
		return false
	}
	var rdDone, wrDone bool
	var cerr error
	if rdFn != nil {
		rdDone, cerr = f.call(&f.rd, rdFn)
	}
	if wrFn != nil && cerr == nil {
		wrDone, cerr = f.call(&f.wr, wrFn)
	}
	f.mu.Lock()
	if cerr != nil && !f.closing {
		// orig was closed directly.
		f.closing = true
		f.endLocked(&f.rd, net.ErrClosed)
		f.endLocked(&f.wr, net.ErrClosed)
	}
	if rdFn != nil {
		f.rd.running = false
		if rdDone || f.rd.err != nil {
			f.finishLocked(&f.rd, f.rd.err)
			handed = true
		}
	}
	if wrFn != nil {
		f.wr.running = false
		if wrDone || f.wr.err != nil {
			f.finishLocked(&f.wr, f.wr.err)
			handed = true
		}
	}
	f.mu.Unlock()
	return handed
}

// closedUnder ends f's waits after its net.Conn was closed directly.
func (f *loopFD) closedUnder() {
	f.mu.Lock()
	if !f.closing {
		f.closing = true
		f.endLocked(&f.rd, net.ErrClosed)
		f.endLocked(&f.wr, net.ErrClosed)
	}
	f.mu.Unlock()
}

// Close implements net.Conn.
func (f *loopFD) Close() error {
	f.mu.Lock()
	if f.closing {
		f.mu.Unlock()
		return f.orig.Close()
	}
	if f.events != 0 {
		f.registerLocked(0)
	}
	f.closing = true
	f.endLocked(&f.rd, net.ErrClosed)
	f.endLocked(&f.wr, net.ErrClosed)
	f.mu.Unlock()
	f.l.mu.Lock()
	delete(f.l.fds, f.id)
	f.l.mu.Unlock()
	// Waits for a callback running in the loop, if any.
	return f.orig.Close()
}

// CloseWrite shuts down the writing side.
func (f *loopFD) CloseWrite() error {
	var err error
	if cerr := f.rc.Control(func(fd uintptr) { err = syscall.Shutdown(int(fd), syscall.SHUT_WR) }); cerr != nil {
		return net.ErrClosed
	}
	if err != nil {
		return os.NewSyscallError("shutdown", err)
	}
	return nil
}

// Read implements net.Conn (rawConn's Read is the one sessions use).
func (f *loopFD) Read(b []byte) (int, error) {
	if len(b) == 0 {
		return 0, nil
	}
	var n int
	var err error
	werr := f.waitIO(&f.rd, syscall.EPOLLIN, func(fd uintptr) bool {
		for {
			r, _, e := syscall.RawSyscall(syscall.SYS_READ, fd, uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)))
			switch e {
			case 0:
				n = int(r)
				if n == 0 {
					err = io.EOF
				}
				return true
			case syscall.EINTR:
			case syscall.EAGAIN:
				return false
			default:
				err = os.NewSyscallError("read", e)
				return true
			}
		}
	})
	if werr != nil {
		return 0, werr
	}
	return n, err
}

// Write implements net.Conn.
func (f *loopFD) Write(b []byte) (int, error) {
	var n int
	var err error
	werr := f.waitIO(&f.wr, syscall.EPOLLOUT, func(fd uintptr) bool {
		for n < len(b) {
			r, _, e := syscall.RawSyscall(syscall.SYS_WRITE, fd, uintptr(unsafe.Pointer(&b[n])), uintptr(len(b)-n))
			switch e {
			case 0:
				n += int(r)
			case syscall.EINTR:
			case syscall.EAGAIN:
				return false
			default:
				err = os.NewSyscallError("write", e)
				return true
			}
		}
		return true
	})
	if werr != nil {
		return n, werr
	}
	return n, err
}

func (f *loopFD) LocalAddr() net.Addr  { return f.laddr }
func (f *loopFD) RemoteAddr() net.Addr { return f.raddr }

func (f *loopFD) SetDeadline(t time.Time) error {
	if err := f.SetReadDeadline(t); err != nil {
		return err
	}
	return f.SetWriteDeadline(t)
}

func (f *loopFD) SetReadDeadline(t time.Time) error  { return f.setDeadline(&f.rd, t) }
func (f *loopFD) SetWriteDeadline(t time.Time) error { return f.setDeadline(&f.wr, t) }

func (f *loopFD) setDeadline(s *loopSide, t time.Time) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closing {
		return net.ErrClosed
	}
	s.deadline = t
	if s.fn != nil {
		f.armLocked(s)
	}
	return nil
}

// loopRaw is a loopFD as a syscall.RawConn (what rawConn calls).
type loopRaw struct{ f *loopFD }

func (r loopRaw) Control(fn func(fd uintptr)) error { return r.f.rc.Control(fn) }
func (r loopRaw) Read(fn func(fd uintptr) bool) error {
	return r.f.waitIO(&r.f.rd, syscall.EPOLLIN, fn)
}
func (r loopRaw) Write(fn func(fd uintptr) bool) error {
	return r.f.waitIO(&r.f.wr, syscall.EPOLLOUT, fn)
}
