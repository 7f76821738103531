package throttle

import (
	"context"
	"math"
	"testing"
	"time"
)

func TestDelay(t *testing.T) {
	tests := []struct {
		name   string
		moved  int64
		rate   float64
		took   time.Duration
		want   time.Duration
		paused bool
	}{
		{"sleeps the rest of the slot", 1 << 20, 1 << 20, 250 * time.Millisecond, 750 * time.Millisecond, false},
		{"a slow sub-move needs no sleep", 1 << 20, 1 << 20, 2 * time.Second, 0, false},
		{"exactly on time", 1000, 1000, time.Second, 0, false},
		{"instant sub-move sleeps the whole slot", 64 << 10, 1e6, 0, 65536 * time.Microsecond, false},
		{"unlimited never sleeps", 1 << 30, math.Inf(1), 0, 0, false},
		{"paused waits for a raise", 1, 0, 0, 0, true},
		{"negative rate pauses", 1, -1, 0, 0, true},
		{"NaN rate pauses", 1, math.NaN(), 0, 0, true},
		{"nothing moved, no sleep even when paused", 0, 0, 0, 0, false},
		{"rounds up to the ns", 1, 3, 0, 333333334, false},
		{"tiny rate is capped", 1 << 30, 1e-12, 0, maxDelay, false},
		{"negative took counts as 0", 1000, 1000, -time.Hour, time.Second, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, paused := Delay(tt.moved, tt.rate, tt.took)
			if d != tt.want || paused != tt.paused {
				t.Fatalf("Delay(%d, %g, %v) = %v, %v; want %v, %v",
					tt.moved, tt.rate, tt.took, d, paused, tt.want, tt.paused)
			}
		})
	}
}

func TestPacer(t *testing.T) {
	bg := context.Background()
	tests := []struct {
		name string
		rate float64
		run  func(h *harness)
	}{
		{"sleeps W/R minus T", 1000, func(h *harness) {
			c := h.pace(bg, 1000, 300*time.Millisecond)
			h.expectPark("700ms")
			h.clk.Advance(699 * time.Millisecond)
			h.expectBlocked(c)
			h.clk.Advance(time.Millisecond)
			h.expectDone(c, nil)
		}},
		{"no sleep after a slow sub-move", 1000, func(h *harness) {
			h.expectDone(h.pace(bg, 1000, 2*time.Second), nil)
		}},
		{"unlimited never sleeps", math.Inf(1), func(h *harness) {
			h.expectDone(h.pace(bg, 1<<40, 0), nil)
		}},
		{"lowered rate stretches the slot in progress", 1000, func(h *harness) {
			c := h.pace(bg, 1000, 0)
			h.expectPark("1s")
			h.clk.Advance(500 * time.Millisecond)
			h.p.SetRate(100) // slot is now 10 s from the sub-move's start
			h.expectPark("9.5s")
			h.clk.Advance(9500 * time.Millisecond)
			h.expectDone(c, nil)
		}},
		{"raised rate wakes at once and may end the sleep", 100, func(h *harness) {
			c := h.pace(bg, 1000, 0)
			h.expectPark("10s")
			h.clk.Advance(2 * time.Second)
			h.p.SetRate(250) // slot 4 s: 2 s to go
			h.expectPark("2s")
			h.p.SetRate(1000) // slot 1 s, already over
			h.expectDone(c, nil)
		}},
		{"paused holds until raised", 0, func(h *harness) {
			c := h.pace(bg, 1000, 0)
			h.expectPark("paused")
			h.clk.Advance(time.Hour)
			h.expectBlocked(c)
			h.p.SetRate(1) // slot 1000 s, 1 h already spent in it
			h.expectDone(c, nil)
		}},
		{"pause mid-sleep, then resume the rest", 1000, func(h *harness) {
			c := h.pace(bg, 1000, 100*time.Millisecond)
			h.expectPark("900ms")
			h.clk.Advance(400 * time.Millisecond)
			h.p.SetRate(0)
			h.expectPark("paused")
			h.p.SetRate(500) // slot 2 s from the start, 500 ms of it spent
			h.expectPark("1.5s")
			h.clk.Advance(1500 * time.Millisecond)
			h.expectDone(c, nil)
		}},
		{"a late wake-up is made up in the next slot", 1000, func(h *harness) {
			c := h.pace(bg, 1000, 300*time.Millisecond)
			h.expectPark("700ms")
			h.clk.Advance(710 * time.Millisecond) // woke 10 ms late
			h.expectDone(c, nil)
			h.clk.Advance(300 * time.Millisecond) // the next sub-move
			c = h.pace(bg, 1000, 300*time.Millisecond)
			h.expectPark("690ms") // slot counted from the previous slot's end
			h.clk.Advance(690 * time.Millisecond)
			h.expectDone(c, nil)
		}},
		{"a gap longer than PacerCatchUp is made up only by PacerCatchUp", 1000, func(h *harness) {
			c := h.pace(bg, 1000, 300*time.Millisecond)
			h.expectPark("700ms")
			h.clk.Advance(700 * time.Millisecond)
			h.expectDone(c, nil)
			h.clk.Advance(time.Minute + 300*time.Millisecond)
			c = h.pace(bg, 1000, 300*time.Millisecond)
			h.expectPark("680ms")
			h.clk.Advance(680 * time.Millisecond)
			h.expectDone(c, nil)
		}},
		{"a slow sub-move earns at most PacerCatchUp", 1000, func(h *harness) {
			h.expectDone(h.pace(bg, 1000, 1010*time.Millisecond), nil) // 10 ms over its slot
			c := h.pace(bg, 1000, 0)
			h.expectPark("990ms")
			h.clk.Advance(990 * time.Millisecond)
			h.expectDone(c, nil)
			h.expectDone(h.pace(bg, 1000, 2*time.Second), nil) // 1 s over: only 20 ms made up
			c = h.pace(bg, 1000, 0)
			h.expectPark("980ms")
			h.clk.Advance(980 * time.Millisecond)
			h.expectDone(c, nil)
		}},
		{"cancel while paused returns ctx.Err", 0, func(h *harness) {
			ctx, cancel := context.WithCancel(bg)
			c := h.pace(ctx, 1000, 0)
			h.expectPark("paused")
			cancel()
			h.expectDone(c, context.Canceled)
		}},
		{"cancel while sleeping returns ctx.Err", 1000, func(h *harness) {
			ctx, cancel := context.WithCancel(bg)
			c := h.pace(ctx, 1000, 0)
			h.expectPark("1s")
			cancel()
			h.expectDone(c, context.Canceled)
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.run(newPacerHarness(t, tt.rate))
		})
	}
}

func TestPacerBadInputAndZeroValue(t *testing.T) {
	var p Pacer
	if r := p.Rate(); !math.IsInf(r, 1) {
		t.Fatalf("zero Pacer rate %v, want +Inf", r)
	}
	if err := p.Wait(context.Background(), 1<<30, 0); err != nil {
		t.Fatalf("zero Pacer Wait: %v", err)
	}
	err := p.Wait(context.Background(), -1, 0)
	if err == nil || err.Error() != "throttle: Pacer.Wait(moved=-1): moved must not be negative" {
		t.Fatalf("Wait(-1) = %v", err)
	}
}
