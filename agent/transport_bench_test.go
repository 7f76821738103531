package agent

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"testing"
	"time"

	"github.com/sluicedb/sluice/catalog"
	"github.com/sluicedb/sluice/migration"
)

// discardTarget is a migration.Target whose snapshot writer counts and drops
// bytes: the transport benchmark measures the agent-to-agent stream alone.
// Only OpenSnapshot may be called (the embedded Target is nil).
type discardTarget struct{ migration.Target }

var _ migration.Target = discardTarget{}

type countWriter struct{ n int64 }

func (w *countWriter) Write(p []byte) (int, error) { w.n += int64(len(p)); return len(p), nil }
func (w *countWriter) Close() error                { return nil }

func (discardTarget) OpenSnapshot(context.Context, migration.Record) (io.WriteCloser, error) {
	return &countWriter{}, nil
}

// discardAgent starts an agent of cfg whose local target is a
// discardTarget, with target-side migration rec reserved on it.
func discardAgent(tb testing.TB, cfg Config, rec migration.Record) *testAgent {
	tb.Helper()
	rj, _ := json.Marshal(rec)
	ta := startAgent(tb, cfg)
	ta.tgtOnce.Do(func() {})
	ta.tgt = discardTarget{}
	if err := ta.cat.PutMigration(catalog.Migration{ID: rec.ID, TenantID: 1, Role: catalog.Target, Record: rj}); err != nil {
		tb.Fatal(err)
	}
	return ta
}

// BenchmarkSnapshotTransport compares streaming a snapshot to the target over
// the agents' HTTP transport (RemoteTarget → chunked POST → target handler)
// (plain and TLS) with a raw loopback TCP connection into the same target writer (what a
// hijacked connection would cost), 64 KiB writes (the driver's chunk size).
// Report the two MB/s figures as a ratio.
func BenchmarkSnapshotTransport(b *testing.B) {
	const total = 256 << 20
	rec := migration.New("bench1", "1", "src", "bench", migration.Live, time.Now())
	// target starts an agent whose local target discards the stream and
	// returns a RemoteTarget client for it.
	target := func(tls bool) *RemoteTarget {
		cfg := newTestConfig(b, "bench")
		if tls {
			withTLS(b, &cfg)
		}
		return &RemoteTarget{c: discardAgent(b, cfg, rec).c}
	}
	chunk := make([]byte, migration.ChunkBytes)
	stream := func(w io.WriteCloser) {
		for n := 0; n < total; n += len(chunk) {
			if _, err := w.Write(chunk); err != nil {
				b.Fatal(err)
			}
		}
		if err := w.Close(); err != nil {
			b.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name string
		tls  bool
	}{{"http", false}, {"https", true}} {
		rt := target(tc.tls)
		b.Run(tc.name, func(b *testing.B) {
			b.SetBytes(total)
			for i := 0; i < b.N; i++ {
				w, err := rt.OpenSnapshot(context.Background(), rec)
				if err != nil {
					b.Fatal(err)
				}
				stream(w)
			}
		})
	}
	b.Run("tcp", func(b *testing.B) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		defer ln.Close()
		done := make(chan int64)
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				w, _ := discardTarget{}.OpenSnapshot(context.Background(), rec)
				n, _ := io.Copy(w, c)
				w.Close()
				c.Close()
				done <- n
			}
		}()
		b.SetBytes(total)
		for i := 0; i < b.N; i++ {
			c, err := net.Dial("tcp", ln.Addr().String())
			if err != nil {
				b.Fatal(err)
			}
			stream(c.(*net.TCPConn))
			if n := <-done; n != total {
				b.Fatalf("received %d of %d bytes", n, total)
			}
		}
	})
}
