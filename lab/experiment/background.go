package experiment

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/sluicedb/sluice/lab/workload"
)

// background is a workload run in the background with its per-second
// records kept: what the downtime and soak experiments measure around.
type background struct {
	run    *workload.Runner // its ledger proves nothing is lost
	start  time.Time        // about the workload's clock's zero
	done   chan error
	cancel context.CancelFunc

	mu   sync.Mutex
	secs []workload.Second // guarded by mu
}

// runBackground starts run until stop.
func runBackground(ctx context.Context, run *workload.Runner) *background {
	wctx, cancel := context.WithCancel(ctx)
	b := &background{run: run, start: time.Now(), done: make(chan error, 1), cancel: cancel}
	go func() {
		_, err := run.Run(wctx, func(x workload.Second) { b.mu.Lock(); b.secs = append(b.secs, x); b.mu.Unlock() })
		b.done <- err
	}()
	return b
}

// stop stops the workload and returns its error; again (or on nil), nothing.
func (b *background) stop() error {
	if b == nil || b.cancel == nil {
		return nil
	}
	b.cancel()
	b.cancel = nil
	return <-b.done
}

// seconds returns a copy of the seconds recorded so far.
func (b *background) seconds() []workload.Second {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.secs)
}
