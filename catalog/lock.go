package catalog

import (
	"context"
	"errors"
	"fmt"
	"sync"
)

// ErrNotOwner is returned by a guarded write (Lock.Update) of a driver that
// no longer holds its lock: it unlocked, or its etcd lease expired or was
// revoked (the agent was cut off or paused longer than the lease's TTL) and
// another driver may hold the lock now. Nothing was written; the driver
// must stop driving and touch nothing more.
var ErrNotOwner = errors.New("not the lock's owner")

// ErrLocked is returned by TryLock when another driver holds the lock.
var ErrLocked = errors.New("held by another driver")

// Lock is a driver's exclusive right to drive one thing named in the
// catalog — a migration, a plan: at most one holder at a time among every
// process sharing the catalog. Every catalog write of the driver goes
// through Update, committed only while the lock is held, so a driver that
// lost its lock (and may not know yet) cannot write over its successor.
//
// With the etcd backend a lock is a concurrency.Mutex on the agent's
// session: its key lives as long as the session's lease, which the client
// keeps alive; a process that dies or is cut off loses it after the lease's
// TTL (EtcdOptions.LeaseTTL), and the next driver's Lock returns then.
// With bbolt it is an in-process lock (boltStore).
type Lock struct {
	name string
	c    *Catalog

	etcd *etcdLock // nil with bbolt

	unlock   func(context.Context) error
	lost     chan struct{}
	lostOnce sync.Once
}

func newLock(name string) *Lock { return &Lock{name: name, lost: make(chan struct{})} }

func (l *Lock) markLost() { l.lostOnce.Do(func() { close(l.lost) }) }

// Name returns the lock's name.
func (l *Lock) Name() string { return l.name }

// Lost is closed once the lock is no longer held: unlocked, or (etcd) its
// session's lease ended. A driver selects on it to stop at once rather than
// at its next write; a write after it fails with ErrNotOwner.
func (l *Lock) Lost() <-chan struct{} { return l.lost }

// Unlock releases the lock (a lock already lost: nothing to release).
func (l *Lock) Unlock(ctx context.Context) error { return l.unlock(ctx) }

// Update is Catalog.Update, committed only while l is held: ErrNotOwner
// (wrapped) and nothing written otherwise.
func (l *Lock) Update(fn func(*Tx) error) error {
	return l.c.update(l, fn)
}

// Lock acquires lock name, waiting while another driver (in any process
// sharing the catalog) holds it, until ctx ends.
func (c *Catalog) Lock(ctx context.Context, name string) (*Lock, error) {
	l, err := c.st.lock(ctx, name, true)
	if err == nil {
		l.c = c
	}
	return l, err
}

// TryLock acquires lock name, or fails at once with ErrLocked.
func (c *Catalog) TryLock(ctx context.Context, name string) (*Lock, error) {
	l, err := c.st.lock(ctx, name, false)
	if err == nil {
		l.c = c
	}
	return l, err
}

// localLocks orders the drivers of one process: lock name -> holder.
type localLocks struct {
	mu   sync.Mutex
	held map[string]*Lock
}

func newLocalLocks() *localLocks { return &localLocks{held: map[string]*Lock{}} }

// acquire makes l the holder of its name, waiting for the current holder
// to lose it when wait is true, ErrLocked otherwise.
func (ll *localLocks) acquire(ctx context.Context, l *Lock, wait bool) error {
	for {
		ll.mu.Lock()
		cur := ll.held[l.name]
		if cur == nil {
			ll.held[l.name] = l
			ll.mu.Unlock()
			return nil
		}
		ll.mu.Unlock()
		if !wait {
			return fmt.Errorf("catalog: lock %s: %w", l.name, ErrLocked)
		}
		select {
		case <-cur.Lost():
		case <-ctx.Done():
			return fmt.Errorf("catalog: lock %s: %w", l.name, ctx.Err())
		}
	}
}

// release ends l's hold (if it still holds) and wakes its waiters.
func (ll *localLocks) release(l *Lock) {
	ll.mu.Lock()
	if ll.held[l.name] == l {
		delete(ll.held, l.name)
	}
	ll.mu.Unlock()
	l.markLost()
}

func (ll *localLocks) holds(l *Lock) bool {
	ll.mu.Lock()
	defer ll.mu.Unlock()
	return ll.held[l.name] == l
}
