package router

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"io"
	"net"
	"testing"
	"time"

	"github.com/sluicedb/sluice/keyspace"
	"github.com/sluicedb/sluice/router/analyze"
)

// The routing path's own cost: a session driven by a client script in
// memory against servers that answer at once (fakeServer), so what is
// measured is the router — reading, the analysis cache, the key's
// decoding and lookup, the pipeline's rewriting, relaying — not PostgreSQL.

// fakeServer answers each frontend message as PostgreSQL would a trivial
// statement.
func fakeServer(conn net.Conn) {
	r, w := bufio.NewReader(conn), bufio.NewWriter(conn)
	for {
		m, err := readMsg(r)
		if err != nil {
			return
		}
		switch m.typ {
		case 'P':
			writeMsg(w, '1', nil)
		case 'B':
			writeMsg(w, '2', nil)
		case 'D':
			if m.body[0] == 'S' {
				writeMsg(w, 't', []byte{0, 0})
			}
			writeMsg(w, 'n', nil)
		case 'E':
			writeMsg(w, 'C', []byte("UPDATE 1\x00"))
		case 'C':
			writeMsg(w, '3', nil)
		case 'S':
			writeMsg(w, 'Z', []byte{'I'})
			w.Flush()
		case 'Q':
			writeMsg(w, 'C', []byte("UPDATE 1\x00"))
			writeMsg(w, 'Z', []byte{'I'})
			w.Flush()
		case 'X':
			return
		}
	}
}

type fakeBackends struct{}

func (fakeBackends) Dial(ctx context.Context, part keyspace.Partition, user string, params map[string]string) (*Server, error) {
	c, s := net.Pipe()
	go fakeServer(s)
	return &Server{R: bufio.NewReader(c), W: bufio.NewWriter(c), Close: func() { c.Close() }}, nil
}
func (fakeBackends) Enter(ctx context.Context, part keyspace.Partition) (uint64, error) {
	return 1, nil
}
func (fakeBackends) Leave(part keyspace.Partition, d time.Duration)             {}
func (fakeBackends) Observe(ks string, parts []string, d, queued time.Duration) {}

func benchKeyspace(b testing.TB) *Keyspace {
	ks := &keyspace.Keyspace{Name: "ycsb",
		Partitions: []keyspace.Partition{{Name: "p1", Tenant: "t1"}, {Name: "p2", Tenant: "t2"}},
		Tables:     []keyspace.Table{{Name: "usertable", Kind: keyspace.Sharded, Column: "ycsb_key", Type: keyspace.Int}},
		Plan:       keyspace.PlanSpec{"usertable": {"p1": "[,500000)", "p2": "[500000,)"}}}
	if err := ks.Validate(); err != nil {
		panic(err)
	}
	return &Keyspace{KS: ks, Cache: analyze.NewCache(ks, 1024)}
}

func frame(typ byte, body []byte) []byte { return msg{typ: typ, body: body}.frame() }

// bindInt8 is a Bind of statement name with one binary int8 parameter.
func bindInt8(name string, k int64) []byte {
	var b []byte
	b = append(b, 0)                // unnamed portal
	b = append(b, name...)          // statement
	b = append(b, 0, 0, 1, 0, 1)    // one format: binary
	b = append(b, 0, 1, 0, 0, 0, 8) // one parameter, 8 bytes
	b = binary.BigEndian.AppendUint64(b, uint64(k))
	return append(b, 0, 0) // result formats: none
}

// BenchmarkRoutePrepared: one single-key transaction per op as pgx sends a
// cached prepared statement (Bind, Describe portal, Execute, Sync), keys
// alternating between the two partitions.
func BenchmarkRoutePrepared(b *testing.B) {
	benchSession(b, func(i int) []byte {
		var script []byte
		script = append(script, frame('B', bindInt8("s1", int64(i*7919%1000000)))...)
		script = append(script, frame('D', []byte("P\x00"))...)
		script = append(script, frame('E', []byte("\x00\x00\x00\x00\x00"))...)
		return append(script, frame('S', nil)...)
	}, frame('P', []byte("s1\x00UPDATE usertable SET field0 = 'x' WHERE ycsb_key = $1\x00\x00\x01\x00\x00\x00\x14")))
}

// BenchmarkRouteSimple: one single-key transaction per op as a simple
// Query with the key in its text (psycopg2's way): a parse per new text.
func BenchmarkRouteSimple(b *testing.B) {
	benchSession(b, func(i int) []byte {
		q := []byte("UPDATE usertable SET field0 = 'x' WHERE ycsb_key = ")
		q = append(q, []byte(itoa(i*7919%1000000))...)
		return frame('Q', append(q, 0))
	}, nil)
}

func itoa(n int) string {
	var b [20]byte
	i := len(b)
	for {
		i--
		b[i] = byte('0' + n%10)
		n /= 10
		if n == 0 {
			break
		}
	}
	return string(b[i:])
}

func benchSession(b *testing.B, op func(i int) []byte, prelude []byte) {
	k := benchKeyspace(b)
	var in bytes.Buffer
	if prelude != nil {
		in.Write(prelude)
		in.Write(frame('S', nil))
	}
	for i := 0; i < b.N; i++ {
		in.Write(op(i))
	}
	s := New(Config{User: "app", Keyspace: func() *Keyspace { return k }, Backends: fakeBackends{}},
		bufio.NewReaderSize(&in, 64<<10), bufio.NewWriter(io.Discard))
	if _, err := s.Start(context.Background()); err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	b.ReportAllocs()
	b.ResetTimer()
	if err := s.Serve(context.Background()); err != nil {
		b.Fatal(err)
	}
}
