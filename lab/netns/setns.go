package netns

import (
	"context"
	"fmt"
	"net"
	"os"
	"runtime"

	"golang.org/x/sys/unix"
)

// inNS runs fn on an OS thread switched into namespace ns, then switches
// the thread back. A socket or tun device made in fn belongs to ns for its
// whole life, whichever thread uses it later. If the thread cannot be
// switched back it is left locked, and Go discards it when fn's goroutine
// ends.
func inNS(ns string, fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := os.Open(fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid()))
		if err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("netns: own namespace: %w", err)
			return
		}
		defer orig.Close()
		target, err := os.Open("/var/run/netns/" + ns)
		if err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("netns: namespace %s: %w", ns, err)
			return
		}
		defer target.Close()
		if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("netns: enter %s: %w", ns, err)
			return
		}
		err = fn()
		if unix.Setns(int(orig.Fd()), unix.CLONE_NEWNET) == nil {
			runtime.UnlockOSThread()
		}
		errc <- err
	}()
	return <-errc
}

// Do runs fn inside h's namespace (see inNS): sockets fn opens stay there.
func (h *Host) Do(fn func() error) error { return inNS(h.NS, fn) }

// Listen listens on h (address "host:port"; "" host = h.Addr).
func (h *Host) Listen(network, address string) (l net.Listener, err error) {
	err = h.Do(func() error {
		l, err = net.Listen(network, address)
		return err
	})
	return l, err
}

// DialContext dials address from inside h.
func (h *Host) DialContext(ctx context.Context, network, address string) (c net.Conn, err error) {
	err = h.Do(func() error {
		var d net.Dialer
		c, err = d.DialContext(ctx, network, address)
		return err
	})
	return c, err
}
