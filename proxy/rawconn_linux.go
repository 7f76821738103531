//go:build linux

package proxy

import (
	"io"
	"net"
	"os"
	"syscall"
	"unsafe"
)

// rawConn is a TCP or Unix socket whose Read and Write make the read(2) and
// write(2) calls with syscall.RawSyscall inside the socket's RawConn, instead
// of the net package's syscall.Syscall. The difference is the runtime's
// entersyscall/exitsyscall pair: on the proxy's hot path (two reads and two
// writes per round trip) entersyscall wakes the runtime's sysmon thread
// whenever the process had gone idle, and sysmon then polls at 20 µs for a
// millisecond — measured at ~12% of the proxy's CPU under pgbench -S. The
// sockets are non-blocking, so these calls never block in the kernel; waiting
// still goes through the runtime's netpoller (RawConn.Read/Write try the call
// first and park on EAGAIN, exactly as net.Conn does, so no readiness edge
// is lost).
//
// Deadlines, Close, CloseWrite and addresses are the wrapped conn's. One
// reader and one writer may run concurrently, as with net.Conn.
type rawConn struct {
	net.Conn
	rc syscall.RawConn

	// Reader state, used only inside Read.
	rbuf   []byte
	rn     int
	rerr   error
	readFn func(fd uintptr) bool // c.doRead, bound once (no allocation per Read)

	// Writer state, used only inside Write.
	wbuf    []byte
	wn      int
	werr    error
	writeFn func(fd uintptr) bool
}

// fastConn wraps c in a rawConn when it is a plain TCP or Unix socket, and
// returns c unchanged otherwise (TLS, pipes in tests).
func fastConn(c net.Conn) net.Conn {
	var sc syscall.Conn
	switch t := c.(type) {
	case *net.TCPConn:
		sc = t
	case *net.UnixConn:
		sc = t
	default:
		return c
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return c
	}
	f := &rawConn{Conn: c, rc: rc}
	f.readFn = f.doRead
	f.writeFn = f.doWrite
	return f
}

func (c *rawConn) Read(b []byte) (int, error) {
	if len(b) == 0 {
		return 0, nil
	}
	c.rbuf, c.rn, c.rerr = b, 0, nil
	err := c.rc.Read(c.readFn)
	c.rbuf = nil
	if err != nil {
		return 0, c.opError("read", err)
	}
	return c.rn, c.rerr
}

func (c *rawConn) doRead(fd uintptr) bool {
	for {
		n, _, e := syscall.RawSyscall(syscall.SYS_READ, fd, uintptr(unsafe.Pointer(&c.rbuf[0])), uintptr(len(c.rbuf)))
		switch e {
		case 0:
			c.rn = int(n)
			if n == 0 {
				c.rerr = io.EOF
			}
			return true
		case syscall.EINTR:
			continue
		case syscall.EAGAIN:
			return false // park in the netpoller until readable
		default:
			c.rerr = c.opError("read", os.NewSyscallError("read", e))
			return true
		}
	}
}

func (c *rawConn) Write(b []byte) (int, error) {
	if len(b) == 0 {
		return 0, nil
	}
	c.wbuf, c.wn, c.werr = b, 0, nil
	err := c.rc.Write(c.writeFn)
	c.wbuf = nil
	if err != nil && c.werr == nil {
		c.werr = c.opError("write", err)
	}
	if c.werr == nil && c.wn < len(b) {
		c.werr = io.ErrShortWrite
	}
	return c.wn, c.werr
}

func (c *rawConn) doWrite(fd uintptr) bool {
	for c.wn < len(c.wbuf) {
		rest := c.wbuf[c.wn:]
		n, _, e := syscall.RawSyscall(syscall.SYS_WRITE, fd, uintptr(unsafe.Pointer(&rest[0])), uintptr(len(rest)))
		switch e {
		case 0:
			c.wn += int(n)
		case syscall.EINTR:
		case syscall.EAGAIN:
			return false // park until writable, then go on
		default:
			c.werr = c.opError("write", os.NewSyscallError("write", e))
			return true
		}
	}
	return true
}

func (c *rawConn) opError(op string, err error) error {
	if _, ok := err.(*net.OpError); ok {
		return err
	}
	return &net.OpError{Op: op, Net: c.LocalAddr().Network(), Source: c.LocalAddr(), Addr: c.RemoteAddr(), Err: err}
}

// CloseWrite shuts down the writing side, as (*net.TCPConn).CloseWrite.
func (c *rawConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}
