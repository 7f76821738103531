// Package catalog is an agent's embedded, crash-safe record of its tenants and
// of the migrations it takes part in: one bbolt file in the agent's root
// directory that survives restarts.
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
//   - a Plan (package plan) is a migration plan this agent drives, with
//     every move's progress (plans.go).
//
// Every read and write runs in a bbolt transaction. Multi-step changes use
// Update with a *Tx so they commit atomically; the shorthand methods on
// Catalog run one operation in its own transaction. A Catalog is safe for
// concurrent use; bbolt serialises writers and a file may be opened by one
// process at a time (Open fails after Options.LockTimeout otherwise).
package catalog

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"time"

	bolt "go.etcd.io/bbolt"
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
	bucketPlans      = []byte("plans")
	keySchema        = []byte("schema")
)

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

// Catalog is an open catalog file.
type Catalog struct {
	db   *bolt.DB
	path string
	now  func() time.Time
}

// Open opens (creating if needed) the catalog file at path.
func Open(path string) (*Catalog, error) {
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: LockTimeout})
	if err != nil {
		return nil, fmt.Errorf("catalog: open %s: %w", path, err)
	}
	c := &Catalog{db: db, path: path, now: time.Now}
	err = db.Update(func(tx *bolt.Tx) error {
		for _, b := range [][]byte{bucketTenants, bucketMigrations, bucketMeta, bucketKeyspaces, bucketReshards, bucketPlans} {
			if _, err := tx.CreateBucketIfNotExists(b); err != nil {
				return err
			}
		}
		meta := tx.Bucket(bucketMeta)
		if v := meta.Get(keySchema); v != nil {
			if n := binary.BigEndian.Uint64(v); n > schemaVersion {
				return fmt.Errorf("schema version %d is newer than this sluice's %d", n, schemaVersion)
			}
			return nil
		}
		return meta.Put(keySchema, itob(schemaVersion))
	})
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("catalog: open %s: %w", path, err)
	}
	return c, nil
}

// Close closes the file.
func (c *Catalog) Close() error { return c.db.Close() }

// Path returns the file's path.
func (c *Catalog) Path() string { return c.path }

// Tx is a catalog transaction; valid only inside the View or Update callback.
type Tx struct {
	tx  *bolt.Tx
	now time.Time
}

// View runs fn in a read-only transaction.
func (c *Catalog) View(fn func(*Tx) error) error {
	return c.db.View(func(tx *bolt.Tx) error { return fn(&Tx{tx: tx, now: c.now()}) })
}

// Update runs fn in a read-write transaction, committed if fn returns nil.
func (c *Catalog) Update(fn func(*Tx) error) error {
	return c.db.Update(func(tx *bolt.Tx) error { return fn(&Tx{tx: tx, now: c.now()}) })
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
	return t.tx.Bucket(bucketTenants).Put(itob(uint64(tn.ID)), v)
}

// CreateTenant inserts tn unless a tenant with its ID exists in a state other
// than Deleted (a deleted tenant's ID may be reused), in which case ErrExists.
func (t *Tx) CreateTenant(tn Tenant) error {
	old, err := t.Tenant(tn.ID)
	if err == nil && old.State != Deleted {
		return fmt.Errorf("catalog: create tenant %d: %w (state %s)", tn.ID, ErrExists, old.State)
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
	return t.tx.Bucket(bucketTenants).Delete(itob(uint64(id)))
}

// MaxTenantID returns the largest tenant ID ever recorded (0 when none).
func (t *Tx) MaxTenantID() int64 {
	k, _ := t.tx.Bucket(bucketTenants).Cursor().Last()
	if k == nil {
		return 0
	}
	return int64(binary.BigEndian.Uint64(k))
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
