package proxy

import (
	"bufio"
	"context"
	"encoding/binary"
	"io"
	"net"
	"syscall"
	"testing"

	"github.com/jackc/pgx/v5/pgproto3"
)

// rawClient is a minimal allocation-free client: it writes prepared bytes and
// skips answers up to ReadyForQuery.
type rawClient struct {
	c net.Conn
	r *bufio.Reader
}

func dialRaw(b *testing.B, addr string) *rawClient {
	b.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		b.Fatal(err)
	}
	sm, _ := (&pgproto3.StartupMessage{ProtocolVersion: pgproto3.ProtocolVersion30,
		Parameters: map[string]string{"user": "postgres", "database": "acme"}}).Encode(nil)
	c.Write(sm)
	rc := &rawClient{c: c, r: bufio.NewReaderSize(c, 64<<10)}
	rc.untilReady(b)
	return rc
}

func (rc *rawClient) untilReady(b *testing.B) {
	var hdr [5]byte
	for {
		if _, err := io.ReadFull(rc.r, hdr[:]); err != nil {
			b.Fatal(err)
		}
		n := int(binary.BigEndian.Uint32(hdr[1:])) - 4
		if _, err := rc.r.Discard(n); err != nil {
			b.Fatal(err)
		}
		if hdr[0] == 'E' {
			b.Fatal("error response")
		}
		if hdr[0] == 'Z' {
			return
		}
	}
}

func processCPU() int64 {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return ru.Utime.Nano() + ru.Stime.Nano()
}

// BenchmarkRelay measures one round trip (a transaction) through the proxy
// against a fake server, and the same without the proxy as the baseline; the
// difference in allocs/op is what the proxy allocates per transaction.
//
//	go test ./proxy -run '^$' -bench Relay -benchmem -memprofile mem.out
func BenchmarkRelay(b *testing.B) {
	srv := newFakeServer(b)
	p, err := New(Config{Listen: "127.0.0.1:0", APIListen: "127.0.0.1:0", Trust: true,
		Routes: []RouteConfig{{Tenant: "acme", Addr: srv.Addr(), Database: "postgres"}}})
	if err != nil {
		b.Fatal(err)
	}
	if err := p.Start(context.Background()); err != nil {
		b.Fatal(err)
	}
	defer p.Close()

	simple, _ := (&pgproto3.Query{String: "select 1"}).Encode(nil)
	var ext []byte
	ext, _ = (&pgproto3.Bind{PreparedStatement: "s1", ParameterFormatCodes: []int16{0}, Parameters: [][]byte{[]byte("42")}}).Encode(ext)
	ext, _ = (&pgproto3.Execute{}).Encode(ext)
	ext, _ = (&pgproto3.Sync{}).Encode(ext)
	prep, _ := (&pgproto3.Parse{Name: "s1", Query: "select $1::int"}).Encode(nil)
	prep, _ = (&pgproto3.Sync{}).Encode(prep)

	for _, tc := range []struct {
		name string
		addr string
		msg  []byte
	}{
		{"simple/direct", srv.Addr(), simple},
		{"simple/proxy", p.Addr(), simple},
		{"extended/direct", srv.Addr(), ext},
		{"extended/proxy", p.Addr(), ext},
	} {
		b.Run(tc.name, func(b *testing.B) {
			rc := dialRaw(b, tc.addr)
			defer rc.c.Close()
			rc.c.Write(prep)
			rc.untilReady(b)
			b.ReportAllocs()
			b.ResetTimer()
			cpu0 := processCPU()
			for i := 0; i < b.N; i++ {
				if _, err := rc.c.Write(tc.msg); err != nil {
					b.Fatal(err)
				}
				rc.untilReady(b)
			}
			// CPU time of the whole test process (client, fake server and
			// proxy) per round trip: less noisy than wall time on a shared machine.
			b.ReportMetric(float64(processCPU()-cpu0)/float64(b.N), "cpu-ns/op")
		})
	}
}
