package catalog

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/sluicedb/sluice/internal/etcdtest"
)

// TestConcurrentWritersSerialize: writers on several handles read and
// write the same records at once (a key named by a range read's count; new
// tenant IDs from MaxTenantID); every transaction's effect survives, as if
// they ran one after another.
func TestConcurrentWritersSerialize(t *testing.T) {
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			handles := 3
			if b.name == "bbolt" {
				handles = 1 // one process per file
			}
			var cs []*Catalog
			for range handles {
				c := b.open(t)
				defer c.Close()
				cs = append(cs, c)
			}
			const workers, each = 6, 10
			var wg sync.WaitGroup
			for w := range workers {
				c := cs[w%len(cs)]
				wg.Add(1)
				go func() {
					defer wg.Done()
					for range each {
						err := c.Update(func(tx *Tx) error {
							// A key per transaction, named by how many the
							// range read found: two that read the same
							// count would write the same key.
							b := tx.tx.Bucket(bucketReshards)
							var n uint64
							if err := b.ForEach(func(_, _ []byte) error { n++; return nil }); err != nil {
								return err
							}
							return b.Put(itob(n+1), []byte("{}"))
						})
						if err == nil {
							err = c.Update(func(tx *Tx) error { return tx.CreateTenant(Tenant{ID: tx.MaxTenantID() + 1, State: Creating}) })
						}
						if err != nil {
							t.Error(err)
							return
						}
					}
				}()
			}
			wg.Wait()
			var n uint64
			var ts []Tenant
			err := cs[0].View(func(tx *Tx) (err error) {
				tx.tx.Bucket(bucketReshards).ForEach(func(_, _ []byte) error { n++; return nil })
				ts, err = tx.Tenants()
				return err
			})
			if err != nil {
				t.Fatal(err)
			}
			if n != workers*each || len(ts) != workers*each || ts[len(ts)-1].ID != workers*each {
				t.Fatalf("%d keys, %d tenants (last id %d); want %d of each", n, len(ts), ts[len(ts)-1].ID, workers*each)
			}
		})
	}
}

// TestSharedTenantIDs: agents sharing an etcd catalog keep their own
// tenants and migrations, draw tenant IDs from one sequence, and a
// tenant's placement follows it from agent to agent.
func TestSharedTenantIDs(t *testing.T) {
	a1 := openEtcd(t, etcdShared.Endpoints, "/shared", "a1")
	defer a1.Close()
	a2 := openEtcd(t, etcdShared.Endpoints, "/shared", "a2")
	defer a2.Close()
	create := func(c *Catalog, id int64) (int64, error) {
		err := c.Update(func(tx *Tx) error {
			if id == 0 {
				id = tx.MaxTenantID() + 1
			}
			return tx.CreateTenant(Tenant{ID: id, State: Creating})
		})
		return id, err
	}
	if id, err := create(a1, 0); err != nil || id != 1 {
		t.Fatalf("a1's first tenant: %d, %v", id, err)
	}
	if id, err := create(a2, 0); err != nil || id != 2 {
		t.Fatalf("a2's first tenant: %d, %v; want id 2", id, err)
	}
	if _, err := create(a2, 1); !errors.Is(err, ErrExists) {
		t.Fatalf("a2 creating a1's tenant 1: err = %v, want ErrExists", err)
	}
	if ts, _ := a2.Tenants(); len(ts) != 1 || ts[0].ID != 2 {
		t.Fatalf("a2's tenants = %+v, want only its own", ts)
	}
	// Tenant 1 moves from a1 to a2.
	for _, step := range []struct {
		c  *Catalog
		to State
	}{{a1, Running}, {a1, MigratingOut}, {a2, MigratingIn}, {a2, Running}, {a1, Moved}} {
		if step.to == MigratingIn {
			if err := step.c.PutTenant(Tenant{ID: 1, State: MigratingIn}); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if _, err := step.c.SetTenantState(1, step.to); err != nil {
			t.Fatal(err)
		}
	}
	ps, err := a1.Placements()
	if err != nil {
		t.Fatal(err)
	}
	if len(ps) != 2 || ps[0].Tenant != 1 || ps[0].Agent != "a2" || ps[0].State != Running || ps[1].Agent != "a2" {
		t.Fatalf("placements = %+v; want tenants 1 and 2 on a2, running and creating", ps)
	}
	if tn, _ := a1.Tenant(1); tn.State != Moved {
		t.Fatalf("a1's record of tenant 1 = %s, want moved", tn.State)
	}
}

// TestThreeMembers: a catalog on a three-member cluster keeps working, locks
// included, with its leader stopped (the next writes may meet the election).
func TestThreeMembers(t *testing.T) {
	cl := etcdtest.Start(t, 3)
	c := openEtcd(t, cl.Endpoints, "/three", "a1")
	defer c.Close()
	ctx := context.Background()
	if err := c.PutTenant(Tenant{ID: 1, State: Running}); err != nil {
		t.Fatal(err)
	}
	leader := cl.Leader()
	if leader < 0 {
		t.Fatal("no leader")
	}
	l, err := c.Lock(ctx, "tenant/1")
	if err != nil {
		t.Fatal(err)
	}
	cl.Stop(leader)
	if err := l.Update(func(tx *Tx) error { return tx.PutMigration(Migration{ID: "m1", TenantID: 1, Role: Source}) }); err != nil {
		t.Fatalf("leader stopped: guarded write: %v", err)
	}
	if ms, err := c.Migrations(); err != nil || len(ms) != 1 {
		t.Fatalf("leader stopped: migrations %d, %v", len(ms), err)
	}
	if tn, err := c.Tenant(1); err != nil || tn.State != Running {
		t.Fatalf("leader stopped: tenant %+v, %v", tn, err)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	l2, err := c.Lock(ctx, "tenant/2")
	if err != nil {
		t.Fatalf("leader stopped: lock: %v", err)
	}
	l2.Unlock(ctx)
	// Reopened on the remaining members, the catalog has its records.
	var rest []string
	for i, e := range cl.Endpoints {
		if i != leader {
			rest = append(rest, e)
		}
	}
	c2 := openEtcd(t, rest, "/three", "a1")
	defer c2.Close()
	if ms, err := c2.Migrations(); err != nil || len(ms) != 1 {
		t.Fatalf("reopened: %d migrations, %v", len(ms), err)
	}
}

func TestParseSpec(t *testing.T) {
	for _, tc := range []struct {
		in, want, err string
	}{
		{in: "", want: ""},
		{in: "etcd://h1:2379", want: "etcd://h1:2379/sluice"},
		{in: "etcd://h1:2379,10.0.0.2:2379/fleet/a/", want: "etcd://h1:2379,10.0.0.2:2379/fleet/a"},
		{in: "etcd://[::1]:2379/x", want: "etcd://[::1]:2379/x"},
		{in: "bolt:///x", err: `catalog "bolt:///x": want etcd://`},
		{in: "etcd://h1/x", err: `endpoint "h1": want host:port`},
		{in: "etcd://h1:0/x", err: `endpoint "h1:0": bad port`},
		{in: "etcd://h1:2379,/x", err: `endpoint "": want host:port`},
		{in: "etcd://h1:2379/a//b", err: `prefix "/a//b"`},
	} {
		sp, err := ParseSpec(tc.in)
		switch {
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("ParseSpec(%q) err = %v, want %q", tc.in, err, tc.err)
		case tc.err == "" && (err != nil || sp.String() != tc.want):
			t.Errorf("ParseSpec(%q) = %q, %v; want %q", tc.in, sp, err, tc.want)
		}
	}
}
