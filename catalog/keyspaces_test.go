package catalog

import (
	"errors"
	"testing"

	"github.com/sluicedb/sluice/keyspace"
)

func testKeyspace(t *testing.T, name string) *keyspace.Keyspace {
	t.Helper()
	ks := &keyspace.Keyspace{
		Name:       name,
		Partitions: []keyspace.Partition{{Name: "p1", Tenant: "tenant-1"}, {Name: "p2", Tenant: "tenant-2", Agent: "db2"}},
		Tables: []keyspace.Table{
			{Name: "warehouse", Kind: keyspace.Sharded, Column: "w_id", Type: keyspace.Int},
			{Name: "district", Kind: keyspace.CoPartitioned, Column: "d_w_id", Root: "warehouse"},
			{Name: "item", Kind: keyspace.Reference},
		},
		Schema: "CREATE TABLE item (i_id int PRIMARY KEY);",
		Plan:   keyspace.PlanSpec{"warehouse": {"p1": "[1,4)", "p2": "[4,7)"}},
	}
	if err := ks.Validate(); err != nil {
		t.Fatal(err)
	}
	return ks
}

func TestKeyspacesSurviveReopen(t *testing.T) { eachBackend(t, testKeyspacesSurviveReopen) }

func testKeyspacesSurviveReopen(t *testing.T, open func() *Catalog) {
	c := open()
	for _, name := range []string{"tpcc", "kv"} {
		ks := testKeyspace(t, name)
		if err := c.Update(func(tx *Tx) error { return tx.CreateKeyspace(ks) }); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Update(func(tx *Tx) error { return tx.CreateKeyspace(testKeyspace(t, "tpcc")) }); !errors.Is(err, ErrExists) {
		t.Fatalf("second create of tpcc: err = %v, want ErrExists", err)
	}
	next, err := testKeyspace(t, "tpcc").WithPlan(keyspace.PlanSpec{"warehouse": {"p1": "[1,5)", "p2": "[5,7)"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Update(func(tx *Tx) error { return tx.PutKeyspace(next) }); err != nil {
		t.Fatal(err)
	}
	c.Close()

	c = open()
	defer c.Close()
	kss, err := c.Keyspaces()
	if err != nil {
		t.Fatal(err)
	}
	if len(kss) != 2 || kss[0].Name != "kv" || kss[1].Name != "tpcc" {
		t.Fatalf("keyspaces after reopen = %v, want kv, tpcc in name order", kss)
	}
	ks, err := c.Keyspace("tpcc")
	if err != nil {
		t.Fatal(err)
	}
	if ks.Epoch != 2 || ks.Plan["warehouse"]["p1"] != "[1,5)" || ks.Partitions[1].Agent != "db2" || ks.Schema == "" {
		t.Fatalf("tpcc after reopen = %+v", ks)
	}
	if owner, err := ks.Owner("district", keyspace.IntKey(4)); err != nil || owner != "p1" {
		t.Fatalf("a read keyspace is validated: Owner(district, 4) = %q, %v; want p1", owner, err)
	}
}

func TestDeleteKeyspace(t *testing.T) { eachBackend(t, testDeleteKeyspace) }

func testDeleteKeyspace(t *testing.T, open func() *Catalog) {
	c := open()
	defer c.Close()
	if err := c.Update(func(tx *Tx) error { return tx.CreateKeyspace(testKeyspace(t, "tpcc")) }); err != nil {
		t.Fatal(err)
	}
	del := func(name string) error { return c.Update(func(tx *Tx) error { return tx.DeleteKeyspace(name) }) }
	if err := del("tpcc"); err != nil {
		t.Fatal(err)
	}
	if err := del("tpcc"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("second delete: err = %v, want ErrNotFound", err)
	}
	if _, err := c.Keyspace("tpcc"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Keyspace after delete: err = %v, want ErrNotFound", err)
	}
	if err := c.Update(func(tx *Tx) error { return tx.CreateKeyspace(testKeyspace(t, "tpcc")) }); err != nil {
		t.Fatalf("create again after delete: %v", err)
	}
	bad := &keyspace.Keyspace{Name: "Bad Name"}
	if err := c.Update(func(tx *Tx) error { return tx.PutKeyspace(bad) }); !errors.Is(err, keyspace.ErrInvalid) {
		t.Fatalf("put of an invalid keyspace: err = %v, want keyspace.ErrInvalid", err)
	}
}
