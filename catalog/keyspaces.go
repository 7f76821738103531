package catalog

import (
	"encoding/json"
	"fmt"

	"github.com/sluicedb/sluice/keyspace"
)

// The keyspaces bucket maps a keyspace's name to its keyspace.Keyspace as
// JSON. A stored keyspace was valid when written; reads validate it again
// (keyspace.Keyspace.Validate builds its lookup structures), so a record
// that no longer validates is an error, never a half-built value.

// Keyspace returns keyspace name, validated, or ErrNotFound.
func (t *Tx) Keyspace(name string) (*keyspace.Keyspace, error) {
	v := t.tx.Bucket(bucketKeyspaces).Get([]byte(name))
	if v == nil {
		return nil, fmt.Errorf("catalog: keyspace %q: %w", name, ErrNotFound)
	}
	return decodeKeyspace(name, v)
}

// Keyspaces returns every keyspace, validated, in name order.
func (t *Tx) Keyspaces() ([]*keyspace.Keyspace, error) {
	var out []*keyspace.Keyspace
	err := t.tx.Bucket(bucketKeyspaces).ForEach(func(k, v []byte) error {
		ks, err := decodeKeyspace(string(k), v)
		if err != nil {
			return err
		}
		out = append(out, ks)
		return nil
	})
	return out, err
}

// CreateKeyspace inserts ks unless a keyspace of its name exists (ErrExists).
// REQUIRES: ks is validated (keyspace.New, Decode or Validate).
func (t *Tx) CreateKeyspace(ks *keyspace.Keyspace) error {
	if t.tx.Bucket(bucketKeyspaces).Get([]byte(ks.Name)) != nil {
		return fmt.Errorf("catalog: create keyspace %q: %w", ks.Name, ErrExists)
	}
	return t.PutKeyspace(ks)
}

// PutKeyspace writes ks (insert or replace), validating it first.
func (t *Tx) PutKeyspace(ks *keyspace.Keyspace) error {
	if err := ks.Validate(); err != nil {
		return fmt.Errorf("catalog: put keyspace %q: %w", ks.Name, err)
	}
	v, err := json.Marshal(ks)
	if err != nil {
		return fmt.Errorf("catalog: put keyspace %q: %w", ks.Name, err)
	}
	return t.tx.Bucket(bucketKeyspaces).Put([]byte(ks.Name), v)
}

// DeleteKeyspace removes keyspace name's record; ErrNotFound if there is none.
func (t *Tx) DeleteKeyspace(name string) error {
	b := t.tx.Bucket(bucketKeyspaces)
	if b.Get([]byte(name)) == nil {
		return fmt.Errorf("catalog: keyspace %q: %w", name, ErrNotFound)
	}
	return b.Delete([]byte(name))
}

func decodeKeyspace(name string, v []byte) (*keyspace.Keyspace, error) {
	var ks keyspace.Keyspace
	if err := json.Unmarshal(v, &ks); err != nil {
		return nil, fmt.Errorf("catalog: keyspace %q: %w", name, err)
	}
	if err := ks.Validate(); err != nil {
		return nil, fmt.Errorf("catalog: keyspace %q: %w", name, err)
	}
	return &ks, nil
}

// Keyspace is View + Tx.Keyspace.
func (c *Catalog) Keyspace(name string) (ks *keyspace.Keyspace, err error) {
	err = c.View(func(tx *Tx) error { ks, err = tx.Keyspace(name); return err })
	return ks, err
}

// Keyspaces is View + Tx.Keyspaces.
func (c *Catalog) Keyspaces() (kss []*keyspace.Keyspace, err error) {
	err = c.View(func(tx *Tx) error { kss, err = tx.Keyspaces(); return err })
	return kss, err
}
