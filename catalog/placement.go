package catalog

import (
	"encoding/json"
	"fmt"
	"net"
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
//
// A placement also says where clients reach the tenant — Addr and Database,
// with Epoch counting the changes of Addr — for proxies that watch the
// catalog (WatchPlacements) instead of being told by agents. Two writers
// set it: an agent taking ownership writes its own address (SetServing),
// and a migration's driver writes the target's address at the handover's
// switch (Tx.SwitchPlacement, through its Lock: a driver that lost its lock
// cannot move a route). An owner's later state changes keep the address
// and epoch, so the source's own records after the switch do not move the
// route back.

// Placement is where tenant Tenant lives.
type Placement struct {
	Tenant int64  `json:"tenant"`
	Name   string `json:"name,omitempty"` // the tenant's name (proxies route by name)
	Agent  string `json:"agent"`          // "" in a bbolt catalog opened with Open: this file's agent
	State  State  `json:"state"`          // the owner's state of the tenant
	// Addr is host:port of the tenant's writable copy, Database the
	// database clients use there; "" when the owner did not SetServing.
	Addr     string `json:"addr,omitempty"`
	Database string `json:"database,omitempty"`
	// Epoch counts the changes of Addr, from 1: a watcher applies a
	// placement only when its epoch is newer than the one it routes by.
	Epoch   int64     `json:"epoch,omitempty"`
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
	next := cur
	next.Tenant, next.Name, next.State = tn.ID, tn.Name, tn.State
	if !found || cur.Agent != t.agent || (cur.Addr == "" && tn.State.owning()) {
		// A new owner: the tenant is reached here now. (So is it when
		// its owner's record had no address: written before SetServing.)
		next.Agent = t.agent
		if addr := t.addrOf(tn); addr != next.Addr || (addr != "" && next.Epoch == 0) {
			next.Addr, next.Database = addr, t.serve.database
			next.Epoch++
		}
	}
	if found && next.Agent == cur.Agent && next.State == cur.State && next.Name == cur.Name && next.Addr == cur.Addr {
		return nil
	}
	return t.putPlacement(next)
}

// addrOf is host:port where this agent serves tn ("" without SetServing).
func (t *Tx) addrOf(tn Tenant) string {
	if t.serve.host == "" || tn.Port == 0 {
		return ""
	}
	return net.JoinHostPort(t.serve.host, strconv.Itoa(tn.Port))
}

func (t *Tx) putPlacement(p Placement) error {
	p.Updated = t.now
	v, err := json.Marshal(p)
	if err != nil {
		return err
	}
	return t.tx.Bucket(bucketPlacement).Put(placementKey(p.Tenant), v)
}

// SwitchPlacement records that tenant id's writable copy is now reached at
// addr (host:port; database unchanged), a new epoch: the handover's switch
// as proxies watching the catalog see it. A migration's driver calls it
// through its Lock.Update, so that a stale driver cannot move the route.
// Switching to where the placement already is changes nothing; epoch is
// the placement's epoch after the call.
func (t *Tx) SwitchPlacement(id int64, addr string) (epoch int64, err error) {
	cur, err := t.Placement(id)
	if err != nil {
		return 0, err
	}
	if cur.Addr == addr {
		return cur.Epoch, nil
	}
	cur.Addr = addr
	cur.Epoch++
	return cur.Epoch, t.putPlacement(cur)
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
