package pgreshard

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/sluicedb/sluice/keyspace"
	"github.com/sluicedb/sluice/reshard"
)

// A chunk stream carries a chunk's rows from its source to its
// destination (CopyOut writes it, Load reads it): every table of the
// chunk, root first, read in one REPEATABLE READ snapshot, as binary COPY.
//
//	magic  "SLUICE-CHUNK 1\n"
//	frame  kind (1 byte), payload length (uint32, big-endian), payload
//	  'T'  a table begins: JSON {"table": name, "columns": [quoted names]}
//	  'D'  binary COPY data of the current table (at most maxData bytes)
//	  'E'  the table ends: JSON {"rows": n, "bytes": b} as the source counted them
//	  'X'  the source failed: the error's text; nothing follows
//	  'Z'  the stream ends: JSON {"tables": n}
//
// A reader fails on anything else: a stream cut short (no 'Z'), a table's
// rows or bytes not those its 'E' frame counts, tables out of the chunk's
// order. Load loads nothing of a stream that fails.
const streamMagic = "SLUICE-CHUNK 1\n"

const (
	frameTable = 'T'
	frameData  = 'D'
	frameEnd   = 'E'
	frameError = 'X'
	frameDone  = 'Z'

	maxData  = 1 << 20  // the largest 'D' payload a writer sends
	maxFrame = 16 << 20 // the largest payload a reader accepts
)

type streamTable struct {
	Table   string   `json:"table"`
	Columns []string `json:"columns"`
}

type streamTableEnd struct {
	Rows  int64 `json:"rows"`
	Bytes int64 `json:"bytes"`
}

type streamDone struct {
	Tables int `json:"tables"`
}

// CopyOut writes chunk c's stream (the format above) to w: one REPEATABLE
// READ READ ONLY transaction on src, each table of c's rows in its ranges,
// the columns an INSERT may set. A failure after the magic is also written
// to w as an 'X' frame when w still takes it. src stays usable unless the
// error is its connection's or ctx's.
func CopyOut(ctx context.Context, src *pgx.Conn, c reshard.Chunk, ks *keyspace.Keyspace, w io.Writer) error {
	tables, err := chunkTables(ks, c)
	if err != nil {
		return fmt.Errorf("pgreshard: copy out %s: %w", c, err)
	}
	if _, err := io.WriteString(w, streamMagic); err != nil {
		return fmt.Errorf("pgreshard: copy out %s: %w", c, err)
	}
	err = pgx.BeginTxFunc(ctx, src, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		for _, t := range tables {
			if err := copyOutTable(ctx, tx, t, c, w); err != nil {
				return fmt.Errorf("table %s: %w", t.Name, err)
			}
		}
		return nil
	})
	if err == nil {
		err = writeJSONFrame(w, frameDone, streamDone{Tables: len(tables)})
	}
	if err != nil {
		err = fmt.Errorf("pgreshard: copy out %s: %w", c, err)
		writeFrame(w, frameError, []byte(firstLine(err.Error())))
		return err
	}
	return nil
}

// copyOutTable writes table t's frames: 'T', its rows in chunk c as 'D', 'E'.
func copyOutTable(ctx context.Context, tx pgx.Tx, t keyspace.Table, c reshard.Chunk, w io.Writer) error {
	rows, err := tx.Query(ctx, `SELECT quote_ident(attname) FROM pg_attribute
		WHERE attrelid = to_regclass($1) AND attnum > 0 AND NOT attisdropped AND attgenerated = ''
		ORDER BY attnum`, quoteIdent(t.Name))
	if err != nil {
		return err
	}
	cols, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err == nil && len(cols) == 0 {
		err = fmt.Errorf("no table %s on the source", t.Name)
	}
	if err != nil {
		return err
	}
	if err := writeJSONFrame(w, frameTable, streamTable{Table: t.Name, Columns: cols}); err != nil {
		return err
	}
	fw := &dataFramer{w: w}
	bw := bufio.NewWriterSize(fw, maxData)
	q := fmt.Sprintf("COPY (SELECT %s FROM %s WHERE %s) TO STDOUT (FORMAT binary)",
		strings.Join(cols, ", "), quoteIdent(t.Name), chunkPredicate(t, c))
	tag, err := tx.Conn().PgConn().CopyTo(ctx, bw, q)
	if err == nil {
		err = bw.Flush()
	}
	if err != nil {
		return err
	}
	return writeJSONFrame(w, frameEnd, streamTableEnd{Rows: tag.RowsAffected(), Bytes: fw.n})
}

// dataFramer writes each Write as one 'D' frame (bufio above it makes
// them maxData long), counting the payload.
type dataFramer struct {
	w io.Writer
	n int64
}

func (d *dataFramer) Write(p []byte) (int, error) {
	total := len(p)
	for len(p) > 0 {
		n := min(len(p), maxData)
		if err := writeFrame(d.w, frameData, p[:n]); err != nil {
			return 0, err
		}
		d.n += int64(n)
		p = p[n:]
	}
	return total, nil
}

func writeFrame(w io.Writer, kind byte, payload []byte) error {
	var h [5]byte
	h[0] = kind
	binary.BigEndian.PutUint32(h[1:], uint32(len(payload)))
	if _, err := w.Write(h[:]); err != nil {
		return err
	}
	_, err := w.Write(payload)
	return err
}

func writeJSONFrame(w io.Writer, kind byte, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return writeFrame(w, kind, b)
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	return s
}

// ErrTruncated is a chunk stream that ended before its 'Z' frame.
var ErrTruncated = errors.New("chunk stream cut short")

// streamReader reads a chunk stream frame by frame. Not safe for
// concurrent use.
type streamReader struct {
	r       *bufio.Reader
	started bool
	kind    byte   // the frame read ahead by next (0: none)
	payload []byte // its payload
	tables  int
}

func newStreamReader(r io.Reader) *streamReader {
	return &streamReader{r: bufio.NewReaderSize(r, 64<<10)}
}

// next reads the next frame; an 'X' frame is returned as its error.
func (s *streamReader) next() (byte, []byte, error) {
	if !s.started {
		magic := make([]byte, len(streamMagic))
		if _, err := io.ReadFull(s.r, magic); err != nil {
			return 0, nil, truncated(err)
		}
		if string(magic) != streamMagic {
			return 0, nil, fmt.Errorf("not a chunk stream (starts %q)", magic)
		}
		s.started = true
	}
	var h [5]byte
	if _, err := io.ReadFull(s.r, h[:]); err != nil {
		return 0, nil, truncated(err)
	}
	n := binary.BigEndian.Uint32(h[1:])
	if n > maxFrame {
		return 0, nil, fmt.Errorf("chunk stream: frame %q of %d bytes", h[0], n)
	}
	if cap(s.payload) < int(n) {
		s.payload = make([]byte, n)
	}
	p := s.payload[:n]
	if _, err := io.ReadFull(s.r, p); err != nil {
		return 0, nil, truncated(err)
	}
	switch h[0] {
	case frameError:
		return 0, nil, fmt.Errorf("source: %s", p)
	case frameTable, frameData, frameEnd, frameDone:
		return h[0], p, nil
	}
	return 0, nil, fmt.Errorf("chunk stream: unknown frame %q", h[0])
}

func truncated(err error) error {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return ErrTruncated
	}
	return err
}

// table reads the 'T' frame of the next table.
func (s *streamReader) table() (streamTable, error) {
	var h streamTable
	kind, p, err := s.next()
	if err != nil {
		return h, err
	}
	if kind != frameTable {
		return h, fmt.Errorf("chunk stream: frame %q where a table begins", kind)
	}
	if err := json.Unmarshal(p, &h); err != nil {
		return h, fmt.Errorf("chunk stream: table header: %w", err)
	}
	s.tables++
	return h, nil
}

// done reads the 'Z' frame and checks it counts the tables read.
func (s *streamReader) done() error {
	kind, p, err := s.next()
	if err != nil {
		return err
	}
	var d streamDone
	if kind != frameDone || json.Unmarshal(p, &d) != nil {
		return fmt.Errorf("chunk stream: frame %q where it ends", kind)
	}
	if d.Tables != s.tables {
		return fmt.Errorf("chunk stream: %d tables read, the source sent %d", s.tables, d.Tables)
	}
	return nil
}

// tableData reads the current table's 'D' frames as one stream, ending
// (io.EOF) at its 'E' frame, which it keeps in end.
type tableData struct {
	s    *streamReader
	rest []byte
	n    int64
	end  *streamTableEnd
	err  error // the stream's failure (COPY reports it as its own)
}

func (d *tableData) Read(p []byte) (int, error) {
	for len(d.rest) == 0 {
		if d.end != nil {
			return 0, io.EOF
		}
		kind, payload, err := d.s.next()
		if err == nil && kind != frameData && kind != frameEnd {
			err = fmt.Errorf("chunk stream: frame %q inside a table", kind)
		}
		if err != nil {
			d.err = err
			return 0, err
		}
		switch kind {
		case frameData:
			d.rest = payload
		case frameEnd:
			var e streamTableEnd
			if err := json.Unmarshal(payload, &e); err != nil {
				d.err = fmt.Errorf("chunk stream: table end: %w", err)
				return 0, d.err
			}
			d.end = &e
		}
	}
	n := copy(p, d.rest)
	d.rest = d.rest[n:]
	d.n += int64(n)
	return n, nil
}
