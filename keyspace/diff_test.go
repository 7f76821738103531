package keyspace

import (
	"errors"
	"strings"
	"testing"
)

func TestDiff(t *testing.T) {
	for _, tc := range []struct {
		name     string
		from, to PlanSpec
		want     string
	}{
		{"squall's example: one warehouse moves",
			PlanSpec{"warehouse": {"p1": "[1,4)", "p2": "[4,7)"}},
			PlanSpec{"warehouse": {"p1": "[1,3)", "p2": "[3,7)"}},
			"warehouse [3,4) p1→p2 (warehouse, district)"},
		{"unchanged", PlanSpec{"warehouse": {"p1": "[1,4)", "p2": "[4,7)"}}, PlanSpec{"warehouse": {"p1": "[1,4)", "p2": "[4,7)"}}, ""},
		{"swap, unbounded ends",
			PlanSpec{"warehouse": {"p1": "[,100)", "p2": "[100,)"}},
			PlanSpec{"warehouse": {"p2": "[,100)", "p1": "[100,)"}},
			"warehouse [,100) p1→p2 (warehouse, district); warehouse [100,) p2→p1 (warehouse, district)"},
		{"split ranges merged per source and destination",
			PlanSpec{"warehouse": {"p1": "[1,3),[5,7)", "p2": "[3,5)"}},
			PlanSpec{"warehouse": {"p2": "[1,2)", "p1": "[2,4),[6,7)", "p3": "[4,6)"}},
			"warehouse [1,2) p1→p2 (warehouse, district); warehouse [3,4) p2→p1 (warehouse, district); warehouse [4,5) p2→p3 (warehouse, district); warehouse [5,6) p1→p3 (warehouse, district)"},
		{"keys new to the plan hold no rows",
			PlanSpec{"warehouse": {"p1": "[1,4)", "p2": "[4,7)"}},
			PlanSpec{"warehouse": {"p1": "[1,4)", "p2": "[4,7)", "p3": "[7,10)"}},
			""},
	} {
		from := tpcc3(tc.from)
		if err := from.Validate(); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		to, err := from.WithPlan(tc.to)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		moves, err := Diff(from, to)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		var got []string
		for _, m := range moves {
			got = append(got, m.String())
		}
		if strings.Join(got, "; ") != tc.want {
			t.Errorf("%s:\n got %s\nwant %s", tc.name, strings.Join(got, "; "), tc.want)
		}
	}
}

func TestDiffRefusesOrphans(t *testing.T) {
	from := tpcc3(PlanSpec{"warehouse": {"p1": "[1,4)", "p2": "[4,7)"}})
	if err := from.Validate(); err != nil {
		t.Fatal(err)
	}
	to, err := from.WithPlan(PlanSpec{"warehouse": {"p1": "[1,4)", "p2": "[4,6)"}})
	if err != nil {
		t.Fatal(err)
	}
	_, err = Diff(from, to)
	if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "keys [6,7) of partition p2 would have no partition") {
		t.Errorf("shrunk plan: %v", err)
	}
}

// tpcc3 is tpcc's keyspace with a third partition.
func tpcc3(plan PlanSpec) *Keyspace {
	ks := tpcc(plan)
	ks.Partitions = append(ks.Partitions, Partition{Name: "p3", Tenant: "tenant-3"})
	return ks
}
