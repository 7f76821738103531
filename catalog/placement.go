package catalog

import (
	"encoding/json"
	"fmt"
	"strconv"
	"time"
)

// The placement bucket says, for every tenant ID, which agent last owned
// the tenant (created it, served it, or was migrating it out) and in what
// state. It is the one bucket agents sharing an etcd catalog share
// (sharedBuckets): it makes tenant IDs unique across them (MaxTenantID,
// CreateTenant), and it is where the writable copy of a tenant is, for
// whoever follows the catalog. PutTenant maintains it: an agent taking a
// tenant into an owning state (creating, running, stopped, migrating-out)
// becomes its owner; the owner's later states (moved, deleted,
// migrating-in) are recorded under its name until another agent takes it.
// Keys are the tenant ID in 20 decimal digits (ID order, readable in
// etcdctl).

// Placement is where tenant Tenant lives.
type Placement struct {
	Tenant  int64     `json:"tenant"`
	Agent   string    `json:"agent"` // "" in a bbolt catalog opened with Open: this file's agent
	State   State     `json:"state"` // the owner's state of the tenant
	Updated time.Time `json:"updated"`
}

// owning reports whether an agent whose tenant is in state s owns it.
func (s State) owning() bool {
	return s == Creating || s == Running || s == Stopped || s == MigratingOut
}

func placementKey(id int64) []byte { return fmt.Appendf(nil, "%020d", id) }

// Placement returns tenant id's placement, or ErrNotFound.
func (t *Tx) Placement(id int64) (Placement, error) {
	var p Placement
	v := t.tx.Bucket(bucketPlacement).Get(placementKey(id))
	if v == nil {
		return p, fmt.Errorf("catalog: placement of tenant %d: %w", id, ErrNotFound)
	}
	if err := json.Unmarshal(v, &p); err != nil {
		return p, fmt.Errorf("catalog: placement of tenant %d: %w", id, err)
	}
	return p, nil
}

// Placements returns every tenant's placement in ID order.
func (t *Tx) Placements() ([]Placement, error) {
	var out []Placement
	err := t.tx.Bucket(bucketPlacement).ForEach(func(k, v []byte) error {
		var p Placement
		if err := json.Unmarshal(v, &p); err != nil {
			return fmt.Errorf("catalog: placement %s: %w", k, err)
		}
		out = append(out, p)
		return nil
	})
	return out, err
}

// maxPlacedID is the largest tenant ID with a placement (0 when none).
func (t *Tx) maxPlacedID() int64 {
	var m int64
	t.tx.Bucket(bucketPlacement).ForEach(func(k, _ []byte) error {
		m, _ = strconv.ParseInt(string(k), 10, 64)
		return nil
	})
	return m
}

// place records tn's state in the placement bucket (see above).
func (t *Tx) place(tn Tenant) error {
	cur, err := t.Placement(tn.ID)
	found := err == nil
	if !tn.State.owning() && (!found || cur.Agent != t.agent) {
		return nil
	}
	if found && cur.Agent == t.agent && cur.State == tn.State {
		return nil
	}
	v, err := json.Marshal(Placement{Tenant: tn.ID, Agent: t.agent, State: tn.State, Updated: t.now})
	if err != nil {
		return err
	}
	return t.tx.Bucket(bucketPlacement).Put(placementKey(tn.ID), v)
}

// unplace forgets tenant id's placement if this agent owns it.
func (t *Tx) unplace(id int64) error {
	if cur, err := t.Placement(id); err == nil && cur.Agent == t.agent {
		return t.tx.Bucket(bucketPlacement).Delete(placementKey(id))
	}
	return nil
}

// Placements is View + Tx.Placements.
func (c *Catalog) Placements() (ps []Placement, err error) {
	err = c.View(func(tx *Tx) error { ps, err = tx.Placements(); return err })
	return ps, err
}
