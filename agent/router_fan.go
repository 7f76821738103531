package agent

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/sluicedb/sluice/migration"
)

// fanRouter is the handover Router of a tenant behind several proxies
// (Config.Proxy and Config.Proxies): every call goes to every proxy at
// once, and answers only when all have answered or its deadline passed.
//
//   - Hold succeeds when every proxy holds; the idle backends are the union
//     of theirs (each proxy vouches for its own sessions). A proxy that
//     does not answer within the hold's deadline plus fanSlack fails the
//     hold, and the handover rolls back.
//   - Switch succeeds when every proxy switched. One that did not fails it:
//     the handover rolls back, and the rollback's switch back goes to
//     every proxy again (switching is idempotent), so none is left on the
//     target.
//   - Release, Switch and Prepare are tried on every proxy even when one
//     fails: a rollback releases every proxy that answers at once, and
//     the error (naming the proxies that did not answer) makes the driver
//     retry for the rest — a proxy cut off still holds its sessions until
//     it hears the release. Release's time is the latest proxy's: the
//     freeze lasts until the last proxy let its sessions go.
//   - Holding is true only when every proxy still holds.
//   - Backends is the union of every proxy's backends; any error: none
//     (no early fence).
//
// Calls other than Hold end after fanCallTimeout.
type fanRouter struct {
	names []string // each proxy's URL, for errors
	rs    []migration.Router
	// call and slack override fanCallTimeout and fanSlack (tests); zero:
	// those.
	call, slack time.Duration
}

// fanCallTimeout bounds a call to one proxy (Hold: fanSlack beyond its
// deadline): a proxy that does not answer is one that failed.
const (
	fanCallTimeout = 5 * time.Second
	fanSlack       = 2 * time.Second
)

var _ migration.Router = fanRouter{}

// each runs call on every proxy at once, each under its own timeout, and
// returns their errors joined, each naming its proxy.
func (f fanRouter) each(ctx context.Context, timeout time.Duration, call func(ctx context.Context, i int) error) error {
	if timeout == 0 {
		timeout = cmp.Or(f.call, fanCallTimeout)
	}
	errs := make([]error, len(f.rs))
	var wg sync.WaitGroup
	for i := range f.rs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cctx, cancel := context.WithTimeout(ctx, timeout)
			defer cancel()
			if err := call(cctx, i); err != nil {
				errs[i] = fmt.Errorf("proxy %s: %w", f.names[i], err)
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

func (f fanRouter) Prepare(ctx context.Context, tenant, addr string) error {
	return f.each(ctx, 0, func(ctx context.Context, i int) error { return f.rs[i].Prepare(ctx, tenant, addr) })
}

func (f fanRouter) Backends(ctx context.Context, tenant string) ([]int, error) {
	var mu sync.Mutex
	var all []int
	err := f.each(ctx, 0, func(ctx context.Context, i int) error {
		pids, err := f.rs[i].Backends(ctx, tenant)
		mu.Lock()
		all = append(all, pids...)
		mu.Unlock()
		return err
	})
	if err != nil {
		return nil, err
	}
	slices.Sort(all)
	return slices.Compact(all), nil
}

func (f fanRouter) Hold(ctx context.Context, tenant string, deadline time.Duration) ([]int, error) {
	var mu sync.Mutex
	var idle []int
	err := f.each(ctx, deadline+cmp.Or(f.slack, fanSlack), func(ctx context.Context, i int) error {
		pids, err := f.rs[i].Hold(ctx, tenant, deadline)
		mu.Lock()
		idle = append(idle, pids...)
		mu.Unlock()
		return err
	})
	if err != nil {
		return nil, err
	}
	slices.Sort(idle)
	return slices.Compact(idle), nil
}

func (f fanRouter) Switch(ctx context.Context, tenant, addr string) error {
	return f.each(ctx, 0, func(ctx context.Context, i int) error { return f.rs[i].Switch(ctx, tenant, addr) })
}

func (f fanRouter) Release(ctx context.Context, tenant string) (time.Time, error) {
	var mu sync.Mutex
	var last time.Time
	err := f.each(ctx, 0, func(ctx context.Context, i int) error {
		at, err := f.rs[i].Release(ctx, tenant)
		mu.Lock()
		if at.After(last) {
			last = at
		}
		mu.Unlock()
		return err
	})
	return last, err
}

func (f fanRouter) Holding(ctx context.Context, tenant string) (bool, error) {
	held := make([]bool, len(f.rs))
	err := f.each(ctx, 0, func(ctx context.Context, i int) error {
		h, err := f.rs[i].Holding(ctx, tenant)
		held[i] = h
		return err
	})
	if err != nil {
		return false, err
	}
	return !slices.Contains(held, false), nil
}
