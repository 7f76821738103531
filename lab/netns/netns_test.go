package netns

import (
	"context"
	"io"
	"net"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// testNet makes a Net with hosts named names, or skips when this machine
// cannot (not root, no network namespaces).
func testNet(t *testing.T, opt Options, names ...string) (*Net, []*Host) {
	t.Helper()
	if err := Available(); err != nil {
		t.Skip(err)
	}
	n, err := New(opt)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := n.Close(); err != nil {
			t.Error(err)
		}
	})
	var hs []*Host
	for _, name := range names {
		h, err := n.AddHost(name)
		if err != nil {
			t.Fatal(err)
		}
		hs = append(hs, h)
	}
	return n, hs
}

// serve accepts on l and copies what it reads back (an echo), until l closes.
func serve(l net.Listener) {
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		go func() { io.Copy(c, c); c.Close() }()
	}
}

// TestHostsReachEachOther: a listener in host a is reached from host b and
// from this process, and not at the address in the wrong namespace; the
// namespaces are gone after Close.
func TestHostsReachEachOther(t *testing.T) {
	n, hs := testNet(t, Options{}, "a", "b")
	a, b := hs[0], hs[1]
	l, err := a.Listen("tcp", a.Addr+":7000")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go serve(l)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, from := range []string{"b", "root"} {
		var c net.Conn
		if from == "b" {
			c, err = b.DialContext(ctx, "tcp", a.Addr+":7000")
		} else {
			c, err = (&net.Dialer{}).DialContext(ctx, "tcp", a.Addr+":7000")
		}
		if err != nil {
			t.Fatalf("dial from %s: %v", from, err)
		}
		echo(t, c, "hello from "+from)
	}
	// The listener is bound in a: b's own loopback has no such port.
	if c, err := b.DialContext(ctx, "tcp", "127.0.0.1:7000"); err == nil {
		c.Close()
		t.Fatal("a's listener is reachable on b's loopback")
	}
	ns := []string{a.NS, b.NS, n.router}
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	out, _ := exec.Command("ip", "netns", "list").Output()
	for _, x := range ns {
		if strings.Contains(string(out), x) {
			t.Errorf("namespace %s left after Close", x)
		}
	}
}

func echo(t *testing.T, c net.Conn, msg string) {
	t.Helper()
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Write([]byte(msg)); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, len(msg))
	if _, err := io.ReadFull(c, buf); err != nil || string(buf) != msg {
		t.Fatalf("echo: %q, %v", buf, err)
	}
}

// TestLinkDownAndUp: a host cut off is unreachable (a dial times out), and
// a connection opened before the cut carries data again once the link is
// back.
func TestLinkDownAndUp(t *testing.T) {
	_, hs := testNet(t, Options{}, "a", "b")
	a, b := hs[0], hs[1]
	l, err := a.Listen("tcp", a.Addr+":7001")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go serve(l)
	ctx := context.Background()
	before, err := b.DialContext(ctx, "tcp", a.Addr+":7001")
	if err != nil {
		t.Fatal(err)
	}
	if err := a.SetLink(false); err != nil {
		t.Fatal(err)
	}
	dctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	if c, err := b.DialContext(dctx, "tcp", a.Addr+":7001"); err == nil {
		c.Close()
		t.Fatal("dialled a host whose link is down")
	}
	cancel()
	if err := a.SetLink(true); err != nil {
		t.Fatal(err)
	}
	echo(t, before, "after the cut")
}

// TestShapeAndDelay: through a 40 Mbit/s link, 2 MB take at least what
// the rate allows (less the shaper's burst), and with a 20 ms one-way
// delay a TCP handshake takes at least 40 ms. Both are lower bounds the
// shaper and the delay line guarantee, whatever the machine's load.
// The cap is either a's link (Shape) or the path between a and b
// (ShapePath).
func TestShapeAndDelay(t *testing.T) {
	for _, path := range []bool{false, true} {
		name := "link"
		if path {
			name = "path"
		}
		t.Run(name, func(t *testing.T) { shapeAndDelay(t, path) })
	}
}

func shapeAndDelay(t *testing.T, path bool) {
	n, hs := testNet(t, Options{}, "a", "b", "c")
	a, b := hs[0], hs[1]
	shape := func() error { return a.Shape(40) }
	if path {
		shape = func() error { return n.ShapePath(a, b, 40) }
	}
	if err := shape(); err != nil {
		t.Fatal(err)
	}
	const oneWay = 20 * time.Millisecond
	if err := n.Delay(a, b, oneWay, 0, 1); err != nil {
		t.Fatal(err)
	}
	l, err := b.Listen("tcp", b.Addr+":7002")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	done := make(chan int64, 1)
	go func() {
		c, err := l.Accept()
		if err != nil {
			done <- -1
			return
		}
		k, _ := io.Copy(io.Discard, c)
		c.Close()
		done <- k
	}()
	ctx := context.Background()
	start := time.Now()
	c, err := a.DialContext(ctx, "tcp", b.Addr+":7002")
	if err != nil {
		t.Fatal(err)
	}
	if rtt := time.Since(start); rtt < 2*oneWay {
		t.Errorf("handshake took %v, under the round trip of %v", rtt, 2*oneWay)
	}
	const size = 2 << 20
	start = time.Now()
	if _, err := c.Write(make([]byte, size)); err != nil {
		t.Fatal(err)
	}
	c.Close()
	if k := <-done; k != size {
		t.Fatalf("received %d bytes, want %d", k, size)
	}
	took := time.Since(start)
	least := time.Duration(float64(size-(64<<10)) * 8 / 40e6 * float64(time.Second))
	if took < least {
		t.Errorf("2 MiB through a 40 Mbit/s link in %v: the shaper allows no less than %v", took, least)
	}
	st := n.DelayStats()
	if st.Forwarded == 0 || st.Overflow != 0 {
		t.Errorf("delay line: %+v", st)
	}
	t.Logf("2 MiB in %v (%.1f Mbit/s); delay line %+v", took, size*8/took.Seconds()/1e6, st)
}

// TestRemoveStale: namespaces named for a process that is gone are
// removed; those of a live one are not.
func TestRemoveStale(t *testing.T) {
	if err := Available(); err != nil {
		t.Skip(err)
	}
	// A pid far above pid_max is never alive.
	stale := Prefix + "99999999-201-router"
	if err := ip("netns", "add", stale); err != nil {
		t.Fatal(err)
	}
	defer ip("netns", "del", stale)
	n, err := New(Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	out, _ := exec.Command("ip", "netns", "list").Output()
	if strings.Contains(string(out), stale) {
		t.Errorf("stale namespace %s not removed", stale)
	}
	if !strings.Contains(string(out), n.router) {
		t.Errorf("live namespace %s missing", n.router)
	}
}

func TestOptionsAndNames(t *testing.T) {
	if _, err := New(Options{MTU: 100}); err == nil || !strings.Contains(err.Error(), "MTU") {
		t.Errorf("MTU 100: %v", err)
	}
	for _, s := range []string{"", "a b", strings.Repeat("x", 21), "ü"} {
		if validName(s) {
			t.Errorf("%q accepted", s)
		}
	}
}
