package migration

import (
	"context"
	"testing"
	"time"
)

// TestGateRouter: Hold waits for in-flight transactions, new ones wait while
// held and go to the switched address after Release; a hold whose in-flight
// transactions outlive the deadline says so and stays in place.
func TestGateRouter(t *testing.T) {
	ctx := context.Background()
	g := NewGateRouter("a:1")
	addr, err := g.Enter(ctx) // one transaction in flight
	if err != nil || addr != "a:1" {
		t.Fatalf("Enter = %q, %v", addr, err)
	}
	if _, err := g.Hold(ctx, "t", time.Millisecond); err == nil {
		t.Fatal("Hold returned nil with a transaction still in flight past the deadline")
	}
	held := make(chan error, 1)
	go func() { _, err := g.Hold(ctx, "t", time.Minute); held <- err }()
	entered := make(chan string, 1)
	go func() {
		a, _ := g.Enter(ctx)
		entered <- a
		g.Leave()
	}()
	g.Leave() // the in-flight transaction ends: the hold completes
	if err := <-held; err != nil {
		t.Fatalf("Hold: %v", err)
	}
	select {
	case a := <-entered:
		t.Fatalf("a transaction entered (%q) while held", a)
	default:
	}
	if err := g.Switch(ctx, "t", "b:2"); err != nil {
		t.Fatal(err)
	}
	if _, err := g.Release(ctx, "t"); err != nil {
		t.Fatal(err)
	}
	if a := <-entered; a != "b:2" {
		t.Fatalf("held transaction went to %q, want b:2", a)
	}
	cctx, cancel := context.WithCancel(ctx)
	g.Hold(ctx, "t", time.Second)
	cancel()
	if _, err := g.Enter(cctx); err == nil {
		t.Fatal("Enter with a cancelled context succeeded while held")
	}
}
