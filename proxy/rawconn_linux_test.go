//go:build linux

package proxy

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"testing"
	"time"
)

// tcpPair returns two ends of a loopback TCP connection.
func tcpPair(t *testing.T) (a, b net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	ch := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		ch <- c
	}()
	a, err = net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	b = <-ch
	if b == nil {
		t.Fatal("accept failed")
	}
	t.Cleanup(func() { a.Close(); b.Close() })
	return a, b
}

func TestRawConnIsUsedForTCP(t *testing.T) {
	bothRelays(t, func(t *testing.T) {
		a, _ := tcpPair(t)
		rc, ok := fastConn(a).(*rawConn)
		if !ok {
			t.Fatalf("fastConn(%T) did not wrap a TCP conn", a)
		}
		if rc.loop != (theLoop.Load() != nil) {
			t.Fatalf("rawConn.loop = %v with the loop %v", rc.loop, theLoop.Load() != nil)
		}
	})
	p1, p2 := net.Pipe()
	defer p1.Close()
	defer p2.Close()
	if fastConn(p1) != p1 {
		t.Fatal("fastConn wrapped a pipe")
	}
}

// TestRawConnRoundTrip moves 8 MiB each way at once (so writes block on a
// full socket buffer and resume) and checks every byte, then EOF.
func TestRawConnRoundTrip(t *testing.T) { bothRelays(t, testRawConnRoundTrip) }

func testRawConnRoundTrip(t *testing.T) {
	a0, b0 := tcpPair(t)
	a, b := fastConn(a0), fastConn(b0)
	data := make([]byte, 8<<20)
	for i := range data {
		data[i] = byte(i * 7)
	}
	errc := make(chan error, 2)
	for _, c := range []net.Conn{a, b} {
		go func(c net.Conn) {
			_, err := c.Write(data)
			if err == nil {
				err = c.(interface{ CloseWrite() error }).CloseWrite()
			}
			errc <- err
		}(c)
	}
	for _, c := range []net.Conn{a, b} {
		got, err := io.ReadAll(c)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, data) {
			t.Fatalf("received %d bytes, not the 8 MiB sent", len(got))
		}
	}
	for range 2 {
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
	}
}

func TestRawConnDeadlineAndClose(t *testing.T) { bothRelays(t, testRawConnDeadlineAndClose) }

func testRawConnDeadlineAndClose(t *testing.T) {
	a0, _ := tcpPair(t)
	a := fastConn(a0)
	a.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
	var buf [16]byte
	if _, err := a.Read(buf[:]); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read past deadline: %v, want os.ErrDeadlineExceeded", err)
	}
	a.SetReadDeadline(time.Time{})
	done := make(chan error, 1)
	go func() {
		_, err := a.Read(buf[:])
		done <- err
	}()
	time.Sleep(10 * time.Millisecond)
	a.Close()
	if err := <-done; !errors.Is(err, net.ErrClosed) {
		t.Fatalf("read on a closed conn: %v, want net.ErrClosed", err)
	}
	if _, err := a.Write([]byte("x")); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("write on a closed conn: %v, want net.ErrClosed", err)
	}
}

// useRelayLoop makes sockets adopted from now until the end of the test go
// to the relay loop (on) or the runtime's netpoller (off).
func useRelayLoop(tb testing.TB, on bool) {
	tb.Helper()
	prev := theLoop.Load()
	if err := EnableRelayLoop(); err != nil {
		tb.Fatal(err)
	}
	if on {
		theLoop.Store(startedLoop)
	} else {
		theLoop.Store(nil)
	}
	tb.Cleanup(func() { theLoop.Store(prev) })
}

// bothRelays runs f with the netpoller and with the relay loop.
func bothRelays(t *testing.T, f func(t *testing.T)) {
	for _, on := range []bool{false, true} {
		name := "netpoller"
		if on {
			name = "loop"
		}
		t.Run(name, func(t *testing.T) {
			useRelayLoop(t, on)
			f(t)
		})
	}
}

const relayLoopSupported = true

// TestLoopDirectClose: closing a socket's net.Conn itself (as Proxy.Close
// does with accepted conns), not the loop's wrapper, still ends a read
// waiting in the loop (the sweep notices), with net.ErrClosed.
func TestLoopDirectClose(t *testing.T) {
	useRelayLoop(t, true)
	a0, _ := tcpPair(t)
	a := fastConn(a0)
	done := make(chan error, 1)
	go func() {
		var buf [16]byte
		_, err := a.Read(buf[:])
		done <- err
	}()
	time.Sleep(10 * time.Millisecond)
	a0.Close()
	select {
	case err := <-done:
		if !errors.Is(err, net.ErrClosed) {
			t.Fatalf("read after a direct close: %v, want net.ErrClosed", err)
		}
	case <-time.After(30 * time.Second): // a hang guard, not a speed bound
		t.Fatal("a read waiting in the loop did not end after its conn was closed")
	}
}

// TestLoopManyConns: 64 connections each do 200 request/response round trips
// through rawConns in the relay loop at once (both ends adopted), so waits
// register and end concurrently; every byte arrives in order.
func TestLoopManyConns(t *testing.T) {
	useRelayLoop(t, true)
	const conns, trips = 64, 200
	errc := make(chan error, conns)
	for i := 0; i < conns; i++ {
		a0, b0 := tcpPair(t)
		a, b := fastConn(a0), fastConn(b0)
		go func() { // echo
			buf := make([]byte, 64)
			for {
				n, err := b.Read(buf)
				if err != nil {
					return
				}
				if _, err := b.Write(buf[:n]); err != nil {
					return
				}
			}
		}()
		go func(i int) {
			var out, in [8]byte
			for k := 0; k < trips; k++ {
				binary.BigEndian.PutUint64(out[:], uint64(i*trips+k))
				if _, err := a.Write(out[:]); err != nil {
					errc <- err
					return
				}
				if _, err := io.ReadFull(a, in[:]); err != nil {
					errc <- err
					return
				}
				if in != out {
					errc <- fmt.Errorf("conn %d trip %d: got %x, sent %x", i, k, in, out)
					return
				}
			}
			errc <- nil
		}(i)
	}
	for i := 0; i < conns; i++ {
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
	}
}
