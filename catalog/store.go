package catalog

import "context"

// store is a catalog's storage: serializable transactions over named
// buckets of ordered keys. Two implementations: bboltStore (one file,
// bolt.go) and etcdStore (a shared etcd cluster, etcd.go). Everything the
// catalog stores goes through a bucket, so both backends hold the same
// records and pass the same tests.
type store interface {
	// view runs fn in a read-only transaction over one consistent snapshot.
	view(fn func(kvTx) error) error
	// update runs fn in a read-write transaction, committed if fn returns
	// nil; with a non-nil guard, committed only while guard is held
	// (ErrNotOwner otherwise, and nothing written). A backend may run fn
	// more than once (etcd retries on a conflicting write): fn must have
	// no effect outside tx.
	update(guard *Lock, fn func(kvTx) error) error
	// lock acquires the exclusive lock name: waiting for its holder to
	// release or lose it when wait is true, ErrLocked at once otherwise.
	lock(ctx context.Context, name string, wait bool) (*Lock, error)
	close() error
}

// kvTx is one transaction of a store: a bucket by name. The buckets named
// in buckets exist in every store.
type kvTx interface {
	Bucket(name []byte) bucket
}

// bucket is a set of keys in byte order, as a bbolt bucket. A value read
// is valid only inside its transaction; Put and Delete in a read-only
// transaction fail. A read that fails in the backend (etcd unreachable)
// returns nil here and fails the whole transaction: View and Update return
// the backend's error, never a decision taken on a missing value.
type bucket interface {
	Get(key []byte) []byte
	Put(key, value []byte) error
	Delete(key []byte) error
	// ForEach calls fn for every key in byte order, this transaction's own
	// writes included; fn must not write to the bucket.
	ForEach(fn func(k, v []byte) error) error
}
