package proxy

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgproto3"
)

// FuzzClientMessages feeds arbitrary bytes to the proxy as the messages of an
// established session (against a fake server) and checks that the proxy
// answers only with well-formed messages, never crashes, and keeps serving
// new sessions.
//
//	go test ./proxy -run '^$' -fuzz FuzzClientMessages -fuzztime 2m
func FuzzClientMessages(f *testing.F) {
	enc := func(ms ...pgproto3.FrontendMessage) []byte {
		var b []byte
		for _, m := range ms {
			b, _ = m.Encode(b)
		}
		return b
	}
	f.Add(enc(&pgproto3.Query{String: "select 1"}))
	f.Add(enc(&pgproto3.Parse{Name: "s1", Query: "select $1"}, &pgproto3.Bind{PreparedStatement: "s1"},
		&pgproto3.Execute{}, &pgproto3.Sync{}))
	f.Add(enc(&pgproto3.Parse{Query: "select 1"}, &pgproto3.Describe{ObjectType: 'S'}, &pgproto3.Flush{}, &pgproto3.Sync{}))
	f.Add(enc(&pgproto3.Close{ObjectType: 'S', Name: "s1"}, &pgproto3.Sync{}, &pgproto3.Terminate{}))
	f.Add(enc(&pgproto3.FunctionCall{Function: 1}))
	f.Add(enc(&pgproto3.CopyData{Data: []byte("x")}, &pgproto3.CopyDone{}))
	f.Add([]byte("Q\x80\x00\x00\x00"))
	f.Add([]byte("P\x00\x00\x00\x05\x00"))
	f.Add([]byte("C\x00\x00\x00\x05S"))
	f.Add([]byte{0, 0, 0, 0, 0})
	f.Add([]byte("Q\x00\x00\x00\x04S\x00\x00\x00\x04"))

	srv := newFakeServer(f)
	p, err := New(Config{
		Listen: "127.0.0.1:0", APIListen: "127.0.0.1:0", Trust: true, MaxMessage: 1 << 16,
		Routes: []RouteConfig{{Tenant: "acme", Addr: srv.Addr(), Database: "postgres"}},
	})
	if err != nil {
		f.Fatal(err)
	}
	if err := p.Start(context.Background()); err != nil {
		f.Fatal(err)
	}
	defer p.Close()

	f.Fuzz(func(t *testing.T, input []byte) {
		conn, fe := rawSession(t, p.Addr(), "acme")
		defer conn.Close()
		conn.SetDeadline(time.Now().Add(5 * time.Second))
		conn.Write(input)
		conn.(*net.TCPConn).CloseWrite()
		for {
			m, err := fe.Receive()
			if err != nil {
				if ne, ok := err.(net.Error); ok && ne.Timeout() {
					// A message announced longer than what was sent: the proxy
					// waits for the rest, as PostgreSQL does. Not a failure.
					break
				}
				if err.Error() != "unexpected EOF" && err.Error() != "EOF" {
					t.Fatalf("malformed answer from proxy: %v", err)
				}
				break
			}
			if e, ok := m.(*pgproto3.ErrorResponse); ok && e.Code == "" {
				t.Fatalf("ErrorResponse without SQLSTATE: %+v", e)
			}
		}
		// The proxy still serves a fresh session.
		c2, fe2 := rawSession(t, p.Addr(), "acme")
		fe2.Send(&pgproto3.Terminate{})
		fe2.Flush()
		c2.Close()
	})
}
