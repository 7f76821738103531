package pg

import (
	"bytes"
	"io"
	"math"
	"math/rand/v2"
	"net"
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"
	"time"
)

// echoServer listens on a loopback port and echoes every connection: it
// stands in for the postmaster. Closed when the test ends.
func echoServer(t *testing.T) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { io.Copy(c, c); c.Close() }()
		}
	}()
	return ln
}

// TestWALRelayRelaysBothWays: bytes go through the relay intact in both
// directions, whatever the pace (unlimited, a floor only, a changing
// rate), and Close ends live connections.
func TestWALRelayRelaysBothWays(t *testing.T) {
	ln := echoServer(t)
	var calls atomic.Int64
	rates := []float64{math.Inf(1), 0, 50e6, math.NaN()}
	r, err := StartWALRelay("127.0.0.1", ln.Addr().String(), func() float64 {
		return rates[calls.Add(1)%int64(len(rates))]
	})
	if err != nil {
		t.Fatal(err)
	}
	r.Floor = 20e6
	host, port := r.Addr()
	c, err := net.Dial("tcp", net.JoinHostPort(host, strconv.Itoa(port)))
	if err != nil {
		t.Fatal(err)
	}
	msg := make([]byte, 1<<20)
	for i := range msg {
		msg[i] = byte(rand.IntN(256))
	}
	go func() { c.Write(msg) }()
	got := make([]byte, len(msg))
	if _, err := io.ReadFull(c, got); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, msg) {
		t.Fatal("relayed bytes differ")
	}
	if calls.Load() == 0 {
		t.Fatal("the pace was never read")
	}
	// The relay counts a chunk once its write returned, which may be just
	// after the client read it.
	for deadline := time.Now().Add(10 * time.Second); r.Relayed() != int64(len(msg)); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("Relayed = %d, want the %d bytes echoed back", r.Relayed(), len(msg))
		}
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Read(make([]byte, 1)); err == nil {
		t.Fatal("connection still open after Close")
	}
	c.Close()
}

// TestWALRelayUnpace: a relay paced at 1 byte/s would need days for 1 MiB;
// Unpace lets it through at once — the chunk already waiting is woken — and
// the pacing can be restored.
func TestWALRelayUnpace(t *testing.T) {
	ln := echoServer(t)
	var paced atomic.Int64
	r, err := StartWALRelay("127.0.0.1", ln.Addr().String(), func() float64 { paced.Add(1); return 1 })
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	r.Floor = 1
	host, port := r.Addr()
	c, err := net.Dial("tcp", net.JoinHostPort(host, strconv.Itoa(port)))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	msg := make([]byte, 1<<20)
	go func() { c.Write(msg) }()
	// Wait until the relay has read the pace for a chunk (and so waits on
	// it), then unpace.
	for paced.Load() == 0 {
		runtime.Gosched()
	}
	r.Unpace(true)
	// At 1 byte/s the MiB would take 12 days; a minute is only a guard
	// against hanging until the suite's timeout.
	c.SetReadDeadline(time.Now().Add(time.Minute))
	if _, err := io.ReadFull(c, make([]byte, len(msg))); err != nil {
		t.Fatal(err)
	}
	r.Unpace(false)
	if r.unpaced.Load() {
		t.Fatal("pacing not restored")
	}
}
