package catalog

import (
	"context"
	"errors"
	"testing"
	"time"
)

// wait is how long a test waits for something that must happen (a lock
// handed over); reaching it fails the test, it never passes one.
const wait = 30 * time.Second

func TestLockContention(t *testing.T) { eachBackend(t, testLockContention) }

func testLockContention(t *testing.T, open func() *Catalog) {
	c := open()
	defer c.Close()
	ctx := context.Background()
	l1, err := c.TryLock(ctx, "tenant/7")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.TryLock(ctx, "tenant/7"); !errors.Is(err, ErrLocked) {
		t.Fatalf("second TryLock: err = %v, want ErrLocked", err)
	}
	other, err := c.TryLock(ctx, "tenant/8")
	if err != nil {
		t.Fatalf("another name: %v", err)
	}
	defer other.Unlock(ctx)
	if err := l1.Update(func(tx *Tx) error { return tx.PutMigration(Migration{ID: "m1", TenantID: 7, Role: Source}) }); err != nil {
		t.Fatalf("holder's write: %v", err)
	}
	got := make(chan *Lock, 1)
	go func() {
		l2, err := c.Lock(ctx, "tenant/7")
		if err != nil {
			t.Error(err)
		}
		got <- l2
	}()
	select {
	case <-got:
		t.Fatal("Lock returned while another driver holds the lock")
	case <-time.After(100 * time.Millisecond):
	}
	if err := l1.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	<-l1.Lost()
	var l2 *Lock
	select {
	case l2 = <-got:
	case <-time.After(wait):
		t.Fatal("the waiting driver never got the lock")
	}
	if err := l1.Update(func(tx *Tx) error {
		return tx.PutMigration(Migration{ID: "m1", TenantID: 7, Role: Source, Error: "stale"})
	}); !errors.Is(err, ErrNotOwner) {
		t.Fatalf("write after Unlock: err = %v, want ErrNotOwner", err)
	}
	if err := l2.Update(func(tx *Tx) error {
		return tx.PutMigration(Migration{ID: "m1", TenantID: 7, Role: Source, Error: "new driver"})
	}); err != nil {
		t.Fatalf("new holder's write: %v", err)
	}
	m, err := c.Migration("m1")
	if err != nil || m.Error != "new driver" {
		t.Fatalf("m1 = %+v, %v; want the new driver's write", m, err)
	}
	if err := l2.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestStaleDriverFenced: the driver of a migration loses its lease (its
// agent paused or cut off past the TTL: here the lease is revoked), another
// agent process with the same name takes the lock, reads the first driver's
// last record and goes on; the first driver, revived with its stale view
// (it has not noticed the loss), cannot write.
func TestStaleDriverFenced(t *testing.T) {
	ctx := context.Background()
	prefix := "/stale"
	a := openEtcd(t, etcdShared.Endpoints, prefix, "a1")
	defer a.Close()
	b := openEtcd(t, etcdShared.Endpoints, prefix, "a1")
	defer b.Close()

	la, err := a.Lock(ctx, "tenant/7")
	if err != nil {
		t.Fatal(err)
	}
	put := func(l *Lock, rec string) error {
		return l.Update(func(tx *Tx) error {
			m, err := tx.Migration("m1")
			if errors.Is(err, ErrNotFound) {
				m = Migration{ID: "m1", TenantID: 7, Role: Source}
			} else if err != nil {
				return err
			}
			m.Record = []byte(`"` + rec + `"`)
			return tx.PutMigration(m)
		})
	}
	if err := put(la, "snapshot"); err != nil {
		t.Fatal(err)
	}
	if _, err := b.TryLock(ctx, "tenant/7"); !errors.Is(err, ErrLocked) {
		t.Fatalf("second agent's TryLock: err = %v, want ErrLocked", err)
	}
	got := make(chan *Lock, 1)
	go func() {
		lb, err := b.Lock(ctx, "tenant/7")
		if err != nil {
			t.Error(err)
		}
		got <- lb
	}()
	// The driver as it was before the loss: a copy whose Lost channel never
	// closes, as a process that has not yet noticed.
	stale := &Lock{name: la.name, c: la.c, etcd: la.etcd, unlock: la.unlock, lost: make(chan struct{})}

	st := a.st.(*etcdStore)
	st.mu.Lock()
	lease := st.sess.Lease()
	st.mu.Unlock()
	if _, err := st.cli.Revoke(ctx, lease); err != nil {
		t.Fatal(err)
	}
	var lb *Lock
	select {
	case lb = <-got:
	case <-time.After(wait):
		t.Fatal("the second driver never got the lock after the first one's lease ended")
	}
	select {
	case <-la.Lost():
	case <-time.After(wait):
		t.Fatal("Lost never closed after the lease was revoked")
	}
	m, err := b.Migration("m1")
	if err != nil || string(m.Record) != `"snapshot"` {
		t.Fatalf("the new driver reads %+v, %v; want the first driver's last record", m, err)
	}
	if err := put(stale, "handover"); !errors.Is(err, ErrNotOwner) {
		t.Fatalf("stale driver's write: err = %v, want ErrNotOwner", err)
	}
	if err := put(la, "handover"); !errors.Is(err, ErrNotOwner) {
		t.Fatalf("lost driver's write: err = %v, want ErrNotOwner", err)
	}
	if err := put(lb, "catch-up"); err != nil {
		t.Fatalf("new driver's write: %v", err)
	}
	if err := put(stale, "handover"); !errors.Is(err, ErrNotOwner) {
		t.Fatalf("stale driver's write after the new one's: err = %v, want ErrNotOwner", err)
	}
	if m, _ := a.Migration("m1"); string(m.Record) != `"catch-up"` {
		t.Fatalf("record = %s, want the new driver's", m.Record)
	}
	// The first agent's catalog still works: a new lock takes a new session.
	if _, err := a.TryLock(ctx, "tenant/9"); err != nil {
		t.Fatalf("a lock after the lost session: %v", err)
	}
}
