package catalog

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.uber.org/zap"
)

// DefaultLeaseTTL is the etcd lease of an agent's session (EtcdOptions.LeaseTTL):
// how long after an agent dies, hangs or is cut off from etcd its locks
// (the migrations it drives) stay held before another driver may take
// them over. Shorter hands a migration over sooner; a pause longer than
// it (a stalled disk, a network blip) costs the agent its locks and
// stops its drivers. 10 s; etcd grants at least about 2 s.
const DefaultLeaseTTL = 10 * time.Second

// etcdOpTimeout bounds one catalog transaction on etcd (every attempt of
// it): a cluster without a quorum fails the write after it, not never.
const etcdOpTimeout = 10 * time.Second

// etcdMaxConflicts is how many times Update runs its function again when
// a concurrent write changed what it read, before it gives up.
const etcdMaxConflicts = 100

// EtcdOptions configure OpenEtcd.
type EtcdOptions struct {
	// Endpoints are the cluster's client URLs or host:port. Required.
	Endpoints []string
	// Prefix is the catalog's key prefix ("/sluice"): every key the
	// catalog writes starts with it, so one etcd serves several catalogs.
	// Starts with '/', no trailing '/'. Required.
	Prefix string
	// Agent names this agent: its own records live under
	// <Prefix>/agents/<Agent>/, and placement records name it. Required.
	Agent string
	// LeaseTTL is the session's lease (rounded up to whole seconds); zero:
	// DefaultLeaseTTL.
	LeaseTTL time.Duration
	// TLS, if set, is the client's TLS configuration (https endpoints).
	TLS *tls.Config

	opTimeout time.Duration // etcdOpTimeout unless set (tests)
}

// Spec is a parsed catalog setting (agent config "catalog"): "" for the
// embedded bbolt file, or etcd://host:port[,host:port...]/prefix.
type Spec struct {
	Endpoints []string // empty: bbolt
	Prefix    string
}

// Etcd reports whether s names an etcd catalog.
func (s Spec) Etcd() bool { return len(s.Endpoints) > 0 }

// String is the spec as written.
func (s Spec) String() string {
	if !s.Etcd() {
		return ""
	}
	return "etcd://" + strings.Join(s.Endpoints, ",") + s.Prefix
}

// ParseSpec parses a catalog setting: "" (the embedded bbolt file) or
// etcd://host:port[,host:port...][/prefix] — the prefix defaults to
// "/sluice".
func ParseSpec(s string) (Spec, error) {
	if s == "" {
		return Spec{}, nil
	}
	rest, ok := strings.CutPrefix(s, "etcd://")
	if !ok {
		return Spec{}, fmt.Errorf("catalog %q: want etcd://host:port[,host:port...]/prefix or empty (the embedded file)", s)
	}
	hosts, prefix, _ := strings.Cut(rest, "/")
	prefix = "/" + strings.TrimRight(prefix, "/")
	if prefix == "/" {
		prefix = "/sluice"
	}
	if err := checkPrefix(prefix); err != nil {
		return Spec{}, fmt.Errorf("catalog %q: %w", s, err)
	}
	var sp Spec
	for _, h := range strings.Split(hosts, ",") {
		host, port, err := net.SplitHostPort(h)
		if err != nil || host == "" {
			return Spec{}, fmt.Errorf("catalog %q: endpoint %q: want host:port", s, h)
		}
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
			return Spec{}, fmt.Errorf("catalog %q: endpoint %q: bad port", s, h)
		}
		sp.Endpoints = append(sp.Endpoints, h)
	}
	sp.Prefix = prefix
	return sp, nil
}

func checkPrefix(p string) error {
	if !strings.HasPrefix(p, "/") || strings.HasSuffix(p, "/") || strings.Contains(p, "//") {
		return fmt.Errorf("prefix %q: want /name[/name...]", p)
	}
	return nil
}

// OpenEtcd opens the catalog kept in an etcd cluster under o.Prefix,
// creating its schema record if needed. It fails (after etcdOpTimeout)
// when no quorum answers.
func OpenEtcd(o EtcdOptions) (*Catalog, error) {
	spec := Spec{Endpoints: o.Endpoints, Prefix: o.Prefix}.String()
	if len(o.Endpoints) == 0 {
		return nil, errors.New("catalog: etcd: no endpoints")
	}
	if err := checkPrefix(o.Prefix); err != nil {
		return nil, fmt.Errorf("catalog: etcd: %w", err)
	}
	if o.Agent == "" || strings.Contains(o.Agent, "/") {
		return nil, fmt.Errorf("catalog: etcd: agent name %q: want a non-empty name without '/'", o.Agent)
	}
	ttl := cmpOr(o.LeaseTTL, DefaultLeaseTTL)
	cli, err := clientv3.New(clientv3.Config{Endpoints: o.Endpoints, DialTimeout: 5 * time.Second, TLS: o.TLS, Logger: zap.NewNop()})
	if err != nil {
		return nil, fmt.Errorf("catalog: open %s: %w", spec, err)
	}
	st := &etcdStore{cli: cli, prefix: o.Prefix, agent: o.Agent, ttl: int((ttl + time.Second - 1) / time.Second), local: newLocalLocks(),
		opTimeout: cmpOr(o.opTimeout, etcdOpTimeout)}
	c := &Catalog{st: st, path: spec, agent: o.Agent, now: time.Now}
	if err := c.checkSchema(); err != nil {
		cli.Close()
		if errors.Is(err, context.DeadlineExceeded) {
			err = fmt.Errorf("no etcd quorum answered within %s", st.opTimeout)
		}
		return nil, fmt.Errorf("catalog: open %s: %w", spec, err)
	}
	return c, nil
}

func cmpOr(d, def time.Duration) time.Duration {
	if d <= 0 {
		return def
	}
	return d
}

// etcdStore keeps the catalog's buckets as key ranges in etcd:
//
//	<prefix>/agents/<agent>/<bucket>/<key>   this agent's records
//	<prefix>/shared/<bucket>/<key>           records every agent shares (sharedBuckets)
//	<prefix>/agents/<agent>/<bucket>         a bucket's version: rewritten by every commit that writes the bucket
//	<prefix>/locks/<name>/<lease>            the holder and waiters of lock name (concurrency.Mutex)
//
// A transaction is optimistic (as concurrency.NewSTM's serializable
// isolation, with range reads added): every read is at the revision of the
// first one, writes are buffered, and the commit is one etcd Txn whose
// guards say that nothing it read changed since — each key read has the
// same mod revision, each bucket ranged over has the same version — and,
// for a guarded update, that the lock's key still has the create revision
// it was acquired with (concurrency.Mutex.IsOwner: the fencing token). A
// commit refused for a changed read runs the function again; one refused
// because the lock is gone is ErrNotOwner.
type etcdStore struct {
	cli    *clientv3.Client
	prefix string
	agent  string
	ttl    int // seconds
	local  *localLocks
	// opTimeout bounds one transaction attempt, a lease grant (etcdOpTimeout).
	opTimeout time.Duration

	mu   sync.Mutex
	sess *concurrency.Session // nil, or the current session (a new one after it ended)
}

// bucketPrefix is the key prefix of bucket b's keys.
func (s *etcdStore) bucketPrefix(b []byte) string {
	if sharedBuckets[string(b)] {
		return s.prefix + "/shared/" + string(b) + "/"
	}
	return s.prefix + "/agents/" + s.agent + "/" + string(b) + "/"
}

func (s *etcdStore) view(fn func(kvTx) error) error {
	ctx, cancel := context.WithTimeout(context.Background(), s.opTimeout)
	defer cancel()
	t := s.newTx(ctx, false)
	err := fn(t)
	if t.err != nil {
		return fmt.Errorf("catalog: etcd: %w", t.err)
	}
	return err
}

func (s *etcdStore) update(guard *Lock, fn func(kvTx) error) error {
	for attempt := 0; ; attempt++ {
		ok, err := s.attempt(guard, fn)
		if err != nil || ok {
			return err
		}
		if attempt == etcdMaxConflicts {
			return fmt.Errorf("catalog: etcd: %d conflicting writes in a row", attempt)
		}
	}
}

// attempt runs fn once and commits it: ok false means a concurrent write
// changed what fn read (run it again).
func (s *etcdStore) attempt(guard *Lock, fn func(kvTx) error) (ok bool, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), s.opTimeout)
	defer cancel()
	t := s.newTx(ctx, true)
	err = fn(t)
	if t.err != nil {
		return false, fmt.Errorf("catalog: etcd: %w", t.err)
	}
	if err != nil {
		return false, err
	}
	var cmps []clientv3.Cmp
	for k, mod := range t.reads {
		cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(k), "=", mod))
	}
	for pfx, mod := range t.ranged {
		cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(versionKey(pfx)), "=", mod))
	}
	if guard != nil {
		if guard.etcd == nil || guard.c == nil || guard.c.st != store(s) {
			return false, fmt.Errorf("catalog: lock %s is not this catalog's", guard.name)
		}
		cmps = append(cmps, guard.etcd.owner)
	}
	var ops []clientv3.Op
	for k, w := range t.writes {
		if w.del {
			ops = append(ops, clientv3.OpDelete(k))
		} else {
			ops = append(ops, clientv3.OpPut(k, string(w.v)))
		}
	}
	for pfx := range t.dirty {
		ops = append(ops, clientv3.OpPut(versionKey(pfx), ""))
	}
	if len(ops) == 0 && guard == nil {
		return true, nil
	}
	resp, err := s.cli.Txn(ctx).If(cmps...).Then(ops...).Commit()
	if err != nil {
		return false, fmt.Errorf("catalog: etcd: commit: %w", err)
	}
	if resp.Succeeded {
		return true, nil
	}
	if guard != nil {
		// Which guard failed? A lock's key, once gone, never comes back
		// with the same create revision: a "still owner" now means it was
		// owner at the refused commit too.
		own, err := s.cli.Txn(ctx).If(guard.etcd.owner).Commit()
		if err != nil {
			return false, fmt.Errorf("catalog: etcd: %w", err)
		}
		if !own.Succeeded {
			return false, fmt.Errorf("catalog: lock %s: %w", guard.name, ErrNotOwner)
		}
	}
	return false, nil
}

func versionKey(bucketPrefix string) string { return strings.TrimSuffix(bucketPrefix, "/") }

// session returns the agent's session, a new one if the last one ended
// (its lease expired or was revoked).
func (s *etcdStore) session() (*concurrency.Session, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.sess != nil {
		select {
		case <-s.sess.Done():
		default:
			return s.sess, nil
		}
	}
	// The lease is granted here, under a deadline: NewSession's own grant
	// would wait for a quorum as long as the client lives.
	ctx, cancel := context.WithTimeout(context.Background(), s.opTimeout)
	lease, err := s.cli.Grant(ctx, int64(s.ttl))
	cancel()
	if err != nil {
		return nil, fmt.Errorf("catalog: etcd: lease: %w", err)
	}
	sess, err := concurrency.NewSession(s.cli, concurrency.WithLease(lease.ID), concurrency.WithTTL(s.ttl))
	if err != nil {
		return nil, fmt.Errorf("catalog: etcd: session: %w", err)
	}
	s.sess = sess
	return sess, nil
}

// etcdLock is a Lock's etcd part.
type etcdLock struct {
	m     *concurrency.Mutex
	owner clientv3.Cmp // m.IsOwner() when acquired
}

func (s *etcdStore) lock(ctx context.Context, name string, wait bool) (*Lock, error) {
	l := newLock(name)
	// One session holds every lock of this process: a second driver here
	// would find the mutex its own, so the process orders its drivers
	// first.
	if err := s.local.acquire(ctx, l, wait); err != nil {
		return nil, err
	}
	sess, err := s.session()
	if err != nil {
		s.local.release(l)
		return nil, err
	}
	m := concurrency.NewMutex(sess, s.prefix+"/locks/"+name)
	if wait {
		err = m.Lock(ctx)
	} else {
		err = m.TryLock(ctx)
	}
	if err != nil {
		s.local.release(l)
		if errors.Is(err, concurrency.ErrLocked) {
			return nil, fmt.Errorf("catalog: lock %s: %w", name, ErrLocked)
		}
		return nil, fmt.Errorf("catalog: lock %s: %w", name, err)
	}
	l.etcd = &etcdLock{m: m, owner: m.IsOwner()}
	l.unlock = func(ctx context.Context) error {
		defer l.markLost()
		defer s.local.release(l)
		select {
		case <-l.lost:
			return nil
		default:
		}
		if err := m.Unlock(ctx); err != nil && !errors.Is(err, concurrency.ErrLockReleased) {
			return fmt.Errorf("catalog: unlock %s: %w", name, err)
		}
		return nil
	}
	go func() {
		select {
		case <-sess.Done():
			s.local.release(l)
			l.markLost()
		case <-l.lost:
		}
	}()
	return l, nil
}

func (s *etcdStore) close() error {
	s.mu.Lock()
	if s.sess != nil {
		s.sess.Close() // revokes the lease: this agent's locks are free at once
	}
	s.mu.Unlock()
	return s.cli.Close()
}

// etcdTx is one attempt of a transaction (see etcdStore).
type etcdTx struct {
	s        *etcdStore
	ctx      context.Context
	writable bool
	rev      int64                // the snapshot's revision; 0 before the first read
	reads    map[string]int64     // key read -> its mod revision at rev (0: absent)
	vals     map[string][]byte    // key read -> its value at rev (nil: absent)
	ranged   map[string]int64     // bucket prefix ranged over -> its version's mod revision at rev
	writes   map[string]etcdWrite // buffered writes
	dirty    map[string]bool      // bucket prefixes written
	err      error                // the first failed read: fails the transaction
}

type etcdWrite struct {
	v   []byte
	del bool
}

func (s *etcdStore) newTx(ctx context.Context, writable bool) *etcdTx {
	return &etcdTx{s: s, ctx: ctx, writable: writable, reads: map[string]int64{}, vals: map[string][]byte{},
		ranged: map[string]int64{}, writes: map[string]etcdWrite{}, dirty: map[string]bool{}}
}

func (t *etcdTx) Bucket(name []byte) bucket { return etcdBucket{t: t, pfx: t.s.bucketPrefix(name)} }

// get reads key k at the snapshot's revision (fixing it at the first read).
func (t *etcdTx) get(k string, opts ...clientv3.OpOption) *clientv3.GetResponse {
	if t.err != nil {
		return nil
	}
	if t.rev > 0 {
		opts = append(opts, clientv3.WithRev(t.rev))
	}
	resp, err := t.s.cli.Get(t.ctx, k, opts...)
	if err != nil {
		t.err = err
		return nil
	}
	if t.rev == 0 {
		t.rev = resp.Header.Revision
	}
	return resp
}

type etcdBucket struct {
	t   *etcdTx
	pfx string
}

func (b etcdBucket) Get(key []byte) []byte {
	t, k := b.t, b.pfx+string(key)
	if w, ok := t.writes[k]; ok {
		if w.del {
			return nil
		}
		return w.v
	}
	if _, ok := t.reads[k]; ok {
		return t.vals[k]
	}
	resp := t.get(k)
	if resp == nil {
		return nil
	}
	var v []byte
	var mod int64
	if len(resp.Kvs) > 0 {
		v, mod = resp.Kvs[0].Value, resp.Kvs[0].ModRevision
	}
	t.reads[k], t.vals[k] = mod, v
	return v
}

func (b etcdBucket) Put(key, value []byte) error {
	if !b.t.writable {
		return errors.New("catalog: write in a read-only transaction")
	}
	b.t.writes[b.pfx+string(key)] = etcdWrite{v: bytes.Clone(value)}
	b.t.dirty[b.pfx] = true
	return nil
}

func (b etcdBucket) Delete(key []byte) error {
	if !b.t.writable {
		return errors.New("catalog: write in a read-only transaction")
	}
	b.t.writes[b.pfx+string(key)] = etcdWrite{del: true}
	b.t.dirty[b.pfx] = true
	return nil
}

func (b etcdBucket) ForEach(fn func(k, v []byte) error) error {
	t := b.t
	resp := t.get(b.pfx, clientv3.WithPrefix())
	if resp == nil {
		return fmt.Errorf("catalog: etcd: %w", t.err)
	}
	if t.writable {
		if _, ok := t.ranged[b.pfx]; !ok {
			ver := t.get(versionKey(b.pfx))
			if ver == nil {
				return fmt.Errorf("catalog: etcd: %w", t.err)
			}
			var mod int64
			if len(ver.Kvs) > 0 {
				mod = ver.Kvs[0].ModRevision
			}
			t.ranged[b.pfx] = mod
		}
	}
	kv := make(map[string][]byte, len(resp.Kvs))
	for _, e := range resp.Kvs {
		kv[string(e.Key)] = e.Value
	}
	for k, w := range t.writes {
		if strings.HasPrefix(k, b.pfx) {
			if w.del {
				delete(kv, k)
			} else {
				kv[k] = w.v
			}
		}
	}
	keys := make([]string, 0, len(kv))
	for k := range kv {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if err := fn([]byte(k[len(b.pfx):]), kv[k]); err != nil {
			return err
		}
	}
	return nil
}
