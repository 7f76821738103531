package catalog

import (
	"context"
	"fmt"

	bolt "go.etcd.io/bbolt"
)

// boltStore is the embedded backend: one bbolt file, opened by one process
// at a time (bolt's file lock). Its locks live in this process: the file's
// lock already makes the process the catalog's only writer, so a lock here
// only orders the drivers inside it, and a guarded write fails only after
// its own driver unlocked (a process cannot outlive its lease: it has none).
type boltStore struct {
	db    *bolt.DB
	local *localLocks
}

func openBolt(path string) (*boltStore, error) {
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: LockTimeout})
	if err != nil {
		return nil, err
	}
	err = db.Update(func(tx *bolt.Tx) error {
		for _, b := range buckets {
			if _, err := tx.CreateBucketIfNotExists(b); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		db.Close()
		return nil, err
	}
	return &boltStore{db: db, local: newLocalLocks()}, nil
}

func (s *boltStore) view(fn func(kvTx) error) error {
	return s.db.View(func(tx *bolt.Tx) error { return fn(boltTx{tx}) })
}

func (s *boltStore) update(guard *Lock, fn func(kvTx) error) error {
	return s.db.Update(func(tx *bolt.Tx) error {
		if guard != nil && (guard.c == nil || guard.c.st != store(s) || !s.local.holds(guard)) {
			return fmt.Errorf("catalog: lock %s: %w", guard.name, ErrNotOwner)
		}
		return fn(boltTx{tx})
	})
}

func (s *boltStore) lock(ctx context.Context, name string, wait bool) (*Lock, error) {
	l := newLock(name)
	if err := s.local.acquire(ctx, l, wait); err != nil {
		return nil, err
	}
	l.unlock = func(context.Context) error { s.local.release(l); return nil }
	return l, nil
}

func (s *boltStore) close() error { return s.db.Close() }

// boltTx and boltBucket adapt bbolt's types to kvTx and bucket.
type boltTx struct{ tx *bolt.Tx }

func (t boltTx) Bucket(name []byte) bucket { return t.tx.Bucket(name) }

var _ bucket = (*bolt.Bucket)(nil)
