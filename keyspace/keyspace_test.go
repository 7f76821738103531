package keyspace

import (
	"errors"
	"strings"
	"testing"
)

func tpcc(plan PlanSpec) *Keyspace {
	return &Keyspace{
		Name: "tpcc",
		Partitions: []Partition{
			{Name: "p1", Tenant: "tenant-1"},
			{Name: "p2", Tenant: "tenant-2", Agent: "b"},
		},
		Tables: []Table{
			{Name: "warehouse", Kind: Sharded, Column: "w_id", Type: Int},
			{Name: "district", Kind: CoPartitioned, Column: "d_w_id", Root: "warehouse"},
			{Name: "item", Kind: Reference},
		},
		Plan: plan,
	}
}

func TestOwner(t *testing.T) {
	ks := tpcc(PlanSpec{"warehouse": {"p1": "[1,4),[10,)", "p2": "[4,10)"}})
	if err := ks.Validate(); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		table string
		key   int64
		want  string
	}{
		{"warehouse", 1, "p1"}, {"warehouse", 3, "p1"}, {"district", 4, "p2"},
		{"district", 9, "p2"}, {"warehouse", 10, "p1"}, {"warehouse", 1 << 40, "p1"},
	} {
		got, err := ks.Owner(tc.table, IntKey(tc.key))
		if err != nil || got != tc.want {
			t.Errorf("Owner(%s, %d) = %q, %v; want %s", tc.table, tc.key, got, err, tc.want)
		}
	}
	if _, err := ks.Owner("warehouse", IntKey(0)); !errors.Is(err, ErrNoOwner) {
		t.Errorf("key 0: %v, want ErrNoOwner", err)
	}
	if _, err := ks.Owner("warehouse", TextKey("x")); !errors.Is(err, ErrKeyType) {
		t.Errorf("text key: %v, want ErrKeyType", err)
	}
	got, _ := ks.Owners("district", Bound{Key: IntKey(2)}, Bound{Key: IntKey(11)})
	if strings.Join(got, ",") != "p1,p2" {
		t.Errorf("Owners [2,11) = %v, want p1,p2", got)
	}
	got, _ = ks.Owners("district", Bound{Key: IntKey(4)}, Bound{Key: IntKey(6)})
	if strings.Join(got, ",") != "p2" {
		t.Errorf("Owners [4,6) = %v, want p2", got)
	}
}

func TestTextKeys(t *testing.T) {
	ks := &Keyspace{Name: "kv", Partitions: []Partition{{Name: "a", Tenant: "t1"}, {Name: "b", Tenant: "t2"}},
		Tables: []Table{{Name: "usertable", Kind: Sharded, Column: "ycsb_key", Type: Text}},
		Plan:   PlanSpec{"usertable": {"a": "[,'user5')", "b": "['user5',)"}}}
	if err := ks.Validate(); err != nil {
		t.Fatal(err)
	}
	for k, want := range map[string]string{"user1": "a", "user5": "b", "user9": "b", "": "a"} {
		if got, err := ks.Owner("usertable", TextKey(k)); err != nil || got != want {
			t.Errorf("Owner(%q) = %q, %v; want %s", k, got, err, want)
		}
	}
}

func TestPlanRefused(t *testing.T) {
	for _, tc := range []struct {
		name string
		plan PlanSpec
		want string
	}{
		{"gap", PlanSpec{"warehouse": {"p1": "[1,4)", "p2": "[5,7)"}}, "gap: keys [4,5) between [1,4) (p1) and [5,7) (p2) have no partition"},
		{"overlap", PlanSpec{"warehouse": {"p1": "[1,5)", "p2": "[4,7)"}}, "overlap: [1,5) (p1) and [4,7) (p2)"},
		{"unbounded overlap", PlanSpec{"warehouse": {"p1": "[1,)", "p2": "[4,7)"}}, "overlap"},
		{"unknown partition", PlanSpec{"warehouse": {"p1": "[1,4)", "p9": "[4,7)"}}, "unknown partition p9"},
		{"key type", PlanSpec{"warehouse": {"p1": "[1,4)", "p2": "['x',7)"}}, "is text; the key is an integer"},
		{"not a number", PlanSpec{"warehouse": {"p1": "[1,4)", "p2": "[4,x)"}}, `"x" is not an integer key`},
		{"empty range", PlanSpec{"warehouse": {"p1": "[4,4)"}}, "empty"},
		{"co-partitioned in plan", PlanSpec{"warehouse": {"p1": "[1,4)"}, "district": {"p1": "[1,4)"}}, "places root (sharded) tables only"},
		{"no root", PlanSpec{}, "sharded table warehouse has no ranges"},
		{"syntax", PlanSpec{"warehouse": {"p1": "1,4"}}, "want [lo,hi)"},
	} {
		err := tpcc(tc.plan).Validate()
		if err == nil || !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want ErrInvalid containing %q", tc.name, err, tc.want)
		}
		if err != nil && strings.Contains(err.Error(), "\n") {
			t.Errorf("%s: error spans lines: %q", tc.name, err)
		}
	}
}

func TestTablesRefused(t *testing.T) {
	base := func() *Keyspace { return tpcc(PlanSpec{"warehouse": {"p1": "[1,4)", "p2": "[4,7)"}}) }
	for _, tc := range []struct {
		name string
		mod  func(*Keyspace)
		want string
	}{
		{"root missing", func(ks *Keyspace) { ks.Tables[1].Root = "nope" }, "root table nope is not in keyspace"},
		{"root not sharded", func(ks *Keyspace) { ks.Tables[1].Root = "item" }, "is reference, not sharded"},
		{"dup partition", func(ks *Keyspace) { ks.Partitions[1].Name = "p1" }, "partition p1 named twice"},
		{"same db", func(ks *Keyspace) { ks.Partitions[1] = Partition{Name: "p2", Tenant: "tenant-1"} }, "are the same database"},
		{"bad kind", func(ks *Keyspace) { ks.Tables[2].Kind = "hash" }, `kind "hash"`},
		{"bad name", func(ks *Keyspace) { ks.Name = "Bad Name" }, "lower-case identifier"},
	} {
		ks := base()
		tc.mod(ks)
		if err := ks.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
	}
}

func TestDecodeAndWithPlan(t *testing.T) {
	ks, err := Decode([]byte(`{"name":"kv","partitions":[{"name":"a","tenant":"t1"},{"name":"b","tenant":"t2"}],
		"tables":[{"name":"usertable","kind":"sharded","column":"k","type":"int"}],
		"plan":{"usertable":{"a":"[0,100)","b":"[100,200)"}}}`))
	if err != nil {
		t.Fatal(err)
	}
	if ks.Epoch != 1 {
		t.Errorf("epoch %d, want 1", ks.Epoch)
	}
	next, err := ks.WithPlan(PlanSpec{"usertable": {"a": "[0,50)", "b": "[50,200)"}})
	if err != nil || next.Epoch != 2 {
		t.Fatalf("WithPlan: %v epoch %v", err, next)
	}
	if o, _ := next.Owner("usertable", IntKey(60)); o != "b" {
		t.Errorf("new plan: 60 on %s", o)
	}
	if o, _ := ks.Owner("usertable", IntKey(60)); o != "a" {
		t.Errorf("old plan changed: 60 on %s", o)
	}
	if _, err := Decode([]byte(`{"name":"kv","bogus":1}`)); err == nil || !errors.Is(err, ErrInvalid) {
		t.Errorf("unknown field: %v", err)
	}
}
