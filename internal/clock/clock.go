// Package clock holds the small helpers every package that waits on the
// wall clock needs, so that each waits the same way.
package clock

import (
	"context"
	"time"
)

// Sleep pauses for d or until ctx is done, whichever comes first. It
// returns ctx.Err() when ctx ended the pause (or had ended before it), nil
// when d passed. A d <= 0 does not pause.
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
