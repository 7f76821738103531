//go:build linux

package proxy

import (
	"bytes"
	"errors"
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
	a, _ := tcpPair(t)
	if _, ok := fastConn(a).(*rawConn); !ok {
		t.Fatalf("fastConn(%T) did not wrap a TCP conn", a)
	}
	p1, p2 := net.Pipe()
	defer p1.Close()
	defer p2.Close()
	if fastConn(p1) != p1 {
		t.Fatal("fastConn wrapped a pipe")
	}
}

// TestRawConnRoundTrip moves 8 MiB each way at once (so writes block on a
// full socket buffer and resume) and checks every byte, then EOF.
func TestRawConnRoundTrip(t *testing.T) {
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

func TestRawConnDeadlineAndClose(t *testing.T) {
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
