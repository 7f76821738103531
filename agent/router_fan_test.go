package agent

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicedb/sluice/migration"
)

// fakeProxy is a Router that records calls; hang makes every call wait
// for its context (a proxy that does not answer), fail makes it fail.
type fakeProxy struct {
	mu        sync.Mutex
	idle      []int
	at        time.Time
	hang      bool
	fail      error
	held      bool
	addr      string
	releases  int
	lastCalls []string
}

var _ migration.Router = (*fakeProxy)(nil)

func (p *fakeProxy) call(ctx context.Context, name string) error {
	p.mu.Lock()
	p.lastCalls = append(p.lastCalls, name)
	hang, fail := p.hang, p.fail
	p.mu.Unlock()
	if hang {
		<-ctx.Done()
		return ctx.Err()
	}
	return fail
}

func (p *fakeProxy) Prepare(ctx context.Context, _, _ string) error { return p.call(ctx, "prepare") }
func (p *fakeProxy) Backends(ctx context.Context, _ string) ([]int, error) {
	return p.idle, p.call(ctx, "backends")
}
func (p *fakeProxy) Hold(ctx context.Context, _ string, _ time.Duration) ([]int, error) {
	if err := p.call(ctx, "hold"); err != nil {
		return nil, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.held = true
	return p.idle, nil
}
func (p *fakeProxy) Switch(ctx context.Context, _, addr string) error {
	if err := p.call(ctx, "switch"); err != nil {
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.addr = addr
	return nil
}
func (p *fakeProxy) Release(ctx context.Context, _ string) (time.Time, error) {
	if err := p.call(ctx, "release"); err != nil {
		return time.Time{}, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.held = false
	p.releases++
	return p.at, nil
}
func (p *fakeProxy) Holding(ctx context.Context, _ string) (bool, error) {
	if err := p.call(ctx, "holding"); err != nil {
		return false, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.held, nil
}

func TestFanRouter(t *testing.T) {
	ctx := context.Background()
	t0 := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	a := &fakeProxy{idle: []int{11, 12}, at: t0.Add(3 * time.Millisecond)}
	b := &fakeProxy{idle: []int{21, 12}, at: t0.Add(7 * time.Millisecond)}
	f := fanRouter{names: []string{"pa", "pb"}, rs: []migration.Router{a, b}, call: 50 * time.Millisecond, slack: 50 * time.Millisecond}

	idle, err := f.Hold(ctx, "t", 100*time.Millisecond)
	if err != nil || !slices.Equal(idle, []int{11, 12, 21}) {
		t.Fatalf("hold: idle %v, %v; want the union 11 12 21", idle, err)
	}
	if h, err := f.Holding(ctx, "t"); !h || err != nil {
		t.Fatalf("holding: %v, %v; want true", h, err)
	}
	if err := f.Switch(ctx, "t", "h:2"); err != nil || a.addr != "h:2" || b.addr != "h:2" {
		t.Fatalf("switch: %v; routes %q %q", err, a.addr, b.addr)
	}
	if at, err := f.Release(ctx, "t"); err != nil || !at.Equal(b.at) {
		t.Fatalf("release: %v, %v; want the last proxy's time %v", at, err, b.at)
	}
	if h, _ := f.Holding(ctx, "t"); h {
		t.Fatal("holding after release")
	}

	// One proxy fails its switch: the error names it, the other switched;
	// the switch back reaches both.
	b.fail = errors.New("boom")
	if err := f.Switch(ctx, "t", "h:3"); err == nil || !strings.Contains(err.Error(), "proxy pb: boom") || a.addr != "h:3" {
		t.Fatalf("switch with pb failing: %v (pa at %q)", err, a.addr)
	}
	b.fail = nil
	if err := f.Switch(ctx, "t", "h:1"); err != nil || a.addr != "h:1" || b.addr != "h:1" {
		t.Fatalf("switch back: %v; routes %q %q", err, a.addr, b.addr)
	}

	// One proxy does not answer: the hold fails after its deadline plus
	// the slack, naming it; the release that follows lets the other go at
	// once and fails for the silent one until it answers.
	b.hang = true
	if _, err := f.Hold(ctx, "t", 10*time.Millisecond); err == nil || !strings.Contains(err.Error(), "proxy pb") || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("hold with pb silent: %v; want pb's deadline", err)
	}
	if !a.held {
		t.Fatal("pa does not hold (the hold stays until Release, even after an error)")
	}
	if h, err := f.Holding(ctx, "t"); h || err == nil {
		t.Fatalf("holding with pb silent: %v, %v; want an error", h, err)
	}
	if _, err := f.Release(ctx, "t"); err == nil || a.held {
		t.Fatalf("release with pb silent: err %v, pa held %v; want pa released and an error for pb", err, a.held)
	}
	b.hang = false
	if _, err := f.Release(ctx, "t"); err != nil {
		t.Fatalf("release once pb answers: %v", err)
	}
	if _, err := f.Backends(ctx, "t"); err != nil {
		t.Fatal(err)
	}
	b.fail = errors.New("down")
	if pids, err := f.Backends(ctx, "t"); err == nil || pids != nil {
		t.Fatalf("backends with pb down: %v, %v; want none and an error", pids, err)
	}
}
