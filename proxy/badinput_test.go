package proxy

import (
	"context"
	"encoding/binary"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgproto3"
)

// rawSession dials the proxy and completes a trusted startup for tenant
// alias db, returning the connection and a frontend reading it.
func rawSession(t testing.TB, addr, db string) (net.Conn, *pgproto3.Frontend) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	c.SetDeadline(time.Now().Add(10 * time.Second))
	sm := &pgproto3.StartupMessage{ProtocolVersion: pgproto3.ProtocolVersion30, Parameters: map[string]string{"user": "postgres", "database": db}}
	b, _ := sm.Encode(nil)
	if _, err := c.Write(b); err != nil {
		t.Fatal(err)
	}
	fe := pgproto3.NewFrontend(c, c)
	for {
		m, err := fe.Receive()
		if err != nil {
			t.Fatalf("startup: %v", err)
		}
		switch m := m.(type) {
		case *pgproto3.ReadyForQuery:
			return c, fe
		case *pgproto3.ErrorResponse:
			t.Fatalf("startup: %s %s", m.Code, m.Message)
		}
	}
}

// expectError reads until an ErrorResponse (returned) or EOF (nil).
func expectError(t testing.TB, fe *pgproto3.Frontend) *pgproto3.ErrorResponse {
	t.Helper()
	for {
		m, err := fe.Receive()
		if err != nil {
			return nil
		}
		if e, ok := m.(*pgproto3.ErrorResponse); ok {
			cp := *e
			return &cp
		}
	}
}

func msg(typ byte, length uint32, body []byte) []byte {
	b := []byte{typ, 0, 0, 0, 0}
	binary.BigEndian.PutUint32(b[1:], length)
	return append(b, body...)
}

func startupPacket(code uint32, extra []byte) []byte {
	b := make([]byte, 8, 8+len(extra))
	binary.BigEndian.PutUint32(b, uint32(8+len(extra)))
	binary.BigEndian.PutUint32(b[4:], code)
	return append(b, extra...)
}

// TestBadInput sends malformed input of many kinds; each gets the right
// ErrorResponse (where the protocol allows one), and a session opened
// before them keeps working throughout.
func TestBadInput(t *testing.T) {
	srv := newServer(t)
	p := startProxy(t, srv, func(c *Config) {
		c.Trust = true // clients need no password; the proxy still logs in to the server with Users' password
		c.MaxMessage = 1 << 20
	})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	bystander, err := pgx.Connect(ctx, proxyURL(p, "acme", "disable"))
	if err != nil {
		t.Fatal(err)
	}
	defer bystander.Close(ctx)
	alive := func() {
		t.Helper()
		var n int
		if err := bystander.QueryRow(ctx, "select 1").Scan(&n); err != nil || n != 1 {
			t.Fatalf("bystander session broken: %v", err)
		}
	}

	afterStartup := []struct {
		name  string
		input []byte
		code  string
		text  string
	}{
		{"garbage type", []byte("\x01\x02\x03\x04\x05hello"), "08P01", "invalid frontend message type"},
		{"length 2^31", msg('Q', 1<<31, nil), "08P01", "invalid message length"},
		{"length below 4", msg('Q', 3, nil), "08P01", "invalid message length"},
		{"oversized", msg('Q', 2<<20, []byte("select 1")), "08P01", "more than the limit"},
	}
	for _, c := range afterStartup {
		t.Run(c.name, func(t *testing.T) {
			conn, fe := rawSession(t, p.Addr(), "acme")
			defer conn.Close()
			conn.Write(c.input)
			e := expectError(t, fe)
			if e == nil || e.Code != c.code || !strings.Contains(e.Message, c.text) {
				t.Fatalf("got %+v, want %s %q", e, c.code, c.text)
			}
			// The proxy closes the session after a protocol violation.
			if _, err := fe.Receive(); err == nil {
				t.Fatal("session still open after protocol violation")
			}
			alive()
		})
	}

	startup := []struct {
		name  string
		input []byte
		code  string
	}{
		{"garbage startup", []byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"), "08P01"},
		{"startup too long", startupPacket(196608, make([]byte, 20000)), "08P01"},
		{"protocol 2.0", startupPacket(2<<16, []byte("user\x00postgres\x00\x00")), "0A000"},
		{"startup without user", startupPacket(196608, []byte("database\x00acme\x00\x00")), "28000"},
		{"unknown database", startupPacket(196608, []byte("user\x00postgres\x00database\x00nope\x00\x00")), "3D000"},
		{"unterminated parameters", startupPacket(196608, []byte("user\x00postgres")), "08P01"},
		{"SSL then plaintext smuggled", append(startupPacket(80877103, nil), msg('Q', 13, []byte("select 1\x00"))...), "08P01"},
	}
	for _, c := range startup {
		t.Run(c.name, func(t *testing.T) {
			conn, err := net.Dial("tcp", p.Addr())
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			conn.SetDeadline(time.Now().Add(10 * time.Second))
			conn.Write(c.input)
			data, _ := io.ReadAll(conn)
			i := strings.IndexByte(string(data), 'E')
			if i < 0 {
				t.Fatalf("no ErrorResponse in %q", data)
			}
			var e pgproto3.ErrorResponse
			if err := e.Decode(data[i+5:]); err != nil || e.Code != c.code {
				t.Fatalf("got %q (%v), want SQLSTATE %s", data, err, c.code)
			}
			alive()
		})
	}

	t.Run("SSL refused then plaintext", func(t *testing.T) {
		conn, err := net.Dial("tcp", p.Addr())
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		conn.SetDeadline(time.Now().Add(10 * time.Second))
		conn.Write(startupPacket(80877103, nil))
		var one [1]byte
		if _, err := io.ReadFull(conn, one[:]); err != nil || one[0] != 'N' {
			t.Fatalf("SSLRequest answer %q %v, want N", one, err)
		}
		sm := &pgproto3.StartupMessage{ProtocolVersion: pgproto3.ProtocolVersion30, Parameters: map[string]string{"user": "postgres", "database": "acme"}}
		b, _ := sm.Encode(nil)
		conn.Write(b)
		fe := pgproto3.NewFrontend(conn, conn)
		for {
			m, err := fe.Receive()
			if err != nil {
				t.Fatal(err)
			}
			if _, ok := m.(*pgproto3.ReadyForQuery); ok {
				break
			}
		}
		fe.Send(&pgproto3.Query{String: "select 1"})
		fe.Flush()
		for {
			m, err := fe.Receive()
			if err != nil {
				t.Fatal(err)
			}
			if _, ok := m.(*pgproto3.ReadyForQuery); ok {
				break
			}
		}
	})

	t.Run("channel binding demanded", func(t *testing.T) {
		p2 := startProxy(t, srv, nil)
		conn, err := net.Dial("tcp", p2.Addr())
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		conn.SetDeadline(time.Now().Add(10 * time.Second))
		fe := pgproto3.NewFrontend(conn, conn)
		fe.Send(&pgproto3.StartupMessage{ProtocolVersion: pgproto3.ProtocolVersion30, Parameters: map[string]string{"user": "postgres", "database": "acme"}})
		fe.Flush()
		m, err := fe.Receive()
		if err != nil {
			t.Fatal(err)
		}
		sasl, ok := m.(*pgproto3.AuthenticationSASL)
		if !ok || len(sasl.AuthMechanisms) != 1 || sasl.AuthMechanisms[0] != "SCRAM-SHA-256" {
			t.Fatalf("offered %+v, want only SCRAM-SHA-256", m)
		}
		fe.Send(&pgproto3.SASLInitialResponse{AuthMechanism: "SCRAM-SHA-256", Data: []byte("p=tls-server-end-point,,n=,r=abc")})
		fe.Flush()
		e := expectError(t, fe)
		if e == nil || e.Code != "08P01" {
			t.Fatalf("got %+v, want 08P01", e)
		}
		alive()
	})

	alive()
}
