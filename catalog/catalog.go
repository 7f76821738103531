// Package catalog is the crash-safe record of an agent's tenants and of the
// migrations it takes part in, kept in one of two backends behind one
// interface (the same tests run on both):
//
//   - bbolt (Open), the embedded default: one file in the agent's root
//     directory, opened by one process at a time (Open fails after
//     LockTimeout otherwise); for agents that share nothing.
//   - etcd (OpenEtcd, agent config "catalog": "etcd://host:port,…/prefix"),
//     for a fleet: the agents share one etcd cluster, and a migration's
//     driver is unique among them and fenced by its lease.
//
// Model:
//   - a Tenant is one PostgreSQL postmaster with its own data directory and
//     port (Slacker's process-level multitenancy), identified by a globally
//     unique numeric ID; its State follows the lifecycle in state.go;
//   - a Migration is this agent's side (source or target) of moving one
//     tenant; Record holds the migration package's persisted state machine as
//     opaque JSON, so the catalog does not depend on it;
//   - a Keyspace (package keyspace) is a set of partitions, possibly on
//     other agents, with its tables and partition plan; the agent it was
//     created on keeps it, validated again on every read (keyspaces.go);
//   - a Placement says which agent owns a tenant (placement.go).
//   - a Plan (package plan) is a migration plan this agent drives, with
//     every move's progress (plans.go).
//
// # What agents sharing an etcd catalog share
//
// Each agent's records stay its own, under <prefix>/agents/<name>/: its
// tenants as it sees them (a tenant moved away is "moved" here and
// "running" on the agent that has it), its side of each migration, the
// keyspaces it coordinates and their reshards. A catalog opened by an
// agent reads and writes exactly what the bbolt file of that agent would
// hold, so an agent behaves the same on either backend. Shared, under
// <prefix>/shared/: the placement bucket, which makes tenant IDs unique
// across the fleet (MaxTenantID, CreateTenant) and says where each
// tenant's writable copy is. Agent names must be unique in a fleet: two
// processes with one name are one agent (a restarted one, or a stale one).
//
// # Transactions
//
// Every read and write runs in a transaction over buckets (store.go).
// Multi-step changes use Update with a *Tx so they commit atomically; the
// shorthand methods on Catalog run one operation in its own transaction. A
// Catalog is safe for concurrent use. bbolt serialises writers; etcd runs
// optimistic serializable transactions (etcd.go), so an Update's function
// may run more than once and must act only on its Tx.
//
// # A unique driver
//
// A migration's driver holds a Lock (Catalog.Lock, TryLock; the agent
// takes one per tenant) and writes through Lock.Update, which commits only
// while the lock is held: with etcd the lock is a concurrency.Mutex on the
// agent's leased session and every guarded commit compares the mutex key's
// create revision (its fencing token), so a driver whose lease ended — its
// agent cut off, paused or dead past the TTL — cannot write once another
// driver may hold the lock, and gets ErrNotOwner. With bbolt the lock is
// in-process: the file's own lock already makes the process the only
// writer, so the guard fails only after the driver unlocked.
package catalog

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"time"
)

// FileName is the catalog's file name inside an agent's root directory.
const FileName = "catalog.db"

// LockTimeout is how long Open waits for another process holding the file
// (another agent on the same root) before failing.
const LockTimeout = 2 * time.Second

// ErrNotFound is returned when a tenant or migration does not exist.
var ErrNotFound = errors.New("catalog: not found")

// ErrExists is returned by CreateTenant when the ID is taken by a live
// tenant, and by CreateKeyspace when the name is taken.
var ErrExists = errors.New("catalog: already exists")

var (
	bucketTenants    = []byte("tenants")
	bucketMigrations = []byte("migrations")
	bucketMeta       = []byte("meta")
	bucketKeyspaces  = []byte("keyspaces")
	bucketReshards   = []byte("reshards")
	bucketPlacement  = []byte("placement")
	bucketPlans      = []byte("plans")
	keySchema        = []byte("schema")
)

// sharedBuckets are the buckets every agent sharing an etcd catalog shares
// (the others are each agent's own; see the package doc).
var sharedBuckets = map[string]bool{string(bucketPlacement): true}

// buckets are the catalog's buckets; every store has them all.
var buckets = [][]byte{bucketTenants, bucketMigrations, bucketMeta, bucketKeyspaces, bucketReshards, bucketPlacement, bucketPlans}

// schemaVersion is written at creation; Open refuses a newer file.
const schemaVersion = 1

// Tenant is one tenant postmaster on this agent.
type Tenant struct {
	ID       int64             `json:"id"`       // globally unique, > 0
	Name     string            `json:"name"`     // human name, informative only
	Port     int               `json:"port"`     // TCP port of its postmaster
	Dir      string            `json:"dir"`      // absolute data directory
	State    State             `json:"state"`    // lifecycle state
	Settings map[string]string `json:"settings"` // postgresql.conf parameters it was created with
	// Migration is the ID of the migration moving this tenant in or out, if any.
	Migration string    `json:"migration,omitempty"`
	Created   time.Time `json:"created"`
	Updated   time.Time `json:"updated"`
}

// Role is this agent's side of a migration.
type Role string

const (
	Source Role = "source" // the tenant moves out of this agent
	Target Role = "target" // the tenant moves into this agent
)

// Migration is this agent's record of one migration.
type Migration struct {
	ID       string  `json:"id"`        // unique, chosen by the source agent
	TenantID int64   `json:"tenant_id"` // tenant being moved
	Role     Role    `json:"role"`
	Peer     string  `json:"peer"`     // the other agent's name
	PeerURL  string  `json:"peer_url"` // the other agent's HTTP API base URL
	Mode     string  `json:"mode"`     // "live" or "stop-and-copy"
	Rate     float64 `json:"rate"`     // requested rate, bytes/s; 0 = unlimited
	// Checkpoint is how the snapshot's checkpoint is taken
	// (agent/client.StartMigration.Checkpoint); "" = fast.
	Checkpoint string `json:"checkpoint,omitempty"`
	WALRelay   string `json:"wal_relay,omitempty"` // agent/client.StartMigration.WALRelay; "" = target
	// WALSource, on the target of a migration whose standby streams through
	// this agent's WAL relay, is the standby's primary conninfo as the
	// source gave it (the relay dials its host and port): a restarted agent
	// re-creates the relay from it. "" otherwise.
	WALSource string `json:"wal_source,omitempty"`
	// WALEarly, on the target, is the WAL received during the copy that
	// its standby replayed from disk (client.Migration.WALEarlyBytes).
	WALEarly int64           `json:"wal_early_bytes,omitempty"`
	Control  json.RawMessage `json:"control,omitempty"` // the control loop's spec (agent/client.Control), if any
	// Deadline is when a migration that has not switched its route rolls
	// back (agent/client.StartMigration.Deadline); zero = none.
	Deadline time.Time       `json:"deadline,omitzero"`
	Done     bool            `json:"done"` // finished (committed or aborted); nothing left to resume
	Outcome  string          `json:"outcome,omitempty"`
	Error    string          `json:"error,omitempty"`
	Record   json.RawMessage `json:"record,omitempty"` // the migration package's Record
	// Moved is what an aborted migration had sent before its rollback
	// (its Record's counts are reset with the snapshot), bytes; 0 otherwise.
	Moved int64 `json:"moved_bytes,omitempty"`
	// WALBytes is the WAL the relay passed to the standby (CATCH-UP and
	// HANDOVER; a target's relay counts up to the handover's hold, and the
	// early WAL it passed during the copy), bytes; 0 unknown.
	WALBytes int64     `json:"wal_relayed_bytes,omitempty"`
	Created  time.Time `json:"created"`
	Updated  time.Time `json:"updated"`
}

// Catalog is an open catalog: a bbolt file (Open) or a prefix in an etcd
// cluster (OpenEtcd).
type Catalog struct {
	st    store
	path  string // the file, or the etcd spec
	agent string // this agent's name, written in placement records ("" with Open)
	now   func() time.Time
	serve serving // where this agent's tenants are reached (SetServing)
}

// serving is where an agent's tenants are reached, for placement records:
// host:port of a tenant is host and its Port.
type serving struct{ host, database string }

// SetServing says where clients reach this agent's tenants: host (the
// agent's advertised host; its tenants' ports follow) and the database on
// them. Placement records written from then on carry the address and
// database (Placement.Addr, Database), which proxies watching the catalog
// route to. Call it once, right after opening, before any write.
func (c *Catalog) SetServing(host, database string) { c.serve = serving{host, database} }

// Open opens (creating if needed) the catalog file at path.
func Open(path string) (*Catalog, error) {
	st, err := openBolt(path)
	if err != nil {
		return nil, fmt.Errorf("catalog: open %s: %w", path, err)
	}
	c := &Catalog{st: st, path: path, now: time.Now}
	if err := c.checkSchema(); err != nil {
		st.close()
		return nil, fmt.Errorf("catalog: open %s: %w", path, err)
	}
	return c, nil
}

// checkSchema writes the schema version into a new catalog and refuses one
// written by a newer sluice.
func (c *Catalog) checkSchema() error {
	return c.Update(func(tx *Tx) error {
		meta := tx.tx.Bucket(bucketMeta)
		if v := meta.Get(keySchema); v != nil {
			if n := binary.BigEndian.Uint64(v); n > schemaVersion {
				return fmt.Errorf("schema version %d is newer than this sluice's %d", n, schemaVersion)
			}
			return nil
		}
		return meta.Put(keySchema, itob(schemaVersion))
	})
}

// Close closes the file (bbolt) or the client and its session (etcd): the
// locks this catalog holds are released with it.
func (c *Catalog) Close() error { return c.st.close() }

// Path returns the file's path, or the etcd spec (etcd://endpoints/prefix).
func (c *Catalog) Path() string { return c.path }

// Tx is a catalog transaction; valid only inside the View or Update callback.
type Tx struct {
	tx    kvTx
	now   time.Time
	agent string
	serve serving
}

// View runs fn in a read-only transaction over one consistent snapshot.
func (c *Catalog) View(fn func(*Tx) error) error {
	return c.st.view(func(tx kvTx) error { return fn(&Tx{tx: tx, now: c.now(), agent: c.agent, serve: c.serve}) })
}

// Update runs fn in a read-write transaction, committed if fn returns nil.
// fn may run more than once (the etcd backend retries it when a concurrent
// write conflicted with what it read): it must do nothing outside tx.
func (c *Catalog) Update(fn func(*Tx) error) error { return c.update(nil, fn) }

func (c *Catalog) update(guard *Lock, fn func(*Tx) error) error {
	return c.st.update(guard, func(tx kvTx) error { return fn(&Tx{tx: tx, now: c.now(), agent: c.agent, serve: c.serve}) })
}

// Tenant returns tenant id, or ErrNotFound.
func (t *Tx) Tenant(id int64) (Tenant, error) {
	var tn Tenant
	v := t.tx.Bucket(bucketTenants).Get(itob(uint64(id)))
	if v == nil {
		return tn, fmt.Errorf("catalog: tenant %d: %w", id, ErrNotFound)
	}
	if err := json.Unmarshal(v, &tn); err != nil {
		return tn, fmt.Errorf("catalog: tenant %d: %w", id, err)
	}
	return tn, nil
}

// Tenants returns every tenant, deleted ones included, in ID order.
func (t *Tx) Tenants() ([]Tenant, error) {
	var out []Tenant
	err := t.tx.Bucket(bucketTenants).ForEach(func(k, v []byte) error {
		var tn Tenant
		if err := json.Unmarshal(v, &tn); err != nil {
			return fmt.Errorf("catalog: tenant %d: %w", binary.BigEndian.Uint64(k), err)
		}
		out = append(out, tn)
		return nil
	})
	return out, err
}

// PutTenant writes tn (insert or replace), stamping Updated (and Created when zero).
func (t *Tx) PutTenant(tn Tenant) error {
	if tn.ID <= 0 {
		return fmt.Errorf("catalog: put tenant: id %d must be > 0", tn.ID)
	}
	if !tn.State.Valid() {
		return fmt.Errorf("catalog: put tenant %d: invalid state %q", tn.ID, tn.State)
	}
	if tn.Created.IsZero() {
		tn.Created = t.now
	}
	tn.Updated = t.now
	v, err := json.Marshal(tn)
	if err != nil {
		return fmt.Errorf("catalog: put tenant %d: %w", tn.ID, err)
	}
	if err := t.place(tn); err != nil {
		return fmt.Errorf("catalog: put tenant %d: %w", tn.ID, err)
	}
	return t.tx.Bucket(bucketTenants).Put(itob(uint64(tn.ID)), v)
}

// CreateTenant inserts tn unless a tenant with its ID exists in a state other
// than Deleted (a deleted tenant's ID may be reused), here or, in a shared
// catalog, owned by another agent (its placement), in which case ErrExists.
func (t *Tx) CreateTenant(tn Tenant) error {
	old, err := t.Tenant(tn.ID)
	if err == nil && old.State != Deleted {
		return fmt.Errorf("catalog: create tenant %d: %w (state %s)", tn.ID, ErrExists, old.State)
	}
	if p, err := t.Placement(tn.ID); err == nil && p.Agent != t.agent && p.State != Deleted {
		return fmt.Errorf("catalog: create tenant %d: %w (on agent %s, state %s)", tn.ID, ErrExists, p.Agent, p.State)
	}
	tn.Created = time.Time{}
	return t.PutTenant(tn)
}

// SetTenantState moves tenant id to state to, checking the lifecycle
// (CanTransition). It returns the updated tenant.
func (t *Tx) SetTenantState(id int64, to State) (Tenant, error) {
	tn, err := t.Tenant(id)
	if err != nil {
		return tn, err
	}
	if !CanTransition(tn.State, to) {
		return tn, fmt.Errorf("catalog: tenant %d: %w: %s -> %s", id, ErrBadTransition, tn.State, to)
	}
	tn.State = to
	return tn, t.PutTenant(tn)
}

// DeleteTenant removes tenant id's record entirely (Deleted keeps a tombstone;
// this forgets it).
func (t *Tx) DeleteTenant(id int64) error {
	if err := t.unplace(id); err != nil {
		return err
	}
	return t.tx.Bucket(bucketTenants).Delete(itob(uint64(id)))
}

// MaxTenantID returns the largest tenant ID ever recorded, here or (a
// shared catalog) by any agent (0 when none).
func (t *Tx) MaxTenantID() int64 {
	m := t.maxPlacedID()
	t.tx.Bucket(bucketTenants).ForEach(func(k, _ []byte) error {
		m = max(m, int64(binary.BigEndian.Uint64(k)))
		return nil
	})
	return m
}

// Migration returns migration id, or ErrNotFound.
func (t *Tx) Migration(id string) (Migration, error) {
	var m Migration
	v := t.tx.Bucket(bucketMigrations).Get([]byte(id))
	if v == nil {
		return m, fmt.Errorf("catalog: migration %q: %w", id, ErrNotFound)
	}
	if err := json.Unmarshal(v, &m); err != nil {
		return m, fmt.Errorf("catalog: migration %q: %w", id, err)
	}
	return m, nil
}

// Migrations returns every migration, oldest first.
func (t *Tx) Migrations() ([]Migration, error) {
	var out []Migration
	err := t.tx.Bucket(bucketMigrations).ForEach(func(k, v []byte) error {
		var m Migration
		if err := json.Unmarshal(v, &m); err != nil {
			return fmt.Errorf("catalog: migration %q: %w", k, err)
		}
		out = append(out, m)
		return nil
	})
	sort.SliceStable(out, func(i, j int) bool { return out[i].Created.Before(out[j].Created) })
	return out, err
}

// PutMigration writes m (insert or replace), stamping Updated (and Created when zero).
func (t *Tx) PutMigration(m Migration) error {
	if m.ID == "" {
		return errors.New("catalog: put migration: empty id")
	}
	if m.Role != Source && m.Role != Target {
		return fmt.Errorf("catalog: put migration %q: invalid role %q", m.ID, m.Role)
	}
	if m.Created.IsZero() {
		m.Created = t.now
	}
	m.Updated = t.now
	v, err := json.Marshal(m)
	if err != nil {
		return fmt.Errorf("catalog: put migration %q: %w", m.ID, err)
	}
	return t.tx.Bucket(bucketMigrations).Put([]byte(m.ID), v)
}

// Tenant is View + Tx.Tenant.
func (c *Catalog) Tenant(id int64) (tn Tenant, err error) {
	err = c.View(func(tx *Tx) error { tn, err = tx.Tenant(id); return err })
	return tn, err
}

// Tenants is View + Tx.Tenants.
func (c *Catalog) Tenants() (ts []Tenant, err error) {
	err = c.View(func(tx *Tx) error { ts, err = tx.Tenants(); return err })
	return ts, err
}

// PutTenant is Update + Tx.PutTenant.
func (c *Catalog) PutTenant(tn Tenant) error {
	return c.Update(func(tx *Tx) error { return tx.PutTenant(tn) })
}

// SetTenantState is Update + Tx.SetTenantState.
func (c *Catalog) SetTenantState(id int64, to State) (tn Tenant, err error) {
	err = c.Update(func(tx *Tx) error { tn, err = tx.SetTenantState(id, to); return err })
	return tn, err
}

// Migration is View + Tx.Migration.
func (c *Catalog) Migration(id string) (m Migration, err error) {
	err = c.View(func(tx *Tx) error { m, err = tx.Migration(id); return err })
	return m, err
}

// Migrations is View + Tx.Migrations.
func (c *Catalog) Migrations() (ms []Migration, err error) {
	err = c.View(func(tx *Tx) error { ms, err = tx.Migrations(); return err })
	return ms, err
}

// PutMigration is Update + Tx.PutMigration.
func (c *Catalog) PutMigration(m Migration) error {
	return c.Update(func(tx *Tx) error { return tx.PutMigration(m) })
}

func itob(v uint64) []byte {
	b := make([]byte, 8)
	binary.BigEndian.PutUint64(b, v)
	return b
}
