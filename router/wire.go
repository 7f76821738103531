package router

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// SQLSTATE codes the router answers with.
const (
	codeFeatureNotSupported = "0A000"
	codeProtocolViolation   = "08P01"
	codeConnectionFailure   = "08006"
	codeInvalidTextRepr     = "22P02"
	codeNoOwner             = "22023" // invalid_parameter_value: a key outside the plan
	codeInFailedTx          = "25P02"
	codeUndefinedPStmt      = "26000"
	codeUndefinedCursor     = "34000"
	codeTxResolutionUnknown = "08007"
	codeCannotConnect       = "57P03" // cannot_connect_now: a moving key could not be pulled, or the keyspace is held too long
)

// maxMessage bounds a client or server message the router reads whole.
const maxMessage = 64 << 20

// msg is one protocol message: its type and body (without the length).
type msg struct {
	typ  byte
	body []byte
}

// frame returns the message as sent on the wire.
func (m msg) frame() []byte {
	b := make([]byte, 5+len(m.body))
	b[0] = m.typ
	binary.BigEndian.PutUint32(b[1:], uint32(len(m.body)+4))
	copy(b[5:], m.body)
	return b
}

// readMsg reads one message; the body is freshly allocated. The header is
// read in place (Peek), not into an array that would escape to the heap
// through io.ReadFull's io.Reader: one allocation a message, not two.
func readMsg(r *bufio.Reader) (msg, error) {
	hdr, err := r.Peek(5)
	if err != nil {
		if len(hdr) > 0 {
			err = unexpectedEOF(err)
		}
		return msg{}, err
	}
	typ := hdr[0]
	n := int(int32(binary.BigEndian.Uint32(hdr[1:])))
	r.Discard(5)
	if n < 4 || n-4 > maxMessage {
		return msg{}, &pgError{Severity: "FATAL", Code: codeProtocolViolation, Message: fmt.Sprintf("invalid message length %d", n)}
	}
	body := make([]byte, n-4)
	if _, err := io.ReadFull(r, body); err != nil {
		return msg{}, unexpectedEOF(err)
	}
	return msg{typ: typ, body: body}, nil
}

func unexpectedEOF(err error) error {
	if errors.Is(err, io.EOF) {
		return io.ErrUnexpectedEOF
	}
	return err
}

// writeMsg writes one message. The header is built in w's own free space
// (AvailableBuffer), so it does not escape to the heap.
func writeMsg(w *bufio.Writer, typ byte, body []byte) error {
	hdr := binary.BigEndian.AppendUint32(append(w.AvailableBuffer(), typ), uint32(len(body)+4))
	if _, err := w.Write(hdr); err != nil {
		return err
	}
	_, err := w.Write(body)
	return err
}

// pgError is an ErrorResponse the router sends a client.
type pgError struct {
	Severity string // ERROR or FATAL
	Code     string
	Message  string
	Detail   string
}

func (e *pgError) Error() string { return e.Message }

func errorf(code, format string, args ...any) *pgError {
	return &pgError{Severity: "ERROR", Code: code, Message: fmt.Sprintf(format, args...)}
}

// body encodes e as an ErrorResponse body.
func (e *pgError) body() []byte {
	var b []byte
	field := func(t byte, v string) {
		if v != "" {
			b = append(b, t)
			b = append(b, v...)
			b = append(b, 0)
		}
	}
	field('S', e.Severity)
	field('V', e.Severity)
	field('C', e.Code)
	field('M', e.Message)
	field('D', e.Detail)
	return append(b, 0)
}

// parseError reads an ErrorResponse body's code and message.
func parseError(body []byte) *pgError {
	e := &pgError{}
	for len(body) > 1 {
		t := body[0]
		i := indexZero(body[1:])
		if i < 0 {
			break
		}
		v := string(body[1 : 1+i])
		switch t {
		case 'S':
			e.Severity = v
		case 'C':
			e.Code = v
		case 'M':
			e.Message = v
		case 'D':
			e.Detail = v
		}
		body = body[2+i:]
	}
	return e
}

func indexZero(b []byte) int {
	for i, c := range b {
		if c == 0 {
			return i
		}
	}
	return -1
}

// cstr splits a NUL-terminated string off b.
func cstr(b []byte) (string, []byte, error) {
	i := indexZero(b)
	if i < 0 {
		return "", nil, errMalformed
	}
	return string(b[:i]), b[i+1:], nil
}

var errMalformed = errorf(codeProtocolViolation, "malformed message")

func commandComplete(tag string) msg { return msg{typ: 'C', body: append([]byte(tag), 0)} }

func readyForQuery(status byte) msg { return msg{typ: 'Z', body: []byte{status}} }

// tagCount splits a CommandComplete tag into its prefix and row count
// ("UPDATE 3" → "UPDATE", 3; "INSERT 0 2" → "INSERT 0", 2); ok is false
// for tags without a count.
func tagCount(tag string) (prefix string, n int64, ok bool) {
	i := strings.LastIndexByte(tag, ' ')
	if i < 0 {
		return tag, 0, false
	}
	n, err := strconv.ParseInt(tag[i+1:], 10, 64)
	if err != nil {
		return tag, 0, false
	}
	return tag[:i], n, true
}
