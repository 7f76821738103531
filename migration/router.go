package migration

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// DirectRouter is a Router for clients that do not go through a proxy: Hold,
// Switch and Release do nothing; Prepare and Backends are unsupported. Safe
// only when whatever checks "nothing lost" counts acknowledged writes alone
// (the fence turns late writes into errors the client sees).
type DirectRouter struct{}

func (DirectRouter) Prepare(context.Context, string, string) error              { return ErrUnsupported }
func (DirectRouter) Backends(context.Context, string) ([]int, error)            { return nil, ErrUnsupported }
func (DirectRouter) Hold(context.Context, string, time.Duration) ([]int, error) { return nil, nil }
func (DirectRouter) Switch(context.Context, string, string) error               { return nil }
func (DirectRouter) Release(context.Context, string) (time.Time, error)         { return time.Time{}, nil }
func (DirectRouter) Holding(context.Context, string) (bool, error)              { return false, ErrUnsupported }

var _ Router = DirectRouter{}

// GateRouter is an in-process Router for clients in the same process (tests,
// benchmarks): each transaction calls Enter, which waits while the tenant is
// held and returns the address to use, and Leave when it ends. Hold closes the
// gate and waits for in-flight transactions to leave. It routes one tenant.
// Safe for concurrent use.
type GateRouter struct {
	mu       sync.Mutex
	cond     *sync.Cond
	addr     string
	held     bool
	inFlight int
}

// NewGateRouter returns an open gate routing to addr.
func NewGateRouter(addr string) *GateRouter {
	g := &GateRouter{addr: addr}
	g.cond = sync.NewCond(&g.mu)
	return g
}

// Enter waits until the gate is open (or ctx ends) and returns the current
// address; the caller must call Leave when its transaction is over.
func (g *GateRouter) Enter(ctx context.Context) (string, error) {
	stop := context.AfterFunc(ctx, func() { g.mu.Lock(); g.cond.Broadcast(); g.mu.Unlock() })
	defer stop()
	g.mu.Lock()
	defer g.mu.Unlock()
	for g.held {
		if err := ctx.Err(); err != nil {
			return "", err
		}
		g.cond.Wait()
	}
	g.inFlight++
	return g.addr, nil
}

// Leave ends a transaction started with Enter.
func (g *GateRouter) Leave() {
	g.mu.Lock()
	g.inFlight--
	g.cond.Broadcast()
	g.mu.Unlock()
}

// Addr returns the current route.
func (g *GateRouter) Addr() string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.addr
}

// Prepare is unsupported: a transaction opens its own connection.
func (g *GateRouter) Prepare(context.Context, string, string) error { return ErrUnsupported }

// Backends is unsupported: the gate does not know its clients' backends.
func (g *GateRouter) Backends(context.Context, string) ([]int, error) { return nil, ErrUnsupported }

// Hold closes the gate and waits for in-flight transactions, at most
// deadline. It names no idle backends.
func (g *GateRouter) Hold(ctx context.Context, tenant string, deadline time.Duration) ([]int, error) {
	ctx, cancel := context.WithTimeout(ctx, deadline)
	defer cancel()
	stop := context.AfterFunc(ctx, func() { g.mu.Lock(); g.cond.Broadcast(); g.mu.Unlock() })
	defer stop()
	g.mu.Lock()
	defer g.mu.Unlock()
	g.held = true
	for g.inFlight > 0 {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("migration: hold %s: %d transactions still in flight after %s", tenant, g.inFlight, deadline)
		}
		g.cond.Wait()
	}
	return nil, nil
}

// Switch changes the route.
func (g *GateRouter) Switch(_ context.Context, _ string, addr string) error {
	g.mu.Lock()
	g.addr = addr
	g.mu.Unlock()
	return nil
}

// Release opens the gate; it does not say when (zero time).
// Holding reports whether the gate is closed.
func (g *GateRouter) Holding(context.Context, string) (bool, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.held, nil
}

func (g *GateRouter) Release(context.Context, string) (time.Time, error) {
	g.mu.Lock()
	g.held = false
	g.cond.Broadcast()
	g.mu.Unlock()
	return time.Time{}, nil
}

var _ Router = (*GateRouter)(nil)
