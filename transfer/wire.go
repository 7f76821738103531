package transfer

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"path"
	"strings"
)

// Wire constants (see the package comment for the format).
const (
	magic = "SLUICEXF"
	// Version is the wire format version this package writes. Receivers
	// read every version from 1 to Version (version 1 lacks 'L' frames).
	Version = 2

	// DefaultChunkSize is the payload of one data frame, bytes (256 KiB): large
	// enough that per-frame costs (a limiter wait, a write call, a 5-byte
	// header) are noise, small enough that a rate change acts within one chunk
	// and that a frame's CPU (about half a millisecond to read and send) fits
	// well inside a 10 ms CFS period of a quarter-core server. (1 MiB frames
	// used less CPU per MB, but on the testbed the clients at fixed 40 MB/s
	// were worse with them in three pairs of runs out of three.)
	DefaultChunkSize = 256 << 10
	// MaxChunkSize is the largest data frame a receiver accepts, bytes (4 MiB).
	MaxChunkSize = 4 << 20
	// MaxPathLen is the longest path or document name accepted, bytes.
	MaxPathLen = 4096
	// MaxDocumentSize is the largest end-of-stream document accepted, bytes (1 MiB).
	MaxDocumentSize = 1 << 20

	chunkHeaderLen = 5 // 'C' + u32 length
)

const (
	frameDir      = 'D'
	frameFile     = 'F'
	frameListed   = 'L'
	frameChunk    = 'C'
	frameTrailer  = 'T'
	frameSkipped  = 'S'
	frameDocument = 'M'
	frameAbort    = 'A'
	frameEnd      = 'Z'
)

// Errors callers may branch on. Errors returned by Receive wrap one of them
// with the operation and the file concerned.
var (
	// ErrCorrupt: the stream is not a well-formed transfer stream.
	ErrCorrupt = errors.New("corrupt transfer stream")
	// ErrChecksum: a file's data does not match the checksum its sender computed.
	ErrChecksum = errors.New("checksum mismatch")
	// ErrUnsafePath: the stream names a path outside the destination.
	ErrUnsafePath = errors.New("unsafe path")
	// ErrAborted: the sender gave up and said so in the stream.
	ErrAborted = errors.New("sender aborted")
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// totals is the body of the end frame.
type totals struct {
	Files, Dirs, Bytes, Documents, Skipped uint64
}

func appendPath(b []byte, p string) []byte {
	b = binary.BigEndian.AppendUint16(b, uint16(len(p)))
	return append(b, p...)
}

func appendHeader(b []byte) []byte {
	b = append(b, magic...)
	return binary.BigEndian.AppendUint32(b, Version)
}

func appendDir(b []byte, p string, mode uint32) []byte {
	b = append(b, frameDir)
	b = appendPath(b, p)
	return binary.BigEndian.AppendUint32(b, mode)
}

func appendListed(b []byte, p string, mode uint32) []byte {
	b = append(b, frameListed)
	b = appendPath(b, p)
	return binary.BigEndian.AppendUint32(b, mode)
}

func appendFile(b []byte, p string, mode uint32, hint uint64) []byte {
	b = append(b, frameFile)
	b = appendPath(b, p)
	b = binary.BigEndian.AppendUint32(b, mode)
	return binary.BigEndian.AppendUint64(b, hint)
}

// putChunkHeader writes the 5-byte chunk frame header for n data bytes.
func putChunkHeader(b []byte, n int) {
	b[0] = frameChunk
	binary.BigEndian.PutUint32(b[1:5], uint32(n))
}

func appendTrailer(b []byte, length uint64, crc uint32) []byte {
	b = append(b, frameTrailer)
	b = binary.BigEndian.AppendUint64(b, length)
	return binary.BigEndian.AppendUint32(b, crc)
}

func appendSkipped(b []byte, p string) []byte {
	b = append(b, frameSkipped)
	return appendPath(b, p)
}

func appendDocument(b []byte, name string, data []byte) []byte {
	b = append(b, frameDocument)
	b = appendPath(b, name)
	b = binary.BigEndian.AppendUint32(b, uint32(len(data)))
	b = append(b, data...)
	return binary.BigEndian.AppendUint32(b, crc32.Checksum(data, castagnoli))
}

func appendAbort(b []byte, msg string) []byte {
	if len(msg) > MaxPathLen {
		msg = msg[:MaxPathLen]
	}
	b = append(b, frameAbort)
	return appendPath(b, msg)
}

func appendEnd(b []byte, t totals) []byte {
	b = append(b, frameEnd)
	for _, v := range []uint64{t.Files, t.Dirs, t.Bytes, t.Documents, t.Skipped} {
		b = binary.BigEndian.AppendUint64(b, v)
	}
	return b
}

// checkPath reports whether p may name an entry under the destination: a
// non-empty, clean, relative, slash-separated path without "..", NUL or
// backslash elements.
func checkPath(p string) error {
	switch {
	case p == "" || p == ".":
		return fmt.Errorf("%w: empty path", ErrUnsafePath)
	case strings.HasPrefix(p, "/"):
		return fmt.Errorf("%w: absolute path %q", ErrUnsafePath, p)
	case strings.ContainsAny(p, "\x00\\"):
		return fmt.Errorf("%w: bad character in %q", ErrUnsafePath, p)
	case path.Clean(p) != p:
		return fmt.Errorf("%w: unclean path %q", ErrUnsafePath, p)
	}
	for _, el := range strings.Split(p, "/") {
		if el == ".." {
			return fmt.Errorf("%w: %q leaves the destination", ErrUnsafePath, p)
		}
	}
	return nil
}

// frame is one decoded frame. Fields are set according to typ; data is valid
// only until the next call to decoder.next.
type frame struct {
	typ    byte
	path   string // D, F, L, S, M; message for A
	mode   uint32 // D, F, L
	size   uint64 // F: size hint; T: length
	crc    uint32 // T, M
	data   []byte // C, M
	totals totals // Z
}

// decoder parses a transfer stream. It validates framing and sizes, not the
// order of frames (the receiver's state machine does that).
type decoder struct {
	r   *bufio.Reader
	buf []byte // reused for chunk and document payloads (when alloc is nil)
	// alloc, if set, supplies the buffer for each payload instead of buf;
	// the caller then owns every frame's data.
	alloc func(n int) ([]byte, error)
	hdr   [40]byte
	n     int64 // bytes consumed
}

func newDecoder(r io.Reader) *decoder {
	return &decoder{r: bufio.NewReaderSize(r, 64<<10)}
}

// readFull reads exactly len(b) bytes; a short stream is ErrCorrupt wrapping
// io.ErrUnexpectedEOF.
func (d *decoder) readFull(b []byte) error {
	n, err := io.ReadFull(d.r, b)
	d.n += int64(n)
	if err == io.EOF || err == io.ErrUnexpectedEOF {
		return fmt.Errorf("%w: stream ended early at byte %d: %w", ErrCorrupt, d.n, io.ErrUnexpectedEOF)
	}
	return err
}

func (d *decoder) readHeader() error {
	b := d.hdr[:len(magic)+4]
	if err := d.readFull(b); err != nil {
		return err
	}
	if string(b[:len(magic)]) != magic {
		return fmt.Errorf("%w: bad magic %q", ErrCorrupt, b[:len(magic)])
	}
	if v := binary.BigEndian.Uint32(b[len(magic):]); v < 1 || v > Version {
		return fmt.Errorf("%w: unsupported version %d (want 1..%d)", ErrCorrupt, v, Version)
	}
	return nil
}

func (d *decoder) u16() (uint16, error) {
	if err := d.readFull(d.hdr[:2]); err != nil {
		return 0, err
	}
	return binary.BigEndian.Uint16(d.hdr[:2]), nil
}

func (d *decoder) u32() (uint32, error) {
	if err := d.readFull(d.hdr[:4]); err != nil {
		return 0, err
	}
	return binary.BigEndian.Uint32(d.hdr[:4]), nil
}

func (d *decoder) u64() (uint64, error) {
	if err := d.readFull(d.hdr[:8]); err != nil {
		return 0, err
	}
	return binary.BigEndian.Uint64(d.hdr[:8]), nil
}

func (d *decoder) str() (string, error) {
	n, err := d.u16()
	if err != nil {
		return "", err
	}
	if n > MaxPathLen {
		return "", fmt.Errorf("%w: path of %d bytes exceeds %d", ErrCorrupt, n, MaxPathLen)
	}
	b := make([]byte, n)
	if err := d.readFull(b); err != nil {
		return "", err
	}
	return string(b), nil
}

// payload reads n bytes into the reused buffer.
func (d *decoder) payload(n int) ([]byte, error) {
	if d.alloc != nil {
		b, err := d.alloc(n)
		if err != nil {
			return nil, err
		}
		return b, d.readFull(b)
	}
	if cap(d.buf) < n {
		d.buf = make([]byte, n)
	}
	b := d.buf[:n]
	return b, d.readFull(b)
}

// next reads one frame. At a clean end of input before any frame byte it
// returns ErrCorrupt wrapping io.ErrUnexpectedEOF (a stream must end with 'Z').
func (d *decoder) next() (frame, error) {
	var f frame
	t, err := d.r.ReadByte()
	if err != nil {
		if err == io.EOF {
			return f, fmt.Errorf("%w: stream ended at byte %d without end frame: %w", ErrCorrupt, d.n, io.ErrUnexpectedEOF)
		}
		return f, err
	}
	d.n++
	f.typ = t
	switch t {
	case frameDir, frameFile, frameListed:
		if f.path, err = d.str(); err != nil {
			return f, err
		}
		if f.mode, err = d.u32(); err != nil {
			return f, err
		}
		if t == frameFile {
			f.size, err = d.u64()
		}
	case frameChunk:
		var n uint32
		if n, err = d.u32(); err != nil {
			return f, err
		}
		if n == 0 || n > MaxChunkSize {
			return f, fmt.Errorf("%w: chunk of %d bytes (allowed 1..%d)", ErrCorrupt, n, MaxChunkSize)
		}
		f.data, err = d.payload(int(n))
	case frameTrailer:
		if f.size, err = d.u64(); err != nil {
			return f, err
		}
		f.crc, err = d.u32()
	case frameSkipped, frameAbort:
		f.path, err = d.str()
	case frameDocument:
		if f.path, err = d.str(); err != nil {
			return f, err
		}
		var n uint32
		if n, err = d.u32(); err != nil {
			return f, err
		}
		if n > MaxDocumentSize {
			return f, fmt.Errorf("%w: document %q of %d bytes exceeds %d", ErrCorrupt, f.path, n, MaxDocumentSize)
		}
		if f.data, err = d.payload(int(n)); err != nil {
			return f, err
		}
		f.crc, err = d.u32()
	case frameEnd:
		for _, p := range []*uint64{&f.totals.Files, &f.totals.Dirs, &f.totals.Bytes, &f.totals.Documents, &f.totals.Skipped} {
			if *p, err = d.u64(); err != nil {
				return f, err
			}
		}
	default:
		return f, fmt.Errorf("%w: unknown frame type 0x%02x at byte %d", ErrCorrupt, t, d.n-1)
	}
	return f, err
}
