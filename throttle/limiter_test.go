package throttle

import (
	"context"
	"errors"
	"math"
	"runtime"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// watchdog only turns a deadlock into a readable failure; no test asserts how
// long anything takes in real time.
const watchdog = 30 * time.Second

// park is one report of a waiter about to block.
type park struct {
	d      time.Duration
	paused bool
}

func (p park) String() string { return fmtDelay(p.d, p.paused) }

// harness drives a Limiter or a Pacer on a fake clock. Every time a waiter blocks it
// reports the planned wait on parks, so a test advances the clock only once
// the waiter is known to be blocked: no sleeps, no races with the scheduler.
type harness struct {
	t     *testing.T
	clk   *fakeClock
	start time.Time
	l     *Limiter
	p     *Pacer
	parks chan park
}

func newHarness(t *testing.T, rate float64, burst int) *harness {
	clk := newFakeClock()
	h := &harness{t: t, clk: clk, start: clk.Now(), parks: make(chan park, 64)}
	h.l = NewLimiterWithClock(rate, burst, clk)
	h.l.parked = h.park
	return h
}

func newPacerHarness(t *testing.T, rate float64) *harness {
	clk := newFakeClock()
	h := &harness{t: t, clk: clk, start: clk.Now(), parks: make(chan park, 64)}
	h.p = NewPacerWithClock(rate, clk)
	h.p.parked = h.park
	return h
}

func (h *harness) park(d time.Duration, paused bool) { h.parks <- park{d, paused} }

// pace starts Pacer.Wait(ctx, moved, took) in a goroutine.
func (h *harness) pace(ctx context.Context, moved int64, took time.Duration) <-chan error {
	ch := make(chan error, 1)
	go func() { ch <- h.p.Wait(ctx, moved, took) }()
	return ch
}

// wait starts WaitN(ctx, n) in a goroutine; the result arrives on the channel.
func (h *harness) wait(ctx context.Context, n int) <-chan error {
	ch := make(chan error, 1)
	go func() { ch <- h.l.WaitN(ctx, n) }()
	return ch
}

// expectPark fails unless the next waiter to block plans the wait want
// ("paused" or a duration).
func (h *harness) expectPark(want string) {
	h.t.Helper()
	select {
	case p := <-h.parks:
		if p.String() != want {
			h.t.Fatalf("at +%v: waiter parked for %v, want %s", h.clk.Since(h.start), p, want)
		}
	case <-time.After(watchdog):
		h.t.Fatalf("at +%v: no waiter parked (want %s)", h.clk.Since(h.start), want)
	}
}

// expectDone fails unless the call returns wantErr.
func (h *harness) expectDone(ch <-chan error, wantErr error) {
	h.t.Helper()
	select {
	case err := <-ch:
		if !errors.Is(err, wantErr) {
			h.t.Fatalf("at +%v: wait returned %v, want %v", h.clk.Since(h.start), err, wantErr)
		}
	case p := <-h.parks:
		h.t.Fatalf("at +%v: wait parked again for %v, want it to return", h.clk.Since(h.start), p)
	case <-time.After(watchdog):
		h.t.Fatalf("at +%v: wait did not return", h.clk.Since(h.start))
	}
}

// expectBlocked fails if a parked call has returned or re-planned. Only
// meaningful when nothing has been done that could wake it.
func (h *harness) expectBlocked(ch <-chan error) {
	h.t.Helper()
	select {
	case err := <-ch:
		h.t.Fatalf("at +%v: wait returned %v, want it still blocked", h.clk.Since(h.start), err)
	case p := <-h.parks:
		h.t.Fatalf("at +%v: wait re-planned for %v, want it still blocked", h.clk.Since(h.start), p)
	default:
	}
}

func TestLimiter(t *testing.T) {
	bg := context.Background()
	tests := []struct {
		name  string
		rate  float64
		burst int
		run   func(h *harness)
	}{
		{"unlimited never blocks", math.Inf(1), 0, func(h *harness) {
			h.expectDone(h.wait(bg, 1<<40), nil)
			h.expectDone(h.wait(bg, 0), nil)
		}},
		{"saved credit passes at once", 1000, 1000, func(h *harness) {
			h.clk.Advance(time.Second)
			h.expectDone(h.wait(bg, 600), nil)
			h.expectDone(h.wait(bg, 400), nil)
			c := h.wait(bg, 1)
			h.expectPark("1ms")
			h.clk.Advance(time.Millisecond)
			h.expectDone(c, nil)
		}},
		{"waits exactly n/rate from an empty bucket", 1000, 1000, func(h *harness) {
			c := h.wait(bg, 250)
			h.expectPark("250ms")
			h.clk.Advance(249 * time.Millisecond)
			h.expectBlocked(c)
			h.clk.Advance(time.Millisecond)
			h.expectDone(c, nil)
		}},
		{"lowered rate applies to the rest of the wait", 1000, 1000, func(h *harness) {
			c := h.wait(bg, 1000)
			h.expectPark("1s")
			h.clk.Advance(500 * time.Millisecond)
			h.l.SetRate(100) // 500 bytes earned, 500 to go at 100 B/s
			h.expectPark("5s")
			h.clk.Advance(time.Second) // the old plan's deadline passes: nothing
			h.expectBlocked(c)
			h.clk.Advance(4 * time.Second)
			h.expectDone(c, nil)
		}},
		{"raised rate wakes the waiter at once", 100, 1000, func(h *harness) {
			c := h.wait(bg, 1000)
			h.expectPark("10s")
			h.clk.Advance(time.Second)
			h.l.SetRate(900) // 100 earned, 900 to go at 900 B/s
			h.expectPark("1s")
			h.clk.Advance(time.Second)
			h.expectDone(c, nil)
		}},
		{"same rate again does not wake", 1000, 1000, func(h *harness) {
			c := h.wait(bg, 1000)
			h.expectPark("1s")
			h.l.SetRate(1000)
			h.expectBlocked(c)
			h.clk.Advance(time.Second)
			h.expectDone(c, nil)
		}},
		{"paused blocks until raised, raise wakes at once", 0, 1000, func(h *harness) {
			c := h.wait(bg, 10)
			h.expectPark("paused")
			h.clk.Advance(time.Hour)
			h.expectBlocked(c)
			h.l.SetRate(10)
			h.expectPark("1s")
			h.clk.Advance(time.Second)
			h.expectDone(c, nil)
		}},
		{"pause mid-wait keeps the bytes earned", 1000, 1000, func(h *harness) {
			c := h.wait(bg, 1000)
			h.expectPark("1s")
			h.clk.Advance(400 * time.Millisecond)
			h.l.SetRate(0)
			h.expectPark("paused")
			h.clk.Advance(time.Minute)
			h.expectBlocked(c)
			h.l.SetRate(1000)
			h.expectPark("600ms")
			h.clk.Advance(600 * time.Millisecond)
			h.expectDone(c, nil)
		}},
		{"unlimited releases a waiter at once", 1, 1000, func(h *harness) {
			c := h.wait(bg, 1000)
			h.expectPark("16m40s")
			h.l.SetRate(math.Inf(1))
			h.expectDone(c, nil)
		}},
		{"unlimited releases a paused waiter at once", 0, 1000, func(h *harness) {
			c := h.wait(bg, 1<<30) // far beyond burst
			h.expectPark("paused")
			h.l.SetRate(math.Inf(1))
			h.expectDone(c, nil)
		}},
		{"n beyond burst is split into chunks", 1000, 100, func(h *harness) {
			c := h.wait(bg, 1050)
			for range 10 {
				h.expectPark("100ms")
				h.clk.Advance(100 * time.Millisecond)
			}
			h.expectPark("50ms")
			h.clk.Advance(50 * time.Millisecond)
			h.expectDone(c, nil)
			if got := h.clk.Since(h.start); got != 1050*time.Millisecond {
				t.Fatalf("1050 bytes at 1000 B/s took %v of clock, want 1.05s", got)
			}
		}},
		{"chunks follow an auto burst that grows with the rate", 1e6, 0, func(h *harness) {
			c := h.wait(bg, 2<<20) // 4 chunks of 512 KiB (the floor) at 1 MB/s
			h.expectPark("524.288ms")
			h.l.SetRate(1e8) // burst 2 MB: the rest goes as one chunk
			h.expectPark("5.24288ms")
			h.clk.Advance(5242880 * time.Nanosecond)
			h.expectPark("15.72864ms") // the other 1572864 bytes at 100 MB/s
			h.clk.Advance(15728640 * time.Nanosecond)
			h.expectDone(c, nil)
		}},
		{"cancel while paused returns ctx.Err and gives the bytes back", 0, 1000, func(h *harness) {
			ctx, cancel := context.WithCancel(bg)
			c := h.wait(ctx, 100)
			h.expectPark("paused")
			cancel()
			h.expectDone(c, context.Canceled)
			h.l.SetRate(1000)
			c = h.wait(bg, 100)
			h.expectPark("100ms") // not 200ms: the cancelled 100 bytes were returned
			h.clk.Advance(100 * time.Millisecond)
			h.expectDone(c, nil)
		}},
		{"cancel mid-wait returns ctx.Err", 1000, 1000, func(h *harness) {
			ctx, cancel := context.WithCancel(bg)
			c := h.wait(ctx, 1000)
			h.expectPark("1s")
			h.clk.Advance(300 * time.Millisecond)
			cancel()
			h.expectDone(c, context.Canceled)
			c = h.wait(bg, 300) // the 300 bytes earned are still there
			h.expectDone(c, nil)
		}},
		{"deadline ends a long chunked wait", 1000, 100, func(h *harness) {
			ctx, cancel := context.WithCancel(bg)
			c := h.wait(ctx, 1000)
			h.expectPark("100ms")
			h.clk.Advance(100 * time.Millisecond)
			h.expectPark("100ms")
			cancel()
			h.expectDone(c, context.Canceled)
		}},
		{"cancelled context fails before taking anything", 1000, 1000, func(h *harness) {
			ctx, cancel := context.WithCancel(bg)
			cancel()
			h.expectDone(h.wait(ctx, 10), context.Canceled)
			h.clk.Advance(10 * time.Millisecond)
			h.expectDone(h.wait(bg, 10), nil)
		}},
		{"waiters are served in order of arrival", 1000, 1000, func(h *harness) {
			a := h.wait(bg, 500)
			h.expectPark("500ms")
			b := h.wait(bg, 500)
			h.expectPark("1s")
			h.clk.Advance(500 * time.Millisecond)
			h.expectDone(a, nil)
			h.expectBlocked(b)
			h.clk.Advance(500 * time.Millisecond)
			h.expectDone(b, nil)
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.run(newHarness(t, tt.rate, tt.burst))
		})
	}
}

func TestLimiterNegativeN(t *testing.T) {
	l := NewLimiter(1000, 1000)
	err := l.WaitN(context.Background(), -1)
	if err == nil || err.Error() != "throttle: WaitN(n=-1): n must not be negative" {
		t.Fatalf("WaitN(-1) = %v", err)
	}
}

func TestLimiterZeroValue(t *testing.T) {
	var l Limiter
	if r, b := l.Rate(), l.Burst(); !math.IsInf(r, 1) || b != MaxAutoBurst {
		t.Fatalf("zero Limiter: Rate %v Burst %d, want +Inf and %d", r, b, MaxAutoBurst)
	}
	if err := l.WaitN(context.Background(), 1<<40); err != nil {
		t.Fatalf("zero Limiter WaitN: %v", err)
	}
	l.SetRate(0)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := l.WaitN(ctx, 1); !errors.Is(err, context.Canceled) {
		t.Fatalf("paused zero Limiter with cancelled ctx: %v", err)
	}
}

// TestLimiterConcurrentWaitersShareRate runs several goroutines through one
// limiter on the fake clock. The driver advances the clock to the next timer
// only when every goroutine is blocked or done, so the schedule is exact: the
// goroutines together never get ahead of rate×t, and the last byte is granted
// exactly at total/rate.
func TestLimiterConcurrentWaitersShareRate(t *testing.T) {
	const (
		rate    = 1000.0 // bytes/s
		burst   = 100    // bytes
		workers = 4
		calls   = 5
		chunk   = 100 // bytes per WaitN; 2000 bytes in all
	)
	clk := newFakeClock()
	start := clk.Now()
	l := NewLimiterWithClock(rate, burst, clk)
	var running atomic.Int64 // goroutines not blocked in WaitN
	running.Store(workers)
	l.parked = func(time.Duration, bool) { running.Add(-1) }
	clk.onFire = func() { running.Add(1) }

	var mu sync.Mutex
	var grants []time.Duration // clock offset of every granted WaitN
	var done atomic.Int64
	for range workers {
		go func() {
			defer func() { done.Add(1); running.Add(-1) }()
			for range calls {
				if err := l.WaitN(context.Background(), chunk); err != nil {
					t.Errorf("WaitN: %v", err)
					return
				}
				mu.Lock()
				grants = append(grants, clk.Since(start))
				mu.Unlock()
			}
		}()
	}
	deadline := time.Now().Add(watchdog)
	for done.Load() < workers {
		for running.Load() != 0 {
			if time.Now().After(deadline) {
				t.Fatalf("stuck: %d goroutines running", running.Load())
			}
			runtime.Gosched()
		}
		if done.Load() == workers {
			break
		}
		d, ok := clk.Next()
		if !ok {
			t.Fatalf("all waiters blocked and no timer armed")
		}
		clk.Advance(d)
	}
	sort.Slice(grants, func(i, j int) bool { return grants[i] < grants[j] })
	if len(grants) != workers*calls {
		t.Fatalf("%d grants, want %d", len(grants), workers*calls)
	}
	for i, at := range grants {
		sent := float64((i + 1) * chunk)
		if allowed := rate * at.Seconds(); sent > allowed+needSlack {
			t.Fatalf("grant %d at +%v: %v bytes out, more than rate×t = %v", i, at, sent, allowed)
		}
	}
	if last, want := grants[len(grants)-1], 2*time.Second; last != want {
		t.Fatalf("last grant at +%v, want +%v (2000 bytes at 1000 B/s)", last, want)
	}
}

// TestLimiterConcurrentRateChanges hammers one limiter from several goroutines
// on the real clock while the rate flips between paused, slow, fast and
// unlimited; it is here for the race detector. It checks only that every call
// returns and none fails; it asserts nothing about time.
func TestLimiterConcurrentRateChanges(t *testing.T) {
	l := NewLimiter(1e8, 0)
	ctx := context.Background()
	var wg, workers sync.WaitGroup
	var progress atomic.Int64 // WaitN calls completed
	for w := range 6 {
		workers.Go(func() {
			for i := range 200 {
				if err := l.WaitN(ctx, (w+1)*(i%7+1)*1000); err != nil {
					t.Errorf("WaitN: %v", err)
					return
				}
				progress.Add(1)
			}
		})
	}
	cctx, cancel := context.WithCancel(ctx)
	wg.Go(func() { // a waiter that is cancelled
		_ = l.WaitN(cctx, 1<<30)
	})
	rates := []float64{0, 1e8, 1e9, 5e8, 0, 2e9, 3e8}
	workersDone := make(chan struct{})
	go func() { workers.Wait(); close(workersDone) }()
	// Flip the rate until every worker is through, letting at least one call
	// complete between flips (except while paused); every 50th flip is to
	// +Inf.
	for i := 0; ; i++ {
		select {
		case <-workersDone:
			t.Logf("%d rate changes, %d calls", i, progress.Load())
		default:
			r := rates[i%len(rates)]
			if i%50 == 49 {
				r = math.Inf(1)
			}
			l.SetRate(r)
			_, _ = l.Rate(), l.Burst()
			for before := progress.Load(); r != 0 && progress.Load() == before; {
				select {
				case <-workersDone:
				default:
					runtime.Gosched()
					continue
				}
				break
			}
			continue
		}
		break
	}
	cancel()
	l.SetRate(math.Inf(1))
	wg.Wait()
}
