package proxy

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgproto3"
)

// TestRelayLargeAndAsync drives both relays (raw sockets without TLS, bufio
// with TLS) through the cases a round-trip benchmark never shows: messages
// larger than the 16 KiB buffers and than the 1 MiB inspection limit, in
// both directions; COPY both ways; a client socket that fills up (a 4 MiB
// row); pipelined batches (many messages per read); ParameterStatus after
// SET; and an asynchronous NOTIFY delivered to an idle session.
func TestRelayLargeAndAsync(t *testing.T) {
	srv := newServer(t)
	cert, key := writeCert(t)
	p := startProxy(t, srv, func(c *Config) { c.TLSCert, c.TLSKey = cert, key })
	for _, ssl := range []string{"disable", "require"} {
		t.Run("sslmode-"+ssl, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			conn, err := pgx.Connect(ctx, proxyURL(p, "acme", ssl))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close(ctx)

			// Parameters of 40 KiB (one message > the buffers) and 3 MiB
			// (> the inspection limit), extended and simple protocol.
			for _, size := range []int{40 << 10, 3 << 20} {
				big := strings.Repeat("x", size)
				var n int
				if err := conn.QueryRow(ctx, "select length($1::text)", big).Scan(&n); err != nil || n != size {
					t.Fatalf("extended, %d bytes: got %d, %v", size, n, err)
				}
				if err := conn.QueryRow(ctx, "select length('"+big+"')", pgx.QueryExecModeSimpleProtocol).Scan(&n); err != nil || n != size {
					t.Fatalf("simple, %d bytes: got %d, %v", size, n, err)
				}
			}
			// A 4 MiB row back.
			var s string
			if err := conn.QueryRow(ctx, "select repeat('y', 4 << 20)").Scan(&s); err != nil || len(s) != 4<<20 || strings.Trim(s, "y") != "" {
				t.Fatalf("4 MiB row: %d bytes, %v", len(s), err)
			}

			// COPY in (many CopyData messages) and out.
			if _, err := conn.Exec(ctx, "drop table if exists relay_t; create table relay_t (id int, v text)"); err != nil {
				t.Fatal(err)
			}
			const rows = 20000
			src := make([][]any, rows)
			for i := range src {
				src[i] = []any{int32(i), strings.Repeat("v", i%200)}
			}
			n, err := conn.CopyFrom(ctx, pgx.Identifier{"relay_t"}, []string{"id", "v"}, pgx.CopyFromRows(src))
			if err != nil || n != rows {
				t.Fatalf("copy from: %d rows, %v", n, err)
			}
			var out bytes.Buffer
			tag, err := conn.PgConn().CopyTo(ctx, &out, "copy relay_t to stdout")
			if err != nil || tag.RowsAffected() != rows {
				t.Fatalf("copy to: %v, %v", tag, err)
			}
			if lines := bytes.Count(out.Bytes(), []byte("\n")); lines != rows {
				t.Fatalf("copy to: %d lines", lines)
			}

			// A pipelined batch: 200 queries sent at once.
			b := &pgx.Batch{}
			for i := 0; i < 200; i++ {
				b.Queue("select $1::int * 2", i)
			}
			br := conn.SendBatch(ctx, b)
			for i := 0; i < 200; i++ {
				var v int
				if err := br.QueryRow().Scan(&v); err != nil || v != 2*i {
					t.Fatalf("batch item %d: %d, %v", i, v, err)
				}
			}
			if err := br.Close(); err != nil {
				t.Fatal(err)
			}

			// ParameterStatus: the client sees the new value, and so does the
			// proxy's session state (restored at a move).
			if _, err := conn.Exec(ctx, "set application_name = 'relay-test'"); err != nil {
				t.Fatal(err)
			}
			if got := conn.PgConn().ParameterStatus("application_name"); got != "relay-test" {
				t.Fatalf("client's application_name %q", got)
			}
			if !sessionParamSeen(p, "application_name", "relay-test") {
				t.Fatal("the proxy did not record the ParameterStatus")
			}

			// NOTIFY to an idle session.
			if _, err := conn.Exec(ctx, "listen relay_ch"); err != nil {
				t.Fatal(err)
			}
			other, err := pgx.Connect(ctx, proxyURL(p, "acme", "disable"))
			if err != nil {
				t.Fatal(err)
			}
			defer other.Close(ctx)
			if _, err := other.Exec(ctx, "notify relay_ch, 'hello'"); err != nil {
				t.Fatal(err)
			}
			wctx, wcancel := context.WithTimeout(ctx, 30*time.Second)
			defer wcancel()
			nt, err := conn.WaitForNotification(wctx)
			if err != nil || nt.Payload != "hello" {
				t.Fatalf("notification: %+v, %v", nt, err)
			}
			// Still in step after all that.
			var v int
			if err := conn.QueryRow(ctx, "select 7").Scan(&v); err != nil || v != 7 {
				t.Fatalf("final query: %d, %v", v, err)
			}
		})
	}
}

// sessionParamSeen reports whether some session of p has parameter k = v.
func sessionParamSeen(p *Proxy, k, v string) bool {
	p.sessMu.Lock()
	defer p.sessMu.Unlock()
	for _, s := range p.sessions {
		s.mu.Lock()
		got := s.mu.params[k]
		s.mu.Unlock()
		if got == v {
			return true
		}
	}
	return false
}

// TestRelaySlowReader: a client that asks for a 16 MiB row and reads it
// only later fills every socket buffer between it and the server, so the
// relay's writes to it must wait (and resume) — then all bytes arrive.
func TestRelaySlowReader(t *testing.T) {
	srv := newServer(t)
	p := startProxy(t, srv, func(c *Config) { c.Trust = true })
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(time.Minute))
	sm, _ := (&pgproto3.StartupMessage{ProtocolVersion: pgproto3.ProtocolVersion30,
		Parameters: map[string]string{"user": "postgres", "database": "acme"}}).Encode(nil)
	if _, err := c.Write(sm); err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(c)
	untilReady := func() (dataBytes int) {
		var hdr [5]byte
		for {
			if _, err := io.ReadFull(r, hdr[:]); err != nil {
				t.Fatal(err)
			}
			n := int(binary.BigEndian.Uint32(hdr[1:])) - 4
			if _, err := r.Discard(n); err != nil {
				t.Fatal(err)
			}
			switch hdr[0] {
			case 'E':
				t.Fatal("error response")
			case 'D':
				dataBytes += n
			case 'Z':
				return dataBytes
			}
		}
	}
	untilReady()
	const size = 16 << 20
	q, _ := (&pgproto3.Query{String: fmt.Sprintf("select repeat('z', %d)", size)}).Encode(nil)
	if _, err := c.Write(q); err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond) // let the buffers fill
	// DataRow body: column count (2) + length (4) + the value.
	if got := untilReady(); got != 2+4+size {
		t.Fatalf("DataRow bytes %d, want %d", got, 2+4+size)
	}

	// The other way: the server sleeps while the client pipelines 2×8 MiB
	// of queries behind, so the relay's writes to the server must wait.
	var batch []byte
	batch, _ = (&pgproto3.Query{String: "select pg_sleep(0.5)"}).Encode(batch)
	lit := strings.Repeat("w", 8<<20)
	for i := 0; i < 2; i++ {
		batch, _ = (&pgproto3.Query{String: "select length('" + lit + "')"}).Encode(batch)
	}
	werr := make(chan error, 1)
	go func() {
		_, err := c.Write(batch)
		werr <- err
	}()
	for i := 0; i < 3; i++ {
		untilReady()
	}
	if err := <-werr; err != nil {
		t.Fatal(err)
	}
}

// TestClientHalfClose: a client that sends (part of) a message together with
// its end of stream is noticed — the proxy ends the session and closes the
// connection — instead of waiting for more forever. (The raw relay learns of
// such an end only by reading again; see relay_fast_linux.go.)
func TestClientHalfClose(t *testing.T) {
	srv := newFakeServer(t)
	p, err := New(Config{Listen: "127.0.0.1:0", APIListen: "127.0.0.1:0", Trust: true,
		Routes: []RouteConfig{{Tenant: "acme", Addr: srv.Addr(), Database: "postgres"}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	query, _ := (&pgproto3.Query{String: "select 1"}).Encode(nil)
	for _, tc := range []struct {
		name  string
		input []byte
	}{
		{"partial-header", []byte("Q\x00")},
		{"partial-body", query[:len(query)-3]},
		{"complete-query", query},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, fe := rawSession(t, p.Addr(), "acme")
			defer c.Close()
			c.SetDeadline(time.Now().Add(8 * time.Second))
			if _, err := c.Write(tc.input); err != nil {
				t.Fatal(err)
			}
			c.(*net.TCPConn).CloseWrite()
			for {
				_, err := fe.Receive()
				if err == nil {
					continue
				}
				if ne, ok := err.(net.Error); ok && ne.Timeout() {
					t.Fatal("the proxy kept the half-closed session open")
				}
				return // EOF: closed
			}
		})
	}
}
