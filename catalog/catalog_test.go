package catalog

import (
	"encoding/json"
	"errors"
	"path/filepath"
	"testing"
)

func TestTenantsSurviveReopen(t *testing.T) { eachBackend(t, testTenantsSurviveReopen) }

func testTenantsSurviveReopen(t *testing.T, open func() *Catalog) {
	c := open()
	for _, tn := range []Tenant{
		{ID: 2, Name: "beta", Port: 15002, Dir: "/r/2", State: Creating, Settings: map[string]string{"shared_buffers": "32MB"}},
		{ID: 1, Name: "acme", Port: 15001, Dir: "/r/1", State: Creating},
	} {
		if err := c.Update(func(tx *Tx) error { return tx.CreateTenant(tn) }); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.SetTenantState(1, Running); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}

	c = open()
	defer c.Close()
	ts, err := c.Tenants()
	if err != nil {
		t.Fatal(err)
	}
	if len(ts) != 2 || ts[0].ID != 1 || ts[1].ID != 2 {
		t.Fatalf("tenants after reopen = %+v, want ids 1,2 in order", ts)
	}
	if ts[0].State != Running || ts[0].Name != "acme" || ts[0].Port != 15001 {
		t.Fatalf("tenant 1 = %+v", ts[0])
	}
	if ts[1].Settings["shared_buffers"] != "32MB" {
		t.Fatalf("tenant 2 settings = %v", ts[1].Settings)
	}
	if !ts[0].Updated.After(ts[0].Created) {
		t.Fatalf("tenant 1 updated %v not after created %v", ts[0].Updated, ts[0].Created)
	}
	var max int64
	c.View(func(tx *Tx) error { max = tx.MaxTenantID(); return nil })
	if max != 2 {
		t.Fatalf("MaxTenantID = %d, want 2", max)
	}
}

func TestCreateTenantConflicts(t *testing.T) { eachBackend(t, testCreateTenantConflicts) }

func testCreateTenantConflicts(t *testing.T, open func() *Catalog) {
	c := open()
	defer c.Close()
	create := func(tn Tenant) error { return c.Update(func(tx *Tx) error { return tx.CreateTenant(tn) }) }
	if err := create(Tenant{ID: 7, State: Creating}); err != nil {
		t.Fatal(err)
	}
	if err := create(Tenant{ID: 7, State: Creating}); !errors.Is(err, ErrExists) {
		t.Fatalf("second create: err = %v, want ErrExists", err)
	}
	if _, err := c.SetTenantState(7, Deleted); err != nil {
		t.Fatal(err)
	}
	if err := create(Tenant{ID: 7, Name: "again", State: Creating}); err != nil {
		t.Fatalf("create over tombstone: %v", err)
	}
	if err := create(Tenant{ID: 0, State: Creating}); err == nil {
		t.Fatal("create id 0: want error")
	}
	if err := create(Tenant{ID: 8, State: "bogus"}); err == nil {
		t.Fatal("create with bogus state: want error")
	}
	if _, err := c.Tenant(99); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Tenant(99) err = %v, want ErrNotFound", err)
	}
}

func TestSetTenantStateChecksLifecycle(t *testing.T) {
	eachBackend(t, testSetTenantStateChecksLifecycle)
}

func testSetTenantStateChecksLifecycle(t *testing.T, open func() *Catalog) {
	c := open()
	defer c.Close()
	if err := c.PutTenant(Tenant{ID: 1, State: Running}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.SetTenantState(1, MigratingIn); !errors.Is(err, ErrBadTransition) {
		t.Fatalf("running -> migrating-in: err = %v, want ErrBadTransition", err)
	}
	tn, _ := c.Tenant(1)
	if tn.State != Running {
		t.Fatalf("state after refused change = %s, want running", tn.State)
	}
	if _, err := c.SetTenantState(1, MigratingOut); err != nil {
		t.Fatal(err)
	}
	if _, err := c.SetTenantState(1, Moved); err != nil {
		t.Fatal(err)
	}
}

func TestUpdateIsAtomic(t *testing.T) { eachBackend(t, testUpdateIsAtomic) }

func testUpdateIsAtomic(t *testing.T, open func() *Catalog) {
	c := open()
	defer c.Close()
	boom := errors.New("boom")
	err := c.Update(func(tx *Tx) error {
		if err := tx.PutTenant(Tenant{ID: 1, State: Creating}); err != nil {
			return err
		}
		if err := tx.PutMigration(Migration{ID: "m1", TenantID: 1, Role: Source}); err != nil {
			return err
		}
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("err = %v", err)
	}
	if _, err := c.Tenant(1); !errors.Is(err, ErrNotFound) {
		t.Fatalf("tenant written by a failed transaction: %v", err)
	}
	if _, err := c.Migration("m1"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("migration written by a failed transaction: %v", err)
	}
}

func TestMigrations(t *testing.T) { eachBackend(t, testMigrations) }

func testMigrations(t *testing.T, open func() *Catalog) {
	c := open()
	rec := json.RawMessage(`{"phase":"snapshot","bytes":123}`)
	for _, m := range []Migration{
		{ID: "b", TenantID: 1, Role: Source, Peer: "a2", Mode: "live", Rate: 1e6, Record: rec},
		{ID: "a", TenantID: 2, Role: Target, Peer: "a1"},
	} {
		if err := c.PutMigration(m); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.PutMigration(Migration{ID: "x", Role: "sideways"}); err == nil {
		t.Fatal("bad role accepted")
	}
	if err := c.PutMigration(Migration{Role: Source}); err == nil {
		t.Fatal("empty id accepted")
	}
	c.Close()
	c = open()
	defer c.Close()
	ms, err := c.Migrations()
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) != 2 || ms[0].ID != "b" || ms[1].ID != "a" {
		t.Fatalf("migrations = %+v, want b then a (creation order)", ms)
	}
	if string(ms[0].Record) != string(rec) || ms[0].Rate != 1e6 || ms[0].Peer != "a2" {
		t.Fatalf("migration b = %+v", ms[0])
	}
}

func TestOpenLockedFails(t *testing.T) {
	path := filepath.Join(t.TempDir(), FileName)
	c, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if c2, err := Open(path); err == nil {
		c2.Close()
		t.Fatal("second Open of a locked catalog succeeded")
	}
}

func TestTransitions(t *testing.T) {
	for _, tc := range []struct {
		from, to State
		ok       bool
	}{
		{"", Creating, true},
		{"", MigratingIn, true},
		{"", Running, false},
		{Creating, Running, true},
		{Running, Stopped, true},
		{Stopped, Running, true},
		{Stopped, MigratingOut, false},
		{Running, MigratingOut, true},
		{MigratingOut, Running, true},
		{MigratingOut, Moved, true},
		{MigratingOut, Deleted, false},
		{MigratingIn, Running, true},
		{MigratingIn, Deleted, true},
		{MigratingIn, MigratingOut, false},
		{Moved, Running, false},
		{Moved, MigratingIn, true},
		{Deleted, Creating, true},
		{Deleted, Running, false},
		{Running, Running, true},
		{"", "", false},
	} {
		if got := CanTransition(tc.from, tc.to); got != tc.ok {
			t.Errorf("CanTransition(%q, %q) = %v, want %v", tc.from, tc.to, got, tc.ok)
		}
	}
	if State("").Valid() || State("x").Valid() || !Moved.Valid() {
		t.Error("Valid wrong")
	}
	if !Running.Serving() || !MigratingOut.Serving() || Stopped.Serving() || MigratingIn.Serving() {
		t.Error("Serving wrong")
	}
}
