// Package clock holds the one context-aware sleep the code base uses.
package clock

import (
	"context"
	"time"
)

// Sleep waits for d or until ctx ends, whichever is first, and returns
// ctx's error in the second case. d <= 0 returns at once (with ctx's error,
// if it has ended).
func Sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
