package proxy

import (
	"context"
	"testing"
	"time"
)

// TestReleaseRamp: after a release that moved the tenant, at most the
// limit of transactions is in flight; the next waits until one leaves.
// A release that did not move it, or a limit of 0, starts no ramp, and the
// ramp ends with its window.
func TestReleaseRamp(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	moved := func(limit int, window time.Duration) *tenant {
		tn := newTenant(RouteConfig{Tenant: "t", Addr: "127.0.0.1:1", Database: "d"})
		tn.hold(ctx, time.Second, DefaultHoldGrace, func(*session) bool { return false })
		tn.setRoute("127.0.0.1:2", "", true)
		if _, ramp := tn.release(limit, window); ramp != (limit > 0) {
			t.Fatalf("release(%d, %v) of a moved tenant: ramp %v", limit, window, ramp)
		}
		return tn
	}

	tn := moved(2, time.Hour)
	for i := 0; i < 2; i++ {
		if _, ok := tn.tryEnter(); !ok {
			t.Fatalf("transaction %d of a ramp of 2 was refused", i+1)
		}
	}
	if _, ok := tn.tryEnter(); ok {
		t.Fatal("a third transaction entered a ramp of 2")
	}
	entered := make(chan error, 1)
	go func() {
		r, _, err := tn.enter(ctx)
		if err == nil && r.Addr != "127.0.0.1:2" {
			t.Errorf("entered with route %s, want the new server", r.Addr)
		}
		entered <- err
	}()
	select {
	case err := <-entered:
		t.Fatalf("enter returned (%v) while the ramp's 2 slots were taken", err)
	case <-time.After(50 * time.Millisecond):
	}
	tn.leave()
	if err := <-entered; err != nil {
		t.Fatalf("enter after a slot freed: %v", err)
	}

	// The window ends the ramp.
	tn = moved(1, 20*time.Millisecond)
	tn.tryEnter()
	r, _, err := tn.enter(ctx) // waits out the window at most
	if err != nil || r.Addr != "127.0.0.1:2" {
		t.Fatalf("enter after the window: %v, %v", r, err)
	}

	// No ramp without a move or with limit 0.
	for name, tn := range map[string]*tenant{"limit 0": moved(0, time.Hour), "not moved": func() *tenant {
		tn := newTenant(RouteConfig{Tenant: "t", Addr: "127.0.0.1:1", Database: "d"})
		tn.hold(ctx, time.Second, DefaultHoldGrace, func(*session) bool { return false })
		if _, ramp := tn.release(1, time.Hour); ramp {
			t.Fatal("a release that did not move the tenant started a ramp")
		}
		return tn
	}()} {
		for i := 0; i < 5; i++ {
			if _, ok := tn.tryEnter(); !ok {
				t.Fatalf("%s: transaction %d refused", name, i+1)
			}
		}
	}

	// A waiting transaction gives up with its context.
	tn = moved(1, time.Hour)
	tn.tryEnter()
	cctx, ccancel := context.WithCancel(ctx)
	ccancel()
	if _, _, err := tn.enter(cctx); err == nil {
		t.Fatal("enter with a cancelled context while the ramp is full returned no error")
	}
}
