package proxy

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/jackc/pgx/v5/pgproto3"
)

// SQLSTATE codes the proxy answers with.
const (
	codeProtocolViolation   = "08P01"
	codeConnectionFailure   = "08006"
	codeCannotConnect       = "08001"
	codeInvalidPassword     = "28P01"
	codeInvalidAuthSpec     = "28000"
	codeInvalidCatalogName  = "3D000"
	codeFeatureNotSupported = "0A000"
	codeAdminShutdown       = "57P01"
	codeQueryCanceled       = "57014"
	codeTooManyConnections  = "53300"
)

// maxStartupPacket is PostgreSQL's MAX_STARTUP_PACKET_LENGTH (bytes).
const maxStartupPacket = 10000

// inspectLimit is the largest message body the proxy reads whole to inspect
// (Parse, Close, Query); larger ones are relayed in chunks, uninspected.
const inspectLimit = 1 << 20

// protoError is a protocol violation by the client: answered with a FATAL
// ErrorResponse carrying Code.
type protoError struct {
	Code string
	Msg  string
}

func (e *protoError) Error() string { return e.Msg }

func protoErrf(code, format string, args ...any) *protoError {
	return &protoError{Code: code, Msg: fmt.Sprintf(format, args...)}
}

// validFrontend reports whether b is a message type a client may send after startup.
func validFrontend(b byte) bool {
	switch b {
	case 'B', 'C', 'd', 'c', 'f', 'D', 'E', 'H', 'F', 'P', 'p', 'Q', 'S', 'X':
		return true
	}
	return false
}

// readHeader reads a regular message header and returns the type and the body length.
func readHeader(r *bufio.Reader, hdr *[5]byte) (typ byte, bodyLen int, err error) {
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return 0, 0, err
	}
	n := int32(binary.BigEndian.Uint32(hdr[1:]))
	if n < 4 {
		return hdr[0], 0, protoErrf(codeProtocolViolation, "invalid message length %d", n)
	}
	return hdr[0], int(n) - 4, nil
}

// readStartup reads one startup-phase packet (length-prefixed, no type byte)
// into buf and returns its body (from the protocol/request code on).
func readStartup(r io.Reader, buf []byte) ([]byte, error) {
	var l [4]byte
	if _, err := io.ReadFull(r, l[:]); err != nil {
		return nil, err
	}
	n := int32(binary.BigEndian.Uint32(l[:]))
	if n < 8 || n > maxStartupPacket {
		return nil, protoErrf(codeProtocolViolation, "invalid length of startup packet: %d", n)
	}
	if cap(buf) < int(n)-4 {
		buf = make([]byte, n-4)
	}
	buf = buf[:n-4]
	if _, err := io.ReadFull(r, buf); err != nil {
		return nil, fmt.Errorf("read startup packet: %w", err)
	}
	return buf, nil
}

// readBody reads a whole message body of length n into buf (grown as needed).
func readBody(r *bufio.Reader, buf []byte, n int) ([]byte, error) {
	if cap(buf) < n {
		buf = make([]byte, n)
	}
	buf = buf[:n]
	_, err := io.ReadFull(r, buf)
	return buf, err
}

// relayBody copies n body bytes from r to w through scratch without allocating.
func relayBody(r *bufio.Reader, w *bufio.Writer, n int) error {
	for n > 0 {
		// Prefer bufio's own buffer: Peek what is there, write it, discard it.
		k := r.Buffered()
		if k == 0 {
			if _, err := r.Peek(1); err != nil {
				return unexpectedEOF(err)
			}
			k = r.Buffered()
		}
		if k > n {
			k = n
		}
		b, err := r.Peek(k)
		if err != nil {
			return unexpectedEOF(err)
		}
		if _, err := w.Write(b); err != nil {
			return errWrite{err}
		}
		r.Discard(k)
		n -= k
	}
	return nil
}

// errWrite marks an error writing to the far side (as opposed to reading).
type errWrite struct{ error }

func (e errWrite) Unwrap() error { return e.error }

func unexpectedEOF(err error) error {
	if errors.Is(err, io.EOF) {
		return io.ErrUnexpectedEOF
	}
	return err
}

// encodeMsg appends the encoding of m to dst.
func encodeMsg(dst []byte, m pgproto3.Message) []byte {
	out, err := m.Encode(dst)
	if err != nil {
		// Only messages with out-of-range fields fail to encode; the proxy
		// builds all of them itself.
		panic(fmt.Sprintf("proxy: encode %T: %v", m, err))
	}
	return out
}

// fatal builds a FATAL ErrorResponse.
func fatal(code, msg string) *pgproto3.ErrorResponse {
	return &pgproto3.ErrorResponse{Severity: "FATAL", SeverityUnlocalized: "FATAL", Code: code, Message: msg}
}

// writeFatal sends a FATAL ErrorResponse to w and flushes; errors are ignored
// (the connection is being closed anyway).
func writeFatal(w io.Writer, code, msg string) {
	b := encodeMsg(nil, fatal(code, msg))
	w.Write(b)
	if f, ok := w.(*bufio.Writer); ok {
		f.Flush()
	}
}

// cstring reads a NUL-terminated string from b, returning it and the rest.
func cstring(b []byte) (string, []byte, bool) {
	for i, c := range b {
		if c == 0 {
			return string(b[:i]), b[i+1:], true
		}
	}
	return "", nil, false
}

// cstringBytes is cstring without the string allocation.
func cstringBytes(b []byte) ([]byte, []byte, bool) {
	for i, c := range b {
		if c == 0 {
			return b[:i], b[i+1:], true
		}
	}
	return nil, nil, false
}

// lingerTimeout and lingerBytes bound how long and how much unread client
// input lingerClose drains after a fatal error (1 s, 1 MiB).
const (
	lingerTimeout = time.Second
	lingerBytes   = 1 << 20
)

// lingerClose half-closes c after a fatal error and drains what the client
// still sends for a moment, so that closing does not reset the connection
// (a reset can destroy the ErrorResponse before the client reads it).
func lingerClose(c net.Conn) {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		cw.CloseWrite()
	}
	c.SetReadDeadline(time.Now().Add(lingerTimeout))
	io.CopyN(io.Discard, c, lingerBytes)
	c.Close()
}
