package clock

import (
	"context"
	"errors"
	"testing"
	"time"
)

func TestSleep(t *testing.T) {
	ctx := context.Background()
	if err := Sleep(ctx, time.Millisecond); err != nil {
		t.Errorf("Sleep(1ms) = %v, want nil", err)
	}
	for _, d := range []time.Duration{0, -time.Second} {
		if err := Sleep(ctx, d); err != nil {
			t.Errorf("Sleep(%v) = %v, want nil", d, err)
		}
	}
	done, cancel := context.WithCancel(ctx)
	cancel()
	// A done context ends the pause whatever d is: an hour returns at once.
	for _, d := range []time.Duration{time.Hour, 0} {
		if err := Sleep(done, d); !errors.Is(err, context.Canceled) {
			t.Errorf("Sleep(cancelled, %v) = %v, want context.Canceled", d, err)
		}
	}
	// A context ended during the pause ends it.
	waiting, stop := context.WithCancel(ctx)
	go stop()
	if err := Sleep(waiting, time.Hour); !errors.Is(err, context.Canceled) {
		t.Errorf("Sleep(cancelled while waiting, 1h) = %v, want context.Canceled", err)
	}
}
